"""The DirectML provider's support queries (placement.queries), ONNX Runtime's expansion of operators neither
provider has a kernel for into their ONNX function bodies (placement.functions), and ``check`` held against the
placement of ONNX's backend node suite on real DirectML."""

from __future__ import annotations

import collections
import json
from importlib import resources

import onnx
import pytest
from conftest import real_placement, require_directml
from onnx import TensorProto, helper

from onnx_gather.conformance import node_suite
from onnx_gather.graphs.placement.check import check
from onnx_gather.graphs.placement.nodes import Why, place_nodes
from onnx_gather.runtime import backends

F = TensorProto.FLOAT


def _single(op, inputs, outputs, opset, domain="", **attributes) -> onnx.ModelProto:
    """One node of ``op``; inputs and outputs as (name, elem_type, dims)."""
    node = helper.make_node(op, [n for n, *_ in inputs], [n for n, *_ in outputs], domain=domain, **attributes)
    graph = helper.make_graph(
        [node],
        "one",
        [helper.make_tensor_value_info(*value) for value in inputs],
        [helper.make_tensor_value_info(*value) for value in outputs],
    )
    imports = [helper.make_opsetid("", opset)] + ([helper.make_opsetid(domain, 1)] if domain else [])
    return helper.make_model(graph, opset_imports=imports)


def _why(model: onnx.ModelProto) -> str:
    return place_nodes(model)["graph 'one'"][0].why


X4 = ("x", F, [1, 2, 4, 4])
Y4 = ("y", F, None)
C2 = [(name, F, [2]) for name in ("scale", "bias", "mean", "var")]
QUERIED = [  # (what, model refused, model taken)
    ("MaxPool storage_order", {"storage_order": 1}, {}),
    ("Resize cubic", {"mode": "cubic"}, {"mode": "linear"}),
    ("Resize exclude_outside", {"exclude_outside": 1}, {}),
    ("Resize extrapolation_value", {"extrapolation_value": 1.0}, {"extrapolation_value": 0.0}),
    ("ScatterElements reduction", {"reduction": "add"}, {}),
    ("BatchNormalization training_mode", {"training_mode": 1}, {}),
]


def _queried(what: str, attributes: dict) -> onnx.ModelProto:
    op = what.split()[0]
    if op == "MaxPool":
        return _single(op, [X4], [Y4], 12, kernel_shape=[2, 2], **attributes)
    if op == "Resize":
        return _single(op, [X4, ("roi", F, [0]), ("scales", F, [4])], [Y4], 19, **attributes)
    if op == "ScatterElements":
        inputs = [("data", F, [4]), ("indices", TensorProto.INT64, [2]), ("updates", F, [2])]
        return _single(op, inputs, [Y4], 16, **attributes)
    return _single(op, [X4, *C2], [Y4], 15, **attributes)


@pytest.mark.parametrize(("what", "refused", "taken"), QUERIED, ids=[q[0] for q in QUERIED])
def test_each_support_query_refuses_what_its_source_refuses(what, refused, taken):
    assert _why(_queried(what, refused)) == Why.UNSUPPORTED
    assert _why(_queried(what, taken)) == Why.DIRECTML


def test_batch_normalization_of_mixed_types_and_layer_normalization_s_extra_outputs_are_refused():
    mixed = _single("BatchNormalization", [X4, *C2[:2], *[(n, TensorProto.FLOAT16, [2]) for n in ("m", "v")]], [Y4], 15)
    assert _why(mixed) == Why.UNSUPPORTED
    inputs = [("x", F, [2, 4]), ("s", F, [4]), ("b", F, [4])]
    assert _why(_single("LayerNormalization", inputs, [Y4, ("mean", F, None)], 17)) == Why.UNSUPPORTED
    assert _why(_single("LayerNormalization", inputs, [Y4], 17)) == Why.DIRECTML


def test_contrib_queries():
    ms = "com.microsoft"
    q = [("x", TensorProto.UINT8, [4]), ("xs", F, []), ("xz", TensorProto.UINT8, []), ("ys", F, [])]
    sig = [("y", TensorProto.UINT8, [4])]
    assert _why(_single("QLinearSigmoid", q, sig, 17, domain=ms)) == Why.UNSUPPORTED
    assert _why(_single("QLinearSigmoid", [*q, ("yz", TensorProto.UINT8, [])], sig, 17, domain=ms)) == Why.DIRECTML
    inputs = [("x", F, [1, 2, 4]), ("skip", F, [1, 2, 4]), ("gamma", F, [4])]
    outputs = [("y", F, [1, 2, 4]), ("mean", F, None)]
    assert _why(_single("SkipLayerNormalization", inputs, outputs, 17, domain=ms)) == Why.UNSUPPORTED
    assert _why(_single("SkipLayerNormalization", inputs, outputs[:1], 17, domain=ms)) == Why.DIRECTML


