"""The Job admin's search box: one term, read by its shape.

- ``123`` or ``#123``: that job id;
- ``{"user_id": 42}``: jobs whose args contain that JSON (jsonb containment, ``@>``);
- ``user_id=42``, ``order.id=7``, ``email=a@b.c``: an args path equal to a value (the value read as
  JSON when it is JSON, ``42``, ``true``, ``"42"``, else as text, and so are ``NaN``, ``Infinity``
  and ``1e999``, which JSON in Postgres cannot hold as numbers), also by containment;
- ``tag:urgent``: jobs carrying that tag;
- ``error:timeout``: jobs one of whose error messages (each attempt's ``error``, not its traceback)
  holds that text (case-insensitive);
- ``key:tenant:42``: jobs of that fair key;
- anything else: the kind or the fair key, exactly.

Several ``key=value``, ``tag:`` and ``error:`` terms separated by spaces must all match. A term that
cannot match anything (a NUL, an id beyond bigint, JSON that is not an object, an object with a
number JSON cannot hold, a value no args can hold: a ``\\u0000`` or a lone surrogate escape, or
nesting deeper than MAX_JSON_DEPTH) gives an empty list, never an error.

How it stays off a full read of the history: finished jobs live in ``awa_job_done`` (migration
0023, docs/storage.md), whose args and tags GIN indexes cover every row and whose failed branch
(failed, cancelled) has a trigram index on the error messages (where pg_trgm exists); unfinished
jobs live in the hot table ``awa_job``, with no args, tags or error text index, so that enqueue
pays no GIN entry. A search is asked as one arm per group of states (STATE_GROUPS), each spelling
its states as literals, so that partition pruning and the planner keep each arm to the table and
indexes that hold those states:

- completed, failed, cancelled: awa_job_done's GIN indexes (and the few finished rows that stay hot
  while they hold their unique key, through the hot table's finished index);
- available, scheduled, retryable, running, waiting: the hot table's rows of those states, each
  read and rechecked: the backlog, not the history.

So a search over every state reads the unfinished jobs. Where the planner estimates more of them than
``UNFINISHED_SEARCH_LIMIT`` (50,000: about a quarter of a second to read), the job list searches
the finished jobs only, by their indexes, and says so above the results with a link that searches
every state (``?every_state=1``, honoured by the list, its live view and its bulk actions alike).
A state filter, an id, a kind or a fair key search is never narrowed.

Error text has an index on failed and cancelled jobs only: an ``error:`` search over every state
leaves completed jobs out (a job that completed after a failed attempt keeps its errors, and reading
them is a read of the whole completed history), says so, and searches them when asked
(``every_state=1`` or the completed state's filter). Kinds and fair keys have no index of their own
here: narrow those with the state, queue and date filters (the counts stay bounded either way). The
arms are the same condition split by state, so the rows found do not depend on the plan.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Collection
from functools import reduce
from operator import or_
from typing import Any

from django.contrib import messages
from django.contrib.admin.views.main import SEARCH_VAR
from django.db import OperationalError, connections
from django.db.models import Func, Q, QuerySet, TextField
from django.db.models.lookups import IContains
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse

from awa_django.admin.helpers import parse_id, query_budget, stopped_by_budget
from awa_django.conf import awa_settings
from awa_django.models import Job
from awa_django.services.db import database_alias
from awa_django.sql import statements
from awa_django.states import TERMINAL_STATES, JobState
from awa_django.validation import UnstorableValueError, brief, storable_json

# The arms of an indexed search: each group's states imply the predicate of the partial indexes
# that serve it (see the module docstring). Every state is in exactly one group.
STATE_GROUPS: tuple[tuple[JobState, ...], ...] = (
    (JobState.COMPLETED, JobState.FAILED, JobState.CANCELLED),
    (JobState.AVAILABLE,),
    (JobState.SCHEDULED, JobState.RETRYABLE),
    (JobState.RUNNING,),
    (JobState.WAITING,),
)

UNFINISHED_SEARCH_LIMIT = 50_000
# The finished states whose error text an index covers (awa_job_done_error_text_idx, on the failed branch).
ERROR_INDEXED_STATES = (JobState.FAILED, JobState.CANCELLED)
EVERY_STATE_VAR = "every_state"  # the job list's query parameter: search unfinished jobs too, however many

HELP = (
    'An id (123), args as JSON ({"user_id": 42}) or paths (user_id=42 order.id=7), tag:NAME, '
    "error:TEXT, key:FAIR_KEY, or a kind or fair key (exact). Several terms: all must match."
)


class ErrorMessages(Func):
    """The error history's messages (each entry's ``error``) as JSON text: the expression of
    ``awa_job_error_text_idx`` (migration 0021), spelled the same so the planner matches it."""

    template = "(jsonb_path_query_array(%(expressions)s, '$[*].error'::jsonpath))::text"
    output_field = TextField()


class NoMatchError(Exception):
    """The term can match no job."""


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):  # 1e999: JSON text, but a float only as infinity
        raise ValueError(f"{text!r} is not a finite number")
    return value


def _no_constant(text: str) -> Any:
    raise ValueError(f"{text} is not JSON")  # NaN, Infinity, -Infinity: Python's json takes them


def _value(text: str) -> Any:
    """``text`` as JSON where it is JSON Postgres can hold, else as the text itself (NoMatchError for
    JSON no args can hold: ``"\\u0000"``, a lone surrogate, nesting past MAX_JSON_DEPTH): ``Infinity``,
    ``NaN`` and ``1e999`` read as floats that are not finite, which jsonb refuses (a 500 once), and
    which no args value can be (args are JSON); as text they find the jobs that hold that text."""
    try:
        value = json.loads(text, parse_constant=_no_constant, parse_float=_finite)
    except ValueError:
        return text
    except RecursionError:  # ``[[[…`` a thousand deep: no args nest so deep (MAX_JSON_DEPTH)
        raise NoMatchError from None
    try:  # ``"\u0000"`` and lone surrogates, which jsonb refuses (a 500 once), or too deep to store
        storable_json(value)
    except UnstorableValueError:
        raise NoMatchError from None
    return value


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


def _condition(term: str) -> tuple[Q, bool]:
    """The condition one term asks for, and whether partial indexes by state can serve it."""
    if term.startswith("tag:"):
        return Q(tags__contains=[term[4:]]), True
    if term.startswith("error:"):
        text = term[6:]
        return (Q(IContains(ErrorMessages("errors"), text)) if text else ~Q(errors=[])), bool(text)
    if term.startswith("key:"):
        return Q(fair_key=term[4:]), False
    if "=" in term:
        return Q(args__contains=_path(term)), True
    return Q(kind=term) | Q(fair_key=term), False


def _by_state(queryset: QuerySet[Job], condition: Q, states: Collection[str] | None) -> QuerySet[Job]:
    """``condition`` asked once per state group (only the groups ``states`` allows, when given)."""
    arms = []
    for group in STATE_GROUPS:
        kept = [state for state in group if states is None or state in states]
        if kept:
            arms.append(Q(state__in=kept) & condition)
    if not arms:
        return queryset.none()
    return queryset.filter(reduce(or_, arms))


def _search(queryset: QuerySet[Job], terms: list[str], states: Collection[str] | None) -> QuerySet[Job]:
    conditions = [_condition(term) for term in terms]
    condition = reduce(lambda a, b: a & b, (c for c, _ in conditions))
    if all(indexed for _, indexed in conditions):
        return _by_state(queryset, condition, states)
    return queryset.filter(condition)


def search_jobs(queryset: QuerySet[Job], search_term: str, states: Collection[str] | None = None) -> QuerySet[Job]:
    """The jobs of ``queryset`` the search term finds (see the module docstring). ``states``: the
    states the queryset is already limited to (the state filter), when known; the search then asks
    only those states' arms. A state outside it finds nothing, as the filter would."""
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
            return _by_state(queryset, Q(args__contains=wanted), states)
        return _search(queryset, _terms(term), states)
    except NoMatchError:
        return queryset.none()


