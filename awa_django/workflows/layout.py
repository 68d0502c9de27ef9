"""A workflow's graph as SVG geometry for the admin: nodes in columns by depth, edges between them.

Pure (no I/O): ``layout`` takes the jobs (id, kind, state) and the edges (upstream, downstream,
policy) and returns boxes and lines in pixels; the template ``admin/awa/workflow/change_form.html``
draws them, like the dashboard's charts. A node's column is its longest path from a job with no
upstream, so every edge points right; rows follow id order within a column.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

NODE_WIDTH = 150
NODE_HEIGHT = 34
COLUMN_GAP = 60
ROW_GAP = 14
MARGIN = 10
MAX_NODES = 400  # beyond this the page lists the jobs instead of drawing them


@dataclass(frozen=True)
class Node:
    id: int
    label: str
    state: str
    x: float
    y: float
    width: float = NODE_WIDTH
    height: float = NODE_HEIGHT


@dataclass(frozen=True)
class Line:
    x1: float
    y1: float
    x2: float
    y2: float
    always: bool  # an always edge (drawn dashed)


@dataclass(frozen=True)
class Graph:
    width: float
    height: float
    nodes: list[Node]
    lines: list[Line]


def depths(ids: Sequence[int], edges: Sequence[tuple[int, int, int]]) -> dict[int, int]:
    """Each job's longest path from a job with no upstream inside ``ids`` (upstream ids are lower:
    enqueue numbers a workflow in dependency order, dynamic steps after the step that adds them)."""
    inside = set(ids)
    ups: dict[int, list[int]] = {i: [] for i in ids}
    for up, down, _ in edges:
        if up in inside and down in inside:
            ups[down].append(up)
    depth: dict[int, int] = {}

    def visit(job_id: int) -> int:
        # Iterative enough for the graphs drawn (MAX_NODES): memoised, each node computed once.
        if job_id not in depth:
            depth[job_id] = 0  # a guard, should edges ever form a cycle
            depth[job_id] = max((visit(u) + 1 for u in ups[job_id]), default=0)
        return depth[job_id]

    for job_id in sorted(ids):
        visit(job_id)
    return depth


def layout(jobs: Sequence[tuple[int, str, str]], edges: Sequence[tuple[int, int, int]]) -> Graph:
    """Boxes for ``jobs`` (id, label, state) and lines for ``edges`` (upstream, downstream, policy)."""
    ids = [job_id for job_id, _, _ in jobs]
    depth = depths(ids, edges)
    rows: dict[int, int] = {}
    nodes: dict[int, Node] = {}
    for job_id, label, state in sorted(jobs):
        column = depth[job_id]
        row = rows.get(column, 0)
        rows[column] = row + 1
        x = MARGIN + column * (NODE_WIDTH + COLUMN_GAP)
        y = MARGIN + row * (NODE_HEIGHT + ROW_GAP)
        nodes[job_id] = Node(job_id, label, state, x, y)
    lines = []
    for up, down, policy in edges:
        a, b = nodes.get(up), nodes.get(down)
        if a is None or b is None:
            continue
        lines.append(Line(a.x + a.width, a.y + a.height / 2, b.x, b.y + b.height / 2, policy == 1))
    columns = max(rows, default=0) + 1
    width = 2 * MARGIN + columns * NODE_WIDTH + (columns - 1) * COLUMN_GAP
    height = 2 * MARGIN + max(rows.values(), default=1) * (NODE_HEIGHT + ROW_GAP) - ROW_GAP
    return Graph(width, height, list(nodes.values()), lines)
