"""The hot-path JSON helpers agree with the standard library on what they accept and what they mean."""

from __future__ import annotations

import json

import pytest

from pytest_oloproof.records import fastjson


@pytest.mark.parametrize(
    "value",
    [
        {"a": 1, "b": [1.5, None, True, "é ✓"], "c": {"d": -0.0}},
        {1: "int key", False: "bool key", None: "null key"},  # json.dumps turns such keys into strings
        [2**70, 3],  # beyond 64 bits: orjson cannot, the standard library can
        [1e16, 1e-7, 0.1],
    ],
)
def test_dumps_means_what_json_dumps_means(value: object) -> None:
    assert json.loads(fastjson.dumps(value)) == json.loads(json.dumps(value))


@pytest.mark.parametrize("value", [{"a": object()}, {(1, 2): "tuple key"}])
def test_what_is_not_json_raises_type_error(value: object) -> None:
    with pytest.raises(TypeError):
        fastjson.dumps(value)


def test_loads_rejects_what_is_not_json() -> None:
    assert fastjson.loads('{"a": [1, 2]}') == {"a": [1, 2]}
    for bad in ("{not json", b"\x00\xff", "NaN"):
        with pytest.raises(ValueError):
            fastjson.loads(bad)


@pytest.mark.parametrize("value", [[2**70, 3], {"tokens": 10**30, "n": -(2**64)}, [2**64, "12345678901234567890123"]])
def test_an_integer_beyond_64_bits_reads_back_exactly(value: object) -> None:
    text = fastjson.dumps(value)
    for read in (fastjson.loads(text), fastjson.loads(text.encode("utf-8"))):
        assert json.dumps(read) == json.dumps(value)  # never a float, which 10**30 == 1e30 would not show


def test_loads_rejects_nan_also_where_a_long_integer_sends_it_to_the_standard_library() -> None:
    with pytest.raises(ValueError):
        fastjson.loads("[123456789012345678901234, NaN]")
