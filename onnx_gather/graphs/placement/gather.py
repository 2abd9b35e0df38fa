"""What DirectML accepts at each feature level, and where ONNX Runtime's DirectML provider puts a standard gather
(docs/semantics.md sections 5 and 6), mirrored without running it.

Measured with ONNX Runtime 1.24.4 and DirectML 1.15.4 (tests/test_directml.py checks each rule on real DirectML):

* a data type the device has runs on DirectML, BOOL as UINT8, at every opset, with INT32 or INT64 indices;
* BFLOAT16 and STRING gathers are not registered for DirectML: ONNX Runtime's CPU provider runs them, with its own
  semantics (an out-of-bounds index is an error there), and so does a data type the device lacks;
* a tensor of more than 8 dimensions (data, indices or output), GatherElements indices that differ from the
  data off the axis, a GatherND whose output is a scalar, or a GatherND whose batch sizes differ between data and
  indices: the provider takes the node all the same and fails, when the session is created if the shapes are
  static, else when it runs. CPU fallback does not rescue it.
"""

from __future__ import annotations

from dataclasses import dataclass

from onnx import TensorProto

from onnx_gather.core import contract
from onnx_gather.core.sizes import MAX_DIMENSION_COUNT, off_axis_difference
from onnx_gather.core.words import counted
from onnx_gather.graphs.placement.nodes import CREATION_INVALID, At, Failure, Where, Why
from onnx_gather.graphs.types import ValueType

_T = TensorProto
_BASE_DATA = frozenset({_T.FLOAT, _T.FLOAT16})
_DATA_2_1 = _BASE_DATA | {_T.INT32, _T.INT16, _T.INT8, _T.UINT32, _T.UINT16, _T.UINT8}
_ALL_INDICES = frozenset({_T.INT64, _T.INT32, _T.UINT64, _T.UINT32})
NOT_REGISTERED = frozenset({_T.BFLOAT16, _T.STRING})  # no DirectML kernel: ONNX Runtime's CPU provider runs them


@dataclass(frozen=True)
class FeatureLevel:
    """What one DirectML feature level accepts for its gather operators."""

    name: str
    dimension_count: int | None  # exactly this many dimensions, or None for 1 to 8
    data_types: frozenset[int]
    index_types: frozenset[int]


FEATURE_LEVELS = {
    "1.0": FeatureLevel("1.0", 4, _BASE_DATA, frozenset({_T.UINT32})),
    "2.1": FeatureLevel("2.1", 4, _DATA_2_1, frozenset({_T.UINT32})),
    "3.0": FeatureLevel("3.0", None, _DATA_2_1, _ALL_INDICES),
    # DML_GATHER_ND's pages list no 64-bit data; DirectML 1.15.4 runs it (measured), as the other two.
    "4.1": FeatureLevel("4.1", None, _DATA_2_1 | {_T.DOUBLE, _T.INT64, _T.UINT64}, _ALL_INDICES),
}
_JUDGED = frozenset().union(*(level.data_types | level.index_types for level in FEATURE_LEVELS.values()))
# The feature level each operator came with.
_INTRODUCED = {"DML_GATHER": "1.0", "DML_GATHER_ELEMENTS": "2.1", "DML_GATHER_ND": "2.1", "DML_GATHER_ND1": "3.0"}


def dml_operator(op_type: str, batch: int = 0) -> str:
    """The DirectML operator of a gather, standard (``GatherND``) or DML form (``DmlGatherNd``)."""
    base = op_type.removeprefix("Dml")
    if base in ("GatherND", "GatherNd"):
        return "DML_GATHER_ND1" if batch else "DML_GATHER_ND"
    return "DML_GATHER_ELEMENTS" if base == "GatherElements" else "DML_GATHER"


def dml_type_name(elem_type: int) -> str:
    """DirectML's name of an ONNX element type, with ONNX's beside it where they differ: ``FLOAT64 (ONNX DOUBLE)``."""
    onnx_name = TensorProto.DataType.Name(elem_type)
    dml = contract.DIRECTML_STORAGE.get(elem_type, elem_type)
    name = contract.DIRECTML_NAMES.get(dml, TensorProto.DataType.Name(dml))
    return name if name == onnx_name else f"{name} (ONNX {onnx_name})"


def judge(level: FeatureLevel, op_type: str, n: int, data_type: int, index_type: int, batch: int = 0) -> str | None:
    """None if ``level`` accepts the DML node (``n`` dimensions at least, padded up to a fixed count), else why not."""
    operator = dml_operator(op_type, batch)
    introduced = _INTRODUCED[operator]
    if list(FEATURE_LEVELS).index(level.name) < list(FEATURE_LEVELS).index(introduced):
        return f"{operator} needs feature level {introduced} (this is {level.name})"
    if level.dimension_count is not None and n > level.dimension_count:
        return f"{counted(n, 'dimension')}; feature level {level.name} takes exactly {level.dimension_count}"
    if contract.DIRECTML_STORAGE.get(data_type, data_type) not in level.data_types:
        return f"{dml_type_name(data_type)} data is not supported at feature level {level.name}"
    if index_type not in level.index_types:
        return f"{dml_type_name(index_type)} indices are not supported at feature level {level.name}"
    return None


def needed_level(op_type: str, n: int, data_type: int, index_type: int, batch: int = 0) -> str | None:
    """The lowest feature level that accepts the DML node, or None if none does."""
    return next(
        (
            name
            for name, level in FEATURE_LEVELS.items()
            if judge(level, op_type, n, data_type, index_type, batch) is None
        ),
        None,
    )


