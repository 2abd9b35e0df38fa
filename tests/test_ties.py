"""Ties are not differences: where an output differs from the reference's only by the order of entries whose sort
keys are equal within tolerance (TopK, ArgMax/ArgMin, NonMaxSuppression, and what gathers by their indices), parity
says TIED, with the rows and the key gap, and passes it unless --strict-ties.

Measured: ONNX Runtime's CPU kernels and real DirectML order exactly equal keys by index (TopK, sorted or not, up to
20,000 keys; NonMaxSuppression and ArgMax too), OpenVINO's TopK does not from 64 keys on; and keys a node computes
one unit in the last place apart on one backend can be equal or swapped on another: real DirectML's Sigmoid (as a
detector's scores) reorders them after TopK, the issue's "DIFFERENT 727".
"""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from conftest import SUMMARIES, require_directml
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper

from onnx_gather.app.cli import main
from onnx_gather.runtime.comparison import Tie, Tolerance
from onnx_gather.runtime.ties import judged_tie

N, K = 64, 16
TOLERANCE = Tolerance()


def _topk_model(tmp_path, scores: bool, grown: bool = False) -> str:
    """keys (x, or ``scores``: Sigmoid(x), as a detector's) -> TopK -> the boxes gathered by its indices; and ArgMax
    of the keys; ``grown``: Exp(boxes) too, where backends part in the last place."""
    keys = "scores" if scores else "x"
    nodes = [
        *([h.make_node("Sigmoid", ["x"], ["scores"], name="sigmoid")] if scores else []),
        h.make_node("TopK", [keys, "k"], ["values", "indices"], name="topk", axis=1),
        h.make_node("Gather", ["boxes", "indices"], ["picked"], name="pick", axis=1),
        h.make_node("ArgMax", [keys], ["best"], name="best", axis=1, keepdims=0),
        *([h.make_node("Exp", ["boxes"], ["grown"], name="grow")] if grown else []),
    ]
    inputs = [h.make_tensor_value_info("x", T.FLOAT, [1, N]), h.make_tensor_value_info("boxes", T.FLOAT, [1, N, 4])]
    outputs = [
        h.make_tensor_value_info("values", T.FLOAT, [1, K]),
        h.make_tensor_value_info("picked", T.FLOAT, [1, 1, K, 4]),
        h.make_tensor_value_info("best", T.INT64, [1]),
        *([h.make_tensor_value_info("grown", T.FLOAT, [1, N, 4])] if grown else []),
    ]
    k = numpy_helper.from_array(np.array([K], np.int64), "k")
    path = tmp_path / f"{'scores' if scores else 'ties'}{'_grown' if grown else ''}.onnx"
    graph = h.make_graph(nodes, "ties", inputs, outputs, [k])
    onnx.save(h.make_model(graph, opset_imports=[h.make_opsetid("", 17)], ir_version=10), path)
    return str(path)


def _inputs(tmp_path, near: bool) -> str:
    """``near``: x up to 40 units in the last place above 0.3 (Sigmoid makes keys equal or a unit apart); else
    whole numbers 0 to 3 (many keys exactly equal)."""
    rng = np.random.default_rng(0)
    if near:
        x = (np.float32(0.3).view(np.int32) + rng.integers(0, 40, (1, N)).astype(np.int32)).view(np.float32)
    else:
        x = rng.integers(0, 4, (1, N)).astype(np.float32)
    path = tmp_path / "inputs.npz"
    np.savez(path, x=x, boxes=rng.standard_normal((1, N, 4)).astype(np.float32))
    return str(path)


def _parity(tmp_path, capsys, model: str, inputs: str, *arguments: str) -> tuple[int, dict, list[str]]:
    """parity judged by tolerance alone (--no-exact): the keys here are a unit in the last place apart, whose order
    the float64 yardstick decides, so that it would call a backend ordering them as float64 does within float error
    instead of looking for ties (``test_the_yardstick_orders_near_ties_as_float64_does``)."""
    report = tmp_path / "r.json"
    code = main(["parity", model, "--inputs", inputs, "--report", str(report), "--no-exact", *arguments])
    return code, json.loads(report.read_text()), capsys.readouterr().out.strip().splitlines()


def _row(lines: list[str], output: str, backend: str) -> str:
    (row,) = [line for line in lines if line.split()[:2] == [output, backend]]
    return row


