"""What a graph fixes of a value's numbers before any run: the interval its elements lie in, and whether they are
whole numbers, followed back through the nodes that make it.

``check``'s known-behaviour rules ask it whether a value can meet their condition (a 0 at a Pow, a subnormal at a
Log, a value below -2^31 at a Cast): a condition the range excludes is ruled out by the graph. The analysis is small
and sound for numbers: it follows constants and initializers, the declared ranges of integer and boolean types, and
the producers below, and takes any other value to be anything. NaN is no number: it passes through every op, so no
range excludes it, and a rule whose condition includes NaN says so itself.

Followed: ``Clip`` (its bounds, where constant), ``Relu``, ``Sigmoid``, ``Softmax``, ``Exp``, ``Abs``, ``Sqrt``,
``Tanh``, ``Erf``, ``Neg``, ``Floor``, ``Ceil``, ``Round``, ``Add``, ``Sub`` and ``Mul`` (interval arithmetic; ``Mul``
of a value by itself and ``Pow`` by an even constant are squares), ``Max`` and ``Min``, ``Cast`` (to and from a type
of narrower range), ``Shape`` and ``Size`` (counts, 0 or more), ``ArgMax`` and ``ArgMin``, ``ConstantOfShape``, and
the ops that only move elements (``Reshape``, ``Transpose``, ``Gather``, ``Concat``, ``Slice``...). Float results
are widened by a float32 step at each end, as float arithmetic rounds.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import TensorProto, helper

from onnx_gather.graphs.plumbing import DefUse, attribute
from onnx_gather.graphs.types import ValueType

_DEPTH = 64  # how far back a value is followed


@dataclass(frozen=True)
class Range:
    """The numbers a value's elements may be: each in ``[low, high]``; ``integral``: every one a whole number."""

    low: float = -math.inf
    high: float = math.inf
    integral: bool = False

    def excludes(self, low: float, high: float) -> bool:
        """No element lies in ``[low, high]``."""
        return self.high < low or self.low > high

    def within(self, low: float, high: float) -> bool:
        """Every element lies in ``[low, high]``."""
        return low <= self.low and self.high <= high

    def union(self, other: Range) -> Range:
        return Range(min(self.low, other.low), max(self.high, other.high), self.integral and other.integral)

    def said(self) -> str:
        """The range in words: "in [0, inf]", "whole numbers in [0, 255]"."""
        kind = "whole numbers " if self.integral else ""
        return f"{kind}in [{self.low:.9g}, {self.high:.9g}]"


ANY = Range()
_COUNT = Range(0, float(np.iinfo(np.int64).max), integral=True)  # a dim, a size, an index


def type_range(elem_type: int) -> Range:
    """What a value of ``elem_type`` can hold: an integer type's range, else anything."""
    if elem_type == TensorProto.BOOL:
        return Range(0, 1, integral=True)
    try:
        dtype = np.dtype(helper.tensor_dtype_to_np_dtype(elem_type))
    except (KeyError, TypeError, ValueError):
        return ANY
    if dtype.kind in "iu":
        limits = np.iinfo(dtype)
        return Range(float(limits.min), float(limits.max), integral=True)
    return ANY


def of_array(array: np.ndarray) -> Range:
    """The range of a constant's numbers (ANY where it holds none, or strings)."""
    if array.dtype.kind not in "biuf" or array.size == 0:
        return ANY
    numbers = array.astype(np.float64)
    numbers = numbers[~np.isnan(numbers)]
    if numbers.size == 0:
        return ANY
    integral = array.dtype.kind in "biu" or bool(np.all(np.isfinite(numbers)) and np.all(numbers == np.round(numbers)))
    return Range(float(numbers.min()), float(numbers.max()), integral)


def _widened(low: float, high: float, integral: bool = False) -> Range:
    """``[low, high]`` computed in float64, widened by a float32 step at each end for the rounding of a float op
    (never past 0, which float arithmetic keeps)."""
    if math.isnan(low) or math.isnan(high):
        return ANY
    if not integral:
        low = low if low in (0.0, -math.inf) else float(np.nextafter(np.float32(low), np.float32(-np.inf)))
        high = high if high in (0.0, math.inf) else float(np.nextafter(np.float32(high), np.float32(np.inf)))
    return Range(low, high, integral)


