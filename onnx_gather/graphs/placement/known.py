"""What DirectML is known to do with a node the provider runs on it: fail, or compute otherwise than ONNX Runtime's CPU.

Each rule is one DirectML behaviour measured on real DirectML (ONNX Runtime 1.24.4, DirectML 1.15.4), stated once
here; ``tests/test_known.py`` runs each rule's repro there and holds the rule to it, and to what ``check`` says of
the repro. A rule looks at one node as ONNX holds it (its attributes, input and output types, constant inputs, the
nodes around it, the ranges ``graphs.ranges`` finds for its inputs). Where the behaviour depends on the values a run
brings, the rule says on which (``when``), which of the node's values tell (``reads``) and how to count the elements
of a run that meet it (``counter``); where the graph fixes those values so that none can, it is ruled out, saying
what rules it out. ``Known.measure`` holds such a flag to the values of a run.

Beside each rule stands what the ``dmlsim`` backend makes of it: a ``differs`` rule's emulation (the nodes, in
standard ONNX, that compute at the node what DirectML computes) or why it has none; a ``fails`` rule's ``Failure``
(DirectML's HRESULT and when it comes).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum

import numpy as np
import onnx
from onnx import TensorProto

from onnx_gather.core.scatter import scatter_elements_refusal
from onnx_gather.graphs.emit import Emitter
from onnx_gather.graphs.plumbing import DefUse, attribute
from onnx_gather.graphs.ranges import Range, Ranges
from onnx_gather.graphs.types import ValueType

_FLOATS = frozenset({TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.DOUBLE})


class Kind(StrEnum):
    """What DirectML does at the node: fails (refuses the model, or the run), or computes otherwise than the CPU."""

    FAILS = "fails"
    DIFFERS = "differs"


FAILS, DIFFERS = Kind.FAILS, Kind.DIFFERS


class Status(StrEnum):
    """Whether a flag's condition holds: the graph fixes it (``MET`` without a run), a run's values meet it or not,
    nothing tells yet (``POSSIBLE``), or the graph rules it out."""

    MET = "met"
    NOT_MET = "not met"
    POSSIBLE = "possible"
    RULED_OUT = "ruled out"


class At(StrEnum):
    """When DirectML's failure comes."""

    CREATION = "when the session is created"
    RUN = "when it runs"
    PROCESS = "when it runs, ending the process that runs ONNX Runtime"


@dataclass(frozen=True)
class Failure:
    """How DirectML fails: its HRESULT ("" where the process ends instead) and when."""

    hresult: str
    at: At


CREATION_INVALID = Failure("80070057", At.CREATION)  # E_INVALIDARG when the session is created


# Given the values a flag reads (in the order of its ``reads``), how many elements of a run meet its condition.
Count = Callable[..., int]


@dataclass(frozen=True)
class Flag:
    """What a rule says at a node: what DirectML does; ``when``, the condition on a run's values ("" where the graph
    fixes it); ``ruled_out``, what of the graph excludes that condition; the values it reads and how it counts."""

    what: str
    when: str = ""
    ruled_out: str = ""
    reads: tuple[str, ...] = ()
    counter: Count | None = field(default=None, compare=False)
    failure: Failure | None = None  # a FAILS rule's


@dataclass(frozen=True)
class Known:
    """One known behaviour of DirectML at one node: which rule, ``kind``, what it does, and whether it happens:
    ``status`` (from the graph, or from a run's values: ``measure``) and, where a run met it, ``count``."""

    rule: str
    kind: Kind
    what: str
    when: str = ""
    ruled_out: str = ""
    reads: tuple[str, ...] = ()
    counter: Count | None = field(default=None, compare=False)
    measured: Status | None = None  # what a run's values say
    count: int | None = None  # the elements of the run that meet ``when``
    failure: Failure | None = None  # a FAILS rule's: how DirectML fails
    # A DIFFERS rule's: the emulation at this node (it emits, in standard ONNX, what DirectML computes there and
    # returns the value it writes: the node that makes that value is replaced), or why there is none
    emulation: Callable[[Emitter], str] | None = field(default=None, compare=False)
    unemulated: str = ""

    @property
    def status(self) -> Status:
        if self.measured is not None:
            return self.measured
        if self.ruled_out:
            return Status.RULED_OUT
        return Status.POSSIBLE if self.when else Status.MET

    @property
    def certain(self) -> bool:
        """The graph alone makes it happen."""
        return not self.when and not self.ruled_out

    def measure(self, values: Mapping[str, np.ndarray]) -> Known:
        """The flag held to a run's ``values`` (by name): met with its count, not met, or still possible where the
        run did not show a value it reads (or it reads none); a flag the graph rules out stays so."""
        if self.certain or self.ruled_out or self.counter is None or any(name not in values for name in self.reads):
            return self
        count = int(self.counter(*(np.asarray(values[name]) for name in self.reads)))
        return replace(self, measured=Status.MET if count else Status.NOT_MET, count=count)


@dataclass(frozen=True)
class Node:
    """One node as the rules see it: the node, its graph's value types, who makes and takes its values, the ranges
    of its graph's values, and the opset."""

    node: onnx.NodeProto
    types: Mapping[str, ValueType]
    graph: DefUse
    graph_outputs: frozenset[str]
    opset: int  # the default domain's version in force where the node is
    ranges: Ranges

    def since(self) -> int | None:
        """The since-version of the node's standard operator at its opset (which kernel the provider takes)."""
        try:
            return onnx.defs.get_schema(self.node.op_type, self.opset, "").since_version
        except onnx.defs.SchemaError:
            return None

    def attribute(self, name: str, default: object = None) -> object:
        return attribute(self.node, name, default)

    def type_of(self, position: int, outputs: bool = False) -> ValueType | None:
        names = self.node.output if outputs else self.node.input
        return self.types.get(names[position]) if position < len(names) and names[position] else None

    def elem_type(self, position: int, outputs: bool = False) -> int | None:
        value = self.type_of(position, outputs)
        return None if value is None else value.elem_type

    def constant(self, position: int) -> np.ndarray | None:
        return self.graph.constant(self.node.input[position]) if position < len(self.node.input) else None

    def input(self, position: int) -> str:
        return self.node.input[position] if position < len(self.node.input) else ""

    def range(self, position: int) -> Range:
        return self.ranges.of(self.input(position))

    def static(self, position: int) -> tuple[int, ...] | None:
        """The dims of input ``position`` where every one is known."""
        value = self.type_of(position)
        if value is None or value.dims is None or not all(isinstance(d, int) for d in value.dims):
            return None
        return tuple(value.dims)


