"""Exceptions shared by the core, the plugin and the CLI, and the one table of exit statuses."""

from __future__ import annotations

import enum


class ExitCode(enum.IntEnum):
    """Every exit status `pytest --oloproof` and `oloproof` return (the README's "Exit codes" table)."""

    OK = 0  # success; every case passed; the gate's PASS
    FAILED = 1  # some cases failed (no policy); a judge validation that did not pass
    USAGE = 2  # usage, configuration, case file, unreadable record, unwritable store: nothing ran
    BLOCK = 3  # the release gate refused the candidate
    INTERNAL = 4  # a bug in Oloproof
    NO_TESTS = 5  # pytest's own "no tests collected" (`oloproof run -k nomatch`), passed through as is
    #: stdout closed by its reader (`oloproof runs | head -1`): 128 + SIGPIPE, as a shell reports a tool the
    #: signal ended; output stops quietly. `oloproof run` keeps its own exit code.
    PIPE = 141


class OloproofError(Exception):
    """Base class for errors Oloproof reports to the user."""


class ConfigError(OloproofError):
    """Invalid configuration (oloproof.yaml, compare.yaml, CLI options): exit 2.

    `key` names the setting at fault when the raiser knows it but not where it sits
    in the file (a provider's `object`, a judge's `prompt`); whoever knows the
    location (the evaluator registry) prefixes `file:line: key.path:`.
    """

    def __init__(self, message: str, *, key: str | None = None) -> None:
        super().__init__(message)
        self.key = key


class CaseFileError(OloproofError):
    """Invalid case files; raised before anything runs or is written."""

    def __init__(self, errors: list[str]) -> None:
        self.errors = list(errors)
        super().__init__("invalid case file(s):\n  " + "\n  ".join(self.errors))


class ContractError(OloproofError):
    """A system broke the stage contract for one case; `stage` is the stage whose output broke it."""

    def __init__(self, message: str, *, stage: str | None = None) -> None:
        super().__init__(message)
        self.stage = stage


class StoreError(OloproofError):
    """Unknown or unreadable ids in the store: exit 2."""


class WriteError(OloproofError, OSError):
    """A file Oloproof must write cannot be written (a full disk, a read-only folder, a FIFO in the way): exit 2.

    The message names the path (or the store) and the cause. Also an OSError, so code that
    tolerates a failed write of something optional (an HTML page) goes on catching it.
    """


class Transient(Exception):
    """Raise (or subclass) this from a stage to ask Oloproof to retry the case (`retries`)."""
