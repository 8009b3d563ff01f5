"""Context assembly: top-k cut, then a token budget walked in retrieval order."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Assembly:
    """Which positions entered the context, and which top-k positions were dropped and why."""

    kept: tuple[int, ...]
    dropped: tuple[tuple[int, str], ...]

    @property
    def truncated(self) -> bool:
        return bool(self.dropped)


def assemble(n_candidates: int, top_k: int | None, token_budget: int | None, tokens: Sequence[int | None]) -> Assembly:
    """Keep the first top_k candidates whose tokens still fit the running budget.

    A passage that would push the total past the budget is dropped; later ones
    that fit are kept. Positions are 1-based retrieval positions.
    """
    cut = n_candidates if top_k is None else min(top_k, n_candidates)
    kept: list[int] = []
    dropped: list[tuple[int, str]] = []
    total = 0
    for pos in range(1, cut + 1):
        if token_budget is not None:
            t = tokens[pos - 1]
            if t is None:
                raise ValueError("token counts are required when token_budget is set")
            if total + t > token_budget:
                dropped.append((pos, "token_budget"))
                continue
            total += t
        kept.append(pos)
    return Assembly(tuple(kept), tuple(dropped))
