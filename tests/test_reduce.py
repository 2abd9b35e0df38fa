"""onnx-gather reduce: windows of a graph as models of their own, the search, and models whose divergence sits in one
node deep in a long chain, cut down on another backend and on real DirectML."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import onnx
import pytest
from conftest import require_directml, run_model
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper

from onnx_gather.app.cli import main
from onnx_gather.graphs.extract import constant_values, window
from onnx_gather.runtime import backends
from onnx_gather.runtime.comparison import Tolerance
from onnx_gather.runtime.reduce import Reducer


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
    graph = h.make_graph(
        nodes,
        "chain",
        [h.make_tensor_value_info("x", T.FLOAT, [4])],
        [h.make_tensor_value_info(value, T.FLOAT, None)],
        weights,
    )
    return h.make_model(graph, opset_imports=[h.make_opsetid("", 17)], ir_version=10)


def test_a_window_takes_weights_as_weights_constants_as_weights_and_the_rest_as_inputs():
    graph = h.make_graph(
        [
            h.make_node("Shape", ["w"], ["shape"], name="s"),  # from a weight alone: a constant
            h.make_node("Add", ["x", "w"], ["y"], name="add"),
            h.make_node("Reshape", ["y", "shape"], ["z"], name="reshape"),
            h.make_node("Neg", ["z"], ["out"], name="neg"),
        ],
        "g",
        [h.make_tensor_value_info("x", T.FLOAT, [2])],
        [h.make_tensor_value_info("out", T.FLOAT, [2])],
        [numpy_helper.from_array(np.array([1, 2], np.float32), "w")],
    )
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    assert constant_values(model.graph) == {"w", "shape"}
    values = {
        "x": np.zeros(2, np.float32),
        "shape": np.array([2]),
        "y": np.ones(2, np.float32),
        "z": np.ones(2, np.float32),
        "out": -np.ones(2, np.float32),
    }
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
        [h.make_node("Add", ["x", "w"], ["y"], name="add")],
        "g",
        [h.make_tensor_value_info(name, T.FLOAT, [2]) for name in ("x", "w")],
        [h.make_tensor_value_info("y", T.FLOAT, [2])],
        [numpy_helper.from_array(np.zeros(2, np.float32), "w")],
    )
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    values = {"x": np.ones(2, np.float32), "w": np.full(2, 5, np.float32), "y": np.full(2, 6, np.float32)}
    (weight,) = window(model, {0}, values).graph.initializer
    assert numpy_helper.to_array(weight).tolist() == [5, 5]
    (weight,) = window(model, {0}, {name: values[name] for name in ("x", "y")}).graph.initializer
    assert numpy_helper.to_array(weight).tolist() == [0, 0]


def test_a_window_takes_a_constants_value_from_the_constant_and_gives_none_out():
    # parity --all-tensors and reduce do not mark Constants: the reference's values lack them
    graph = h.make_graph(
        [
            h.make_node("Constant", [], ["two"], name="two", value_floats=[2, 2]),
            h.make_node("Constant", [], ["three"], name="three", value=numpy_helper.from_array(np.full(2, 3.0))),
            h.make_node("Mul", ["x", "two"], ["y"], name="mul"),
            h.make_node("Cast", ["three"], ["z"], name="cast", to=T.FLOAT),
            h.make_node("Add", ["y", "z"], ["out"], name="add"),
        ],
        "g",
        [h.make_tensor_value_info("x", T.FLOAT, [2])],
        [h.make_tensor_value_info("out", T.FLOAT, [2])],
    )
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    values = {"x": np.ones(2, np.float32), "y": np.full(2, 2, np.float32), "z": np.full(2, 3, np.float32)}
    reduced = window(model, {1, 2}, values)
    assert [n.name for n in reduced.graph.node] == ["three", "mul"]
    (weight,) = reduced.graph.initializer
    assert weight.name == "two" and numpy_helper.to_array(weight).tolist() == [2, 2]
    assert [o.name for o in reduced.graph.output] == ["y"]  # not "three", which "cast" uses: it cannot differ
    onnx.checker.check_model(reduced, full_check=True)


def test_a_node_holding_a_subgraph_takes_what_the_subgraph_reads_from_outside():
    branch = h.make_graph([h.make_node("Neg", ["y"], ["b"])], "then", [], [h.make_tensor_value_info("b", T.FLOAT, [2])])
    other = h.make_graph(
        [h.make_node("Identity", ["y"], ["c"])], "else", [], [h.make_tensor_value_info("c", T.FLOAT, [2])]
    )
    graph = h.make_graph(
        [
            h.make_node("Abs", ["x"], ["y"], name="abs"),
            h.make_node("If", ["flag"], ["out"], name="if", then_branch=branch, else_branch=other),
        ],
        "g",
        [h.make_tensor_value_info("x", T.FLOAT, [2]), h.make_tensor_value_info("flag", T.BOOL, [])],
        [h.make_tensor_value_info("out", T.FLOAT, [2])],
    )
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    values = {
        "x": np.ones(2, np.float32),
        "flag": np.array(True),
        "y": np.ones(2, np.float32),
        "out": -np.ones(2, np.float32),
    }
    reduced = window(model, {1}, values)
    assert sorted(i.name for i in reduced.graph.input) == ["flag", "y"]
    onnx.checker.check_model(reduced, full_check=True)


def _reduce(tmp_path, model: onnx.ModelProto, feeds, backend: str, reference: str, out_of_bounds: str = "directml"):
    from onnx_gather.runtime import backends
    from onnx_gather.runtime.comparison import Tolerance
    from onnx_gather.runtime.reduce import Reducer

    path = tmp_path / "chain.onnx"
    onnx.save(model, path)
    reducer = Reducer(
        backends.Model.read(path),
        feeds,
        backends.create(backend, out_of_bounds=out_of_bounds),
        backends.create(reference),
        Tolerance(),
        lambda line: None,
    )
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
    assert found.symptom.detail.startswith("outputs outside tolerance: g (max abs ") and found.minimal
    assert [i.name for i in found.model.graph.input] == ["i"] and found.feeds["i"].tolist() == [26, 27, 28, 31]


def test_a_gather_of_a_constant_deep_in_a_chain_of_constants_is_cut_down_to_itself(tmp_path):
    # every Add takes a Constant, and so does the Gather: the reference's values hold none of them
    table = np.arange(60, dtype=np.float32).reshape(30, 2)
    lookup = h.make_node("Gather", ["table", "i"], ["g"], name="lookup", axis=0)
    cast = h.make_node("Cast", ["v"], ["i"], name="cast", to=T.INT64)
    model = _chain(40, cast, 25)
    model.graph.node.insert(27, lookup)
    model.graph.node[28].input[0] = "g"
    constants = [h.make_node("Constant", [], ["table"], name="table", value=numpy_helper.from_array(table))]
    for position, node in enumerate(model.graph.node):
        if node.op_type == "Add":
            node.input[1] = f"one{position}"
            constants.append(h.make_node("Constant", [], [f"one{position}"], value_float=1.0))
    nodes = [*constants, *model.graph.node]
    del model.graph.initializer[:], model.graph.node[:]
    model.graph.node.extend(nodes)
    found = _reduce(tmp_path, model, {"x": np.array([0, 1, 2, 5], np.float32)}, "lowered", "pyop", "clamp")
    assert found.nodes == ["Gather 'lookup'"] and found.minimal
    (weight,) = found.model.graph.initializer
    assert weight.name == "table" and numpy_helper.to_array(weight).tolist() == table.tolist()


@pytest.mark.directml
def test_directmls_pow_of_zero_to_the_zero_deep_in_a_chain_is_found_on_real_directml(tmp_path, capsys):
    require_directml()
    power = h.make_node("Pow", ["v", "zero"], ["p"], name="power")
    onnx.save(_chain(40, power, 25, {"zero": np.zeros(4, np.float32)}), tmp_path / "chain.onnx")
    # x + 26 = 0 in the first element: ONNX Runtime's CPU kernel gives 0 ** 0 = 1, DirectML 0
    np.savez(tmp_path / "in.npz", x=np.array([-26, 1, 2, 3], np.float32))
    out = tmp_path / "small.onnx"
    arguments = [
        "reduce",
        str(tmp_path / "chain.onnx"),
        "--backend",
        "dml",
        "--reference",
        "cpu",
        "--inputs",
        str(tmp_path / "in.npz"),
        "-o",
        str(out),
    ]
    assert main(arguments) == 0
    printed = capsys.readouterr().out
    assert [node.name for node in onnx.load(out).graph.node] == ["power"]
    assert "41 nodes cut down to 1 that still show it on dml" in printed
    assert (
        "  this window on dml:  outputs outside tolerance: p (max abs 1, 1 mismatches; 1 from exact where cpu is 0)"
        in printed
    )
    assert "does not reproduce" not in printed  # re-run as the printed command runs it, before it was offered
    command = printed.splitlines()[-1].split()
    assert main(command[1:]) == 1  # the command printed shows it on real DirectML
    assert "p       dml      DIFFERENT" in capsys.readouterr().out


def _gather_chain(tmp_path):
    """A 42-node chain whose one Gather reads row 31 of a 30-row table for the inputs given."""
    lookup = h.make_node("Gather", ["table", "i"], ["g"], name="lookup", axis=0)
    model = _chain(
        40,
        h.make_node("Cast", ["v"], ["i"], name="cast", to=T.INT64),
        25,
        {"table": np.arange(60, dtype=np.float32).reshape(30, 2)},
    )
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
        str(out),
        "--inputs",
        str(tmp_path / "small.npz"),
        "--backends",
        "openvino",
        "--reference",
        "pyop",
    ]
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
    printed = capsys.readouterr().out
    assert (
        "  the whole model on cpu: InvalidArgument: " in printed
        and "  this window on cpu:  InvalidArgument: " in printed
    )


def test_a_window_keeps_the_models_declared_dims_symbolic_and_the_rest_of_the_model():
    """A window declares its inputs and outputs as the model does (symbolic dims stay symbolic, as DirectML's provider
    sees them in the whole model), and is the model in all but its graph: IR version, opsets, metadata."""
    graph = h.make_graph(
        [
            h.make_node("Relu", ["x"], ["y"], name="relu"),
            h.make_node("Shape", ["y"], ["s"], name="shape"),
            h.make_node("Reshape", ["y", "s"], ["z"], name="reshape", allowzero=1),
            h.make_node("Unknown", ["z"], ["u"], name="mystery", domain="custom"),
        ],
        "g",
        [h.make_tensor_value_info("x", T.FLOAT, ["batch", None, 4])],
        [h.make_tensor_value_info("u", T.FLOAT, None)],
    )
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17), h.make_opsetid("custom", 1)], ir_version=9)
    model.producer_name, model.doc_string = "pytorch", "the model"
    h.set_model_props(model, {"author": "someone"})
    values = {
        "x": np.ones((2, 3, 4), np.float32),
        "y": np.ones((2, 3, 4), np.float32),
        "s": np.array([2, 3, 4]),
        "z": np.ones((2, 3, 4), np.float32),
        "u": np.ones(5, np.float32),
    }
    reduced = window(model, {2, 3}, values)
    dims = [[d.dim_param or d.dim_value or None for d in v.type.tensor_type.shape.dim] for v in reduced.graph.input]
    assert [v.name for v in reduced.graph.input] == ["s", "y"] and dims[0] == [3]
    assert dims[1][0] == "batch" and dims[1][2] == 4  # not the reference's 2x3x4
    assert dims[1][1] is None or dims[1][1].startswith("unk__")  # unknown, or ONNX inference's name for it
    output = reduced.graph.output[0]
    assert output.name == "u" and [d.dim_value for d in output.type.tensor_type.shape.dim] == [5]  # rank unknown
    assert (reduced.ir_version, reduced.producer_name, reduced.doc_string) == (9, "pytorch", "the model")
    assert list(reduced.opset_import) == list(model.opset_import)
    assert {p.key: p.value for p in reduced.metadata_props} == {"author": "someone"}


def _two_differences(tmp_path):
    """Two outputs that part on OpenVINO: ``far`` by an out-of-bounds Gather (OpenVINO reads 0 where DirectML's
    semantics read the last row: a difference of 59), ``near`` by OpenVINO's own exponential (a few units in the last
    place). Held to atol 1e-9 and rtol 0, both are outside tolerance; the first is the larger by far."""
    rng = np.random.default_rng(3)
    weights = [
        numpy_helper.from_array(rng.standard_normal(256).astype(np.float32), "w"),
        numpy_helper.from_array(np.arange(60, dtype=np.float32).reshape(30, 2), "table"),
        numpy_helper.from_array(np.array(1, np.float32), "one"),
    ]
    nodes = [
        h.make_node("Mul", ["x", "w"], ["scaled"], name="scale"),
        h.make_node("Exp", ["scaled"], ["grown"], name="grow"),
        h.make_node("Add", ["grown", "w"], ["near"], name="shift"),
        h.make_node("Gather", ["table", "ids"], ["rows"], name="lookup", axis=0),
        h.make_node("Add", ["rows", "one"], ["far"], name="bump"),
    ]
    graph = h.make_graph(
        nodes,
        "two",
        [h.make_tensor_value_info("x", T.FLOAT, [256]), h.make_tensor_value_info("ids", T.INT64, [3])],
        [h.make_tensor_value_info("near", T.FLOAT, [256]), h.make_tensor_value_info("far", T.FLOAT, [3, 2])],
        weights,
    )
    onnx.save(h.make_model(graph, opset_imports=[h.make_opsetid("", 17)], ir_version=10), tmp_path / "two.onnx")
    np.savez(tmp_path / "in.npz", x=(rng.standard_normal(256) * 4).astype(np.float32), ids=np.array([0, 31, 2]))
    return tmp_path / "two.onnx", tmp_path / "in.npz"


@pytest.mark.openvino
def test_reduce_chases_the_difference_of_the_size_first_seen_not_a_smaller_drift(tmp_path, capsys):
    path, given = _two_differences(tmp_path)
    tolerance = ["--atol", "1e-9", "--rtol", "0"]
    out = tmp_path / "small.onnx"
    assert main(["parity", str(path), "--backends", "openvino", "--inputs", str(given), *tolerance]) == 1
    assert "near    openvino  DIFFERENT" in capsys.readouterr().out  # the drift is outside tolerance too
    assert main(["reduce", str(path), "--backend", "openvino", "--inputs", str(given), *tolerance, "-o", str(out)]) == 0
    printed = capsys.readouterr()
    assert [node.name for node in onnx.load(out).graph.node] == ["lookup"]
    assert "  the whole model on openvino: outputs outside tolerance: near (max abs " in printed.out
    assert "  this window on openvino:  outputs outside tolerance: rows (max abs 59, 2 mismatches)" in printed.out
    assert "reduce:   run 1: " in printed.err and "left out " in printed.err and "within --max-runs" in printed.err


def test_a_spent_budget_writes_the_smallest_window_so_far_and_says_it_is_not_minimal(tmp_path, capsys):
    path, given = _gather_chain(tmp_path)
    out = tmp_path / "small.onnx"
    arguments = ["reduce", str(path), "--backend", "cpu", "--inputs", str(given), "-o", str(out), "--max-runs", "4"]
    assert main(arguments) == 0
    printed = capsys.readouterr().out
    assert "(4 runs)" in printed and "  Not minimal: the budget (4 runs, 30 minutes) ran out" in printed
    kept = [node.name for node in onnx.load(out).graph.node]
    assert "lookup" in kept and 1 < len(kept) < 42


class _FirstRunsOnly(backends.Cpu):
    """ONNX Runtime's CPU kernels, with every output off by 1 on the first ``runs`` runs only: a backend whose
    symptom comes and goes, as a nondeterministic one's does."""

    def __init__(self, runs: int) -> None:
        super().__init__()
        self.left = runs

    def run(self, model, feeds):
        outcome = super().run(model, feeds)
        if self.left > 0:
            self.left -= 1
            outcome.outputs = {name: value + 1 for name, value in outcome.outputs.items()}
        return outcome