# A DIFFERS rule's emulation at a node: it emits what DirectML computes there and returns the value it writes.
Emulate = Callable[[Node, Emitter], str]


@dataclass(frozen=True)
class Rule:
    """One measured behaviour: its name, ``FAILS`` or ``DIFFERS``, the operators it concerns, the test of a node
    (a ``Known``, or None where the rule does not apply), and for a DIFFERS rule its emulation or why none."""

    name: str
    kind: Kind
    op_types: frozenset[str]
    test: Callable[[Node], Known | None]
    emulated: Emulate | str | None = None


RULES: list[Rule] = []


def _rule(
    name: str, kind: Kind, *op_types: str, emulated: Emulate | str | None = None
) -> Callable[[Callable[[Node], Flag | None]], Callable]:
    """Register a rule whose function gives its ``Flag`` at the node (None: the rule does not apply); a DIFFERS
    rule's ``emulated`` is its emulation, or why it has none."""

    def register(function: Callable[[Node], Flag | None]) -> Callable:
        def test(node: Node) -> Known | None:
            flag = function(node)
            if flag is None:
                return None
            emulation = (lambda emit: emulated(node, emit)) if callable(emulated) else None
            unemulated = emulated if isinstance(emulated, str) else ""
            return Known(
                name,
                kind,
                flag.what,
                flag.when,
                flag.ruled_out,
                flag.reads,
                flag.counter,
                failure=flag.failure,
                emulation=emulation,
                unemulated=unemulated,
            )

        RULES.append(Rule(name, kind, frozenset(op_types), test, emulated))
        return function

    return register


def known(node: Node) -> list[Known]:
    """Every known behaviour of DirectML at ``node``, a standard-domain node the provider runs on DirectML, the
    ruled-out ones too."""
    if node.node.domain not in ("", "ai.onnx", "com.microsoft"):
        return []
    found = (rule.test(node) for rule in RULES if node.node.op_type in rule.op_types)
    return [k for k in found if k is not None]


def rule_names() -> Iterator[str]:
    return (rule.name for rule in RULES)


def _elements(array: np.ndarray) -> int:
    return int(np.count_nonzero(array))


def _np_type(elem_type: int | None) -> np.dtype:
    return np.dtype(onnx.helper.tensor_dtype_to_np_dtype(elem_type or TensorProto.FLOAT))


def _again(node: Node, emit: Emitter, step: str, **attributes: object) -> str:
    """The node itself once more (its ``attributes`` changed), writing a fresh value: what an emulation builds on."""
    copy = onnx.NodeProto()
    copy.CopyFrom(node.node)
    copy.output[0] = emit.names.fresh(f"{emit.prefix}/{step}")
    copy.name = emit.names.fresh(f"{emit.prefix}/{step}")
    kept = [a for a in copy.attribute if a.name not in attributes]
    del copy.attribute[:]
    copy.attribute.extend([*kept, *(onnx.helper.make_attribute(k, v) for k, v in attributes.items())])
    emit.nodes.append(copy)
    return copy.output[0]


@_rule("reshape-allowzero", FAILS, "Reshape")
def _reshape_allowzero(node: Node) -> Flag | None:
    if node.attribute("allowzero", 0) != 1:
        return None
    what = (
        "80070057 (Invalid parameter) when the session is created where the input's dims are fixed, else when it "
        "runs: 8007000E where its output is a graph output, 8007023E where a node takes it (`convert "
        "--reshape-allowzero-0` sets allowzero=0 where no 0 can reach the shape)"
    )
    shape = node.constant(1)
    failure = CREATION_INVALID
    if node.static(0) is None:
        failure = Failure("8007000E" if node.node.output[0] in node.graph_outputs else "8007023E", At.RUN)
    if shape is None:
        return Flag(
            what, "if its shape holds a -1 (allowzero=1)", reads=(node.input(1),), counter=_minus_ones, failure=failure
        )
    if -1 not in shape.tolist():
        return Flag(what, "if its shape holds a -1", ruled_out=f"its shape is the constant {shape.tolist()}")
    return Flag(f"allowzero=1 and a -1 in its shape: {what}", failure=failure)


def _minus_ones(shape: np.ndarray) -> int:
    return _elements(shape == -1)


@_rule("convtranspose-1d", FAILS, "ConvTranspose")
def _convtranspose_1d(node: Node) -> Flag | None:
    weights, kernel = node.type_of(1), node.attribute("kernel_shape")
    one_d = (weights is not None and weights.rank == 3) or (kernel is not None and len(kernel) == 1)
    if not one_d or not any(node.attribute("output_padding", [])):
        return None
    return Flag(
        "a 1-D ConvTranspose (3-D tensors) with output_padding: 80070057 (Invalid parameter, "
        "MLOperatorAuthorImpl.cpp(2818)) when the session is created; without output_padding (an output_shape "
        "instead), or as a 2-D one over a height of 1 (Unsqueeze, ConvTranspose, Squeeze), it runs",
        failure=CREATION_INVALID,
    )


def _cast_types(node: Node) -> tuple[int | None, int]:
    return node.elem_type(0), int(node.attribute("to", 0))


def _bounded(node: Node, low: float, high: float, what: str) -> str:
    """What rules out a condition on input 0 outside ``[low, high]``: its range, where within; else ""."""
    found = node.range(0)
    return f"{what} is {found.said()}" if found.within(low, high) else ""


_INT32_MIN = -(2.0**31)


