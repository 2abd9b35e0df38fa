"""to_dml and to_onnx on hand-made graphs: where gathers hide, what is kept, what is left and why."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import onnx
import pytest
from conftest import assert_all_identical, assert_identical, run_model
from onnx import TensorProto as T
from onnx import helper as h

import onnx_gather
from onnx_gather.conformance import provider_door as conformance
from onnx_gather.core import semantics
from onnx_gather.core.contract import DOMAIN
from onnx_gather.graphs.analysis import Analysis
from onnx_gather.graphs.convert import convert
from onnx_gather.graphs.dml_plan import DmlPlan
from onnx_gather.graphs.lowering.lower import lower
from onnx_gather.graphs.placement.check import check
from onnx_gather.graphs.placement.nodes import Where
from onnx_gather.graphs.plumbing import bodies
from onnx_gather.runtime.observe import Observation

RNG = np.random.default_rng(7)


def _model(nodes, inputs, outputs, opset=17, functions=(), initializers=()):
    graph = h.make_graph(nodes, "test", inputs, outputs, initializer=list(initializers))
    imports = [h.make_opsetid("", opset)] + [h.make_opsetid(f.domain, 1) for f in functions]
    return h.make_model(graph, opset_imports=imports, ir_version=8, functions=list(functions))


def _ops(model):
    return sorted(f"{n.domain}::{n.op_type}" for body in bodies(model) for n in body.nodes)


def _dml_count(model):
    return sum(n.domain == DOMAIN for body in bodies(model) for n in body.nodes)


def _assert_same_everywhere(model, feeds, expected_dml, canonical_nans=False):
    """Converted with the custom ops and lowered in plain ONNX Runtime, the outputs equal the original's."""
    original = run_model(model, feeds)
    converted = onnx_gather.to_dml(model)
    onnx.checker.check_model(converted)
    assert _dml_count(converted) == expected_dml
    assert_all_identical(run_model(converted, feeds, custom_ops=True), original, canonical_nans)
    lowered = onnx_gather.to_onnx(converted)
    onnx.checker.check_model(lowered)
    assert _dml_count(lowered) == 0
    assert_all_identical(run_model(lowered, feeds), original, canonical_nans)
    return converted


def _branch(name, op, data, indices, axis, out_shape, elem=T.FLOAT):
    node = h.make_node(op, [data, indices], [f"{name}_out"], name=f"{name}_gather", axis=axis)
    return h.make_graph([node], name, [], [h.make_tensor_value_info(f"{name}_out", elem, out_shape)])


def test_gathers_in_both_branches_of_an_if_nested_three_deep():
    inner_then = _branch("inner_then", "Gather", "x", "i", 1, [3, 2])
    inner_else = _branch("inner_else", "GatherElements", "x", "j", 1, [3, 4])
    inner_if = h.make_node("If", ["c2"], ["mid_out"], name="inner_if", then_branch=inner_then, else_branch=inner_else)
    middle = h.make_graph([inner_if], "middle", [], [h.make_tensor_value_info("mid_out", T.FLOAT, [None, None])])
    other = _branch("other", "Gather", "x", "i", 0, [2, 4])
    outer_if = h.make_node("If", ["c1"], ["y"], name="outer_if", then_branch=middle, else_branch=other)
    model = _model(
        [outer_if],
        [
            h.make_tensor_value_info("x", T.FLOAT, [3, 4]),
            h.make_tensor_value_info("i", T.INT64, [2]),
            h.make_tensor_value_info("j", T.INT64, [3, 4]),
            h.make_tensor_value_info("c1", T.BOOL, []),
            h.make_tensor_value_info("c2", T.BOOL, []),
        ],
        [h.make_tensor_value_info("y", T.FLOAT, [None, None])],
    )
    for c1, c2 in ((True, True), (True, False), (False, True)):
        feeds = {
            "x": RNG.random((3, 4), np.float32),
            "i": np.array([2, -1]),
            "j": RNG.integers(-4, 4, (3, 4)),
            "c1": np.array(c1),
            "c2": np.array(c2),
        }
        _assert_same_everywhere(model, feeds, expected_dml=3)


def test_gather_in_a_loop_body_reading_an_outer_value():
    body = h.make_graph(
        [
            h.make_node("Gather", ["table", "ids"], ["row"], name="loop_gather", axis=0),
            h.make_node("Identity", ["cond_in"], ["cond_out"]),
        ],
        "body",
        [h.make_tensor_value_info("iter", T.INT64, []), h.make_tensor_value_info("cond_in", T.BOOL, [])],
        [h.make_tensor_value_info("cond_out", T.BOOL, []), h.make_tensor_value_info("row", T.FLOAT, [2, 5])],
    )
    loop = h.make_node("Loop", ["trips", ""], ["rows"], name="loop", body=body)
    model = _model(
        [loop],
        [
            h.make_tensor_value_info("table", T.FLOAT, ["vocab", 5]),
            h.make_tensor_value_info("ids", T.INT32, [2]),
            h.make_tensor_value_info("trips", T.INT64, []),
        ],
        [h.make_tensor_value_info("rows", T.FLOAT, [None, 2, 5])],
    )
    feeds = {"table": RNG.random((6, 5), np.float32), "ids": np.array([5, -6], np.int32), "trips": np.array(3)}
    _assert_same_everywhere(model, feeds, expected_dml=1)


