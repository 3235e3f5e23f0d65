"""What an OpenAI-compatible server can do for an eval run, found by asking it (a handful of small requests).

Each capability is observed, never assumed from the engine's name:

* the model id and the context the server reports (vLLM/SGLang ``max_model_len`` in ``/v1/models``; llama-server's
  per-slot ``n_ctx`` and ``total_slots`` in ``/props``); llama-cpp-python reports none;
* a tokenize endpoint (each known style is tried), calibrated against ``usage.prompt_tokens`` of the same text so
  a BOS the endpoint leaves out is counted;
* prompt log-probabilities: ``echo`` + ``logprobs`` on completions, else SGLang's ``/generate``; a parameter the
  server refuses (HTTP 4xx) is "rejected", one it answers without honouring is "ignored";
* whether ``max_tokens`` and greedy decoding (``temperature`` 0: two identical requests, one answer) are honoured;
* how many requests to keep in flight (:func:`default_concurrency`): llama-server's slots (``total_slots`` in
  ``/props``), a conservative :data:`BATCHING_DEFAULT` for vLLM and SGLang, which batch but report no limit, and 1
  otherwise;
* with ``api="chat"``: the tokens the chat template adds, ``usage.prompt_tokens`` of the probe text sent as one user
  message of ``/v1/chat/completions`` minus that of the same text on ``/v1/completions`` (as the BOS is measured);
* with ``expect_ctx``: whether a request using exactly that many tokens of context (a prompt one shorter, and one
  generated token) is served, which is how a scaled context is seen from outside (no engine reports its rope
  scaling over HTTP).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from posenc_cli.errors import PosencError
from posenc_cli.evaluation.client import ENGINE_SAMPLING, TOKENIZE_STYLES, Client, Completion, Refused, ServerError

PROBE_TEXT = "the key is 12345. what is the key? the key is "

#: Engines whose echoed prompt log-probabilities are right only when the prompt starts with a BOS token, and why.
#: llama-cpp-python 0.3.36 pairs echoed token k with the logits of position k after dropping a leading BOS, which
#: lines up (position k predicts token k + 1 of the BOS-led prompt); with no BOS to drop, each value is the
#: probability that the token at position k comes next, one position off, and the generated token falls off the
#: end. Seen from outside: the echo's ``tokens`` spell the prompt alone, not the prompt and the answer. Measured on
#: SmolLM2-135M (no BOS): the echo gave -9.5, -10.8, -11.1 nats where the model's log p(token | prefix) is -0.34,
#: -2.44, -0.45.
ECHO_NEEDS_BOS = {
    "llama-cpp-python": "llama-cpp-python's echo is one position off when the model adds no BOS token (each value "
                        "is log p(next token = this token), not this token's loss); no loss measured",
}


#: Requests in flight by default on vLLM and SGLang. Both batch continuously (vLLM's ``max_num_seqs``, SGLang's
#: ``max_running_requests``) but neither reports its limit in ``/v1/models``. Four is conservative on purpose: a long-
#: context cell fills a large part of the KV cache (Qwen2.5-7B: 56 kB per token in float16, 7.5 GB at 128k), so more
#: sequences in flight than the cache holds only wait in the server's queue, and that wait counts against
#: ``--timeout``; four full-length prompts still fit beside a 7B model on one 80 GB GPU. ``--concurrency`` overrides.
BATCHING_DEFAULT = 4
APIS = ("completions", "chat", "ollama")


@dataclass
class Capabilities:
    base_url: str
    model: str | None
    engine: str  # from /v1/models owned_by or /props: vllm, sglang, llama-server, llama-cpp-python, unknown
    served_context: int | None  # the context one request may use, as the server reports it
    context_source: str
    tokenize: str | None  # a TOKENIZE_STYLES entry, or None
    tokenize_offset: int | None  # usage.prompt_tokens minus the tokenize count of the same text (BOS)
    prompt_logprobs: str | None  # "echo" or "sglang", or None
    logprobs_detail: str
    parameters: dict[str, str] = field(default_factory=dict)  # parameter -> honoured | ignored | rejected: ...
    expected_context: dict[str, Any] | None = None
    requests: int = 0
    probe_tokens: int | None = None  # usage.prompt_tokens of PROBE_TEXT (calibrates a local tokenizer)
    sampling: dict[str, Any] = field(default_factory=dict)  # sent with every completion (serving.ENGINE_SAMPLING)
    api: str = "completions"  # an APIS entry: the endpoint the run's retrieval prompts go to (ollama: native)
    chat_offset: int | None = None  # with api "chat": tokens the chat template adds to a prompt (usage, measured)
    concurrency: int = 1  # requests a run keeps in flight unless --concurrency says otherwise
    concurrency_source: str = "not reported"
    context_slots: int | None = None  # llama-server: the slots its -c is split across (/props total_slots)
    trained_context: int | None = None  # llama-server: the GGUF's context_length, which caps every slot
    #: "streamed": retrieval requests are streamed and their time to first token recorded (the server reports the
    #: usage when streaming, so lengths stay checked); None: sent whole, and ``first_token_detail`` says why
    first_token: str | None = None
    first_token_detail: str = "not probed"

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Capabilities:
        return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})


def _engine(model_entry: dict[str, Any] | None, props: dict[str, Any] | None) -> str:
    owner = str((model_entry or {}).get("owned_by", "")).lower()
    if owner in ("vllm", "sglang"):
        return owner
    if owner == "llamacpp" or props is not None:
        return "llama-server"
    if owner == "me":  # llama-cpp-python's server answers owned_by "me"
        return "llama-cpp-python"
    return "unknown"


def probe(client: Client, model: str | None = None, api: str = "completions",
          num_ctx: int | None = None) -> Capabilities:
    """Ask the server what it supports (about ten small requests; two more with ``api="chat"``).

    Requests for optional features (``/props``, tokenize styles, echo, ``/generate``) go without retries, and any
    failure, a 4xx or a 5xx alike, means "not offered": llama-server answers an unsupported ``echo`` with HTTP 500
    in some versions and silently ignores it in others. With ``api="chat"`` a server that refuses chat completions
    (HTTP 404 where there is no such route, 400 from vLLM for a model without a chat template) is a PosencError
    naming ``--api``.
    """
    if api not in APIS:
        raise PosencError(f"--api {api!r}: one of {', '.join(APIS)}")
    if api == "ollama":
        return probe_ollama(client, model, num_ctx)
    entry, model_id = _model_entry(client, model)
    optional = replace(client, retries=0)
    props = _props(optional)
    engine = _engine(entry, props)
    # every later completion, the run's included, decodes greedily without the engine's own penalties
    client.sampling = dict(ENGINE_SAMPLING.get(engine, {}))
    optional.sampling = client.sampling
    served, source, slots, trained = _served_length(entry, props)
    reference = client.complete(model_id, PROBE_TEXT, max_tokens=1)
    params = _sampling_params(client, model_id, reference)
    style, offset = _tokenize_style(optional, model_id, engine, reference)
    logprobs, detail = _prompt_logprobs(optional, model_id, engine, reference, params)
    chat_offset = _chat_offset(client, model_id, reference, params) if api == "chat" else None
    first_token, first_detail = (_streaming(optional, model_id, reference) if api == "completions" else
                                 (None, "not measured: chat requests are sent whole"))
    concurrency, why = default_concurrency(engine, props)
    return Capabilities(client.base_url, model_id, engine, served, source, style, offset, logprobs, detail, params,
                        None, client.requests + optional.requests, reference.prompt_tokens, dict(client.sampling),
                        api, chat_offset, concurrency, why, slots, trained, first_token, first_detail)


def _streaming(optional: Client, model_id: str | None, reference: Completion) -> tuple[str | None, str]:
    """Whether retrieval requests can be streamed (and their time to first token measured) without losing the
    length check: a streamed probe whose last chunk reports ``usage.prompt_tokens`` equal to the whole answer's."""
    try:
        streamed = optional.complete(model_id, PROBE_TEXT, max_tokens=4, stream=True)
    except (Refused, ServerError) as exc:
        return None, f"not measured: streaming failed ({exc})"
    if reference.prompt_tokens is None or streamed.prompt_tokens != reference.prompt_tokens:
        return None, "not measured: the server reports no usage when streaming (prompt lengths would go unchecked)"
    if streamed.first_token_seconds is None:
        return None, "not measured: the streamed answer carried no text"
    return "streamed", "streamed, usage in the last chunk (stream_options.include_usage)"