def _cast_to_int64_emulated(node: Node, emit: Emitter) -> str:
    """Every value below -2^31 made -2^31, then the Cast."""
    x, floor = node.input(0), emit.constant(_INT32_MIN, _np_type(node.elem_type(0)), "int32_min")
    floored = emit.node("Where", [emit.node("Less", [x, floor], "below"), floor, x], "floored")
    return emit.node("Cast", [floored], "cast", output=node.node.output[0], to=TensorProto.INT64)


@_rule("cast-to-int64", DIFFERS, "Cast", emulated=_cast_to_int64_emulated)
def _cast_to_int64(node: Node) -> Flag | None:
    source, to = _cast_types(node)
    if to != TensorProto.INT64 or source not in (TensorProto.FLOAT, TensorProto.DOUBLE):
        return None
    return Flag(
        "Cast of FLOAT or DOUBLE to INT64: every value below -2^31 gives -2^31 (up to 3e9 come out right)",
        "if a value is below -2^31",
        _bounded(node, _INT32_MIN, np.inf, "its input"),
        (node.input(0),),
        _below_int32,
    )


def _below_int32(x: np.ndarray) -> int:
    return _elements(x < _INT32_MIN)


@_rule("cast-double-to-uint64", FAILS, "Cast")
def _cast_double_to_uint64(node: Node) -> Flag | None:
    if _cast_types(node) != (TensorProto.DOUBLE, TensorProto.UINT64):
        return None
    return Flag(
        "Cast of DOUBLE to UINT64: 80004005 (Call failed) when the session is created",
        failure=Failure("80004005", At.CREATION),
    )


# What a float may be for a Cast to these types to give the same on DirectML and the CPU: above low, below high
# (both truncate toward 0 first).
_CAST_LIMITS = {TensorProto.INT32: (-(2.0**31) - 1, 2.0**31), TensorProto.UINT8: (-1.0, 256.0)}


def _cast_saturates_emulated(node: Node, emit: Emitter) -> str:
    """Saturated: what is at or beyond a limit gives the type's extreme, NaN 0, the rest the Cast of the CPU."""
    x, dtype, to = node.input(0), _np_type(node.elem_type(0)), int(node.attribute("to", 0))
    low, high = _CAST_LIMITS[to]
    extremes = np.iinfo(_np_type(to))
    # x <= low and x >= high, as comparisons NaN fails: below the next value up, above the next one down
    below = emit.constant(np.nextafter(dtype.type(low), dtype.type(np.inf)), dtype, "low")
    above = emit.constant(np.nextafter(dtype.type(high), dtype.type(-np.inf)), dtype, "high")
    under, over = emit.node("Less", [x, below], "under"), emit.node("Greater", [x, above], "over")
    outside = emit.node("Or", [emit.node("Or", [under, over], "beyond"), emit.node("IsNaN", [x], "nan")], "outside")
    inside = emit.node("Where", [outside, emit.constant(0, dtype, "zero"), x], "inside")
    cast = emit.node("Cast", [inside], "cast", to=to)
    smallest = emit.node("Where", [under, emit.constant(extremes.min, extremes.dtype, "min"), cast], "floored")
    largest = emit.constant(extremes.max, extremes.dtype, "max")
    return emit.node("Where", [over, largest, smallest], "saturated", output=node.node.output[0])


@_rule("cast-saturates", DIFFERS, "Cast", emulated=_cast_saturates_emulated)
def _cast_saturates(node: Node) -> Flag | None:
    source, to = _cast_types(node)
    if source not in _FLOATS or to not in _CAST_LIMITS:
        return None
    low, high = _CAST_LIMITS[to]
    name = TensorProto.DataType.Name(to)
    found = node.range(0)
    inside = found.low > low and found.high < high
    return Flag(
        f"Cast of a float to {name} saturates out of range and gives 0 for NaN (3e9 gives 2147483647; for UINT8, "
        "-1 gives 0 and 300 255), where ONNX Runtime's CPU wraps (-2147483648; 300 gives 44)",
        f"if a value is out of {name}'s range or NaN",
        f"its input is {found.said()} (a NaN aside, which no graph bounds)" if inside else "",
        (node.input(0),),
        lambda x: _elements(np.isnan(x) | (x <= low) | (x >= high)),
    )


def _pow_zero_zero_emulated(node: Node, emit: Emitter) -> str:
    """0 where the base and the exponent are both 0, else the CPU's Pow."""
    (a, b), zero = (node.input(0), node.input(1)), emit.constant(0, _np_type(node.elem_type(0)), "zero")
    naught = emit.constant(0, _np_type(node.elem_type(1)), "naught")
    both = emit.node(
        "And", [emit.node("Equal", [a, zero], "base"), emit.node("Equal", [b, naught], "exponent")], "both"
    )
    return emit.node("Where", [both, zero, _again(node, emit, "pow")], "pow_0_0", output=node.node.output[0])


@_rule("pow-zero-zero", DIFFERS, "Pow", emulated=_pow_zero_zero_emulated)
def _pow_zero_zero(node: Node) -> Flag | None:
    if node.elem_type(0) not in _FLOATS:
        return None
    base, exponent = node.range(0), node.range(1)
    exponent_constant = node.constant(1)
    ruled_out = ""
    if exponent.excludes(0, 0):
        ruled_out = (
            f"its exponent is the constant {_said(exponent_constant)}"
            if exponent_constant is not None
            else f"its exponent is {exponent.said()}"
        )
    elif base.excludes(0, 0):
        ruled_out = f"its base is {base.said()}"
    return Flag(
        "Pow(0, 0) is 0, where ONNX Runtime's CPU gives 1",
        "if the base and the exponent are both 0",
        ruled_out,
        (node.input(0), node.input(1)),
        lambda a, b: _elements((a == 0) & (b == 0)),
    )


def _said(array: np.ndarray) -> str:
    return f"{array.item():g}" if array.size == 1 else str(array.tolist())


_FLOAT_TINY = float(np.finfo(np.float32).tiny)  # the smallest normal FLOAT


