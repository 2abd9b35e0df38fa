"""What DirectML is known to do with a node the provider runs on it: fail, or compute otherwise than ONNX Runtime's CPU.

Each rule is one DirectML behaviour measured on real DirectML (ONNX Runtime 1.24.4, DirectML 1.15.4), stated once
here; ``tests/test_known.py`` runs each rule's repro there and holds the rule to it, and to what ``check`` says of
the repro. A rule looks at one node as ONNX holds it (its attributes, input and output types, constant inputs, the
nodes around it), never at the values a run will bring: a ``differs`` rule says for which values, and a ``fails``
rule whose failure depends on something not known before the run says when (``certain`` is then False).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import TensorProto

from onnx_gather.core.scatter import scatter_elements_refusal
from onnx_gather.graphs.plumbing import DefUse, attribute
from onnx_gather.graphs.types import ValueType

FAILS, DIFFERS = "fails", "differs"
_FLOATS = frozenset({TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.DOUBLE})


@dataclass(frozen=True)
class Known:
    """One known behaviour of DirectML at one node: ``kind`` (``FAILS`` or ``DIFFERS``), what it does, which rule."""

    rule: str
    kind: str
    what: str
    certain: bool = True  # False: a failure that depends on what is known only when the model runs


@dataclass(frozen=True)
class Node:
    """One node as the rules see it: the node, its graph's value types, who makes and takes its values, and the
    opset."""

    node: onnx.NodeProto
    types: Mapping[str, ValueType]
    graph: DefUse
    graph_outputs: frozenset[str]
    opset: int  # the default domain's version in force where the node is

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


@dataclass(frozen=True)
class Rule:
    """One measured behaviour: its name, ``FAILS`` or ``DIFFERS``, the operators it concerns, and the test of a node
    (a ``Known``, or None where the rule does not apply)."""

    name: str
    kind: str
    op_types: frozenset[str]
    test: Callable[[Node], Known | None]


RULES: list[Rule] = []


def _rule(name: str, kind: str, *op_types: str) -> Callable[[Callable[[Node], str | None]], Callable]:
    """Register a rule whose function gives what DirectML does at the node (None: the rule does not apply); a
    ``FAILS`` rule's text that starts with "if " is a failure that depends on the run."""

    def register(function: Callable[[Node], str | None]) -> Callable:
        def test(node: Node) -> Known | None:
            what = function(node)
            if what is None:
                return None
            return Known(name, kind, what, certain=not (kind == FAILS and what.startswith("if ")))

        RULES.append(Rule(name, kind, frozenset(op_types), test))
        return function

    return register


def known(node: Node) -> list[Known]:
    """Every known behaviour of DirectML at ``node``, a standard-domain node the provider runs on DirectML."""
    if node.node.domain not in ("", "ai.onnx", "com.microsoft"):
        return []
    found = (rule.test(node) for rule in RULES if node.node.op_type in rule.op_types)
    return [k for k in found if k is not None]


def rule_names() -> Iterator[str]:
    return (rule.name for rule in RULES)


@_rule("reshape-allowzero", FAILS, "Reshape")
def _reshape_allowzero(node: Node) -> str | None:
    if node.attribute("allowzero", 0) != 1:
        return None
    shape = node.constant(1)
    if shape is not None and -1 not in shape.tolist():
        return None
    what = (
        "80070057 (Invalid parameter) when the session is created where the input's dims are fixed, else when it "
        "runs: 8007000E where its output is a graph output, 8007023E where a node takes it (`convert "
        "--reshape-allowzero-0` sets allowzero=0 where no 0 can reach the shape)"
    )
    if shape is None:
        return f"if its shape holds a -1 (allowzero=1): {what}"
    return f"allowzero=1 and a -1 in its shape: {what}"


