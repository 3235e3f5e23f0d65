"""Every command that reads a model ends cleanly on any file a user points it at: damaged or hand-edited configs.

The inputs are the shipped configs of ``tests/corpus`` (real files), mutated the way files get damaged or edited by
hand: a key deleted; a number set to NaN, Infinity, 1e308, -1, 0, a huge integer (10**30), a string, a list or null;
the text truncated; nesting 200,000 deep; re-encoded as UTF-16, UTF-32 or UTF-8 with a byte-order mark; a key given
twice; another kind of file (a tokenizer.json, ``{}``, a JSON list, bytes that are no text).

Each mutated file goes through every command that reads a model, in-process: ``inspect --json``,
``inspect --lint --json``, ``check --json``, ``scale yarn --target 256k --config F -o OUT``,
``convert F --to v5 -o OUT``, ``pick --ctx 128k --config F --json`` and ``audit F --trained-with F --json``.
Each run must:

* exit 0, 1, 2 or 3, within :data:`TIMEOUT` seconds, with no traceback on stderr;
* on exit 2 or 3, end stderr with one ``error:`` line (``check``'s exit 3 with its report on stdout excepted: an
  engine posenc has no model of, a result and not a failure to run);
* print ``--json`` output that a strict parser (no NaN, no Infinity) reads;
* write, through ``-o``, strict JSON that ``posenc inspect`` reads back with exit 0.

Counts: :func:`test_sweep` runs 3 corpus files x (10 values x each of :data:`KEYS` the file has: 8, 5 and 7 +
13 whole-file mutations) = 239 mutated files, 7 commands each: 1,673 runs (plus one ``inspect`` read-back per file
written);
:func:`test_property` 40 hypothesis examples x 7 commands = 280 runs. The write failures (``> /dev/full``,
``-o /dev/full``, a closed pipe) run as subprocesses in :func:`test_a_failed_write_is_one_line`, since an in-process
runner's stdout is not a real descriptor.
"""

from __future__ import annotations

import json
import math
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import Any

import pytest
from clihelpers import assert_usage_error, run, write_json
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import Result

CORPUS = Path(__file__).resolve().parents[1] / "corpus"
#: Three shapes of config: flat llama3 scaling; text_config with per-layer-type rope (Gemma 3); MLA with YaRN and
#: mscale (DeepSeek V3).
SWEPT = ("llama-3.1-8b-instruct.json", "gemma-3-27b-it.json", "deepseek-v3.json")
#: The keys every command reads, where the file has them (in its text config).
KEYS = ("max_position_embeddings", "rope_theta", "num_hidden_layers", "num_attention_heads", "hidden_size", "head_dim",
        "qk_rope_head_dim", "rope_local_base_freq", "sliding_window_pattern",
        "rope_scaling.factor", "rope_scaling.original_max_position_embeddings")
DELETE = object()
VALUES: tuple[Any, ...] = (DELETE, math.nan, math.inf, 1e308, -1, 0, 10**30, "x", [], None)
#: Seconds one command may take: the slowest clean run (check of a per-layer model) takes well under 1 s; the
#: issue's hanging pick ran past 30 s.
TIMEOUT = 20


class Hang(BaseException):
    """Raised by the alarm: a BaseException, so no ``except Exception`` in posenc swallows it."""


def _alarm(signum: int, frame: FrameType | None) -> None:
    raise Hang()


def strict_json(text: str) -> Any:
    """``json.loads`` that refuses NaN and Infinity, as jq and browsers do."""
    def refuse(name: str) -> Any:
        raise ValueError(f"{name} is not JSON")
    return json.loads(text, parse_constant=refuse)


def commands(path: str, out: str) -> list[list[str]]:
    return [
        ["inspect", path, "--json"],
        ["inspect", path, "--lint", "--json"],
        ["check", path, "--json"],
        ["scale", "yarn", "--target", "256k", "--config", path, "-o", out],
        ["convert", path, "--to", "v5", "-o", out],
        ["pick", "--ctx", "128k", "--config", path, "--json"],
        ["audit", path, "--trained-with", path, "--json"],
    ]