@pytest.mark.parametrize("budget", [[], ["--max-runs", "6"]])
def test_the_progress_estimates_the_runs_to_come_and_bounds_them_by_the_budget(tmp_path, capsys, budget):
    path, given = _gather_chain(tmp_path)
    arguments = ["reduce", str(path), "--backend", "cpu", "--inputs", str(given), "-o", str(tmp_path / "s.onnx")]
    assert main([*arguments, *budget]) == 0
    printed = capsys.readouterr()
    total = int(re.search(r"\((\d+) runs\)", printed.out)[1])  # the whole model's, the windows', the one found again
    said = r"run (\d+): .*\(about (\d+) runs? more by an estimate, at most (\d+) within --max-runs"
    told = [tuple(map(int, found)) for found in re.findall(said, printed.err)]
    assert len(told) == total - 2
    assert all(total - 1 - run <= most for run, _, most in told)  # the runs after each line
    _, last_estimate, last_most = told[-1]
    assert (last_most if budget else last_estimate) == 1  # the budget spent; the search done, the window run again


def test_a_symptom_that_vanishes_is_reported_with_the_smallest_window_that_showed_it(tmp_path):
    model = _chain(12, h.make_node("Neg", ["v"], ["n"], name="negate"), 5)
    path = tmp_path / "chain.onnx"
    onnx.save(model, path)
    reducer = Reducer(
        backends.Model.read(path),
        {"x": np.zeros(4, np.float32)},
        _FirstRunsOnly(5),
        backends.create("pyop"),
        Tolerance(),
        lambda line: None,
    )
    found = reducer.reduce()  # exit 3 before: "showed it once and not again"
    assert "not on a second run (no difference)" in found.note and "may not be deterministic" in found.note
    assert found.symptom.detail.startswith("outputs outside tolerance") and found.runs == 6


