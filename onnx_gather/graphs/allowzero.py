"""``Reshape`` with ``allowzero=1`` rewritten to ``allowzero=0`` where that changes nothing, for ``convert
--reshape-allowzero-0``: ONNX Runtime's DirectML provider fails on such a Reshape whose shape holds a -1
(docs/directml-on-linux.md, "Known DirectML failures"), and runs it with ``allowzero=0``.

``allowzero`` only matters where an element of the shape is 0: with 1 the output dim is 0, with 0 it is the input's.
So a node is rewritten only where no element of its shape can be 0, which is followed back from the shape input:

1. A constant (an initializer that is no graph input, or a ``Constant``): its values.
2. ``Shape`` (with ``start`` and ``end``): the dims of its input as shape inference knows them; a number is that
   value, any other dim may be 0 (an empty tensor). With ``nonempty_inputs`` (the caller's word that the model's
   inputs never have a dim of 0), a dim of a main-graph input, or named by shape inference with one of their dims'
   symbols, is not 0.
3. ``Concat``, ``Gather`` and ``Slice`` (step 1) by constant positions, ``Unsqueeze`` of a scalar, ``Squeeze`` to
   one, ``Identity`` and ``Cast`` to INT64 move elements.
4. Anything else is not followed: the node is left as it was, saying where the shape could not be followed.

Every Reshape with ``allowzero=1`` gets a verdict: rewritten, or left with the element that may be 0 and where it
comes from. ONNX Runtime's CPU provider does not hold Reshape-14's rule that a 0 and a -1 cannot meet with
``allowzero=1``: it gives ``[0, 5, 6, 64]`` for an input ``[0, 5, 384]`` and the shape ``[0, 5, -1, 64]``, where
``allowzero=0`` fails. So a -1 beside a dim that may be 0 is no excuse: such a node is left too.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import onnx
from onnx import TensorProto

from onnx_gather.core.words import counted
from onnx_gather.graphs.plumbing import Body, DefUse, bodies, node_label
from onnx_gather.graphs.types import ValueType, value_types

# How far back a shape is followed (PyTorch's exports need 3 steps: Shape, Concat, Reshape).
_DEPTH = 32


@dataclass(frozen=True)
class AllowzeroChange:
    """One Reshape with ``allowzero=1``: whether it was rewritten to ``allowzero=0``, and why."""

    node: str
    where: str
    changed: bool
    reason: str

    def describe(self) -> str:
        return f"node {self.node!r} (Reshape, {self.where}): {self.reason}"


@dataclass(frozen=True)
class _Element:
    """One element of a shape: where it comes from, its value where known, and whether it is a dim of the model's
    inputs (0 only for an empty input)."""

    origin: str
    value: int | None = None
    input_dim: bool = False


class _Unfollowed(Exception):
    """A shape this rewrite cannot follow back to its elements: why."""


class _Shapes:
    """The elements of 1-D INT64 values of one body, followed back through the ops of the module's rules."""

    def __init__(
        self, body: Body, types: dict[str, ValueType], ir_version: int, inputs: set[str], symbols: set[str]
    ) -> None:
        self.values = DefUse(body, Counter(), ir_version)
        self.types = types
        self.inputs = inputs  # the main graph's inputs, and the symbols of their dims
        self.symbols = symbols
        self.known: dict[str, tuple[tuple[_Element, ...], bool]] = {}

    def elements(self, name: str, depth: int = 0) -> tuple[tuple[_Element, ...], bool]:
        """The elements of ``name`` and whether it is a scalar; raises ``_Unfollowed``."""
        if name not in self.known:
            if depth > _DEPTH:
                raise _Unfollowed(f"is computed more than {_DEPTH} nodes back")
            self.known[name] = self._follow(name, depth)
        return self.known[name]

    def _follow(self, name: str, depth: int) -> tuple[tuple[_Element, ...], bool]:
        constant = self.values.constant(name)
        if constant is not None:
            if constant.dtype.kind not in "iu" or constant.ndim > 1:
                raise _Unfollowed(f"is a constant of {constant.dtype} and {constant.ndim} dimensions")
            values = constant.reshape(-1).tolist()
            return tuple(_Element(f"the constant {name!r}", int(v)) for v in values), constant.ndim == 0
        node = self.values.made_by(name)
        if node is None:
            raise _Unfollowed("is a graph input, or a value of an enclosing graph")
        label = f"{node.op_type} {node.name!r}" if node.name else node.op_type
        if node.domain not in ("", "ai.onnx"):
            raise _Unfollowed(f"comes from {label}, which this rewrite does not follow")
        op = node.op_type
        attributes = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        if op == "Shape":
            return self._shape(node.input[0], attributes), False
        if op == "Identity" or (op == "Cast" and attributes.get("to") == TensorProto.INT64):
            return self.elements(node.input[0], depth + 1)
        if op == "Concat":
            parts = [self.elements(part, depth + 1) for part in node.input]
            if any(scalar for _, scalar in parts):
                raise _Unfollowed(f"comes from {label}, of a scalar")
            return tuple(e for elements, _ in parts for e in elements), False
        if op == "Unsqueeze":
            elements, scalar = self.elements(node.input[0], depth + 1)
            if not scalar:
                raise _Unfollowed(f"comes from {label}, of more than a scalar")
            return elements, False
        if op == "Squeeze":
            elements, scalar = self.elements(node.input[0], depth + 1)
            if scalar or len(elements) != 1:
                raise _Unfollowed(f"comes from {label}, of other than one element")
            return elements, True
        if op == "Gather" and attributes.get("axis", 0) in (0, -1):
            return self._gather(node, label, depth)
        if op == "Slice":
            return self._slice(node, label, depth), False
        raise _Unfollowed(f"comes from {label}, which this rewrite does not follow")

    def _shape(self, source: str, attributes: dict) -> tuple[_Element, ...]:
        value_type = self.types.get(source)
        if value_type is None or value_type.dims is None:
            raise _Unfollowed(f"is the shape of {source!r}, whose rank is unknown")
        dims = value_type.dims
        rank = len(dims)
        start, end = attributes.get("start", 0), attributes.get("end", rank)
        start, end = (max(0, min(rank, k + rank if k < 0 else k)) for k in (start, end))
        elements = []
        for k in range(start, end):
            dim = dims[k]
            origin = f"dim {k} of {source!r}" + (f" ({dim!r})" if isinstance(dim, str) else "")
            if isinstance(dim, int):
                elements.append(_Element(origin, dim))
            else:
                elements.append(_Element(origin, input_dim=source in self.inputs or dim in self.symbols))
        return tuple(elements)

    def _constant_ints(self, name: str, label: str) -> list[int]:
        constant = self.values.constant(name) if name else None
        if constant is None or constant.dtype.kind not in "iu":
            raise _Unfollowed(f"comes from {label}, whose positions are not constants")
        return [int(v) for v in constant.reshape(-1)]

    def _gather(self, node: onnx.NodeProto, label: str, depth: int) -> tuple[tuple[_Element, ...], bool]:
        elements, scalar = self.elements(node.input[0], depth + 1)
        indices = self.values.constant(node.input[1])
        if scalar or indices is None or indices.dtype.kind not in "iu" or indices.ndim > 1:
            raise _Unfollowed(f"comes from {label}, whose indices are not constants of at most 1 dimension")
        count = len(elements)
        picked = [int(i) + count if i < 0 else int(i) for i in indices.reshape(-1)]
        if any(not 0 <= i < count for i in picked):
            raise _Unfollowed(f"comes from {label}, whose indices are out of range")
        return tuple(elements[i] for i in picked), indices.ndim == 0

    def _slice(self, node: onnx.NodeProto, label: str, depth: int) -> tuple[_Element, ...]:
        elements, scalar = self.elements(node.input[0], depth + 1)
        inputs = [*node.input, "", "", ""]
        if scalar or len(node.input) < 3:  # Slice-1 (starts and ends as attributes) is not followed
            raise _Unfollowed(f"comes from {label}, which this rewrite does not follow")
        starts, ends = self._constant_ints(inputs[1], label), self._constant_ints(inputs[2], label)
        axes = self._constant_ints(inputs[3], label) if inputs[3] else [0]
        steps = self._constant_ints(inputs[4], label) if inputs[4] else [1]
        if len(starts) != 1 or axes not in ([0], [-1]) or steps != [1]:
            raise _Unfollowed(f"comes from {label}, other than one step-1 slice of its one axis")
        return tuple(elements[slice(starts[0], ends[0])])  # ONNX's clamping is Python's for step 1