def _terms(term: str) -> list[str]:
    """The stripped term's parts: several ``key=value``, ``tag:``, ``error:`` and ``key:`` terms
    separated by spaces, else the whole term as one (a kind may hold a space)."""
    terms = term.split()
    if len(terms) > 1 and all(t.startswith(("tag:", "error:", "key:")) or "=" in t for t in terms):
        return terms
    return [term]


def indexed_search(search_term: str) -> bool:
    """The term is an args, tag or error search: finished jobs' indexes answer it, unfinished jobs'
    rows are read (``search_jobs`` asks it per state group)."""
    term = search_term.strip()
    if not term or "\x00" in term or term.lstrip("#").isdigit():
        return False
    try:
        if term.startswith("{"):
            return isinstance(_value(term), dict)  # anything else finds nothing (search_jobs)
        return all(_condition(t)[1] for t in _terms(term))
    except NoMatchError:
        return False


def searches_error_text(search_term: str) -> bool:
    """The term asks error text (``error:TEXT``, alone or beside other terms)."""
    return any(t.startswith("error:") and len(t) > 6 for t in _terms(search_term.strip()))


def narrowed_states(search_term: str) -> list[str]:
    """The states an indexed search asks when narrowed to finished jobs: completed, failed and
    cancelled. Error text: failed and cancelled (the trigram index of awa_job_done's failed branch)
    and retryable (few, in the hot table), not completed (no index covers their error text)."""
    if searches_error_text(search_term):
        return sorted([*ERROR_INDEXED_STATES, JobState.RETRYABLE])
    return sorted(TERMINAL_STATES)