def test_a_topk_whose_tied_keys_come_in_another_order_is_a_tie_with_its_rows_and_key_gap():
    keys = np.array([[3.0, 1.0, 3.0, 2.0, 3.0, 0.5]], np.float32)
    topk = h.make_node("TopK", ["x", "k"], ["v", "i"], axis=1)
    own, theirs = np.array([[0, 2, 4, 3]]), np.array([[4, 0, 2, 3]])
    assert judged_tie(topk, "topk", keys, own, theirs, TOLERANCE) == Tie("topk", "TopK", (0, 1, 2), 0.0)
    assert judged_tie(topk, "topk", keys, own, own, TOLERANCE) == Tie("topk", "TopK", (), 0.0)
    # 2 (index 3) is not tied with 3: another order of keys that differ is no tie
    assert judged_tie(topk, "topk", keys, own, np.array([[0, 2, 3, 4]]), TOLERANCE) is None
    assert judged_tie(topk, "topk", keys, own, np.array([[0, 0, 4, 3]]), TOLERANCE) is None  # an index twice
    assert judged_tie(topk, "topk", keys, own, np.array([[0, 2, 4, 9]]), TOLERANCE) is None  # out of range


def test_keys_a_unit_in_the_last_place_apart_are_tied_within_tolerance_and_not_at_zero():
    near = np.nextafter(np.float32(0.5), np.float32(1))  # 0.5 + 6e-8
    keys = np.array([near, 0.5, 0.1], np.float32)
    topk = h.make_node("TopK", ["x", "k"], ["v", "i"])
    tie = judged_tie(topk, "t", keys, np.array([0, 1]), np.array([1, 0]), TOLERANCE)
    assert tie is not None and tie.rows == (0, 1) and tie.key_gap == pytest.approx(5.96e-8, rel=1e-3)
    assert judged_tie(topk, "t", keys, np.array([0, 1]), np.array([1, 0]), Tolerance(0.0, 0.0)) is None
    # a tie at the cut: another key equal to the last one taken
    keys = np.array([2.0, 1.0, 1.0], np.float32)
    assert judged_tie(topk, "t", keys, np.array([0, 1]), np.array([0, 2]), TOLERANCE).rows == (1,)


def test_argmax_and_non_max_suppression_ties():
    keys = np.array([[1.0, 5.0, 5.0], [2.0, 0.0, 2.0]], np.float32)
    argmax = h.make_node("ArgMax", ["x"], ["i"], axis=1, keepdims=0)
    assert judged_tie(argmax, "a", keys, np.array([1, 0]), np.array([2, 2]), TOLERANCE).rows == (0, 1)
    assert judged_tie(argmax, "a", keys, np.array([1, 0]), np.array([0, 0]), TOLERANCE) is None
    nms = h.make_node("NonMaxSuppression", ["boxes", "scores"], ["selected"])
    scores = np.array([[[0.9, 0.5, 0.9, 0.1]]], np.float32)  # batch 1, class 1, 4 boxes
    own = np.array([[0, 0, 0], [0, 0, 2], [0, 0, 1]])
    swapped = own[[1, 0, 2]]
    assert judged_tie(nms, "n", scores, own, swapped, TOLERANCE) == Tie("n", "NonMaxSuppression", (0, 1), 0.0)
    assert judged_tie(nms, "n", scores, own, own[[0, 2, 1]], TOLERANCE) is None  # 0.5 after 0.9: not tied
    assert judged_tie(nms, "n", scores, own, np.array([[0, 0, 2], [0, 0, 0], [0, 0, 3]]), TOLERANCE) is None


@pytest.mark.openvino
def test_openvino_orders_exactly_equal_keys_otherwise_which_passes_as_tied_unless_strict(tmp_path, capsys):
    model, inputs = _topk_model(tmp_path, scores=False), _inputs(tmp_path, near=False)
    code, document, lines = _parity(tmp_path, capsys, model, inputs, "--backends", "cpu,openvino")
    assert code == 0 and document["verdict"] == "passed"
    assert document["outputs"]["values"]["openvino"]["equal"] is True
    picked = document["outputs"]["picked"]["openvino"]
    assert picked["within_tolerance"] is False and picked["mismatches"] > 0
    (tie,) = picked["ties"]
    assert (tie["node"], tie["op_type"], tie["key_gap"]) == ("topk", "TopK", 0.0) and len(tie["rows"]) > 1
    assert "ties" not in document["outputs"]["picked"]["cpu"]  # the same order: bit-identical
    assert _row(lines, "picked", "openvino").split()[2:4] == ["TIED:", "rows"]
    assert lines[-1] == (
        "PASSED: every output of cpu, openvino is within tolerance of the reference pyop, or apart "
        "only by the order of tied keys (TIED above, on openvino)."
    )
    code, document, lines = _parity(tmp_path, capsys, model, inputs, "--backends", "cpu,openvino", "--strict-ties")
    assert code == 1 and document["verdict"] == "failed" and document["strict_ties"] is True
    assert lines[-1] == (
        "FAILED: outputs outside tolerance on openvino (on openvino only by the order of tied keys: --strict-ties)."
    )


