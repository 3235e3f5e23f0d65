"""A small client for OpenAI-compatible servers (vLLM, SGLang, llama.cpp's llama-server, llama-cpp-python).

Standard library only (``urllib``): the eval commands start without an HTTP package, and every request is one
blocking call that a thread pool can run side by side. One client serves every thread: each request opens its own
connection (urllib keeps none alive) and the request count is locked. What the client relies on, and how each
engine answers:

* completions: ``POST /v1/completions`` with a raw ``prompt``, ``temperature`` 0, ``max_tokens``;
  ``usage.prompt_tokens`` is the server's own count of the prompt.
* chat (``eval run --api chat``): ``POST /v1/chat/completions`` with the prompt as the one user message, the same
  ``temperature`` 0 and ``max_tokens``; the server applies its chat template, whose tokens ``usage.prompt_tokens``
  counts (:func:`~posenc_cli.evaluation.probe.probe` measures them once). The reply is ``choices[0].message.content``.
* Ollama (``eval run --api ollama``): ``POST /api/generate`` with ``raw``, ``options.num_ctx`` and ``num_predict``;
  ``prompt_eval_count`` is the served prompt length; ``GET /api/tags`` lists the models, ``POST /api/show`` gives a
  model's trained ``context_length``. Ollama has no tokenize endpoint: a run counts locally (``--tokenizer``).
* tokenizing: vLLM and SGLang ``POST /tokenize {"model", "prompt"}``; llama-server ``POST /tokenize {"content"}``;
  llama-cpp-python ``POST /extras/tokenize {"input"}``. Whether the count includes a BOS token differs, so
  :func:`probe` calibrates it against ``usage.prompt_tokens`` of the same text.
* prompt log-probabilities: ``echo`` + ``logprobs`` on completions (vLLM, llama-cpp-python), or SGLang's
  ``POST /generate`` with ``return_logprob`` and ``logprob_start_len`` 0. llama-server rejects ``echo``;
  transformers serve ignores it. Where neither works the loss is reported as unavailable, never estimated.

Failures are retried with exponential back-off (connection refused or reset, timeouts, HTTP 408/429/5xx, a body
that is not complete JSON); a request that still fails raises :class:`ServerError`, a
:class:`~posenc_cli.errors.CouldNotRun` the CLI reports as one ``error:`` line and exit 3. An HTTP 4xx other
than 408/429 is the server refusing this request (:class:`Refused`) and is not retried.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from posenc_cli.errors import CouldNotRun, PosencError

if TYPE_CHECKING:
    import urllib.error

#: HTTP statuses worth another try: the server is busy, restarting or timed out.
RETRY_STATUS = frozenset({408, 429, 500, 502, 503, 504})
#: Sampling settings sent to an engine whose server defaults are not plain greedy decoding. llama-cpp-python's
#: server applies ``repeat_penalty`` 1.1 by default, even at temperature 0: a key with a repeated digit (75511) comes
#: back changed (75516). llama-server's default is 1.0 already; it is sent anyway, the same for both llama.cpp
#: servers. vLLM and SGLang default to no penalty and are sent nothing they might warn about.
ENGINE_SAMPLING: dict[str, dict[str, Any]] = {
    "llama-cpp-python": {"repeat_penalty": 1.0},
    "llama-server": {"repeat_penalty": 1.0},
}
TOKENIZE_STYLES = ("vllm", "llama-server", "llama-cpp-python")


class ServerError(CouldNotRun):
    """The server could not be reached, or answered with an error after every retry (exit 3: could not run)."""


class Refused(ServerError):
    """The server answered 4xx: it understood the request and will not do it (an unsupported parameter)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def normalise_url(base_url: str) -> str:
    """``http://host:port`` with any trailing ``/`` or ``/v1`` removed; raises for anything else."""
    parts = urlsplit(base_url.strip())
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise PosencError(f"base URL {base_url!r} is not an http(s) URL (for example http://127.0.0.1:8000/v1)")
    if parts.username is not None or parts.password is not None:
        # the URL is written to the run's manifest and to messages: a key belongs in the environment
        raise PosencError("base URL: credentials in the URL are not accepted (put the key in $OPENAI_API_KEY or "
                          "--api-key-env NAME)")
    path = parts.path.rstrip("/")
    if path.endswith("/v1"):
        path = path[: -len("/v1")]
    return f"{parts.scheme}://{parts.netloc}{path}"


