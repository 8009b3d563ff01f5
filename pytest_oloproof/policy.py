"""compare.yaml (SPEC §10): the release policy and its decision rules.

A policy lists decisions, each a statistical test of one criterion's difference
(candidate − baseline, in percentage points) against a margin. The rules are
small strategy objects, one per test, applied to the *unrounded* interval
bounds with strict inequalities, so a bound that merely touches the margin
never passes.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Literal

import yaml
from pydantic import Field, field_validator, model_validator

from .config import Strict, close_spelling, key_path, load_yaml_model, where_in
from .errors import ConfigError
from .stats import mean_pairs_needed_without_change, pairs_needed_without_change

PASS, FAIL, INSUFFICIENT = "PASS", "FAIL", "INSUFFICIENT_EVIDENCE"

# INSUFFICIENT_EVIDENCE reasons (SPEC §10)
INTERVAL_OVERLAPS_MARGIN = "interval_overlaps_margin"
TOO_FEW_PAIRS = "too_few_pairs"
MISSING_EXCEEDS_LIMIT = "missing_exceeds_limit"
JUDGE_NOT_VALIDATED = "judge_not_validated"
JUDGES_DIFFER = "judges_differ"  # the two runs were judged by different judges: the difference measures them
CASES_CHANGED = "cases_changed"  # changed_cases: fail, and a case's input or expected data changed


class DecisionRule(ABC):
    """One statistical test: how an interval (in points) and a margin become an outcome."""

    test: ClassVar[str] = ""
    margin_required: ClassVar[bool] = True

    def interval_confidence(self, confidence: float) -> float:
        """Confidence of the interval this test reads (the policy's confidence by default)."""
        return confidence

    @abstractmethod
    def decide(self, low: float, high: float, margin: float) -> tuple[str, str]:
        """(outcome, reason) for unrounded bounds ``low``/``high`` and ``margin``, all in points."""

    def pairs_needed(self, margin: float, confidence: float, kind: str = "rate") -> int | None:
        """Pairs needed to pass with no changed verdict, or None if that can never pass.

        Derived from the interval the comparison uses: the exact paired interval for a rate,
        the paired graded interval for a mean (the betting mixture, or Gaffke's from 100
        pairs; wider, so more pairs are needed).
        """
        if margin <= 0 or margin >= 100:
            return None
        conf = self.interval_confidence(confidence)
        if kind == "mean":
            return mean_pairs_needed_without_change(margin / 100.0, conf)
        return pairs_needed_without_change(margin / 100.0, conf)


class NonInferiority(DecisionRule):
    """The candidate is not worse than the baseline by ``margin`` points or more."""

    test = "non-inferiority"

    def decide(self, low: float, high: float, margin: float) -> tuple[str, str]:
        if low > -margin:
            return PASS, "lower_bound_above_minus_margin"
        if high < -margin:
            return FAIL, "upper_bound_below_minus_margin"
        return INSUFFICIENT, INTERVAL_OVERLAPS_MARGIN


class Superiority(DecisionRule):
    """The candidate is better than the baseline by more than ``margin`` points (default 0)."""

    test = "superiority"
    margin_required = False

    def decide(self, low: float, high: float, margin: float) -> tuple[str, str]:
        if low > margin:
            return PASS, "lower_bound_above_margin"
        if high < margin:
            return FAIL, "upper_bound_below_margin"
        return INSUFFICIENT, INTERVAL_OVERLAPS_MARGIN

    def pairs_needed(self, margin: float, confidence: float, kind: str = "rate") -> int | None:
        # With no changed verdict the difference is 0, whose interval always reaches below
        # any margin >= 0: no number of unchanged pairs can establish superiority.
        return None


class Equivalence(DecisionRule):
    """Two one-sided tests (TOST): the (1 − 2α) interval lies inside ±``margin`` points."""

    test = "equivalence"

    def interval_confidence(self, confidence: float) -> float:
        return 1.0 - 2.0 * (1.0 - confidence)

    def decide(self, low: float, high: float, margin: float) -> tuple[str, str]:
        if -margin < low and high < margin:
            return PASS, "interval_within_margins"
        if high < -margin or low > margin:
            return FAIL, "interval_outside_margins"
        return INSUFFICIENT, INTERVAL_OVERLAPS_MARGIN


RULES: dict[str, DecisionRule] = {r.test: r for r in (NonInferiority(), Superiority(), Equivalence())}
TESTS = tuple(RULES)


class Decision(Strict):
    """One entry of ``decisions:``."""

    name: str = Field(min_length=1)
    criterion: str = Field(min_length=1)
    test: str
    margin: float | None = Field(default=None, ge=0, lt=100, description="points (percentage points)")

    @field_validator("test")
    @classmethod
    def _known_test(cls, v: str) -> str:
        if v not in RULES:
            raise ValueError(f"unknown test {v!r}; use one of {', '.join(TESTS)}{close_spelling(v, TESTS)}")
        return v

    @model_validator(mode="after")
    def _margin_rules(self) -> Decision:
        rule = RULES[self.test]
        if self.margin is None:
            if rule.margin_required:
                raise ValueError(
                    f"margin is required for {self.test} (in points, e.g. margin: 5.0 for five percentage points)"
                )
            self.margin = 0.0
        elif rule.margin_required and self.margin <= 0:
            raise ValueError(f"margin must be greater than 0 points for {self.test}, got {self.margin:g}")
        return self

    @property
    def rule(self) -> DecisionRule:
        return RULES[self.test]


class Policy(Strict):
    """A whole compare.yaml."""

    decisions: list[Decision]
    min_pairs: int = Field(default=10, ge=1)
    missing: Literal["fail", "exclude"] = "fail"
    #: a case whose input or expected data changed between the runs: left out of every difference
    #: (exclude), or the gate blocks with reason cases_changed (fail)
    changed_cases: Literal["exclude", "fail"] = "exclude"
    confidence: float | None = Field(default=None, gt=0.5, lt=1.0)

    @field_validator("decisions")
    @classmethod
    def _unique_names(cls, v: list[Decision]) -> list[Decision]:
        if not v:
            raise ValueError("a policy needs at least one decision (with none, every candidate would pass)")
        seen: set[str] = set()
        for d in v:
            if d.name in seen:
                raise ValueError(f"two decisions are named {d.name!r}; give each decision its own name")
            seen.add(d.name)
        return v


@dataclass(frozen=True)
class LoadedPolicy:
    """A validated policy with the file it came from (for error locations)."""

    path: Path
    policy: Policy
    raw: dict[str, Any]
    node: yaml.Node | None = None  # the composed YAML, for locating errors found after loading

    def snapshot(self) -> dict[str, Any]:
        """The policy as applied (defaults filled in), for the comparison record."""
        return {"path": str(self.path), **self.policy.model_dump()}

    def error_at(self, loc: Sequence[int | str], message: str) -> ConfigError:
        """A ConfigError located at a key path of the policy file."""
        return ConfigError(f"{where_in(self.path, self.node, loc)}: {key_path(loc)}: {message}")

    def check_criteria(
        self, available: Sequence[str], *, why: str = "both runs must record it", listing: str = "criteria in both runs"
    ) -> None:
        """Raise a located ConfigError for a decision naming a criterion the runs do not share.

        `why` and `listing` word the error for a narrower check (the baseline's criteria alone,
        before the candidate runs).
        """
        for i, d in enumerate(self.policy.decisions):
            if d.criterion not in available:
                known = ", ".join(available) or "none"
                raise self.error_at(
                    ["decisions", i, "criterion"],
                    f"unknown criterion {d.criterion!r}: {why} ({listing}: {known})"
                    f"{close_spelling(d.criterion, list(available))}",
                )


def load_policy(path: str | Path, option: str = "--policy") -> LoadedPolicy:
    """Read and validate compare.yaml; raises ConfigError naming file:line, key path and the fix."""
    p = Path(path)
    if p.is_dir():
        raise ConfigError(f"{option}: {p} is a folder; give the path of a policy file such as compare.yaml")
    if not p.is_file():
        raise ConfigError(f"{option}: {p} does not exist")
    p = p.resolve()
    policy, raw, node = load_yaml_model(p, Policy, expand=False)
    return LoadedPolicy(p, policy, raw, node)
