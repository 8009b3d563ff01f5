"""Ctrl-C and SIGTERM during a run: SIGTERM becomes an interruption, and a stretch of work can hold them.

A run stopped by Ctrl-C records the cases that completed, judging what was not judged ahead; a
second Ctrl-C records them with only the verdicts already judged. SIGTERM (`Terminated`) asks no
judge and waits for none.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Generator
from typing import Any


class Terminated(KeyboardInterrupt):
    """SIGTERM on the controller: an interruption (exit 2) that asks no more judges and waits on none."""


def sigterm_to_interrupt(signum: int, frame: Any) -> None:
    raise Terminated("SIGTERM")


class NotedInterrupts:
    """Inside the block, Ctrl-C (and a SIGTERM that Oloproof turns into one) is noted, not raised.

    For work that must finish whole once started, such as writing a completed case's record; `raised()`
    opens a stretch inside it where they raise as usual (asking a judge). `noted` lists the signals that
    arrived. Only the main thread can set handlers: elsewhere nothing changes.
    """

    def __init__(self) -> None:
        self.noted: list[int] = []
        self._previous: dict[int, Any] = {}

    def _note(self, signum: int, frame: Any) -> None:
        self.noted.append(signum)

    def __enter__(self) -> NotedInterrupts:
        if threading.current_thread() is threading.main_thread():
            if signal.getsignal(signal.SIGINT) is signal.default_int_handler:  # not ignored, not the user's own
                self._previous[signal.SIGINT] = signal.signal(signal.SIGINT, self._note)
            if signal.getsignal(signal.SIGTERM) is sigterm_to_interrupt:
                self._previous[signal.SIGTERM] = signal.signal(signal.SIGTERM, self._note)
        return self

    def __exit__(self, *exc: object) -> None:
        self._restore()

    def _restore(self) -> None:
        """The handlers from before the block: the signals raise again."""
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)

    def hold(self) -> None:
        """Note the signals again (after `raised()`; also when a KeyboardInterrupt cut its clean-up short)."""
        for signum in self._previous:
            signal.signal(signum, self._note)

    @contextlib.contextmanager
    def raised(self) -> Generator[None, None, None]:
        """A stretch where the signals raise KeyboardInterrupt again."""
        try:
            self._restore()
            yield
        finally:
            self.hold()


def drop_lineless_frames(exc: BaseException) -> None:
    """Unlink traceback entries that have no line number from `exc` and the exceptions it chains.

    A signal can land on an instruction CPython gives no line (the clean-up code of a `with` block,
    say): the traceback entry's `tb_lineno` is then None, and pytest's rendering of the interrupt
    fails on it (`None - 1`), turning Ctrl-C into an internal error with exit 1 instead of 2.
    The entry's frame has no source line to show anyway, so it is skipped; the first entry (the
    outermost frame, pytest's own) always has one.
    """
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        entry = current.__traceback__
        while entry is not None:
            following = entry.tb_next
            while following is not None and following.tb_lineno is None:
                following = following.tb_next
            entry.tb_next = following
            entry = following
        current = current.__cause__ or current.__context__


def install_sigterm() -> bool:
    """Turn SIGTERM into `Terminated` when nothing else handles it; True when installed (see `restore_sigterm`)."""
    try:
        if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
            signal.signal(signal.SIGTERM, sigterm_to_interrupt)
            return True
    except ValueError:  # not the main thread
        pass
    return False


def restore_sigterm() -> None:
    """SIGTERM's default again (in-process sessions, `pytest.main`, must not leak the handler)."""
    try:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
    except ValueError:
        pass