@_rule("convtranspose-1d", FAILS, "ConvTranspose")
def _convtranspose_1d(node: Node) -> str | None:
    weights, kernel = node.type_of(1), node.attribute("kernel_shape")
    one_d = (weights is not None and weights.rank == 3) or (kernel is not None and len(kernel) == 1)
    if not one_d or not any(node.attribute("output_padding", [])):
        return None
    return (
        "a 1-D ConvTranspose (3-D tensors) with output_padding: 80070057 (Invalid parameter, "
        "MLOperatorAuthorImpl.cpp(2818)) when the session is created; without output_padding (an output_shape "
        "instead), or as a 2-D one over a height of 1 (Unsqueeze, ConvTranspose, Squeeze), it runs"
    )


def _cast_types(node: Node) -> tuple[int | None, int]:
    return node.elem_type(0), int(node.attribute("to", 0))


@_rule("cast-to-int64", DIFFERS, "Cast")
def _cast_to_int64(node: Node) -> str | None:
    source, to = _cast_types(node)
    if to != TensorProto.INT64 or source not in (TensorProto.FLOAT, TensorProto.DOUBLE):
        return None
    return "Cast of FLOAT or DOUBLE to INT64: every value below -2^31 gives -2^31 (up to 3e9 come out right)"


@_rule("cast-double-to-uint64", FAILS, "Cast")
def _cast_double_to_uint64(node: Node) -> str | None:
    if _cast_types(node) != (TensorProto.DOUBLE, TensorProto.UINT64):
        return None
    return "Cast of DOUBLE to UINT64: 80004005 (Call failed) when the session is created"


@_rule("cast-saturates", DIFFERS, "Cast")
def _cast_saturates(node: Node) -> str | None:
    source, to = _cast_types(node)
    if source not in _FLOATS or to not in (TensorProto.INT32, TensorProto.UINT8):
        return None
    name = TensorProto.DataType.Name(to)
    return (
        f"Cast of a float to {name} saturates out of range and gives 0 for NaN (3e9 gives 2147483647; for UINT8, "
        "-1 gives 0 and 300 255), where ONNX Runtime's CPU wraps (-2147483648; 300 gives 44)"
    )


@_rule("pow-zero-zero", DIFFERS, "Pow")
def _pow_zero_zero(node: Node) -> str | None:
    if node.elem_type(0) not in _FLOATS:
        return None
    return "Pow(0, 0) is 0, where ONNX Runtime's CPU gives 1"


@_rule("log-subnormal", DIFFERS, "Log")
def _log_subnormal(node: Node) -> str | None:
    if node.elem_type(0) != TensorProto.FLOAT:
        return None
    return "Log of a subnormal: DirectML flushes subnormals (log(1e-45) is -88.03, ONNX Runtime's CPU -103.28)"


_GELU_DIFFERENCE = (
    "which the DirectML provider computes as DirectML's GELU, with erf: up to 4.74e-4 from the tanh formula (at "
    "|x| = 2.70), where ONNX Runtime's CPU computes the formula"
)


@_rule("tanh-gelu", DIFFERS, "Tanh", "FastGelu")
def _tanh_gelu(node: Node) -> str | None:
    if node.node.op_type == "FastGelu":
        return f"ONNX Runtime's FastGelu (the tanh approximation of GELU), {_GELU_DIFFERENCE}"
    if not _gelu_pattern(node):
        return None
    return (
        "the tanh approximation of GELU around this Tanh (PyTorch's GELU of T5 and GPT-2): ONNX Runtime's "
        f"FastGeluFusion (level 2 and above) makes it one FastGelu, {_GELU_DIFFERENCE}"
    )


def _gelu_pattern(node: Node) -> bool:
    """Whether this Tanh is the one ONNX Runtime's FastGeluFusion (onnxruntime/core/optimizer/fast_gelu_fusion.cc)
    fuses: ``tanh(0.7978845834732056 * (x + 0.044715 * Pow(x, 3)))`` or ``tanh(x * 0.79788... * (1 + 0.044715 * x *
    x))``, then Add 1 and a Mul by ``x * 0.5``; every value but the last single-use, none a graph output."""
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
        return False
    last = graph.sole_consumer(add.output[0])
    if last is None or last.op_type != "Mul" or last.output[0] in node.graph_outputs:
        return False
    half = made(last.input[1] if last.input[0] == add.output[0] else last.input[0], "Mul", single=False)
    x = other(half, 0.5)
    return x is not None and formula(x, node.node.input[0])


