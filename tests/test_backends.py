"""Backends, for real: ONNX Runtime, the custom ops, the lowered graph, OpenVINO; CUDA and DirectML where present."""

from __future__ import annotations

import json
import platform

import numpy as np
import onnx
import pytest
from conftest import assert_all_identical, require_directml
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper

from onnx_gather.app.cli import main
from onnx_gather.app.demo import sample_model_path
from onnx_gather.directml import worker
from onnx_gather.directml.process import DirectMlError
from onnx_gather.graphs.convert import to_dml
from onnx_gather.runtime import backends
from onnx_gather.runtime import model as model_module
from onnx_gather.runtime.comparison import Tolerance
from onnx_gather.runtime.inputs import Feeds
from onnx_gather.runtime.parity import run_parity

SAMPLE = backends.Model.read(sample_model_path())
IN_RANGE = {"token_ids": np.random.default_rng(3).permutation(32)[:18].reshape(3, 6)}


def _save(tmp_path, nodes, inputs, outputs, initializers=()):
    graph = h.make_graph(nodes, "model", inputs, outputs, initializer=list(initializers))
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)], ir_version=10)
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "model.onnx"
    onnx.save(model, path)
    return backends.Model.read(path)


def _run(name, model, feeds):
    backend = backends.create(name)
    assert backend.unavailable() is None, backend.unavailable()
    return backend.run(model, feeds).outputs


OPENVINO = pytest.param("openvino", marks=pytest.mark.openvino)


@pytest.mark.parametrize("name", ["pyop", "cpu", "lowered", OPENVINO])
def test_the_cpu_routes_and_openvino_run_here(name):
    assert backends.create(name).unavailable() is None


@pytest.mark.parametrize("name", ["cpu", "lowered", OPENVINO])
def test_backend_agrees_with_dml_semantics_on_in_range_indices(name):
    reference = _run("pyop", SAMPLE, IN_RANGE)
    assert_all_identical(list(_run(name, SAMPLE, IN_RANGE).values()), list(reference.values()))


@pytest.mark.parametrize(
    "name", ["pyop", "cpu", "lowered", OPENVINO, "evaluator", pytest.param("dml", marks=pytest.mark.directml)]
)
def test_an_input_with_a_default_takes_the_value_fed(tmp_path, name):
    # From IR version 4 a graph input that an initializer also provides is a default, which a feed overrides
    if name == "dml":
        require_directml()
    table = numpy_helper.from_array(np.arange(10, 16, dtype=np.float32), "table")
    node = h.make_node("Gather", ["table", "i"], ["y"], name="lookup", axis=0)
    inputs = [h.make_tensor_value_info(n, t, [d]) for n, t, d in (("table", T.FLOAT, 6), ("i", T.INT64, 2))]
    model = _save(tmp_path, [node], inputs, [h.make_tensor_value_info("y", T.FLOAT, [2])], [table])
    fed = {"i": np.array([1, 5]), "table": np.arange(20, 26, dtype=np.float32)}
    assert _run(name, model, {"i": fed["i"]})["y"].tolist() == [11, 15]
    assert _run(name, model, fed)["y"].tolist() == [21, 25]
    assert [t.name for t in model.proto.graph.initializer] == ["table"]  # the model itself is left as it was


@pytest.fixture
def out_of_range_models(tmp_path):
    """A Gather and a GatherElements over six values, 10 to 15."""
    data = numpy_helper.from_array(np.arange(10, 16, dtype=np.float32), "data")
    models = []
    for op in ("Gather", "GatherElements"):
        node = h.make_node(op, ["data", "i"], ["y"], name=op.lower(), axis=0)
        i, y = h.make_tensor_value_info("i", T.INT64, [4]), h.make_tensor_value_info("y", T.FLOAT, [4])
        models.append(_save(tmp_path / op, [node], [i], [y], [data]))
    return models


OUT_OF_RANGE = {"i": np.array([1, 7, -1, -7])}  # 6 rows: 7 and -7 are out of range


@pytest.mark.openvino
def test_openvino_gather_reads_zero_out_of_range(out_of_range_models):
    gather, _ = out_of_range_models
    assert _run("openvino", gather, OUT_OF_RANGE)["y"].tolist() == [11, 0, 15, 0]


@pytest.mark.openvino
def test_openvino_gather_elements_fails_out_of_range(out_of_range_models):
    _, elements = out_of_range_models
    with pytest.raises(RuntimeError, match="indices values of GatherElement exceed data size"):
        _run("openvino", elements, OUT_OF_RANGE)  # in inference: an error, not a model it could not run


