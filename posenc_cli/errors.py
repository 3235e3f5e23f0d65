"""Exit codes and the exception types the CLI turns into one ``error: ...`` line.

Every exit status posenc uses:

* ``0`` (:attr:`ExitCode.OK`): done; for a check, every check passed. Also a reader that closed stdout early
  (``posenc verify | head -1``): see :class:`ExitCode`.
* ``1`` (:attr:`ExitCode.CHECK_FAILED`): a check ran and found a problem (``verify``, ``check``, ``inspect --lint``,
  ``eval`` verdicts, ``eval probe --expect-ctx``); also a run stopped by Ctrl-C (``error: aborted``).
* ``2`` (:attr:`ExitCode.USAGE`): bad input the user can fix in the command line or a file; raised as
  :class:`PosencError` (and by the argument parser for unknown options).
* ``3`` (:attr:`ExitCode.COULD_NOT_RUN`): the input was fine but the work could not be done or judged: a server
  that cannot be reached or keeps failing, an eval report with a test "not run" (cells missing, no prompt
  log-probabilities, no baseline, a plan with no test), a ``check`` where some engine was not compared (not
  modelled) and none differs, a write the device refused (``> /dev/full``, ``-o /dev/full``: a full disk, an I/O
  error; :func:`posenc_cli.files.write_error`); raised as :class:`CouldNotRun`, or returned by the command. A path
  the user may not write (no permission, a missing folder) is ``2``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from enum import IntEnum, unique

_FIELD = re.compile(r"\{(\w+)\}")


@unique
class ExitCode(IntEnum):
    """Every exit status posenc uses, in one place (the module docstring says when each is used).

    A closed stdout (``BrokenPipeError``) exits with ``OK``: the reader asked for no more output, as ``head``
    does, and that is neither a failed check nor bad input. The status then says nothing about output the reader
    did not take; read all of it (or use ``--json`` into a file) when the status matters.
    """

    OK = 0
    CHECK_FAILED = 1  # a check ran and found a problem
    USAGE = 2  # bad input: the user can fix the command line or the file
    COULD_NOT_RUN = 3  # the input was fine; a server could not be reached, or a test could not be judged


class PosencError(ValueError):
    """A user mistake: the message names the bad value and what is allowed (exit 2).

    Subclassing ValueError keeps the library usable without knowing posenc's types.

    ``fields`` are the inputs the message is about, by their library names (``factor``, ``beta_fast``): the message
    writes each as ``{name}``. ``str(error)`` reads them as those names (what a library caller passed); the command
    line renders them as the options it took them from (:meth:`render`), so the core never names a CLI flag.
    """

    def __init__(self, message: str, *fields: str) -> None:
        self.template = message
        self.fields = fields
        super().__init__(self.render(str))

    def render(self, name_of: Callable[[str], str]) -> str:
        """The message with each field written as ``name_of(field)`` (the CLI: the option it came from)."""
        if not self.fields:
            return self.template
        wanted = set(self.fields)
        return _FIELD.sub(lambda m: name_of(m[1]) if m[1] in wanted else m[0], self.template)


class CouldNotRun(PosencError):
    """The work could not be done, through no fault of the input: a server unreachable or failing (exit 3).

    A PosencError, so code that catches PosencError (one ``error:`` line) still catches it.
    """
