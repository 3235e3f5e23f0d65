"""What ``posenc eval`` costs on top of the model: exact-length prompts and bookkeeping, side by side, in one run.

Against the scripted loopback server of the tests (tests/harness/fake_server.py: it answers at once, so every
millisecond
measured is the client's and the HTTP round trips'), for each prompt length:

* ``bare``: only the completion requests, prompts built beforehand (the floor any harness pays);
* ``local``: ``Runner`` with a local token counter (``--tokenizer bytes``);
* ``server``: ``Runner`` counting with the server's tokenize endpoint (the default), which adds tokenize requests.

Each row reports milliseconds per cell, requests per cell and the ratio to ``bare``.

    python benchmarks/bench_eval.py            # lengths 1k, 8k, 64k; 20 cells each
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import _timing

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "harness"))

from fake_server import FakeServer, Script  # noqa: E402

from posenc_cli.evaluation import bytevocab  # noqa: E402
from posenc_cli.evaluation.client import Client  # noqa: E402
from posenc_cli.evaluation.plan import from_lengths  # noqa: E402
from posenc_cli.evaluation.probe import probe  # noqa: E402
from posenc_cli.evaluation.run import Runner  # noqa: E402
from posenc_cli.evaluation.templates import build_prompt, load_template  # noqa: E402
from posenc_cli.evaluation.tokens import server_counter  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lengths", default="1024,8192,65536")
    parser.add_argument("--cells", type=int, default=20, help="cells per length (default 20)")
    args = parser.parse_args()
    template = load_template("passkey")
    rows = []
    with FakeServer(Script(echo="ignore")) as server, tempfile.TemporaryDirectory() as tmp:
        for length in (int(x) for x in args.lengths.split(",")):
            plan = from_lengths([length], template, depths=tuple(i / (args.cells - 1) for i in range(args.cells)),
                                trials=1)
            client = Client(server.url)
            caps = probe(client)
            cells = plan.cells(with_loss=False)
            timings: dict[str, tuple[float, float]] = {}

            prompts = [build_prompt(template, length=length, depth=c.depth, seed=c.seed, count=bytevocab.count)
                       for c in cells]
            client.complete(caps.model, prompts[0].text, max_tokens=template.max_tokens)  # warm-up
            sent = client.requests
            start = time.perf_counter()
            for p in prompts:
                client.complete(caps.model, p.text, max_tokens=template.max_tokens)
            timings["bare"] = (time.perf_counter() - start, client.requests - sent)

            for name, count in (("local", bytevocab.count), ("server", server_counter(client, caps))):
                runner = Runner(client, caps, plan, Path(tmp) / f"{name}-{length}", count)
                todo, _ = runner.prepare()
                sent = client.requests
                start = time.perf_counter()
                runner.run(todo)
                timings[name] = (time.perf_counter() - start, client.requests - sent)
            floor = timings["bare"][0]
            for name, (seconds, requests) in timings.items():
                rows.append([str(length), name, f"{seconds / len(cells) * 1e3:.2f}", f"{requests / len(cells):.1f}",
                             f"{seconds / floor:.2f}x"])
    print(_timing.markdown_table(["prompt tokens", "path", "ms per cell", "requests per cell", "vs bare"], rows,
                                 align="rlrrr"))


if __name__ == "__main__":
    main()