def _log_subnormal_emulated(node: Node, emit: Emitter) -> str:
    """A positive subnormal's bits read as a normal number's of exponent -127, 2^-127 * (1 + x * 2^126), as DirectML's
    log reads them (log(1e-45) = -127 ln 2 = -88.03); other values the CPU's Log."""
    x, dtype = node.input(0), np.float32
    subnormal = emit.node(
        "And",
        [
            emit.node("Greater", [x, emit.constant(0, dtype, "zero")], "positive"),
            emit.node("Less", [x, emit.constant(_FLOAT_TINY, dtype, "tiny")], "below_normal"),
        ],
        "subnormal",
    )
    mantissa = emit.node("Mul", [x, emit.constant(2.0**126, dtype, "scale")], "mantissa")
    ones = emit.node("Add", [mantissa, emit.constant(1, dtype, "one")], "significand")
    read = emit.node(
        "Add", [emit.node("Log", [ones], "log_significand"), emit.constant(-127 * np.log(2), dtype, "exponent")], "read"
    )
    return emit.node("Where", [subnormal, read, _again(node, emit, "log")], "log", output=node.node.output[0])


@_rule("log-subnormal", DIFFERS, "Log", emulated=_log_subnormal_emulated)
def _log_subnormal(node: Node) -> Flag | None:
    if node.elem_type(0) != TensorProto.FLOAT:
        return None
    found = node.range(0)
    out = found.integral or found.low >= _FLOAT_TINY or found.high <= -_FLOAT_TINY or found.within(0, 0)
    return Flag(
        "Log of a subnormal: DirectML flushes subnormals (log(1e-45) is -88.03, ONNX Runtime's CPU -103.28)",
        "if an input is subnormal (0 < |x| < 1.18e-38)",
        f"its input is {found.said()}" if out else "",
        (node.input(0),),
        lambda x: _elements((x != 0) & (np.abs(x) < _FLOAT_TINY)),
    )


_GELU_DIFFERENCE = (
    "which the DirectML provider computes as DirectML's GELU, with erf: up to 4.74e-4 from the tanh formula (at "
    "|x| = 2.70), where ONNX Runtime's CPU computes the formula"
)


def _tanh_gelu_emulated(node: Node, emit: Emitter) -> str:
    """GELU with erf, 0.5 x (1 + erf(x / sqrt 2)), of FastGelu's input (and bias), or of the pattern's x in place of
    its last Mul."""
    if node.node.op_type == "FastGelu":
        x, output, dtype = node.input(0), node.node.output[0], _np_type(node.elem_type(0))
        if node.input(1):
            x = emit.node("Add", [x, node.input(1)], "biased")
    else:
        x, last = _gelu_pattern(node)
        output, dtype = last.output[0], _np_type(node.elem_type(0))
    scaled = emit.node("Mul", [x, emit.constant(1 / np.sqrt(2), dtype, "rsqrt2")], "scaled")
    gate = emit.node("Add", [emit.node("Erf", [scaled], "erf"), emit.constant(1, dtype, "one")], "gate")
    half = emit.node("Mul", [x, emit.constant(0.5, dtype, "half")], "half")
    return emit.node("Mul", [half, gate], "gelu", output=output)


@_rule("tanh-gelu", DIFFERS, "Tanh", "FastGelu", emulated=_tanh_gelu_emulated)
def _tanh_gelu(node: Node) -> Flag | None:
    if node.node.op_type == "FastGelu":
        return Flag(f"ONNX Runtime's FastGelu (the tanh approximation of GELU), {_GELU_DIFFERENCE}")
    if _gelu_pattern(node) is None:
        return None
    return Flag(
        "the tanh approximation of GELU around this Tanh (PyTorch's GELU of T5 and GPT-2): ONNX Runtime's "
        f"FastGeluFusion (level 2 and above) makes it one FastGelu, {_GELU_DIFFERENCE}"
    )


def _gelu_pattern(node: Node) -> tuple[str, onnx.NodeProto] | None:
    """The GELU's x and its last Mul where this Tanh is the one ONNX Runtime's FastGeluFusion
    (onnxruntime/core/optimizer/fast_gelu_fusion.cc) fuses: ``tanh(0.7978845834732056 * (x + 0.044715 * Pow(x, 3)))``
    or ``tanh(x * 0.79788... * (1 + 0.044715 * x * x))``, then Add 1 and a Mul by ``x * 0.5``; every value but the last
    single-use, none a graph output; else None."""
    graph = node.graph

    def made(value: str, op: str, single: bool = True) -> onnx.NodeProto | None:
        maker = graph.made_by(value)
        if maker is None or maker.op_type != op or maker.domain not in ("", "ai.onnx") or len(maker.input) != 2:
            return None
        if set(maker.output) & node.graph_outputs or (single and graph.uses[maker.output[0]] != 1):
            return None
        return maker

    def other(maker: onnx.NodeProto | None, near: float) -> str | None:
        """The input of ``maker`` beside the constant ``near`` (as ONNX Runtime compares: within FLT_EPSILON)."""
        for k in (0, 1):
            constant = None if maker is None else graph.constant(maker.input[k])
            if constant is not None and constant.size == 1 and abs(float(constant.ravel()[0]) - near) < 1.2e-7:
                return maker.input[1 - k]
        return None

    def formula(x: str, value: str) -> bool:
        """Whether ``value``, the Tanh's input, is one of the two formulas of ``x``."""
        scaled = made(value, "Mul")
        if scaled is None:
            return False
        add = made(other(scaled, 0.7978845834732056) or "", "Add")
        if add is not None:  # 0.797 * (x + 0.044715 * Pow(x, 3))
            for root, cubic in (add.input, add.input[::-1]):
                power = made(other(made(cubic, "Mul"), 0.044714998453855515) or "", "Pow")
                if root == x and power is not None and power.input[0] == x:
                    return other(power, 3.0) == x
            return False
        for plus_one, x_scaled in (scaled.input, scaled.input[::-1]):  # (1 + 0.044715 * x * x) * (x * 0.797)
            square = made(other(made(plus_one, "Add"), 1.0) or "", "Mul")
            if other(made(x_scaled, "Mul"), 0.7978845834732056) == x and square is not None and x in square.input:
                rest = square.input[1] if square.input[0] == x else square.input[0]
                return other(made(rest, "Mul"), 0.044714998453855515) == x
        return False

    add = graph.sole_consumer(node.node.output[0])
    if add is None or add.op_type != "Add" or other(add, 1.0) != node.node.output[0]:
        return None
    last = graph.sole_consumer(add.output[0])
    if last is None or last.op_type != "Mul" or last.output[0] in node.graph_outputs:
        return None
    half = made(last.input[1] if last.input[0] == add.output[0] else last.input[0], "Mul", single=False)
    x = other(half, 0.5)
    return (x, last) if x is not None and formula(x, node.node.input[0]) else None


