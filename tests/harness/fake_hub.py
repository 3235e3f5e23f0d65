"""A fake of the Hugging Face Hub's file endpoint on 127.0.0.1, with HTTP Range requests (a helper module, not a test).

It answers what ``huggingface_hub`` asks when it resolves and reads a file: ``HEAD`` and ``GET`` on
``/{repo_id}/resolve/{revision}/{filename}``. A 200 carries ``X-Repo-Commit`` (the commit the revision resolves
to), ``ETag`` (the file's git blob sha, which names the blob in the cache) and ``Content-Length``; a ``GET`` with
``Range: bytes=A-B`` is a 206 with ``Content-Range`` and those bytes only, read from the file at that offset, so a
100 GB sparse file behind a real header costs the bytes asked for. Failures carry the ``X-Error-Code`` header
huggingface_hub maps to its exception classes (RepoNotFound, GatedRepo, RevisionNotFound, EntryNotFound); any
other path is a 404. Every request is recorded with its Range, and the body bytes each answer sent.
"""

from __future__ import annotations

import hashlib
import os
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import unquote

SHA = "0123456789abcdef0123456789abcdef01234567"
_RESOLVE = re.compile(r"^/(?P<repo>[^?]+?)/resolve/(?P<revision>[^/?]+)/(?P<file>[^?]+)")
_RANGE = re.compile(r"^bytes=(?P<start>\d+)-(?P<end>\d*)$")


@dataclass
class HubRepo:
    files: dict[str, bytes | Path]  # a Path is served from disk (a sparse file of any size)
    sha: str = SHA
    branches: tuple[str, ...] = ("main",)
    gated: bool = False
    fail: dict[str, int] = field(default_factory=dict)  # filename -> HTTP status every GET of it answers
    hub_headers: bool = True  # False: answer like a plain web server (no X-Repo-Commit)


@dataclass
class Request:
    method: str
    path: str
    range: str | None
    sent: int = 0  # body bytes of the answer


@dataclass
class FakeHub:
    repos: dict[str, HubRepo]
    requests: list[Request] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def answer(self, method: str, raw_path: str, range_header: str | None) -> tuple[int, dict[str, str], Any, int]:
        """(status, headers, body source, body length): the body source is bytes or (path, offset)."""
        match = _RESOLVE.match(raw_path)
        if match is None:
            return 404, {}, b"", 0
        repo = self.repos.get(unquote(match["repo"]))
        revision, filename = unquote(match["revision"]), unquote(match["file"])
        if repo is None:
            return 401, {"X-Error-Code": "RepoNotFound", "X-Error-Message": "Repository not found"}, b"", 0
        if repo.gated:
            return 403, {"X-Error-Code": "GatedRepo", "X-Error-Message": "Access to model is restricted"}, b"", 0
        if revision not in repo.branches and revision != repo.sha:
            return 404, {"X-Error-Code": "RevisionNotFound", "X-Error-Message": "Invalid rev id"}, b"", 0
        commit = {"X-Repo-Commit": repo.sha} if repo.hub_headers else {}
        if filename not in repo.files:
            return 404, {**commit, "X-Error-Code": "EntryNotFound", "X-Error-Message": "Entry not found"}, b"", 0
        if method == "GET" and filename in repo.fail:
            return repo.fail[filename], commit, b"", 0
        spec = repo.files[filename]
        size = spec.stat().st_size if isinstance(spec, Path) else len(spec)
        # the git blob sha of a file served from memory (what the Hub sends for a small file); a name-based one else
        etag = (hashlib.sha1(b"blob %d\0" % size + spec).hexdigest() if isinstance(spec, bytes)
                else hashlib.sha1(f"{filename}:{size}".encode()).hexdigest())
        headers = {**commit, "ETag": f'"{etag}"', "Accept-Ranges": "bytes"}
        start, end, status = 0, size - 1, 200
        found = _RANGE.match(range_header or "")
        if found is not None and method == "GET":
            start = int(found["start"])
            end = min(int(found["end"]) if found["end"] else size - 1, size - 1)
            if start >= size:
                return 416, {**headers, "Content-Range": f"bytes */{size}"}, b"", 0
            status = 206
            headers["Content-Range"] = f"bytes {start}-{end}/{size}"
        length = end - start + 1
        source: Any = (spec, start) if isinstance(spec, Path) else spec[start:end + 1]
        return status, headers, source, length


def _body(source: Any, length: int) -> bytes:
    if isinstance(source, bytes):
        return source
    path, offset = source
    with open(path, "rb") as fh:
        return os.pread(fh.fileno(), length, offset)


@contextmanager
def serve(hub: FakeHub) -> Iterator[str]:
    """Run ``hub`` on 127.0.0.1 (a free port) in a thread; yields its URL, stops the server on exit."""

    class Handler(BaseHTTPRequestHandler):
        def _reply(self, with_body: bool) -> None:
            record = Request(self.command, self.path, self.headers.get("Range"))
            with hub.lock:
                hub.requests.append(record)
            status, headers, source, length = hub.answer(self.command, self.path, record.range)
            self.send_response(status)
            for name, value in headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(length))
            self.end_headers()
            if with_body and length:
                body = _body(source, length)
                self.wfile.write(body)
                record.sent = len(body)

        def do_HEAD(self) -> None:  # noqa: N802 - http.server's naming
            self._reply(False)

        def do_GET(self) -> None:  # noqa: N802
            self._reply(True)

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's signature
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
