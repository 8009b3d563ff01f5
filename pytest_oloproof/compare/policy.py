"""The release policy: compare.yaml / release.yaml and its decision rules.

A policy lists decisions. A comparison decision tests one criterion's difference
(candidate − baseline, in percentage points) against a margin; a single-run
decision (`minimum`, `maximum`, `max-failures`) tests one run's criterion against
a threshold, a fraction in [0, 1]. The rules are small strategy objects, one per
test, applied to the *unrounded* interval bounds with strict inequalities, so a
bound that merely touches the margin or threshold never passes.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Literal

import yaml
from pydantic import Field, field_validator, model_validator

from pytest_oloproof.config.settings import Strict, close_spelling, key_path, load_yaml_model, where_in
from pytest_oloproof.errors import ConfigError
from pytest_oloproof.stats.intervals import mean_pairs_needed_without_change, pairs_needed_without_change

from .words import MAX_FAILURES

PASS, FAIL, INSUFFICIENT = "PASS", "FAIL", "INSUFFICIENT_EVIDENCE"

# INSUFFICIENT_EVIDENCE reasons
INTERVAL_OVERLAPS_MARGIN = "interval_overlaps_margin"
TOO_FEW_PAIRS = "too_few_pairs"
MISSING_EXCEEDS_LIMIT = "missing_exceeds_limit"
JUDGE_NOT_VALIDATED = "judge_not_validated"
JUDGES_DIFFER = "judges_differ"  # the two runs were judged by different judges: the difference measures them
CASES_CHANGED = "cases_changed"  # changed_cases: fail, and a case's input or expected data changed
INTERVAL_OVERLAPS_THRESHOLD = "interval_overlaps_threshold"
MISSING_COULD_EXCEED_LIMIT = "missing_could_exceed_limit"  # max-failures, missing: bound
NO_OBSERVATIONS = "no_observations"
NO_CORRECTING_LABELS = "no_correcting_labels"  # corrected: true, and no labels imported for a random sample
CORRECTED_RATE_MISSING = "corrected_rate_missing"  # labels stored, but the corrected rate cannot be computed


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


class RunRule(ABC):
    """A single-run test: how one run's interval (fractions) and a threshold become an outcome."""

    test: ClassVar[str] = ""

    @abstractmethod
    def decide(self, low: float, high: float, threshold: float) -> tuple[str, str]:
        """(outcome, reason) for unrounded bounds ``low``/``high`` and ``threshold``, all fractions."""


class Minimum(RunRule):
    """The criterion is above ``threshold``: PASS when the lower bound is, FAIL when the upper bound is below."""

    test = "minimum"

    def decide(self, low: float, high: float, threshold: float) -> tuple[str, str]:
        if low > threshold:
            return PASS, "lower_bound_above_threshold"
        if high < threshold:
            return FAIL, "upper_bound_below_threshold"
        return INSUFFICIENT, INTERVAL_OVERLAPS_THRESHOLD


class Maximum(RunRule):
    """The criterion is below ``threshold``: PASS when the upper bound is, FAIL when the lower bound is above."""

    test = "maximum"

    def decide(self, low: float, high: float, threshold: float) -> tuple[str, str]:
        if high < threshold:
            return PASS, "upper_bound_below_threshold"
        if low > threshold:
            return FAIL, "lower_bound_above_threshold"
        return INSUFFICIENT, INTERVAL_OVERLAPS_THRESHOLD


RUN_RULES: dict[str, RunRule] = {r.test: r for r in (Minimum(), Maximum())}
RUN_TESTS = (*RUN_RULES, MAX_FAILURES)
TESTS = (*RULES, *RUN_TESTS)


