"""Where ONNX Runtime's DirectML session really runs a model: the graph its optimizations leave
(runtime.session_graph), the placement of that graph, DirectML's activation fusion, the partitions and the memory
copies (graphs.placement.session), and check's counts of them; held to the real provider's optimized graph."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import pytest
from conftest import SUMMARIES, require_directml
from onnx import TensorProto, helper

from onnx_gather.graphs import model_io
from onnx_gather.graphs.placement.session import Fate, session
from onnx_gather.graphs.plumbing import graphs
from onnx_gather.runtime.session_graph import optimized

ROOT = Path(__file__).resolve().parents[1]
THIRD_PARTY = Path(__file__).resolve().parent / "third_party"


def _model(nodes, inputs, outputs, initializers=(), opset=17) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def _island() -> onnx.ModelProto:
    """A CPU node (Sin of DOUBLE, which DirectML has no kernel for) between two runs of DirectML nodes, and a path
    around it (Neg) that joins them again."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8])
    nodes = [
        helper.make_node("Relu", ["x"], ["a"], name="r1"),
        helper.make_node("Cast", ["a"], ["b"], to=TensorProto.DOUBLE, name="c1"),
        helper.make_node("Sin", ["b"], ["c"], name="sin"),
        helper.make_node("Cast", ["c"], ["d"], to=TensorProto.FLOAT, name="c2"),
        helper.make_node("Relu", ["d"], ["e"], name="r2"),
        helper.make_node("Neg", ["a"], ["f"], name="neg"),
        helper.make_node("Add", ["e", "f"], ["y"], name="add"),
    ]
    return _model(nodes, [x], [y])


def _fusions() -> onnx.ModelProto:
    """Conv then Relu (DirectML fuses them), Add then Sigmoid (it does not: Add fuses only Relu and LeakyRelu), Add
    then Relu (fused), a Constant, a node of constants (folded) and an Identity (removed)."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 4, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1, 4, 4])
    weight = onnx.numpy_helper.from_array(np.ones((1, 1, 1, 1), np.float32), "w")
    nodes = [
        helper.make_node("Constant", [], ["one"], value=onnx.numpy_helper.from_array(np.ones(1, np.float32)), name="k"),
        helper.make_node("Add", ["one", "one"], ["two"], name="constants"),
        helper.make_node("Conv", ["x", "w"], ["conv"], name="conv"),
        helper.make_node("Relu", ["conv"], ["relu"], name="relu"),
        helper.make_node("Add", ["relu", "two"], ["added"], name="add"),
        helper.make_node("Sigmoid", ["added"], ["sig"], name="sigmoid"),
        helper.make_node("Identity", ["sig"], ["same"], name="identity"),
        helper.make_node("Add", ["same", "x"], ["sum"], name="add2"),
        helper.make_node("Relu", ["sum"], ["y"], name="relu2"),
    ]
    return _model(nodes, [x], [y], [weight])


def test_a_cpu_node_between_directml_nodes_costs_two_copies_and_splits_the_partition():
    model = _island()
    found = session(model, optimized(model))
    where = {r.name: r.placed.provider for r in found.nodes}
    assert where == {n: "DirectML" for n in ("r1", "c1", "c2", "r2", "neg", "add")} | {"sin": "CPU"}
    assert sorted((c.op_type, c.value, c.producer, c.consumers) for c in found.copies) == [
        ("MemcpyFromHost", "c", "sin", ("c2",)),
        ("MemcpyToHost", "b", "c1", ("sin",)),
    ]
    # One partition would wait on Sin, which waits on it: the real provider fuses two (DmlFusedNode_0_0, _1_2)
    assert sorted(found.partitions) == [("c2", "r2", "add"), ("r1", "neg", "c1")]


def test_the_links_are_every_value_one_node_makes_and_another_takes():
    """Each value between two of the session's nodes, once per consumer (the graph's input and output are no node's);
    a copied value is a link too."""
    found = session(_island(), optimized(_island()))
    assert sorted((link.producer, link.value, link.consumer) for link in found.links) == [
        ("c1", "b", "sin"),
        ("c2", "d", "r2"),
        ("neg", "f", "add"),
        ("r1", "a", "c1"),
        ("r1", "a", "neg"),
        ("r2", "e", "add"),
        ("sin", "c", "c2"),
    ]


def test_directml_fuses_an_activation_into_the_node_before_it_as_its_provider_does():
    model = _fusions()
    found = session(model, optimized(model))
    fused = {r.op_type: r.fused_from for r in found.nodes if r.fused_from}
    assert fused == {"DmlFusedConv": ("conv", "relu"), "DmlFusedAdd": ("add2", "relu2")}
    fates = {name: fate for (_, name), (fate, _) in found.fates.items()}
    assert fates == {
        "k": Fate.CONSTANT,
        "constants": Fate.FOLDED,
        "conv": Fate.FUSED,
        "relu": Fate.FUSED,
        "add": Fate.RUNS,
        "sigmoid": Fate.RUNS,
        "identity": Fate.REMOVED,
        "add2": Fate.FUSED,
        "relu2": Fate.FUSED,
    }
    assert not found.copies and len(found.partitions) == 1


def test_no_copy_for_a_value_a_directml_kernel_keeps_in_cpu_memory():
    """DirectML's Shape leaves its output in CPU memory and its Reshape takes the shape there: no copy. A shape
    DirectML computes in device memory (Abs of the shape) is copied to the CPU for the Reshape."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    z = helper.make_tensor_value_info("z", TensorProto.FLOAT, None)
    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name="relu"),
        helper.make_node("Shape", ["r"], ["s"], name="shape"),
        helper.make_node("Reshape", ["x", "s"], ["y"], name="reshape"),
        helper.make_node("Cast", ["r"], ["ri"], to=TensorProto.INT64, name="cast"),
        helper.make_node("ReduceMax", ["ri"], ["m"], keepdims=0, name="max"),
        helper.make_node("Unsqueeze", ["m", "zero"], ["m1"], name="unsqueeze"),
        helper.make_node("Concat", ["m1", "m1"], ["shape2"], axis=0, name="concat"),
        helper.make_node("Reshape", ["x", "shape2"], ["z"], name="reshape2"),
    ]
    zero = onnx.numpy_helper.from_array(np.zeros(1, np.int64), "zero")
    model = _model(nodes, [x], [y, z], [zero])
    found = session(model, optimized(model))
    assert [(c.op_type, c.value) for c in found.copies] == [("MemcpyToHost", "shape2")]


