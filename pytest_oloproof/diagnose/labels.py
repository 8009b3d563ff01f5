"""The words of a diagnosis document: its labels, factors and interventions, and how a value counts.

Shared by the diagnoser (diagnosis.py), which writes the document, and report/, which shows it; light
to import, so rendering a stored diagnosis does not load the engine.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

REPLAYS = ("top-k", "reranker", "token-budget")

#: label -> (reason, strength, text of its output line); the order is the order of the output
LABELS: dict[str, tuple[str, str, str]] = {
    "RETRIEVAL_MISS": (
        "relevant_not_retrieved",
        "intervention_recovery",
        "recovered; no relevant evidence was retrieved",
    ),
    "RANKED_OUT": (
        "relevant_ranked_below_top_k",
        "intervention_recovery",
        "recovered; relevant evidence was retrieved but ranked below the top-k cut",
    ),
    "CONTEXT_ASSEMBLY_LOSS": (
        "relevant_dropped_from_context",
        "intervention_recovery",
        "recovered; relevant evidence within top-k was left out of the context",
    ),
    "CONTEXT_DISTRACTION": (
        "recovered_without_other_passages",
        "intervention_recovery",
        "recovered; relevant evidence was in the context, and recovered without the other passages",
    ),
    "RECOVERED_UNLABELED": (
        "no_relevance_labels",
        "intervention_recovery",
        "recovered; the case has no relevance labels to place the failure",
    ),
    "GENERATION_FAILURE": (
        "fails_with_gold_context",
        "intervention_non_recovery",
        "still failed with the gold context",
    ),
}
UNSTABLE = "UNSTABLE"
NOT_DIAGNOSED = "NOT_DIAGNOSED"

#: label -> (implicated factor, candidate experiments); RECOVERED_UNLABELED implicates nothing
FACTORS: dict[str, tuple[str, tuple[str, ...]]] = {
    "CONTEXT_ASSEMBLY_LOSS": ("context budget", ("a larger token budget", "smaller chunks")),
    "RANKED_OUT": ("ranking cut", ("a larger top_k", "a reranker")),
    "RETRIEVAL_MISS": ("retrieval", ("a larger depth", "a different retriever or index")),
    "CONTEXT_DISTRACTION": ("other passages in the context", ("a smaller top_k", "a reranker")),
    "GENERATION_FAILURE": ("generation", ("a change of prompt or model",)),
}
#: which gold-context labels a replay is expected to recover ("Confirmed under …")
CONFIRMS: dict[str, tuple[str, ...]] = {
    "top-k": ("RANKED_OUT",),
    "reranker": ("RANKED_OUT", "CONTEXT_ASSEMBLY_LOSS"),
    "token-budget": ("CONTEXT_ASSEMBLY_LOSS",),
}
HYPOTHESIS = "This is a hypothesis to test, not an established cause."


def observed(v: Mapping[str, Any]) -> bool:
    return v.get("status") == "observed"


def passed(v: Mapping[str, Any]) -> bool:
    return v.get("status") == "observed" and float(v.get("value", 0.0)) >= 1.0


def failed(v: Mapping[str, Any]) -> bool:
    return v.get("status") == "observed" and float(v.get("value", 1.0)) < 1.0


def all_missing(doc: Mapping[str, Any]) -> bool:
    """Whether the diagnosis measured nothing: every selected case lacks a value under the
    intervention (for a replay, under the replay) or in its control."""
    n = (doc.get("counts") or {}).get("selected", 0)
    if not n:
        return False
    keys = ("replay", "replay_control") if doc["intervention"]["name"] in REPLAYS else ("intervention", "control")
    return any((doc.get("missing") or {}).get(k, {}).get("count") == n for k in keys)
