"""Models whose nodes are not listed in topological order: ONNX Runtime sorts and runs them, so every command
accepts them, and convert and lower write their outputs in topological order. Only cycles and names nothing
defines are refused, naming the node."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from conftest import assert_all_identical, run_model
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper

import onnx_gather
from onnx_gather.app.cli import main
from onnx_gather.graphs.plumbing import bodies, sort_topologically
from onnx_gather.graphs.validate import InvalidModel, validate


def _branch(name: str, scale: float, backwards: bool) -> onnx.GraphProto:
    """A subgraph whose Gather uses the outer 'rows' and 'order', which the main graph may list after the If."""
    nodes = [
        h.make_node("Identity", ["order"], ["inner_ids"], name=f"{name}_ids"),
        h.make_node("Gather", ["rows", "inner_ids"], ["picked"], name=f"{name}_gather", axis=1),
        h.make_node("Mul", ["picked", "factor"], [f"{name}_out"], name=f"{name}_scale"),
    ][:: -1 if backwards else 1]
    factor = numpy_helper.from_array(np.array(scale, np.float32), "factor")
    return h.make_graph(nodes, name, [], [h.make_tensor_value_info(f"{name}_out", T.FLOAT, [3, 3])], [factor])


def shuffled_model(seed: int = 0, backwards_branches: bool = False) -> onnx.ModelProto:
    """Gather, GatherElements and an If whose branches gather from outer values, the nodes in a random order.

    ``backwards_branches``: the branches' nodes listed backwards too (ONNX Runtime refuses that; we sort it).
    """
    nodes = [
        h.make_node("Gather", ["table", "ids"], ["rows"], name="embed", axis=0),
        h.make_node("ReduceSum", ["rows", "axis_1"], ["sums"], name="sum", keepdims=0),
        h.make_node("TopK", ["sums", "k"], ["top", "order_2d"], name="rank", axis=0),
        h.make_node("Reshape", ["order_2d", "flat"], ["order"], name="flatten"),
        h.make_node("GatherElements", ["sums", "order"], ["sorted"], name="sort", axis=0),
        h.make_node("Greater", ["top_first", "zero"], ["positive"], name="sign"),
        h.make_node("Gather", ["top", "first"], ["top_first"], name="first_top", axis=0),
        h.make_node(
            "If",
            ["positive"],
            ["chosen"],
            name="branch",
            then_branch=_branch("then", 2.0, backwards_branches),
            else_branch=_branch("else", -1.0, backwards_branches),
        ),
    ]
    order = np.random.default_rng(seed).permutation(len(nodes))
    while list(order) == sorted(order):
        order = np.random.default_rng(seed + 1).permutation(len(nodes))
    initializers = [
        numpy_helper.from_array(np.random.default_rng(3).standard_normal((10, 4)).astype(np.float32), "table"),
        numpy_helper.from_array(np.array([3], np.int64), "k"),
        numpy_helper.from_array(np.array([1], np.int64), "axis_1"),
        numpy_helper.from_array(np.array([-1], np.int64), "flat"),
        numpy_helper.from_array(np.array(0, np.int64), "first"),
        numpy_helper.from_array(np.array(0, np.float32), "zero"),
    ]
    graph = h.make_graph(
        [nodes[k] for k in order],
        "shuffled",
        [h.make_tensor_value_info("ids", T.INT64, [3])],
        [h.make_tensor_value_info("sorted", T.FLOAT, [3]), h.make_tensor_value_info("chosen", T.FLOAT, [3, 3])],
        initializers,
    )
    return h.make_model(graph, opset_imports=[h.make_opsetid("", 17)], ir_version=10)


FEEDS = {"ids": np.array([7, 2, 9])}


def _assert_in_topological_order(model: onnx.ModelProto) -> None:
    onnx.checker.check_model(model)  # it refuses a graph whose nodes are not in topological order
    for body in bodies(model):
        if isinstance(body.container, onnx.GraphProto):
            defined = {v.name for v in body.container.input} | {t.name for t in body.container.initializer}
            for node in body.nodes:
                produced_later = {n for later in body.nodes[list(body.nodes).index(node) :] for n in later.output}
                assert not (set(node.input) & produced_later - defined), f"{node.name} comes before its inputs"
                defined.update(node.output)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_shuffled_model_converts_and_lowers_into_topological_order_with_the_same_outputs(tmp_path, seed, capsys):
    model = shuffled_model(seed)
    with pytest.raises(onnx.checker.ValidationError, match="topologically sorted"):
        onnx.checker.check_model(model)  # the model really is out of order
    source = tmp_path / "shuffled.onnx"
    onnx.save(model, source)
    expected = run_model(source, FEEDS)  # ONNX Runtime sorts it and runs it
    assert main(["convert", str(source), "-o", str(tmp_path / "dml.onnx")]) == 0
    assert "Converted 5 of 5 gathers." in capsys.readouterr().out  # two of them inside the If's branches
    assert main(["lower", str(tmp_path / "dml.onnx"), "-o", str(tmp_path / "lowered.onnx")]) == 0
    converted, lowered = onnx.load(tmp_path / "dml.onnx"), onnx.load(tmp_path / "lowered.onnx")
    _assert_in_topological_order(converted)
    _assert_in_topological_order(lowered)
    assert_all_identical(run_model(converted, FEEDS, custom_ops=True), expected)
    assert_all_identical(run_model(lowered, FEEDS), expected)
    assert_all_identical(run_model(onnx_gather.to_onnx(onnx_gather.to_dml(model)), FEEDS), expected)  # the API too


def test_subgraphs_listed_out_of_order_are_sorted_too(tmp_path):
    # ONNX Runtime sorts a main graph, not a subgraph: it refuses this model, so the expected outputs are those
    # of the model sorted.
    model = shuffled_model(backwards_branches=True)
    expected = onnx.ModelProto()
    expected.CopyFrom(model)
    sort_topologically(expected)
    lowered = onnx_gather.to_onnx(onnx_gather.to_dml(model))
    _assert_in_topological_order(lowered)
    assert_all_identical(run_model(lowered, FEEDS), run_model(expected, FEEDS))


@pytest.mark.parametrize(
    "arguments",
    [
        ["check"],
        ["run", "--backend", "pyop"],
        pytest.param(["parity", "--backends", "pyop,cpu,lowered,openvino"], marks=pytest.mark.openvino),
    ],
)
def test_every_command_accepts_a_shuffled_model(tmp_path, arguments):
    source = tmp_path / "shuffled.onnx"
    onnx.save(shuffled_model(), source)
    assert main([arguments[0], str(source), *arguments[1:]]) == 0


def test_sorting_keeps_the_listed_order_where_it_is_already_topological():
    model = shuffled_model()
    sort_topologically(model)
    before = [node.name for body in bodies(model) for node in body.nodes]
    sort_topologically(model)
    assert [node.name for body in bodies(model) for node in body.nodes] == before
    assert before[0] == "embed"  # the first node that can run, of those listed first


def _write(tmp_path, nodes, outputs=("y",)) -> str:
    graph = h.make_graph(
        nodes,
        "g",
        [h.make_tensor_value_info("x", T.FLOAT, [2])],
        [h.make_tensor_value_info(name, T.FLOAT, None) for name in outputs],
    )
    path = tmp_path / "m.onnx"
    onnx.save(h.make_model(graph, opset_imports=[h.make_opsetid("", 17)], ir_version=10), path)
    return str(path)


def test_a_cycle_through_a_subgraphs_outer_value_is_refused_naming_the_nodes(tmp_path, capsys):
    # The If's branch reads 'looped', which a node fed by the If's own output defines.
    then = h.make_graph(
        [h.make_node("Identity", ["looped"], ["t"], name="inner")],
        "then",
        [],
        [h.make_tensor_value_info("t", T.FLOAT, None)],
    )
    nodes = [
        h.make_node("If", ["c"], ["y"], name="choose", then_branch=then, else_branch=then),
        h.make_node("Neg", ["y"], ["looped"], name="negate"),
        h.make_node("Constant", [], ["c"], name="condition", value=h.make_tensor("v", T.BOOL, [], [True])),
    ]
    assert main(["check", _write(tmp_path, nodes)]) == 2
    error = capsys.readouterr().err
    assert "node 'choose' (If) depends on its own output: node 'choose' (If) -> node 'negate' (Neg) -> " in error


def test_a_name_nothing_defines_anywhere_is_still_refused(tmp_path, capsys):
    nodes = [h.make_node("Add", ["x", "ghost"], ["y"], name="add")]
    assert main(["check", _write(tmp_path, nodes)]) == 2
    assert "node 'add' (Add) uses 'ghost', which nothing defines" in capsys.readouterr().err


def test_a_graph_on_an_op_that_takes_none_is_refused_not_walked_past():
    # The walk reads graph attributes of control flow and other domains' ops only; validate refuses a graph anywhere
    # else, so that no graph of a model that loads is left out of conversion or lowering.
    inner = h.make_graph(
        [h.make_node("Gather", ["a", "k"], ["b"], axis=0)],
        "inner",
        [h.make_tensor_value_info("a", T.FLOAT, [3]), h.make_tensor_value_info("k", T.INT64, [1])],
        [h.make_tensor_value_info("b", T.FLOAT, [1])],
    )
    node = h.make_node("Gather", ["x", "i"], ["y"], name="g", axis=0)
    node.attribute.append(h.make_attribute("body", inner))
    graph = h.make_graph(
        [node],
        "m",
        [h.make_tensor_value_info("x", T.FLOAT, [3]), h.make_tensor_value_info("i", T.INT64, [2])],
        [h.make_tensor_value_info("y", T.FLOAT, [2])],
    )
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    assert len(bodies(model)) == 1
    with pytest.raises(InvalidModel, match="node 'g' \\(Gather\\): attribute 'body' holds a graph, which Gather does"):
        validate(model)
    model.graph.node[0].op_type, model.graph.node[0].domain = "Wrapper", "example.custom"  # may take graphs: walked
    assert len(bodies(model)) == 2
