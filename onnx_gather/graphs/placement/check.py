"""``onnx-gather check``: for every node, where ONNX Runtime's DirectML provider runs it, why, and what DirectML is
known to do there; for gathers, also whether DirectML at a feature level accepts them (docs/semantics.md sections 5
and 6; the rules are in ``placement.gather``, ``placement.nodes`` and ``placement.known``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

import numpy as np
import onnx

from onnx_gather.core import contract
from onnx_gather.core.contract import GATHER_OPS
from onnx_gather.core.words import counted
from onnx_gather.graphs.analysis import Analysis, Options
from onnx_gather.graphs.changes import NodeChange
from onnx_gather.graphs.dml_plan import Left
from onnx_gather.graphs.placement import known
from onnx_gather.graphs.placement.gather import (
    FEATURE_LEVELS,
    FeatureLevel,
    cpu_reason,
    dml_operator,
    dml_type_name,
    has_type,
    judge,
    needed_level,
)
from onnx_gather.graphs.placement.nodes import CREATION_INVALID, Failure, Placed, Where, Why, place_nodes
from onnx_gather.graphs.placement.session import Fate, Session
from onnx_gather.graphs.plumbing import (
    Body,
    DefUse,
    attribute,
    bodies,
    node_label,
    orders,
    sort_topologically,
    use_counts,
)
from onnx_gather.graphs.ranges import Ranges
from onnx_gather.graphs.ranks import Observer
from onnx_gather.graphs.types import ValueType

_PLACED = (Where.DIRECTML, Where.CPU, Where.FAILS)  # the statuses that say where the node runs


@dataclass(frozen=True)
class Verdict:
    """One node: what becomes of it (``status``), where it runs where the status does not say (``provider``:
    ``DIRECTML``, ``CPU`` or ``UNKNOWN``), why, and what DirectML is known to do there."""

    where: str
    node: str
    op_type: str
    status: Where
    reason: str
    ranks: str = ""  # where a gather's ranks came from a run of the model, which inputs it ran on
    provider: Where | None = None  # None for the status's own: DIRECTML or CPU
    known: tuple[known.Known, ...] = field(default=())
    gather: bool = False  # a standard gather or a DML-form one
    cause: Why | None = None  # for a node on the CPU provider
    fate: Fate | None = None  # in ONNX Runtime's session, where it is known (``with_session``)
    failure: Failure | None = None  # how DirectML fails a gather whose status is FAILS
    session_node: str = ""  # the session's node it runs as or in

    @property
    def runs_on(self) -> Where:
        """DIRECTML, CPU or UNKNOWN."""
        if self.provider:
            return self.provider
        return {Where.FAILS: Where.DIRECTML}.get(self.status, self.status) if self.status in _PLACED else Where.UNKNOWN


def _describe(op_type: str, n: int, data_type: int, index_type: int, batch: int = 0) -> str:
    dml = dml_operator(op_type, batch)
    level = needed_level(op_type, n, data_type, index_type, batch)
    needs = f"feature level {level} or later" if level else "no feature level"
    types = f"{dml_type_name(data_type)} data, {dml_type_name(index_type)} indices"
    return f"{dml} with {counted(n, 'dimension')}, {types} ({needs})"


def _standard(change: NodeChange, level: FeatureLevel, placed: Placed | None) -> Verdict:
    """A standard gather, which DML form expresses (``change.plan`` a ``DmlPlan``) or not (a ``Left``), and where
    the provider's graph partitioning puts it (``placed``) and a device of ``level`` (``plan.placement``)."""

    def verdict(status: Where, reason: str, failure: Failure | None = None) -> Verdict:
        cause = None
        if placed and status == Where.CPU:
            cause = placed.why if placed.provider == Where.CPU else Why.DEVICE_TYPES
        provider = placed.provider if placed is not None and status in (Where.UNKNOWN, Where.REFUSED) else None
        return Verdict(
            change.where,
            change.node,
            change.op_type,
            status,
            reason,
            change.ranks,
            provider,
            gather=True,
            cause=cause,
            failure=failure,
        )

    plan = change.plan
    if placed is not None and placed.by_its_graph:
        return verdict(Where.CPU, cpu_reason(placed.why))
    if isinstance(plan, Left) and plan.fails:  # a gather DML form cannot express that the provider takes and fails
        return verdict(Where.FAILS, plan.fails, plan.placement.failure if plan.placement else None)
    if plan.placement is None:  # a rank, or the length of GatherND's index tuples, is unknown
        return verdict(Where.UNKNOWN, f"the provider decides when it runs: {change.reason}")
    if plan.placement.provider != Where.DIRECTML:
        return verdict(plan.placement.provider, plan.placement.reason, plan.placement.failure)
    if isinstance(plan, Left):
        return verdict(Where.REFUSED, f"cannot be expressed: {change.reason}")
    dml = (change.op_type, plan.form.dimension_count, plan.data.elem_type, plan.indices.elem_type, plan.batch)
    refusal = judge(level, *dml)
    if refusal is not None:  # the device has the node's types, so the provider takes it; DirectML refuses it
        return verdict(
            Where.FAILS,
            f"{refusal}: ONNX Runtime's provider takes the node (the device has its types) and "
            "DirectML refuses the operator when the session is created (from DirectML's "
            "operator tables; no device of that level was measured)",
            CREATION_INVALID,
        )
    described = _describe(*dml)
    return verdict(Where.DIRECTML, f"{described}; {plan.placement.reason}")


