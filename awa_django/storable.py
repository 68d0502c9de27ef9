"""Values bound for Postgres ``text`` and ``jsonb`` columns, made storable before they are batched.

Python strings carry NUL characters and lone surrogates easily; Postgres refuses both, in
``text`` and in ``jsonb`` alike (as a ``DataError``, or a ``UnicodeEncodeError`` on the client).
One such value in a batched write would fail the whole batch, so the worker checks each value
on its own first: the handler's return value and its progress are refused with an error naming
where the bad character is (``to_json``); error texts and tracebacks are kept, with the bad
characters escaped as ``\\x00`` / ``\\udcff`` (``escape_json``).
"""

from __future__ import annotations

import json
from typing import Any

from awa_django.validation import UnstorableValueError  # the one error for a value Postgres cannot store

__all__ = [
    "UnreadableJson",
    "UnstorableValueError",
    "escape_json",
    "escape_text",
    "find_problem",
    "read_json",
    "text_problem",
    "to_json",
]

NUL = "\x00"


class UnreadableJson:
    """A JSON value read from Postgres that Python cannot load: nested deeper than its recursion
    limit (jsonb holds any depth; enqueue refuses args past MAX_JSON_DEPTH, but SQL or another
    producer may write them). Stands in for the value, so one such row fails its own job with an
    error naming it instead of failing the whole read (a claim's batch, the worker's claim loop)."""

    __slots__ = ("size",)

    def __init__(self, size: int) -> None:
        self.size = size  # the JSON text's length in bytes

    def __repr__(self) -> str:
        return f"<JSON of {self.size} bytes nested too deeply for Python to read>"


def read_json(data: bytes | bytearray | memoryview | str) -> Any:
    """``json.loads``, or an ``UnreadableJson`` for a value nested past Python's recursion limit:
    the loader of awa's own connections (dbparams.connection_kwargs)."""
    try:
        return json.loads(bytes(data) if isinstance(data, memoryview) else data)
    except RecursionError:
        return UnreadableJson(len(data))


def escape_text(text: str) -> str:
    """``text`` with NUL as ``\\x00`` and lone surrogates as ``\\udXXX``; the rest unchanged."""
    if NUL in text:
        text = text.replace(NUL, "\\x00")
    if text.isascii():
        return text
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def escape_json(value: Any) -> Any:
    """``value`` with every string in it (dict keys too) passed through ``escape_text``."""
    if isinstance(value, str):
        return escape_text(value)
    if isinstance(value, dict):
        return {escape_json(k) if isinstance(k, str) else k: escape_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [escape_json(item) for item in value]
    return value


def text_problem(text: str) -> str | None:
    """What makes ``text`` unstorable (the first bad character and its index), or None."""
    index = text.find(NUL)
    if index >= 0:
        return f"a NUL character (\\x00) at index {index}"
    if text.isascii():
        return None
    for index, char in enumerate(text):
        if "\ud800" <= char <= "\udfff":
            return f"a lone surrogate ({char.encode('utf-8', 'backslashreplace').decode()}) at index {index}"
    return None


def find_problem(value: Any, path: str) -> str | None:
    """The first unstorable string in ``value`` (keys included), described with its path."""
    if isinstance(value, str):
        problem = text_problem(value)
        return None if problem is None else f"{path} contains {problem}"
    if isinstance(value, dict):
        for key, item in value.items():
            if isinstance(key, str) and (problem := text_problem(key)) is not None:
                return f"a key of {path} ({escape_text(key)!r}) contains {problem}"
            found = find_problem(item, f"{path}[{escape_text(key)!r}]" if isinstance(key, str) else f"{path}[{key!r}]")
            if found is not None:
                return found
    if isinstance(value, list | tuple):
        for index, item in enumerate(value):
            found = find_problem(item, f"{path}[{index}]")
            if found is not None:
                return found
    return None


def to_json(value: Any, what: str) -> str:
    """``value`` as JSON text Postgres ``jsonb`` accepts, or ``UnstorableValueError`` saying why
    not; ``what`` names the value in the message (e.g. "the handler's return value")."""
    try:
        text = json.dumps(value, allow_nan=False)
    except (TypeError, ValueError, RecursionError) as exc:
        raise UnstorableValueError(
            f"{what} cannot be stored as JSON ({type(value).__name__}: {escape_text(str(exc))}); use JSON data "
            "(str, int, float, bool, None, list, dict with str keys) with finite numbers"
        ) from None
    # json.dumps escapes NUL as \u0000 and surrogates as \udXXX (valid pairs too): only then look
    # closer, so ordinary values pay one substring search.
    if "\\u0000" in text or "\\ud" in text:
        problem = find_problem(value, what)
        if problem is not None:
            raise UnstorableValueError(
                f"{problem}, which Postgres cannot store (text and jsonb refuse NUL characters and "
                "unpaired surrogates); remove it, or encode binary data first (e.g. base64)"
            )
    return text
