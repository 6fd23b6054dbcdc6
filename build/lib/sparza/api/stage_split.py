"""Splitting an application graph into stages at every ``partition_by`` (pure, no I/O).

Two nodes are in the same stage when an edge joins them that does not leave a ``partition_by``,
or when they use the same table;
the ``partition_by`` node itself belongs to the stage that writes the intermediate stream, and its
children to the stages that read it. Stages are ordered so that writers come before readers.
Stage names: ``main`` for the (single) stage with no intermediate input (``main-N`` if several),
otherwise the ``partition_by`` names it reads, joined by ``_``.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field

from sparza.api.graph import ApiError, OpKind, OpSpec, StreamApplication
from sparza.streams import SystemStream

__all__ = ["StageSpec", "operator_holdback", "split_stages", "watermark_holdbacks"]


@dataclass(slots=True)
class StageSpec:
    """One stage of an application: its nodes (declaration order), its source inputs, the
    ``partition_by`` nodes it reads from and the ones it writes to."""

    name: str
    ops: list[OpSpec]
    inputs: list[SystemStream] = field(default_factory=list)
    reads: list[OpSpec] = field(default_factory=list)
    writes: list[OpSpec] = field(default_factory=list)


def split_stages(app: StreamApplication) -> list[StageSpec]:
    """The application's stages in topological order (writers before readers)."""
    if not app.ops:
        raise ApiError("the application declares no operators; describe() must build a graph")
    root = list(range(len(app.ops)))

    def find(i: int) -> int:
        while root[i] != i:
            root[i] = root[root[i]]
            i = root[i]
        return i

    for op in app.ops:
        for parent in op.parents:
            if parent.kind != OpKind.PARTITION_BY:
                a, b = find(op.id), find(parent.id)
                root[max(a, b)] = min(a, b)
    # Nodes that use the same table share its task store, so they must run in the same stage.
    table_users: dict[str, int] = {}
    for op in app.ops:
        if op.kind in (OpKind.JOIN, OpKind.SEND_TO_TABLE):
            first = table_users.setdefault(op.params["table"].store, op.id)
            a, b = find(op.id), find(first)
            root[max(a, b)] = min(a, b)
    groups: dict[int, list[OpSpec]] = {}
    for op in app.ops:
        groups.setdefault(find(op.id), []).append(op)
    stages: dict[int, StageSpec] = {}
    for gid, ops in groups.items():
        reads: list[OpSpec] = []
        for op in ops:
            for parent in op.parents:
                if parent.kind == OpKind.PARTITION_BY and parent not in reads:
                    reads.append(parent)
        stage = StageSpec("", ops,
                          inputs=[op.params["descriptor"].stream for op in ops if op.kind == OpKind.INPUT],
                          reads=sorted(reads, key=lambda o: o.id),
                          writes=[op for op in ops if op.kind == OpKind.PARTITION_BY])
        if not stage.inputs and not stage.reads:
            raise ApiError(f"operators {[o.id for o in ops]} are not connected to any input")
        stages[gid] = stage
    owner = {op.id: gid for gid, ops in groups.items() for op in ops}
    # Kahn's algorithm; ties go to the stage declared first so the order is stable.
    indegree = {gid: len({owner[r.id] for r in stage.reads}) for gid, stage in stages.items()}
    ready = [gid for gid, deg in indegree.items() if deg == 0]
    heapq.heapify(ready)
    ordered: list[StageSpec] = []
    while ready:
        gid = heapq.heappop(ready)
        ordered.append(stages[gid])
        for other, stage in stages.items():
            if any(owner[r.id] == gid for r in stage.reads):
                indegree[other] -= 1
                if indegree[other] == 0:
                    heapq.heappush(ready, other)
    sources = [s for s in ordered if not s.reads]
    for stage in ordered:
        if not stage.reads:
            stage.name = "main" if len(sources) == 1 else f"main-{sources.index(stage)}"
        else:
            stage.name = "_".join(r.params["name"] for r in stage.reads)
    return ordered


def operator_holdback(op: OpSpec) -> int:
    """How far behind its own watermark an operator may emit (ms): a stream-stream join's unmatched messages
    and late-tolerant pairs (:attr:`~sparza.api.joins.JoinSpec.holdback_ms`), a window's late panes (its
    allowed lateness); 0 for every other operator."""
    if op.kind == OpKind.STREAM_JOIN:
        return int(op.params["spec"].holdback_ms)
    if op.kind == OpKind.WINDOW:
        return int(op.params["spec"].allowed_lateness_ms)
    return 0


def watermark_holdbacks(stage: StageSpec) -> dict[int, int]:
    """Per operator of ``stage``: how far behind the task watermark its watermark is, the largest sum of
    :func:`operator_holdback` over the stateful operators on a path to it inside the stage (as Samza's
    per-operator watermark, the min of its inputs' output watermarks). Operators read from an
    intermediate stream start at 0: the upstream stage held back the watermark it wrote there."""
    ids = {op.id for op in stage.ops}
    out: dict[int, int] = {}
    for op in sorted(stage.ops, key=lambda o: o.id):  # ids are declaration order: parents come first
        out[op.id] = max((out[p.id] + operator_holdback(p) for p in op.parents if p.id in ids), default=0)
    return out