def check(
    model: onnx.ModelProto,
    feature_level: str = "4.1",
    observation: Observer | None = None,
) -> list[Verdict]:
    """A verdict for every node of ``model`` (subgraphs and functions included), in each graph's order: standard
    nodes as ONNX Runtime's DirectML provider would take them, DML-form gathers (custom ops already in the model) by
    what the feature level accepts."""
    model = _sorted(model)
    level = FEATURE_LEVELS[feature_level]
    # What to_dml would do with the gathers, without converting, and where the provider puts them on such a device.
    analysis = Analysis(model, Options(feature_level=level), observation)
    placed = place_nodes(model)
    uses = use_counts(model)
    verdicts = []
    for body in bodies(model):
        types = analysis.types.get(body.scope, {})
        outputs = frozenset(o if isinstance(o, str) else o.name for o in body.container.output)
        graph = DefUse(body, uses[body.scope], model.ir_version)
        ranges = Ranges(graph, types)
        for position, node in enumerate(body.nodes):
            where = placed[body.where][position] if body.where in placed else None
            if contract.is_dml(node):
                verdicts.append(_dml_form(body, types, node, position, feature_level))
                continue
            if contract.is_dml_scatter(node):
                operator = contract.SCATTER_BY_TYPE[node.op_type].directml
                reason = f"{operator}; onnx-gather's op: check the original model for where the provider places it"
                verdicts.append(
                    Verdict(body.where, node_label(node, position), node.op_type, Where.DML, reason, "", Where.CPU)
                )
                continue
            if node.domain in ("", "ai.onnx") and node.op_type in GATHER_OPS:
                verdict = _standard(analysis.decide(body, types, node, position), level, where)
            else:
                verdict = _node(body, types, node, position, feature_level, where)
            if verdict.runs_on == Where.DIRECTML:
                found = tuple(known.known(known.Node(node, types, graph, outputs, body.opset, ranges)))
                verdict = _with_known(verdict, found)
            verdicts.append(verdict)
    return verdicts


def _with_known(verdict: Verdict, found: tuple[known.Known, ...]) -> Verdict:
    """``verdict`` with the known behaviours at its node: it fails where a failure is met."""
    failing = any(k.kind == known.FAILS and k.status == known.Status.MET for k in found)
    status = Where.FAILS if failing and verdict.status == Where.DIRECTML else verdict.status
    return replace(verdict, status=status, known=found)


def reads(verdicts: list[Verdict]) -> list[str]:
    """The values the flags of ``verdicts`` read to tell, from a run, whether they are met."""
    names = (name for v in verdicts for k in v.known if k.status == known.Status.POSSIBLE for name in k.reads)
    return list(dict.fromkeys(name for name in names if name))


def measured(verdicts: list[Verdict], values: Mapping[str, np.ndarray]) -> list[Verdict]:
    """``verdicts`` with each flag held to a run's ``values``: met (with its count), not met, or still possible
    where the run did not show a value it reads."""
    return [_with_known(v, tuple(k.measure(values) for k in v.known)) if v.known else v for v in verdicts]


