"""Standard scatters into DmlScatterElements and DmlScatterNd, as ONNX Runtime's DirectML provider maps them:
ONNX's own backend cases, placement by opset and reduction, carried types, failures, and the lowering's refusal."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import onnx
import pytest
from conftest import assert_all_identical, assert_identical, require_directml, run_model
from onnx import TensorProto
from onnx import helper as h

import onnx_gather
from onnx_gather.app.cli import main
from onnx_gather.core import contract
from onnx_gather.core.scatter import dml_scatter_elements, dml_scatter_nd
from onnx_gather.graphs.convert import ProviderFailure, convert
from onnx_gather.graphs.lowering.lower import lower
from onnx_gather.graphs.placement.check import check
from onnx_gather.runtime import backends
from onnx_gather.runtime.model import Model

with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # some case generators overflow on purpose
    from onnx.backend.test.case.node import collect_testcases

    CASES = [
        case
        for case in collect_testcases()
        if any(n.op_type in contract.SCATTER_BY_STANDARD for n in case.model.graph.node)
    ]
# The cases without a reduction, at every opset the provider has a kernel for (ONNX's are written at opset 18).
PLAIN = [
    (case, opset)
    for case in CASES
    if not any(a.name == "reduction" for n in case.model.graph.node for a in n.attribute)
    for opset in ((9, 10) if case.name.startswith("test_scatter_with") else (11, 13, 16))
]


def _feeds(case) -> dict[str, np.ndarray]:
    inputs, _ = case.data_sets[0]
    return {value.name: array for value, array in zip(case.model.graph.input, inputs, strict=False)}


def _at_opset(model: onnx.ModelProto, opset: int) -> onnx.ModelProto:
    result = onnx.ModelProto()
    result.CopyFrom(model)
    next(o for o in result.opset_import if o.domain in ("", "ai.onnx")).version = opset
    return result


def _dml_ops(model: onnx.ModelProto) -> list[str]:
    return [n.op_type for n in model.graph.node if contract.is_dml_scatter(n)]


def test_the_cases_are_found():
    assert len(CASES) == 16  # 2 Scatter, 7 ScatterElements, 7 ScatterND
    assert len(PLAIN) == 2 * 2 + 4 * 3  # Scatter-9 and -10; 3 ScatterElements and 1 ScatterND at 11, 13, 16


@pytest.mark.parametrize(("case", "opset"), PLAIN, ids=lambda p: p.name if hasattr(p, "name") else str(p))
def test_a_case_the_provider_takes_converts_and_gives_onnx_runtimes_outputs(case, opset):
    model = _at_opset(case.model, opset)
    original = run_model(model, _feeds(case))
    converted, report = convert(model)
    assert not report.left and len(_dml_ops(converted)) == 1
    onnx.checker.check_model(converted)
    assert_all_identical(run_model(converted, _feeds(case), custom_ops=True), original)
    assert_all_identical(original, case.data_sets[0][1])


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_a_case_as_onnx_writes_it_is_left_where_the_provider_keeps_it_on_the_cpu(case):
    """ONNX writes them at opset 18, or with a reduction: the provider has no kernel, or its query refuses them."""
    converted, report = convert(case.model)
    assert_all_identical(run_model(converted, _feeds(case), custom_ops=True), run_model(case.model, _feeds(case)))
    if case.name.startswith("test_scatter_with"):  # Scatter-10 is Scatter-9 to the provider
        assert len(report.changed) == 1
        return
    assert not report.changed and _dml_ops(converted) == []
    (left,) = report.left
    assert left.reason.startswith("kept standard, as the DirectML provider runs it on the CPU: ")
    assert "-18" in left.reason or "takes no reduction" in left.reason


def _scatter_model(op: str, data: list, indices: list, updates: list, elem=TensorProto.FLOAT, opset=16, **attributes):
    node = h.make_node(op, ["data", "indices", "updates"], ["output"], name="the_scatter", **attributes)
    graph = h.make_graph(
        [node],
        "g",
        [
            h.make_tensor_value_info("data", elem, data),
            h.make_tensor_value_info("indices", TensorProto.INT64, indices),
            h.make_tensor_value_info("updates", elem, updates),
        ],
        [h.make_tensor_value_info("output", elem, data)],
    )
    return h.make_model(graph, opset_imports=[h.make_opsetid("", opset)], ir_version=10)


def _carried(array: np.ndarray) -> np.ndarray:
    return array.view(np.uint8) if array.dtype == np.bool_ else array


@pytest.mark.parametrize("elem", [TensorProto.FLOAT16, TensorProto.BOOL, TensorProto.INT8, TensorProto.DOUBLE])
@pytest.mark.parametrize("dimension_count", ["auto", 6])
def test_out_of_bounds_indices_write_as_directml_does_in_every_carried_type(elem, dimension_count):
    dtype = h.tensor_dtype_to_np_dtype(elem)
    data = (np.arange(18).reshape(3, 6) % 2).astype(dtype)
    indices, updates = np.array([[0], [7], [-7]]), np.array([[1], [0], [1]]).astype(dtype)
    model = _scatter_model("ScatterElements", [3, 6], [3, 1], [3, 1], elem, axis=1)
    converted, report = convert(model, dimension_count)
    assert report.changed[0].dimension_count == (2 if dimension_count == "auto" else 6)
    assert ("travels as" in report.changed[0].note) == (elem in contract.CARRIERS)
    feeds = {"data": data, "indices": indices, "updates": updates}
    data, updates = _carried(data), _carried(updates)  # core.scatter takes DirectML's types: BOOL as UINT8
    expected = dml_scatter_elements(data, indices, updates, 1)
    (output,) = run_model(converted, feeds, custom_ops=True)
    assert_identical(output, expected.view(dtype))

    tuples = np.array([[0, 6], [1, -7], [3, 0]])
    nd = _scatter_model("ScatterND", [3, 6], [3, 2], [3], elem)
    converted = onnx_gather.to_dml(nd, dimension_count)
    (output,) = run_model(converted, {**feeds, "indices": tuples, "updates": feeds["updates"][:, 0]}, custom_ops=True)
    assert_identical(output, dml_scatter_nd(data, tuples, updates.reshape(1, 3), 2, 2).view(dtype))


def test_indices_directml_refuses_raise_or_are_left_for_onnxs_values():
    model = _scatter_model("ScatterElements", [3, 6], [2, 1], [2, 1], axis=1)
    with pytest.raises(ProviderFailure, match=r"ScatterElements node 'the_scatter' .* fails on DirectML: indices of 2"):
        convert(model)
    converted, report = convert(model, provider_failures="onnx")
    assert _dml_ops(converted) == [] and "DirectML fails it" in report.left[0].reason


@pytest.mark.parametrize("opset", [11, 13, 16, 18])
def test_placement_by_opset_and_reduction(opset):
    attributes = {"reduction": "none"} if opset >= 16 else {}
    converted = onnx_gather.to_dml(_scatter_model("ScatterND", [4, 2], [1, 1], [1, 2], opset=opset, **attributes))
    assert _dml_ops(converted) == ([] if opset == 18 else ["DmlScatterNd"])
    if opset == 16:
        reduced = _scatter_model("ScatterND", [4, 2], [1, 1], [1, 2], opset=opset, reduction="add")
        assert "takes no reduction ('add')" in convert(reduced)[1].left[0].reason


def test_zero_mode_has_no_scatter_form():
    converted, report = convert(_scatter_model("ScatterND", [4, 2], [1, 1], [1, 2]), out_of_bounds="zero")
    assert _dml_ops(converted) == [] and "no scatter form" in report.left[0].reason


def test_to_onnx_lowers_a_dml_scatter_into_standard_onnx():
    converted = onnx_gather.to_dml(_scatter_model("ScatterND", [4, 2], [1, 1], [1, 2]))
    lowered, report = lower(converted)
    assert [(c.node, c.op_type) for c in report.changed] == [("the_scatter", "DmlScatterNd")] and not report.left
    assert "ScatterElements" in [n.op_type for n in lowered.graph.node]
    assert [o.domain for o in lowered.opset_import] == [""]


def test_keep_cpu_gathers_leaves_a_scatter_the_provider_folds():
    model = _scatter_model("ScatterND", [4, 2], [1, 1], [1, 2])
    constants = {
        "data": np.zeros((4, 2), np.float32),
        "indices": np.array([[1]]),
        "updates": np.ones((1, 2), np.float32),
    }
    model.graph.initializer.extend(onnx.numpy_helper.from_array(v, k) for k, v in constants.items())
    del model.graph.input[:]
    assert _dml_ops(onnx_gather.to_dml(model)) == ["DmlScatterNd"]
    converted, report = convert(model, keep_cpu_gathers=True)
    assert _dml_ops(converted) == [] and "constant folding" in report.left[0].reason


def test_the_convert_command_counts_scatters_apart(tmp_path, capsys):
    path = tmp_path / "scatters.onnx"
    model = _scatter_model("ScatterND", [4, 2], [1, 1], [1, 2])
    reduced = _scatter_model("ScatterND", [4, 2], [1, 1], [1, 2], reduction="mul")
    model.graph.node.append(reduced.graph.node[0])
    model.graph.node[1].name, model.graph.node[1].input[0] = "reduced", "output"
    model.graph.output[0].name = model.graph.node[1].output[0] = "final"
    onnx.save(model, path)
    assert main(["convert", str(path), "-o", str(tmp_path / "a.onnx")]) == 0
    out = capsys.readouterr().out
    assert "Converted 1 of 2 scatters.\n" in out and "gathers." not in out
    assert "left as it was: node 'reduced' (ScatterND, graph 'g'): kept standard, as the DirectML provider" in out


def test_the_routes_with_a_scatter_out_of_bounds(tmp_path):
    """pyop, evaluator and lowered compute DirectML's scatter."""
    path = tmp_path / "scatter.onnx"
    onnx.save(_scatter_model("ScatterElements", [3, 6], [3, 1], [3, 1], TensorProto.FLOAT16, axis=1), path)
    data = np.arange(18, dtype=np.float16).reshape(3, 6)
    feeds = {"data": data, "indices": np.array([[0], [7], [-7]]), "updates": np.full((3, 1), 100, np.float16)}
    expected = dml_scatter_elements(data, feeds["indices"], feeds["updates"], 1)
    model = Model.read(path)
    for name in ("pyop", "evaluator", "lowered"):
        assert_identical(backends.create(name).run(model, feeds).outputs["output"], expected)