def _products(a: Range, b: Range) -> list[float]:
    products = []
    for x in (a.low, a.high):
        for y in (b.low, b.high):
            product = x * y
            products.append(0.0 if math.isnan(product) else product)  # inf * 0: the 0 end of a bound
    return products


def _add(a: Range, b: Range) -> Range:
    return _widened(a.low + b.low, a.high + b.high, a.integral and b.integral)


def _mul(a: Range, b: Range) -> Range:
    products = _products(a, b)
    return _widened(min(products), max(products), a.integral and b.integral)


def _square(a: Range) -> Range:
    ends = [a.low * a.low, a.high * a.high]
    low = 0.0 if a.low <= 0 <= a.high else min(ends)
    return _widened(low, max(ends), a.integral)


_MOVERS = frozenset(
    {
        "Identity",
        "Reshape",
        "Flatten",
        "Squeeze",
        "Unsqueeze",
        "Transpose",
        "Expand",
        "Tile",
        "Slice",
        "Gather",
        "GatherElements",
        "GatherND",
        "Concat",
        "Split",
        "DepthToSpace",
        "SpaceToDepth",
        "ReduceMax",
        "ReduceMin",
        "MaxPool",
    }
)
_FIXED = {  # op -> its outputs' range whatever the input
    "Sigmoid": Range(0, 1),
    "Softmax": Range(0, 1),
    "Tanh": Range(-1, 1),
    "Erf": Range(-1, 1),
    "Shape": _COUNT,
    "Size": _COUNT,
    "ArgMax": _COUNT,
    "ArgMin": _COUNT,
    "NonZero": _COUNT,
}
_UNARY: dict[str, Callable[[Range], Range]] = {
    "Relu": lambda a: Range(max(a.low, 0.0), max(a.high, 0.0), a.integral),
    "Abs": lambda a: Range(a.low if a.low > 0 else max(-a.high, 0.0), max(-a.low, a.high), a.integral),
    "Neg": lambda a: Range(-a.high, -a.low, a.integral),
    # float32's exp underflows to 0 below about -104 and overflows above about 88.7
    "Exp": lambda a: _widened(math.exp(a.low) if a.low > -104 else 0.0, math.exp(a.high) if a.high < 88 else math.inf),
    "Sqrt": lambda a: _widened(math.sqrt(max(a.low, 0.0)), math.sqrt(max(a.high, 0.0))),
    "Floor": lambda a: Range(math.floor(a.low) if math.isfinite(a.low) else a.low, a.high, True),
    "Ceil": lambda a: Range(a.low, math.ceil(a.high) if math.isfinite(a.high) else a.high, True),
    "Round": lambda a: Range(a.low - 0.5 if math.isfinite(a.low) else a.low, a.high + 0.5, True),
}


_SIXTEEN = (TensorProto.FLOAT16, TensorProto.BFLOAT16)


def _cast(source: Range, to: int) -> Range:
    """A Cast's output: an integer target's truncation of the source's ends (an out-of-range source is bounded by
    the target type instead), BOOL's 0 or 1, a float target's rounding (a 16-bit one by up to 2^-7 of a value, with
    float16's underflow to 0 and its smallest step up, 6e-8, and its overflow to inf)."""
    if to == TensorProto.BOOL:
        if source.excludes(0, 0):
            return Range(1, 1, True)
        return Range(0, 0, True) if source.within(0, 0) else Range(0, 1, True)
    target = type_range(to)
    if target.integral:
        ends = [math.trunc(end) if math.isfinite(end) else end for end in (source.low, source.high)]
        return Range(ends[0], ends[1], True)
    if to not in _SIXTEEN:
        return source if source.integral else _widened(source.low, source.high)

    def rounded(end: float, up: bool) -> float:
        if not math.isfinite(end) or end == 0:
            return end
        moved = end * (1 + 2**-7) if (end > 0) == up else end * (1 - 2**-7)
        if abs(moved) > 65000 and to == TensorProto.FLOAT16:
            return math.inf if up else -math.inf
        if (end > 0) != up and abs(end) < 1e-4:
            return 0.0  # it may round to 0
        return max(moved, 6e-8) if up and end > 0 else min(moved, -6e-8) if not up and end < 0 else moved

    return Range(rounded(source.low, False), rounded(source.high, True), source.integral)