def probe_ollama(client: Client, model: str | None, num_ctx: int | None) -> Capabilities:
    """Ollama through its native API: the models (``/api/tags``), the model's trained window (``/api/show``
    ``model_info`` ``<arch>.context_length``: Ollama serves no more of it) and one raw generation of the probe text.

    The window a request may use is ``num_ctx`` (sent with every request) capped at the trained window; without
    ``num_ctx`` it is unknown (Ollama's default, or ``OLLAMA_CONTEXT_LENGTH``, is not reported), and a prompt past
    it is truncated silently, which the served length (``prompt_eval_count``) shows."""
    tags = client.call("GET", "/api/tags")
    names = [str(m.get("name")) for m in tags.get("models", []) if isinstance(m, dict)] if isinstance(tags, dict) \
        else []
    if model is not None and names and model not in names:
        raise PosencError(f"--model {model!r}: Ollama serves {', '.join(names)}")
    model_id = model or (names[0] if names else None)
    if model_id is None:
        raise PosencError(f"{client.base_url}: Ollama serves no model (ollama pull NAME)")
    shown = client.call("POST", "/api/show", {"model": model_id})
    info = shown.get("model_info") if isinstance(shown, dict) else None
    trained = next((int(v) for k, v in (info or {}).items() if k.endswith(".context_length")
                    and isinstance(v, int) and not isinstance(v, bool)), None)
    window = min(num_ctx, trained) if num_ctx is not None and trained is not None else num_ctx
    source = ("num_ctx sent with every request" + (f", within the GGUF's context_length {trained}" if trained else "")
              if num_ctx is not None else "not reported (Ollama's default num_ctx)")
    reference = client.generate(model_id, PROBE_TEXT, max_tokens=1, num_ctx=num_ctx or 2048)
    again = client.generate(model_id, PROBE_TEXT, max_tokens=4, num_ctx=num_ctx or 2048)
    twice = client.generate(model_id, PROBE_TEXT, max_tokens=4, num_ctx=num_ctx or 2048)
    params = {"temperature=0": "honoured" if again.text == twice.text else "ignored (two answers to one prompt)"}
    if reference.prompt_tokens is None:
        params["prompt_eval_count"] = "missing: prompt lengths cannot be verified"
    return Capabilities(client.base_url, model_id, "ollama", window, source, None, None, None,
                        "Ollama's /api/generate gives no prompt log-probabilities", params, None, client.requests,
                        reference.prompt_tokens, {}, "ollama", None, 1, "Ollama reports no parallel limit",
                        None, trained, None, "not measured: Ollama requests are sent whole")