def timed(*args: str) -> Result:
    """``posenc ARGS`` in-process; a run past :data:`TIMEOUT` seconds fails the test."""
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(TIMEOUT)
    try:
        return run(*args)
    except Hang:
        pytest.fail(f"posenc {' '.join(args)} ran past {TIMEOUT} s")
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def assert_clean(args: list[str], result: Result, out: Path) -> None:
    """The invariants of the module docstring, for one run."""
    what = (args, result.exit_code, result.stdout[-300:], result.stderr[-300:], result.exception)
    assert result.exit_code in (0, 1, 2, 3), what
    assert result.exception is None or isinstance(result.exception, SystemExit), what
    assert "Traceback" not in result.stderr, what
    report = args[0] == "check" and result.exit_code == 3 and result.stdout.strip()
    if result.exit_code in (2, 3) and not report:
        lines = result.stderr.strip().splitlines()
        assert lines and lines[-1].startswith("error: "), what
    if "--json" in args and result.stdout.strip():
        strict_json(result.stdout)
    if "-o" in args and result.exit_code == 0:
        strict_json(out.read_text(encoding="utf-8"))
        again = timed("inspect", str(out))
        assert again.exit_code == 0, (what, again.stderr)


def run_all(data: bytes, folder: Path) -> None:
    """Every command of :func:`commands` on a file holding ``data``."""
    path = folder / "config.json"
    path.write_bytes(data)
    out = folder / "out.json"
    for args in commands(str(path), str(out)):
        out.unlink(missing_ok=True)
        assert_clean(args, timed(*args), out)


def _text_config(cfg: dict[str, Any]) -> dict[str, Any]:
    sub = cfg.get("text_config")
    return sub if isinstance(sub, dict) else cfg


def _set(cfg: dict[str, Any], dotted: str, value: Any) -> bool:
    """Set (or delete) ``dotted`` in the text config; False when the file does not have that key."""
    node: Any = _text_config(cfg)
    *parents, last = dotted.split(".")
    for key in parents:
        node = node.get(key) if isinstance(node, dict) else None
    if not isinstance(node, dict) or last not in node:
        return False
    if value is DELETE:
        del node[last]
    else:
        node[last] = value
    return True


def _dump(cfg: Any) -> bytes:
    # allow_nan: a damaged file holds the tokens Python's json writes; that is the input under test
    return json.dumps(cfg, indent=2, allow_nan=True).encode("utf-8")


def _whole_file(text: str) -> Iterator[tuple[str, bytes]]:
    """Mutations of the file as a whole."""
    for cut in (1, len(text) // 3, len(text) - 2):
        yield f"truncated at {cut}", text[:cut].encode("utf-8")
    deep = 200_000
    yield "lists 200,000 deep", ("[" * deep + "]" * deep).encode()
    yield "an object 200,000 deep inside", (text.rstrip()[:-1] + ', "x": ' + '{"a": ' * deep + "1" + "}" * deep
                                            + "}").encode()
    for encoding in ("utf-16", "utf-32", "utf-8-sig"):
        yield encoding, text.encode(encoding)
    yield "a key twice", (text.rstrip()[:-1] + ', "rope_theta": 1, "rope_theta": 2}').encode()
    damaged = Path(__file__).resolve().parents[1] / "fixtures" / "damaged"
    yield "a tokenizer.json", (damaged / "tokenizer.json").read_bytes()
    yield "an empty object", b"{}"
    yield "a list", b"[1, 2]"
    yield "bytes that are no text", b"\xff\xfe\xfd{"


def _sweep_cases() -> Iterator[Any]:
    for name in SWEPT:
        text = (CORPUS / name).read_text(encoding="utf-8")
        for key in KEYS:
            for value in VALUES:
                cfg = json.loads(text)
                if _set(cfg, key, value):
                    shown = "deleted" if value is DELETE else repr(value)
                    yield pytest.param(_dump(cfg), id=f"{name}:{key}={shown}")
        for what, data in _whole_file(text):
            yield pytest.param(data, id=f"{name}:{what}")


SWEEP = list(_sweep_cases())


def test_the_sweep_counts() -> None:
    """The counts the module docstring states."""
    assert len(SWEEP) == 239


@pytest.mark.parametrize("data", SWEEP)
def test_sweep(data: bytes, tmp_path: Path) -> None:
    run_all(data, tmp_path)


FILES = sorted(p for p in CORPUS.glob("*.json") if p.name != "SOURCES.json")


def _leaves(obj: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield path + (k,)
            yield from _leaves(v, path + (k,))
    elif isinstance(obj, list):
        for i, v in enumerate(obj[:4]):
            yield from _leaves(v, path + (i,))


ODD = st.one_of(
    st.sampled_from(VALUES),
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(min_value=-(10**40), max_value=10**40),
    st.text(max_size=5),
    st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)


@st.composite
def mutated(draw: st.DrawFn) -> bytes:
    """A corpus config with one leaf anywhere changed or deleted, or its text truncated."""
    path = draw(st.sampled_from(FILES))
    text = path.read_text(encoding="utf-8")
    if draw(st.integers(0, 9)) == 0:
        return text[: draw(st.integers(0, len(text)))].encode("utf-8")
    cfg = json.loads(text)
    where = draw(st.sampled_from(list(_leaves(cfg))))
    node = cfg
    for key in where[:-1]:
        node = node[key]
    value = draw(ODD)
    if value is DELETE:
        del node[where[-1]]
    else:
        node[where[-1]] = value
    return _dump(cfg)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=mutated())
def test_property(data: bytes, tmp_path: Path) -> None:
    run_all(data, tmp_path)


def _posenc(*args: str, stdout: Any = subprocess.PIPE) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "posenc_cli", *args], stdout=stdout, stderr=subprocess.PIPE,
                          text=True, timeout=60)


