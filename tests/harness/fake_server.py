"""A small OpenAI-compatible server on 127.0.0.1 for the eval tests' fault cases (a helper module, not a test).

It speaks the subset ``posenc eval`` uses, in one of three engine styles, with a scripted "model": it counts
tokens with the passkey byte vocabulary (BOS + one token per byte), and answers a passkey prompt with the key when
the needle sits within ``reach`` tokens of the end and with ``00000`` otherwise, so pass rates are known in advance.
Faults are switched on per test: HTTP 500 for the first N requests, a body cut short, a connection dropped without
an answer, death (the socket closes) after K completions, a refused or ignored ``echo``, a slow answer. Each
request's ``Authorization`` header is recorded.

``/v1/chat/completions`` applies the fixed template :data:`CHAT_OPEN` + content + :data:`CHAT_CLOSE` (bytes, like the
prompt: ``usage.prompt_tokens`` counts them, BOS included) and answers the same way, from the templated text; with
``chat=False`` it is a 404, as from a server without the route. llama-server style reports ``slots`` in ``/props``.
The counters are updated under a lock: requests arrive on several threads at once.
"""

from __future__ import annotations

import json
import math
import re
import sys
import threading
import time
import zlib
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import ruler_model

from posenc_cli.evaluation import bytevocab

KEY = re.compile(r"the key is (\d+)\. ")
CHAT_OPEN = "<|user|>\n"  # the fake chat template, around the one user message's content
CHAT_CLOSE = "<|end|>\n<|assistant|>\n"


@dataclass
class Script:
    style: str = "llama-cpp-python"  # or "vllm", "llama-server", "sglang"
    reach: int = 10**9  # the needle is found when it starts at most this many tokens before the prompt's end
    max_model_len: int | None = None  # reported (vllm) and enforced (every style) when set
    fail_first: int = 0  # answer HTTP 500 to this many requests first
    truncate_first: int = 0  # then cut this many bodies short
    drop_first: int = 0  # then close this many connections without an answer
    die_after: int | None = None  # completions served before the server stops answering for good
    echo: str = "honour"  # honour | reject (HTTP 400) | fail (HTTP 500, as some llama-server versions) | ignore
    # | no-bos (llama-cpp-python serving a model without a BOS token: one value per prompt token)
    redirect_models: str | None = None  # answer GET /v1/models with a 302 to this URL
    bad_utf8: bool = False  # completions answer with a body that is not UTF-8
    delay: float = 0.0  # seconds a completion waits before it answers (client timeouts)
    jitter: bool = False  # wait delay x 0.25, 0.5, 1 or 2 instead, by a hash of the request (out-of-order answers)
    chat: bool = True  # serve /v1/chat/completions (else 404)
    fail_text: str | None = None  # a completion whose prompt holds this text gets HTTP 500, every time
    slots: int = 1  # llama-server style: total_slots in /props
    stream_usage: bool = True  # a streamed completion's last chunk carries the usage (include_usage honoured)
    n_ctx_train: int | None = None  # llama-server style: /v1/models meta.n_ctx_train (the GGUF's context_length)
    in_flight: int = 0  # completions being answered right now, and the most seen at once
    most_in_flight: int = 0
    authorization: list[str | None] = field(default_factory=list)  # each request's Authorization header
    counts: dict[str, int] = field(default_factory=dict)
    completions: int = 0


def _logprob(position: int) -> float:
    # a loss curve with a known shape: flat, then rising past 100 positions
    return -1.0 - (math.log2(position / 100) if position > 100 else 0.0)


