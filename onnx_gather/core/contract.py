"""The one declaration of the DML ops: their names, attributes and the values those take, the out-of-bounds modes,
the element types DirectML and the custom ops carry, and what the other types travel as.

The custom ops (``runtime.ops``), the validator, the converter, the lowering, ``check``, onnx's reference evaluator
and the conformance tools all read it. ``register_schemas()`` declares the ops to onnx as operator schemas with
type and shape inference (the output sizes by ``core.sizes``), so that ``onnx.shape_inference`` and ``onnx.checker``
know DML nodes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import TensorProto, defs

from onnx_gather.core import sizes

DOMAIN = "onnx_gather"
DOMAIN_VERSION = 1

# What an out-of-bounds index does (docs/semantics.md section 4): what real DirectML reads, the default; clamped
# into its axis (WebNN); a zero (OpenVINO's Gather); an error (ONNX Runtime's CPU kernels).
OUT_OF_BOUNDS_MODES = ("directml", "clamp", "zero", "error")
# DirectML's reading of 16-bit data, which to_dml writes where FLOAT16 or BFLOAT16 data travel as FLOAT32 through
# the custom ops (how DirectML pads a tensor's memory depends on its element size).
DIRECTML_16BIT = "directml-16bit"
ATTRIBUTE_VALUES = (*OUT_OF_BOUNDS_MODES, DIRECTML_16BIT)


def mode_refusal(mode: str, attribute: str = "out_of_bounds", modes: Sequence[str] = ATTRIBUTE_VALUES) -> str | None:
    """Why ``mode`` is none of ``modes``, the values a DML op's string ``attribute`` takes (by default a gather's
    ``out_of_bounds``: one of ``OUT_OF_BOUNDS_MODES``, or ``DIRECTML_16BIT``, which only ``to_dml`` writes and no
    list offers), in one line; None where it is one of them."""
    if mode in modes:
        return None
    offered = ", ".join(m for m in modes if m != DIRECTML_16BIT)
    return f"{attribute} {mode!r} is unknown (expected one of: {offered})"


@dataclass(frozen=True)
class ElementType:
    """One tensor element type under its three names."""

    directml: str  # DML_TENSOR_DATA_TYPE_<directml>
    onnx: int  # TensorProto.DataType
    numpy: np.dtype


def _element(directml: str, onnx_type: int, numpy_type: type) -> ElementType:
    return ElementType(directml, onnx_type, np.dtype(numpy_type))


# DirectML's data types at feature level 4.1 (docs/semantics.md section 5), the data types of its gathers.
DATA_TYPES = (
    _element("FLOAT32", TensorProto.FLOAT, np.float32),
    _element("FLOAT16", TensorProto.FLOAT16, np.float16),
    _element("FLOAT64", TensorProto.DOUBLE, np.float64),
    _element("UINT8", TensorProto.UINT8, np.uint8),
    _element("UINT16", TensorProto.UINT16, np.uint16),
    _element("UINT32", TensorProto.UINT32, np.uint32),
    _element("UINT64", TensorProto.UINT64, np.uint64),
    _element("INT8", TensorProto.INT8, np.int8),
    _element("INT16", TensorProto.INT16, np.int16),
    _element("INT32", TensorProto.INT32, np.int32),
    _element("INT64", TensorProto.INT64, np.int64),
)
_BY_DIRECTML = {t.directml: t for t in DATA_TYPES}
INDEX_TYPES = tuple(_BY_DIRECTML[name] for name in ("INT64", "INT32", "UINT64", "UINT32"))
DATA_DTYPES = tuple(t.numpy for t in DATA_TYPES)
DATA_TYPE_NAMES = tuple(t.directml for t in DATA_TYPES)  # FLOAT32, FLOAT16, ... in that order
INDEX_TYPE_NAMES = tuple(sorted(t.directml for t in INDEX_TYPES))  # INT32, INT64, UINT32, UINT64
INDEX_DTYPES = tuple(t.numpy for t in INDEX_TYPES)
DIRECTML_DTYPES = {t.directml: t.numpy for t in DATA_TYPES}  # descs' element types by DirectML's names
DIRECTML_NAMES = {t.onnx: t.directml for t in DATA_TYPES}
NUMPY_NAMES = {np.dtype(t.numpy): t.directml for t in DATA_TYPES}  # DirectML's name of a numpy element type

# A DML node carries DirectML's data types less FLOAT16, which onnxruntime-extensions' bridge refuses; the types
# below travel as another through the custom ops (to_dml puts Casts around the node), exactly.
NODE_DATA_TYPES = frozenset(t.onnx for t in DATA_TYPES if t.onnx != TensorProto.FLOAT16)
CARRIERS = {
    TensorProto.FLOAT16: TensorProto.FLOAT,
    TensorProto.BFLOAT16: TensorProto.FLOAT,
    TensorProto.BOOL: TensorProto.UINT8,
}


@dataclass(frozen=True)
class Carrying:
    """The element types DML nodes carry for one runtime, and what the others travel as."""

    node_types: frozenset[int]
    carriers: dict[int, int]


# For the custom ops (the default); for runtimes that take FLOAT16 on a DML node as it is (onnx's reference
# evaluator with ``runtime.evaluator``'s op classes): DirectML's own types, BFLOAT16 and BOOL carried (it has neither).
CUSTOM_OPS = Carrying(NODE_DATA_TYPES, CARRIERS)
NATIVE_FLOAT16 = Carrying(
    NODE_DATA_TYPES | {TensorProto.FLOAT16}, {k: v for k, v in CARRIERS.items() if k != TensorProto.FLOAT16}
)
# ONNX Runtime's DirectML provider hands DirectML a BOOL tensor as UINT8.
DIRECTML_STORAGE = {TensorProto.BOOL: TensorProto.UINT8}
# ONNX Runtime's Where has no kernel for these: the lowering masks them as an exact wider or same-width type.
WHERE_CARRIERS = {
    TensorProto.BOOL: TensorProto.UINT8,
    TensorProto.INT16: TensorProto.INT32,
    TensorProto.UINT16: TensorProto.UINT32,
    TensorProto.UINT64: TensorProto.INT64,
    TensorProto.BFLOAT16: TensorProto.FLOAT,
}


@dataclass(frozen=True)
class Attribute:
    """One attribute of a DML op. Every one is required: ``to_dml`` writes them all, and the DML form states
    each gather completely."""

    name: str
    type: int  # onnx.AttributeProto.INT or STRING
    doc: str


_MODE = Attribute(
    "out_of_bounds",
    onnx.AttributeProto.STRING,
    f"what an out-of-bounds index does: one of {', '.join(OUT_OF_BOUNDS_MODES)} or "
    f"{DIRECTML_16BIT} (DirectML's reading of 16-bit data carried as FLOAT32)",
)


@dataclass(frozen=True)
class DmlOp:
    """One DML op: its node type, the standard op it stands for, DirectML's operator, and its attributes."""

    op_type: str
    standard: str
    directml: str
    attributes: tuple[Attribute, ...]
    doc: str
    inputs: tuple[str, ...] = ("input", "indices")  # the scatters' take updates too, of the input's type

    def attribute_types(self) -> dict[str, int]:
        return {a.name: a.type for a in self.attributes}