class Decision(Strict):
    """One entry of ``decisions:``: a comparison test (with a margin) or a single-run test."""

    name: str = Field(min_length=1)
    criterion: str = Field(min_length=1)
    test: str
    margin: float | None = Field(default=None, ge=0, lt=100, description="points (percentage points)")
    threshold: float | None = Field(default=None, description="a fraction in [0, 1] (minimum, maximum)")
    max_failures: int | None = Field(default=None, ge=0, description="max-failures: observed failures allowed")
    #: decide on the judge-corrected rate (imported labels of a random sample), not the judge's own rate
    corrected: bool = False

    @field_validator("test")
    @classmethod
    def _known_test(cls, v: str) -> str:
        if v not in TESTS:
            raise ValueError(f"unknown test {v!r}; use one of {', '.join(TESTS)}{close_spelling(v, TESTS)}")
        return v

    @field_validator("threshold")
    @classmethod
    def _fraction(cls, v: float | None) -> float | None:
        if v is None:
            return v
        if v != v or not 0.0 <= v <= 1.0:
            hint = f"; did you mean {v / 100:.2f}?" if 1.0 < v <= 100.0 else ""
            raise ValueError(f"threshold is a fraction in [0, 1] (0.70 for 70%), got {v:g}{hint}")
        return v

    @property
    def single_run(self) -> bool:
        """Whether this decision tests one run (minimum, maximum, max-failures), not a comparison."""
        return self.test in RUN_TESTS

    @model_validator(mode="after")
    def _margin_rules(self) -> Decision:
        if self.single_run:
            return self._run_rules()
        if self.corrected:
            raise ValueError(f"corrected: true belongs to the tests {' and '.join(RUN_RULES)}; not {self.test}")
        for key in ("threshold", "max_failures"):
            if getattr(self, key) is not None:
                raise ValueError(
                    f"{key} belongs to single-run tests ({', '.join(RUN_TESTS)}); {self.test} compares two runs "
                    "and takes margin (points)"
                )
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

    def _run_rules(self) -> Decision:
        if self.corrected and self.test not in RUN_RULES:
            raise ValueError(
                f"corrected: true reads a judge-corrected rate's interval, which {self.test} does not; "
                f"use it with {' or '.join(RUN_RULES)}"
            )
        if self.margin is not None:
            raise ValueError(
                f"margin belongs to comparison tests; {self.test} tests one run"
                + (" and takes threshold (a fraction in [0, 1])" if self.test != MAX_FAILURES else "")
            )
        if self.test == MAX_FAILURES:
            if self.threshold is not None:
                raise ValueError(
                    "max-failures takes max_failures (a count of cases, e.g. max_failures: 0), not threshold"
                )
            if self.max_failures is None:
                raise ValueError("max_failures is required for max-failures (a count of cases, e.g. max_failures: 0)")
        else:
            if self.max_failures is not None:
                raise ValueError(f"max_failures belongs to max-failures; {self.test} takes threshold")
            if self.threshold is None:
                raise ValueError(f"threshold is required for {self.test} (a fraction in [0, 1], e.g. threshold: 0.70)")
        return self

    @property
    def rule(self) -> DecisionRule:
        return RULES[self.test]

    @property
    def run_rule(self) -> RunRule:
        return RUN_RULES[self.test]


BlockOn = Literal["FAIL", "INSUFFICIENT_EVIDENCE"]


def _default_block_on() -> list[BlockOn]:
    return ["FAIL", "INSUFFICIENT_EVIDENCE"]


class Policy(Strict):
    """A whole compare.yaml."""

    decisions: list[Decision]
    min_pairs: int = Field(default=10, ge=1)
    #: missing cases: the decision is INSUFFICIENT_EVIDENCE (fail), decided on the observed ones
    #: (exclude), or decided on the interval with each missing case at its worst value (bound)
    missing: Literal["fail", "exclude", "bound"] = "fail"
    #: the outcomes that block the release (a team may gate on FAIL only)
    block_on: list[BlockOn] = Field(default_factory=_default_block_on)
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

    @field_validator("block_on")
    @classmethod
    def _some_block(cls, v: list[str]) -> list[str]:
        if not v:
            raise ValueError("block_on needs FAIL, INSUFFICIENT_EVIDENCE or both (with none, nothing would ever block)")
        return list(dict.fromkeys(v))

    def blocks(self, outcome: str) -> bool:
        """Whether a decision with this outcome blocks the release."""
        return outcome in self.block_on

    @property
    def comparison_decisions(self) -> list[Decision]:
        return [d for d in self.decisions if not d.single_run]

    @property
    def run_decisions(self) -> list[Decision]:
        return [d for d in self.decisions if d.single_run]


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
        self,
        available: Sequence[str],
        *,
        why: str = "both runs must record it",
        listing: str = "criteria in both runs",
        single_run: bool | None = False,
    ) -> None:
        """Raise a located ConfigError for a decision naming a criterion the runs do not share.

        `why` and `listing` word the error for a narrower check (the baseline's criteria alone,
        before the candidate runs). `single_run` picks the decisions checked: comparison ones
        (False), single-run ones (True) or all (None).
        """
        for i, d in enumerate(self.policy.decisions):
            if single_run is not None and d.single_run != single_run:
                continue
            if d.criterion not in available:
                known = ", ".join(available) or "none"
                raise self.error_at(
                    ["decisions", i, "criterion"],
                    f"unknown criterion {d.criterion!r}: {why} ({listing}: {known})"
                    f"{close_spelling(d.criterion, list(available))}",
                )

    def check_single_run(self, how: str = "add --oloproof-baseline RUN_ID|FILE") -> None:
        """Without a baseline, every decision must test one run: a located ConfigError names the first that does not."""
        for i, d in enumerate(self.policy.decisions):
            if not d.single_run:
                raise self.error_at(
                    ["decisions", i, "test"],
                    f"{d.test} compares a candidate with a baseline, but no baseline was given: {how}, "
                    f"or decide this run alone with {', '.join(RUN_TESTS)}",
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
