"""What Postgres can store, checked before anything is sent: the JSON limits and brief reprs.

The enqueue API (args, metadata) and the worker (a handler's result) both store JSON in jsonb
columns. A value Postgres refuses (a NUL character, a lone surrogate, a document above the jsonb
size limit) would fail inside the caller's transaction and abort it, and a value Python cannot
encode (10,000 levels deep, an integer of 5,000 digits) fails with an error that names nothing.
``storable_json`` turns every such value into one ``UnstorableValueError`` with a reason, after
one walk over the value and one encoding pass (never two).

Every limit lives here, and the README states them:

- ``MAX_JSON_DEPTH``: lists and dicts nest at most this deep (a cycle is reported as too deep);
- ``MAX_JSON_BYTES``: the encoded JSON text is at most this long (non-ASCII characters are
  escaped, so characters and bytes are the same count);
- ``BRIEF_LENGTH``: an error message shows at most about this many characters of a value.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable
from typing import Any

MAX_JSON_DEPTH = 100
MAX_JSON_BYTES = 16 * 1024 * 1024
BRIEF_LENGTH = 300
_BRIEF_DEPTH = 6

logger = logging.getLogger(__name__)

# Lone surrogates (U+D800..U+DFFF) are not Unicode scalar values: UTF-8 cannot encode them and
# jsonb refuses their \\u escapes. They arrive from bytes decoded with errors="surrogateescape".
_SURROGATE = re.compile("[\ud800-\udfff]")
NUL_PROBLEM = "contains a NUL character, which Postgres cannot store"


class UnstorableValueError(ValueError):
    """A value Postgres jsonb cannot hold (or Python cannot encode); ``reason`` says why."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(reason)


def brief(value: object, limit: int = BRIEF_LENGTH) -> str:
    """``repr(value)`` for an error message, cut to about ``limit`` characters.

    Containers and strings are walked only as far as the budget reaches, so a 20 MB string or a
    10,000-deep list costs as little as a short one; integers too long to print and objects whose
    ``repr`` raises get a placeholder. Short values come out exactly as ``repr`` shows them.
    """
    parts: list[str] = []
    left = [limit]

    def emit(text: str) -> None:
        parts.append(text)
        left[0] -= len(text)

    def walk(item: object, depth: int) -> None:
        if isinstance(item, str):
            text = item if type(item) is str else str.__str__(item)
            if len(text) > max(left[0], 0):
                emit(f"{text[: max(left[0], 8)]!r}…({len(text)} characters)")
            else:
                emit(repr(text))
        elif isinstance(item, bool) or item is None or isinstance(item, float):
            emit(repr(item))
        elif isinstance(item, int):
            if item.bit_length() > 1000:
                emit(f"<int of {item.bit_length()} bits>")
            else:
                emit(repr(item))
        elif isinstance(item, list | tuple | set | frozenset | dict):
            if depth >= _BRIEF_DEPTH:
                emit("…")
                return
            if isinstance(item, dict):
                opening, closing = "{", "}"
            elif isinstance(item, list):
                opening, closing = "[", "]"
            elif isinstance(item, tuple):
                opening, closing = "(", ",)" if len(item) == 1 else ")"
            elif not item:
                emit(f"{type(item).__name__}()")
                return
            else:
                opening, closing = ("{", "}") if isinstance(item, set) else ("frozenset({", "})")
            emit(opening)
            entries = item.items() if isinstance(item, dict) else item
            for n, entry in enumerate(entries):
                if n:
                    emit(", ")
                if left[0] <= 0:
                    emit(f"…({len(item)} items)")
                    break
                if isinstance(item, dict):
                    walk(entry[0], depth + 1)
                    emit(": ")
                    walk(entry[1], depth + 1)
                else:
                    walk(entry, depth + 1)
            emit(closing)
        else:
            try:
                text = repr(item)
            except Exception:
                text = f"<{type(item).__qualname__} object>"
            emit(text if len(text) <= max(left[0], 40) else f"{text[: max(left[0], 40)]}…")

    try:
        walk(value, 0)
    except Exception:  # a container whose iteration raises: name its type at least
        return f"<{type(value).__qualname__} object>"
    return "".join(parts)


def text_problem(text: str) -> str | None:
    """Why Postgres cannot store this string (a NUL, a lone surrogate), or None."""
    if "\x00" in text:
        return NUL_PROBLEM
    if not text.isascii():  # O(1) in CPython: the common ASCII text costs nothing more
        found = _SURROGATE.search(text)
        if found is not None:
            return (
                f"contains a lone surrogate {found.group()!r} at position {found.start()}, which is not "
                "valid Unicode and cannot be stored; decode the text properly (or pass bytes as base64)"
            )
    return None


