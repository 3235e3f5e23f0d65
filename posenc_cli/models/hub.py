"""Reading a model config from the Hugging Face Hub: :func:`is_hub_id` by the Hub's naming rules, and
:func:`read_hub`, whose every failure is one :class:`PosencError` line.

``huggingface_hub.hf_hub_download(repo_id, "config.json", revision=...)``, so the HF cache (``HF_HOME``,
``HF_HUB_CACHE``), ``HF_HUB_OFFLINE``, ``HF_ENDPOINT`` and the usual token (``HF_TOKEN``, ``hf auth login``) all
apply, and a cached config is read without the network. huggingface_hub is imported inside the functions that use it.
"""

from __future__ import annotations

import re
from typing import Any

from posenc_cli import __version__
from posenc_cli.errors import PosencError
from posenc_cli.files import parse_json_object, read_bytes

HUB_INSTALL_HINT = "reading a Hub id needs huggingface_hub: pip install huggingface_hub"

_HUB_PART = re.compile(r"[A-Za-z0-9_](?:[A-Za-z0-9._-]{0,94}[A-Za-z0-9_])?")

_REASON_MAX = 160  # characters of a library's error message kept in ours


def is_hub_id(text: str) -> bool:
    """``name`` or ``owner/name`` by the Hub's rules: ``[A-Za-z0-9._-]``, no leading/trailing ``-`` or ``.``, at most
    96 characters a part, no ``--`` or ``..``, not ending in ``.git``."""
    parts = text.split("/")
    if not 1 <= len(parts) <= 2 or not all(_HUB_PART.fullmatch(p) for p in parts):
        return False
    return "--" not in text and ".." not in text and not text.endswith(".git")


def _one_line(text: str) -> str:
    line = next((part.strip() for part in str(text).splitlines() if part.strip()), "")
    return line if len(line) <= _REASON_MAX else line[: _REASON_MAX - 3] + "..."


def read_hub(repo_id: str, revision: str | None) -> tuple[dict[str, Any], str, str]:
    """(config, label, path of the cached config.json) of Hub model ``repo_id`` at ``revision`` (None: main)."""
    try:
        from huggingface_hub import hf_hub_download
    except ImportError:
        raise PosencError(f"{repo_id!r} looks like a Hub id, but {HUB_INSTALL_HINT}") from None

    label = f"Hub {repo_id}@{revision or 'main'}"
    unreachable = _unreachable()
    # huggingface_hub logs a WARNING per retry when the Hub is unreachable; the failure is reported as one line
    import logging  # about 10 ms at start-up: only a Hub read needs it

    hub_log = logging.getLogger("huggingface_hub")
    level = hub_log.level
    hub_log.setLevel(logging.ERROR)
    try:
        path = hf_hub_download(repo_id, "config.json", revision=revision, library_name="posenc",
                               library_version=__version__, local_files_only=unreachable is not None)
    except Exception as exc:  # only library code runs in the try: every failure becomes one line
        if unreachable is not None:
            at = f" at revision {revision!r}" if revision else ""
            raise PosencError(f"{repo_id!r} is no local file or folder, and Hub model {repo_id!r}{at} is not in the "
                              f"local cache and the Hub cannot be reached ({unreachable}): check the name and the "
                              "connection, or pass a config.json path") from None
        raise _hub_error(exc, repo_id, revision) from None
    finally:
        hub_log.setLevel(level)
    return parse_json_object(read_bytes(path, label), f"{label} config.json"), label, path


#: How long the Hub's endpoint may take to accept a connection before it counts as unreachable. Without this, a
#: machine with no network waits out huggingface_hub's retries (24 s seen, DNS failing slowly) before a mistyped
#: local folder name (a valid Hub id) is reported; an answering Hub connects in well under a second.
REACH_TIMEOUT = 1.5


