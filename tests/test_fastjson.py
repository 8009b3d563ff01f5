"""The hot-path JSON helpers agree with the standard library on what they accept and what they mean."""

from __future__ import annotations

import json

import pytest

from pytest_oloproof import fastjson


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