def _allowzero(node: onnx.NodeProto) -> onnx.AttributeProto | None:
    """A standard Reshape's ``allowzero`` attribute, where it has one."""
    if node.op_type != "Reshape" or node.domain not in ("", "ai.onnx"):
        return None
    return next((a for a in node.attribute if a.name == "allowzero"), None)


def allowzero_reshapes(model: onnx.ModelProto) -> set[str]:
    """The names of the Reshape nodes with ``allowzero=1`` (``Reshape #3`` where unnamed), subgraphs included."""
    return {
        node_label(node, position)
        for body in bodies(model)
        for position, node in enumerate(body.nodes)
        if (attribute := _allowzero(node)) is not None and attribute.i == 1
    }


def _verdict(shapes: _Shapes, node: onnx.NodeProto, nonempty_inputs: bool) -> tuple[bool, str]:
    """Whether ``node``'s ``allowzero`` can be 0 without changing what it computes, and why."""
    try:
        elements, _ = shapes.elements(node.input[1])
    except _Unfollowed as unfollowed:
        return False, f"its shape {node.input[1]!r} {unfollowed}: whether an element may be 0 is not known"
    for k, element in enumerate(elements):
        if element.value == 0:
            return False, f"element {k} of its shape is 0 ({element.origin}): allowzero=1 makes that dim 0"
    for k, element in enumerate(elements):
        if element.value is None and not (element.input_dim and nonempty_inputs):
            hint = " (for an empty input; --assume-nonempty-inputs rules that out)" if element.input_dim else ""
            return False, f"element {k} of its shape is {element.origin}, which may be 0{hint}"
    assumed = any(element.value is None for element in elements)
    return True, "allowzero 1 -> 0: no element of its shape can be 0" + (" for nonempty inputs" if assumed else "")