class Ranges:
    """The ranges of one graph's values (a ``DefUse`` of its nodes, and their types), followed lazily and kept."""

    def __init__(self, graph: DefUse, types: Mapping[str, ValueType]) -> None:
        self.graph, self.types = graph, types
        self._known: dict[str, Range] = {}

    def of(self, value: str) -> Range:
        """The range of ``value``'s numbers."""
        return self._follow(value, _DEPTH)

    def _follow(self, value: str, depth: int) -> Range:
        if value not in self._known:
            self._known[value] = self._find(value, depth)
        return self._known[value]

    def _find(self, value: str, depth: int) -> Range:
        declared = self.types.get(value)
        by_type = ANY if declared is None or not declared.elem_type else type_range(declared.elem_type)
        constant = self.graph.constant(value)
        if constant is not None:
            return of_array(constant)
        node = self.graph.made_by(value)
        if node is None or depth == 0 or node.domain not in ("", "ai.onnx"):
            return by_type
        found = self._node(node, lambda name: self._follow(name, depth - 1) if name else ANY)
        if by_type.integral and not (found.integral and found.within(by_type.low, by_type.high)):
            return by_type  # what an integer op may wrap to
        return found

    def _node(self, node: onnx.NodeProto, of: Callable[[str], Range]) -> Range:
        op, inputs = node.op_type, list(node.input)
        if op in _FIXED:
            return _FIXED[op]
        if op in _UNARY:
            return _UNARY[op](of(inputs[0]))
        if op in _MOVERS:
            moved = inputs if op == "Concat" else inputs[:1]
            found = of(moved[0])
            for name in moved[1:]:
                found = found.union(of(name))
            return found
        if op == "Clip":
            return self._clip(node, of)
        if op in ("Add", "Sub"):
            a, b = of(inputs[0]), of(inputs[1])
            return _add(a, b if op == "Add" else Range(-b.high, -b.low, b.integral))
        if op == "Mul":
            return _square(of(inputs[0])) if inputs[0] == inputs[1] else _mul(of(inputs[0]), of(inputs[1]))
        if op == "Pow":
            exponent = self.graph.constant(inputs[1])
            if exponent is not None and exponent.size == 1 and float(exponent.ravel()[0]) == 2.0:
                return _square(of(inputs[0]))
            return ANY
        if op in ("Max", "Min"):
            ranges = [of(name) for name in inputs]
            pick = max if op == "Max" else min
            return Range(pick(r.low for r in ranges), pick(r.high for r in ranges), all(r.integral for r in ranges))
        if op == "Cast":
            return _cast(of(inputs[0]), int(attribute(node, "to", 0)))
        if op == "ConstantOfShape":
            value = attribute(node, "value")
            return of_array(np.zeros(1, np.float32) if value is None else value)
        return ANY

    def _clip(self, node: onnx.NodeProto, of: Callable[[str], Range]) -> Range:
        """``min(max(x, low), high)``, with the bounds of opset 11's inputs or of the attributes before; where ``low``
        may exceed ``high``, the output may also be ``low``, as DirectML gives it (``clip-min-above-max``)."""
        x = of(node.input[0])
        low = Range(attribute(node, "min", -math.inf), attribute(node, "min", -math.inf))
        high = Range(attribute(node, "max", math.inf), attribute(node, "max", math.inf))
        if len(node.input) > 1 and node.input[1]:
            low = of(node.input[1])
        if len(node.input) > 2 and node.input[2]:
            high = of(node.input[2])
        bottom = min(max(x.low, low.low), high.low)
        top = min(max(x.high, low.high), high.high)
        if low.high > high.low:
            bottom, top = min(bottom, low.low), max(top, low.high)
        return Range(bottom, top, x.integral and low.integral and high.integral)