def _unreachable(timeout: float = REACH_TIMEOUT) -> str | None:
    """Why the Hub endpoint (``HF_ENDPOINT``) cannot be reached, or None when it accepted a TCP connection in time,
    or when the check does not apply: ``HF_HUB_OFFLINE`` (huggingface_hub then reads only the cache) or a proxy in the
    environment (the route is the proxy's, which a direct connection does not test)."""
    import os
    import socket
    import threading
    from urllib.parse import urlsplit

    from huggingface_hub import constants

    proxied = any(os.environ.get(k) for k in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY",
                                               "all_proxy"))
    if constants.HF_HUB_OFFLINE or proxied:
        return None
    url = urlsplit(constants.ENDPOINT)
    if not url.hostname:
        return None
    port = url.port or (443 if url.scheme == "https" else 80)
    outcome: list[str | None] = []

    def connect() -> None:  # in a thread: name resolution has no timeout of its own
        try:
            socket.create_connection((url.hostname, port), timeout=timeout).close()
            outcome.append(None)
        except OSError as exc:
            outcome.append(_one_line(exc.strerror or str(exc)) or exc.__class__.__name__)

    worker = threading.Thread(target=connect, daemon=True)
    worker.start()
    worker.join(timeout)
    if not outcome:
        return f"no connection to {url.hostname} within {timeout:g} s"
    return outcome[0] and f"{url.hostname}: {outcome[0]}"


def _chain(exc: BaseException) -> list[BaseException]:
    """``exc`` and its causes/contexts, nearest first."""
    seen: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and all(current is not s for s in seen):
        seen.append(current)
        current = current.__cause__ or current.__context__
    return seen


def _status(exc: BaseException) -> str:
    code = getattr(getattr(exc, "response", None), "status_code", None)
    return str(code) if code is not None else "error"


def _hub_error(exc: Exception, repo_id: str, revision: str | None) -> PosencError:
    """One line for a huggingface_hub failure: what went wrong with ``repo_id`` and what to do."""
    from huggingface_hub import errors as hf

    model = f"Hub model {repo_id!r}"
    at = f" at revision {revision!r}" if revision else ""
    if isinstance(exc, hf.GatedRepoError):  # a RepositoryNotFoundError: test it first
        return PosencError(f"{model} is gated: accept its licence on the Hub and set HF_TOKEN (or hf auth login)")
    if isinstance(exc, hf.RepositoryNotFoundError):
        return PosencError(f"{model} not found on the Hub, and no such local file or folder: check the id; for a "
                           "private repo set HF_TOKEN")
    if isinstance(exc, hf.RevisionNotFoundError):
        return PosencError(f"{model} has no revision {revision or 'main'!r}: give a branch, tag or commit that exists")
    if isinstance(exc, hf.LocalEntryNotFoundError | hf.OfflineModeIsEnabled):
        chain = _chain(exc)
        if any(isinstance(e, hf.OfflineModeIsEnabled) for e in chain):
            return PosencError(f"{model}{at} is not in the local cache and HF_HUB_OFFLINE is set (or the Hub cannot be "
                               "reached): download it once online, or pass a config.json path")
        http = next((e for e in chain if isinstance(e, hf.HfHubHTTPError)), None)
        if http is not None:
            return PosencError(f"cannot fetch config.json of {model}{at}: the Hub answered HTTP {_status(http)}, "
                               "and it is not in the local cache")
        if any(isinstance(e, hf.FileMetadataError) for e in chain):
            return PosencError(f"cannot fetch config.json of {model}{at}: the endpoint did not answer like the Hub "
                               "(check HF_ENDPOINT and proxy settings), and it is not in the local cache")
        reason = _one_line(str(chain[-1])) or chain[-1].__class__.__name__
        return PosencError(f"{model}{at} is not in the local cache and the Hub cannot be reached ({reason}): check the "
                           "connection, or pass a config.json path")
    if isinstance(exc, hf.EntryNotFoundError):
        return PosencError(f"{model} has no config.json{at}: pass a config.json path (a GGUF-only repo: download "
                           "the .gguf and pass its path)")
    if isinstance(exc, hf.HFValidationError):
        return PosencError(f"{repo_id!r} is not a valid Hub id: {_one_line(str(exc))}")
    if isinstance(exc, hf.HfHubHTTPError):
        detail = _one_line(exc.server_message or "")
        return PosencError(f"cannot fetch config.json of {model}{at}: HTTP {_status(exc)}"
                           + (f" ({detail})" if detail else ""))
    reason = (exc.strerror if isinstance(exc, OSError) and exc.strerror else None) or _one_line(str(exc))
    return PosencError(f"cannot fetch config.json of {model}{at}: {reason or exc.__class__.__name__}")
