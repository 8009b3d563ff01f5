"""Which repeat of a case is running (`repeats: N` in oloproof.yaml), for a system that wants to vary with it.

The engine sets a `contextvars` variable around each call into the system, so `current_repeat()` inside
`retrieve`, `generate` or a plain callable returns 0, 1, … N−1 (0 when repeats are off). A system that
never asks is called exactly as before: nothing is added to its arguments.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

_REPEAT: ContextVar[int] = ContextVar("oloproof_repeat", default=0)


def current_repeat() -> int:
    """The 0-based index of the repeat being executed (0 outside a repeat, and in a run without repeats)."""
    return _REPEAT.get()


@contextmanager
def repeat_scope(index: int) -> Iterator[None]:
    """Calls made inside see `current_repeat() == index` (threads the engine starts copy the context)."""
    token = _REPEAT.set(index)
    try:
        yield
    finally:
        _REPEAT.reset(token)
