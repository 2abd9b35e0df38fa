"""The exact yardstick (``runtime.exact``, ``graphs.widen``) and the verdicts it gives (``runtime.comparison``):
float32 rounding passes as within float error, a behaviour of its own does not, the reference can be the less
accurate, and a yardstick far from every float result is not used."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from conftest import SUMMARIES, require_directml
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper

from onnx_gather.app.cli import main
from onnx_gather.graphs.widen import widen
from onnx_gather.runtime import backends, exact
from onnx_gather.runtime.comparison import Tolerance, compare, exactness, faulty

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
import rounding_models


def _model(nodes, inputs, outputs, weights=(), opset=17):
    graph = h.make_graph(nodes, "m", inputs, outputs, list(weights))
    return h.make_model(graph, opset_imports=[h.make_opsetid("", opset)], ir_version=10)


def test_widening_makes_every_float_double_and_keeps_what_takes_no_double():
    scales = numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "scales")
    half = numpy_helper.from_array(np.array([0.5], np.float16), "half")
    nodes = [
        h.make_node("Constant", [], ["third"], value_float=1 / 3),
        h.make_node("Cast", ["half"], ["h32"], to=T.FLOAT),
        h.make_node("Mul", ["x", "third"], ["a"]),
        h.make_node("Add", ["a", "h32"], ["b"]),
        h.make_node("Resize", ["b", "", "scales"], ["y"], name="resize", mode="nearest"),
    ]
    model = _model(
        nodes,
        [h.make_tensor_value_info("x", T.FLOAT, [1, 1, 2, 2])],
        [h.make_tensor_value_info("y", T.FLOAT, [1, 1, 4, 4])],
        [scales, half],
    )
    widened = widen(model)
    assert widened.kept == {"resize": "Resize takes no float64 scales"}
    graph = widened.model.graph
    assert graph.input[0].type.tensor_type.elem_type == T.DOUBLE == graph.output[0].type.tensor_type.elem_type
    assert {t.name: t.data_type for t in graph.initializer} == {"scales": T.DOUBLE, "half": T.DOUBLE}
    (cast,) = [n for n in graph.node if n.op_type == "Cast" and n.output[0] == "h32"]
    assert cast.attribute[0].i == T.DOUBLE
    (scales_cast,) = [n for n in graph.node if n.op_type == "Cast" and n.input[0] == "scales"]
    assert scales_cast.attribute[0].i == T.FLOAT  # Resize's scales must be FLOAT: cast back before it
    constant = numpy_helper.to_array(graph.node[0].attribute[0].t)
    assert constant.dtype == np.float64 and constant == np.float32(1 / 3)  # value_float: DOUBLE, the model's value
    x = np.array([[[[1, 2], [3, 4]]]], np.float32)
    outputs, routes = exact.float64_outputs(model, {"x": x})
    expected = np.repeat(np.repeat(x.astype(np.float64) * np.float32(1 / 3) + 0.5, 2, axis=2), 2, axis=3)
    assert outputs["y"].dtype == np.float64 and np.array_equal(outputs["y"], expected)
    assert routes.ops[exact.EVALUATOR] == {"Resize": 1}  # ONNX Runtime's Resize takes no DOUBLE


def test_the_yardstick_computes_in_float64_where_float32_cannot():
    # (x + 1e8) - 1e8 loses x's fraction in float32; in float64 it stays; Conv and Erf go to the evaluator.
    big = numpy_helper.from_array(np.array([1e8], np.float32), "big")
    w = numpy_helper.from_array(np.ones((1, 1, 3), np.float32), "w")
    nodes = [
        h.make_node("Add", ["x", "big"], ["up"]),
        h.make_node("Sub", ["up", "big"], ["back"]),
        h.make_node("Conv", ["x", "w"], ["summed"], pads=[1, 1]),
        h.make_node("Erf", ["summed"], ["erf"]),
    ]
    model = _model(
        nodes,
        [h.make_tensor_value_info("x", T.FLOAT, [1, 1, 4])],
        [h.make_tensor_value_info(n, T.FLOAT, [1, 1, 4]) for n in ("back", "erf")],
        [big, w],
    )
    x = np.array([[[0.25, 0.125, 0.3, -0.7]]], np.float32)
    outputs, routes = exact.float64_outputs(model, {"x": x})
    wide = x.astype(np.float64)
    assert np.array_equal(outputs["back"], (wide + 1e8) - 1e8)  # IEEE double: exactly what numpy computes
    summed = np.convolve(wide[0, 0], np.ones(3), mode="same")
    assert np.abs(outputs["erf"][0, 0] - [math.erf(v) for v in summed]).max() < 1e-15  # onnx's own Erf: float32
    assert routes.ops == {exact.ONNXRUNTIME: {"Add": 1, "Sub": 1}, exact.EVALUATOR: {"Conv": 1, "Erf": 1}}
    assert routes.stretches == 2


def _judged(reference, actual, wide):
    tolerance = Tolerance()
    comparison = compare(reference, actual, tolerance)
    fault = faulty([reference, actual], wide, tolerance)
    return comparison, exactness(reference, actual, wide, tolerance, fault)


def test_the_rule_passes_rounding_fails_behaviour_and_names_the_less_accurate():
    wide = np.linspace(-1, 1, 101)
    rounded = (wide + 3e-5).astype(np.float32)  # outside 1e-5 of each other, both float32 drift
    drifted = (wide - 5e-5).astype(np.float32)
    comparison, found = _judged(rounded, drifted, wide)
    assert not comparison.within_tolerance and found.within_float_error and not found.reference_less_accurate
    behaving = drifted.copy()
    behaving[50] = 1.0  # exact 0: a Pow(0, 0) of its own, far beyond the reference's rounding
    comparison, found = _judged(rounded, behaving, wide)
    assert not found.within_float_error and found.size > 1000  # 1 where float error allows 1.3e-4
    comparison, found = _judged(rounded, wide.astype(np.float32), wide)  # the backend is the nearer
    assert found.reference_less_accurate and found.within_float_error
    nonfinite = drifted.copy()
    nonfinite[3] = np.inf
    assert _judged(rounded, nonfinite, wide)[1].from_exact == np.inf  # not rounding


def test_a_yardstick_far_from_every_result_that_agree_is_not_used():
    wide = np.linspace(0, 10, 11)
    reference = wide.astype(np.float32)
    actual = reference + np.float32(2e-5)
    assert _judged(reference, actual, wide)[1].within_float_error  # rounding as the yardstick sees it
    wrong = wide + 1.0  # a yardstick a whole unit off both, which agree within 2e-5
    comparison, found = _judged(reference, actual, wrong)
    assert found.fault and not found.within_float_error and not comparison.accepted()


@pytest.fixture(scope="module")
def rounding(tmp_path_factory):
    folder = tmp_path_factory.mktemp("rounding")
    paths = {}
    for name, build in rounding_models.BUILDERS.items():
        model, feeds = build()
        onnx.save(model, folder / f"{name}.onnx")
        np.savez(folder / f"{name}.npz", **feeds)
        paths[name] = (folder / f"{name}.onnx", folder / f"{name}.npz")
    return paths


def _parity(rounding, name, capsys, *arguments):
    path, inputs = rounding[name]
    report = path.with_suffix(".json")
    code = main(["parity", str(path), "--inputs", str(inputs), "--report", str(report), *arguments])
    return code, json.loads(report.read_text()), capsys.readouterr().out


def _drift_only(rounding, name, capsys, backend):
    code, document, printed = _parity(rounding, name, capsys, "--backends", backend, "--reference", "cpu")
    (output,) = document["outputs"]
    comparison = document["outputs"][output][backend]
    assert comparison["within_tolerance"] is False  # judged by tolerance alone, it fails
    assert code == 0 and document["verdict"] == "passed", printed
    assert comparison["exact"]["within_float_error"] is True
    assert f"{output} {backend} within float error" in " ".join(printed.split())  # the table says why
    lines = printed.splitlines()
    assert max(map(len, lines)) < 300
    code, document, _ = _parity(rounding, name, capsys, "--backends", backend, "--reference", "cpu", "--no-exact")
    assert code == 1 and document["verdict"] == "failed" and "exact" not in document
    return comparison["exact"]


@pytest.mark.openvino
@pytest.mark.parametrize("name", list(rounding_models.BUILDERS))
def test_openvino_apart_from_the_cpu_by_rounding_alone_passes(rounding, name, capsys):
    found = _drift_only(rounding, name, capsys, "openvino")
    if name == "global_mean":  # the CPU's float32 mean is 3.7e-3 off; OpenVINO's is not
        assert found["reference_less_accurate"] is True


@pytest.mark.directml
@pytest.mark.parametrize("name", list(rounding_models.BUILDERS))
def test_real_directml_apart_from_the_cpu_by_rounding_alone_passes_and_has_nothing_to_reduce(
    rounding, name, capsys, tmp_path
):
    require_directml()
    found = _drift_only(rounding, name, capsys, "dml")
    path, inputs = rounding[name]
    out = tmp_path / "small.onnx"
    arguments = ["reduce", str(path), "--backend", "dml", "--reference", "cpu", "--inputs", str(inputs), "-o", str(out)]
    assert main(arguments) == 1 and not out.exists()
    printed = capsys.readouterr().out
    assert "outside tolerance by float error alone" in printed and "nothing to reduce" in printed
    SUMMARIES.append(
        f"{name} on real DirectML: {found['from_exact']:.3g} from float64, the CPU {found['reference_from_exact']:.3g}"
        f" (scale {found['scale']:.3g}): within float error; reduce: nothing to reduce"
    )


def test_the_exact_backend_runs_alone_and_says_what_it_cannot_compute(tmp_path, capsys):
    # onnx's reference evaluator has no DequantizeLinear before opset 19, and ONNX Runtime's takes no DOUBLE scale:
    # the yardstick keeps that node in FLOAT, on ONNX Runtime.
    nodes = [h.make_node("DequantizeLinear", ["q", "s"], ["y"], name="dq")]
    model = _model(
        nodes,
        [h.make_tensor_value_info("q", T.INT8, [3])],
        [h.make_tensor_value_info("y", T.FLOAT, [3])],
        [numpy_helper.from_array(np.array(0.1, np.float32), "s")],
    )
    path = tmp_path / "dq.onnx"
    onnx.save(model, path)
    outcome = backends.create("exact").run(backends.Model.read(path), {"q": np.array([1, -2, 3], np.int8)})
    assert outcome.routes.kept == {"dq": "DequantizeLinear takes no float64 x_scale, y"}
    assert outcome.outputs["y"].dtype == np.float64
    assert np.array_equal(outcome.outputs["y"], np.array([1, -2, 3], np.float32) * np.float32(0.1))
    saved = tmp_path / "y.npz"
    assert main(["run", str(path), "--backend", "exact", "--shape", "q:3", "--outputs", str(saved)]) == 0
    assert np.load(saved)["y"].dtype == np.float64  # run takes the yardstick as a backend of its own
    capsys.readouterr()
    assert main(["parity", str(path), "--backends", "exact"]) == 2
    assert "exact is the float64 yardstick parity runs beside the backends" in capsys.readouterr().err


def _mel_then_pow(tmp_path) -> tuple[Path, Path]:
    """The log-mel front end (its outputs part by rounding alone), then Pow(z, 0) added: z 0 in one element, where
    DirectML gives 0 ** 0 = 0 and the CPU 1."""
    model, feeds = rounding_models.mel_frontend()
    graph = model.graph
    (output,) = graph.output
    zero = numpy_helper.from_array(np.array(0, np.float32), "zero")
    graph.initializer.append(zero)
    graph.input.append(h.make_tensor_value_info("z", T.FLOAT, [1]))
    graph.node.extend(
        [
            h.make_node("Pow", ["z", "zero"], ["ones"], name="zero_power"),
            h.make_node("Add", [output.name, "ones"], ["y"], name="shift"),
        ]
    )
    del graph.output[:]
    graph.output.append(h.make_tensor_value_info("y", T.FLOAT, None))
    path = tmp_path / "mel_pow.onnx"
    onnx.save(model, path)
    np.savez(tmp_path / "mel_pow.npz", **feeds, z=np.zeros(1, np.float32))
    return path, tmp_path / "mel_pow.npz"


@pytest.mark.directml
def test_all_tensors_names_the_node_that_leaves_float_error_not_the_drift_before_it(tmp_path):
    # Judged by tolerance alone, the STFT's Conv is named first (its float32 sums part from the CPU's); against the
    # exact values it is within float error, and the first node that leaves it is the Pow.
    require_directml()
    path, inputs = _mel_then_pow(tmp_path)
    report = tmp_path / "r.json"
    arguments = ["parity", str(path), "--inputs", str(inputs), "--backends", "dml", "--reference", "cpu"]
    assert main([*arguments, "--all-tensors", "--report", str(report)]) == 1
    document = json.loads(report.read_text())
    assert [(d["node"], d["op_type"]) for d in document["divergence"]["dml"]] == [("zero_power", "Pow")]
    assert document["all_tensors"]["rejected"] == {"dml": ["ones"]}  # the Pow's output; the drift before it passes
    assert main([*arguments, "--all-tensors", "--no-exact", "--report", str(report)]) == 1
    first = json.loads(report.read_text())["divergence"]["dml"][0]
    assert first["op_type"] == "Conv"  # what tolerance alone blames
