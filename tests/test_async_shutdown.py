"""An async system that leaves work in the event loop's default executor still ends its session cleanly.

Libraries' async paths (langchain-core's ``ainvoke`` of a sync retriever, for one) run sync code
through ``loop.run_in_executor(None, ...)``. Shutting that executor down at the end of the session
must not be cancelled by the session's own stop.
"""

from __future__ import annotations

import json
import threading

import pytest
from oloproof_project import module_name

SYSTEM = """
import asyncio, time
from pytest_oloproof import Passage, Retrieval, rag_system


@rag_system(name="pooled", version="1", depth=2)
class Pooled:
    async def retrieve(self, input, depth):
        loop = asyncio.get_running_loop()
        loop.run_in_executor(None, time.sleep, 2.0)  # still running when the session ends
        text = await loop.run_in_executor(None, str.upper, input["q"])
        return Retrieval(query=input["q"], depth=depth, candidates=(Passage("d1", text=text),))

    async def generate(self, input, context):
        return {"answer": context[0].text}
"""


CONFTEST = """
import threading


def _record(args):
    with open("thread-errors.txt", "a") as f:
        f.write(f"{args.thread.name}: {args.exc_type.__name__}\\n")


def pytest_sessionstart(session):
    threading.excepthook = _record  # after pytest's own hook: a loop thread dying late is still seen
"""


def test_work_left_in_the_default_executor_does_not_break_the_session(pytester: pytest.Pytester) -> None:
    mod = module_name(pytester, "pooled")
    pytester.makepyfile(**{mod: SYSTEM})
    pytester.makefile(
        ".jsonl",
        cases="\n".join(
            json.dumps({"id": f"c{i}", "input": {"q": f"q{i}"}, "expected": {"answer": "Q"}}) for i in range(3)
        ),
    )
    pytester.makefile(
        ".yaml",
        oloproof=f"system:\n  rag:\n    object: {mod}:Pooled\ncases: cases.jsonl\nevaluators:\n"
        "  - {type: contains, criterion: answer_correct, field: answer, expected_field: answer}\n",
    )
    pytester.makeconftest(CONFTEST)
    hook = threading.excepthook
    try:
        result = pytester.runpytest("--oloproof", "-p", "no:cacheprovider")
        for t in threading.enumerate():
            if t.name == "oloproof-loop":
                t.join(timeout=30)
    finally:
        threading.excepthook = hook
    assert result.ret == 0, "\n".join(result.outlines + result.errlines)
    result.assert_outcomes(passed=3)
    errors = pytester.path / "thread-errors.txt"
    assert not errors.exists(), errors.read_text()