def default_concurrency(engine: str, props: dict[str, Any] | None) -> tuple[int, str]:
    """Requests a run keeps in flight by default, and why: llama-server's slots as its ``/props`` reports them
    (``total_slots``, the ``-np`` it was started with), :data:`BATCHING_DEFAULT` for vLLM and SGLang, else 1
    (llama-cpp-python's server holds a lock around its one model: a second request only waits)."""
    slots = props.get("total_slots") if props is not None else None
    if isinstance(slots, int) and not isinstance(slots, bool) and slots >= 1:
        return min(slots, 256), f"/props total_slots ({slots} slots)"
    if engine in ("vllm", "sglang"):
        return BATCHING_DEFAULT, f"{engine} batches but reports no limit: a conservative {BATCHING_DEFAULT}"
    if engine == "llama-cpp-python":
        return 1, "llama-cpp-python serves one request at a time"
    return 1, "not reported"


def _chat_offset(client: Client, model_id: str | None, reference: Completion, params: dict[str, str]) -> int:
    """Tokens the server's chat template adds around one user message: ``usage.prompt_tokens`` of the probe text
    sent through ``/v1/chat/completions`` minus that of the same text as a raw completion prompt. Two identical
    chat requests also show whether greedy decoding holds there (``params["chat temperature=0"]``)."""
    try:
        first = client.chat(model_id, PROBE_TEXT, max_tokens=4)
    except Refused as exc:
        raise PosencError(f"--api chat: the server does not serve chat completions ({exc}); use --api completions"
                          ) from None
    if first.prompt_tokens is None or reference.prompt_tokens is None:
        raise PosencError("--api chat: the server reports no usage.prompt_tokens, so the chat template's tokens "
                          "cannot be measured; use --api completions")
    second = client.chat(model_id, PROBE_TEXT, max_tokens=4)
    params["chat temperature=0"] = "honoured" if first.text == second.text else "ignored (two answers to one prompt)"
    return first.prompt_tokens - reference.prompt_tokens


def _model_entry(client: Client, model: str | None) -> tuple[dict[str, Any] | None, str | None]:
    """The server's ``/v1/models`` entry for ``model`` (default: the first it serves) and the model id to ask."""
    entries = client.models()
    entry = next((m for m in entries if m.get("id") == model), None) if model else (entries[0] if entries else None)
    if model and entry is None and entries:
        ids = ", ".join(str(m.get("id")) for m in entries)
        raise PosencError(f"--model {model!r}: the server serves {ids}")
    return entry, model or (str(entry["id"]) if entry and "id" in entry else None)


