"""The rules of ``placement.known`` on what moves or shapes data: Reshape, ConvTranspose, NonZero's empty output, the
scatters, Resize; each with its emulation for ``dmlsim`` or its failure."""

from __future__ import annotations

import numpy as np
import onnx

from onnx_gather.core.scatter import scatter_elements_refusal
from onnx_gather.graphs.emit import Emitter
from onnx_gather.graphs.placement.known import (
    _CASES,
    _OWN_ALGORITHM,
    DIFFERS,
    FAILS,
    Count,
    Flag,
    Node,
    _again,
    _elements,
    _np_type,
    _rule,
)
from onnx_gather.graphs.placement.nodes import CREATION_INVALID, At, Failure


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


def _resize_mode(node: Node) -> tuple[str, str]:
    return node.attribute("mode", "nearest"), node.attribute("coordinate_transformation_mode", "half_pixel")


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