INSPECTED = CORPUS / "qwen2.5-7b-instruct.json"
SCALE = ("scale", "yarn", "--target", "256k", "--config", str(CORPUS / "llama-3.1-8b-instruct.json"))


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full (Linux)")
@pytest.mark.parametrize("args", [SCALE, (*SCALE, "-o", "-"), ("inspect", "--json", str(INSPECTED))],
                         ids=["scale", "scale -o -", "inspect --json"])
def test_stdout_on_a_full_device_is_one_line_exit_3(args: tuple[str, ...]) -> None:
    """``> /dev/full``: the device failed, not the input: exit 3, one ``error:`` line, no traceback."""
    with open("/dev/full", "w") as full:
        done = _posenc(*args, stdout=full)
    assert done.returncode == 3, done.stderr
    assert "Traceback" not in done.stderr and "Exception ignored" not in done.stderr, done.stderr
    assert done.stderr.strip().splitlines()[-1] == "error: cannot write to stdout: No space left on device"


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full (Linux)")
def test_output_to_a_full_device_is_one_line_exit_3() -> None:
    done = _posenc(*SCALE, "-o", "/dev/full")
    assert done.returncode == 3, done.stderr
    assert done.stderr.strip().splitlines()[-1] == "error: cannot write /dev/full: No space left on device"
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("args", [SCALE, (*SCALE, "-o", "-"), ("inspect", "--json", str(INSPECTED))],
                         ids=["scale", "scale -o -", "inspect --json"])
def test_a_closed_pipe_is_a_quiet_exit_0(args: tuple[str, ...]) -> None:
    """A reader that closed the pipe (``| head -c1``) chose to stop (errors.ExitCode): exit 0, no error line. The
    read end is closed before posenc starts, so every write meets EPIPE (``head`` would race the pipe buffer)."""
    import os

    read, write = os.pipe()
    os.close(read)
    try:
        done = _posenc(*args, stdout=write)
    finally:
        os.close(write)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr and "error" not in done.stderr, done.stderr


# ------------------------------------------------------------------ each decision, named

DAMAGED = Path(__file__).resolve().parents[1] / "fixtures" / "damaged"
LLAMA = CORPUS / "llama-3.1-8b-instruct.json"


@pytest.mark.parametrize(("data", "needle"), [
    ((DAMAGED / "tokenizer.json").read_bytes(), "not a model config: it looks like a tokenizer.json"),
    (b'{"bos_token_id": 1, "eos_token_id": 2, "do_sample": true}', "it looks like a generation_config.json"),
    (b"{}", "not a model config: it is an empty object"),
    (b"[1, 2]", "expected a JSON object, got an array"),
    (b"null", "expected a JSON object, got null"),
], ids=["tokenizer.json", "generation_config.json", "{}", "a list", "null"])
@pytest.mark.parametrize("command", ["inspect", "check"])
def test_a_file_that_is_not_a_model_config_is_bad_input(data: bytes, needle: str, command: str,
                                                         tmp_path: Path) -> None:
    """Not "no RoPE, nothing differs": a CI gate pointed at the wrong file must fail."""
    path = tmp_path / "file.json"
    path.write_bytes(data)
    assert_usage_error(run(command, str(path)), str(path), needle)