def _props(optional: Client) -> dict[str, Any] | None:
    """llama-server's ``/props`` (its generation settings), or None from any other server."""
    try:
        answer = optional.call("GET", "/props")
    except (Refused, ServerError):
        return None
    settings = answer.get("default_generation_settings") if isinstance(answer, dict) else None
    return answer if isinstance(settings, dict) else None


def _served_length(entry: dict[str, Any] | None,
                   props: dict[str, Any] | None) -> tuple[int | None, str, int | None, int | None]:
    """The context one request may use as the server reports it, where it said so, and for llama-server its slots
    and the model's trained context.

    llama-server's ``/props`` ``n_ctx`` is one slot's: ``-c`` divided across the ``-np`` slots (unless
    ``--kv-unified``), then capped at the GGUF's ``context_length`` (its ``n_ctx_slot()``, llama.cpp #11681,
    #22140); ``/v1/models`` ``meta.n_ctx_train`` is that cap."""
    if entry and isinstance(entry.get("max_model_len"), int):
        return int(entry["max_model_len"]), "/v1/models max_model_len", None, None
    if props is not None:
        n_ctx = props["default_generation_settings"].get("n_ctx")
        if isinstance(n_ctx, int) and not isinstance(n_ctx, bool):
            slots = props.get("total_slots")
            slots = slots if isinstance(slots, int) and not isinstance(slots, bool) and slots >= 1 else None
            meta = (entry or {}).get("meta")
            trained = meta.get("n_ctx_train") if isinstance(meta, dict) else None
            trained = trained if isinstance(trained, int) and not isinstance(trained, bool) else None
            return (n_ctx, f"/props n_ctx per slot ({slots} slots)" if slots else "/props n_ctx", slots, trained)
    return None, "not reported", None, None


#: How each engine is told to serve ``{n}`` tokens per request.
WINDOW_FIX = {
    "vllm": "start vLLM with --max-model-len {n}",
    "sglang": "start SGLang with --context-length {n}",
    "llama-cpp-python": "start llama-cpp-python's server with --n_ctx {n}",
}


def window_refusal(caps: Capabilities, lengths: list[int]) -> str | None:
    """Why the lengths past the window ``caps`` reports cannot be sent, with the fix; None when every length fits
    or the server reports no window (nothing to enforce: ``eval probe --expect-ctx`` tests one).

    A cell of length L holds L tokens of context (prompt and answer), so L up to the window is served."""
    window = caps.served_context
    past = sorted(n for n in lengths if window is not None and n > window)
    if window is None or not past:
        return None
    need = past[-1]
    shown = ", ".join(str(n) for n in past)
    head = f"{shown} tokens: past the {window} the server serves per request ({caps.context_source})"
    if caps.engine == "ollama":
        fixes = [f"send num_ctx {need} (--num-ctx {need}; for other clients a Modelfile's PARAMETER num_ctx {need})"
                 ] if caps.trained_context is None or caps.served_context != caps.trained_context else []
        if caps.trained_context is not None and need > caps.trained_context:
            fixes.append(f"Ollama serves only the GGUF's window ({caps.trained_context}): serve a GGUF scaled to "
                         f"{need} (posenc scale ... --target {need} --engine ollama -o NEW.gguf)")
        return f"{head}; {'; and '.join(fixes)}"
    if caps.engine == "llama-server":
        slots = caps.context_slots or 1
        size = (f"-c {need * slots} (-c is split across the -np {slots} slots), or with --kv-unified, or -np 1"
                if slots > 1 else f"-c {need}")
        if caps.trained_context is not None and need > caps.trained_context:
            # the slot is capped by the GGUF, not (only) by -c: which -c it was started with is not reported
            return (f"{head}; llama-server caps a slot at the GGUF's trained context ({caps.trained_context}): serve "
                    f"a GGUF scaled to {need} (posenc scale ... --target {need} -o NEW.gguf), started with at least "
                    f"{size}")
        return f"{head}; start llama-server with {size}"
    fix = WINDOW_FIX.get(caps.engine, "serve the model with a context of at least {n}")
    return f"{head}; {fix.format(n=need)}"


