"""Declared edges, written or refused as a plain model of the rules says, whatever form they take.

A step's ``after`` may name an upstream as the Step itself, ``Upstream(step)``, ``always(step)``,
an edge with its own name, an ``on_discard`` edge, a job id, or a step of another workflow; the
same upstream may be named twice, steps may share one ``after`` item (a fan-out: Workflow.add
shares one tuple of edges between them), and ``Step.after`` may add edges later, to a step
declared before its upstream. The model below is the rules as docs/guide/workflows.md states
them; the enqueue must agree with it: the same refusal (the first step with a problem, the first
problem of that step), or exactly the model's edges, ``pending`` counts and states.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from awa_django.exceptions import InvalidJobError
from awa_django.models import Job, JobEdge, JobState
from awa_django.workflows import Step, Upstream, Workflow, always
from tests.workflows import jobs  # noqa: F401 - registers the wf.* handlers

FORMS = ["bare", "upstream", "always", "named", "discard"]
POLICY_CODES = {"on_success": 0, "always": 1, "on_discard": 2}


@dataclass(frozen=True)
class Item:
    """One item of an ``after`` list: ``source`` a step index, "job" (an existing job) or "foreign"."""

    source: int | str
    form: str


def source_of(k: int, r: int) -> int | str:
    """A draw of 0..99 as a source: mostly a step declared before step ``k``, sometimes the
    existing job, rarely a foreign step (each problem refuses the whole graph, and the cases
    behind the first one would go untested)."""
    if r < 2:
        return "foreign"
    if r < 15 or not k:
        return "job"
    return r % k


def items_for(k: int) -> st.SearchStrategy[Item]:
    forms = st.sampled_from(["bare"] * 4 + ["upstream", "always", "always", "named", "discard"])
    return st.builds(Item, st.integers(0, 99).map(lambda r: source_of(k, r)), forms)


@st.composite
def graphs(draw: st.DrawFn) -> tuple[list[list[Item]], list[tuple[int, int]], list[bool]]:
    """Each step's ``after`` items (upstreams declared before it, a job, a foreign step); edges
    added later with ``Step.after`` (any two steps); and whether a step reuses the previous
    step's single item (the fan-out form)."""
    n = draw(st.integers(1, 7))
    afters = [draw(st.lists(items_for(k), max_size=4)) for k in range(n)]
    shared = [draw(st.booleans()) for _ in range(n)]
    late = draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), max_size=2))
    return afters, late, shared


def expected_edge(item: Item) -> tuple[str, str | None]:
    """(policy, name given on the edge or None)."""
    return {
        "bare": ("on_success", None),
        "upstream": ("on_success", None),
        "always": ("always", None),
        "named": ("on_success", f"n{item.source}"),
        "discard": ("on_discard", None),
    }[item.form]


def model_problem(edges: list[Item]) -> str | None:
    """The first problem of one step's edges, as the rules order them; None if there is none."""
    discards = False
    first_policy = expected_edge(edges[0])[0] if edges else None
    for item in edges:
        if item.source == "foreign":
            return "waits for a step of another Workflow"
        policy = expected_edge(item)[0]
        if policy == "on_discard" or discards:
            if policy != "on_discard" or first_policy != "on_discard":
                return "mixes on_discard edges"
            if item.source == "job":
                return "not an existing job id"
            discards = True
    policies: dict[int | str, str] = {}
    for item in edges:
        policy = expected_edge(item)[0]
        if policies.setdefault(item.source, policy) != policy:
            return "names this upstream twice"
    return None


def has_cycle(n: int, edges: list[list[Item]]) -> bool:
    ups = [{i.source for i in e if isinstance(i.source, int)} for e in edges]
    state = [0] * n  # 0 new, 1 on the path, 2 done

    def visit(k: int) -> bool:
        state[k] = 1
        for u in ups[k]:
            if state[u] == 1 or (state[u] == 0 and visit(u)):  # type: ignore[index]
                return True
        state[k] = 2
        return False

    return any(state[k] == 0 and visit(k) for k in range(n))