@_rule("empty-output", DIFFERS, "NonZero")
def _empty_output(node: Node) -> str | None:
    if not (set(node.node.output) & node.graph_outputs) or len(node.graph_outputs) < 2:
        return None
    return (
        "where its output, a graph output, comes back empty (NonZero finding nothing), ONNX Runtime's DirectML "
        "provider leaves every other graph output it copies back from the device unwritten"
    )


@_rule("scatter-out-of-bounds", DIFFERS, "ScatterElements", "Scatter", "ScatterND")
def _scatter_out_of_bounds(node: Node) -> str:
    return (
        "an out-of-bounds index, where ONNX Runtime's CPU fails, writes at the element its 32-bit linear offset "
        "names (past the end of an inner axis: into the next row; a negative one below its range: into an earlier "
        "row) or, past the output's memory, nowhere (docs/semantics.md section 10)"
    )


@_rule("scatter-duplicates", DIFFERS, "ScatterElements", "Scatter", "ScatterND")
def _scatter_duplicates(node: Node) -> str:
    return (
        "where several updates write one element, which stays is a race (with 2^20 updates of one element, not "
        "always the last), where ONNX Runtime's CPU keeps the last"
    )


@_rule("scatter-nd-empty-indices", DIFFERS, "ScatterND")
def _scatter_nd_empty_indices(node: Node) -> str | None:
    indices = node.type_of(1)
    if indices is None or indices.dims is None or 0 not in indices.dims:
        return None
    return (
        "empty indices (a dimension of 0): the provider leaves its output unwritten (zeros, measured on a [2, 3] "
        "FLOAT, ONNX Runtime's test ScatterND_empty_indices), where ONNX gives the data"
    )


@_rule("scatter-elements-shapes", FAILS, "ScatterElements", "Scatter")
def _scatter_elements_shapes(node: Node) -> str | None:
    data, indices, updates = node.type_of(0), node.type_of(1), node.type_of(2)
    if data is None or indices is None or data.rank is None or data.rank != indices.rank:
        return None
    same_rank = updates is not None and updates.rank == indices.rank
    refusal = scatter_elements_refusal(
        data.dims, indices.dims, updates.dims if same_rank else None, int(node.attribute("axis", 0)) % data.rank
    )
    if not refusal:
        return None
    return (
        f"{refusal}: DirectML refuses the DML_SCATTER and the session fails when it is created "
        "(AbiCustomRegistry.cpp(519) 80070057), CPU fallback or not"
    )


_CASES = "(docs/node-suite.md)"


_EMPTY_SET = (
    "DirectML gives 0 for the empty set, where ONNX gives -inf (ReduceMax, ReduceLogSum, ReduceLogSumExp), inf "
    f"(ReduceMin) or 1 (ReduceProd) {_CASES}"
)


@_rule("reduce-empty-set", DIFFERS, "ReduceMax", "ReduceMin", "ReduceProd", "ReduceLogSum", "ReduceLogSumExp")
def _reduce_empty_set(node: Node) -> str | None:
    data = node.type_of(0)
    if data is None or data.dims is None or node.elem_type(0) not in _FLOATS or 0 not in data.dims:
        return None
    empty = {k for k, dim in enumerate(data.dims) if dim == 0}
    axes = node.attribute("axes")
    if axes is None and len(node.node.input) > 1 and node.node.input[1]:
        constant = node.constant(1)
        if constant is None:
            return f"if it reduces an axis of size 0 (axis {min(empty)}): {_EMPTY_SET}"
        axes = constant.tolist()
    if not axes:
        if node.attribute("noop_with_empty_axes", 0):
            return None
        axes = range(data.rank)
    if not {int(axis) % data.rank for axis in axes} & empty:
        return None
    return f"it reduces an axis of size 0: {_EMPTY_SET}"


