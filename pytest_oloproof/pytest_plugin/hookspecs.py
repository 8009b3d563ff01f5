"""Hooks other plugins and conftest.py files can implement (added in pytest_addhooks)."""

from __future__ import annotations

from typing import Any

import pytest


def pytest_oloproof_evaluators() -> Any:
    """Return evaluator types (Evaluator subclasses, or a mapping of type name to class) to register.

    Every implementation is called; all types returned are added to the registry,
    so ``type: my_metric`` becomes valid in oloproof.yaml::

        # conftest.py
        from pytest_oloproof import CriterionValue, Evaluator

        class ShortAnswer(Evaluator):
            type = "short_answer"
            def __init__(self, criterion=None, asserts=None, *, max_words: int = 20):
                super().__init__(criterion or "short_answer", asserts)
                self.max_words = max_words
            def settings(self):
                return {"max_words": self.max_words}
            def evaluate(self, x):
                return CriterionValue.observed(len(str(x.output.get("answer", "")).split()) <= self.max_words)

        def pytest_oloproof_evaluators():
            return [ShortAnswer]
    """


@pytest.hookspec(firstresult=True)
def pytest_oloproof_run_recorded(record: dict[str, Any], config: pytest.Config) -> Any:
    """Called on the controller after the run record is written; `record` is the full run record.

    Example: post the pass rate somewhere::

        def pytest_oloproof_run_recorded(record, config):
            print(record["run_id"], record["metrics"]["answer_correct"]["value"])
    """