_INT = onnx.AttributeProto.INT
OPS = (
    DmlOp(
        "DmlGather",
        "Gather",
        "DML_GATHER",
        (
            Attribute("axis", _INT, "the input's dimension the indices select along, 0 to N-1"),
            Attribute("index_dimensions", _INT, "how many of the indices' last dimensions count"),
            _MODE,
        ),
        "DML_GATHER: input, indices and output of the same dimension count N, right-aligned.",
    ),
    DmlOp(
        "DmlGatherElements",
        "GatherElements",
        "DML_GATHER_ELEMENTS",
        (Attribute("axis", _INT, "the dimension the indices select along, 0 to N-1"), _MODE),
        "DML_GATHER_ELEMENTS: the output has the indices' sizes.",
    ),
    DmlOp(
        "DmlGatherNd",
        "GatherND",
        "DML_GATHER_ND1",
        (
            Attribute("input_dimension_count", _INT, "how many of the input's last dimensions count"),
            Attribute("indices_dimension_count", _INT, "how many of the indices' last dimensions count"),
            Attribute("batch_dimension_count", _INT, "how many of those are batch dimensions"),
            _MODE,
        ),
        "DML_GATHER_ND1: index tuples of the indices' last size, after the batch dimensions.",
    ),
)
BY_TYPE = {op.op_type: op for op in OPS}
BY_STANDARD = {op.standard: op for op in OPS}
DML_OP_TYPES = tuple(BY_TYPE)
GATHER_OPS = tuple(BY_STANDARD)  # the standard ops that have a DML form