@pytest.mark.django_db
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(graph=graphs())
# the rarer draws, always tried: a plain edge after an on_discard one, and before one
@example(graph=([[], [], [Item(0, "discard"), Item(1, "bare")]], [], [False] * 3))
@example(graph=([[], [], [Item(0, "bare"), Item(1, "discard")]], [], [False] * 3))
# a fan-out sharing one tuple, then a fan-in over it naming one upstream twice
@example(
    graph=(
        [[], [Item(0, "bare")], [Item(0, "bare")], [Item(1, "bare"), Item(2, "bare"), Item(1, "bare")]],
        [],
        [False, False, True, False],
    )
)
def test_declared_edges__written_or_refused_as_the_model_says(
    graph: tuple[list[list[Item]], list[tuple[int, int]], list[bool]],
) -> None:
    afters, late, shared = graph
    n = len(afters)
    existing = Job.objects.enqueue("wf.value", {"value": 1})
    other = Workflow("other").add("wf.value", name="elsewhere")
    jobs_before = Job.objects.count()
    wf = Workflow("edges")
    steps: list[Step] = []
    declared: list[list[Item]] = []  # each step's items in the order the step holds them
    made: dict[Item, object] = {}  # one object per item: a step after the same item shares it

    def obj(item: Item) -> object:
        if item not in made:
            source: object = (
                other if item.source == "foreign" else existing.pk if item.source == "job" else steps[int(item.source)]
            )
            made[item] = {
                "bare": lambda s: s,
                "upstream": lambda s: Upstream(s),
                "always": lambda s: always(s),
                "named": lambda s: Upstream(s, "on_success", f"n{item.source}"),
                "discard": lambda s: Upstream(s, "on_discard"),
            }[item.form](source)
        return made[item]

    for k, items in enumerate(afters):
        if shared[k] and k > 0 and len(declared[-1]) == 1 and declared[-1][0].source != k:
            items = list(declared[-1])  # the fan-out form: the previous step's single item, again
        steps.append(wf.add("wf.value", {"value": k}, after=[obj(i) for i in items], name=f"s{k}"))
        declared.append(list(items))
    for down, up in late:
        item = Item(up, "bare")
        steps[down].after(steps[up])
        declared[down].append(item)

    problems = [(k, p) for k, edges in enumerate(declared) if (p := model_problem(edges)) is not None]
    if problems:
        with pytest.raises(InvalidJobError, match=problems[0][1]) as refused:
            wf.enqueue()
        assert refused.value.index == problems[0][0]
        assert Job.objects.count() == jobs_before  # validated whole before anything is written
        return
    if has_cycle(n, declared):
        with pytest.raises(InvalidJobError, match="cycle"):
            wf.enqueue()
        return
    wf.enqueue()

    want_edges = set()
    want_pending = {}
    for k, edges in enumerate(declared):
        last: dict[int | str, Item] = {}
        for item in edges:
            last[item.source] = item  # named twice with one policy: one edge, the last name
        for source, item in last.items():
            policy, name = expected_edge(item)
            if source == "job":
                up_id, default_name = existing.pk, "wf.value"
            else:
                assert isinstance(source, int)
                up_id, default_name = steps[source].id, f"s{source}"
            want_edges.add((up_id, steps[k].id, name or default_name, POLICY_CODES[policy]))
        want_pending[steps[k].id] = len(last)  # the existing job is available: not ended yet
    got_edges = set(
        JobEdge.objects.filter(downstream_id__in=[s.id for s in steps]).values_list(
            "upstream_id", "downstream_id", "name", "policy"
        )
    )
    assert got_edges == want_edges
    rows = {j.pk: j for j in Job.objects.filter(pk__in=[s.id for s in steps])}
    for job_id, pending in want_pending.items():
        assert rows[job_id].pending == pending, job_id
        assert rows[job_id].state == (JobState.WAITING if pending else JobState.AVAILABLE)


def test_after__takes_any_iterable_of_upstreams_in_its_order() -> None:
    wf = Workflow("iterables")
    a = wf.add("wf.value", name="a")
    b = wf.add("wf.value", name="b", after=(s for s in [a]))
    c = wf.add("wf.value", name="c", after=iter([b, a]))
    d = wf.add("wf.value", name="d", after=iter([]))
    assert (b.upstreams, c.upstreams, d.upstreams) == ((a,), (b, a), ())


def test_step_after__on_a_fan_out_step_leaves_its_siblings_edges_alone() -> None:
    wf = Workflow("siblings")
    head = wf.add("wf.value", name="head")
    extra = wf.add("wf.value", name="extra")
    parts = [wf.add("wf.value", name=f"p{i}", after=[head]) for i in range(3)]
    assert parts[0].upstreams is parts[1].upstreams  # one shared tuple
    parts[1].after(extra)
    parts[1].after(extra, head)
    assert [list(p.upstreams) for p in parts] == [
        [head],
        [head, Upstream(extra), Upstream(extra), Upstream(head)],
        [head],
    ]


@pytest.mark.parametrize(
    ("edge_name", "says"),
    [("a\x00b", "NUL"), (5, "must be a non-empty string"), ("x" * 300, "the limit is 255"), ("tab\there", "control")],
)
@pytest.mark.django_db
def test_edge_name__one_postgres_cannot_store_or_not_a_name__refused_naming_it(edge_name: object, says: str) -> None:
    """An edge's own name is checked as a step's name is: InvalidJobError naming it, before any
    write, not a DataError (or TypeError) from the COPY."""
    wf = Workflow("edge-names")
    first = wf.add("wf.value", name="first")
    wf.add("wf.value", name="second", after=[Upstream(first, "always", name=edge_name)])  # type: ignore[arg-type]

    with pytest.raises(InvalidJobError, match=says) as caught:
        wf.enqueue()

    assert caught.value.index == 1
    assert not Job.objects.exists()


@pytest.mark.parametrize("job_id", [2**63, 2**70])
@pytest.mark.django_db
def test_after__an_id_past_bigint__refused_as_no_job_id(job_id: int) -> None:
    wf = Workflow("ids")
    with pytest.raises(InvalidJobError, match="is not a job id"):
        wf.add("wf.value", after=[job_id])
        wf.enqueue()
    assert not Job.objects.exists()