def has_type(level: FeatureLevel, elem_type: int) -> bool:
    """Whether a device of ``level`` has tensors of ``elem_type``: the provider asks the device which tensor types it
    has, and takes no node with a tensor of another type (types outside the levels' tables are not judged here)."""
    dml = contract.DIRECTML_STORAGE.get(elem_type, elem_type)
    return dml not in _JUDGED or dml in level.data_types | level.index_types


def cpu_reason(why: Why) -> str:
    """Why the provider keeps a gather on its CPU provider (``why``, one the graph around it gives:
    ``Why.by_its_graph``), and what that means for its indices."""
    return f"{why.sentence}, where an out-of-bounds index is an error"


@dataclass(frozen=True)
class Placement:
    """Where ONNX Runtime's DirectML provider puts one standard gather: ``DIRECTML``, ``CPU``, ``FAILS`` (with how it
    fails) or (its ranks untold) ``UNKNOWN``."""

    provider: Where
    reason: str
    failure: Failure | None = None


def place_gather(
    op_type: str,
    data: ValueType,
    indices: ValueType,
    axis: int,
    level: FeatureLevel,
    out_rank: int | None,
    batch: int = 0,
) -> Placement:
    """Where the provider, on a device of feature ``level``, puts ``op_type`` of ``data`` at ``indices`` (known ranks;
    ``axis`` non-negative; GatherND's ``batch`` dims) with an output of ``out_rank`` (None: ONNX gives none, the
    gather being invalid)."""
    cpu = "ONNX Runtime's CPU provider runs it, where an out-of-bounds index is an error"
    if data.elem_type in NOT_REGISTERED:
        return Placement(Where.CPU, f"{dml_type_name(data.elem_type)} gathers are not registered for DirectML; {cpu}")
    roles = (("data", data), ("indices", indices))
    lacking = [f"{dml_type_name(v.elem_type)} {role}" for role, v in roles if not has_type(level, v.elem_type)]
    if lacking:
        return Placement(Where.CPU, f"a device of feature level {level.name} lacks {' and '.join(lacking)}; {cpu}")
    ranks = {"data": data.rank, "indices": indices.rank, "output": out_rank}
    over = [f"{role} {rank}" for role, rank in ranks.items() if rank is not None and rank > MAX_DIMENSION_COUNT]
    when = "when the session is created (static shapes) or when it runs (dynamic ones)"
    static = all(v.dims is not None and all(isinstance(d, int) for d in v.dims) for v in (data, indices))
    fails_there = CREATION_INVALID if static else Failure("80070057", At.RUN)
    if op_type == "GatherND" and indices.rank == 0:  # ONNX Runtime's GatherND_runtime_scalar_indices_error
        return Placement(
            Where.FAILS,
            "its indices are a scalar (rank 0, as a run brings them: declared so, ONNX Runtime's shape inference "
            "refuses the model for every provider): the provider takes the node and fails when it runs "
            "(MLOperatorAuthorImpl.cpp(2818) 80070057), where ONNX Runtime's CPU fails too",
            Failure("80070057", At.RUN),
        )
    if over:
        return Placement(
            Where.FAILS,
            f"more than {MAX_DIMENSION_COUNT} dimensions ({', '.join(over)}): the provider "
            f"takes the node and fails {when} (80070057)",
            fails_there,
        )
    if op_type == "GatherND" and out_rank == 0:
        return Placement(
            Where.FAILS, f"its output is a scalar: the provider takes the node and fails {when} (80070057)", fails_there
        )
    if op_type == "GatherND":
        pairs = zip(data.dims[:batch], indices.dims[:batch], strict=True)
        differ = [d for d, (a, b) in enumerate(pairs) if isinstance(a, int) and isinstance(b, int) and a != b]
        if differ:
            d = differ[0]
            return Placement(
                Where.FAILS,
                f"its batch sizes differ (dimension {d}: data {data.dims[d]}, indices "
                f"{indices.dims[d]}); the provider takes the node and fails when the session "
                "is created (MLOperatorAuthorImpl.cpp(2853) 80070057)",
                CREATION_INVALID,
            )
    if op_type == "GatherElements" and data.rank != indices.rank:
        return Placement(
            Where.UNKNOWN,
            f"its indices have rank {indices.rank} and its data rank {data.rank}, which ONNX's GatherElements forbids "
            "(ONNX Runtime's CPU kernel fails when it runs; what DirectML's provider does was not measured)",
        )
    if op_type == "GatherElements":
        d = off_axis_difference(data.dims, indices.dims, axis)
        if d is not None:
            return Placement(
                Where.FAILS,
                f"its indices differ from the data off the axis (dimension {d}: "
                f"{indices.dims[d]} != {data.dims[d]}); DirectML refuses such a "
                "DML_GATHER_ELEMENTS and the provider fails when the session is created "
                "(AbiCustomRegistry.cpp(519) 80070057)",
                CREATION_INVALID,
            )
        pairs = [(a, b) for d, (a, b) in enumerate(zip(data.dims, indices.dims, strict=True)) if d != axis]
        if any(a is None or b is None or a != b for a, b in pairs):
            return Placement(
                Where.DIRECTML,
                "runs on DirectML if its indices match the data off the axis when it runs "
                "(dynamic dims); the run fails if they do not",
            )
    return Placement(Where.DIRECTML, "runs on DirectML")