def test_gather_elements_in_a_scan_body():
    body = h.make_graph(
        [h.make_node("GatherElements", ["row", "picks"], ["picked"], name="scan_gather", axis=0)],
        "scan_body",
        [h.make_tensor_value_info("row", T.INT16, [4]), h.make_tensor_value_info("picks", T.INT64, [2])],
        [h.make_tensor_value_info("picked", T.INT16, [2])],
    )
    scan = h.make_node("Scan", ["rows", "all_picks"], ["out"], name="scan", body=body, num_scan_inputs=2)
    model = _model(
        [scan],
        [h.make_tensor_value_info("rows", T.INT16, [3, 4]), h.make_tensor_value_info("all_picks", T.INT64, [3, 2])],
        [h.make_tensor_value_info("out", T.INT16, [3, 2])],
    )
    feeds = {"rows": RNG.integers(-100, 100, (3, 4)).astype(np.int16), "all_picks": RNG.integers(-4, 4, (3, 2))}
    _assert_same_everywhere(model, feeds, expected_dml=1)


def test_gather_in_a_model_local_function():
    function = h.make_function(
        "local",
        "Embed",
        ["table", "ids"],
        ["vectors"],
        [h.make_node("Gather", ["table", "ids"], ["vectors"], name="function_gather", axis=0)],
        opset_imports=[h.make_opsetid("", 17)],
    )
    call = h.make_node("Embed", ["table", "ids"], ["y"], domain="local", name="call")
    model = _model(
        [call],
        [h.make_tensor_value_info("table", T.FLOAT, [10, 3]), h.make_tensor_value_info("ids", T.INT64, [2, 2])],
        [h.make_tensor_value_info("y", T.FLOAT, [2, 2, 3])],
        functions=[function],
    )
    feeds = {"table": RNG.random((10, 3), np.float32), "ids": np.array([[1, 9], [-1, 0]])}
    converted = _assert_same_everywhere(model, feeds, expected_dml=1)
    assert any(o.domain == DOMAIN for o in converted.functions[0].opset_import)


@pytest.mark.parametrize(
    ("elem", "dtype"), [(T.FLOAT16, np.float16), (T.BOOL, np.bool_), (T.DOUBLE, np.float64), (T.UINT64, np.uint64)]
)
def test_types_the_bridge_cannot_carry_travel_exactly(elem, dtype):
    model = _model(
        [h.make_node("Gather", ["x", "i"], ["y"], name="g", axis=1)],
        [h.make_tensor_value_info("x", elem, [2, 5]), h.make_tensor_value_info("i", T.INT64, [3])],
        [h.make_tensor_value_info("y", elem, [2, 3])],
    )
    data = RNG.integers(0, 256, 10 * np.dtype(dtype).itemsize, dtype=np.uint8).view(dtype).reshape(2, 5)
    if dtype == np.bool_:
        data = data.view(np.uint8) % 2 == 1
    feeds = {"x": data, "i": np.array([4, 0, -2])}
    _assert_same_everywhere(model, feeds, expected_dml=1, canonical_nans=elem == T.FLOAT16)


def _sixteen_bit_gather(elem, bits, widen):
    """Gather six 16-bit floats given as raw bits; ``widen`` adds an exact Cast to FLOAT32 at the end."""
    nodes = [h.make_node("Gather", ["x", "i"], ["g" if widen else "y"], name="g", axis=0)]
    if widen:
        nodes.append(h.make_node("Cast", ["g"], ["y"], to=T.FLOAT))
    return _model(
        nodes,
        [h.make_tensor_value_info("i", T.INT64, [6])],
        [h.make_tensor_value_info("y", T.FLOAT if widen else elem, [6])],
        initializers=[h.make_tensor("x", elem, [6], bits.tobytes(), raw=True)],
    )


def _converted_and_lowered(model):
    feeds = {"i": np.arange(6)}
    (converted,) = run_model(onnx_gather.to_dml(model), feeds, custom_ops=True)
    (lowered,) = run_model(onnx_gather.to_onnx(onnx_gather.to_dml(model)), feeds)
    return np.asarray(converted), np.asarray(lowered)


