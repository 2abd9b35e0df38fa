"""The DirectML provider's support queries: a node the provider has a kernel for that its query refuses goes to the
CPU provider. Read from microsoft/onnxruntime as stored for this project (1.24-era texts, the newest stored):
OperatorRegistration.cpp (its 108,473-character text; the commit of that text was not shown) attaches each query to
some registrations only: ``QueryMaxPool`` to MaxPool-8 and later, ``QuerySlice`` to Slice-10 and later,
``QueryResize`` to Resize-11 and later, ``QueryScatter`` to ScatterElements-16, ``QueryBatchNormalization`` to
BatchNormalization-14 and -15, ``QueryLayerNormalization`` to LayerNormalization-17, and the ``com.microsoft``
SkipLayerNormalization, QLinearSigmoid and Attention. Each function below cites the ``Query<Name>`` it follows, in
``onnxruntime/core/providers/dml/DmlExecutionProvider/src/Operators/`` (DmlOperatorResize.cpp at 59e75cf6,
DmlOperatorLayerNormalization.cpp at b19adb63, DmlOperatorAttention.cpp at 130fed8a, DmlOperatorBatchNormalization.cpp
at 16bce38f; the rest as stored). ScatterND's reduction is refused as this module did before (recorded runs).

Not mirrored: ``QueryEinSum`` (it takes an equation only where ``EinSumHelper`` recognizes it as one of its
operator types, a parser not repeated here), ``QueryPad`` and ``QueryRecurrentNeuralNetwork`` (their source was not
found in the stored texts).
"""

from __future__ import annotations

from collections.abc import Callable

import onnx
from onnx import TensorProto

from onnx_gather.graphs.plumbing import attribute
from onnx_gather.graphs.types import ValueType


def _present(names: list[str] | tuple[str, ...], index: int) -> bool:
    """``IsInputValid``/``IsOutputValid``: the optional value at ``index`` is given."""
    return index < len(names) and bool(names[index])


def _max_pool(node: onnx.NodeProto, types: dict[str, ValueType]) -> str:
    """DmlOperatorPooling.cpp, QueryMaxPool: ``storage_order`` other than 0 is refused."""
    return "storage_order other than 0" if attribute(node, "storage_order", 0) != 0 else ""


def _slice(node: onnx.NodeProto, types: dict[str, ValueType]) -> str:
    """DmlOperatorSlice.cpp, QuerySlice: supported only with at most 5 inputs (ONNX allows no more)."""
    return "more than 5 inputs" if len(node.input) > 5 else ""


def _resize(node: onnx.NodeProto, types: dict[str, ValueType]) -> str:
    """DmlOperatorResize.cpp, QueryResize: ``mode`` "cubic", ``exclude_outside`` other than 0 and an
    ``extrapolation_value`` other than 0 are refused."""
    if attribute(node, "mode", "nearest") == "cubic":
        return 'mode "cubic"'
    if attribute(node, "exclude_outside", 0) != 0:
        return "exclude_outside other than 0"
    if attribute(node, "extrapolation_value", 0.0) != 0.0:
        return "extrapolation_value other than 0"
    return ""


def _scatter(node: onnx.NodeProto, types: dict[str, ValueType]) -> str:
    """DmlOperatorScatter.cpp, QueryScatter: a ``reduction`` other than "none" is refused."""
    reduction = attribute(node, "reduction", "none")
    return f"reduction ({reduction!r})" if reduction != "none" else ""


def _batch_normalization(node: onnx.NodeProto, types: dict[str, ValueType]) -> str:
    """DmlOperatorBatchNormalization.cpp, QueryBatchNormalization: ``training_mode`` other than 0, fewer than 5
    inputs, and inputs whose element types differ from X's are refused."""
    if attribute(node, "training_mode", 0) != 0:
        return "training_mode"
    if len(node.input) < 5:
        return "node of fewer than 5 inputs"
    elements = [types[name].elem_type if name in types else None for name in node.input[:5]]
    if None not in elements and len(set(elements)) > 1:
        names = sorted({TensorProto.DataType.Name(e) for e in elements if e is not None})
        return f"inputs of different element types ({', '.join(names)})"
    return ""


def _layer_normalization(node: onnx.NodeProto, types: dict[str, ValueType]) -> str:
    """DmlOperatorLayerNormalization.cpp, QueryLayerNormalization: supported only with one output (Mean and
    InvStdDev refused)."""
    return "Mean or InvStdDev output" if len(node.output) != 1 else ""


def _skip_layer_normalization(node: onnx.NodeProto, types: dict[str, ValueType]) -> str:
    """DmlOperatorSkipLayerNormalization.cpp, QuerySkipLayerNormalization: outputs 1 (mean) and 2 (inv_std_var)
    are refused."""
    return "mean or inv_std_var output" if _present(node.output, 1) or _present(node.output, 2) else ""


def _qlinear_sigmoid(node: onnx.NodeProto, types: dict[str, ValueType]) -> str:
    """DmlOperatorQLinearSigmoid.cpp, QueryQLinearSigmoid: fewer than 5 inputs (a zero point left out) refused."""
    return "node with a zero point left out" if len(node.input) < 5 else ""


def _attention(node: onnx.NodeProto, types: dict[str, ValueType]) -> str:
    """DmlOperatorAttention.cpp, QueryAttention: inputs 4 (past) and 6 (past_sequence_length), output 1 (present),
    and ``unidirectional``, ``do_rotary`` or ``past_present_share_buffer`` other than 0 are refused."""
    if _present(node.input, 4) or _present(node.input, 6):
        return "past or past_sequence_length input"
    if _present(node.output, 1):
        return "present output"
    for name in ("unidirectional", "do_rotary", "past_present_share_buffer"):
        if attribute(node, name, 0) != 0:
            return f"{name} other than 0"
    return ""


Query = Callable[[onnx.NodeProto, dict[str, ValueType]], str]
# (domain, operator) -> (the registrations the query is attached to, from this since-version on; the query)
QUERIES: dict[tuple[str, str], tuple[int, Query]] = {
    ("", "MaxPool"): (8, _max_pool),
    ("", "Slice"): (10, _slice),
    ("", "Resize"): (11, _resize),
    ("", "ScatterElements"): (16, _scatter),
    ("", "ScatterND"): (16, _scatter),
    ("", "BatchNormalization"): (14, _batch_normalization),
    ("", "LayerNormalization"): (17, _layer_normalization),
    ("com.microsoft", "SkipLayerNormalization"): (1, _skip_layer_normalization),
    ("com.microsoft", "QLinearSigmoid"): (1, _qlinear_sigmoid),
    ("com.microsoft", "Attention"): (1, _attention),
}


def query_refusal(node: onnx.NodeProto, since: int, types: dict[str, ValueType]) -> str:
    """Why the support query of the provider's kernel (of since-version ``since``) refuses ``node``; "" where it
    takes it or no query is attached."""
    domain = "" if node.domain == "ai.onnx" else node.domain
    attached = QUERIES.get((domain, node.op_type))
    if attached is None or since < attached[0]:
        return ""
    why = attached[1](node, types)
    return f"the provider's {node.op_type} takes no {why}: its support query refuses it" if why else ""
