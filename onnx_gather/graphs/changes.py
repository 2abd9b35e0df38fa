"""What a conversion or a lowering did, gather by gather, for the command line's summary and ``check``."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import onnx

from onnx_gather.graphs.plumbing import bodies
from onnx_gather.graphs.types import ValueType


@dataclass(frozen=True, kw_only=True)
class NodeChange:
    """One gather node: what became of it, and why where it stayed as it was (the reason, in words, is for a
    node left; a converted or lowered node's figures are typed fields, worded where they are printed)."""

    where: str
    node: str  # its name, or what reports call a node without one (``plumbing.node_label``)
    op_type: str
    result: str  # the DML node's name, or "" where the node stayed standard
    reason: str = ""  # why it stayed as it was
    fails: str = ""  # why ONNX Runtime's DirectML provider fails the standard gather, where it does
    dimension_count: int | None = None  # N of the DML node a conversion made
    out_of_bounds: str = ""  # the mode of the DML node a lowering replaced
    data_type: int | None = None  # the element types DirectML would see (before carrying)
    index_type: int | None = None
    note: str = ""  # how data the bridge cannot carry travels
    ranks: str = ""  # where ranks came from when shape inference could not tell them
    data: ValueType | None = None  # the input types the decision went by, where known
    indices: ValueType | None = None
    axis: int | None = None  # non-negative, where the rank is known
    batch: int = 0  # GatherND's batch_dims
    out_rank: int | None = None  # the standard output's rank, where known

    def describe(self) -> str:
        """``node 'name' (OpType, where): reason``, as the command line and ``to_onnx``'s error word a left node."""
        return f"node {self.node!r} ({self.op_type}, {self.where}): {self.reason}"


@dataclass
class Report:
    """What a conversion or a lowering did, for the command line's summary."""

    before: Counter = field(default_factory=Counter)
    after: Counter = field(default_factory=Counter)
    changed: list[NodeChange] = field(default_factory=list)
    left: list[NodeChange] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # what was done to the model as a whole (an opset raised)


def count_ops(model: onnx.ModelProto) -> Counter:
    """Node counts by op type (``domain::op`` outside the default domain), over every graph and function."""
    counts: Counter = Counter()
    for body in bodies(model):
        counts.update(f"{n.domain}::{n.op_type}" if n.domain not in ("", "ai.onnx") else n.op_type for n in body.nodes)
    return counts
