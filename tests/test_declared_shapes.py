"""An output whose shape contradicts the one the model declares: ONNX Runtime's CPU provider runs it with a warning,
real DirectML fails on it ("Invalid parameter", in the node that makes it) where a fixed dim differs at the same
rank, and runs it where only the rank differs (measured with ONNX Runtime 1.24.4, DirectML 1.15.4). parity says
what the model declares and what was computed, and points to it where a backend failed."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from conftest import require_directml
from onnx import TensorProto as T
from onnx import helper as h

from onnx_gather.app.cli import main
from onnx_gather.runtime.backends import Outcome
from onnx_gather.runtime.parity import BackendRun, Declared, contradicted


def _reshape_model(declared: list) -> onnx.ModelProto:
    """Reshape to a shape given as an input (nothing can infer the output's shape), then Neg; ``y`` declared so."""
    nodes = [
        h.make_node("Reshape", ["x", "shape"], ["r"], name="reshape"),
        h.make_node("Neg", ["r"], ["y"], name="neg"),
    ]
    inputs = [h.make_tensor_value_info("x", T.FLOAT, [2, 3, 4]), h.make_tensor_value_info("shape", T.INT64, [3])]
    graph = h.make_graph(nodes, "reshape", inputs, [h.make_tensor_value_info("y", T.FLOAT, declared)])
    return h.make_model(graph, opset_imports=[h.make_opsetid("", 17)], ir_version=10)


def _parity(tmp_path, capsys, declared: list, backends: str) -> tuple[int, dict, list[str]]:
    path, inputs, report = tmp_path / "m.onnx", tmp_path / "in.npz", tmp_path / "r.json"
    onnx.save(_reshape_model(declared), path)
    np.savez(inputs, x=np.arange(24, dtype=np.float32).reshape(2, 3, 4), shape=np.array([2, 1, 12]))
    code = main(["parity", str(path), "--inputs", str(inputs), "--backends", backends, "--report", str(report)])
    return code, json.loads(report.read_text()), capsys.readouterr().out.strip().splitlines()


@pytest.mark.parametrize(
    "declared, read",
    [
        ([2, 1, 12], None),
        ([2, 1, "n"], None),
        ([None, 1, None], None),
        ([2, 2, "n"], (2, 2, "n")),
        ([1, -1], (1, None)),  # -1 is a dynamic dim, as ONNX Runtime takes it
        ([24], (24,)),
    ],
)
def test_a_fixed_dim_that_differs_or_another_rank_contradicts_the_declaration(declared, read):
    runs = {"pyop": BackendRun("pyop", "ok", outcome=Outcome({"y": np.zeros((2, 1, 12), np.float32)}))}
    expected = [] if read is None else [Declared("y", read, (2, 1, 12), "pyop")]
    assert contradicted(_reshape_model(declared), runs) == expected


def test_parity_says_what_the_model_declares_and_what_the_reference_computed(tmp_path, capsys):
    code, document, lines = _parity(tmp_path, capsys, [2, 2, "n"], "cpu")
    assert code == 0 and document["verdict"] == "passed"  # ONNX Runtime's CPU runs it (and warns)
    assert document["declared_shapes"] == {"y": {"declared": [2, 2, "n"], "computed": [2, 1, 12], "backend": "pyop"}}
    assert (
        "Output 'y': the model declares [2, 2, n], the reference pyop computed 2x1x12 (ONNX Runtime's CPU provider "
        "warns of it; its DirectML provider fails where a fixed dim differs at the same rank)."
    ) in lines
    assert "hint" not in document  # nothing failed
    code, document, lines = _parity(tmp_path, capsys, [2, 1, "n"], "cpu")
    assert "declared_shapes" not in document and not [line for line in lines if "declares" in line]


@pytest.mark.directml
def test_real_directml_fails_on_a_fixed_dim_that_differs_and_parity_points_to_the_declaration(tmp_path, capsys):
    require_directml()
    code, document, lines = _parity(tmp_path, capsys, [2, 2, "n"], "cpu,dml")
    assert code == 1 and document["backends"]["dml"]["status"] == "error"
    assert "running Neg node. Name:'neg'" in document["backends"]["dml"]["reason"]
    assert "Invalid parameter" in document["backends"]["dml"]["reason"]
    assert "the model declares another shape for 'y' than computed (see above)" in document["hint"]
    assert any(
        line.startswith("Output 'y': the model declares [2, 2, n], the reference pyop computed 2x1x12")
        for line in lines
    )
    code, document, _ = _parity(tmp_path, capsys, [1, -1], "cpu,dml")  # another rank: DirectML runs it
    assert code == 0 and document["declared_shapes"]["y"]["declared"] == [1, None]
