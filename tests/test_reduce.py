"""onnx-gather reduce: windows of a graph as models of their own, the search, and models whose divergence sits in one
node deep in a long chain, cut down on another backend and on real DirectML."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from conftest import require_directml
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper

from onnx_gather.graphs.extract import constant_values, window
from onnx_gather.runtime.reduce import shrink


def _chain(
    length: int, odd: onnx.NodeProto, at: int, odd_inputs: dict[str, np.ndarray] | None = None
) -> onnx.ModelProto:
    """x -> Add(1) -> ... with ``odd`` (reading the running value ``v``, writing ``w``) after the ``at``-th Add."""
    nodes, value = [], "x"
    for position in range(length):
        nodes.append(h.make_node("Add", [value, "one"], [f"a{position}"], name=f"add{position}"))
        value = f"a{position}"
        if position == at:
            odd.input[0] = value
            nodes.append(odd)
            value = odd.output[0]
    weights = [numpy_helper.from_array(np.array(1, np.float32), "one")]
    weights += [numpy_helper.from_array(array, name) for name, array in (odd_inputs or {}).items()]
    graph = h.make_graph(nodes, "chain", [h.make_tensor_value_info("x", T.FLOAT, [4])],
                         [h.make_tensor_value_info(value, T.FLOAT, None)], weights)  # fmt: skip
    return h.make_model(graph, opset_imports=[h.make_opsetid("", 17)], ir_version=10)


def test_a_window_takes_weights_as_weights_constants_as_weights_and_the_rest_as_inputs():
    graph = h.make_graph(
        [
            h.make_node("Shape", ["w"], ["shape"], name="s"),  # from a weight alone: a constant
            h.make_node("Add", ["x", "w"], ["y"], name="add"),
            h.make_node("Reshape", ["y", "shape"], ["z"], name="reshape"),
            h.make_node("Neg", ["z"], ["out"], name="neg"),
        ],
        "g", [h.make_tensor_value_info("x", T.FLOAT, [2])], [h.make_tensor_value_info("out", T.FLOAT, [2])],
        [numpy_helper.from_array(np.array([1, 2], np.float32), "w")],
    )  # fmt: skip
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    assert constant_values(model.graph) == {"w", "shape"}
    values = {"x": np.zeros(2, np.float32), "shape": np.array([2]), "y": np.ones(2, np.float32),
              "z": np.ones(2, np.float32), "out": -np.ones(2, np.float32)}  # fmt: skip
    reduced = window(model, {2}, values)
    assert [n.name for n in reduced.graph.node] == ["reshape"]
    assert [i.name for i in reduced.graph.input] == ["y"]
    assert [t.name for t in reduced.graph.initializer] == ["shape"]
    assert [o.name for o in reduced.graph.output] == ["z"]  # the rest uses it
    onnx.checker.check_model(reduced, full_check=True)
    whole_tail = window(model, {1, 2, 3}, values)
    assert [t.name for t in whole_tail.graph.initializer] == ["shape", "w"]  # a weight stays a weight
    assert [o.name for o in whole_tail.graph.output] == ["out"]


def test_a_node_holding_a_subgraph_takes_what_the_subgraph_reads_from_outside():
    branch = h.make_graph([h.make_node("Neg", ["y"], ["b"])], "then", [], [h.make_tensor_value_info("b", T.FLOAT, [2])])
    other = h.make_graph(
        [h.make_node("Identity", ["y"], ["c"])], "else", [], [h.make_tensor_value_info("c", T.FLOAT, [2])]
    )
    graph = h.make_graph(
        [h.make_node("Abs", ["x"], ["y"], name="abs"),
         h.make_node("If", ["flag"], ["out"], name="if", then_branch=branch, else_branch=other)],
        "g", [h.make_tensor_value_info("x", T.FLOAT, [2]), h.make_tensor_value_info("flag", T.BOOL, [])],
        [h.make_tensor_value_info("out", T.FLOAT, [2])],
    )  # fmt: skip
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    values = {"x": np.ones(2, np.float32), "flag": np.array(True), "y": np.ones(2, np.float32),
              "out": -np.ones(2, np.float32)}  # fmt: skip
    reduced = window(model, {1}, values)
    assert sorted(i.name for i in reduced.graph.input) == ["flag", "y"]
    onnx.checker.check_model(reduced, full_check=True)


@pytest.mark.parametrize("culprit", [0, 1, 17, 38, 39])
def test_the_search_ends_on_the_one_node_that_shows_the_symptom(culprit):
    tried = []

    def shows(keep):
        tried.append(list(keep))
        return culprit in keep

    assert shrink(40, shows) == [culprit]
    assert len(tried) <= 2 * 6 + 1


def test_the_search_keeps_two_nodes_where_the_symptom_needs_both():
    assert shrink(30, lambda keep: {12, 20} <= set(keep)) == [12, 20]


def _reduce(tmp_path, model: onnx.ModelProto, feeds, backend: str, reference: str, out_of_bounds: str = "directml"):
    from onnx_gather.graphs import model_io
    from onnx_gather.runtime import backends
    from onnx_gather.runtime.comparison import Tolerance
    from onnx_gather.runtime.reduce import Reducer

    path = tmp_path / "chain.onnx"
    onnx.save(model, path)
    reducer = Reducer(
        backends.Model(path, model_io.load(path)), feeds, backends.create(backend, out_of_bounds=out_of_bounds),
        backends.create(reference), Tolerance(), lambda line: None,
    )  # fmt: skip
    return reducer.reduce()


def test_an_out_of_bounds_gather_deep_in_a_chain_is_found_on_the_lowered_graph(tmp_path):
    table = np.arange(60, dtype=np.float32).reshape(30, 2)
    lookup = h.make_node("Gather", ["table", "i"], ["g"], name="lookup", axis=0)
    cast = h.make_node("Cast", ["v"], ["i"], name="cast", to=T.INT64)
    model = _chain(40, cast, 25, {"table": table})
    model.graph.node.insert(27, lookup)
    model.graph.node[28].input[0] = "g"
    # x + 26 = 26..31: index 31 is out of bounds; WebNN's clamp reads row 29, DirectML the last element twice
    found = _reduce(tmp_path, model, {"x": np.array([0, 1, 2, 5], np.float32)}, "lowered", "pyop", "clamp")
    assert found.nodes == ["Gather 'lookup'"]
    assert found.symptom.detail == "outputs outside tolerance: g"
    assert [i.name for i in found.model.graph.input] == ["i"] and found.feeds["i"].tolist() == [26, 27, 28, 31]


def test_directmls_pow_of_zero_to_the_zero_deep_in_a_chain_is_found_on_real_directml(tmp_path):
    require_directml()
    power = h.make_node("Pow", ["v", "zero"], ["p"], name="power")
    model = _chain(40, power, 25, {"zero": np.zeros(4, np.float32)})
    # x + 26 = 0 in the first element: ONNX Runtime's CPU kernel gives 0 ** 0 = 1, DirectML 0
    found = _reduce(tmp_path, model, {"x": np.array([-26, 1, 2, 3], np.float32)}, "dml", "cpu")
    assert found.nodes == ["Pow 'power'"]
    assert found.symptom.detail == "outputs outside tolerance: p"