def test_float16_carried_through_float32_keeps_every_value_but_a_nan_payload():
    # -0, +-infinity, the smallest subnormal, the largest finite value, a NaN with a payload.
    bits = np.array([0x8000, 0x7C00, 0xFC00, 0x0001, 0x7BFF, 0x7E57], np.uint16)
    converted, lowered = _converted_and_lowered(_sixteen_bit_gather(T.FLOAT16, bits, widen=False))
    assert converted.view(np.uint16)[:5].tolist() == bits[:5].tolist()
    assert np.isnan(converted[5]) and converted.view(np.uint16)[5] != bits[5]  # ONNX Runtime's Cast: canonical NaN
    assert lowered.view(np.uint16).tolist() == bits.tolist()  # lowered, nothing is carried


def test_bfloat16_carried_through_float32_keeps_every_value_but_a_nan_payload():
    bits = np.array([0x8000, 0x7F80, 0xFF80, 0x0001, 0x7F7F, 0x7FC5], np.uint16)
    converted, lowered = _converted_and_lowered(_sixteen_bit_gather(T.BFLOAT16, bits, widen=True))
    upper = (converted.view(np.uint32) >> 16).astype(np.uint16)  # BFLOAT16 is the upper half of a FLOAT32
    assert upper[:5].tolist() == bits[:5].tolist()
    assert np.isnan(converted[5]) and upper[5] != bits[5]
    assert (lowered.view(np.uint32) >> 16).astype(np.uint16).tolist() == bits.tolist()


def test_string_data_stays_standard_and_is_reported():
    model = _model(
        [h.make_node("Gather", ["x", "i"], ["y"], name="words", axis=0)],
        [h.make_tensor_value_info("x", T.STRING, [3]), h.make_tensor_value_info("i", T.INT64, [2])],
        [h.make_tensor_value_info("y", T.STRING, [2])],
    )
    converted, report = convert(model)
    assert _ops(converted) == ["::Gather"]
    assert [(c.node, c.reason) for c in report.left] == [("words", "STRING data cannot be expressed for DirectML")]


def test_decisions_are_typed_a_left_gather_says_why_a_converted_one_its_n_a_lowered_one_its_mode():
    model = _model(
        [
            h.make_node("Gather", ["x", "i"], ["y"], name="embed", axis=0),
            h.make_node("Gather", ["w", "i"], ["z"], name="words", axis=0),
        ],
        [
            h.make_tensor_value_info("x", T.FLOAT, [4, 3]),
            h.make_tensor_value_info("i", T.INT64, [2]),
            h.make_tensor_value_info("w", T.STRING, [3]),
        ],
        [h.make_tensor_value_info("y", T.FLOAT, [2, 3]), h.make_tensor_value_info("z", T.STRING, [2])],
    )
    analysis = Analysis(model)
    body = bodies(model)[0]
    embed, words = (analysis.decide(body, analysis.types[0], node, i).plan for i, node in enumerate(body.nodes))
    assert isinstance(embed, DmlPlan) and embed.form.dimension_count == 2
    assert words.reason == "STRING data cannot be expressed for DirectML" and not words.fails
    assert (words.placement.provider, embed.placement.provider) == (Where.CPU, Where.DIRECTML)
    converted, report = convert(model, out_of_bounds="clamp")
    assert [(c.node, c.dimension_count, c.reason) for c in report.changed] == [("embed", 2, "")]
    assert [(c.node, c.dimension_count, c.reason) for c in report.left] == [("words", None, words.reason)]
    assert [(c.node, c.out_of_bounds, c.reason) for c in lower(converted)[1].changed] == [("embed", "clamp", "")]


def test_unknown_rank_stays_standard_with_the_reason():
    model = _model(
        [h.make_node("Gather", ["x", "i"], ["y"], name="g", axis=0)],
        [h.make_value_info("x", h.make_tensor_type_proto(T.FLOAT, None)), h.make_tensor_value_info("i", T.INT64, [2])],
        [h.make_value_info("y", h.make_tensor_type_proto(T.FLOAT, None))],
    )
    _, report = convert(model)  # by default nothing runs
    assert report.left[0].reason == (
        "the rank of data 'x' is unknown (shape inference cannot tell it; give observation= (or --inputs/--shape on "
        "the command line) to read it off a run)"
    )
    _, report = convert(model, observation=Observation())  # a run would tell, but there is nothing to run it on
    assert report.left[0].reason == (
        "the rank of data 'x' is unknown (no inputs to run it on: input 'x' has no shape in the model: "
        "give one with --shape x:DIMS)"
    )
    converted, report = convert(model, observation=Observation(shapes={"x": (5, 3)}))
    assert report.changed[0].ranks == (
        "data 'x' (rank) observed in a run of ONNX Runtime on x 5x3 (generated), i 2 (generated)"
    )
    x, i = RNG.standard_normal((5, 3)).astype(np.float32), np.array([4, -1])
    assert_all_identical(run_model(converted, {"x": x, "i": i}, custom_ops=True), [x[i]])
    assert_all_identical(run_model(onnx_gather.to_onnx(converted), {"x": x, "i": i}), [x[i]])