def test_an_operator_neither_provider_has_is_expanded_into_its_function_body():
    mish = place_nodes(_single("Mish", [X4], [Y4], 22))["graph 'one'"][0]
    assert (mish.provider, mish.why) == ("DirectML", Why.EXPANDED)
    assert "Mish-22" in mish.detail and "on DirectML" in mish.detail
    # Softplus-22 has a body and a CPU kernel (none on DirectML): no expansion, the CPU provider runs it
    assert _why(_single("Softplus", [X4], [Y4], 22)) == Why.NO_KERNEL


def test_the_cpu_kernel_table_agrees_with_the_installed_onnxruntime():
    """Read from ONNX Runtime 1.24.4; a later release keeps every registration (closed ranges unchanged)."""
    from onnxruntime.capi import _pybind_state

    table = json.loads(resources.files("onnx_gather.graphs.placement").joinpath("cpu_kernels.json").read_text())
    installed: dict[tuple[str, str, int], set] = {}
    for kernel in _pybind_state.get_all_opkernel_def():
        if kernel.provider == "CPUExecutionProvider":
            start, end = kernel.version_range
            key = ("" if kernel.domain == "ai.onnx" else kernel.domain, kernel.op_name, start)
            installed.setdefault(key, set()).add(None if end >= 2**31 - 1 else end)
    assert [
        row
        for row in table["kernels"]
        if tuple(row[:3]) not in installed or (row[3] is not None and row[3] not in installed[tuple(row[:3])])
    ] == []


# The suite's single-node cases where check and the recorded placement still disagree, with why.
KNOWN = {
    **{
        case: "the suite counts the nodes of the Loop's or Scan's body, which the provider places on their own"
        for case in ("test_loop11", "test_scan9_multi_state", "test_scan9_scalar", "test_scan9_sum", "test_scan_sum")
    },
}


def _single_node_cases() -> list[tuple[str, onnx.ModelProto, str]]:
    """(case, model, where the recorded run put it: DirectML where any node ran there) for every single-node case
    of the recorded run whose nodes ran."""
    cases = {case.name: case for case in node_suite.node_cases()}
    found = []
    for name, line in node_suite.recorded().items():
        case = cases.get(name)
        if case is None or (not line.get("directml") and not line.get("cpu")) or len(case.model.graph.node) != 1:
            continue
        found.append((name, case.model, "DirectML" if line["directml"] else "CPU"))
    return found


def test_check_places_the_node_suite_s_single_nodes_as_real_directml_did():
    """Against node_suite.jsonl, the recorded placement of real DirectML (ONNX Runtime 1.24.4's placement log)."""
    agree: collections.Counter = collections.Counter()
    wrong = {}
    for name, model, real in _single_node_cases():
        predicted = next(v for v in check(model) if v.where.startswith("graph")).runs_on
        if predicted == real:
            agree[real] += 1
        else:
            wrong[name] = (predicted, real)
    assert sorted(wrong) == sorted(KNOWN)
    assert sum(agree.values()) >= 1089


@pytest.mark.directml
def test_real_directml_places_queried_and_expanded_nodes_where_check_says(tmp_path):
    """A case per mirrored query and expansion, run on real DirectML."""
    require_directml(wine=True)
    chosen = (
        "test_batchnorm_example_training_mode",
        "test_layer_normalization_2d_axis0",
        "test_resize_upsample_scales_cubic",
        "test_resize_tf_crop_and_resize_extrapolation_value",
        "test_mish",
        "test_hardswish",
        "test_swish",
        "test_group_normalization_example",
        "test_sce_mean",
    )
    for name, model, _ in _single_node_cases():
        if name in chosen:
            path = tmp_path / f"{name}.onnx"
            onnx.save(model, path)
            real, cpu_used = real_placement(backends.Model(path, onnx.load(path)))
            on_directml = not cpu_used or any("DirectML" in where for where in real.values())
            predicted = next(v for v in check(model) if v.where.startswith("graph")).runs_on
            assert ("DirectML" if on_directml else "CPU") == predicted, name