def _plus(name: str, value: float) -> onnx.GraphProto:
    """A subgraph computing ``x + value`` from the enclosing graph's ``x``, as ``{name}_y``."""
    constant = numpy_helper.from_array(np.full(2, value, np.float32), f"{name}_c")
    add = h.make_node("Add", ["x", constant.name], [f"{name}_y"])
    return h.make_graph([add], name, [], [h.make_tensor_value_info(f"{name}_y", T.FLOAT, [2])], [constant])


def _loop(trip_dims: list, condition_dims: list, body_if: bool = False) -> tuple[list, list]:
    """A Loop adding x to its carried value ``trip`` times (its nodes and inputs); with ``body_if`` the body adds
    through an If on its condition input, reshaped to [1]."""
    if body_if:
        reshape = h.make_node("Reshape", ["c", "one"], ["c1"])
        add = h.make_node("If", ["c1"], ["ao"], then_branch=_plus("then", 1.0), else_branch=_plus("else", -1.0))
        nodes, weights = [reshape, add], [numpy_helper.from_array(np.array([1], np.int64), "one")]
    else:
        nodes, weights = [h.make_node("Add", ["a", "x"], ["ao"])], []
    body = h.make_graph(
        [h.make_node("Identity", ["c"], ["co"]), *nodes],
        "body",
        [
            h.make_tensor_value_info(n, t, d)
            for n, t, d in (("i", T.INT64, []), ("c", T.BOOL, None), ("a", T.FLOAT, [2]))
        ],
        [h.make_tensor_value_info("co", T.BOOL, None), h.make_tensor_value_info("ao", T.FLOAT, [2])],
        weights,
    )
    inputs = [("trip", T.INT64, trip_dims), ("cond", T.BOOL, condition_dims), ("x", T.FLOAT, [2])]
    loop = h.make_node("Loop", ["trip", "cond", "x"], ["y"], name="loop", body=body)
    return [loop], [h.make_tensor_value_info(*value) for value in inputs]


def _if(condition_dims: list) -> tuple[list, list]:
    node = h.make_node(
        "If", ["cond"], ["y"], name="if", then_branch=_plus("then", 1.0), else_branch=_plus("else", -1.0)
    )
    return [node], [
        h.make_tensor_value_info("cond", T.BOOL, condition_dims),
        h.make_tensor_value_info("x", T.FLOAT, [2]),
    ]


# What OpenVINO 2026.4 does not take, though ONNX Runtime runs it, and why in its words: its ONNX front end cannot
# convert an If or Loop whose condition or trip count has rank 2, or a Loop whose body branches on its condition
# input (Loops it converts otherwise: scan outputs, growing values, no trip count); its CPU plugin cannot compile an
# input of unknown rank.
NOT_TAKEN = {
    "if-condition-1x1": (_if([1, 1]), "convert the model: If-17: Rank of If condition input must be equal to 0 or 1"),
    "loop-condition-1x1": (
        _loop([], [1, 1]),
        "convert the model: Loop-17: Rank of ExecutionCondition input must be equal to 0 or 1",
    ),
    "loop-trip-count-1x1": (
        _loop([1, 1], []),
        "convert the model: Loop-17: Rank of TripCount input must be equal to 0 or 1",
    ),
    "loop-body-if-on-its-condition": (
        _loop([], [], body_if=True),
        "convert the model: Loop-17: Model references undeclared parameters: opset1::Parameter c () -> (boolean[...])",
    ),
    "input-of-unknown-rank": (
        ([h.make_node("Neg", ["x"], ["y"], name="neg")], [h.make_tensor_value_info("x", T.FLOAT, None)]),
        "compile the model: Unexpected: CPU plug-in doesn't support Parameter operation with dynamic rank. "
        "Operation name: x",
    ),
}


@pytest.mark.openvino
@pytest.mark.parametrize("kind", NOT_TAKEN)
def test_a_model_openvino_cannot_convert_or_compile_is_one_it_could_not_run(tmp_path, capsys, no_directml, kind):
    (nodes, inputs), reason = NOT_TAKEN[kind]
    model = _save(tmp_path, nodes, inputs, [h.make_tensor_value_info("y", T.FLOAT, [2])])
    report, shape = tmp_path / "report.json", ["--shape", "x:2"]
    assert main(["parity", str(model.path), *shape, "--report", str(report)]) == 0  # the backends defaulted
    document = json.loads(report.read_text())
    openvino = document["backends"]["openvino"]
    assert openvino["status"] == "skipped" and openvino["reason"] == f"OpenVINO cannot {reason}"
    assert document["verdict"] == "partial" and document["backends"]["cpu"]["status"] == "ok"
    skipped = [name for name, entry in document["backends"].items() if entry["status"] == "skipped"]
    assert capsys.readouterr().out.strip().splitlines()[-1] == (
        "PARTIAL: every output of cpu, lowered, dmlsim is within tolerance of the reference pyop; could not run: "
        f"{', '.join(skipped)} (see above)."
    )
    assert main(["parity", str(model.path), *shape, "--backends", "cpu,openvino"]) == 4  # named: incomplete
    assert main(["run", str(model.path), *shape, "--backend", "openvino"]) == 4
    assert capsys.readouterr().err.strip().splitlines()[-1] == f"onnx-gather: cannot run: OpenVINO cannot {reason}"
    out = tmp_path / "small.onnx"
    assert main(["reduce", str(model.path), *shape, "--backend", "openvino", "-o", str(out)]) == 4  # not a symptom
    assert capsys.readouterr().err.strip().splitlines()[-1].endswith(f"OpenVINO cannot {reason}") and not out.exists()


