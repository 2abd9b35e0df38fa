"""Honest verdicts: a run never passes with nothing compared. A backend named on the command line that cannot run
here (not installed, not set up) or cannot take the model (OpenVINO lacking an operator, ONNX Runtime's CPU kernels
on DML ops) leaves the run incomplete, exit 4, unless --allow-skipped; with the backends defaulted, what could not run
is listed and one besides the reference must have compared every output; PASSED only where every backend asked for
compared every output."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper as h

from onnx_gather.app.cli import main
from onnx_gather.app.demo import sample_model_path
from onnx_gather.runtime import backends

SAMPLE = ["--shape", "token_ids:4x6", "--int-range", "0:32"]


def _parity(tmp_path, capsys, *arguments: str) -> tuple[int, dict, str]:
    """Exit code, JSON report and the verdict's line (the last but a hint) of a parity run of the sample model."""
    report = tmp_path / "r.json"
    code = main(["parity", sample_model_path(), *SAMPLE, "--report", str(report), *arguments])
    lines = [line for line in capsys.readouterr().out.strip().splitlines() if not line.startswith("Hint: ")]
    return code, json.loads(report.read_text()), lines[-1]


def test_named_backends_that_cannot_run_here_leave_the_run_incomplete(tmp_path, capsys, no_directml):
    code, document, last = _parity(tmp_path, capsys, "--backends", "cuda,dml")
    assert code == 4
    assert document["verdict"] == "incomplete" and document["passed"] is False
    assert {name: entry["status"] for name, entry in document["backends"].items()} == {
        "pyop": "ok",
        "cuda": "skipped",
        "dml": "skipped",
    }
    assert last == (
        "INCOMPLETE: cuda, dml could not run, though named (--allow-skipped accepts that); no backend "
        "besides the reference compared every output."
    )


def test_allowing_skips_still_needs_one_backend_compared(tmp_path, capsys, no_directml):
    code, document, last = _parity(tmp_path, capsys, "--backends", "cuda,dml", "--allow-skipped")
    assert code == 4 and document["verdict"] == "incomplete"
    assert last == "INCOMPLETE: no backend besides the reference compared every output."


def test_one_named_backend_missing_is_incomplete_unless_allowed(tmp_path, capsys, no_directml):
    code, document, last = _parity(tmp_path, capsys, "--backends", "pyop,cpu,dml")
    assert code == 4 and document["verdict"] == "incomplete" and not document["passed"]
    assert last == "INCOMPLETE: dml could not run, though named (--allow-skipped accepts that)."
    code, document, last = _parity(tmp_path, capsys, "--backends", "pyop,cpu,dml", "--allow-skipped")
    assert code == 0 and document["verdict"] == "partial" and document["passed"] is True
    assert (
        last
        == "PARTIAL: every output of cpu is within tolerance of the reference pyop; could not run: dml (see above)."
    )
    assert "PASSED" not in last


def test_every_named_backend_compared_passes(tmp_path, capsys):
    code, document, last = _parity(tmp_path, capsys, "--backends", "pyop,cpu,lowered")
    assert code == 0 and document["verdict"] == "passed" and document["passed"] is True
    assert last == "PASSED: every output of cpu, lowered is within tolerance of the reference pyop."


def test_defaulted_backends_list_what_could_not_run_and_never_say_passed_then(tmp_path, capsys, no_directml):
    code, document, last = _parity(tmp_path, capsys)
    skipped = [name for name, entry in document["backends"].items() if entry["status"] == "skipped"]
    assert "dml" in skipped  # not set up here (the fixture)
    assert code == 0 and document["verdict"] == "partial" and document["passed"] is True
    assert last.startswith("PARTIAL: every output of cpu, lowered") and last.endswith(
        f"could not run: {', '.join(skipped)} (see above)."
    )


def test_a_difference_fails_and_says_what_could_not_run_too(tmp_path, capsys, no_directml):
    code, document, last = _parity(tmp_path, capsys, "--backends", "cpu,dml", "--int-range", "0:40")
    assert code == 1 and document["verdict"] == "failed"
    assert last == "FAILED: errors on cpu; could not run: dml."


@pytest.mark.openvino
def test_openvino_lacking_an_operator_cannot_take_the_model(tmp_path, capsys):
    graph = h.make_graph(
        [h.make_node("Det", ["x"], ["y"], name="det")],
        "det",
        [h.make_tensor_value_info("x", T.FLOAT, [3, 3])],
        [h.make_tensor_value_info("y", T.FLOAT, [])],
    )
    path = tmp_path / "det.onnx"
    onnx.save(h.make_model(graph, opset_imports=[h.make_opsetid("", 20)], ir_version=9), path)
    report = tmp_path / "r.json"
    assert main(["parity", str(path), "--backends", "cpu,openvino", "--report", str(report)]) == 4
    entry = json.loads(report.read_text())["backends"]["openvino"]
    assert entry["status"] == "skipped" and entry["reason"] == "OpenVINO has no conversion for Det-20"
    assert capsys.readouterr().out.strip().splitlines()[-1] == (
        "INCOMPLETE: openvino could not run, though named (--allow-skipped accepts that)."
    )
    assert main(["parity", str(path), "--backends", "cpu,openvino", "--allow-skipped"]) == 0
    assert main(["run", str(path), "--backend", "openvino"]) == 4
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        "onnx-gather: cannot run: OpenVINO has no conversion for Det-20"
    )


@pytest.mark.parametrize("command", ["run", "reduce"])
def test_run_and_reduce_on_a_backend_that_cannot_run_here_exit_4(tmp_path, capsys, command, no_directml):
    output = ["-o", str(tmp_path / "small.onnx")] if command == "reduce" else []
    assert main([command, sample_model_path(), "--backend", "dml", *SAMPLE, *output]) == 4
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and error[0].startswith(
        "onnx-gather: cannot run: backend dml cannot run here: real DirectML is not set up here"
    )
    assert not (tmp_path / "small.onnx").exists()


def test_a_folder_is_incomplete_when_one_model_is(tmp_path, capsys, no_directml):
    folder = tmp_path / "zoo"
    folder.mkdir()
    sample = onnx.load(sample_model_path())
    onnx.save(sample, folder / "a.onnx")
    onnx.save(sample, folder / "b.onnx")
    assert main(["parity", str(folder), "--backends", "pyop,dml", *SAMPLE]) == 4
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[-3:] == [
        "0 of 2 models passed.",
        f"  INCOMPLETE  {folder / 'a.onnx'}",
        f"  INCOMPLETE  {folder / 'b.onnx'}",
    ]


def test_the_cpu_backend_refuses_dml_ops_before_running(tmp_path):
    converted = tmp_path / "dml.onnx"
    assert main(["convert", sample_model_path(), "-o", str(converted)]) == 0
    proto = onnx.load(converted)
    assert "DML ops" in backends.create("cpu").refusal(proto)
    assert "DML ops" in backends.create("openvino").refusal(proto)
    assert all(backends.create(name).refusal(proto) is None for name in ("pyop", "lowered", "evaluator"))
    assert np.all([backends.create(name).refusal(onnx.load(sample_model_path())) is None for name in backends.BACKENDS])


def test_a_reference_that_cannot_run_is_said_once(tmp_path, capsys, no_directml):
    """The reference named in --backends too: 'could not run' names it once, as the reference."""
    code, document, last = _parity(tmp_path, capsys, "--backends", "dml,cpu", "--reference", "dml")
    assert code == 4 and document["verdict"] == "incomplete"
    assert (
        last == "INCOMPLETE: the reference dml could not run; no backend besides the reference compared every output."
    )