def with_session(verdicts: list[Verdict], session: Session) -> list[Verdict]:
    """``verdicts`` with what became of each node in ONNX Runtime's session: its fate and the node it runs as or in,
    whose provider it takes (ONNX Runtime places the graph its optimizations leave)."""
    ran = {(r.where, r.name): r for r in session.nodes}
    result = []
    for v in verdicts:
        fate, into = session.fates.get((v.where, v.node), (None, ""))
        if fate is None:
            result.append(v)
            continue
        v = replace(v, fate=fate, session_node=into)
        node = ran.get((v.where, into))
        if node is None or v.status not in _PLACED[:2]:
            result.append(v)
            continue
        # The session's placement where the graph changed around the node; the verdict's where it knows more (the
        # device's types, a gather DirectML refuses)
        moved = node.placed.provider == Where.CPU and v.runs_on == Where.DIRECTML
        if moved or fate == Fate.FUSED or (v.cause is not None and not v.cause.runs):
            v = replace(
                v,
                status=node.placed.provider,
                provider=None,
                reason=f"in ONNX Runtime's session: {node.placed.reason}",
                cause=_cause(node.placed),
            )
        result.append(v)
    return result


def _node(
    body: Body, types: dict[str, ValueType], node: onnx.NodeProto, position: int, level_name: str, placed: Placed | None
) -> Verdict:
    """Any node but a gather: where ``place_nodes`` puts it, and the device's tensor types."""
    name = node_label(node, position)
    if placed is None:  # a node of a model-local function: ONNX Runtime inlines the function before placing nodes
        return Verdict(
            body.where,
            name,
            node.op_type,
            Where.UNKNOWN,
            "in a model-local function, which ONNX Runtime "
            "inlines before it places nodes: see where the nodes of its call go",
            provider=Where.UNKNOWN,
        )
    if placed.provider == Where.DIRECTML:
        level = FEATURE_LEVELS[level_name]
        lacking = sorted(
            {
                dml_type_name(types[value].elem_type)
                for value in (*node.input, *node.output)
                if value in types and not has_type(level, types[value].elem_type)
            }
        )
        if lacking:
            reason = f"a device of feature level {level_name} lacks {' and '.join(lacking)}: the CPU provider runs it"
            return Verdict(body.where, name, node.op_type, Where.CPU, reason, cause=Why.DEVICE_TYPES)
    return Verdict(body.where, name, node.op_type, placed.provider, placed.reason, cause=_cause(placed))


def _cause(placed: Placed) -> Why | None:
    """Why a node the provider places runs on the CPU provider; None where it runs on DirectML."""
    return placed.why if placed.provider == Where.CPU else None


def _dml_form(body: Body, types: dict[str, ValueType], node: onnx.NodeProto, position: int, level_name: str) -> Verdict:
    """A DML-form gather (onnx-gather's custom op): what DirectML at the feature level takes."""
    name = node_label(node, position)
    data, indices = (types.get(value) for value in node.input[:2])
    if data is None or data.rank is None or indices is None:
        return Verdict(
            body.where,
            name,
            node.op_type,
            Where.UNKNOWN,
            "its input types are unknown",
            provider=Where.CPU,
            gather=True,
        )
    batch = attribute(node, "batch_dimension_count", 0)
    dml = (node.op_type, data.rank, data.elem_type, indices.elem_type, batch)
    refusal = judge(FEATURE_LEVELS[level_name], *dml)
    if refusal:
        return Verdict(body.where, name, node.op_type, Where.REFUSED, refusal, provider=Where.CPU, gather=True)
    reason = f"{_describe(*dml)}; onnx-gather's op: check the original model for where the provider places it"
    return Verdict(body.where, name, node.op_type, Where.DML, reason, provider=Where.CPU, gather=True)


def _sorted(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model``, or a copy of it in topological order where it is not."""
    if not any(order.changed for order in orders(model)):
        return model
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    sort_topologically(copy)
    return copy


@dataclass(frozen=True)
class Flagged:
    """The nodes where one rule's flag has one status: the rule's kind, what DirectML does and when, the nodes with
    the count of elements a run met at each (None where no run counted)."""

    rule: str
    kind: known.Kind
    status: known.Status
    what: str
    when: str
    nodes: tuple[tuple[str, int | None], ...]


def flagged(verdicts: list[Verdict]) -> list[Flagged]:
    """The flags of ``verdicts`` grouped by rule and status: met first, then possible, not met, ruled out."""
    groups: dict[tuple[known.Status, str], list[tuple[known.Known, str]]] = {}
    for v in verdicts:
        for k in v.known:
            groups.setdefault((k.status, k.rule), []).append((k, v.node))
    order = list(known.Status)
    return [
        Flagged(
            rule, found[0][0].kind, status, found[0][0].what, found[0][0].when, tuple((n, k.count) for k, n in found)
        )
        for (status, rule), found in sorted(groups.items(), key=lambda item: (order.index(item[0][0]), item[0][1]))
    ]