def test_a_key_given_twice_is_named() -> None:

    assert_usage_error(run("inspect", str(DAMAGED / "rope-theta-twice.json")),
                       "key 'rope_theta' is given twice in one object (1000000.0 and 10000)")


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-le", "utf-32", "utf-8-sig"])
def test_utf16_utf32_and_a_bom_read_as_utf8(encoding: str, tmp_path: Path) -> None:
    """What json.loads reads from bytes, posenc reads: the same numbers as the UTF-8 file (utf-16-le: no BOM, told
    apart by its zero bytes)."""
    path = tmp_path / "config.json"
    path.write_bytes(LLAMA.read_text(encoding="utf-8").encode(encoding))
    mine, plain = run("inspect", str(path), "--json"), run("inspect", str(LLAMA), "--json")
    assert mine.exit_code == plain.exit_code == 0, mine.stderr
    assert {**json.loads(mine.stdout), "source": None} == {**json.loads(plain.stdout), "source": None}


def test_bytes_that_are_no_text_are_one_line(tmp_path: Path) -> None:

    path = tmp_path / "config.json"
    path.write_bytes(b'{"model_type": "llama", "x": "\xff\xfe\xfd"}')
    assert_usage_error(run("inspect", str(path)), "not UTF-8, UTF-16 or UTF-32 text")


@pytest.mark.parametrize("encoding", ["utf-16", "utf-8-sig"])
def test_transformers_refuses_what_the_docs_say(encoding: str, tmp_path: Path) -> None:
    """docs/conventions.md says transformers refuses a UTF-16 config.json and a UTF-8 BOM; this runs it."""
    from transformers import AutoConfig

    (tmp_path / "config.json").write_bytes(LLAMA.read_text(encoding="utf-8").encode(encoding))
    with pytest.raises(OSError, match="not a valid JSON file"):
        AutoConfig.from_pretrained(str(tmp_path))


def test_infinity_in_a_key_posenc_does_not_read_is_written_as_transformers_writes_it(tmp_path: Path) -> None:
    """A bare Infinity in ``time_step_limit`` (Nemotron-H ships one; transformers reads it, as Python's json does)
    on a Llama config: inspect reads the model; convert writes ``{"__float__": "Infinity"}`` (transformers 5's
    ``to_json_string``), strict JSON that posenc and transformers read back as the float."""
    from transformers import AutoConfig

    cfg = json.loads(LLAMA.read_text(encoding="utf-8"))
    cfg["time_step_limit"] = [0.0, math.inf]
    src = tmp_path / "in.json"
    src.write_text(json.dumps(cfg, allow_nan=True), encoding="utf-8")
    assert run("inspect", str(src)).exit_code == 0
    out = tmp_path / "config.json"
    done = run("convert", str(src), "--to", "v5", "-o", str(out))
    assert done.exit_code == 0, done.stderr
    written = strict_json(out.read_text(encoding="utf-8"))
    assert written["time_step_limit"] == [0.0, {"__float__": "Infinity"}]
    assert run("inspect", str(out)).exit_code == 0
    assert AutoConfig.from_pretrained(str(tmp_path)).time_step_limit == [0.0, math.inf]


def test_a_number_posenc_uses_is_never_nan(tmp_path: Path) -> None:

    cfg = json.loads(LLAMA.read_text(encoding="utf-8"))
    cfg["rope_theta"] = math.inf
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg, allow_nan=True), encoding="utf-8")
    assert_usage_error(run("scale", "yarn", "--target", "256k", "--config", str(path)), "rope_theta = inf")


def test_deep_nesting_is_one_line(tmp_path: Path) -> None:

    path = tmp_path / "config.json"
    path.write_text('{"model_type": "llama", "x": ' + "[" * 65 + "]" * 65 + "}", encoding="utf-8")
    assert_usage_error(run("inspect", str(path)), "nested too deep", "at most 64 levels")