def test_a_run_that_tells_ranks_warns_of_symbolic_dims_it_made_1():
    model = _model(
        [h.make_node("Gather", ["x", "i"], ["y"], name="g", axis=0)],
        [
            h.make_value_info("x", h.make_tensor_type_proto(T.FLOAT, None)),
            h.make_tensor_value_info("i", T.INT64, ["n"]),
        ],
        [h.make_value_info("y", h.make_tensor_type_proto(T.FLOAT, None))],
    )
    _, report = convert(model, observation=Observation(shapes={"x": (5, 3)}))
    assert report.changed[0].ranks == (
        "data 'x' (rank) observed in a run of ONNX Runtime on x 5x3 (generated), i 1 (generated) (warning: dynamic "
        "dims were generated as 1 (i [n] as 1): give real sizes with --shape i:<n>)"
    )


def test_a_rank_an_if_decides_is_not_taken_from_one_run():
    # The data is a 1-D or 2-D tensor by turns: the branch decides its rank.
    one, two = (
        h.make_graph(
            [h.make_node("Identity", [source], [f"{source}_out"])],
            f"b_{source}",
            [],
            [h.make_value_info(f"{source}_out", h.make_tensor_type_proto(T.FLOAT, None))],
        )
        for source in ("flat", "square")
    )
    model = _model(
        [
            h.make_node("If", ["c"], ["x"], name="choose", then_branch=one, else_branch=two),
            h.make_node("Gather", ["x", "i"], ["y"], name="g", axis=0),
        ],
        [
            h.make_tensor_value_info("c", T.BOOL, []),
            h.make_tensor_value_info("flat", T.FLOAT, [4]),
            h.make_tensor_value_info("square", T.FLOAT, [2, 2]),
            h.make_tensor_value_info("i", T.INT64, [1]),
        ],
        [h.make_value_info("y", h.make_tensor_type_proto(T.FLOAT, None))],
    )
    converted, report = convert(model)
    assert _dml_count(converted) == 0
    assert report.left[0].reason == "the rank of data 'x' is unknown (it depends on which branch of If 'choose' runs)"


def test_dimension_count_four_pads_everything_to_four_and_leaves_what_needs_more():
    model = _model(
        [
            h.make_node("Gather", ["x", "i"], ["y"], name="fits", axis=0),
            h.make_node("Gather", ["x", "k"], ["z"], name="too_big", axis=1),
        ],
        [
            h.make_tensor_value_info("x", T.FLOAT, [3, 4]),
            h.make_tensor_value_info("i", T.INT64, [2]),
            h.make_tensor_value_info("k", T.INT64, [2, 2, 2, 2]),
        ],
        [h.make_tensor_value_info("y", T.FLOAT, [2, 4]), h.make_tensor_value_info("z", T.FLOAT, [3, 2, 2, 2, 2])],
    )
    converted, report = convert(model, dimension_count=4)
    assert [c.dimension_count for c in report.changed] == [4]
    assert report.left[0].node == "too_big"
    assert report.left[0].reason == "it needs 5 dimensions, more than the dimension count 4"
    dml = next(n for n in converted.graph.node if n.domain == DOMAIN)
    assert {a.name: h.get_attribute_value(a) for a in dml.attribute} == {
        "axis": 2,
        "index_dimensions": 1,
        "out_of_bounds": b"directml",
    }
    feeds = {"x": RNG.random((3, 4), np.float32), "i": np.array([2, 0]), "k": RNG.integers(0, 4, (2, 2, 2, 2))}
    assert_all_identical(run_model(converted, feeds, custom_ops=True), run_model(model, feeds))


def test_a_bad_dimension_count_is_refused():
    model = _model([], [], [])
    with pytest.raises(ValueError, match="dimension_count must be 'auto' or 1 to 8, got '9'"):
        onnx_gather.to_dml(model, "9")


def test_conversion_keeps_everything_else_and_is_idempotent():
    model = _model(
        [
            h.make_node("Relu", ["x"], ["r"], name="relu", doc_string="kept"),
            h.make_node("Gather", ["r", "i"], ["y"], name="lookup", axis=-1),
        ],
        [h.make_tensor_value_info("x", T.FLOAT, ["batch", 4]), h.make_tensor_value_info("i", T.INT64, [])],
        [h.make_tensor_value_info("y", T.FLOAT, ["batch"])],
        initializers=[onnx.numpy_helper.from_array(np.array(3, np.int64), "i")],
    )
    model.doc_string, model.producer_name = "a model", "hand"
    h.set_model_props(model, {"author": "test"})
    model.graph.value_info.append(h.make_tensor_value_info("r", T.FLOAT, ["batch", 4]))
    converted = onnx_gather.to_dml(model)
    assert (converted.doc_string, converted.producer_name, converted.ir_version) == ("a model", "hand", 8)
    assert converted.metadata_props == model.metadata_props
    assert converted.graph.input == model.graph.input and converted.graph.output == model.graph.output
    assert converted.graph.initializer == model.graph.initializer
    assert converted.graph.node[0] == model.graph.node[0]
    assert model.graph.value_info[0] in converted.graph.value_info
    assert [n.name for n in converted.graph.node if n.domain == DOMAIN] == ["lookup"]
    assert onnx_gather.to_dml(converted).SerializeToString() == converted.SerializeToString()
    assert model.graph.node[1].op_type == "Gather"  # the input model is not modified