# DirectML's scatters (docs/semantics.md section 10, ``core.scatter``): the output has the input's type and sizes.
_SCATTER_MODE = Attribute(
    "out_of_bounds",
    onnx.AttributeProto.STRING,
    "what an out-of-bounds index does: directml, clamp or error (core.scatter.SCATTER_MODES)",
)
_DUPLICATES = Attribute(
    "duplicates",
    onnx.AttributeProto.STRING,
    "several updates of different values to one element: error (which one DirectML keeps is a race) or last (the "
    "last stays, as on ONNX Runtime's CPU) (core.scatter.DUPLICATE_MODES)",
)
_UPDATES = ("input", "indices", "updates")
SCATTER_OPS = (
    DmlOp(
        "DmlScatterElements",
        "ScatterElements",
        "DML_SCATTER",
        (Attribute("axis", _INT, "the dimension the indices select along, 0 to N-1"), _SCATTER_MODE, _DUPLICATES),
        "DML_SCATTER: output = input, then each update written where its index puts it along the axis.",
        _UPDATES,
    ),
    DmlOp(
        "DmlScatterNd",
        "ScatterND",
        "DML_SCATTER_ND",
        (
            Attribute("input_dimension_count", _INT, "how many of the input's last dimensions count"),
            Attribute("indices_dimension_count", _INT, "how many of the indices' last dimensions count"),
            _SCATTER_MODE,
            _DUPLICATES,
        ),
        "DML_SCATTER_ND: output = input, then each slice of updates written at its index tuple.",
        _UPDATES,
    ),
)
SCATTER_BY_TYPE = {op.op_type: op for op in SCATTER_OPS}
# The standard scatters that have a DML form: the deprecated Scatter is ScatterElements (the provider maps both).
SCATTER_BY_STANDARD = {op.standard: op for op in SCATTER_OPS} | {"Scatter": SCATTER_OPS[0]}


def is_dml(node: onnx.NodeProto) -> bool:
    """Whether ``node`` is one of the DML gathers."""
    return node.domain == DOMAIN and node.op_type in BY_TYPE


def is_dml_scatter(node: onnx.NodeProto) -> bool:
    return node.domain == DOMAIN and node.op_type in SCATTER_BY_TYPE


_ONE = onnx.TensorShapeProto.Dimension(dim_value=1)


def _output_dims(operator: str, input: Sequence, indices: Sequence, attributes: dict[str, int]) -> Sequence | None:
    """The output's dims from the inputs' onnx dims (``core.sizes``' rules, ``_ONE`` where DirectML pads), wherever
    the ranks and attributes state them, DirectML taking them or not; None where they do not, or where GatherND's
    tuple length, the indices' last dim, is not a number."""
    if operator.startswith("GATHER_ND"):
        tuple_length = sizes.dim_size(indices[-1]) if indices else None
        if not isinstance(tuple_length, int):
            return None
        indices = [*indices[:-1], tuple_length]
    result = sizes.output_sizes(operator, input, indices, attributes, _ONE)
    return result.stated if isinstance(result, sizes.Refusal) else result


def _inference(op: DmlOp) -> Callable[[onnx.shape_inference.InferenceContext], None]:
    """onnx's type and shape inference for ``op``: the input's element type, and the output's dims where the inputs'
    ranks are known (sizes and symbols carried over from the inputs). Called per DML node by every inference over a
    DML model, so it moves onnx's dims as they are."""
    ints = [a.name for a in op.attributes if a.type == _INT]
    operator = op.directml.removeprefix("DML_")

    def infer(context: onnx.shape_inference.InferenceContext) -> None:
        input = context.get_input_type(0)
        if input is None or not input.tensor_type.elem_type:
            return
        if op.op_type in SCATTER_BY_TYPE:
            context.set_output_type(0, input)
            return
        output = onnx.TypeProto()
        output.tensor_type.elem_type = input.tensor_type.elem_type
        indices = context.get_input_type(1)
        if input.tensor_type.HasField("shape") and indices is not None and indices.tensor_type.HasField("shape"):
            attributes = {name: a.i for name in ints if (a := context.get_attribute(name)) is not None}
            dims = _output_dims(operator, input.tensor_type.shape.dim, indices.tensor_type.shape.dim, attributes)
            if dims is not None:
                output.tensor_type.shape.dim.extend(dims)
        context.set_output_type(0, output)

    return infer


def _type_names(types: Iterable[int]) -> list[str]:
    return [f"tensor({onnx.TensorProto.DataType.Name(t).lower()})" for t in types]


def _schema(op: DmlOp) -> defs.OpSchema:
    schema = defs.OpSchema(
        op.op_type,
        DOMAIN,
        DOMAIN_VERSION,
        op.doc,
        inputs=[defs.OpSchema.FormalParameter(name, "Tind" if name == "indices" else "T") for name in op.inputs],
        outputs=[defs.OpSchema.FormalParameter("output", "T")],
        type_constraints=[
            ("T", _type_names(t.onnx for t in DATA_TYPES), "DirectML's data types (the custom ops: all but FLOAT16)"),
            ("Tind", _type_names(t.onnx for t in INDEX_TYPES), "DirectML's index types"),
        ],
        attributes=[
            defs.OpSchema.Attribute(a.name, defs.OpSchema.AttrType(a.type), a.doc, required=True) for a in op.attributes
        ],
    )
    schema.set_type_and_shape_inference_function(_inference(op))
    return schema


def register_schemas() -> None:
    """Declare the DML ops to onnx (once per process): onnx's shape inference then types their outputs, and its
    checker checks their attributes' types and their input types."""
    for op in (*OPS, *SCATTER_OPS):
        if not defs.has(op.op_type, DOMAIN_VERSION, DOMAIN):
            defs.register_schema(_schema(op))
