"""One process at a time in a run folder (``eval run --out``, ``experiment ... --out``).

The lock is ``fcntl.flock`` on ``FOLDER/.posenc.lock``. The kernel drops a flock when its process exits, however it
exits (``kill -9`` included), so a lock left by a dead process never blocks a rerun and there is no stale-lock
cleanup, no timeout and no pid guessing. The lock file itself stays (it holds the last holder's pid, for the
message): removing it would let a second process lock a new file while the first still holds the old one.

flock is advisory and per open file: it keeps posenc processes apart, not other programs; on NFS it depends on the
server. Windows is not a target; without ``fcntl`` the folder is simply not locked.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

from posenc_cli.errors import PosencError

LOCK_NAME = ".posenc.lock"


@contextlib.contextmanager
def hold(folder: Path, option: str = "--out") -> Iterator[None]:
    """Create ``folder`` if needed and hold its lock for the ``with`` block.

    Another process holding it is one PosencError naming the folder and that process (exit 2); so is a folder
    that cannot be created or a path that is not a folder.
    """
    try:
        import fcntl
    except ImportError:  # not POSIX (Windows): no flock, run unlocked
        yield
        return
    if folder.exists() and not folder.is_dir():
        raise PosencError(f"{option} {folder}: exists and is not a folder")
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd = os.open(folder / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise PosencError(f"{option} {folder}: cannot use it ({exc.strerror or exc.__class__.__name__})") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
            who = f"process {holder}" if holder.isdigit() else "another process"
            raise PosencError(f"{option} {folder}: {who} is using this folder; wait for it to finish or give another "
                              f"{option} folder") from None
        except OSError as exc:  # a file system without flock
            raise PosencError(f"{option} {folder}: cannot lock it ({exc.strerror or exc.__class__.__name__})"
                              ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield
    finally:
        os.close(fd)  # closing drops the lock