def test_round_trip_with_error_mode_restores_the_original_graph():
    model = _model(
        [
            h.make_node("Gather", ["x", "i"], ["y"], name="g", axis=1),
            h.make_node("GatherElements", ["x", "j"], ["z"], name="ge", axis=0),
        ],
        [
            h.make_tensor_value_info("x", T.FLOAT16, ["a", 4]),
            h.make_tensor_value_info("i", T.INT64, [2, 3]),
            h.make_tensor_value_info("j", T.INT64, [1, 2]),
        ],
        [h.make_tensor_value_info("y", T.FLOAT16, ["a", 2, 3]), h.make_tensor_value_info("z", T.FLOAT16, [1, 2])],
    )
    lowered, report = lower(onnx_gather.to_dml(model, out_of_bounds="error", provider_failures="onnx"))
    assert _ops(lowered) == _ops(model)
    assert [(n.name, n.op_type, list(n.input), list(n.output)) for n in lowered.graph.node] == [
        ("g", "Gather", ["x", "i"], ["y"]),
        ("ge", "GatherElements", ["x", "j"], ["z"]),
    ]
    assert not lowered.graph.value_info
    assert [o.domain for o in lowered.opset_import] == [""]
    assert len(report.changed) == 2 and not report.left


def test_lowering_a_model_without_dml_nodes_changes_nothing():
    model = _model(
        [h.make_node("Gather", ["x", "i"], ["y"], axis=0)],
        [h.make_tensor_value_info("x", T.FLOAT, [3]), h.make_tensor_value_info("i", T.INT64, [2])],
        [h.make_tensor_value_info("y", T.FLOAT, [2])],
    )
    assert onnx_gather.to_onnx(model).SerializeToString() == model.SerializeToString()


def test_a_dml_gather_nd_whose_output_needs_more_than_its_dimension_count_is_left():
    # Data {2,3,4}, tuples of 1 in indices {5,6,1}: the output {5,6,3,4} has 4 dimensions, the node 3; DirectML
    # crops nothing (docs/semantics.md section 3b), so the node computes nothing and is not lowered.
    node = h.make_node(
        "DmlGatherNd",
        ["x", "i"],
        ["y"],
        name="nd",
        domain=DOMAIN,
        input_dimension_count=3,
        indices_dimension_count=3,
        batch_dimension_count=0,
        out_of_bounds="directml",
    )
    model = _model(
        [node],
        [h.make_tensor_value_info("x", T.FLOAT, [2, 3, 4]), h.make_tensor_value_info("i", T.INT64, [5, 6, 1])],
        [h.make_tensor_value_info("y", T.FLOAT, None)],
    )
    model.opset_import.append(h.make_opsetid(DOMAIN, 1))
    with pytest.raises(semantics.GatherError, match="more than the dimension count 3"):
        semantics.dml_gather_nd(np.zeros((2, 3, 4), np.float32), np.zeros((5, 6, 1), np.int64), 3, 3, 0)
    lowered, report = lower(model)
    assert not report.changed and [c.node for c in report.left] == ["nd"]
    assert report.left[0].reason.startswith("its attributes are invalid for rank 3 and tuples of 1: ")
    assert [n.op_type for n in lowered.graph.node] == ["DmlGatherNd"]


def test_inference_reads_small_initializers_such_as_axes():
    # Squeeze's axes come from an initializer: without its value the rank after it would be unknown.
    model = _model(
        [
            h.make_node("Squeeze", ["x", "axes"], ["s"], name="squeeze"),
            h.make_node("Gather", ["table", "s"], ["y"], name="lookup", axis=0),
        ],
        [h.make_tensor_value_info("x", T.INT64, [2, 1])],
        [h.make_tensor_value_info("y", T.FLOAT, [2, 3])],
        initializers=[
            onnx.numpy_helper.from_array(np.array([1], np.int64), "axes"),
            onnx.numpy_helper.from_array(RNG.random((1000, 3), np.float32), "table"),
        ],
    )
    converted, report = convert(model)
    assert [c.node for c in report.changed] == ["lookup"] and not report.left
    feeds = {"x": np.array([[999], [-1000]])}
    assert_all_identical(run_model(converted, feeds, custom_ops=True), run_model(model, feeds))


