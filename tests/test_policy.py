"""compare.yaml validation and the decision rules (strict inequalities, unrounded bounds)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from pytest_oloproof.compare.policy import (
    FAIL,
    INSUFFICIENT,
    PASS,
    RULES,
    Equivalence,
    NonInferiority,
    Superiority,
    load_policy,
)
from pytest_oloproof.errors import ConfigError
from pytest_oloproof.stats.intervals import pairs_needed_without_change

NEXT_UP = math.nextafter  # the smallest step away from a boundary


# ------------------------------------------------------------------ decision rules at the boundaries


def test_non_inferiority_boundaries() -> None:
    rule = NonInferiority()
    m = 5.0
    assert rule.decide(NEXT_UP(-m, 0.0), 10.0, m) == (PASS, "lower_bound_above_minus_margin")
    assert rule.decide(-m, 10.0, m) == (INSUFFICIENT, "interval_overlaps_margin")  # touching is not passing
    assert rule.decide(-20.0, -m, m) == (INSUFFICIENT, "interval_overlaps_margin")  # touching is not failing
    assert rule.decide(-20.0, NEXT_UP(-m, -100.0), m) == (FAIL, "upper_bound_below_minus_margin")
    assert rule.decide(-22.9, 22.9, m) == (INSUFFICIENT, "interval_overlaps_margin")


def test_superiority_boundaries_and_default_margin() -> None:
    rule = Superiority()
    assert rule.decide(NEXT_UP(0.0, 1.0), 5.0, 0.0)[0] == PASS
    assert rule.decide(0.0, 5.0, 0.0) == (INSUFFICIENT, "interval_overlaps_margin")
    assert rule.decide(-5.0, 0.0, 0.0) == (INSUFFICIENT, "interval_overlaps_margin")
    assert rule.decide(-5.0, NEXT_UP(0.0, -1.0), 0.0) == (FAIL, "upper_bound_below_margin")
    # with a margin of 2 points, a lower bound of 1.5 is better but not better enough
    assert rule.decide(1.5, 9.0, 2.0) == (INSUFFICIENT, "interval_overlaps_margin")
    assert rule.decide(NEXT_UP(2.0, 3.0), 9.0, 2.0)[0] == PASS
    assert rule.decide(-1.0, NEXT_UP(2.0, 1.0), 2.0)[0] == FAIL


def test_equivalence_boundaries() -> None:
    rule = Equivalence()
    m = 3.0
    inside_lo, inside_hi = NEXT_UP(-m, 0.0), NEXT_UP(m, 0.0)
    assert rule.decide(inside_lo, inside_hi, m) == (PASS, "interval_within_margins")
    assert rule.decide(-m, inside_hi, m) == (INSUFFICIENT, "interval_overlaps_margin")
    assert rule.decide(inside_lo, m, m) == (INSUFFICIENT, "interval_overlaps_margin")
    assert rule.decide(-10.0, -m, m) == (INSUFFICIENT, "interval_overlaps_margin")
    assert rule.decide(-10.0, NEXT_UP(-m, -10.0), m) == (FAIL, "interval_outside_margins")
    assert rule.decide(m, 10.0, m) == (INSUFFICIENT, "interval_overlaps_margin")
    assert rule.decide(NEXT_UP(m, 10.0), 10.0, m) == (FAIL, "interval_outside_margins")
    assert rule.decide(-10.0, 10.0, m) == (INSUFFICIENT, "interval_overlaps_margin")


def test_equivalence_reads_the_one_minus_two_alpha_interval() -> None:
    assert Equivalence().interval_confidence(0.95) == pytest.approx(0.90)
    assert Equivalence().interval_confidence(0.99) == pytest.approx(0.98)
    assert NonInferiority().interval_confidence(0.95) == 0.95
    assert Superiority().interval_confidence(0.95) == 0.95


def test_pairs_needed_per_rule() -> None:
    assert NonInferiority().pairs_needed(5.0, 0.95) == 72 == pairs_needed_without_change(0.05, 0.95)
    assert NonInferiority().pairs_needed(2.0, 0.95) == pairs_needed_without_change(0.02, 0.95)
    assert Equivalence().pairs_needed(5.0, 0.95) == pairs_needed_without_change(0.05, 0.90)
    assert Superiority().pairs_needed(0.0, 0.95) is None  # unchanged verdicts never show superiority
    assert set(RULES) == {"non-inferiority", "superiority", "equivalence"}


# ------------------------------------------------------------------ the policy file


def write(tmp_path: Path, text: str, name: str = "compare.yaml") -> Path:
    p = tmp_path / name
    p.write_text(text, encoding="utf-8")
    return p


def test_valid_policy_with_defaults(tmp_path: Path) -> None:
    p = write(
        tmp_path,
        "decisions:\n"
        "  - {name: a, criterion: answer_correct, test: non-inferiority, margin: 5.0}\n"
        "  - {name: b, criterion: ndcg_at_6, test: superiority}\n"
        "  - {name: c, criterion: citations_valid, test: equivalence, margin: 2.5}\n",
    )
    loaded = load_policy(p)
    pol = loaded.policy
    assert [d.margin for d in pol.decisions] == [5.0, 0.0, 2.5]
    assert (pol.min_pairs, pol.missing, pol.confidence) == (10, "fail", None)
    snap = loaded.snapshot()
    assert snap["path"] == str(p.resolve()) and snap["decisions"][1]["margin"] == 0.0


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "decisions:\n  - {name: a, criterion: x, test: non-inferiority, margin: 5}\nmin_pair: 3\n",
            "compare.yaml:3: min_pair: unknown key; did you mean min_pairs?",
        ),
        (
            "decisions:\n  - {name: a, criterion: x, test: non-inferiority, margn: 5}\n",
            "compare.yaml:2: decisions[0].margn: unknown key; did you mean margin?",
        ),
        (
            "decisions:\n  - {name: a, criterion: x, test: noninferiority, margin: 5}\n",
            "compare.yaml:2: decisions[0].test: unknown test 'noninferiority'; use one of non-inferiority, "
            "superiority, equivalence, minimum, maximum, max-failures; did you mean non-inferiority?",
        ),
        (
            "decisions:\n  - name: a\n    criterion: x\n    test: non-inferiority\n",
            "compare.yaml:2: decisions[0]: margin is required for non-inferiority "
            "(in points, e.g. margin: 5.0 for five percentage points)",
        ),
        (
            "decisions:\n  - {name: a, criterion: x, test: equivalence}\n",
            "compare.yaml:2: decisions[0]: margin is required for equivalence",
        ),
        (
            "decisions:\n  - {name: a, criterion: x, test: equivalence, margin: 0}\n",
            "compare.yaml:2: decisions[0]: margin must be greater than 0 points for equivalence, got 0",
        ),
        (
            "decisions:\n  - {name: a, criterion: x, test: superiority, margin: 100}\n",
            "compare.yaml:2: decisions[0].margin: expected less than 100, got 100",
        ),
        (
            "decisions:\n  - {name: a, criterion: x, test: superiority}\nmissing: drop\n",
            "compare.yaml:3: missing: expected 'fail', 'exclude' or 'bound', got 'drop'",
        ),
        (
            "decisions:\n  - {name: a, criterion: x, test: superiority}\nmin_pairs: 0\n",
            "compare.yaml:3: min_pairs: expected greater than or equal to 1, got 0",
        ),
        ("decisions: []\n", "compare.yaml:1: decisions: a policy needs at least one decision"),
        (
            "decisions:\n  - {name: a, criterion: x, test: superiority}\n"
            "  - {name: a, criterion: y, test: superiority}\n",
            "compare.yaml:1: decisions: two decisions are named 'a'",
        ),
        ("decisions:\n  - {name: a, criterion: x, test: superiority\n", "compare.yaml:3:1: invalid YAML: expected ','"),
        ("- just a list\n", "compare.yaml: the file must be a mapping of keys to values, got list"),
    ],
)
def test_bad_policy_files(tmp_path: Path, text: str, message: str) -> None:
    p = write(tmp_path, text)
    with pytest.raises(ConfigError) as exc:
        load_policy(p)
    assert message in str(exc.value)
    assert str(exc.value).startswith(str(p.resolve()))


def test_missing_policy_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"--policy: .*nope\.yaml does not exist"):
        load_policy(tmp_path / "nope.yaml")


def test_unknown_criterion_is_located(tmp_path: Path) -> None:
    p = write(
        tmp_path,
        "decisions:\n  - {name: a, criterion: answer_correct, test: superiority}\n"
        "  - name: b\n    criterion: answer_corect\n    test: superiority\n",
    )
    loaded = load_policy(p)
    loaded.check_criteria(["answer_correct", "answer_corect"])  # both known: fine
    with pytest.raises(ConfigError) as exc:
        loaded.check_criteria(["answer_correct", "ndcg_at_6"])
    assert str(exc.value) == (
        f"{p.resolve()}:4: decisions[1].criterion: unknown criterion 'answer_corect': both runs must record it "
        "(criteria in both runs: answer_correct, ndcg_at_6); did you mean answer_correct?"
    )