def _sampling_params(client: Client, model_id: str | None, reference: Completion) -> dict[str, str]:
    """Whether the server honours max_tokens and temperature 0, and reports the prompt's token count."""
    params: dict[str, str] = {}
    if reference.completion_tokens is not None:
        params["max_tokens"] = "honoured" if reference.completion_tokens <= 1 else (
            f"ignored (asked 1, got {reference.completion_tokens})")
    else:
        params["max_tokens"] = "unverified (no usage.completion_tokens)"
    again = client.complete(model_id, PROBE_TEXT, max_tokens=4)
    twice = client.complete(model_id, PROBE_TEXT, max_tokens=4)
    params["temperature=0"] = "honoured" if again.text == twice.text else "ignored (two answers to one prompt)"
    if reference.prompt_tokens is None:
        params["usage.prompt_tokens"] = "missing: prompt lengths cannot be verified"
    return params


def _tokenize_style(optional: Client, model_id: str | None, engine: str,
                    reference: Completion) -> tuple[str | None, int | None]:
    """The tokenize endpoint whose counts match the server's own (the engine's style first), and the offset
    between them (a BOS or EOS the endpoint leaves out)."""
    order = sorted(TOKENIZE_STYLES, key=lambda name: name != engine)  # the engine's own style first
    for candidate in order:
        if candidate == "llama-server" and engine not in ("llama-server", "unknown"):
            continue
        try:
            tokens = optional.tokenize(candidate, model_id, PROBE_TEXT)
        except (Refused, ServerError):
            continue
        # llama-server answers a body without `content` with an empty list, not an error: a count that is not
        # within a BOS/EOS or two of the server's own is another endpoint's answer
        if not tokens or (reference.prompt_tokens is not None and abs(reference.prompt_tokens - len(tokens)) > 2):
            continue
        return candidate, reference.prompt_tokens - len(tokens) if reference.prompt_tokens is not None else None
    return None, None


def _prompt_logprobs(optional: Client, model_id: str | None, engine: str, reference: Completion,
                     params: dict[str, str]) -> tuple[str | None, str]:
    """How the server gives each prompt token's logprob (``echo``, ``sglang`` or None) and a line saying so;
    records the echo's outcome in ``params``."""
    logprobs, detail = None, ""
    try:
        echoed = optional.complete(model_id, PROBE_TEXT, max_tokens=1, echo_logprobs=True)
        values = echoed.prompt_logprobs
        # the echoed tokens show which tokens the values belong to: the prompt and the answer when aligned, the
        # prompt alone when each value sits one position off (the answer's token fell off the end)
        if engine in ECHO_NEEDS_BOS and echoed.text and echoed.echoed_tokens == PROBE_TEXT:
            params["echo"] = f"misaligned: {ECHO_NEEDS_BOS[engine]}"
        elif values is not None and (reference.prompt_tokens is None or len(values) == reference.prompt_tokens):
            logprobs, detail = "echo", "echo + logprobs on /v1/completions"
            params["echo"] = "honoured"
        else:
            params["echo"] = "ignored (no prompt in the answer's logprobs)"
    except (Refused, ServerError) as exc:
        params["echo"] = f"rejected: {exc}"
    if logprobs is None and engine in ("sglang", "unknown"):
        try:
            values = optional.sglang_prompt_logprobs(PROBE_TEXT)
            if reference.prompt_tokens is None or len(values) == reference.prompt_tokens:
                logprobs, detail = "sglang", "SGLang /generate with return_logprob, logprob_start_len 0"
        except (Refused, ServerError):
            pass
    if logprobs is None:
        tried = "; SGLang /generate: not offered" if engine in ("sglang", "unknown") else ""
        echo = params["echo"] if params["echo"].startswith("misaligned") else \
            params["echo"].split(":")[0].split(" (")[0]
        detail = f"echo + logprobs {echo}{tried}"
    return logprobs, detail


def expect_context(client: Client, caps: Capabilities, tokens: int,
                   long_prompt: Callable[[int], tuple[str, int]]) -> None:
    """Send one request using exactly ``tokens`` of context; the outcome goes to ``caps.expected_context``.

    ``long_prompt(n)`` builds a text of ``n`` tokens (and says how many it reached, for a tokenizer that cannot hit
    every count): the prompt is one token shorter than ``tokens``, the
    context also holds the one generated token.
    """
    start = client.requests
    expected: dict[str, Any] = {"tokens": tokens, "reported": caps.served_context}
    prompt, built = long_prompt(tokens - 1)
    expected["built_tokens"] = built
    try:
        answer = client.complete(caps.model, prompt, max_tokens=1)
        expected |= {"served": True, "prompt_tokens": answer.prompt_tokens}
    except (Refused, ServerError) as exc:  # a 5xx at this size (out of memory) is also "not served"
        expected |= {"served": False, "message": str(exc)}
    caps.expected_context = expected
    caps.requests += client.requests - start
