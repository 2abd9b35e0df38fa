"""What a conversion or a lowering did, gather by gather, for the command line's summary and ``check``."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import onnx
from onnx import TensorProto

from onnx_gather.graphs.dml_plan import DmlPlan, Left
from onnx_gather.graphs.plumbing import bodies


@dataclass(frozen=True, kw_only=True)
class NodeChange:
    """One gather or scatter node, a row of a conversion's or a lowering's report: what became of it, and why where
    it stayed as it was. A conversion's row holds its decision, the typed ``plan``; the words are made of it where
    they are printed."""

    where: str
    node: str  # its name, or what reports call a node without one (``plumbing.node_label``)
    op_type: str
    result: str = ""  # the DML node's name (a conversion) or the standard node's (a lowering); "": it stayed
    reason: str = ""  # why it stayed as it was
    plan: DmlPlan | Left | None = None  # a conversion's decision (``graphs.analysis``)
    ranks: str = ""  # where ranks came from when shape inference could not tell them
    out_of_bounds: str = ""  # the mode of the DML node a lowering replaced

    @property
    def fails(self) -> str:
        """Why ONNX Runtime's DirectML provider fails the standard node, where it does ("" elsewhere)."""
        return self.plan.fails if self.plan is not None else ""

    @property
    def dimension_count(self) -> int | None:
        """N of the DML node a conversion made (None for any other row)."""
        return self.plan.form.dimension_count if isinstance(self.plan, DmlPlan) else None

    @property
    def note(self) -> str:
        """How data the bridge cannot carry travels through the DML node ("" where it travels as it is)."""
        if not isinstance(self.plan, DmlPlan) or self.plan.carrier is None:
            return ""
        elem_type, name = self.plan.data.elem_type, TensorProto.DataType.Name
        exact = "exact" if elem_type == TensorProto.BOOL else "exact but for NaN payloads, made canonical"
        return f"{name(elem_type)} data travels as {name(self.plan.carrier)} ({exact})"

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
