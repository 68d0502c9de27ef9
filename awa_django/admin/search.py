"""The Job admin's search box: one term, read by its shape.

- ``123`` or ``#123``: that job id;
- ``{"user_id": 42}``: jobs whose args contain that JSON (jsonb containment, ``@>``);
- ``user_id=42``, ``order.id=7``, ``email=a@b.c``: an args path equal to a value (the value read as
  JSON when it is JSON, ``42``, ``true``, ``"42"``, else as text), also by containment;
- ``tag:urgent``: jobs carrying that tag;
- ``error:timeout``: jobs whose error history mentions that text (case-insensitive);
- ``key:tenant:42``: jobs of that fairness key;
- anything else: the kind or the fairness key, exactly.

Several ``key=value``, ``tag:`` and ``error:`` terms separated by spaces must all match. A term that
cannot match anything (a NUL, an id beyond bigint, JSON that is not an object) gives an empty list,
never an error. Searches other than the id read rows the other filters leave: narrow them with the
state, queue, kind and date filters first on a large table (the counts stay bounded either way).
"""

from __future__ import annotations

import json
from typing import Any

from django.db.models import Q, QuerySet

from awa_django.admin.helpers import parse_id
from awa_django.models import Job

HELP = (
    'An id (123), args as JSON ({"user_id": 42}) or paths (user_id=42 order.id=7), tag:NAME, '
    "error:TEXT, key:FAIRNESS_KEY, or a kind or fairness key (exact). Several terms: all must match."
)


class NoMatchError(Exception):
    """The term can match no job."""


def _value(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


def _path(term: str) -> dict[str, Any]:
    """``a.b=v`` as the object ``{"a": {"b": v}}``, for containment."""
    key, _, raw = term.partition("=")
    parts = key.split(".")
    if any(not part for part in parts):
        raise NoMatchError
    nested: dict[str, Any] = {parts[-1]: _value(raw)}
    for part in reversed(parts[:-1]):
        nested = {part: nested}
    return nested


def _one(queryset: QuerySet[Job], term: str) -> QuerySet[Job]:
    if term.startswith("tag:"):
        return queryset.filter(tags__contains=[term[4:]])
    if term.startswith("error:"):
        text = term[6:]
        return queryset.filter(errors__icontains=text) if text else queryset.exclude(errors=[])
    if term.startswith("key:"):
        return queryset.filter(fair_key=term[4:])
    if "=" in term:
        return queryset.filter(args__contains=_path(term))
    return queryset.filter(Q(kind=term) | Q(fair_key=term))


def search_jobs(queryset: QuerySet[Job], search_term: str) -> QuerySet[Job]:
    """The jobs of ``queryset`` the search term finds (see the module docstring)."""
    term = search_term.strip()
    if not term:
        return queryset
    if "\x00" in term:
        return queryset.none()  # no stored text holds a NUL
    bare = term.lstrip("#")
    job_id = parse_id(bare)
    if job_id is not None:
        return queryset.filter(pk=job_id)
    if bare.isascii() and bare.isdigit():
        return queryset.none()  # an id beyond bigint
    try:
        if term.startswith("{"):
            wanted = _value(term)
            if not isinstance(wanted, dict):
                raise NoMatchError
            return queryset.filter(args__contains=wanted)
        terms = term.split()
        if len(terms) > 1 and all(t.startswith(("tag:", "error:", "key:")) or "=" in t for t in terms):
            for part in terms:
                queryset = _one(queryset, part)
            return queryset
        return _one(queryset, term)
    except NoMatchError:
        return queryset.none()