@pytest.mark.parametrize("opset", [7, 9])
@pytest.mark.parametrize("mode", ["clamp", "zero", "error"])
def test_old_opsets_use_attribute_forms_and_where_for_clamping(opset, mode):
    model = _model(
        [h.make_node("Gather", ["x", "i"], ["y"], name="g", axis=1)],
        [h.make_tensor_value_info("x", T.FLOAT16, [2, 5]), h.make_tensor_value_info("i", T.INT64, [3])],
        [h.make_tensor_value_info("y", T.FLOAT16, [2, 3])],
        opset=opset,
    )
    feeds = {"x": RNG.standard_normal((2, 5)).astype(np.float16), "i": np.array([4, -5, 1])}
    converted = onnx_gather.to_dml(model, out_of_bounds=mode)
    onnx.checker.check_model(converted)
    pad = next(n for n in converted.graph.node if n.op_type == "Unsqueeze")
    assert [a.name for a in pad.attribute] == ["axes"] and len(pad.input) == 1  # Unsqueeze-1: axes attribute
    expected = run_model(model, feeds)
    assert_all_identical(run_model(converted, feeds, custom_ops=True), expected)
    lowered, report = lower(converted)
    assert not report.left
    # The native op alone keeps the model's opset; clamping and masking are lowered at opset 11 (tests/test_opsets.py).
    assert lowered.opset_import[0].version == (opset if mode == "error" else 11)
    onnx.checker.check_model(lowered)
    assert_all_identical(run_model(lowered, feeds), expected)


def test_gather_1_converts_and_lowers_raising_the_opset_where_the_mode_needs_it():
    def gather_1(elem):
        return _model(
            [h.make_node("Gather", ["x", "i"], ["y"], name="g", axis=1)],
            [h.make_tensor_value_info("x", elem, [2, 5]), h.make_tensor_value_info("i", T.INT64, [3])],
            [h.make_tensor_value_info("y", elem, [2, 3])],
            opset=1,
        )

    model = gather_1(T.FLOAT)
    feeds = {"x": RNG.standard_normal((2, 5)).astype(np.float32), "i": np.array([4, -5, 1])}
    converted = onnx_gather.to_dml(model, out_of_bounds="error")
    assert_all_identical(run_model(converted, feeds, custom_ops=True), run_model(model, feeds))
    assert onnx_gather.to_onnx(converted).graph.node == model.graph.node
    for mode in ("directml", "clamp"):
        converted = onnx_gather.to_dml(model, out_of_bounds=mode)
        lowered, report = lower(converted)
        assert not report.left and lowered.opset_import[0].version == 11
        assert report.notes == [
            "default-domain opset raised from 1 to 11 with onnx's version converter: lowering 1 DML node needs it"
        ]
        assert_all_identical(run_model(lowered, feeds), run_model(converted, feeds, custom_ops=True))
    _, report = convert(gather_1(T.FLOAT16))
    assert report.left[0].reason == "carrying FLOAT16 needs Cast-6 (opset 1)"


@pytest.mark.parametrize("mode", ["clamp", "zero", "directml"])
def test_lowered_int64_indices_beyond_the_int32_range_follow_the_semantics(mode):
    # ONNX Runtime 1.31's INT64 Clip leaves 2^32 - 8 unclamped: the lowering must not rely on it.
    data = np.arange(10, 16, dtype=np.float32)
    indices = np.array([2**32 - 8, 2**31 + 7, -(2**31) - 7, 2**40, 1] * 20)
    case = conformance.GatherCase("Gather", data, indices, 0)
    (lowered,) = conformance.run_lowered([case], mode)
    assert_identical(lowered, onnx_gather.dml_gather(data, indices, 0, 1, mode))


@pytest.mark.parametrize("opset", [11, 12, 17])
@pytest.mark.parametrize(
    "op, shape, indices, axis",
    [
        ("Gather", (0, 3), np.array([0, 2, -1], np.int64), 0),  # no data: every element reads 0
        ("GatherElements", (2, 0), np.zeros((2, 3), np.int32), 1),
        ("Gather", (3, 5), np.array([[1, 7], [-4, 2]], np.int32), 0),  # a row past the end, one straddling it
        ("GatherElements", (4, 3), np.array([[0, 5, 2]] * 2 + [[-9, 1, 13]] * 2, np.int64), 0),
    ],
)
def test_lowered_directml_reading_in_every_opset_it_supports(opset, op, shape, indices, axis):
    data = RNG.integers(-100, 100, shape).astype(np.int8)  # odd byte counts: the padding reads 0
    model = h.make_model(
        h.make_graph(
            [h.make_node(op, ["x", "i"], ["y"], axis=axis)],
            "t",
            [h.make_tensor_value_info("x", T.INT8, shape), h.make_tensor_value_info("i", T.INT64, None)],
            [h.make_tensor_value_info("y", T.INT8, None)],
        ),
        opset_imports=[h.make_opsetid("", opset)],
        ir_version=7,
    )
    model.graph.input[1].type.tensor_type.elem_type = h.np_dtype_to_tensor_dtype(indices.dtype)
    model.graph.input[1].type.tensor_type.shape.CopyFrom(h.make_tensor_type_proto(1, indices.shape).tensor_type.shape)
    lowered = onnx_gather.to_onnx(onnx_gather.to_dml(model))
    assert "::If" in _ops(lowered)
    (actual,) = run_model(lowered, {"x": data, "i": indices})
    expected = conformance.expected(conformance.GatherCase(op, data, indices, axis))
    assert_identical(actual, expected)
    if data.size == 0:
        assert not actual.any()