@_rule("clip-min-above-max", DIFFERS, "Clip")
def _clip_min_above_max(node: Node) -> str | None:
    if len(node.node.input) < 3 or not node.node.input[1] or not node.node.input[2]:
        return None
    low, high = node.constant(1), node.constant(2)
    what = "DirectML gives min everywhere, where ONNX gives max (test_clip_min_greater_than_max: 2 where 1)"
    if low is None or high is None:
        return f"where min > max, {what}"
    return f"min {low.item():g} > max {high.item():g}: {what}" if low.item() > high.item() else None


@_rule("matmul-1d-b", DIFFERS, "MatMul")
def _matmul_1d_b(node: Node) -> str | None:
    b = node.type_of(1)
    if b is None or b.rank != 1:
        return None
    return (
        "its second input is 1-D: DirectML takes that vector's first element for every one of its elements (A @ "
        f"[b0, b0, ...]): test_matmul_4d_1d is off by up to 1.25, test_matmul_1d_1d by 0.0124 {_CASES}"
    )


@_rule("qlinearmatmul-float16-scales", FAILS, "QLinearMatMul")
def _qlinearmatmul_float16(node: Node) -> str | None:
    if TensorProto.FLOAT16 not in (node.elem_type(1), node.elem_type(4), node.elem_type(6)):
        return None
    return (
        "FLOAT16 scales: 80070057 (Invalid parameter, AbiCustomRegistry.cpp(519)) when the session is created, "
        "int8 and uint8 alike; with FLOAT scales it runs"
    )


def _resize_mode(node: Node) -> tuple[str, str]:
    return node.attribute("mode", "nearest"), node.attribute("coordinate_transformation_mode", "half_pixel")


@_rule("resize-antialias", DIFFERS, "Resize")
def _resize_antialias(node: Node) -> str | None:
    if node.attribute("antialias", 0) != 1 or _resize_mode(node)[0] != "linear":
        return None
    return (
        "antialias=1 (linear): where it downsamples, DirectML's values are not ONNX's: 4x4 to 3x3 off by up to 0.53, "
        f"to 2x2 by 0.208 {_CASES}"
    )


@_rule("resize-pytorch-half-pixel", DIFFERS, "Resize")
def _resize_pytorch_half_pixel(node: Node) -> str | None:
    if _resize_mode(node) != ("linear", "pytorch_half_pixel"):
        return None
    source, result = node.type_of(0), node.type_of(0, outputs=True)
    if source is not None and result is not None and source.dims and result.dims:
        sizes = list(zip(source.dims, result.dims, strict=False))
        if all(isinstance(d, int) for pair in sizes for d in pair) and all(d == 1 or o != 1 for d, o in sizes):
            return None
    return (
        "pytorch_half_pixel, linear: where an axis of more than one is resized to 1, DirectML samples its centre "
        f"(as half_pixel) where ONNX takes its first element: 4x4 to 3x1 off by 1.5 {_CASES}"
    )


@_rule("resize-keep-aspect-ratio", FAILS, "Resize")
def _resize_keep_aspect_ratio(node: Node) -> str | None:
    policy = node.attribute("keep_aspect_ratio_policy", "stretch")
    if policy == "stretch" or len(node.node.input) < 4 or not node.node.input[3]:
        return None
    return (
        f"keep_aspect_ratio_policy={policy} with sizes: 80070057 (Invalid parameter, MLOperatorAuthorImpl.cpp(2853)) "
        "when it runs, upsampling or downsampling"
    )


@_rule("resize-tf-crop-and-resize", DIFFERS, "Resize")
def _resize_tf_crop_and_resize(node: Node) -> str | None:
    if _resize_mode(node)[1] != "tf_crop_and_resize" or node.attribute("axes") is not None:
        return None
    return (
        "tf_crop_and_resize: DirectML's points inside the crop box are not ONNX's (a 4x4 cropped to [0.4, 0.6] x [0.6,"
        f" 0.8] and resized to 3x3: 8 of 9 off, by up to 2) {_CASES}"
    )