def test_the_cpu_providers_own_casts_and_expanded_functions_are_undone():
    """The CPU provider has no FLOAT16 Sin: ONNX Runtime inserts Casts to FLOAT around it, which a DirectML session
    does not; the session graph holds the Sin of FLOAT16 as DirectML takes it."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT16, [3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT16, [3])
    model = _model([helper.make_node("Sin", ["x"], ["s"], name="sin"), helper.make_node("Neg", ["s"], ["y"])], [x], [y])
    graph = optimized(model).graph
    assert [n.op_type for n in graph.node] == ["Sin", "Neg"]
    assert [list(n.input) for n in graph.node] == [["x"], ["s"]]


def _check_json(model: onnx.ModelProto, folder: Path) -> dict:
    path = folder / "m.onnx"
    onnx.save(model, path)
    done = subprocess.run(
        [sys.executable, "-m", "onnx_gather", "check", str(path), "--json"], capture_output=True, text=True, cwd=ROOT
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_check_counts_nodes_as_the_session_runs_them(tmp_path):
    document = _check_json(_fusions(), tmp_path)
    fates = {n["name"]: (n["provider"], n.get("session"), n.get("session_node")) for n in document["nodes"]}
    assert fates["k"][1] == "made an initializer" and fates["constants"][1] == "folded"
    assert fates["identity"][1] == "removed"
    assert fates["conv"] == ("DirectML", "fused", "fused op ('conv') + ('relu')")
    assert document["summary"][0] == (
        "9 nodes at DirectML feature level 4.1: 6 on DirectML, 0 on the CPU provider, 3 run by no provider "
        "(1 Constants made initializers, 1 folded into constants, 1 removed by ONNX Runtime's optimizations)."
    )
    assert document["summary"][1] == (
        "ONNX Runtime's session runs 4 nodes (4 nodes of the model fused into 2 by its optimizations): 4 on DirectML "
        "in 1 partition, 0 on the CPU provider; no memory copy between them."
    )


def test_check_names_each_copy_with_the_nodes_that_cause_it(tmp_path):
    path = tmp_path / "island.onnx"
    onnx.save(_island(), path)
    done = subprocess.run(
        [sys.executable, "-m", "onnx_gather", "check", str(path)], capture_output=True, text=True, cwd=ROOT
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert "copy     MemcpyToHost of 'b' from DirectML to the CPU: made by 'c1', taken by 'sin'" in lines
    assert "copy     MemcpyFromHost of 'c' from the CPU to DirectML: made by 'sin', taken by 'c2'" in lines
    assert lines[-1] == (
        "ONNX Runtime's session runs 7 nodes: 6 on DirectML in 2 partitions, 1 on the CPU provider; 2 memory copies "
        "between them (1 MemcpyFromHost, 1 MemcpyToHost)."
    )
    document = _check_json(_island(), tmp_path)
    assert {tuple(p) for p in document["session"]["partitions"]} == {("r1", "neg", "c1"), ("c2", "r2", "add")}
    assert document["session"]["copies"][0]["consumers"] == ["sin"]


def test_check_of_a_converted_model_says_it_counts_the_model_as_it_is(tmp_path):
    from onnx_gather.graphs.convert import convert

    converted, _ = convert(model_io.load(ROOT / "models" / "sample.onnx"))
    document = _check_json(converted, tmp_path)
    assert document["session"] is None
    assert any("counted as it is" in line for line in document["summary"])


# --- held to the real provider: its optimized graph (runner.exe `save`) and its placement log


def _real(path: Path) -> tuple[dict[str, tuple[str, str]], Counter, list[tuple[str, str]], int]:
    """The real session of the model at ``path``: each named node of its graphs by name, its provider and op
    type; the nameless ones counted by provider and op type; the copies (op type, value); the DmlFusedNodes of the
    session with DirectML's graph fusion on."""
    from onnx_gather.directml import worker

    runner = worker.shared()
    with tempfile.TemporaryDirectory() as folder:
        written = Path(folder) / "optimized.onnx"
        loaded = runner.load(path, fallback=True, optimized=written)
        runner.free(loaded)
        every = [node for graph in graphs(onnx.load(written, load_external_data=False)) for node in graph.node]
    fused = runner.load(path, fallback=True)
    runner.free(fused)
    listed: dict[str, str] = {}
    for provider, entries in loaded.placement.items():
        for entry in entries:
            listed[re.sub(r"#\d+ ", "", entry.partition(" (")[2].removesuffix(")"))] = _PROVIDERS[provider]
    only = _PROVIDERS[next(iter(loaded.placed))] if len(loaded.placed) == 1 else None
    named, nameless = {}, Counter()
    for node in every:
        if node.op_type.startswith("Memcpy"):
            continue
        name = re.sub(r"#\d+ ", "", node.name)
        if name:
            named[name] = (listed.get(name, only), node.op_type)
        else:
            nameless[(only, node.op_type)] += 1
    if only is None:  # the log names the nameless nodes' ops, by provider: "Concat ()"
        nameless = Counter(
            (_PROVIDERS[p], entry.partition(" (")[0])
            for p, entries in loaded.placement.items()
            for entry in entries
            if entry.endswith(" ()")
        )
    copies = [(n.op_type, n.input[0].removesuffix("_DmlExecutionProvider")) for n in every]
    copies = sorted(copy for copy in copies if copy[0].startswith("Memcpy"))
    dml_fused = sum(entry.startswith("DmlFusedNode") for e in fused.placement.values() for entry in e)
    return named, nameless, copies, dml_fused or (fused.placed.get("DmlExecutionProvider", 0) == 1)


