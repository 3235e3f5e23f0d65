"""Exit codes and the one exception type the CLI turns into an ``error: ...`` line."""

from __future__ import annotations

from enum import IntEnum, unique


@unique
class ExitCode(IntEnum):
    """Every exit status posenc uses, in one place."""

    OK = 0
    CHECK_FAILED = 1  # a check ran and found a problem
    USAGE = 2  # bad input: the user can fix the command line or the file


class PosencError(ValueError):
    """A user mistake: the message names the bad value and what is allowed.

    Subclassing ValueError keeps the library usable without knowing posenc's types.
    """
