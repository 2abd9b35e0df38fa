"""parity --all-tensors: the model's own run decides the verdict, the run with every value marked as an output only
adds; what marking changed is said; and nothing outside tolerance is ever printed under PASSED (an intermediate value
outside tolerance fails the run, though the outputs agree)."""

from __future__ import annotations

import json
import re

import numpy as np
import onnx
import pytest
from conftest import SUMMARIES, require_directml
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper
from test_fast_gelu import APART, X, _tanh_gelu

from onnx_gather.app.cli import main
from onnx_gather.directml import worker
from onnx_gather.runtime.divergence import marked
from onnx_gather.runtime.model import Model


def _positive_model(tmp_path) -> tuple[str, str]:
    """sqrt(exp(x)) > 0: every backend answers True everywhere, while their exponentials part in the last place
    (onnx's reference evaluator computes numpy's; the custom ops ONNX Runtime's)."""
    nodes = [
        h.make_node("Exp", ["x"], ["grown"], name="grow"),
        h.make_node("Sqrt", ["grown"], ["root"], name="root"),
        h.make_node("Greater", ["root", "zero"], ["y"], name="positive"),
    ]
    zero = numpy_helper.from_array(np.array(0, np.float32), "zero")
    graph = h.make_graph(
        nodes,
        "positive",
        [h.make_tensor_value_info("x", T.FLOAT, [256])],
        [h.make_tensor_value_info("y", T.BOOL, [256])],
        [zero],
    )
    path = tmp_path / "positive.onnx"
    onnx.save(h.make_model(graph, opset_imports=[h.make_opsetid("", 17)], ir_version=10), path)
    np.savez(tmp_path / "x.npz", x=np.random.default_rng(0).standard_normal(256).astype(np.float32) * 3)
    return str(path), str(tmp_path / "x.npz")


def _parity(tmp_path, capsys, *arguments: str) -> tuple[int, dict, list[str]]:
    report = tmp_path / "r.json"
    code = main(["parity", *arguments, "--all-tensors", "--report", str(report)])
    return code, json.loads(report.read_text()), capsys.readouterr().out.strip().splitlines()


def _nothing_outside_tolerance_under_passed(lines: list[str]) -> None:
    if lines[-1].startswith(("PASSED", "PARTIAL")):
        assert not [line for line in lines if "outside tolerance" in line or "DIFFERENT" in line], lines


def test_an_intermediate_value_outside_tolerance_fails_the_run_though_the_outputs_agree(tmp_path, capsys):
    model, inputs = _positive_model(tmp_path)
    code, document, lines = _parity(tmp_path, capsys, model, "--inputs", inputs, "--backends", "evaluator")
    assert code == 0 and document["verdict"] == "passed"  # within the default tolerance
    _nothing_outside_tolerance_under_passed(lines)
    arguments = [model, "--inputs", inputs, "--backends", "evaluator", "--atol", "0", "--rtol", "0"]
    code, document, lines = _parity(tmp_path, capsys, *arguments)
    # Apart by rounding alone: no farther from the exact (float64) values than the reference pyop is.
    assert code == 0 and document["verdict"] == "passed"
    assert document["all_tensors"]["rejected"] == {} and document["divergence"]["evaluator"] == []
    code, document, lines = _parity(tmp_path, capsys, *arguments, "--no-exact")  # judged by tolerance alone
    assert code == 1 and document["verdict"] == "failed"
    assert document["outputs"]["y"]["evaluator"]["equal"] is True  # the output agrees
    assert document["all_tensors"]["rejected"] == {"evaluator": ["grown", "root"]}
    assert [entry["node"] for entry in document["divergence"]["evaluator"]] == ["grow"]
    assert "evaluator: 2 intermediate values outside tolerance: 'grown', 'root'." in lines
    assert lines[-1] == "FAILED: with every value marked (--all-tensors), values outside tolerance on evaluator."
    _nothing_outside_tolerance_under_passed(lines)