@_rule("resize-tf-crop-and-resize-axes", FAILS, "Resize")
def _resize_tf_crop_and_resize_axes(node: Node) -> str | None:
    if _resize_mode(node)[1] != "tf_crop_and_resize" or node.attribute("axes") is None:
        return None
    return (
        "tf_crop_and_resize with axes: the process running ONNX Runtime ends when it runs (this project's DirectML "
        "runner: exit code 3)"
    )


@_rule("dynamicquantizelinear-rounding", DIFFERS, "DynamicQuantizeLinear")
def _dynamicquantizelinear_rounding(node: Node) -> str:
    return (
        "where x / y_scale comes within a float's rounding of a half, y can be 1 below ONNX's "
        "(test_dynamicquantizelinear: -2.5 with y_scale 5/255 gives 25 where 26 is expected)"
    )


@_rule("averagepool-3d-dilations-ceil", DIFFERS, "AveragePool")
def _averagepool_3d_dilations_ceil(node: Node) -> str | None:
    kernel = node.attribute("kernel_shape", [])
    if len(kernel) != 3 or not any(d > 1 for d in node.attribute("dilations", [])):
        return None
    if node.attribute("count_include_pad", 0) != 1 or node.attribute("ceil_mode", 0) != 1:
        return None
    return (
        "3-D with dilations, count_include_pad=1 and ceil_mode=1: the windows ceil_mode adds at the ends are averaged "
        "otherwise (32^3, kernel 5, dilations 2, strides 3: 216 of 729 off, by up to 0.0637)"
    )


@_rule("asin-accuracy", DIFFERS, "Asin")
def _asin_accuracy(node: Node) -> str | None:
    if node.elem_type(0) != TensorProto.FLOAT:
        return None
    return (
        "up to 6.8e-5 from asin over [-1, 1], most near 0 (asin(0) gives 6.76e-5), where ONNX Runtime's CPU is exact "
        "to FLOAT (measured on lavapipe; ONNX Runtime's DirectML CI lists test_asin_example failing on GPUs too)"
    )


@_rule("mod-fmod-0-infinity", DIFFERS, "Mod")
def _mod_infinity(node: Node) -> str | None:
    if node.attribute("fmod", 0) != 0 or node.elem_type(0) not in (TensorProto.FLOAT, TensorProto.FLOAT16):
        return None
    return (
        "fmod=0: x mod +-inf gives NaN, where ONNX gives x (same signs) or +-inf (opposite signs; ONNX Runtime's CPU "
        f"refuses fmod=0 for floats) {_CASES}"
    )


@_rule("convtranspose-same-strided", FAILS, "ConvTranspose")
def _convtranspose_same_strided(node: Node) -> str | None:
    auto_pad = node.attribute("auto_pad", "NOTSET")
    weights, kernel = node.type_of(1), node.attribute("kernel_shape")
    two_d = (weights is not None and weights.rank == 4) or (kernel is not None and len(kernel) == 2)
    if not auto_pad.startswith("SAME") or not two_d or not any(s > 1 for s in node.attribute("strides", [])):
        return None
    return (
        f"a 2-D ConvTranspose with auto_pad={auto_pad} and strides above 1: 80070057 (Invalid parameter, "
        "MLOperatorAuthorImpl.cpp(2853)) when the session is created; with strides 1 it runs"
    )


@_rule("quantize-per-axis-21", FAILS, "QuantizeLinear", "DequantizeLinear")
def _quantize_per_axis(node: Node) -> str | None:
    if node.since() != 21 or node.attribute("block_size", 0):
        return None
    scale = node.type_of(1)
    what = (
        "80070057 (Invalid parameter, AbiCustomRegistry.cpp(519)) when the session is created, the provider's "
        "version-21 kernel (opsets 21 and 22); versions 13 and 19 run it, as they run a scalar scale, INT4 too"
    )
    if scale is None or scale.dims is None or (scale.rank == 1 and not isinstance(scale.dims[0], int)):
        return f"if its scale is 1-D of more than one value (per axis): {what}"
    if scale.rank == 1 and scale.dims[0] > 1:
        return f"a per-axis scale ({scale.dims[0]} values): {what}"
    return None
