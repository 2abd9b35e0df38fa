"""The rules of ``placement.known`` on what DirectML computes from values: casts, Pow, Log, GELU, the reductions,
Clip, MatMul, the quantizations, AveragePool, Asin, Mod; each with its emulation for ``dmlsim`` or its failure."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto

from onnx_gather.graphs.emit import Emitter
from onnx_gather.graphs.placement.known import (
    _CASES,
    _FLOATS,
    _OWN_ALGORITHM,
    DIFFERS,
    FAILS,
    Flag,
    Node,
    _again,
    _elements,
    _np_type,
    _rule,
)
from onnx_gather.graphs.placement.nodes import CREATION_INVALID, At, Failure


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
