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

from onnx_gather.app.cli import main
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


def test_a_weight_the_inputs_override_comes_with_the_value_fed():
    # An input with a default (IR 4 on), fed: the window's weight holds what was fed, not the default
    graph = h.make_graph(
        [h.make_node("Add", ["x", "w"], ["y"], name="add")], "g",
        [h.make_tensor_value_info(name, T.FLOAT, [2]) for name in ("x", "w")],
        [h.make_tensor_value_info("y", T.FLOAT, [2])], [numpy_helper.from_array(np.zeros(2, np.float32), "w")],
    )  # fmt: skip
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    values = {"x": np.ones(2, np.float32), "w": np.full(2, 5, np.float32), "y": np.full(2, 6, np.float32)}
    (weight,) = window(model, {0}, values).graph.initializer
    assert numpy_helper.to_array(weight).tolist() == [5, 5]
    (weight,) = window(model, {0}, {name: values[name] for name in ("x", "y")}).graph.initializer
    assert numpy_helper.to_array(weight).tolist() == [0, 0]


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


@pytest.mark.directml
def test_directmls_pow_of_zero_to_the_zero_deep_in_a_chain_is_found_on_real_directml(tmp_path, capsys):
    require_directml()
    power = h.make_node("Pow", ["v", "zero"], ["p"], name="power")
    onnx.save(_chain(40, power, 25, {"zero": np.zeros(4, np.float32)}), tmp_path / "chain.onnx")
    # x + 26 = 0 in the first element: ONNX Runtime's CPU kernel gives 0 ** 0 = 1, DirectML 0
    np.savez(tmp_path / "in.npz", x=np.array([-26, 1, 2, 3], np.float32))
    out = tmp_path / "small.onnx"
    arguments = ["reduce", str(tmp_path / "chain.onnx"), "--backend", "dml", "--reference", "cpu",
                 "--inputs", str(tmp_path / "in.npz"), "-o", str(out)]  # fmt: skip
    assert main(arguments) == 0
    printed = capsys.readouterr().out
    assert [node.name for node in onnx.load(out).graph.node] == ["power"]
    assert (
        "41 nodes cut down to 1 that still show it on dml" in printed and "dml: outputs outside tolerance: p" in printed
    )
    command = printed.splitlines()[-1].split()
    assert main(command[1:]) == 1  # the command printed shows it on real DirectML
    assert "p       dml      DIFFERENT" in capsys.readouterr().out


def _gather_chain(tmp_path):
    """A 42-node chain whose one Gather reads row 31 of a 30-row table for the inputs given."""
    lookup = h.make_node("Gather", ["table", "i"], ["g"], name="lookup", axis=0)
    model = _chain(40, h.make_node("Cast", ["v"], ["i"], name="cast", to=T.INT64), 25,
                   {"table": np.arange(60, dtype=np.float32).reshape(30, 2)})  # fmt: skip
    model.graph.node.insert(27, lookup)
    model.graph.node[28].input[0] = "g"
    onnx.save(model, tmp_path / "chain.onnx")
    np.savez(tmp_path / "in.npz", x=np.array([0, 1, 2, 5], np.float32))
    return tmp_path / "chain.onnx", tmp_path / "in.npz"


@pytest.mark.openvino
def test_reduce_writes_the_window_its_inputs_and_the_command_that_shows_it(tmp_path, capsys):
    # OpenVINO's Gather reads zeros for an out-of-bounds index, DirectML's semantics the tensor's last element
    path, given = _gather_chain(tmp_path)
    out = tmp_path / "small.onnx"
    assert main(["reduce", str(path), "--backend", "openvino", "--inputs", str(given), "-o", str(out)]) == 0
    printed = capsys.readouterr()
    reduced = onnx.load(out)
    assert 1 <= len(reduced.graph.node) <= 3 and "lookup" in [node.name for node in reduced.graph.node]
    onnx.checker.check_model(reduced, full_check=True)
    assert f"42 nodes cut down to {len(reduced.graph.node)} that still show it on openvino" in printed.out
    assert "reduce: the whole model (42 nodes): outputs outside tolerance" in printed.err
    command = printed.out.splitlines()[-1].split()
    assert command[:2] == ["onnx-gather", "parity"] and command[2:] == [
        str(out), "--inputs", str(tmp_path / "small.npz"), "--backends", "openvino", "--reference", "pyop"]  # fmt: skip
    assert main(command[1:]) == 1  # the command printed shows the difference
    assert "DIFFERENT" in capsys.readouterr().out


