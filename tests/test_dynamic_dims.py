"""Dims written as -1 are dynamic, as ONNX Runtime takes them: paddle2onnx and tf2onnx declare inputs such as
[-1,3,-1,-1]. Every command reads them so: --shape, --inputs, generated inputs, check's placement, convert and lower,
run, parity and reduce."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from conftest import real_placement, require_directml, run_model
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper

from onnx_gather.app.cli import main
from onnx_gather.core.sizes import dim_size
from onnx_gather.graphs.placement.check import check
from onnx_gather.graphs.placement.nodes import Why
from onnx_gather.graphs.ranks import symbolic_types
from onnx_gather.graphs.types import ValueType, value_types
from onnx_gather.runtime import backends
from onnx_gather.runtime.inputs import InputError, check_shapes, dynamic_hint, generate

CONV = ("conv2d_0.w_0", "conv2d_0.b_0")  # the Conv's weights, named as paddle2onnx names them


def _paddle_model(
    columns=(0, 2, 3), input_dims=(-1, 3, -1, -1), strides=(1, 1), ir_version=8, opset=11
) -> onnx.ModelProto:
    """As paddle2onnx writes a model: x [-1,3,-1,-1] through a Conv (its output declared [-1,4,-1,-1]), flattened
    to [batch, -1] by a Reshape whose shape comes from the input's Shape, then ``columns`` of it gathered; and the
    Conv output's height, from another Shape, as a second output."""
    rng = np.random.default_rng(0)
    weights = [
        numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), CONV[0]),
        numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), CONV[1]),
        *(
            numpy_helper.from_array(np.array(values, np.int64), name)
            for name, values in (("zero", [0]), ("two", [2]), ("minus_one", [-1]), ("columns", list(columns)))
        ),
    ]
    nodes = [
        h.make_node("Conv", ["x", *CONV], ["conv"], name="conv2d_0", pads=[1] * 4, strides=list(strides)),
        h.make_node("Shape", ["x"], ["shape"], name="shape_0"),
        h.make_node("Gather", ["shape", "zero"], ["batch"], name="gather_0", axis=0),
        h.make_node("Concat", ["batch", "minus_one"], ["target"], name="concat_0", axis=0),
        h.make_node("Reshape", ["conv", "target"], ["flat"], name="reshape_0"),
        h.make_node("Gather", ["flat", "columns"], ["y"], name="gather_1", axis=1),
        h.make_node("Shape", ["conv"], ["conv_shape"], name="shape_1"),
        h.make_node("Gather", ["conv_shape", "two"], ["height"], name="gather_2", axis=0),
    ]
    graph = h.make_graph(
        nodes,
        "paddle",
        [h.make_tensor_value_info("x", T.FLOAT, list(input_dims))],
        [h.make_tensor_value_info("y", T.FLOAT, [-1, -1]), h.make_tensor_value_info("height", T.INT64, [1])],
        weights,
        value_info=[h.make_tensor_value_info("conv", T.FLOAT, [-1, 4, -1, -1])],
    )
    model = h.make_model(
        graph, opset_imports=[h.make_opsetid("", opset)], ir_version=ir_version, producer_name="PaddlePaddle"
    )
    onnx.checker.check_model(model)
    return model


@pytest.fixture
def paddle(tmp_path):
    path = tmp_path / "paddle.onnx"
    onnx.save(_paddle_model(), path)
    return path


def _dim(**given) -> onnx.TensorShapeProto.Dimension:
    return onnx.TensorShapeProto.Dimension(**given)


def test_a_negative_dim_is_dynamic():
    assert dim_size(_dim(dim_value=3)) == 3
    assert dim_size(_dim(dim_value=0)) == 0  # an empty dim is a size
    assert dim_size(_dim(dim_value=-1)) is None
    assert dim_size(_dim(dim_value=-7)) is None
    assert dim_size(_dim(dim_param="batch")) == "batch"
    assert dim_size(_dim()) is None
    value = h.make_tensor_value_info("x", T.FLOAT, [-1, 3, "h", None, 0])
    assert ValueType.of(value) == ValueType(T.FLOAT, (None, 3, "h", None, 0))


@pytest.mark.parametrize(("ir_version", "opset"), [(8, 11), (9, 15), (10, 17)])
def test_inference_takes_a_minus_one_for_unknown_not_for_a_size(ir_version, opset):
    # ONNX's own shape inference computes with -1 as a size: a Conv of stride 2 over it gives a height of 0.
    model = _paddle_model(strides=(2, 2), ir_version=ir_version, opset=opset)
    del model.graph.value_info[:]
    onnx_dims = onnx.shape_inference.infer_shapes(model).graph.value_info[0].type.tensor_type.shape.dim
    assert [d.dim_value for d in onnx_dims] == [-1, 4, 0, 0]
    for propagate in (False, True):
        types = value_types(model, propagate)[0]
        assert types["x"].dims == (None, 3, None, None)
        conv = types["conv"].dims
        assert conv[1] == 4 and not any(isinstance(d, int) for d in (conv[0], *conv[2:])), conv
    # ONNX Runtime's symbolic inference fails on a -1; on the dims as unknown it tells the Reshape's rank.
    assert symbolic_types(model, ["flat"])["flat"].rank == 2