_PROVIDERS = {"DmlExecutionProvider": "DirectML", "CPUExecutionProvider": "CPU"}


def _models() -> list[Path]:
    return [
        ROOT / "models" / "sample.onnx",
        ROOT / "models" / "pow_chain.onnx",
        *sorted(THIRD_PARTY.glob("*/*.onnx")),
    ]


@pytest.mark.directml
@pytest.mark.slow
def test_the_session_is_the_real_providers(tmp_path):
    """Every node the real session runs (subgraphs' too) placed where it is, every copy it inserts, on the test models
    and the third-party ones; where the installed ONNX Runtime's optimizer (newer than 1.24.4) folds a shape
    computation that 1.24.4 runs, that node is missing here, never placed elsewhere."""
    require_directml(wine=True)
    models = [p for p in _models() if p.is_file()]
    if len(models) < 10:
        pytest.skip("the third-party models are missing: run python tools/fetch_models.py (the README's test command)")
    rows, total, agreeing = [], 0, 0
    for path in models:
        real, real_nameless, real_copies, _ = _real(path)
        model = model_io.load(path)
        found = session(model, optimized(model, path))
        running = [r for r in found.nodes if r.placed.why.runs]
        mine = {r.name: (r.placed.provider, r.op_type) for r in running if " -> " not in r.name}
        nameless = Counter((r.placed.provider, r.op_type) for r in running if " -> " in r.name)
        assert not nameless - real_nameless, f"{path.name}: {nameless - real_nameless}"
        misplaced = {k: (v, mine[k]) for k, v in real.items() if k in mine and mine[k] != v}
        missing = [k for k in real if k not in mine] + list((real_nameless - nameless).elements())
        assert not misplaced, f"{path.name}: {misplaced}"
        assert sorted((c.op_type, c.value) for c in found.copies) == real_copies, path.name
        assert len(missing) <= len(real) // 40, f"{path.name}: {missing}"
        count = len(real) + sum(real_nameless.values())
        total += count
        agreeing += count - len(missing)
        rows.append(f"  {path.name:<24} {count:>5} nodes, {len(missing)} folded here, {len(real_copies)} copies")
    SUMMARIES.append(
        f"check's session against the real provider's optimized graph: {agreeing:,} of {total:,} nodes placed as "
        "it places them (the rest folded by the installed ONNX Runtime), every copy\n" + "\n".join(rows)
    )


@pytest.mark.directml
def test_the_partitions_are_the_ones_directml_fuses(tmp_path):
    """Where every shape is static, DirectML's graph fusion compiles each partition into one DmlFusedNode."""
    require_directml(wine=True)
    for model in (_island(), model_io.load(ROOT / "models" / "pow_chain.onnx")):
        path = tmp_path / "m.onnx"
        onnx.save(model, path)
        _, _, _, fused = _real(path)
        assert len(session(model, optimized(model)).partitions) == fused