def clear_allowzero(
    model: onnx.ModelProto, nonempty_inputs: bool = False
) -> tuple[onnx.ModelProto, list[AllowzeroChange]]:
    """A copy of ``model`` in which every ``Reshape`` with ``allowzero=1`` whose shape no 0 can reach has
    ``allowzero=0`` (the module's rules), and an ``AllowzeroChange`` for every Reshape with ``allowzero=1``.

    ``nonempty_inputs``: the caller's word that the model's inputs never have a dim of 0, so that their dims, and
    those shape inference names after them, count as not 0."""
    result = onnx.ModelProto()
    result.CopyFrom(model)
    types = value_types(result)
    inputs = {value.name for value in result.graph.input}
    symbols = {
        dim
        for value in result.graph.input
        if (t := ValueType.of(value)) and t.dims
        for dim in t.dims
        if isinstance(dim, str)
    }
    changes = []
    for body in bodies(result):
        shapes = None
        for position, node in enumerate(body.nodes):
            attribute = _allowzero(node)
            if attribute is None:
                continue
            name = node_label(node, position)
            if attribute.ref_attr_name:
                reason = f"its allowzero is the function's attribute {attribute.ref_attr_name!r}, given by each call"
                changes.append(AllowzeroChange(name, body.where, False, reason))
                continue
            if attribute.i != 1:
                continue
            if shapes is None:  # a function's names are its own: none is a main-graph input
                own = inputs if body.scope == 0 else set()
                shapes = _Shapes(body, types.get(body.scope, {}), result.ir_version, own, symbols)
            changed, reason = _verdict(shapes, node, nonempty_inputs)
            if changed:
                attribute.i = 0
            changes.append(AllowzeroChange(name, body.where, changed, reason))
    return result, changes


def tally(changes: list[AllowzeroChange]) -> str:
    """``Set allowzero=0 on N of M Reshape nodes with allowzero=1.``, as ``convert`` prints it."""
    if not changes:
        return "No Reshape has allowzero=1: nothing to set to 0."
    changed = sum(1 for change in changes if change.changed)
    return f"Set allowzero=0 on {changed} of {counted(len(changes), 'Reshape node')} with allowzero=1."