def test_check_places_the_shape_computations_of_a_dynamic_input_not_folded(paddle, tmp_path, capsys):
    verdicts = {verdict.node: verdict for verdict in check(onnx.load(paddle))}
    # Each Shape is of a dynamic shape: the DirectML provider's Shape kernel runs it (its output in CPU memory), and
    # what computes on its output goes to the CPU provider; nothing is constant-folded (real DirectML places them
    # so: test_check_places_the_dynamic_model_where_real_directml_puts_it).
    assert {name: (v.runs_on, v.cause) for name, v in verdicts.items()} == {
        "conv2d_0": ("DirectML", None),
        "shape_0": ("DirectML", None),
        "gather_0": ("CPU", Why.CPU_PREFERRED),
        "concat_0": ("CPU", Why.CPU_PREFERRED),
        "reshape_0": ("DirectML", None),
        "gather_1": ("DirectML", None),
        "shape_1": ("DirectML", None),
        "gather_2": ("CPU", Why.CPU_PREFERRED),
    }
    inputs = tmp_path / "in.npz"
    np.savez(inputs, x=np.ones((2, 3, 8, 8), np.float32))
    for given in ([], ["--shape", "x:1x3x8x8"], ["--inputs", str(inputs)]):
        assert main(["check", str(paddle), *given]) == 0, given
        printed = capsys.readouterr().out
        assert "8 nodes at DirectML feature level 4.1: 5 on DirectML, 3 on the CPU provider (3 shape" in printed
        assert "folded" not in printed


def test_shapes_and_inputs_fill_the_dynamic_dims_and_keep_the_fixed_one(paddle, tmp_path, capsys):
    model = onnx.load(paddle)
    check_shapes(model, {"x": (2, 3, 16, 8)})
    with pytest.raises(InputError, match=r"^--shape x:1x4x8x8: dimension 1 is 3 in the model$"):
        check_shapes(model, {"x": (1, 4, 8, 8)})
    inputs = tmp_path / "in.npz"
    np.savez(inputs, x=np.ones((1, 4, 8, 8), np.float32))
    assert main(["run", str(paddle), "--backend", "cpu", "--inputs", str(inputs)]) == 2
    refused = "--inputs array 'x' has shape 1x4x8x8 where the model takes <?>x3x<?>x<?>"
    assert capsys.readouterr().err == f"onnx-gather: error: {refused}\n"


def test_a_minus_one_is_generated_as_1_with_the_warning_of_an_unnamed_dim():
    model = _paddle_model()
    assert generate(model)["x"].shape == (1, 3, 1, 1)
    assert generate(model, {"x": (2, 3, 5, 7)})["x"].shape == (2, 3, 5, 7)
    unnamed = _paddle_model(input_dims=(None, 3, None, None))
    assert (
        dynamic_hint(model)
        == dynamic_hint(unnamed)
        == ("dynamic dims were generated as 1 (x [?,3,?,?] as 1x3x1x1): give real sizes with --shape x:<?>x3x<?>x<?>")
    )


def test_convert_and_lower_round_trip(paddle, tmp_path, capsys):
    converted, lowered = tmp_path / "paddle.dml.onnx", tmp_path / "paddle.lowered.onnx"
    assert main(["convert", str(paddle), "-o", str(converted), "--strict"]) == 0
    assert "Converted 3 of 3 gathers." in capsys.readouterr().out
    assert main(["lower", str(converted), "-o", str(lowered)]) == 0
    assert "Lowered 3 of 3 gathers." in capsys.readouterr().out
    for shape in ((1, 3, 1, 1), (2, 3, 8, 6)):
        feeds = {"x": np.random.default_rng(1).standard_normal(shape).astype(np.float32)}
        expected = run_model(onnx.load(paddle), feeds)
        for model, custom_ops in ((converted, True), (lowered, False)):
            actual = run_model(onnx.load(model), feeds, custom_ops)
            for a, e in zip(actual, expected, strict=True):
                np.testing.assert_array_equal(a, e)


@pytest.mark.parametrize("backend", ["pyop", "cpu", "lowered"])
def test_run_generates_the_dynamic_dims(paddle, capsys, backend):
    assert main(["run", str(paddle), "--backend", backend]) == 0
    assert "FLOAT 1x3x1x1" in capsys.readouterr().out
    assert main(["run", str(paddle), "--backend", backend, "--shape", "x:2x3x8x8"]) == 0
    assert "output y                    FLOAT 2x3" in capsys.readouterr().out


def test_parity_passes_on_generated_inputs(paddle, tmp_path, capsys):
    report = tmp_path / "report.json"
    assert main(["parity", str(paddle), "--backends", "pyop,cpu,lowered", "--report", str(report)]) == 0
    assert "PASSED: every output of cpu, lowered is within tolerance of the reference pyop." in capsys.readouterr().out
    document = json.loads(report.read_text())
    assert document["verdict"] == "passed"
    assert document["warning"].startswith("dynamic dims were generated as 1 (x [?,3,?,?] as 1x3x1x1)")
    assert main(["parity", str(paddle), "--backends", "pyop,cpu,lowered", "--shape", "x:2x3x8x8"]) == 0


def test_reduce_cuts_a_model_with_dynamic_dims_down_to_the_failing_gather(tmp_path, capsys):
    path, window = tmp_path / "paddle.onnx", tmp_path / "window.onnx"
    onnx.save(_paddle_model(columns=(0, 2, 5)), path)  # generated as 1x3x1x1, the flattened Conv has 4 columns
    assert main(["reduce", str(path), "--backend", "cpu", "-o", str(window)]) == 0
    assert "8 nodes cut down to 1 that still show it on cpu" in capsys.readouterr().out
    assert [node.name for node in onnx.load(window).graph.node] == ["gather_1"]


@pytest.mark.directml
def test_check_places_the_dynamic_model_where_real_directml_puts_it(paddle):
    require_directml(wine=True)
    model = backends.Model.read(paddle)
    real, listed = real_placement(model)
    assert listed
    for verdict in check(model.proto):
        assert real[verdict.node] == {verdict.runs_on}, (verdict, real[verdict.node])