def test_dml_outputs_are_typed_with_their_symbolic_dims_and_lowering_needs_no_inference():
    # The VITS case: GatherElements on computed indices, axis -1, its output feeding a Gather.
    model = _model(
        [
            h.make_node("ArgMax", ["x"], ["picked"], name="pick", axis=-1, keepdims=1),
            h.make_node("GatherElements", ["x", "picked"], ["best"], name="take", axis=-1),
            h.make_node("Gather", ["best", "rows"], ["y"], name="rows_of", axis=0),
        ],
        [h.make_tensor_value_info("x", T.FLOAT, ["frames", 4]), h.make_tensor_value_info("rows", T.INT64, [2])],
        [h.make_value_info("y", h.make_tensor_type_proto(T.FLOAT, None))],
    )
    converted = onnx_gather.to_dml(model)
    graph = converted.graph
    typed = {
        v.name: [d.dim_param or d.dim_value for d in v.type.tensor_type.shape.dim]
        for v in (*graph.value_info, *graph.output)
    }
    assert typed["best"] == ["frames", 1]
    assert typed["y"] == [2, 1]  # the output declared no shape: it gets the one the DML form was made for
    lowered, report = lower(converted)
    assert report.left == [] and len(report.changed) == 2
    x, rows = RNG.standard_normal((5, 4)).astype(np.float32), np.array([4, 0])
    assert_all_identical(run_model(lowered, {"x": x, "rows": rows}), run_model(model, {"x": x, "rows": rows}))


@pytest.mark.parametrize("mode", ["directml", "clamp", "zero", "error"])
@pytest.mark.parametrize(
    ("op", "indices", "in_bounds"),
    [
        ("Gather", np.array([0, -4, 3], np.int64), True),  # a shape's entries, as exporters read them
        ("Gather", np.array([1, 4], np.int64), False),
        ("Gather", np.array([2, 3], np.uint32), True),
        ("GatherElements", np.array([[0, 3, -1]] * 3, np.int32), True),
        ("GatherND", np.array([[2, -3], [0, 0]], np.int64), True),
        ("GatherND", np.array([[2, 3], [0, 0]], np.int64), False),  # 3 is past the second dim
    ],
)
def test_constant_indices_inside_stated_sizes_lower_to_the_native_op_alone(op, indices, in_bounds, mode):
    data = RNG.integers(-100, 100, (3, 4)).astype(np.float32)
    constant = h.make_node("Constant", [], ["i"], value=onnx.numpy_helper.from_array(indices))
    gather = h.make_node(op, ["x", "i"], ["y"], name="g", **({} if op == "GatherND" else {"axis": 1}))
    model = _model(
        [constant, gather],
        [h.make_tensor_value_info("x", T.FLOAT, [3, 4])],
        [h.make_tensor_value_info("y", T.FLOAT, None)],
    )
    if op == "GatherElements":  # indices of the data's shape off the axis
        model.graph.node[0].attribute[0].t.CopyFrom(
            onnx.numpy_helper.from_array(np.array([[0, 3, -1, 1]] * 3, np.int32))
        )
    lowered = onnx_gather.to_onnx(onnx_gather.to_dml(model, out_of_bounds=mode))
    ops = {op_type.split("::")[1] for op_type in _ops(lowered)}
    if in_bounds:  # no If, no clamp, no mask: the native op (and a Cast for unsigned indices)
        assert ops <= {op, "Constant", "Cast"}, ops
    if mode != "error" or in_bounds:
        (actual,) = run_model(lowered, {"x": data})
        dml = onnx_gather.to_dml(model, out_of_bounds=mode)
        assert_identical(actual, run_model(dml, {"x": data}, custom_ops=True)[0])