def test_reduce_says_when_there_is_nothing_to_reduce(tmp_path, capsys):
    path, given = _gather_chain(tmp_path)
    out = tmp_path / "small.onnx"
    assert main(["reduce", str(path), "--backend", "lowered", "--inputs", str(given), "-o", str(out)]) == 1
    assert "lowered agrees with pyop on every output" in capsys.readouterr().out and not out.exists()


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--backend", "pyop"], "--backend and --reference both name pyop"),
        (["--backend", "cpu", "-o", "{model}"], "chain.onnx: is the input"),
        (["--backend", "cpu", "-o", "{folder}/in.onnx"], "in.npz: is the input"),  # its inputs file: the --inputs
        (["--backend", "cpu", "--reference", "cpu"], "both name cpu"),
    ],
)
def test_reduce_refuses_bad_requests_in_one_line(tmp_path, capsys, extra, message):
    path, given = _gather_chain(tmp_path)
    arguments = ["reduce", str(path), "--inputs", str(given), *[a.format(model=path, folder=tmp_path) for a in extra]]
    if "-o" not in arguments:
        arguments += ["-o", str(tmp_path / "small.onnx")]
    before = path.read_bytes()
    assert main(arguments) == 2
    error = capsys.readouterr().err
    assert message in error and len(error.strip().splitlines()) == 1
    assert path.read_bytes() == before


def test_a_backend_that_fails_is_cut_down_to_the_node_it_fails_at(tmp_path, capsys):
    # ONNX Runtime's CPU kernels refuse the out-of-bounds index where DirectML's semantics read memory
    path, given = _gather_chain(tmp_path)
    out = tmp_path / "small.onnx"
    assert main(["reduce", str(path), "--backend", "cpu", "--inputs", str(given), "-o", str(out)]) == 0
    assert [node.name for node in onnx.load(out).graph.node] == ["lookup"]
    assert "cpu: InvalidArgument: " in capsys.readouterr().out


def test_a_reference_that_fails_is_named_with_its_error(tmp_path, capsys):
    # ONNX Runtime's CPU kernels refuse the out-of-bounds index: as the reference, they give no values to feed windows
    path, given = _gather_chain(tmp_path)
    arguments = ["reduce", str(path), "--backend", "pyop", "--reference", "cpu", "--inputs", str(given),
                 "-o", str(tmp_path / "small.onnx")]  # fmt: skip
    assert main(arguments) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"onnx-gather: error: the reference cpu fails on {path} (every value marked as an output): ")
    assert "InvalidArgument: " in line and "'lookup'" in line and line.endswith("; give another --reference")


def test_a_failure_before_the_reference_runs_is_not_called_the_reference_s(tmp_path, capsys, monkeypatch):
    # Marking every value as an output is onnx-gather's own work: its failure is an internal error (exit 3)
    from onnx_gather.runtime import divergence

    def broken(model):
        raise RuntimeError("marking broke")

    monkeypatch.setattr(divergence, "marked", broken)
    path, given = _gather_chain(tmp_path)
    assert main(["reduce", str(path), "--backend", "cpu", "--inputs", str(given), "-o", str(tmp_path / "s.onnx")]) == 3
    error = capsys.readouterr().err
    assert "internal error: RuntimeError: marking broke" in error and "the reference" not in error