@_rule(
    "empty-output",
    DIFFERS,
    "NonZero",
    emulated="what the unwritten outputs hold is whatever the device's memory held: the dml backend notes it too",
)
def _empty_output(node: Node) -> Flag | None:
    if not (set(node.node.output) & node.graph_outputs) or len(node.graph_outputs) < 2:
        return None
    dims, found = node.static(0), node.range(0)
    full = dims is not None and 0 not in dims and found.excludes(0, 0)
    return Flag(
        "where its output, a graph output, comes back empty, ONNX Runtime's DirectML provider leaves every other "
        "graph output it copies back from the device unwritten",
        "if its input holds no value but 0 (NonZero finds nothing)",
        f"its input has {dims} elements {found.said()}" if full else "",
        (node.node.output[0],),
        lambda found: int(found.size == 0),
    )


_SCATTERS = ("ScatterElements", "Scatter", "ScatterND")


def _scatter_bound(node: Node) -> int | None:
    """The size every index of the scatter stays within where the data's dims are known (the axis's, or the least
    of those a ScatterND's tuples name)."""
    dims = node.static(0)
    if dims is None or not dims:
        return None
    if node.node.op_type == "ScatterND":
        indices = node.type_of(1)
        depth = indices.dims[-1] if indices is not None and indices.dims else None
        return min(dims[:depth]) if isinstance(depth, int) and 0 < depth <= len(dims) else None
    return dims[int(node.attribute("axis", 0)) % len(dims)]


def _out_of_bounds(node: Node) -> Count:
    op, axis = node.node.op_type, int(node.attribute("axis", 0))

    def count(data: np.ndarray, indices: np.ndarray) -> int:
        if op == "ScatterND":
            depth = indices.shape[-1] if indices.ndim else 0
            sizes = np.array(data.shape[:depth])
            return _elements((indices < -sizes) | (indices >= sizes))
        size = data.shape[axis % data.ndim]
        return _elements((indices < -size) | (indices >= size))

    return count


def _in_dml_form(node: Node, emit: Emitter) -> str:
    """Nothing more: the DML form the lowering writes computes what DirectML does."""
    return ""


@_rule("scatter-out-of-bounds", DIFFERS, *_SCATTERS, emulated=_in_dml_form)
def _scatter_out_of_bounds(node: Node) -> Flag:
    bound, found = _scatter_bound(node), node.range(1)
    inside = bound is not None and found.within(-bound, bound - 1)
    return Flag(
        "an out-of-bounds index, where ONNX Runtime's CPU fails, writes at the element its 32-bit linear offset "
        "names (past the end of an inner axis: into the next row; a negative one below its range: into an earlier "
        "row) or, past the output's memory, nowhere (docs/semantics.md section 10)",
        "if an index is out of bounds",
        f"its indices are {found.said()}, within the {bound} of the data" if inside else "",
        (node.input(0), node.input(1)),
        _out_of_bounds(node),
    )


def _duplicates(node: Node) -> Count:
    op, axis = node.node.op_type, int(node.attribute("axis", 0))

    def count(data: np.ndarray, indices: np.ndarray) -> int:
        if op == "ScatterND":
            depth = indices.shape[-1] if indices.ndim else 0
            if depth == 0:  # each update writes the whole data
                return max(int(np.prod(indices.shape[:-1])) - 1, 0)
            sizes = np.array(data.shape[:depth], np.int64)
            tuples = np.where(indices < 0, indices + sizes, indices).reshape(-1, depth)
            return len(tuples) - len(np.unique(tuples, axis=0))
        along = axis % data.ndim
        size = data.shape[along]
        wrapped = np.where(indices < 0, indices + size, indices)
        grid = list(np.indices(indices.shape))
        grid[along] = wrapped
        targets = np.stack([g.ravel() for g in grid], axis=1)
        return len(targets) - len(np.unique(targets, axis=0))

    return count


@_rule(
    "scatter-duplicates",
    DIFFERS,
    *_SCATTERS,
    emulated="a race, whose winner changes from run to run: the emulation keeps the last update, as the CPU does",
)
def _scatter_duplicates(node: Node) -> Flag:
    indices, ruled_out = node.constant(1), ""
    data = node.static(0)
    shape_only = None if data is None else np.broadcast_to(np.zeros((), np.int8), data)
    if indices is not None and shape_only is not None and not _duplicates(node)(shape_only, indices):
        ruled_out = "its indices, constants, name each element once"
    dims = node.static(1)
    if node.node.op_type != "ScatterND" and dims is not None and dims and dims[int(node.attribute("axis", 0))] == 1:
        ruled_out = "its indices hold one index along the axis for each element off it"
    return Flag(
        "which of several updates of one element stays is a race (with 2^20 updates of one element, not always "
        "the last), where ONNX Runtime's CPU keeps the last",
        "if several updates write one element",
        ruled_out,
        (node.input(0), node.input(1)),
        _duplicates(node),
    )


def _zeros_like_data(node: Node, emit: Emitter) -> str:
    zero = onnx.numpy_helper.from_array(np.zeros(1, _np_type(node.elem_type(0))))
    shape = emit.node("Shape", [node.input(0)], "shape")
    return emit.node("ConstantOfShape", [shape], "unwritten", output=node.node.output[0], value=zero)


