"""The compact JSON encoder behind every enqueue: the C encoder, reached through a private name."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from awa_django import validation

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda children: st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=8), children, max_size=5),
    max_leaves=30,
)


def reference(value: Any) -> str:
    return json.dumps(value, allow_nan=False, separators=(",", ":"))


def test_to_json__uses_the_c_encoder() -> None:
    # Fails when json.encoder.c_make_encoder disappears or stops giving the _json extension's
    # encoder: enqueue would still work, several times slower, and nobody would know.
    assert getattr(json.encoder, "c_make_encoder", None) is not None, "this interpreter has no C JSON encoder"
    assert validation.JSON_ENCODER == "c"


def testcompact_json_encoder__falls_back_loudly(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(json.encoder, "c_make_encoder", None)
    with caplog.at_level(logging.WARNING, logger="awa_django.validation"):
        encode, kind = validation.compact_json_encoder()

    assert kind == "python"
    assert any("json_encoder=python" in record.getMessage() for record in caplog.records)
    assert encode({"a": [1, "b"]}) == '{"a":[1,"b"]}'


@given(json_values)
def test_to_json__is_json_dumps_compact(value: Any) -> None:
    assert validation.to_json(value) == reference(value)


@pytest.mark.parametrize("value", [float("nan"), float("inf"), [float("-inf")]])
def test_to_json__refuses_what_json_cannot_hold(value: Any) -> None:
    with pytest.raises(ValueError, match="JSON compliant"):
        validation.to_json(value)