def error_search_states() -> list[str]:
    """The states an error text search over every state asks when few jobs are unfinished: all
    but completed, whose error text no index covers (a job that completed after a failed attempt
    keeps its errors: reading them all is a read of the whole completed history)."""
    return sorted(state for state in JobState if state != JobState.COMPLETED)


def estimated_unfinished_jobs() -> int:
    """The planner's estimate of the jobs not yet finished (no row read; 0 when unknown)."""
    with connections[database_alias()].cursor() as cursor:
        cursor.execute(statements["estimate_unfinished_jobs"])
        row = cursor.fetchone()
    plan: Any = row[0] if row else None
    if isinstance(plan, str):
        plan = json.loads(plan)
    try:
        return int(plan[0]["Plan"]["Plan Rows"])
    except (TypeError, LookupError, ValueError):
        return 0


def answer_within_budget(request: HttpRequest, view: Callable[[], HttpResponse]) -> HttpResponse:
    """``view``'s page, rendered here, each of its statements within ``ADMIN_QUERY_TIMEOUT``
    (helpers.query_budget): a search over every state reads every unfinished job, which on a big
    enough backlog outlasts any page. A statement stopped (by this budget or the server's own
    statement_timeout) is not a server error: a search that asked every state is asked again of the
    finished jobs only (``every_state=0``, their indexes), any other list goes back to no filter, each
    with a message saying what was stopped and what to do instead. The bare list stopped is an error."""
    seconds = awa_settings().ADMIN_QUERY_TIMEOUT
    try:
        with query_budget():
            response = view()
            if isinstance(response, TemplateResponse) and not response.is_rendered:
                response.render()  # the page's rows are read as it renders: within the budget too
        return response
    except OperationalError as error:
        if not stopped_by_budget(error):
            raise
        params = request.GET.copy()
        if params.get(EVERY_STATE_VAR) != "0" and indexed_search(params.get(SEARCH_VAR, "")):
            params[EVERY_STATE_VAR] = "0"
            messages.warning(
                request,
                f"The search over every state was stopped after {seconds:g} s (AWA['ADMIN_QUERY_TIMEOUT']): it "
                "reads every job not finished yet, since no index covers their args or tags. Showing finished "
                "jobs only; pick a state, or narrow by queue or date, to search the others.",
            )
            return HttpResponseRedirect(f"{request.path}?{params.urlencode()}")
        if params:
            messages.error(
                request,
                f"The list for {brief(params.urlencode(), 200)!r} was stopped after {seconds:g} s "
                "(AWA['ADMIN_QUERY_TIMEOUT']). Narrow it with a state, queue or date filter, or raise the setting.",
            )
            return HttpResponseRedirect(request.path)
        raise