def test_a_reference_that_fails_is_named_with_its_error(tmp_path, capsys):
    # ONNX Runtime's CPU kernels refuse the out-of-bounds index: as the reference, they give no values to feed windows
    path, given = _gather_chain(tmp_path)
    arguments = [
        "reduce",
        str(path),
        "--backend",
        "pyop",
        "--reference",
        "cpu",
        "--inputs",
        str(given),
        "-o",
        str(tmp_path / "small.onnx"),
    ]
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


@pytest.mark.directml
def test_directmls_reshape_failure_on_dynamic_shapes_reduces_to_the_nodes_that_show_that_failure(tmp_path, capsys):
    """DirectML fails on Reshape with allowzero=1 and a -1 only where the dims are dynamic, with a code by what takes
    the Reshape's output (8007023E where a node does, 8007000E where it is a graph output; with fixed dims: 80070057
    at session creation). Windows declared with the reference's fixed shapes never showed it again; a window of the
    Reshape alone shows another code. So the 1-minimal window is the Reshape and its consumer."""
    require_directml(wine=True)
    nodes = [
        h.make_node("Add", ["x", "one"], ["a"], name="add"),
        h.make_node("Reshape", ["a", "flat"], ["r"], name="view", allowzero=1),
        h.make_node("Relu", ["r"], ["y"], name="relu"),
    ]
    graph = h.make_graph(
        nodes,
        "view",
        [h.make_tensor_value_info("x", T.FLOAT, ["batch", "sequence", 4])],
        [h.make_tensor_value_info("y", T.FLOAT, ["n"])],
        [numpy_helper.from_array(np.array(1, np.float32), "one"), numpy_helper.from_array(np.array([-1]), "flat")],
    )
    onnx.save(h.make_model(graph, opset_imports=[h.make_opsetid("", 17)], ir_version=10), tmp_path / "view.onnx")
    out = tmp_path / "small.onnx"
    arguments = [
        "reduce",
        str(tmp_path / "view.onnx"),
        "--backend",
        "dml",
        "--reference",
        "cpu",
        "--shape",
        "x:2x3x4",
        "-o",
        str(out),
    ]
    assert main(arguments) == 0
    printed = capsys.readouterr().out
    assert [node.name for node in onnx.load(out).graph.node] == ["view", "relu"]
    whole, window_line = printed.splitlines()[1:3]
    assert "running Reshape node. Name:'view'" in whole and "8007023E" in whole
    assert "8007023E" in window_line
    declared = onnx.load(out).graph.input[0].type.tensor_type.shape.dim
    assert [d.dim_param for d in declared][:2] == ["batch", "sequence"]  # as the model declares it