@dataclass
class Client:
    base_url: str
    api_key: str | None = None
    timeout: float = 600.0
    retries: int = 3
    backoff: float = 0.5  # seconds before the first retry; doubles each time, capped at 8 s
    sleep: Callable[[float], None] = time.sleep
    # sent with every completion: what an engine needs for plain greedy decoding (see ENGINE_SAMPLING)
    sampling: dict[str, Any] = field(default_factory=dict)
    requests: int = field(default=0, init=False)  # HTTP requests sent, retries included

    def __post_init__(self) -> None:
        self.base_url = normalise_url(self.base_url)
        self._lock = threading.Lock()
        self._local = threading.local()

    @property
    def thread_requests(self) -> int:
        """Requests sent by the calling thread (a runner's per-cell count under concurrency)."""
        return int(getattr(self._local, "n", 0))

    def _request(self, method: str, path: str, body: dict[str, Any] | None, accept: str) -> Any:
        """The request for ``path``, counted as sent (the client's and the calling thread's counts)."""
        import urllib.request  # with http.client, ssl and email: 40 ms, paid by the first request, not by start-up

        data = json.dumps(body, allow_nan=False).encode() if body is not None else None
        request = urllib.request.Request(self.base_url + path, data=data, method=method)
        request.add_header("Accept", accept)
        if data is not None:
            request.add_header("Content-Type", "application/json")
        if self.api_key:
            # unredirected: urllib would copy an ordinary header to whatever host a redirect names
            request.add_unredirected_header("Authorization", f"Bearer {self.api_key}")
        with self._lock:
            self.requests += 1
        self._local.n = self.thread_requests + 1
        return request

    def _once(self, method: str, path: str, body: dict[str, Any] | None) -> Any:
        import urllib.request

        request = self._request(method, path, body, "application/json")
        with urllib.request.urlopen(request, timeout=self.timeout) as response:  # noqa: S310 - http(s) checked
            raw = response.read()
        return json.loads(raw)

    def _once_streamed(self, path: str, body: dict[str, Any]) -> tuple[dict[str, Any], float | None]:
        """One streamed completion (server-sent events): the chunks joined into one answer, and the seconds from
        sending to the first chunk carrying text (None when no chunk did)."""
        import urllib.request

        request = self._request("POST", path, body, "text/event-stream")
        pieces: list[str] = []
        usage: Any = None
        first: float | None = None
        started = time.perf_counter()
        with urllib.request.urlopen(request, timeout=self.timeout) as response:  # noqa: S310 - http(s) checked
            for raw in response:
                line = raw.decode("utf-8").strip()
                if not line.startswith("data:"):
                    continue
                payload = line[5:].strip()
                if payload == "[DONE]":
                    break
                chunk = json.loads(payload)
                choices = chunk.get("choices") if isinstance(chunk, dict) else None
                text = choices[0].get("text") if isinstance(choices, list) and choices and \
                    isinstance(choices[0], dict) else None
                if isinstance(text, str) and text:
                    if first is None:
                        first = time.perf_counter() - started
                    pieces.append(text)
                if isinstance(chunk, dict) and isinstance(chunk.get("usage"), dict):
                    usage = chunk["usage"]
        return {"choices": [{"text": "".join(pieces)}], **({"usage": usage} if usage else {})}, first

    def call(self, method: str, path: str, body: dict[str, Any] | None = None, *, streamed: bool = False) -> Any:
        """One JSON request with retries; returns the decoded body (``streamed``: the joined answer and the time to
        its first text, :meth:`_once_streamed`)."""
        import http.client
        import urllib.error

        last = ""
        for attempt in range(self.retries + 1):
            if attempt:
                self.sleep(min(self.backoff * 2 ** (attempt - 1), 8.0))
            try:
                if streamed:
                    return self._once_streamed(path, body or {})
                return self._once(method, path, body)
            except urllib.error.HTTPError as exc:
                message = _error_text(exc)
                if exc.code not in RETRY_STATUS:
                    raise Refused(exc.code, f"{method} {path}: HTTP {exc.code}: {message}") from None
                last = f"HTTP {exc.code}: {message}"
            except urllib.error.URLError as exc:
                last = f"cannot connect ({_reason(exc.reason)})"
            except TimeoutError:
                last = f"no answer within {self.timeout:g} s"
            except (http.client.HTTPException, ConnectionError) as exc:
                last = f"connection dropped ({exc.__class__.__name__})"
            except ValueError:  # json.JSONDecodeError, or a body that is not UTF-8
                last = "the answer is not complete JSON"
        raise ServerError(f"{self.base_url}{path}: {last} (after {self.retries + 1} attempts)")

    # --- the requests eval makes -------------------------------------------------------------------------------

    def models(self) -> list[dict[str, Any]]:
        data = self.call("GET", "/v1/models")
        items = data.get("data") if isinstance(data, dict) else None
        return [m for m in items if isinstance(m, dict)] if isinstance(items, list) else []

    def tokenize(self, style: str, model: str | None, text: str) -> list[int]:
        if style == "vllm":
            body: dict[str, Any] = {"prompt": text}
            if model:
                body["model"] = model
            data = self.call("POST", "/tokenize", body)
        elif style == "llama-server":
            data = self.call("POST", "/tokenize", {"content": text})
        elif style == "llama-cpp-python":
            data = self.call("POST", "/extras/tokenize", {"input": text, **({"model": model} if model else {})})
        else:
            raise PosencError(f"tokenize style {style!r} is not one of {', '.join(TOKENIZE_STYLES)}")
        tokens = data.get("tokens") if isinstance(data, dict) else None
        if not isinstance(tokens, list):
            raise ServerError(f"{self.base_url}: the {style} tokenize answer has no token list")
        # llama-server answers {"id": ..., "piece": ...} entries when asked for pieces; only the count matters here
        return [t if isinstance(t, int) else -1 for t in tokens]

    def complete(self, model: str | None, prompt: str, *, max_tokens: int, echo_logprobs: bool = False,
                 extra: dict[str, Any] | None = None, stream: bool = False) -> Completion:
        """A greedy completion; ``stream`` sends it streamed, asking for the usage in the last chunk
        (``stream_options.include_usage``), and times its first token (``first_token_seconds``)."""
        body: dict[str, Any] = {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0.0, "stream": stream,
                                **self.sampling}
        if model:
            body["model"] = model
        if echo_logprobs:
            body |= {"echo": True, "logprobs": 1}
        body |= extra or {}
        if stream:
            body["stream_options"] = {"include_usage": True}
            data, first = self.call("POST", "/v1/completions", body, streamed=True)
            return replace(Completion.parse(data, None), first_token_seconds=first)
        data = self.call("POST", "/v1/completions", body)
        return Completion.parse(data, prompt if echo_logprobs else None)

    def chat(self, model: str | None, prompt: str, *, max_tokens: int) -> Completion:
        """``prompt`` as the one user message of a chat completion, decoded greedily."""
        body: dict[str, Any] = {"messages": [{"role": "user", "content": prompt}], "max_tokens": max_tokens,
                                "temperature": 0.0, "stream": False, **self.sampling}
        if model:
            body["model"] = model
        return Completion.parse_chat(self.call("POST", "/v1/chat/completions", body))

    def generate(self, model: str | None, prompt: str, *, max_tokens: int, num_ctx: int) -> Completion:
        """Ollama's native ``POST /api/generate``: the raw prompt (no template), greedy, in a window of ``num_ctx``
        tokens (``options.num_ctx``, which its OpenAI endpoint cannot set); ``prompt_eval_count`` is the prompt's
        length as Ollama served it (after any truncation to the window)."""
        data = self.call("POST", "/api/generate", {
            "model": model, "prompt": prompt, "raw": True, "stream": False,
            "options": {"num_ctx": num_ctx, "num_predict": max_tokens, "temperature": 0.0, **self.sampling}})
        if not isinstance(data, dict) or not isinstance(data.get("response"), str):
            raise ServerError(f"{self.base_url}/api/generate: the answer has no response text")
        return Completion(text=data["response"], prompt_tokens=_int(data.get("prompt_eval_count")),
                          completion_tokens=_int(data.get("eval_count")), prompt_logprobs=None)

    def sglang_prompt_logprobs(self, prompt: str) -> list[float | None]:
        data = self.call("POST", "/generate", {
            "text": prompt, "sampling_params": {"max_new_tokens": 1, "temperature": 0.0},
            "return_logprob": True, "logprob_start_len": 0})
        meta = data.get("meta_info") if isinstance(data, dict) else None
        entries = meta.get("input_token_logprobs") if isinstance(meta, dict) else None
        if not isinstance(entries, list):
            raise ServerError(f"{self.base_url}/generate: no meta_info.input_token_logprobs in the answer")
        # each entry is [logprob, token_id, text]; the first token has no logprob (None)
        return [e[0] if isinstance(e, list) and e and isinstance(e[0], (int, float)) else None for e in entries]


