"""``onnx-gather check``: what ONNX Runtime's DirectML provider would do with each gather, and whether DirectML at a
feature level accepts it (docs/semantics.md sections 5 and 6; the rules are in ``placement.gather``)."""

from __future__ import annotations

from dataclasses import dataclass

import onnx

from onnx_gather.core import contract
from onnx_gather.core.contract import GATHER_OPS
from onnx_gather.core.words import counted
from onnx_gather.graphs.analysis import Analysis
from onnx_gather.graphs.changes import NodeChange
from onnx_gather.graphs.placement.gather import (
    FEATURE_LEVELS,
    dml_operator,
    dml_type_name,
    judge,
    needed_level,
    place_gather,
)
from onnx_gather.graphs.placement.nodes import REASONS, Placed, place_nodes
from onnx_gather.graphs.plumbing import bodies, node_label, orders, sort_topologically
from onnx_gather.graphs.ranks import Observer

# Verdicts: the provider runs it on DirectML; keeps it on its CPU provider; takes it and fails; DirectML at the
# feature level cannot express it; the ranks are unknown (the provider decides when it runs); a DML node (a converted
# model's) whose operator DirectML at the feature level takes, which tells nothing of where the provider would place
# the gather it came from (that depends on the original's types and opsets).
STATUSES = ("DirectML", "CPU", "fails", "refused", "unknown", "DML")


@dataclass(frozen=True)
class Verdict:
    """One gather node: what becomes of it (``status``, one of ``STATUSES``) and why."""

    where: str
    node: str
    op_type: str
    status: str
    reason: str
    ranks: str = ""  # where ranks came from a run of the model, which inputs it ran on


def _describe(op_type: str, n: int, data_type: int, index_type: int, batch: int = 0) -> str:
    dml = dml_operator(op_type, batch)
    level = needed_level(op_type, n, data_type, index_type, batch)
    needs = f"feature level {level} or later" if level else "no feature level"
    types = f"{dml_type_name(data_type)} data, {dml_type_name(index_type)} indices"
    return f"{dml} with {counted(n, 'dimension')}, {types} ({needs})"


def _standard(change: NodeChange, level_name: str, placed: Placed | None) -> Verdict:
    """A standard gather, which DML form expresses (``change.result``) or not (``graphs.analysis``), and where the
    provider's graph partitioning puts it (``placed``)."""

    def verdict(status: str, reason: str) -> Verdict:
        return Verdict(change.where, change.node, change.op_type, status, reason, change.ranks)

    if placed is not None and placed.why in REASONS:
        return verdict("CPU", REASONS[placed.why])
    if change.data is None or change.indices is None:
        return verdict("unknown", f"the provider decides when it runs: {change.reason}")
    level = FEATURE_LEVELS[level_name]
    if change.out_rank is None:  # a GatherND whose index tuples have no known length
        return verdict("unknown", f"the provider decides when it runs: {change.reason}")
    placement = place_gather(
        change.op_type, change.data, change.indices, change.axis, level, change.out_rank, change.batch
    )
    if placement.provider != "DirectML":
        return verdict(placement.provider, placement.reason)
    if not change.result:
        return verdict("refused", f"cannot be expressed: {change.reason}")
    dml = (change.op_type, change.dimension_count, change.data_type, change.index_type, change.batch)
    refusal = judge(level, *dml)
    if refusal is not None:  # the device has the node's types, so the provider takes it; DirectML refuses it
        return verdict(
            "fails",
            f"{refusal}: ONNX Runtime's provider takes the node (the device has its types) and "
            "DirectML refuses the operator when the session is created (from DirectML's "
            "operator tables; no device of that level was measured)",
        )
    described = _describe(*dml)
    return verdict("DirectML", f"{described}; {placement.reason}")


def check(
    model: onnx.ModelProto,
    feature_level: str = "4.1",
    observation: Observer | None = None,
) -> list[Verdict]:
    """A verdict for every gather: standard ones as ONNX Runtime's DirectML provider would take them, DML-form ones
    (custom ops already in the model) by what the feature level accepts."""
    level = FEATURE_LEVELS[feature_level]
    model = _sorted(model)
    analysis = Analysis(model, observation=observation)  # what to_dml would do, decided without converting
    placed = place_nodes(model)
    verdicts = []
    for body in bodies(model):
        types = analysis.types.get(body.scope, {})
        for position, node in enumerate(body.nodes):
            if node.domain in ("", "ai.onnx") and node.op_type in GATHER_OPS:
                change = analysis.decide(body, types, node, position)[1]
                where = placed[body.where][position] if body.where in placed else None
                verdicts.append(_standard(change, feature_level, where))
    for body in bodies(model):
        scope = analysis.types.get(body.scope, {})
        for position, node in enumerate(body.nodes):
            if not contract.is_dml(node):
                continue
            name = node_label(node, position)
            data, indices = (scope.get(name) for name in node.input[:2])
            if data is None or data.rank is None or indices is None:
                verdicts.append(Verdict(body.where, name, node.op_type, "unknown", "its input types are unknown"))
                continue
            batch = next((a.i for a in node.attribute if a.name == "batch_dimension_count"), 0)
            dml = (node.op_type, data.rank, data.elem_type, indices.elem_type, batch)
            refusal = judge(level, *dml)
            if refusal:
                verdicts.append(Verdict(body.where, name, node.op_type, "refused", refusal))
                continue
            reason = f"{_describe(*dml)}; onnx-gather's op: check the original model for where the provider places it"
            verdicts.append(Verdict(body.where, name, node.op_type, "DML", reason))
    return verdicts


def _sorted(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model``, or a copy of it in topological order where it is not."""
    if not any(order.changed for order in orders(model)):
        return model
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    sort_topologically(copy)
    return copy


def summary(verdicts: list[Verdict], feature_level: str) -> str:
    """One line: how many gathers the provider runs where, at ``feature_level``."""
    counts = {status: sum(v.status == status for v in verdicts) for status in STATUSES}
    parts = [
        f"{counts[s]} {label}"
        for s, label in (
            ("DirectML", "on DirectML"),
            ("CPU", "on the CPU provider"),
            ("fails", "failing"),
            ("refused", "refused"),
            ("unknown", "unknown until the model runs"),
            ("DML", "as DML nodes (converted by onnx-gather: check the original model for placement)"),
        )
        if counts[s]
    ]
    return (
        f"{counted(len(verdicts), 'gather')} at DirectML feature level {feature_level}: {', '.join(parts) or 'none'}."
    )