@_rule("scatter-nd-empty-indices", DIFFERS, "ScatterND", emulated=_zeros_like_data)
def _scatter_nd_empty_indices(node: Node) -> Flag | None:
    indices = node.type_of(1)
    if indices is None or indices.dims is None or 0 not in indices.dims:
        return None
    return Flag(
        "empty indices (a dimension of 0): the provider leaves its output unwritten (zeros, measured on a [2, 3] "
        "FLOAT, ONNX Runtime's test ScatterND_empty_indices), where ONNX gives the data"
    )


@_rule("scatter-elements-shapes", FAILS, "ScatterElements", "Scatter")
def _scatter_elements_shapes(node: Node) -> Flag | None:
    data, indices, updates = node.type_of(0), node.type_of(1), node.type_of(2)
    if data is None or indices is None or data.rank is None or data.rank != indices.rank:
        return None
    same_rank = updates is not None and updates.rank == indices.rank
    refusal = scatter_elements_refusal(
        data.dims, indices.dims, updates.dims if same_rank else None, int(node.attribute("axis", 0)) % data.rank
    )
    if not refusal:
        return None
    return Flag(
        f"{refusal}: DirectML refuses the DML_SCATTER and the session fails when it is created "
        "(AbiCustomRegistry.cpp(519) 80070057), CPU fallback or not",
        failure=CREATION_INVALID,
    )


_CASES = "(docs/node-suite.md)"


_EMPTY_SET = (
    "DirectML gives 0 for the empty set, where ONNX gives -inf (ReduceMax, ReduceLogSum, ReduceLogSumExp), inf "
    f"(ReduceMin) or 1 (ReduceProd) {_CASES}"
)


def _reduce_empty_set_emulated(node: Node, emit: Emitter) -> str:
    """0 everywhere where the input is empty (then every output element reduces the empty set, or there is none),
    else the CPU's reduction."""
    size = emit.node("Size", [node.input(0)], "size")
    empty = emit.node("Equal", [size, emit.constant(0, np.int64, "none")], "empty")
    zero = emit.constant(0, _np_type(node.elem_type(0)), "zero")
    return emit.node("Where", [empty, zero, _again(node, emit, "reduced")], "empty_set", output=node.node.output[0])


@_rule(
    "reduce-empty-set",
    DIFFERS,
    "ReduceMax",
    "ReduceMin",
    "ReduceProd",
    "ReduceLogSum",
    "ReduceLogSumExp",
    emulated=_reduce_empty_set_emulated,
)
def _reduce_empty_set(node: Node) -> Flag | None:
    data = node.type_of(0)
    if data is None or data.dims is None or node.elem_type(0) not in _FLOATS or 0 not in data.dims:
        return None
    empty = {k for k, dim in enumerate(data.dims) if dim == 0}
    axes = node.attribute("axes")
    if axes is None and node.input(1):
        constant = node.constant(1)
        if constant is None:
            rank, keep_all = data.rank, bool(node.attribute("noop_with_empty_axes", 0))
            return Flag(
                f"it reduces an axis of size 0: {_EMPTY_SET}",
                f"if it reduces an axis of size 0 (axis {min(empty)})",
                reads=(node.input(0), node.input(1)),
                counter=lambda x, axes: _empty_reductions(x.shape, axes.tolist(), rank, keep_all),
            )
        axes = constant.tolist()
    if not axes:
        if node.attribute("noop_with_empty_axes", 0):
            return None
        axes = range(data.rank)
    if not {int(axis) % data.rank for axis in axes} & empty:
        return None
    return Flag(f"it reduces an axis of size 0: {_EMPTY_SET}")


def _empty_reductions(shape: tuple[int, ...], axes: list[int], rank: int, keep_all: bool) -> int:
    """How many output elements reduce the empty set."""
    if not axes and keep_all:
        return 0
    reduced = {int(axis) % rank for axis in axes} if axes else set(range(rank))
    if not any(shape[axis] == 0 for axis in reduced):
        return 0
    return int(np.prod([dim for k, dim in enumerate(shape) if k not in reduced]))


def _clip_min_above_max_emulated(node: Node, emit: Emitter) -> str:
    low, high = node.input(1), node.input(2)
    inverted = emit.node("Greater", [low, high], "inverted")
    return emit.node("Where", [inverted, low, _again(node, emit, "clip")], "min_above_max", output=node.node.output[0])


@_rule("clip-min-above-max", DIFFERS, "Clip", emulated=_clip_min_above_max_emulated)
def _clip_min_above_max(node: Node) -> Flag | None:
    if not node.input(1) or not node.input(2):
        return None
    what = "DirectML gives min everywhere, where ONNX gives max (test_clip_min_greater_than_max: 2 where 1)"
    low, high = node.constant(1), node.constant(2)
    if low is not None and high is not None and low.item() > high.item():
        return Flag(f"min {low.item():g} > max {high.item():g}: {what}")
    bottom, top = node.range(1), node.range(2)
    ruled_out = f"min is {bottom.said()} and max {top.said()}" if bottom.high <= top.low else ""
    return Flag(
        what, "if min > max", ruled_out, (node.input(1), node.input(2)), lambda low, high: int(np.any(low > high))
    )


def _matmul_1d_b_emulated(node: Node, emit: Emitter) -> str:
    """A @ [b0, b0, ...]."""
    b = node.input(1)
    first = emit.slice(b, 0, 1, "b0")
    repeated = emit.node("Expand", [first, emit.node("Shape", [b], "b_shape")], "repeated")
    return emit.node("MatMul", [node.input(0), repeated], "matmul", output=node.node.output[0])


@_rule("matmul-1d-b", DIFFERS, "MatMul", emulated=_matmul_1d_b_emulated)
def _matmul_1d_b(node: Node) -> Flag | None:
    b = node.type_of(1)
    if b is None or b.rank != 1:
        return None
    return Flag(
        "its second input is 1-D: DirectML takes that vector's first element for every one of its elements (A @ "
        f"[b0, b0, ...]): test_matmul_4d_1d is off by up to 1.25, test_matmul_1d_1d by 0.0124 {_CASES}"
    )