@pytest.mark.parametrize("model", [0, 1], ids=["Gather", "GatherElements"])
def test_onnxruntime_cpu_fails_out_of_range(out_of_range_models, model):
    with pytest.raises(Exception, match=r"(?i)out of|bounds|range"):
        _run("cpu", out_of_range_models[model], OUT_OF_RANGE)


@pytest.mark.parametrize("model", [0, 1], ids=["Gather", "GatherElements"])
@pytest.mark.parametrize("name", ["pyop", "lowered"])
@pytest.mark.parametrize(
    ("mode", "expected"),
    # DirectML reads index 7 at offset 7, clamped to the last element; -7 as -1 + 2^32, clamped too.
    [("directml", [11, 15, 15, 15]), ("clamp", [11, 15, 15, 10]), ("zero", [11, 0, 15, 0])],
)
def test_dml_semantics_out_of_range_in_each_mode(out_of_range_models, model, name, mode, expected):
    backend = backends.create(name, out_of_bounds=mode)
    assert backend.run(out_of_range_models[model], OUT_OF_RANGE).outputs["y"].tolist() == expected


def test_pyop_counts_out_of_bounds_indices_per_node_inside_a_loop(tmp_path):
    body = h.make_graph(
        [
            h.make_node("Gather", ["table", "ids"], ["row"], name="inner_lookup", axis=0),
            h.make_node("Identity", ["cond_in"], ["cond_out"]),
        ],
        "body",
        [h.make_tensor_value_info("n", T.INT64, []), h.make_tensor_value_info("cond_in", T.BOOL, [])],
        [h.make_tensor_value_info("cond_out", T.BOOL, []), h.make_tensor_value_info("row", T.FLOAT, [3, 2])],
    )
    model = _save(
        tmp_path,
        [
            h.make_node("Loop", ["trips", ""], ["rows"], name="loop", body=body),
            h.make_node("Gather", ["table", "ids"], ["direct"], name="outer_lookup", axis=0),
        ],
        [
            h.make_tensor_value_info("table", T.FLOAT, [4, 2]),
            h.make_tensor_value_info("ids", T.INT64, [3]),
            h.make_tensor_value_info("trips", T.INT64, []),
        ],
        [h.make_tensor_value_info("rows", T.FLOAT, [None, 3, 2]), h.make_tensor_value_info("direct", T.FLOAT, [3, 2])],
    )
    feeds = {"table": np.ones((4, 2), np.float32), "ids": np.array([9, 0, -5]), "trips": np.array(3)}
    outcome = backends.create("pyop").run(model, feeds)
    assert outcome.out_of_bounds == {"inner_lookup": 6, "outer_lookup": 2}  # 2 per run, the loop runs 3 times


def test_cuda_agrees_on_in_range_indices_where_present():
    backend = backends.create("cuda")
    if backend.unavailable() is not None:
        pytest.skip(backend.unavailable())
    reference = _run("pyop", SAMPLE, IN_RANGE)
    assert_all_identical(list(backend.run(SAMPLE, IN_RANGE).outputs.values()), list(reference.values()))


def test_cuda_that_is_missing_says_why():
    backend = backends.create("cuda")
    if backend.unavailable() is None:
        pytest.skip("cuda is available here")
    assert "onnxruntime has no CUDAExecutionProvider" in backend.unavailable()


@pytest.mark.directml
def test_real_directml_runs_the_sample_model_bit_identical_with_the_custom_ops():
    require_directml()
    outcome = backends.create("dml").run(SAMPLE, IN_RANGE)
    reference = _run("pyop", SAMPLE, IN_RANGE)
    assert_all_identical(list(outcome.outputs.values()), list(reference.values()))
    assert outcome.placement == {"DmlExecutionProvider": {"nodes": 6, "names": []}}  # every node on DirectML