class Handler(BaseHTTPRequestHandler):
    server: FakeServer

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's signature
        pass

    def _send(self, status: int, body: Any, *, cut: bool = False) -> None:
        self._leave_flight()  # before the reply: a client's next request may arrive before this thread resumes
        raw = json.dumps(body).encode()
        if cut:
            raw = raw[: len(raw) // 2]
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def _fault(self) -> bool:
        s = self.server.script
        with self.server.lock:
            n = s.counts.get("all", 0)
            s.counts["all"] = n + 1
        if n < s.fail_first:
            self._send(500, {"error": {"message": "scripted failure"}})
            return True
        n -= s.fail_first
        if n < s.truncate_first:
            self._send(200, {"choices": [{"text": "x" * 200}], "usage": {}}, cut=True)
            return True
        n -= s.truncate_first
        if n < s.drop_first:
            self.close_connection = True
            self.connection.close()
            return True
        return False

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        s = self.server.script
        s.authorization.append(self.headers.get("Authorization"))
        if self.path == "/v1/models" and s.redirect_models:
            self.send_response(302)
            self.send_header("Location", s.redirect_models)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if self.path == "/v1/models":
            entry: dict[str, Any] = {"id": "tiny", "object": "model",
                                     "owned_by": {"vllm": "vllm", "llama-server": "llamacpp",
                                                  "sglang": "sglang"}.get(s.style, "me")}
            if s.style in ("vllm", "sglang") and s.max_model_len:
                entry["max_model_len"] = s.max_model_len
            if s.style == "llama-server" and s.n_ctx_train is not None:
                entry["meta"] = {"n_ctx": s.max_model_len or 256, "n_ctx_train": s.n_ctx_train}
            self._send(200, {"object": "list", "data": [entry]})
        elif self.path == "/api/tags" and s.style == "ollama":
            self._send(200, {"models": [{"name": "tiny:latest", "model": "tiny:latest"}]})
        elif self.path == "/api/ps" and s.style == "ollama":  # loaded models and the window each was loaded with
            self._send(200, {"models": [{"name": "tiny:latest", "context_length": s.max_model_len or 2048}]})
        elif self.path == "/props" and s.style == "llama-server":
            self._send(200, {"default_generation_settings": {"n_ctx": s.max_model_len or 256},
                             "total_slots": s.slots})
        else:
            self._send(404, {"error": {"message": f"no route {self.path}"}})

    def do_POST(self) -> None:  # noqa: N802
        s = self.server.script
        s.authorization.append(self.headers.get("Authorization"))
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
        if self.path in ("/tokenize", "/extras/tokenize"):
            wanted = {"vllm": "/tokenize", "llama-server": "/tokenize", "sglang": "/tokenize"}.get(
                s.style, "/extras/tokenize")
            field_name = {"vllm": "prompt", "llama-server": "content", "sglang": "prompt"}.get(s.style, "input")
            if s.style == "llama-server" and self.path == "/tokenize" and field_name not in body:
                self._send(200, {"tokens": []})  # what llama-server answers a body without `content`
                return
            if self.path != wanted or field_name not in body:
                self._send(404 if self.path != wanted else 400, {"error": {"message": "no"}})
                return
            ids = bytevocab.encode(body[field_name], bos=s.style != "llama-server")
            self._send(200, {"tokens": ids})
            return
        if s.style == "ollama" and self.path == "/api/show":  # the GGUF's metadata, as `ollama show` reads it
            self._send(200, {"model_info": {"general.architecture": "llama",
                                            "llama.context_length": s.n_ctx_train or 256}})
            return
        if s.style == "ollama" and self.path == "/api/generate":
            self._ollama_generate(body)
            return
        if self.path == "/generate" and s.style == "sglang":
            # SGLang's native endpoint: input_token_logprobs as [logprob, token_id, text], None for the first token
            ids = bytevocab.encode(body["text"])
            if not (body.get("return_logprob") and body.get("logprob_start_len") == 0):
                self._send(200, {"text": "", "meta_info": {}})
                return
            entries = [[None if i == 0 else _logprob(i), t, ""] for i, t in enumerate(ids)]
            self._send(200, {"text": "0", "meta_info": {"prompt_tokens": len(ids), "input_token_logprobs": entries}})
            return
        chat = self.path == "/v1/chat/completions" and s.chat
        if self.path != "/v1/completions" and not chat:
            self._send(404, {"error": {"message": f"no route {self.path}"}})
            return
        with self.server.lock:
            dead = s.die_after is not None and s.completions >= s.die_after
        if dead:
            self.server.die()
            return
        if self._fault():
            return
        if s.fail_text is not None and s.fail_text in json.dumps(body, ensure_ascii=False):
            self._send(500, {"error": {"message": "scripted failure of this prompt"}})
            return
        with self.server.lock:
            s.in_flight += 1
            s.most_in_flight = max(s.most_in_flight, s.in_flight)
        self._in_flight = True
        try:
            if s.delay:
                scale = (0.25, 0.5, 1.0, 2.0)[zlib.crc32(json.dumps(body).encode()) % 4] if s.jitter else 1.0
                time.sleep(s.delay * scale)
            if chat:
                self._chat(body)
            else:
                self._complete(body)
        finally:
            self._leave_flight()

    def _leave_flight(self) -> None:
        """This request no longer counts as in flight (once, whichever of the reply or the end comes first)."""
        if getattr(self, "_in_flight", False):
            self._in_flight = False
            with self.server.lock:
                self.server.script.in_flight -= 1

    def _answer(self, prompt: str, max_tokens: int) -> str | None:
        """The scripted model's answer to ``prompt`` (None, after a 400, when it exceeds the context)."""
        s = self.server.script
        ids = bytevocab.encode(prompt)
        if s.max_model_len and len(ids) + max_tokens > s.max_model_len:
            self._send(400, {"error": {"message": f"Requested tokens ({len(ids)}) exceed context window of "
                                                  f"{s.max_model_len}"}})
            return None
        with self.server.lock:
            if s.die_after is not None and s.completions >= s.die_after:  # another thread served the last one
                self.server.die()
                return None
            s.completions += 1
        found = KEY.search(prompt)
        distance = len(bytevocab.encode(prompt[found.start():], bos=False)) if found else None
        answer = found.group(1) if found and distance is not None and distance <= s.reach else "00000"
        if ruler_model.is_ruler(prompt):  # RULER's tasks: a scripted answer from the last `reach` tokens
            answer = ruler_model.answer(prompt, s.reach)
        return answer[:max_tokens]

    def _ollama_generate(self, body: dict[str, Any]) -> None:
        """Ollama's /api/generate (raw): a window of options.num_ctx (default 2048) within the GGUF's context_length;
        a longer prompt is cut to its last tokens and answered 200, as Ollama does (ollama #3839);
        prompt_eval_count counts what was kept."""
        s = self.server.script
        assert body.get("raw") is True and body.get("stream") is False, body
        options = body.get("options") or {}
        window = min(int(options.get("num_ctx", 2048)), s.n_ctx_train or 256)
        ids = bytevocab.encode(body["prompt"])
        room = window - int(options.get("num_predict", 16))
        kept = body["prompt"] if len(ids) <= room else bytevocab.decode(ids[len(ids) - room:])
        with self.server.lock:
            s.completions += 1
        found = KEY.search(kept)
        self._send(200, {"model": body["model"], "response": found.group(1) if found else "00000", "done": True,
                         "prompt_eval_count": min(len(ids), room), "eval_count": 1})

    def _chat(self, body: dict[str, Any]) -> None:
        messages = body["messages"]
        assert [m["role"] for m in messages] == ["user"], messages
        templated = CHAT_OPEN + messages[0]["content"] + CHAT_CLOSE
        text = self._answer(templated, body.get("max_tokens", 16))
        if text is None:
            return
        self._send(200, {"object": "chat.completion",
                         "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                                      "finish_reason": "length"}],
                         "usage": {"prompt_tokens": len(bytevocab.encode(templated)), "completion_tokens": len(text)}})

    def _complete(self, body: dict[str, Any]) -> None:
        s = self.server.script
        prompt = body["prompt"]
        ids = bytevocab.encode(prompt)
        answer = self._answer(prompt, body.get("max_tokens", 16))
        if answer is None:
            return
        echo = body.get("echo")
        if echo and s.echo in ("reject", "fail"):
            self._send(400 if s.echo == "reject" else 500, {"error": {"message": "Only no echo is supported"}})
            return
        if s.bad_utf8:
            self.send_response(200)
            self.send_header("Content-Length", "4")
            self.end_headers()
            self.wfile.write(b"\xff\xfe{}")
            return
        text = answer
        if body.get("stream"):  # server-sent events: the answer in two chunks, then the usage when asked for
            self._leave_flight()
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            chunks: list[dict[str, Any]] = [{"choices": [{"index": 0, "text": part}]}
                                            for part in (text[:1], text[1:]) if part]
            if s.stream_usage and (body.get("stream_options") or {}).get("include_usage"):
                chunks.append({"choices": [], "usage": {"prompt_tokens": len(ids), "completion_tokens": len(text)}})
            for chunk in chunks:
                self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
            self.wfile.write(b"data: [DONE]\n\n")
            return
        choice: dict[str, Any] = {"index": 0, "text": text, "finish_reason": "length"}
        if echo and s.echo in ("honour", "no-bos"):
            choice["text"] = prompt + text
            # llama-cpp-python drops the BOS from the echo (one value fewer than prompt tokens); a model without a
            # BOS keeps every token, and its values are one position off (echo "no-bos")
            # (the answer's token falls off the end then, and the echoed tokens spell the prompt alone)
            if s.echo == "no-bos":
                choice["logprobs"] = {"token_logprobs": [None] + [_logprob(i) for i in range(1, len(ids))],
                                      "tokens": list(prompt)}
            else:
                first = 2 if s.style == "llama-cpp-python" else 1
                choice["logprobs"] = {"token_logprobs": [None] + [_logprob(i) for i in range(first, len(ids))] +
                                      [-0.1] * len(text), "tokens": list(prompt + text)}
        self._send(200, {"choices": [choice], "usage": {"prompt_tokens": len(ids), "completion_tokens": len(text)}})


class FakeServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, script: Script) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.script = script
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=self.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"

    def __enter__(self) -> FakeServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.die()

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that gave up (a timeout a test provoked) leaves its handler writing to a closed socket. The default
        # prints that traceback to whatever sys.stderr is at that moment: often the next test's captured CLI stderr,
        # which then fails its one-line check.
        if isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError)):
            return
        super().handle_error(request, client_address)

    def die(self) -> None:
        """Stop answering: close the listening socket (later connections are refused)."""
        threading.Thread(target=self.shutdown, daemon=True).start()
        self.socket.close()