def test_a_lowered_gather_nd_on_dims_known_only_by_name_loads_without_a_warning(tmp_path):
    # A Slice of the data's shape, used inside the If, made ONNX Runtime warn once per GatherND on every session.
    model = _model(
        [h.make_node("GatherND", ["x", "i"], ["y"], name="pick")],
        [
            h.make_tensor_value_info("x", T.FLOAT, ["a", "b", "c", "d"]),
            h.make_tensor_value_info("i", T.INT64, ["n", 3]),
        ],
        [h.make_tensor_value_info("y", T.FLOAT, ["n", "d"])],
    )
    path, converted = tmp_path / "lowered.onnx", onnx_gather.to_dml(model)
    onnx.save(onnx_gather.to_onnx(converted), path)
    script = "import sys, onnxruntime; onnxruntime.InferenceSession(sys.argv[1], providers=['CPUExecutionProvider'])"
    result = subprocess.run([sys.executable, "-c", script, str(path)], capture_output=True, text=True, check=True)
    assert result.stderr == ""
    x = RNG.standard_normal((2, 3, 4, 5)).astype(np.float32)
    indices = np.array([[1, 2, 3], [0, -3, 9]])  # the second tuple is out of bounds
    feeds = {"x": x, "i": indices}
    assert_identical(run_model(path, feeds)[0], run_model(converted, feeds, custom_ops=True)[0])


def _function_with_referenced_axis(op_type: str, domain: str = "", **attributes) -> onnx.ModelProto:
    """A model-local function whose one gather takes its axis from the function's attribute ``ax``."""
    axis = onnx.AttributeProto(name="axis", ref_attr_name="ax", type=onnx.AttributeProto.INT)
    node = h.make_node(op_type, ["d", "i"], ["o"], domain=domain, **attributes)
    node.attribute.append(axis)
    imports = [h.make_opsetid("", 17), *([h.make_opsetid(domain, 1)] if domain else [])]
    function = h.make_function("local", "Pick", ["d", "i"], ["o"], [node], imports, attributes=["ax"])
    call = h.make_node("Pick", ["x", "idx"], ["y"], domain="local", ax=1)
    return _model(
        [call],
        [h.make_tensor_value_info("x", T.FLOAT, [3, 4]), h.make_tensor_value_info("idx", T.INT64, [1, 2])],
        [h.make_tensor_value_info("y", T.FLOAT, None)],
        functions=[function],
    )


def test_a_gather_whose_axis_a_function_call_gives_stays_standard_with_the_reason():
    model = _function_with_referenced_axis("Gather")
    model.opset_import.append(h.make_opsetid("local", 1))
    converted, report = convert(model)
    reason = "its axis is the function's attribute 'ax', whose value each call gives"
    assert [(c.op_type, c.reason) for c in report.left] == [("Gather", reason)]
    assert converted.functions[0].node[0].op_type == "Gather"
    verdicts = [v for v in check(model) if v.gather]
    assert [(v.status, v.reason) for v in verdicts] == [("unknown", f"the provider decides when it runs: {reason}")]
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    assert_all_identical(run_model(converted, {"x": x, "idx": np.array([[3, 0]])}), [x[:, [[3, 0]]]])


def test_a_dml_node_whose_axis_a_function_call_gives_is_left_by_the_lowering_with_the_reason():
    model = _function_with_referenced_axis("DmlGatherElements", DOMAIN, out_of_bounds="directml")
    model.opset_import.extend([h.make_opsetid("local", 1), h.make_opsetid(DOMAIN, 1)])
    _, report = lower(model)
    assert [(c.op_type, c.reason) for c in report.left] == [
        ("DmlGatherElements", "its axis is the function's attribute 'ax', whose value each call gives")
    ]


def _runtime_scalar_indices() -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """ONNX Runtime's kernel test GatherND_runtime_scalar_indices_error: indices of no declared shape, a scalar when
    the model runs."""
    graph = h.make_graph(
        [h.make_node("GatherND", ["x", "i"], ["y"], name="nd")],
        "scalar",
        [h.make_tensor_value_info("x", T.FLOAT, [2, 2]), h.make_tensor_value_info("i", T.INT64, None)],
        [h.make_tensor_value_info("y", T.FLOAT, None)],
    )
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 13)], ir_version=8)
    return model, {"x": np.arange(4, dtype=np.float32).reshape(2, 2), "i": np.array(1, np.int64)}


def test_gather_nd_of_scalar_indices_a_run_brings_fails_as_directml_does():
    from onnx_gather.graphs.convert import ProviderFailure

    model, feeds = _runtime_scalar_indices()
    observation = Observation(feeds)
    with pytest.raises(ProviderFailure, match=r"GatherND node 'nd' .* indices are a scalar .*80070057"):
        convert(model, observation=observation)
    (verdict,) = check(model, observation=observation)
    assert verdict.status == "fails" and "80070057" in verdict.reason
    onnx_values = convert(model, observation=observation, provider_failures="onnx")
    assert [c.node for c in onnx_values[1].left] == ["nd"]


@pytest.mark.directml
def test_real_directml_fails_gather_nd_of_scalar_indices_when_it_runs(tmp_path):
    from conftest import require_directml

    from onnx_gather.directml.process import DirectMlError
    from onnx_gather.runtime import backends

    require_directml(wine=True)
    model, feeds = _runtime_scalar_indices()
    with pytest.raises(DirectMlError, match="80070057"):
        backends.create("dml").run(backends.Model(tmp_path / "nd.onnx", model), feeds)