def test_constants_are_not_marked_for_they_cannot_differ(tmp_path):
    nodes = [
        h.make_node("Constant", [], ["one"], name="one", value_float=1.0),
        h.make_node("Constant", [], ["two"], name="two", value=numpy_helper.from_array(np.array(2, np.float32))),
        h.make_node("Add", ["one", "two"], ["three"], name="fold"),  # constant too, but computed: it may differ
        h.make_node("Add", ["x", "three"], ["sum"], name="add"),
        h.make_node("Neg", ["sum"], ["y"], name="neg"),
    ]
    graph = h.make_graph(
        nodes, "constants", [h.make_tensor_value_info("x", T.FLOAT, [2])], [h.make_tensor_value_info("y", T.FLOAT, [2])]
    )
    model = Model(tmp_path / "m.onnx", h.make_model(graph, opset_imports=[h.make_opsetid("", 17)], ir_version=10))
    every = marked(model)
    assert every.marked == {"three", "sum"} and every.output_names == ["y", "three", "sum"]


@pytest.mark.directml
def test_real_directml_fuses_tanh_gelu_unmarked_only_and_the_unmarked_difference_stands(tmp_path, capsys):
    require_directml()
    path = tmp_path / "gelu.onnx"
    onnx.save(_tanh_gelu(), path)
    np.savez(tmp_path / "x.npz", x=X[::10].copy())
    arguments = [str(path), "--inputs", str(tmp_path / "x.npz"), "--backends", "cpu,dml", "--reference", "cpu"]
    code, document, lines = _parity(tmp_path, capsys, *arguments)
    assert code == 1 and document["verdict"] == "failed"
    unmarked = document["outputs"]["y"]["dml"]
    assert unmarked["within_tolerance"] is False and unmarked["max_abs"] > APART  # FastGelu, computed with erf
    (changed,) = document["all_tensors"]["marking_changed"]
    assert (changed["output"], changed["backend"], changed["unmarked"]) == ("y", "dml", unmarked)
    assert changed["marked"]["within_tolerance"] is True  # every value marked: no fusion, the tanh formula
    assert document["all_tensors"]["rejected"] == {} and document["divergence"]["dml"] == []
    said = [line for line in lines if line.startswith("Output 'y' on dml: ")]
    assert said == [
        f"Output 'y' on dml: outside tolerance (max abs {unmarked['max_abs']:.3g}) as the model runs, "
        "within tolerance with every value marked: marking values as outputs stops fusions, so the "
        "unmarked run is the one that counts."
    ]
    assert lines[-1] == "FAILED: outputs outside tolerance and beyond float error on dml."
    SUMMARIES.append(
        f"parity --all-tensors of the tanh-GELU on real DirectML: unmarked (fused into FastGelu) max abs "
        f"{unmarked['max_abs']:.3g}, with every value marked {changed['marked']['max_abs']:.3g}"
    )


def _constants_model(tmp_path, count: int) -> tuple[str, str]:
    """x + 2 c_1, relu'd, + 2 c_2, relu'd, ...: each c_k a Constant, 2 c_k folded by ONNX Runtime (a constant the
    DirectML provider takes into its graph), each Add fused by the DirectML provider into the Relu after it; and
    beside it ``count`` shape computations on t, on ONNX Runtime's CPU provider."""
    nodes = [
        h.make_node("Shape", ["t"], ["shape"], name="shape"),
        h.make_node("Gather", ["shape", "zero"], ["length"], name="length", axis=0),
    ]
    value = "x"
    for k in range(count):
        constant = numpy_helper.from_array(np.full(4, k % 7 - 3, np.float32))
        nodes += [
            h.make_node("Constant", [], [f"c{k}"], name=f"constant{k}", value=constant),
            h.make_node("Mul", [f"c{k}", "two"], [f"doubled{k}"], name=f"double{k}"),
            h.make_node("Add", [value, f"doubled{k}"], [f"sum{k}"], name=f"add{k}"),
            h.make_node("Relu", [f"sum{k}"], [f"relu{k}"], name=f"relu{k}"),
            h.make_node("Add", ["length", f"off{k}"], [f"length{k}"], name=f"length{k}"),
        ]
        value = f"relu{k}"
    nodes.append(h.make_node("Neg", [value], ["y"], name="neg"))
    nodes.append(h.make_node("Concat", [f"length{k}" for k in range(count)], ["lengths"], name="lengths", axis=0))
    weights = [numpy_helper.from_array(np.array(2, np.float32), "two"), numpy_helper.from_array(np.array([0]), "zero")]
    weights += [numpy_helper.from_array(np.array([k + 1]), f"off{k}") for k in range(count)]
    graph = h.make_graph(
        nodes,
        "constants",
        [h.make_tensor_value_info("x", T.FLOAT, [3, 4]), h.make_tensor_value_info("t", T.FLOAT, ["m"])],
        [h.make_tensor_value_info("y", T.FLOAT, [3, 4]), h.make_tensor_value_info("lengths", T.INT64, [count])],
        weights,
    )
    path = tmp_path / "constants.onnx"
    onnx.save(h.make_model(graph, opset_imports=[h.make_opsetid("", 17)], ir_version=10), path)
    x = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
    np.savez(tmp_path / "x.npz", x=x, t=np.zeros(5, np.float32))
    return str(path), str(tmp_path / "x.npz")