def _logreg_iris():
    """ONNX Runtime's own sample (onnxruntime/datasets): a classifier whose ZipMap output is a sequence of maps."""
    import onnxruntime

    return Path(onnxruntime.__file__).parent / "datasets" / "logreg_iris.onnx"


def test_a_window_declares_a_sequence_output_as_the_model_does():
    model = onnx.load(_logreg_iris())
    feeds = {"float_input": np.array([[5.1, 3.5], [1.4, 0.2], [6.0, 2.9]], np.float32)}
    values = {**feeds, **dict(zip(["label", "probabilities"], run_model(model, feeds), strict=True))}
    reduced = window(model, set(range(len(model.graph.node))), values)
    declared = {value.name: value.type for value in model.graph.output}
    assert {value.name: value.type for value in reduced.graph.output} == declared  # tensor(string) before
    onnx.checker.check_model(reduced, full_check=True)


def test_the_dml_backend_refuses_an_output_that_is_not_a_tensor_before_running():
    proto = onnx.load(_logreg_iris())
    reason = backends.create("dml").refusal(proto)
    assert reason == (
        "output 'probabilities' is a sequence, not a tensor: the dml backend under Wine carries tensors only"
    )
    assert backends.create("cpu").refusal(proto) is None


def test_a_window_of_a_model_with_external_data_carries_only_the_weights_it_uses(tmp_path, capsys):
    """The window reads its own weights from the model's data file and carries them inside: not a copy of the whole
    data file (a Khmer model from the registry: a 442 KB window came with a 7 MB copy)."""
    big = numpy_helper.from_array(np.ones((512, 1024), np.float32), "big")  # 2 MB, used by the first node only
    table = numpy_helper.from_array(np.arange(60, dtype=np.float32).reshape(30, 2), "table")
    nodes = [h.make_node("ReduceSum", ["big"], ["total"], name="sum", keepdims=0),
             h.make_node("Cast", ["x"], ["i"], name="cast", to=T.INT64),
             h.make_node("Gather", ["table", "i"], ["g"], name="lookup", axis=0),
             h.make_node("Add", ["g", "total"], ["y"], name="add")]  # fmt: skip
    graph = h.make_graph(nodes, "ext", [h.make_tensor_value_info("x", T.FLOAT, [4])],
                         [h.make_tensor_value_info("y", T.FLOAT, [4, 2])], [big, table])  # fmt: skip
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)], ir_version=10)
    folder = tmp_path / "model"
    folder.mkdir()
    onnx.save(model, folder / "ext.onnx", save_as_external_data=True, location="ext.data", size_threshold=0)
    np.savez(tmp_path / "in.npz", x=np.array([0, 1, 2, 31], np.float32))
    out = tmp_path / "out" / "small.onnx"
    out.parent.mkdir()
    arguments = ["reduce", str(folder / "ext.onnx"), "--backend", "cpu", "--reference", "pyop",
                 "--inputs", str(tmp_path / "in.npz"), "-o", str(out)]  # fmt: skip
    assert main(arguments) == 0
    assert sorted(p.name for p in out.parent.iterdir()) == ["small.npz", "small.onnx"]  # no data file beside it
    reduced = onnx.load(out)
    assert [node.name for node in reduced.graph.node] == ["lookup"]
    assert [t.name for t in reduced.graph.initializer] == ["table"]
    assert numpy_helper.to_array(reduced.graph.initializer[0]).tolist() == np.arange(60).reshape(30, 2).tolist()