@_rule("qlinearmatmul-float16-scales", FAILS, "QLinearMatMul")
def _qlinearmatmul_float16(node: Node) -> Flag | None:
    if TensorProto.FLOAT16 not in (node.elem_type(1), node.elem_type(4), node.elem_type(6)):
        return None
    return Flag(
        "FLOAT16 scales: 80070057 (Invalid parameter, AbiCustomRegistry.cpp(519)) when the session is created, "
        "int8 and uint8 alike; with FLOAT scales it runs",
        failure=CREATION_INVALID,
    )


def _resize_mode(node: Node) -> tuple[str, str]:
    return node.attribute("mode", "nearest"), node.attribute("coordinate_transformation_mode", "half_pixel")


_OWN_ALGORITHM = "DirectML's own algorithm, which no measurement has stated yet: the emulation computes ONNX's"


@_rule("resize-antialias", DIFFERS, "Resize", emulated=_OWN_ALGORITHM)
def _resize_antialias(node: Node) -> Flag | None:
    if node.attribute("antialias", 0) != 1 or _resize_mode(node)[0] != "linear":
        return None
    return Flag(
        "antialias=1 (linear): where it downsamples, DirectML's values are not ONNX's: 4x4 to 3x3 off by up to 0.53, "
        f"to 2x2 by 0.208 {_CASES}"
    )


def _as_half_pixel(node: Node, emit: Emitter) -> str:
    """half_pixel, which pytorch_half_pixel is but for an axis resized to 1."""
    again = _again(node, emit, "resize", coordinate_transformation_mode="half_pixel")
    return emit.node("Identity", [again], "half_pixel", output=node.node.output[0])


@_rule("resize-pytorch-half-pixel", DIFFERS, "Resize", emulated=_as_half_pixel)
def _resize_pytorch_half_pixel(node: Node) -> Flag | None:
    if _resize_mode(node) != ("linear", "pytorch_half_pixel"):
        return None
    source, result, ruled_out = node.type_of(0), node.type_of(0, outputs=True), ""
    if source is not None and result is not None and source.dims and result.dims:
        sizes = list(zip(source.dims, result.dims, strict=False))
        if all(isinstance(d, int) for pair in sizes for d in pair) and all(d == 1 or o != 1 for d, o in sizes):
            ruled_out = f"it resizes {list(source.dims)} to {list(result.dims)}"
    return Flag(
        "pytorch_half_pixel, linear: DirectML samples the centre of an axis resized to 1 (as half_pixel) where ONNX "
        f"takes its first element: 4x4 to 3x1 off by 1.5 {_CASES}",
        "if an axis of more than one is resized to 1",
        ruled_out,
        (node.input(0), node.node.output[0]),
        lambda x, y: sum(d > 1 and o == 1 for d, o in zip(x.shape, y.shape, strict=False)),
    )


@_rule("resize-keep-aspect-ratio", FAILS, "Resize")
def _resize_keep_aspect_ratio(node: Node) -> Flag | None:
    policy = node.attribute("keep_aspect_ratio_policy", "stretch")
    if policy == "stretch" or not node.input(3):
        return None
    return Flag(
        f"keep_aspect_ratio_policy={policy} with sizes: 80070057 (Invalid parameter, MLOperatorAuthorImpl.cpp(2853)) "
        "when it runs, upsampling or downsampling",
        failure=Failure("80070057", At.RUN),
    )


@_rule("resize-tf-crop-and-resize", DIFFERS, "Resize", emulated=_OWN_ALGORITHM)
def _resize_tf_crop_and_resize(node: Node) -> Flag | None:
    if _resize_mode(node)[1] != "tf_crop_and_resize" or node.attribute("axes") is not None:
        return None
    return Flag(
        "tf_crop_and_resize: DirectML's points inside the crop box are not ONNX's (a 4x4 cropped to [0.4, 0.6] x [0.6,"
        f" 0.8] and resized to 3x3: 8 of 9 off, by up to 2) {_CASES}"
    )


@_rule("resize-tf-crop-and-resize-axes", FAILS, "Resize")
def _resize_tf_crop_and_resize_axes(node: Node) -> Flag | None:
    if _resize_mode(node)[1] != "tf_crop_and_resize" or node.attribute("axes") is None:
        return None
    return Flag(
        "tf_crop_and_resize with axes: the process running ONNX Runtime ends when it runs (this project's DirectML "
        "runner: exit code 3)",
        failure=Failure("", At.PROCESS),
    )


def _dynamicquantizelinear_emulated(node: Node, emit: Emitter) -> str:
    """y = saturate(round(x * (1 / y_scale)) + y_zero_point): DirectML multiplies by the reciprocal where ONNX
    divides (which gives test_dynamicquantizelinear's -2.5 as -127.5 and its one value off, 25 for 26); y_scale and
    y_zero_point the CPU's."""
    _again(node, emit, "scales")  # its y unused: its y_scale and y_zero_point are the node's
    scale, zero_point = node.node.output[1], node.node.output[2]
    ratio = emit.node("Mul", [node.input(0), emit.node("Reciprocal", [scale], "reciprocal")], "ratio")
    shift = emit.node("Cast", [zero_point], "zero_point", to=TensorProto.FLOAT)
    shifted = emit.node("Add", [emit.node("Round", [ratio], "rounded"), shift], "shifted")
    low, high = emit.constant(0, np.float32, "low"), emit.constant(255, np.float32, "high")
    saturated = emit.node("Clip", [shifted, low, high], "saturated")
    return emit.node("Cast", [saturated], "quantized", output=node.node.output[0], to=TensorProto.UINT8)


@_rule("dynamicquantizelinear-rounding", DIFFERS, "DynamicQuantizeLinear", emulated=_dynamicquantizelinear_emulated)
def _dynamicquantizelinear_rounding(node: Node) -> Flag:
    return Flag(
        "y can be 1 below ONNX's where x / y_scale is a half (test_dynamicquantizelinear: -2.5 with y_scale 5/255 "
        "gives 25 where 26 is expected)",
        "if x / y_scale comes within a float's rounding of a half",
        reads=(node.input(0),),
        counter=_near_halves,
    )