def test_check_says_a_dml_scatter_tells_no_placement():
    converted = onnx_gather.to_dml(_scatter_model("ScatterND", [4, 2], [1, 1], [1, 2]))
    (verdict,) = check(converted, "4.1")
    assert (verdict.node, verdict.status, verdict.gather) == ("the_scatter", "DML", False)
    assert verdict.reason.startswith("DML_SCATTER_ND; onnx-gather's op: check the original model")


def _chained_scatter(tmp_path) -> tuple[Path, Path]:
    """Neg, a ScatterElements whose row 1 writes index 7 of 6 (DirectML: into row 2; the CPU: an error), Neg."""
    nodes = [
        h.make_node("Neg", ["x"], ["data"], name="before"),
        h.make_node("ScatterElements", ["data", "indices", "updates"], ["scattered"], name="the_scatter", axis=1),
        h.make_node("Neg", ["scattered"], ["y"], name="after"),
    ]
    inputs = [
        h.make_tensor_value_info("x", TensorProto.FLOAT, [3, 6]),
        h.make_tensor_value_info("indices", TensorProto.INT64, [3, 1]),
        h.make_tensor_value_info("updates", TensorProto.FLOAT, [3, 1]),
    ]
    graph = h.make_graph(nodes, "chain", inputs, [h.make_tensor_value_info("y", TensorProto.FLOAT, [3, 6])])
    path, given = tmp_path / "chain.onnx", tmp_path / "in.npz"
    onnx.save(h.make_model(graph, opset_imports=[h.make_opsetid("", 16)], ir_version=10), path)
    feeds = {"x": np.arange(18, dtype=np.float32).reshape(3, 6), "indices": np.array([[0], [7], [0]])}
    np.savez(given, **feeds, updates=np.full((3, 1), 100, np.float32))
    return path, given