def compact_json_encoder() -> tuple[Callable[[Any], str], str]:
    """``json.dumps(value, allow_nan=False, separators=(",", ":"))``, built once, and which encoder
    it is: "c" (the ``_json`` extension) or "python".

    json.dumps with non-default options builds a new encoder for every call, which is most of the
    cost of validating a bulk enqueue; this keeps one C encoder when the interpreter has it. The
    C encoder is reached through a private name (``json.encoder.c_make_encoder``): if a Python
    release renames it, this falls back to the pure-Python encoder, logs a warning, and
    tests/test_validation_json.py fails, so the slowdown is never silent.
    """
    encoder = json.JSONEncoder(allow_nan=False, separators=(",", ":"))
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:
        logger.warning("json_encoder=python reason=%s", "json.encoder.c_make_encoder is missing: enqueue is slower")
        return encoder.encode, "python"
    # No circular-reference markers (a shared dict could keep stale ids after a failed call): the
    # walk before encoding reports a cycle as nesting beyond MAX_JSON_DEPTH.
    c_encode = make(None, encoder.default, json.encoder.encode_basestring_ascii, None, ":", ",", False, False, False)

    def encode(value: Any) -> str:
        return "".join(c_encode(value, 0))

    return encode, "c" if type(c_encode).__module__ == "_json" else "python"


to_json, JSON_ENCODER = compact_json_encoder()


def _string_problem(value: str) -> str | None:
    if len(value) > MAX_JSON_BYTES:  # caught before encoding: a 300 MB string is not copied again
        return _too_big(f"more than {len(value)}")
    return text_problem(value)


def _json_problem(value: object, depth: int) -> str | None:
    """One pass over a JSON value: NUL, lone surrogates, key types and nesting depth.

    Dispatches on the exact type first and inlines the string checks: this runs for every job of
    a bulk enqueue (the common ASCII string costs one ``in`` and one ``isascii()``).
    """
    kind = type(value)
    if kind is str:
        if "\x00" in value or not value.isascii() or len(value) > MAX_JSON_BYTES:  # type: ignore[operator,attr-defined,arg-type]
            return _string_problem(value)  # type: ignore[arg-type]
        return None
    if kind is int or kind is float or kind is bool or value is None:
        return None
    if depth >= MAX_JSON_DEPTH:
        return f"nests lists/dicts deeper than {MAX_JSON_DEPTH} levels, the limit (or contains itself)"
    if kind is dict or isinstance(value, dict):
        for key, item in value.items():  # type: ignore[attr-defined]
            if type(key) is not str:
                if not isinstance(key, str):
                    return f"keys must be strings; {brief(key, 80)} is not"
                key = str.__str__(key)
            if "\x00" in key or not key.isascii():
                problem = _string_problem(key)
                if problem:
                    return problem
            if type(item) is not int:
                problem = _json_problem(item, depth + 1)
                if problem:
                    return problem
        return None
    if kind is list or kind is tuple or isinstance(value, list | tuple):
        for item in value:  # type: ignore[attr-defined]
            problem = _json_problem(item, depth + 1)
            if problem:
                return problem
        return None
    if isinstance(value, str):
        return _string_problem(str.__str__(value))
    return None  # numbers of other types, and what the encoder refuses


def _too_big(size: str) -> str:
    return (
        f"encodes to {size} characters of JSON; the limit is {MAX_JSON_BYTES} (MAX_JSON_BYTES): "
        "store large data elsewhere (a file, a table) and pass its key"
    )


def storable_json(value: object) -> str:
    """The compact JSON text of ``value``; UnstorableValueError if Postgres jsonb cannot hold it.

    Refuses: NUL characters and lone surrogates in strings and keys, non-string keys (JSON would
    silently turn them into strings), nesting deeper than MAX_JSON_DEPTH (and cycles), text
    longer than MAX_JSON_BYTES, NaN and infinities, integers too long to print, and any type
    JSON has no form for. Nothing else raises: an exception from a user type's ``items()`` or
    ``__iter__`` is reported as the reason too.
    """
    try:
        problem = _json_problem(value, 0)
    except Exception as exc:
        raise UnstorableValueError(f"could not be read ({type(exc).__name__}: {brief(str(exc), 200)})") from None
    if problem:
        raise UnstorableValueError(problem)
    try:
        text = to_json(value)
    except ValueError as exc:
        if "integer string conversion" in str(exc):
            raise UnstorableValueError(
                "holds an integer with too many digits for JSON (above 4300); pass it as a string"
            ) from None
        raise UnstorableValueError(
            f"is not JSON-serialisable ({brief(str(exc), 200)}); pass only str, int, float, bool, None, list, dict"
        ) from None
    except Exception as exc:
        raise UnstorableValueError(
            f"is not JSON-serialisable ({brief(str(exc), 200)}); pass only str, int, float, bool, None, list, dict"
        ) from None
    if len(text) > MAX_JSON_BYTES:
        raise UnstorableValueError(_too_big(str(len(text))))
    return text
