"""Odd and misbehaving systems under test: the bad case is missing with its stage and
reason, every other case is recorded intact, nothing wrong is cached, and a fixed system re-executes it."""

from __future__ import annotations

import pytest
from staged_helpers import assert_nothing_written, by_id, config_text, last_run, unique_module

from pytest_oloproof.cache.caches import Caches

# One system whose misbehaviour is chosen by the case's `mode`; FIXED=1 in the environment repairs it.
ODD = """
import asyncio, os, types
from pytest_oloproof import Passage, Retrieval, rag_system

SHARED = {"answer": "ok", "seen": []}  # handed out for every case and edited afterwards


class Unprintable(Exception):
    def __str__(self):
        raise RuntimeError("str() of this exception fails")


def _retrieve(input, depth):
    mode = "fine" if os.environ.get("FIXED") else input["mode"]
    one = lambda **kw: Retrieval(query=input["q"], depth=depth, candidates=(Passage(**{"doc_id": "d1", **kw}),))
    if mode == "unprintable":
        raise Unprintable()
    if mode == "own_depth":  # the retriever notes its own depth (how many it found): not a contract matter
        return Retrieval(query=input["q"], depth=1, candidates=(Passage("d1", text="t"),))
    if mode == "text_bytes":
        return one(text=b"raw bytes")
    if mode == "text_surrogate":  # bytes decoded with errors="surrogateescape": no UTF-8 file can hold it
        return one(text="caf\\udce9")
    if mode == "metadata_list":
        return one(text="t", metadata=[("k", "v")])
    if mode == "score_nan":
        return one(text="t", score=float("nan"))
    if mode == "numpy_score":  # a number all the same (a cross-encoder's scores are numpy floats)
        import numpy

        return one(text="t", score=numpy.float32(0.25))
    if mode == "metadata_int_key":  # JSON would store the key as "7": a cached re-run would see other metadata
        return one(text="t", metadata={"ranks": {7: "x"}})
    if mode == "query_int_key":
        return Retrieval(query={1: input["q"]}, depth=depth, candidates=(Passage("d1", 1.0, "t"),))
    if mode == "edits_metadata":
        return one(text="t", metadata={"tags": ["kb"]})
    if mode == "edits_input":
        input["q"] = "edited by retrieve"
        input["extra"] = True
    return Retrieval(query=input["q"], depth=depth, candidates=(Passage("d1", 1.0, "t"), Passage("d2", 0.5, "u")))


def _generate(input, context):
    if input["mode"] == "stop_iteration" and not os.environ.get("FIXED"):
        raise StopIteration("the stream ended")  # an async stage's coroutine turns it into RuntimeError
    if input["mode"] == "edits_input":
        return {"answer": "ok", "q_seen": input["q"]}
    if input["mode"] == "mapping_proxy":  # any Mapping will do
        return types.MappingProxyType({"answer": "ok"})
    if input["mode"] == "big_int":
        return {"answer": "ok", "n": 10**30}
    if input["mode"] == "cyclic" and not os.environ.get("FIXED"):  # a value that contains itself
        out = {"answer": "ok", "trace": []}
        out["trace"].append(out)
        return out
    if input["mode"] == "answer_surrogate" and not os.environ.get("FIXED"):  # half a surrogate pair
        return {"answer": "ok \\ud83d"}
    if input["mode"] == "int_keys" and not os.environ.get("FIXED"):
        return {"answer": "ok", "by_rank": [{1: "d1"}]}
    if input["mode"] == "edits_metadata":
        context[0].metadata["tags"].append("edited by generate")
    if input["mode"].startswith("shared"):
        SHARED["seen"].append(input["mode"])
        return SHARED
    return {"answer": "ok", "citations": [p.doc_id for p in context]}


@rag_system(name="odd", depth=3, top_k=2)
class System:
    def retrieve(self, input, depth):
        return _retrieve(input, depth)

    def generate(self, input, context):
        return _generate(input, context)


@rag_system(name="odd", depth=3, top_k=2)
class AsyncSystem:
    async def retrieve(self, input, depth):
        async def later():  # an async stage returning a coroutine: awaited too
            return _retrieve(input, depth)

        return later()

    async def generate(self, input, context):
        await asyncio.sleep(0)
        return _generate(input, context)
"""

