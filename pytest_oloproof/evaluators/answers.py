"""Answer evaluators: contains, exact_match, regex."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from .base import CriterionValue, EvalInput, Evaluator, OptionError


def _norm(text: str, case_sensitive: bool, collapse_whitespace: bool) -> str:
    if collapse_whitespace:
        text = " ".join(text.split())
    return text if case_sensitive else text.casefold()


def _lookup(data: Any, dotted: str) -> tuple[bool, Any]:
    """Read `a.b.c` from nested mappings; (found, value)."""
    cur = data
    for part in dotted.split("."):
        if isinstance(cur, Mapping) and part in cur:
            cur = cur[part]
        else:
            return False, None
    return True, cur


class _FieldEvaluator(Evaluator):
    """Compares an output field with an expected field as text."""

    kind = "rate"
    reads = frozenset({"output"})

    def __init__(
        self,
        criterion: str | None = None,
        asserts: bool | None = None,
        *,
        field: str = "answer",
        expected_field: str = "answer",
        case_sensitive: bool = False,
        normalize_whitespace: bool = True,
    ) -> None:
        super().__init__(criterion or self.type, asserts)
        self.field = field
        self.expected_field = expected_field
        self.case_sensitive = case_sensitive
        self.normalize_whitespace = normalize_whitespace

    def settings(self) -> dict[str, Any]:
        return {
            "field": self.field,
            "expected_field": self.expected_field,
            "case_sensitive": self.case_sensitive,
            "normalize_whitespace": self.normalize_whitespace,
        }

    def _inputs(self, x: EvalInput) -> tuple[str, str] | CriterionValue:
        found, want = _lookup(x.expected, self.expected_field)
        if not found or want is None:
            return CriterionValue.excluded("no_expected_value")
        if isinstance(x.output, str):
            got: Any = x.output
        else:
            found, got = _lookup(x.output, self.field)
            if not found:
                return CriterionValue.missing(f"missing_output_field: {self.field}")
        if got is None:
            got = ""
        return str(want), str(got)

    def _verdict(self, ok: bool, want: str, got: str) -> CriterionValue:
        return CriterionValue.observed(ok, expected=want, actual=got)


class Contains(_FieldEvaluator):
    """Pass when the expected text occurs in the output field (case/whitespace-insensitive by default)."""

    type = "contains"

    def evaluate(self, x: EvalInput) -> CriterionValue:
        parts = self._inputs(x)
        if isinstance(parts, CriterionValue):
            return parts
        want, got = parts
        ok = _norm(want, self.case_sensitive, self.normalize_whitespace) in _norm(
            got, self.case_sensitive, self.normalize_whitespace
        )
        return self._verdict(ok, f"contains {want!r}", got)


class ExactMatch(_FieldEvaluator):
    """Pass when the output field equals the expected text after normalisation."""

    type = "exact_match"

    def evaluate(self, x: EvalInput) -> CriterionValue:
        parts = self._inputs(x)
        if isinstance(parts, CriterionValue):
            return parts
        want, got = parts
        ok = _norm(want, self.case_sensitive, self.normalize_whitespace) == _norm(
            got, self.case_sensitive, self.normalize_whitespace
        )
        return self._verdict(ok, want, got)


class Regex(_FieldEvaluator):
    """Pass when a pattern (given here, or read from the expected field) matches the output field."""

    type = "regex"

    def __init__(
        self,
        criterion: str | None = None,
        asserts: bool | None = None,
        *,
        pattern: str | None = None,
        field: str = "answer",
        expected_field: str = "pattern",
        case_sensitive: bool = False,
        fullmatch: bool = False,
    ) -> None:
        super().__init__(criterion, asserts, field=field, expected_field=expected_field, case_sensitive=case_sensitive)
        self.pattern = pattern
        self.fullmatch = fullmatch
        if pattern is not None:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise OptionError(
                    "pattern", f"{pattern!r} is not a valid regular expression: {exc}; escape special characters"
                ) from None

    def settings(self) -> dict[str, Any]:
        return {**super().settings(), "pattern": self.pattern, "fullmatch": self.fullmatch}

    def evaluate(self, x: EvalInput) -> CriterionValue:
        if self.pattern is None:
            parts = self._inputs(x)
        else:  # the configured pattern stands in for the expected value
            parts = self._inputs(
                EvalInput(x.case_id, x.input, {self.expected_field: self.pattern}, x.metadata, x.output)
            )
        if isinstance(parts, CriterionValue):
            return parts
        pattern, got = parts
        flags = 0 if self.case_sensitive else re.IGNORECASE
        try:
            rx = re.compile(pattern, flags)
        except re.error as exc:
            return CriterionValue.missing(f"invalid_pattern: {exc}")
        ok = bool(rx.fullmatch(got) if self.fullmatch else rx.search(got))
        return self._verdict(ok, f"matches /{pattern}/", got)