@pytest.mark.openvino
def test_a_tie_beside_a_difference_on_the_same_backend_fails_as_a_difference(tmp_path, capsys):
    model, inputs = _topk_model(tmp_path, scores=False, grown=True), _inputs(tmp_path, near=False)
    arguments = ["--backends", "openvino", "--atol", "0", "--rtol", "0"]
    code, document, lines = _parity(tmp_path, capsys, model, inputs, *arguments)
    assert document["outputs"]["picked"]["openvino"]["ties"][0]["key_gap"] == 0.0  # exactly equal keys
    assert "ties" not in document["outputs"]["grown"]["openvino"]  # Exp's last place: no sort-like node upstream
    assert code == 1 and lines[-1] == "FAILED: outputs outside tolerance on openvino."


@pytest.mark.openvino
def test_near_ties_are_tied_within_tolerance_and_different_at_tolerance_zero(tmp_path, capsys):
    model, inputs = _topk_model(tmp_path, scores=True), _inputs(tmp_path, near=True)
    code, document, _ = _parity(tmp_path, capsys, model, inputs, "--backends", "openvino")
    assert code == 0 and document["outputs"]["picked"]["openvino"]["ties"][0]["key_gap"] > 0
    code, document, lines = _parity(
        tmp_path, capsys, model, inputs, "--backends", "openvino", "--atol", "0", "--rtol", "0"
    )
    assert code == 1 and "ties" not in document["outputs"]["picked"]["openvino"]
    assert _row(lines, "picked", "openvino").split()[2] == "DIFFERENT"


@pytest.mark.openvino
def test_with_all_tensors_tied_intermediate_values_pass_too(tmp_path, capsys):
    model, inputs = _topk_model(tmp_path, scores=False), _inputs(tmp_path, near=False)
    code, document, lines = _parity(tmp_path, capsys, model, inputs, "--backends", "openvino", "--all-tensors")
    assert code == 0 and document["all_tensors"]["rejected"] == {} and document["divergence"] == {"openvino": []}
    assert lines[-1].startswith("PASSED: every output and intermediate value of openvino")
    code, document, _ = _parity(
        tmp_path, capsys, model, inputs, "--backends", "openvino", "--all-tensors", "--strict-ties"
    )
    assert code == 1 and document["all_tensors"]["rejected"] == {"openvino": ["indices"]}
    assert [entry["node"] for entry in document["divergence"]["openvino"]] == ["topk"]


@pytest.mark.directml
def test_real_directml_swaps_near_tied_scores_after_topk_which_parity_calls_tied(tmp_path, capsys):
    require_directml()
    model, inputs = _topk_model(tmp_path, scores=True), _inputs(tmp_path, near=True)
    code, document, lines = _parity(tmp_path, capsys, model, inputs, "--backends", "cpu,dml")
    assert code == 0 and document["verdict"] == "passed"
    values, picked = document["outputs"]["values"]["dml"], document["outputs"]["picked"]["dml"]
    assert values["within_tolerance"] is True and 0 < values["max_abs"] < 1e-6  # Sigmoid's last place
    (tie,) = picked["ties"]
    assert picked["mismatches"] > 0 and (tie["node"], tie["op_type"]) == ("topk", "TopK")
    assert 0 < tie["key_gap"] < 1e-6 and tie["rows"]
    assert _row(lines, "picked", "dml").split()[2] == "TIED:"
    code, document, lines = _parity(tmp_path, capsys, model, inputs, "--backends", "cpu,dml", "--strict-ties")
    assert code == 1 and lines[-1].startswith("FAILED: outputs outside tolerance on dml (on dml only by the order")
    SUMMARIES.append(
        f"TopK over Sigmoid scores a unit in the last place apart ({N} keys, k {K}) on real DirectML: values within "
        f"{values['max_abs']:.3g} of the CPU's; the boxes gathered by its indices differ in {picked['mismatches']} "
        f"positions, TIED: rows {tie['rows']}, key gap {tie['key_gap']:.3g}"
    )
