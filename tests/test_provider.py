"""Where ONNX Runtime's DirectML provider places gathers (onnx_gather.graphs.placement.nodes), and check and
convert built on it; held against the placement real DirectML reports where it is set up
(tests/test_real_models.py does the same on every third-party model of the tests)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from conftest import real_placement, require_directml
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper

from onnx_gather.app.cli import main
from onnx_gather.directml import worker
from onnx_gather.graphs.convert import convert
from onnx_gather.graphs.placement.check import check
from onnx_gather.graphs.placement.gather import cpu_reason
from onnx_gather.graphs.placement.nodes import Placed, Why, place_nodes
from onnx_gather.runtime import backends


def _model(float16: bool = False) -> onnx.ModelProto:
    """Zeros of shape [n, 2] for x [n, 4] by a shape computation (Shape -> Gather -> Unsqueeze -> Concat ->
    ConstantOfShape; into a Reshape, ONNX Runtime's ReshapeFusion would replace it by a constant shape), an embedding
    lookup on the ids input, and a gather of two constants (a small table at a constant index)."""
    data = T.FLOAT16 if float16 else T.FLOAT
    dtype = np.float16 if float16 else np.float32
    initializers = [
        numpy_helper.from_array(np.array(0, np.int64), "zero"),
        numpy_helper.from_array(np.array([0], np.int64), "axes"),
        numpy_helper.from_array(np.array([2], np.int64), "tail"),
        numpy_helper.from_array(np.arange(40, dtype=dtype).reshape(10, 4), "table"),
        numpy_helper.from_array(np.array([1.0, 2.0, 3.0], dtype), "small"),
        numpy_helper.from_array(np.array([2], np.int64), "two"),
    ]
    nodes = [
        h.make_node("Shape", ["x"], ["shape"], name="shape"),
        h.make_node("Gather", ["shape", "zero"], ["rows"], name="batch_size", axis=0),
        h.make_node("Unsqueeze", ["rows", "axes"], ["rows_1d"], name="unsqueeze"),
        h.make_node("Concat", ["rows_1d", "tail"], ["new_shape"], name="concat", axis=0),
        h.make_node(
            "ConstantOfShape", ["new_shape"], ["y"], name="zeros", value=numpy_helper.from_array(np.zeros(1, dtype))
        ),
        h.make_node("Gather", ["table", "ids"], ["vectors"], name="embedding", axis=0),
        h.make_node("Gather", ["small", "two"], ["picked"], name="constant_pick", axis=0),
        h.make_node("Mul", ["vectors", "picked"], ["scaled"], name="scale"),
    ]
    graph = h.make_graph(
        nodes,
        "placement",
        [h.make_tensor_value_info("x", data, ["n", 4]), h.make_tensor_value_info("ids", T.INT64, ["n"])],
        [h.make_tensor_value_info("y", data, None), h.make_tensor_value_info("scaled", data, None)],
        initializer=initializers,
    )
    return h.make_model(graph, opset_imports=[h.make_opsetid("", 17)], ir_version=8)


def test_a_shape_computation_and_a_gather_of_constants_run_on_the_cpu_the_lookup_on_directml():
    verdicts = {v.node: v for v in check(_model())}
    assert verdicts["batch_size"].status == "CPU" and verdicts["batch_size"].reason.startswith("a shape computation")
    assert verdicts["constant_pick"].status == "CPU"
    assert verdicts["constant_pick"].reason == cpu_reason(Why.FOLDED)
    assert verdicts["embedding"].status == "DirectML"


def _sizes(data: int) -> onnx.ModelProto:
    """Shape -> Cast to ``data`` -> Add of a small constant: each input in CPU memory or small."""
    dtype = np.float16 if data == T.FLOAT16 else np.float32
    graph = h.make_graph(
        [
            h.make_node("Shape", ["x"], ["shape"], name="shape"),
            h.make_node("Cast", ["shape"], ["sizes"], name="cast", to=data),
            h.make_node("Add", ["sizes", "one"], ["y"], name="add"),
        ],
        "sizes",
        [h.make_tensor_value_info("x", T.FLOAT, ["n", 4])],
        [h.make_tensor_value_info("y", data, [2])],
        initializer=[numpy_helper.from_array(np.ones(2, dtype), "one")],
    )
    return h.make_model(graph, opset_imports=[h.make_opsetid("", 17)], ir_version=8)


SIZES = [(T.FLOAT, "CPU"), (T.FLOAT16, "DirectML")]


@pytest.mark.parametrize(("data", "where"), SIZES)
def test_float16_keeps_a_node_off_the_cpu_provider(data, where):
    # FLOAT16 keeps the Add on DirectML; the Cast reads INT64, so it goes to the CPU provider either way.
    assert [p.provider for p in place_nodes(_sizes(data))["graph 'sizes'"]] == ["DirectML", "CPU", where]


@pytest.mark.directml
@pytest.mark.parametrize(("data", "where"), SIZES)
def test_real_directml_keeps_float16_off_the_cpu_provider(tmp_path, data, where):
    require_directml(wine=True)
    path = tmp_path / "sizes.onnx"
    onnx.save(_sizes(data), path)
    loaded = worker.shared().load(path, fallback=True, fuse=False)
    worker.shared().free(loaded)
    assert "Add (add)" in loaded.placement[{"CPU": "CPUExecutionProvider", "DirectML": "DmlExecutionProvider"}[where]]
    assert "Cast (cast)" in loaded.placement["CPUExecutionProvider"]


def test_the_provider_has_no_kernel_for_string_data():
    graph = h.make_graph(
        [h.make_node("Gather", ["words", "ids"], ["picked"], name="pick")],
        "strings",
        [h.make_tensor_value_info("words", T.STRING, [5]), h.make_tensor_value_info("ids", T.INT64, [2])],
        [h.make_tensor_value_info("picked", T.STRING, [2])],
    )
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)], ir_version=8)
    assert place_nodes(model)["graph 'strings'"] == [Placed("CPU", Why.NO_KERNEL)]
    assert check(model)[0].status == "CPU"  # with the reason check gives STRING gathers


def test_convert_keep_cpu_gathers_keeps_the_shape_computation_and_the_folded_gather(tmp_path, capsys):
    _, report = convert(_model(), keep_cpu_gathers=True)
    assert [c.node for c in report.changed] == ["embedding"]
    kept = {c.node: c.reason for c in report.left}
    assert kept["batch_size"].startswith("kept standard, as the DirectML provider keeps it: a shape computation")
    assert kept["constant_pick"].startswith("kept standard, as the DirectML provider keeps it: its inputs are const")
    _, everything = convert(_model())
    assert not everything.left  # without the flag all three are converted
    path = tmp_path / "placement.onnx"
    onnx.save(_model(), path)
    assert main(["check", str(path)]) == 0
    printed = capsys.readouterr().out
    assert "CPU      node 'batch_size' (Gather, graph 'placement'): a shape computation" in printed
    assert "3 gathers at DirectML feature level 4.1: 1 on DirectML, 2 on the CPU provider." in printed


@pytest.mark.directml
def test_real_directml_places_the_gathers_where_check_says(tmp_path):
    require_directml(wine=True)
    path = tmp_path / "placement.onnx"
    onnx.save(_model(), path)
    loaded = worker.shared().load(path, fallback=True, fuse=False)
    worker.shared().free(loaded)
    real = {
        entry.partition(" (")[2].removesuffix(")"): where
        for where, entries in loaded.placement.items()
        for entry in entries
    }
    assert real["batch_size"] == "CPUExecutionProvider" and real["embedding"] == "DmlExecutionProvider"
    assert "constant_pick" not in real  # folded when the session was created
    # and it runs: the dml backend's outputs equal the CPU's
    feeds = {"x": np.arange(12, dtype=np.float32).reshape(3, 4), "ids": np.array([0, 9, 4])}
    model = backends.Model(path, onnx.load(path))
    expected = backends.create("cpu").run(model, feeds).outputs
    got = backends.create("dml").run(model, feeds).outputs
    assert all(expected[name].tobytes() == got[name].tobytes() for name in expected)


def _padded_then_measured() -> onnx.ModelProto:
    """A Pad whose pads are a Cast of a Constant, then a shape computation on its output's Shape for a Reshape: ONNX's
    shape inference alone cannot tell the Pad's output dims; ONNX Runtime folds the Cast, then knows them, then folds
    the shape computation too, which would otherwise run on its CPU provider (as akiki-vad's STFT front end)."""
    nodes = [
        h.make_node("Constant", [], ["pads32"], value=numpy_helper.from_array(np.array([0, 1, 0, 1], np.int32))),
        h.make_node("Cast", ["pads32"], ["pads"], to=T.INT64, name="cast_pads"),
        h.make_node("Pad", ["x", "pads"], ["padded"], name="pad"),
        h.make_node("Shape", ["padded"], ["shape"], name="measure"),
        h.make_node("Gather", ["shape", "one"], ["width"], name="width", axis=0),
        h.make_node("Concat", ["minus_one", "width"], ["target"], name="target", axis=0),
        h.make_node("Reshape", ["padded", "target"], ["y"], name="reshape"),
    ]
    weights = [
        numpy_helper.from_array(np.array([1], np.int64), "one"),
        numpy_helper.from_array(np.array([-1], np.int64), "minus_one"),
    ]
    io = [h.make_tensor_value_info("x", T.FLOAT, [1, 300]), h.make_tensor_value_info("y", T.FLOAT, None)]
    graph = h.make_graph(nodes, "padded", io[:1], io[1:], weights)
    return h.make_model(graph, opset_imports=[h.make_opsetid("", 17)], ir_version=8)


def test_a_shape_onnx_runtime_knows_only_after_folding_is_folded_too():
    verdicts = {v.node: v for v in check(_padded_then_measured())}
    assert [verdicts[n].cause for n in ("cast_pads", "measure", "width", "target")] == [Why.FOLDED] * 4
    assert verdicts["pad"].runs_on == verdicts["reshape"].runs_on == "DirectML"


@pytest.mark.directml
def test_real_directml_folds_a_shape_known_only_after_folding(tmp_path):
    # Unfolded, the Gather and Concat would be shape computations on the CPU provider, and ONNX Runtime would list
    # the nodes of both providers: it lists none, every node it keeps being on DirectML
    require_directml(wine=True)
    path = tmp_path / "padded.onnx"
    onnx.save(_padded_then_measured(), path)
    _, listed = real_placement(backends.Model.read(path))
    assert not listed