#: mode -> (stage, reason, fragments of the message)
BROKEN = {
    "unprintable": ("retrieve", "system_error", ["retrieve() raised Unprintable", "str() of the Unprintable raised"]),
    "text_bytes": ("retrieve", "contract_violation", ["not JSON-serialisable", "bytes"]),
    "metadata_list": ("retrieve", "contract_violation", ["position 1 has metadata of type list", "a mapping"]),
    "stop_iteration": ("generate", "system_error", ["generate() raised StopIteration: the stream ended"]),
    "score_nan": ("retrieve", "contract_violation", ["position 1 has score nan", "a finite number"]),
    "int_keys": (
        "generate",
        "contract_violation",
        ["generate(): output.by_rank[0] has the key 1 (int)", "read it back as the string '1'", "Use string keys"],
    ),
    "metadata_int_key": (
        "retrieve",
        "contract_violation",
        ["candidate at position 1: metadata.ranks has the key 7 (int); JSON object keys are strings"],
    ),
    "query_int_key": ("retrieve", "contract_violation", ["retrieve() query: query has the key 1 (int)"]),
    "cyclic": ("generate", "contract_violation", ["Circular reference"]),
    "text_surrogate": ("retrieve", "contract_violation", ["lone surrogate ('\\udce9')", "no UTF-8 file"]),
    "answer_surrogate": ("generate", "contract_violation", ["generate() returned text holding a lone surrogate"]),
}
INTACT = [
    "fine",
    "numpy_score",
    "own_depth",
    "big_int",
    "mapping_proxy",
    "edits_input",
    "edits_metadata",
    "shared_1",
    "shared_2",
    "shared_3",
]


def _project(pytester: pytest.Pytester, attr: str, concurrency: int) -> None:
    module = unique_module()
    pytester.makepyfile(**{module: ODD})
    pytester.makefile(".yaml", oloproof=config_text(module, attr=attr, extra=f"concurrency: {concurrency}\n"))
    lines = [
        f'{{"id": "{m}", "input": {{"q": "question {m}", "mode": "{m}"}}, "expected": {{"answer": "ok"}}}}'
        for m in [*BROKEN, *INTACT]
    ]
    pytester.makefile(".jsonl", cases="\n".join(lines) + "\n")


@pytest.mark.parametrize("attr", ["System", "AsyncSystem"])
@pytest.mark.parametrize("concurrency", [1, 8])
def test_each_odd_system_is_its_own_cases_error_and_the_rest_is_recorded_as_it_was(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, attr: str, concurrency: int
) -> None:
    monkeypatch.delenv("FIXED", raising=False)
    _project(pytester, attr, concurrency)
    result = pytester.runpytest("--oloproof", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=len(INTACT), failed=len(BROKEN))
    recs = by_id(last_run(pytester))
    assert set(recs) == {*BROKEN, *INTACT}
    for mode, (stage, reason, fragments) in BROKEN.items():
        err = recs[mode]["error"]
        assert (err["stage"], err["reason"]) == (stage, reason), err
        for fragment in fragments:
            assert fragment in err["message"], (mode, err["message"])
        assert recs[mode]["criteria"]["answer_correct"]["status"] == "missing"
    result.stdout.fnmatch_lines(["*case 'metadata_list': retrieve() broke the system contract*"])
    result.stdout.fnmatch_lines(["*case 'unprintable': the system failed in retrieve*"])
    for mode in INTACT:
        assert recs[mode]["error"] is None and recs[mode]["criteria"]["answer_correct"]["value"] == 1.0, mode
    # a stage that edits its input changes neither the other stage's input nor what the record keeps
    edited = recs["edits_input"]
    assert edited["input"] == {"q": "question edits_input", "mode": "edits_input"}
    assert edited["output"]["q_seen"] == "question edits_input"
    assert type(recs["big_int"]["output"]["n"]) is int  # read back exactly, not as the float 1e30
    assert recs["numpy_score"]["retrieval"][0]["score"] == 0.25
    assert recs["edits_metadata"]["retrieval"][0]["metadata"] == {"tags": ["kb"]}
    # one object handed out for every case and edited afterwards: each case keeps what generate returned then
    seen = sorted(len(recs[m]["output"]["seen"]) for m in ("shared_1", "shared_2", "shared_3"))
    assert seen == [1, 2, 3]

    # a fixed system re-executes exactly the failed cases (errors are never cached)
    monkeypatch.setenv("FIXED", "1")
    again = pytester.runpytest("--oloproof", "-p", "no:cacheprovider")
    again.assert_outcomes(passed=len(BROKEN) + len(INTACT))
    again.stdout.fnmatch_lines([f"Cache: execution {len(INTACT)} hit/{len(BROKEN)} miss*"])
    caches = Caches(pytester.path / ".oloproof" / "cache")
    try:
        assert caches.stats()["execution"] == len(BROKEN) + len(INTACT)
    finally:
        caches.close()