@pytest.mark.directml
def test_a_failure_of_the_cpu_provider_beside_directml_is_said_to_be_its(tmp_path, capsys):
    # DirectML takes no STRING: ONNX Runtime runs the GatherElements on its CPU provider, whose kernel refuses index 5
    require_directml(wine=True)  # the runner's placement log tells where each node ran
    graph = h.make_graph(
        [
            h.make_node("GatherElements", ["words", "i"], ["picked"], name="pick", axis=0),
            h.make_node("Neg", ["x"], ["y"], name="negate"),
        ],
        "mixed",
        [
            h.make_tensor_value_info("words", T.STRING, [3]),
            h.make_tensor_value_info("i", T.INT64, [2]),
            h.make_tensor_value_info("x", T.FLOAT, [2]),
        ],
        [h.make_tensor_value_info("picked", T.STRING, [2]), h.make_tensor_value_info("y", T.FLOAT, [2])],
    )
    model = tmp_path / "mixed.onnx"
    onnx.save(h.make_model(graph, opset_imports=[h.make_opsetid("", 17)], ir_version=10), model)
    np.savez(tmp_path / "in.npz", words=np.array(["a", "b", "c"]), i=np.array([0, 5]), x=np.ones(2, np.float32))
    assert main(["run", str(model), "--backend", "dml", "--inputs", str(tmp_path / "in.npz")]) == 1
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert f"onnx-gather: dml failed on {model}: FallbackFailure: GatherElements node 'pick' ran on " in line
    assert "CPUExecutionProvider, DirectML not taking it, and failed there: RUN: Non-zero status code" in line
    assert "Known DirectML failures" not in line  # not DirectML's


def test_a_run_failure_is_said_to_be_the_provider_s_that_ran_the_node():
    # ONNX Runtime names the failing node; its placement log, where the node went (by name only where the model's
    # nodes went to more than one provider)
    error = DirectMlError(
        "RUN: Non-zero status code returned while running GatherElements node. Name:'pick' "
        "Status Message: GatherElements op: Out of range value in index tensor"
    )
    both = worker.Loaded(
        0, 0, [], [], {"DmlExecutionProvider": ["Neg (negate)"], "CPUExecutionProvider": ["GatherElements (pick)"]}
    )
    alone = worker.Loaded(0, 0, [], [], {"CPUExecutionProvider": []}, {"CPUExecutionProvider": 1})
    for loaded in (both, alone):
        fallback = loaded.fallback(error)
        assert fallback.provider == "CPUExecutionProvider"
        assert str(fallback) == (
            f"GatherElements node 'pick' ran on CPUExecutionProvider, DirectML not taking it, and failed there: {error}"
        )
    on_directml = worker.Loaded(0, 0, [], [], {"DmlExecutionProvider": []}, {"DmlExecutionProvider": 1})
    assert on_directml.fallback(error) is None  # DirectML's own failure
    assert alone.fallback(DirectMlError("output 'y': no tensor")) is None  # no node named


@pytest.mark.skipif(platform.system() == "Windows", reason="on Windows dml is the installed provider")
def test_dml_without_set_up_names_the_command(tmp_path, monkeypatch):
    monkeypatch.setenv("ONNX_GATHER_DIRECTML_HOME", str(tmp_path))
    reason = backends.create("dml").unavailable()
    assert reason.startswith("real DirectML is not set up here (onnxruntime-directml 1.24.4's DLLs are not in")
    assert reason.endswith("run `onnx-gather setup-directml` as root")


def test_an_unknown_backend_is_refused():
    with pytest.raises(ValueError, match="unknown backend 'tpu'"):
        backends.create("tpu")


def test_a_parity_run_converts_once_for_each_set_of_parameters(monkeypatch):
    """pyop and lowered share one to_dml; evaluator (FLOAT16 kept) has its own; other feeds convert anew."""
    made = []

    def counting(proto, **options):
        made.append((options["out_of_bounds"], options["native_float16"], len(options["observation"].feeds)))
        return to_dml(proto, **options)

    monkeypatch.setattr(model_module, "to_dml", counting)
    model = backends.Model.read(sample_model_path())
    reference, *others = (backends.create(name) for name in ("pyop", "cpu", "lowered", "evaluator"))
    assert run_parity(model, Feeds(IN_RANGE), others, reference, Tolerance()).passed
    assert made == [("directml", False, 1), ("directml", True, 1)]
    again = {"token_ids": IN_RANGE["token_ids"].copy()}  # equal feeds: the same conversions
    assert run_parity(model, Feeds(again), others, reference, Tolerance()).passed
    assert len(made) == 2
    other = {"token_ids": IN_RANGE["token_ids"][:2]}
    assert run_parity(model, Feeds(other), others, reference, Tolerance()).passed
    assert len(made) == 4
    clamped = backends.create("lowered", out_of_bounds="clamp")
    assert run_parity(model, Feeds(other), [clamped], reference, Tolerance()).passed
    assert made[4:] == [("clamp", False, 1)]
