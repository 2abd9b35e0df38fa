"""``onnx-gather check``: would DirectML at a feature level accept each gather? (docs/semantics.md section 5)."""

from __future__ import annotations

from dataclasses import dataclass

import onnx
from onnx import TensorProto

from onnx_gather.convert import convert
from onnx_gather.graph import DML_OP_TYPES, DOMAIN, bodies, value_types

_T = TensorProto
_BASE_DATA = frozenset({_T.FLOAT, _T.FLOAT16})
_DATA_2_1 = _BASE_DATA | {_T.INT32, _T.INT16, _T.INT8, _T.UINT32, _T.UINT16, _T.UINT8}
_ALL_INDICES = frozenset({_T.INT64, _T.INT32, _T.UINT64, _T.UINT32})
# A BOOL tensor reaches DirectML as UINT8: ONNX Runtime's DirectML provider maps it so.
_AS_DML = {_T.BOOL: _T.UINT8}


@dataclass(frozen=True)
class FeatureLevel:
    """What one DirectML feature level accepts for DML_GATHER and DML_GATHER_ELEMENTS."""

    name: str
    dimension_count: int | None  # exactly this many dimensions, or None for 1 to 8
    data_types: frozenset[int]
    index_types: frozenset[int]
    gather_elements: bool


FEATURE_LEVELS = {
    "1.0": FeatureLevel("1.0", 4, _BASE_DATA, frozenset({_T.UINT32}), False),
    "2.1": FeatureLevel("2.1", 4, _DATA_2_1, frozenset({_T.UINT32}), True),
    "3.0": FeatureLevel("3.0", None, _DATA_2_1, _ALL_INDICES, True),
    "4.1": FeatureLevel("4.1", None, _DATA_2_1 | {_T.DOUBLE, _T.INT64, _T.UINT64}, _ALL_INDICES, True),
}


@dataclass(frozen=True)
class Verdict:
    """One gather node and whether the feature level accepts it; ``reason`` says why not, or what it becomes."""

    where: str
    node: str
    op_type: str
    accepted: bool
    reason: str


def _name(elem_type: int) -> str:
    return TensorProto.DataType.Name(elem_type)


def _judge(level: FeatureLevel, op_type: str, n: int, data_type: int, index_type: int) -> tuple[bool, str]:
    dml = op_type if op_type.startswith("Dml") else f"Dml{op_type}"
    data_type = _AS_DML.get(data_type, data_type)
    if dml == "DmlGatherElements" and not level.gather_elements:
        return False, f"DML_GATHER_ELEMENTS needs feature level 2.1 (this is {level.name})"
    if level.dimension_count is not None and n != level.dimension_count:
        return False, f"{n} dimensions; feature level {level.name} takes exactly {level.dimension_count}"
    if data_type not in level.data_types:
        return False, f"{_name(data_type)} data is not supported at feature level {level.name}"
    if index_type not in level.index_types:
        return False, f"{_name(index_type)} indices are not supported at feature level {level.name}"
    return True, f"{dml} with {n} dimensions, {_name(data_type)} data, {_name(index_type)} indices"


def check(model: onnx.ModelProto, feature_level: str = "4.1") -> list[Verdict]:
    """A verdict for every gather, standard (as ``to_dml`` would convert it) or already in DML form."""
    level = FEATURE_LEVELS[feature_level]
    verdicts = []
    _, report = convert(model, level.dimension_count or "auto")
    for change in report.changed:
        accepted, reason = _judge(level, change.op_type, change.dimension_count, change.data_type, change.index_type)
        verdicts.append(Verdict(change.where, change.node, change.op_type, accepted, reason))
    for left in report.left:
        verdicts.append(Verdict(left.where, left.node, left.op_type, False, f"cannot be expressed: {left.reason}"))
    types = value_types(model)
    for body in bodies(model):
        scope = types.get(body.scope, {})
        for node in body.nodes:
            if node.domain != DOMAIN or node.op_type not in DML_OP_TYPES:
                continue
            data, indices = (scope.get(name) for name in node.input[:2])
            if data is None or data.rank is None or indices is None:
                verdict = Verdict(body.where, node.name, node.op_type, False, "its input types are unknown")
            else:
                accepted, reason = _judge(level, node.op_type, data.rank, data.elem_type, indices.elem_type)
                verdict = Verdict(body.where, node.name, node.op_type, accepted, reason)
            verdicts.append(verdict)
    return verdicts