PLAIN = """
SHARED = {"answer": "ok", "seen": []}

def answer(input):
    if input["mode"] == "edits_input":
        input["q"] = "edited"
    SHARED["seen"].append(input["mode"])
    return SHARED
"""


def test_a_plain_callable_that_edits_its_input_and_reuses_its_output(pytester: pytest.Pytester) -> None:
    module = unique_module()
    pytester.makepyfile(**{module: PLAIN})
    pytester.makefile(".yaml", oloproof=config_text(module, attr="answer", plain=True))
    modes = ["edits_input", "second"]
    pytester.makefile(
        ".jsonl",
        cases="\n".join(f'{{"id": "{m}", "input": {{"q": "q", "mode": "{m}"}}}}' for m in modes) + "\n",
    )
    pytester.runpytest("--oloproof", "-p", "no:cacheprovider").assert_outcomes(passed=2)
    recs = by_id(last_run(pytester))
    assert recs["edits_input"]["input"] == {"q": "q", "mode": "edits_input"}
    assert recs["edits_input"]["output"]["seen"] == ["edits_input"]
    assert recs["second"]["output"]["seen"] == ["edits_input", "second"]


INT_KEYS_PLAIN = """
import os


def answer(input):
    if os.environ.get("FIXED"):
        return {"answer": "ok", "by_rank": {"1": "d1"}}
    return {"answer": "ok", "by_rank": {1: "d1"}}
"""