def test_reduce_cuts_a_model_down_to_the_scatter_the_cpu_fails(tmp_path, capsys):
    path, given = _chained_scatter(tmp_path)
    out = tmp_path / "small.onnx"
    assert main(["reduce", str(path), "--backend", "cpu", "--inputs", str(given), "-o", str(out)]) == 0
    assert [node.name for node in onnx.load(out).graph.node] == ["the_scatter"]
    assert "indices element out of data bounds" in capsys.readouterr().out


@pytest.mark.directml
def test_parity_of_a_scatter_out_of_bounds_routes_agree_with_real_directml(tmp_path, capsys):
    require_directml(wine=True)
    path, given = _chained_scatter(tmp_path)
    report = tmp_path / "report.json"
    arguments = ["parity", str(path), "--inputs", str(given), "--backends", "lowered,dml,evaluator", "--report"]
    assert main([*arguments, str(report)]) == 0
    assert "PASSED" in capsys.readouterr().out
    outputs = json.loads(report.read_text())["outputs"]["y"]
    assert {backend: row["equal"] for backend, row in outputs.items()} == dict.fromkeys(
        ("lowered", "dml", "evaluator"), True
    )


def test_parity_counts_the_out_of_bounds_indices_a_scatter_meets(tmp_path, capsys):
    path, given = _chained_scatter(tmp_path)
    assert main(["parity", str(path), "--inputs", str(given), "--backends", "lowered,cpu"]) == 1
    printed = capsys.readouterr().out
    assert "per DML node: the_scatter 1." in printed and "a scatter's writes, section 10" in printed
