"""The ``dmlsim`` backend: the model as DirectML computes it, on ONNX Runtime's CPU (graphs.emulate, runtime.dmlsim).

* Every rule of ``placement.known`` says what dmlsim makes of it: a differs rule its emulation or why none, a fails
  rule the failure DirectML gives.
* At each repro of tests/test_known.py (what real DirectML was measured to do there), dmlsim does what the rule says
  DirectML does, or, where the rule has no emulation, says so beside its outputs. tests/test_known.py holds dmlsim to
  real DirectML's own outputs at the same repros, tests/test_peers.py to DirectML's recorded verdicts on the peers'
  cases, tests/test_real_models.py on the third-party models.
* A failure a run's values decide comes from the run; nodes the provider leaves on its CPU provider stay as they are.
* dmlsim runs where real DirectML is not set up and no Wine is found, and parity then runs it by default.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from conftest import require_directml
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper
from test_known import REPROS, UNEMULATED, Repro

from onnx_gather.graphs.bundled import sample_model_path
from onnx_gather.graphs.placement import known
from onnx_gather.graphs.placement.check import check
from onnx_gather.runtime import backends
from onnx_gather.runtime.comparison import Tolerance, compare
from onnx_gather.runtime.dmlsim import EmulatedFailure


def test_every_rule_says_what_dmlsim_makes_of_it():
    for rule in known.RULES:
        if rule.kind == known.DIFFERS:
            assert callable(rule.emulated) or (isinstance(rule.emulated, str) and rule.emulated), rule.name
        else:
            assert rule.emulated is None, rule.name
    assert UNEMULATED == {
        "empty-output",
        "scatter-duplicates",
        "resize-antialias",
        "resize-tf-crop-and-resize",
        "averagepool-3d-dilations-ceil",
        "asin-accuracy",
    }


@pytest.mark.parametrize("repro", [r for r in REPROS if r.failure], ids=lambda r: f"{r.rule}-{r.name}")
def test_each_fails_rule_carries_directmls_failure(repro):
    (verdict,) = [v for v in check(repro.model) if v.node == repro.node]
    (flag,) = [k for k in verdict.known if k.rule == repro.rule]
    assert flag.failure is not None
    assert flag.failure.hresult in repro.failure or (not flag.failure.hresult and "ended" in repro.failure)


def _run(repro: Repro, tmp_path: Path) -> backends.Outcome:
    return backends.create("dmlsim").run(backends.Model(tmp_path / "repro.onnx", repro.model), repro.feeds)


def _reference(repro: Repro, tmp_path: Path) -> list[np.ndarray] | None:
    """What the repro's rule compares DirectML with: the suite case's expected outputs, or ONNX Runtime's CPU's."""
    if repro.expected is not None:
        return repro.expected
    if repro.cpu_fails:
        return None
    model = backends.Model(tmp_path / "repro.onnx", repro.model)
    outputs = backends.create("cpu").run(model, repro.feeds).outputs
    return [outputs[name] for name in model.output_names]


@pytest.mark.parametrize("repro", REPROS, ids=lambda r: f"{r.rule}-{r.name}")
def test_dmlsim_does_at_each_repro_what_the_rule_says_directml_does(repro, tmp_path):
    if repro.failure:
        with pytest.raises(EmulatedFailure) as failure:
            _run(repro, tmp_path)
        message = str(failure.value)
        assert repro.failure in message or ("ended" in repro.failure and "ending the process" in message)
        assert f"at node {repro.node!r}" in message and f"rule {repro.rule}" in message
        return
    outcome = _run(repro, tmp_path)
    outputs = [outcome.outputs[value.name] for value in repro.model.graph.output]
    if repro.rule in UNEMULATED:  # computed as the CPU computes it, and said so
        assert any(f"node {repro.node!r}" in note and f"rule {repro.rule}" in note for note in outcome.notes)
        with pytest.raises(AssertionError):
            repro.differs(outputs, _reference(repro, tmp_path), repro.feeds)
        return
    repro.differs(outputs, _reference(repro, tmp_path), repro.feeds)
    assert outcome.notes[0].startswith("an emulation of DirectML on ONNX Runtime's CPU, not DirectML")


def _view(dims: list) -> onnx.ModelProto:
    """y = Neg(Reshape(x, shape, allowzero=1)), the shape a graph input."""
    nodes = [
        h.make_node("Reshape", ["x", "shape"], ["v"], name="view", allowzero=1),
        h.make_node("Neg", ["v"], ["y"], name="after"),
    ]
    inputs = [h.make_tensor_value_info("x", T.FLOAT, dims), h.make_tensor_value_info("shape", T.INT64, [1])]
    graph = h.make_graph(nodes, "view", inputs, [h.make_tensor_value_info("y", T.FLOAT, None)])
    return h.make_model(graph, opset_imports=[h.make_opsetid("", 17)], ir_version=10)


def test_a_failure_the_values_decide_comes_from_the_run_that_meets_it(tmp_path):
    model = backends.Model(tmp_path / "view.onnx", _view(["n"]))
    dmlsim, x = backends.create("dmlsim"), np.arange(6, dtype=np.float32)
    ran = dmlsim.run(model, {"x": x, "shape": np.array([6])})
    assert ran.outputs["y"].tolist() == (-x).tolist()
    with pytest.raises(EmulatedFailure, match=r"fails when it runs: 8007023E at node 'view' \(rule reshape-allowzero"):
        dmlsim.run(model, {"x": x, "shape": np.array([-1])})


def test_nodes_the_provider_keeps_on_its_cpu_provider_stay_as_they_are(tmp_path):
    # Pow(0, 0) in a shape computation: ONNX Runtime keeps it on the CPU provider, which gives 1, not DirectML's 0
    nodes = [
        h.make_node("Shape", ["x"], ["shape"]),
        h.make_node("Cast", ["shape"], ["dims"], to=T.FLOAT),
        h.make_node("Sub", ["dims", "dims"], ["zeros"]),
        h.make_node("Pow", ["zeros", "zeros"], ["ones"], name="pow"),
        h.make_node("Cast", ["ones"], ["count"], to=T.INT64),
        h.make_node("Expand", ["x", "count"], ["y"]),
    ]
    graph = h.make_graph(
        nodes, "g", [h.make_tensor_value_info("x", T.FLOAT, ["n"])], [h.make_tensor_value_info("y", T.FLOAT, None)]
    )
    proto = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)], ir_version=10)
    (verdict,) = [v for v in check(proto) if v.node == "pow"]
    assert verdict.runs_on == "CPU"
    outcome = backends.create("dmlsim").run(backends.Model(tmp_path / "m.onnx", proto), {"x": np.ones(3, np.float32)})
    assert outcome.outputs["y"].tolist() == [1.0, 1.0, 1.0]  # Expand by [1]: the CPU's 1


def test_a_pow_on_directml_gives_directmls_0(tmp_path):
    weights = [numpy_helper.from_array(np.zeros(2, np.float32), "b")]
    graph = h.make_graph(
        [h.make_node("Pow", ["a", "b"], ["y"], name="pow")],
        "g",
        [h.make_tensor_value_info("a", T.FLOAT, [2])],
        [h.make_tensor_value_info("y", T.FLOAT, [2])],
        weights,
    )
    proto = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)], ir_version=10)
    model = backends.Model(tmp_path / "m.onnx", proto)
    feeds = {"a": np.array([0, 2], np.float32)}
    assert backends.create("dmlsim").run(model, feeds).outputs["y"].tolist() == [0.0, 1.0]
    assert backends.create("cpu").run(model, feeds).outputs["y"].tolist() == [1.0, 1.0]


def test_dmlsim_runs_where_no_wine_is_and_parity_then_runs_it_by_default(tmp_path):
    empty = tmp_path / "bin"
    empty.mkdir()
    environment = {**os.environ, "PATH": str(empty), "ONNX_GATHER_DIRECTML_HOME": str(tmp_path / "no-directml")}
    assert shutil.which("wine", path=environment["PATH"]) is None
    command = [sys.executable, "-m", "onnx_gather", "parity", sample_model_path(), "--shape", "token_ids:4x6"]
    done = subprocess.run(
        [*command, "--int-range", "0:32"], env=environment, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    rows = dict(re.findall(r"^  (\w+) +(ok|skipped|error) ", done.stdout, re.MULTILINE))
    assert rows["dml"] == "skipped" and rows["dmlsim"] == "ok", done.stdout
    assert "dmlsim: an emulation of DirectML on ONNX Runtime's CPU, not DirectML" in done.stdout
    assert re.search(r"^  embeddings +dmlsim +bit-identical ", done.stdout, re.MULTILINE)
    assert "every output of cpu, lowered, openvino, dmlsim is within tolerance of the reference pyop" in done.stdout


def _bundled() -> dict[str, tuple[Path, dict[str, np.ndarray]]]:
    models = Path(sample_model_path()).parent
    ids = np.random.default_rng(0).integers(0, 40, (4, 6))  # ids past the 32 rows too: DirectML's reads
    with np.load(models / "pow_chain.npz") as data:
        pow_feeds = dict(data)
    return {"sample": (models / "sample.onnx", {"token_ids": ids}), "pow_chain": (models / "pow_chain.onnx", pow_feeds)}


@pytest.mark.directml
@pytest.mark.parametrize("name", ["sample", "pow_chain"])
def test_dmlsim_gives_real_directmls_verdict_and_values_on_the_bundled_models(name):
    require_directml()
    path, feeds = _bundled()[name]
    model = backends.Model.read(path)
    dml, dmlsim = backends.create("dml").run(model, feeds), backends.create("dmlsim").run(model, feeds)
    for output in model.output_names:
        tolerance = Tolerance(atol=0, rtol=0) if output in ("embeddings", "ranked_ids") else Tolerance()
        assert compare(dml.outputs[output], dmlsim.outputs[output], tolerance).within_tolerance, output


def test_docs_dmlsim_says_of_every_rule_what_dmlsim_makes_of_it():
    page = (Path(__file__).resolve().parent.parent / "docs" / "dmlsim.md").read_text()
    table = page.split("## The rules and what dmlsim makes of them")[1].split("```")[0]
    rows = [line.split(" | ") for line in table.splitlines() if line.startswith("| `") or line.startswith("| the ")]
    named = {name: row[1] for row in rows for name in re.findall(r"`([a-z0-9-]+)`", row[0])}
    assert set(named) == set(known.rule_names())
    assert {name for name, said in named.items() if said.startswith("not emulated")} == UNEMULATED
    assert {name for name, said in named.items() if said.startswith("DirectML's failure")} == {
        rule.name for rule in known.RULES if rule.kind == known.FAILS
    }


def test_types_onnx_runtimes_python_binding_cannot_carry_go_in_wider_ones(tmp_path):
    import ml_dtypes

    nodes = [
        h.make_node("Cast", ["x"], ["wide"], to=T.FLOAT),
        h.make_node("Add", ["wide", "wide"], ["twice"]),
        h.make_node("Cast", ["twice"], ["y"], to=T.INT4),
    ]
    graph = h.make_graph(
        nodes, "g", [h.make_tensor_value_info("x", T.FLOAT8E4M3FN, [3])], [h.make_tensor_value_info("y", T.INT4, [3])]
    )
    proto = h.make_model(graph, opset_imports=[h.make_opsetid("", 21)], ir_version=10)
    x = np.array([0.5, -1.5, 3], ml_dtypes.float8_e4m3fn)
    outcome = backends.create("dmlsim").run(backends.Model(tmp_path / "m.onnx", proto), {"x": x})
    assert outcome.outputs["y"].dtype == ml_dtypes.int4 and outcome.outputs["y"].astype(int).tolist() == [1, -3, 6]


def test_an_empty_output_beside_others_is_noted_whichever_node_made_it(tmp_path):
    # DirectML's provider leaves the other outputs unwritten after an empty one (docs/semantics.md 9): not emulated
    nodes = [h.make_node("Neg", ["x"], ["y"]), h.make_node("Slice", ["x", "start", "start"], ["z"], name="slice")]
    graph = h.make_graph(
        nodes,
        "g",
        [h.make_tensor_value_info("x", T.FLOAT, [3])],
        [h.make_tensor_value_info("y", T.FLOAT, [3]), h.make_tensor_value_info("z", T.FLOAT, None)],
        [numpy_helper.from_array(np.array([1], np.int64), "start")],
    )
    proto = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)], ir_version=10)
    outcome = backends.create("dmlsim").run(backends.Model(tmp_path / "m.onnx", proto), {"x": np.ones(3, np.float32)})
    assert outcome.outputs["z"].size == 0 and outcome.outputs["y"].tolist() == [-1.0, -1.0, -1.0]
    assert any(note.startswith("output 'z' is empty, and ONNX Runtime's DirectML provider") for note in outcome.notes)