@pytest.mark.directml
def test_real_directml_names_the_constants_it_holds_apart_from_the_values_it_fuses(tmp_path, capsys):
    require_directml()
    model, inputs = _constants_model(tmp_path, 3)
    code, document, _ = _parity(
        tmp_path, capsys, model, "--inputs", inputs, "--backends", "cpu,dml", "--reference", "cpu"
    )
    assert code == 0 and document["verdict"] == "passed"
    assert document["all_tensors"]["compared"] == 14  # doubled, sum, relu, length of each, shape, length: no c
    absent = document["all_tensors"]["absent"]["dml"]
    assert absent == {
        **{f"doubled{k}": worker.ABSENT_CONSTANT for k in range(3)},
        **{f"sum{k}": worker.ABSENT for k in range(3)},
    }
    # a constant that is an output of the model, also used on DirectML, fails the run: said as a constant
    proto = onnx.load(model)
    proto.graph.output.append(h.make_tensor_value_info("doubled1", T.FLOAT, [4]))
    onnx.save(proto, model)
    code, document, _ = _parity(
        tmp_path, capsys, model, "--inputs", inputs, "--backends", "cpu,dml", "--reference", "cpu"
    )
    assert code == 1
    assert document["backends"]["dml"]["reason"] == f"DirectMlError: output 'doubled1': {worker.ABSENT_CONSTANT}"


@pytest.mark.directml
def test_real_directml_reports_thousands_of_values_in_lines_people_read(tmp_path, capsys):
    """A report names the first few of a list and counts the rest, which the JSON report holds: on a 1,493-node model
    one line named 882 values not returned, in 19,433 characters, 878 of them Constants' called fused."""
    require_directml()
    count = 60
    model, inputs = _constants_model(tmp_path, count)
    markdown = tmp_path / "r.md"
    arguments = [model, "--inputs", inputs, "--backends", "cpu,dml", "--reference", "cpu", "--markdown", str(markdown)]
    code, document, lines = _parity(tmp_path, capsys, *arguments)
    assert code == 0 and document["verdict"] == "passed"
    # the versions of the backends are one line, as long whatever the model
    written = [line for line in markdown.read_text().splitlines() if not line.startswith("Versions: ")]
    assert max(map(len, lines)) <= 300 and max(map(len, written)) <= 300
    text = "\n".join(lines)
    assert not re.search(r"\bc\d+\b", text)  # no Constant's output, fused or not returned
    absent = document["all_tensors"]["absent"]["dml"]
    assert absent == {
        **{f"doubled{k}": worker.ABSENT_CONSTANT for k in range(count)},
        **{f"sum{k}": worker.ABSENT for k in range(count)},
    }
    assert f"dml could not return {2 * count} of them, left out:" in lines
    assert (
        f"  {count} values ('doubled0', 'doubled1', 'doubled2', 'doubled3', 'doubled4' and {count - 5} more, "
        f"all in --report): {worker.ABSENT_CONSTANT}"
    ) in lines
    assert f"  {count} values ('sum0', 'sum1', 'sum2', 'sum3', 'sum4' and {count - 5} more, all in --report): " in text
    on_cpu = document["backends"]["dml"]["placement"]["CPUExecutionProvider"]["names"]
    assert len(on_cpu) >= count and f"and {len(on_cpu) - 5} more, all in --report" in text