def test_a_plain_callable_output_with_a_non_string_key_is_its_cases_error_never_a_changed_value(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Fresh and cached runs must agree: {1: ...} would be read back from the cache as {"1": ...}."""
    monkeypatch.delenv("FIXED", raising=False)
    module = unique_module()
    pytester.makepyfile(**{module: INT_KEYS_PLAIN})
    pytester.makefile(".yaml", oloproof=config_text(module, attr="answer", plain=True))
    pytester.makefile(".jsonl", cases='{"id": "c1", "input": {"q": "q"}, "expected": {"answer": "ok"}}\n')
    result = pytester.runpytest("--oloproof", "-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    err = by_id(last_run(pytester))["c1"]["error"]
    assert (err["stage"], err["reason"]) == ("call", "contract_violation"), err
    assert "output.by_rank has the key 1 (int); JSON object keys are strings" in err["message"]
    monkeypatch.setenv("FIXED", "1")  # nothing was cached: the fixed system runs, and its run reads back the same
    pytester.runpytest("--oloproof", "-p", "no:cacheprovider").assert_outcomes(passed=1)
    fresh = by_id(last_run(pytester))["c1"]
    cached = pytester.runpytest("--oloproof", "-p", "no:cacheprovider")
    cached.stdout.fnmatch_lines(["Cache: execution 1 hit/0 miss*"])
    assert by_id(last_run(pytester))["c1"]["output"] == fresh["output"] == {"answer": "ok", "by_rank": {"1": "d1"}}


BAD_SETTINGS = """
from pytest_oloproof import Passage, Retrieval, rag_system

class Base:
    def retrieve(self, input, depth):
        raise AssertionError("must not run")

    def generate(self, input, context):
        raise AssertionError("must not run")

    def count_tokens(self, passage):
        return 1

@rag_system(name="x", depth=0)
class Depth0(Base): pass

@rag_system(name="x", depth=True)
class DepthBool(Base): pass

@rag_system(name="x", depth=3, top_k=0)
class TopK0(Base): pass

@rag_system(name="x", depth=3, token_budget=-5)
class NegativeBudget(Base): pass

@rag_system(name="x", depth=3, top_k="2")
class TopKStr(Base): pass

@rag_system(name="x", depth=3)
class InitRaises(Base):
    def __init__(self):
        connect_to_the_index()

def connect_to_the_index():
    raise ConnectionError("index unreachable")
"""


@pytest.mark.parametrize(
    ("attr", "expected"),
    [
        ("Depth0", "@rag_system on {m}:Depth0: depth=0: expected an integer >= 1*"),
        ("DepthBool", "@rag_system on {m}:DepthBool: depth=True: expected an integer >= 1*"),
        ("TopK0", "@rag_system on {m}:TopK0: top_k=0: expected an integer >= 1*"),
        ("NegativeBudget", "@rag_system on {m}:NegativeBudget: token_budget=-5: expected an integer >= 1*"),
        ("TopKStr", "@rag_system on {m}:TopKStr: top_k='2': expected an integer >= 1*"),
        ("InitRaises", "system.rag.object: {m}:InitRaises() raised ConnectionError: index unreachable"),
    ],
)
def test_bad_decorator_settings_and_a_raising_constructor_are_config_errors(
    pytester: pytest.Pytester, attr: str, expected: str
) -> None:
    module = unique_module()
    pytester.makepyfile(**{module: BAD_SETTINGS})
    pytester.makefile(".yaml", oloproof=config_text(module, attr=attr))
    pytester.makefile(".jsonl", cases='{"id": "c1", "input": {"q": "q"}}\n')
    result = pytester.runpytest("--oloproof", "-p", "no:cacheprovider")
    assert result.ret == 2
    result.stdout.fnmatch_lines([f"*oloproof.yaml:4: {expected.format(m=module)}"])
    if attr == "InitRaises":  # the user's traceback, not Oloproof's frames
        result.stdout.fnmatch_lines(["*in connect_to_the_index*", "ConnectionError: index unreachable"])
        assert "resolve_system" not in result.stdout.str()
    assert_nothing_written(pytester.path)


def test_a_decorator_setting_oloproof_yaml_overrides_is_not_an_error(pytester: pytest.Pytester) -> None:
    module = unique_module()
    source = BAD_SETTINGS.replace('raise AssertionError("must not run")', "return _ok(depth)", 1)
    source += "\ndef _ok(depth):\n    return Retrieval(query='q', depth=depth, candidates=())\n"
    source = source.replace(
        'return _ok(depth)\n\n    def generate(self, input, context):\n        raise AssertionError("must not run")',
        "return _ok(depth)\n\n    def generate(self, input, context):\n        return {'answer': 'ok'}",
    )
    pytester.makepyfile(**{module: source})
    pytester.makefile(".yaml", oloproof=config_text(module, attr="Depth0", rag={"depth": 2}))
    pytester.makefile(".jsonl", cases='{"id": "c1", "input": {"q": "q"}, "expected": {"answer": "ok"}}\n')
    pytester.runpytest("--oloproof", "-p", "no:cacheprovider").assert_outcomes(passed=1)
