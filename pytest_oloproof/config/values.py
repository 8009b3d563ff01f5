"""Value parsers shared by the pytest options and the command line (each face wraps the error its way)."""

from __future__ import annotations


def parse_positive_int(value: str) -> int:
    """An integer >= 1, or ValueError with the message both faces print."""
    try:
        n = int(value)
    except ValueError:
        n = 0
    if n < 1:
        raise ValueError(f"expected a positive integer, got {value!r}")
    return n