@pytest.mark.parametrize(("key", "value", "needle"), [
    ("max_position_embeddings", -4096, "max_position_embeddings = -4096"),
    ("max_position_embeddings", 0, "max_position_embeddings = 0"),
    ("max_position_embeddings", 1e308, "max_position_embeddings = 1e+308"),
    ("num_hidden_layers", 10**30, "num_hidden_layers = 10000000000000000000000000000"),
    ("rope_theta", 0, "rope_theta = 0"),
    ("rope_theta", -1.5, "rope_theta = -1.5"),
    ("rope_scaling.factor", 0.5, "rope_scaling.factor = 0.5"),
    ("rope_scaling.factor", 1e39, "rope_scaling.factor = 1e+39"),
    ("rope_scaling.original_max_position_embeddings", -8192, "original_max_position_embeddings = -8192"),
])
def test_lint_rejects_impossible_values(key: str, value: Any, needle: str, tmp_path: Path) -> None:
    """inspect refuses the value (exit 2, one line); inspect --lint reports it as an impossible-value problem (exit
    1), naming the key and the value."""

    cfg = json.loads(LLAMA.read_text(encoding="utf-8"))
    assert _set(cfg, key, value)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg), encoding="utf-8")
    assert_usage_error(run("inspect", str(path)), key.rsplit(".", 1)[-1])
    linted = run("inspect", str(path), "--lint", "--json")
    assert linted.exit_code == 1, linted.stderr
    problems = json.loads(linted.stdout)["lint"]
    assert [p["code"] for p in problems if p["severity"] == "error"] == ["impossible-value"], problems
    assert needle in problems[0]["problem"], problems


def test_the_corpus_has_no_impossible_value() -> None:
    """The impossible-value check is no false alarm on real configs (MiniCPM-V 4's original length 32786 over a
    32768 window is a warning: engines run it)."""
    for path in FILES:
        linted = run("inspect", str(path), "--lint", "--json")
        codes = [p["code"] for p in json.loads(linted.stdout).get("lint", [])] if linted.stdout else []
        assert "impossible-value" not in codes, path.name
    minicpm = json.loads(run("inspect", str(CORPUS / "minicpm-v-4.json"), "--lint", "--json").stdout)["lint"]
    assert [(p["code"], p["severity"]) for p in minicpm] == [("original-beyond-window", "warning")]


def test_every_json_writer_refuses_nan() -> None:
    """Every ``json.dump``/``json.dumps`` call in posenc_cli passes ``allow_nan=False`` (most go through
    ``config.dumps_json``, the one that does), so nothing posenc writes holds NaN or Infinity."""
    import ast

    package = Path(__file__).resolve().parents[2] / "posenc_cli"
    loose = []
    for path in sorted(package.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr in ("dump", "dumps") and isinstance(node.func.value, ast.Name)
                    and node.func.value.id == "json"):
                strict = any(k.arg == "allow_nan" and isinstance(k.value, ast.Constant) and k.value.value is False
                             for k in node.keywords)
                if not strict:
                    loose.append(f"{path.relative_to(package.parent)}:{node.lineno}")
    assert loose == [], loose


@pytest.mark.parametrize(("name", "where", "code"), [
    ("deepseek-r1.json", ("rope_scaling", "beta_fast"), None),  # transformers reads null as 32; mlx-lm's float() fails
    ("deepseek-r1.json", ("rope_scaling", "mscale"), None),
    ("phi-3-mini-128k-instruct.json", ("max_position_embeddings",), None),
    ("phi-3-mini-128k-instruct.json", ("original_max_position_embeddings",), None),
    ("gemma-4-26b-a4b.json", ("text_config", "global_head_dim"), 2),
    ("qwen3-next-80b-a3b-thinking.json", ("full_attention_interval",), 2),
    ("deepseek-v4-flash.json", ("rope_theta",), 2),
    ("deepseek-v4-flash.json", ("compress_rope_theta",), 2),
])
def test_a_null_where_a_number_belongs_is_never_a_traceback(name: str, where: tuple[str, ...], code: int | None,
                                                            tmp_path: Path) -> None:
    """Found by setting each key of each corpus config to null in turn: the model reader refuses in one line (exit
    2) where transformers cannot build the model either; where transformers reads it and an engine's own reader
    would fail (mlx-lm's float(None)), that engine's row will not start, and the others are judged."""
    cfg = json.loads((CORPUS / name).read_text(encoding="utf-8"))
    node = cfg
    for key in where[:-1]:
        node = node[key]
    node[where[-1]] = None
    path = write_json(tmp_path, cfg, name)
    result = run("check", path, "--json")
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    if code == 2:
        assert_usage_error(result, where[-1])
    else:
        report = json.loads(result.stdout)
        assert result.exit_code in (0, 1, 3) and report["verdicts"]
        for row in report["engines"]:
            if row["verdict"] == "will not start" and "as modelled" in (row.get("refusal") or ""):
                assert "NoneType" in row["refusal"]
        if where == ("rope_scaling", "beta_fast"):  # mlx-lm's reader calls float() on it: its row, not a traceback
            assert "mlx-lm" in report["verdicts"]["will not start"]