def _near_halves(x: np.ndarray) -> int:
    """The elements whose x / y_scale lies within 4 float steps of a half, y_scale as ONNX computes it."""
    x = x.astype(np.float32)
    if x.size == 0:
        return 0
    scale = (np.float32(max(0.0, x.max())) - np.float32(min(0.0, x.min()))) / np.float32(255)
    if scale == 0:
        return 0
    ratio = x / scale
    off = np.abs(np.abs(ratio - np.floor(ratio)) - np.float32(0.5))
    return _elements(off <= 4 * np.spacing(np.abs(ratio)))


@_rule("averagepool-3d-dilations-ceil", DIFFERS, "AveragePool", emulated=_OWN_ALGORITHM)
def _averagepool_3d_dilations_ceil(node: Node) -> Flag | None:
    kernel = node.attribute("kernel_shape", [])
    if len(kernel) != 3 or not any(d > 1 for d in node.attribute("dilations", [])):
        return None
    if node.attribute("count_include_pad", 0) != 1 or node.attribute("ceil_mode", 0) != 1:
        return None
    return Flag(
        "3-D with dilations, count_include_pad=1 and ceil_mode=1: the windows ceil_mode adds at the ends are averaged "
        "otherwise (32^3, kernel 5, dilations 2, strides 3: 216 of 729 off, by up to 0.0637)"
    )


@_rule(
    "asin-accuracy",
    DIFFERS,
    "Asin",
    emulated="the device's own rounding (GPU-specific floats): the emulation computes the CPU's asin",
)
def _asin_accuracy(node: Node) -> Flag | None:
    if node.elem_type(0) != TensorProto.FLOAT:
        return None
    return Flag(
        "up to 6.8e-5 from asin over [-1, 1], most near 0 (asin(0) gives 6.76e-5), where ONNX Runtime's CPU is exact "
        "to FLOAT (measured on lavapipe; ONNX Runtime's DirectML CI lists test_asin_example failing on GPUs too)"
    )


def _mod_emulated(node: Node, emit: Emitter) -> str:
    """fmod=0 of floats as DirectML computes it: the remainder of fmod=1 moved to the divisor's sign, and NaN where
    the divisor is infinite and x finite (ONNX Runtime's CPU refuses fmod=0 for floats)."""
    (x, y), dtype = (node.input(0), node.input(1)), _np_type(node.elem_type(0))
    zero, infinity = emit.constant(0, dtype, "zero"), emit.constant(np.inf, dtype, "infinity")
    remainder = _again(node, emit, "fmod", fmod=1)
    signs = emit.node(
        "Xor",
        [emit.node("Less", [remainder, zero], "negative"), emit.node("Less", [y, zero], "divisor_negative")],
        "signs",
    )
    moved = emit.node(
        "And", [signs, emit.node("Not", [emit.node("Equal", [remainder, zero], "exact")], "inexact")], "moved"
    )
    modulo = emit.node("Where", [moved, emit.node("Add", [remainder, y], "shifted"), remainder], "modulo")
    infinite = emit.node("Equal", [emit.node("Abs", [y], "divisor_size"), infinity], "infinite")
    finite = emit.node("Less", [emit.node("Abs", [x], "size"), infinity], "finite")
    nan = emit.constant(np.nan, dtype, "nan")
    nan_where = emit.node("And", [infinite, finite], "nan_where")
    return emit.node("Where", [nan_where, nan, modulo], "mod", output=node.node.output[0])


@_rule("mod-fmod-0-infinity", DIFFERS, "Mod", emulated=_mod_emulated)
def _mod_infinity(node: Node) -> Flag | None:
    if node.attribute("fmod", 0) != 0 or node.elem_type(0) not in (TensorProto.FLOAT, TensorProto.FLOAT16):
        return None
    divisor = node.range(1)
    finite = divisor.low > -np.inf and divisor.high < np.inf
    return Flag(
        "fmod=0: x mod +-inf gives NaN, where ONNX gives x (same signs) or +-inf (opposite signs; ONNX Runtime's CPU "
        f"refuses fmod=0 for floats) {_CASES}",
        "if a divisor is infinite where x is finite",
        f"its divisor is {divisor.said()}" if finite else "",
        (node.input(0), node.input(1)),
        lambda x, y: _elements(np.isinf(y) & np.isfinite(x)),
    )


@_rule("convtranspose-same-strided", FAILS, "ConvTranspose")
def _convtranspose_same_strided(node: Node) -> Flag | None:
    auto_pad = node.attribute("auto_pad", "NOTSET")
    weights, kernel = node.type_of(1), node.attribute("kernel_shape")
    two_d = (weights is not None and weights.rank == 4) or (kernel is not None and len(kernel) == 2)
    if not auto_pad.startswith("SAME") or not two_d or not any(s > 1 for s in node.attribute("strides", [])):
        return None
    return Flag(
        f"a 2-D ConvTranspose with auto_pad={auto_pad} and strides above 1: 80070057 (Invalid parameter, "
        "MLOperatorAuthorImpl.cpp(2853)) when the session is created; with strides 1 it runs",
        failure=CREATION_INVALID,
    )


@_rule("quantize-per-axis-21", FAILS, "QuantizeLinear", "DequantizeLinear")
def _quantize_per_axis(node: Node) -> Flag | None:
    if node.since() != 21 or node.attribute("block_size", 0):
        return None
    scale = node.type_of(1)
    what = (
        "80070057 (Invalid parameter, AbiCustomRegistry.cpp(519)) when the session is created, the provider's "
        "version-21 kernel (opsets 21 and 22); versions 13 and 19 run it, as they run a scalar scale, INT4 too"
    )
    if scale is None or scale.dims is None or (scale.rank == 1 and not isinstance(scale.dims[0], int)):
        return Flag(
            what,
            "if its scale is 1-D of more than one value (per axis)",
            reads=(node.input(1),),
            counter=lambda scale: int(scale.ndim == 1 and scale.size > 1),
            failure=CREATION_INVALID,
        )
    if scale.rank == 1 and scale.dims[0] > 1:
        return Flag(f"a per-axis scale ({scale.dims[0]} values): {what}", failure=CREATION_INVALID)
    return None