@dataclass(frozen=True)
class Completion:
    text: str
    prompt_tokens: int | None  # usage.prompt_tokens as the server reports it
    completion_tokens: int | None
    prompt_logprobs: list[float | None] | None  # one per prompt token (None where the server gives none)
    echoed_tokens: str | None = None  # the echo's logprobs.tokens joined: which tokens its values belong to
    first_token_seconds: float | None = None  # streamed: from sending the request to its first text

    @classmethod
    def parse(cls, data: Any, echoed_prompt: str | None) -> Completion:
        try:
            choice = data["choices"][0]
            text = choice["text"]
        except (KeyError, IndexError, TypeError):
            raise ServerError("the completion answer has no choices[0].text") from None
        if not isinstance(text, str):
            raise ServerError("the completion answer's choices[0].text is not a string")
        usage = data.get("usage") if isinstance(data.get("usage"), dict) else {}
        logprobs: list[float | None] | None = None
        joined: str | None = None
        if echoed_prompt is not None:
            lp = choice.get("logprobs")
            values = lp.get("token_logprobs") if isinstance(lp, dict) else None
            if text.startswith(echoed_prompt) and isinstance(values, list):
                completion = usage.get("completion_tokens")
                n = len(values) - (completion if isinstance(completion, int) else 0)
                logprobs = [v if isinstance(v, (int, float)) else None for v in values[: max(n, 0)]]
                prompt_tokens = _int(usage.get("prompt_tokens"))
                if prompt_tokens is not None and len(logprobs) == prompt_tokens - 1:
                    # llama-cpp-python echoes the prompt without its BOS: align the list to token positions
                    logprobs.insert(0, None)
            pieces = choice["logprobs"].get("tokens") if isinstance(choice.get("logprobs"), dict) else None
            if isinstance(pieces, list) and all(isinstance(t, str) for t in pieces):
                joined = "".join(pieces)
            if text.startswith(echoed_prompt):
                text = text[len(echoed_prompt):]
        return cls(text=text, prompt_tokens=_int(usage.get("prompt_tokens")),
                   completion_tokens=_int(usage.get("completion_tokens")), prompt_logprobs=logprobs,
                   echoed_tokens=joined)

    @classmethod
    def parse_chat(cls, data: Any) -> Completion:
        """A chat completion: ``choices[0].message.content`` (``null`` when the model said nothing: empty text)."""
        try:
            content = data["choices"][0]["message"].get("content")
        except (KeyError, IndexError, TypeError, AttributeError):
            raise ServerError("the chat completion answer has no choices[0].message") from None
        if content is not None and not isinstance(content, str):
            raise ServerError("the chat completion answer's message content is not a string")
        usage = data.get("usage") if isinstance(data.get("usage"), dict) else {}
        return cls(text=content or "", prompt_tokens=_int(usage.get("prompt_tokens")),
                   completion_tokens=_int(usage.get("completion_tokens")), prompt_logprobs=None)


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _reason(reason: Any) -> str:
    if isinstance(reason, ConnectionRefusedError):
        return "connection refused"
    if isinstance(reason, (TimeoutError, socket.timeout)):
        return "timed out"
    return str(reason)


def _error_text(exc: urllib.error.HTTPError) -> str:
    try:
        raw = exc.read().decode("utf-8", "replace")
    except Exception:  # noqa: BLE001 - the body of an error is best effort
        return exc.reason or ""
    try:
        data = json.loads(raw)
    except json.JSONDecodeError:
        return raw.strip()[:200]
    error = data.get("error", data) if isinstance(data, dict) else data
    message = error.get("message") if isinstance(error, dict) else error
    return str(message if message is not None else raw)[:300]


def api_key_from_env(name: str) -> str | None:
    """The API key in environment variable ``name`` (``None`` when unset or empty); never printed or stored."""
    value = os.environ.get(name, "")
    return value or None