class _NotOnTheWrittenFile(backends.Cpu):
    """ONNX Runtime's CPU kernels, every output off by 1 except on a file called small.onnx read back: a stand-in for a
    backend whose difference depends on what it sees of the whole model (a fusion), which the repro loses."""

    name = "openvino"

    def run(self, model, feeds):
        outcome = super().run(model, feeds)
        if not (model.as_read and model.path.name == "small.onnx"):
            outcome.outputs = {name: value + 1 for name, value in outcome.outputs.items()}
        return outcome


def test_a_repro_that_does_not_reproduce_with_the_printed_command_is_said_to_be_so(tmp_path, capsys, monkeypatch):
    model = _chain(6, h.make_node("Neg", ["v"], ["n"], name="negate"), 3)
    path, out = tmp_path / "chain.onnx", tmp_path / "small.onnx"
    onnx.save(model, path)
    np.savez(tmp_path / "x.npz", x=np.zeros(4, np.float32))
    create = backends.create
    monkeypatch.setattr(
        backends, "create", lambda name, *rest: _NotOnTheWrittenFile() if name == "openvino" else create(name, *rest)
    )
    arguments = ["reduce", str(path), "--backend", "openvino", "--inputs", str(tmp_path / "x.npz"), "-o", str(out)]
    assert main(arguments) == 0
    printed = capsys.readouterr().out
    assert "Note: it does not reproduce with the command below (no difference there)" in printed
    assert printed.splitlines()[-1].startswith("  onnx-gather parity " + str(out))
