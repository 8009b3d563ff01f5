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


def parse_shard(value: str) -> tuple[int, int]:
    """`I/N` (shard I of N, I counted from 1) as (I, N), or ValueError saying what a shard looks like."""
    head, sep, tail = value.strip().partition("/")
    try:
        index, count = int(head), int(tail)
    except ValueError:
        index = count = 0
    if not sep or count < 1:
        raise ValueError(f"expected I/N (shard I of N, e.g. 1/4), got {value!r}")
    if not 1 <= index <= count:
        raise ValueError(
            f"shard {value!r}: I must be between 1 and N (shards are counted from 1: 1/{count} … {count}/{count})"
        )
    return index, count
