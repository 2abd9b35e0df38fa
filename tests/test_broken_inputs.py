"""Broken and hostile inputs: every command answers exit 2 with one line naming the problem and the file,
leaves the input byte-identical and writes no output. One test per case of the corpus in tests/broken/
(tools/make_broken.py), plus the cases made on the spot: a folder, a missing file, an unreadable file."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from onnx_gather.app.cli import main

CORPUS = Path(__file__).resolve().parent / "broken"

CASES = {
    "empty.onnx": "not an ONNX model (no graph)",
    "random_bytes.onnx": "not a readable ONNX model",
    "truncated.onnx": "not a readable ONNX model",
    "text.onnx": "not a readable ONNX model",
    "undefined_input.onnx": "node 'the_gather' (Gather) uses 'ghost', which nothing defines",
    "cycle.onnx": "node 'the_gather' (Gather) depends on its own output: node 'the_gather' (Gather) -> "
    "node 'shift' (Add) -> node 'pick' (ArgMax) -> node 'the_gather' (Gather)",
    "axis_out_of_range.onnx": "node 'the_gather' (Gather): axis 5 is out of range for data 'x' of rank 2",
    "dml_unknown_attribute.onnx": "node 'the_gather' (DmlGather): Unrecognized attribute: mode for operator DmlGather",
    "dml_missing_attribute.onnx": "(DmlGatherElements): Required attribute 'out_of_bounds' is missing",
    "external_missing.onnx": "tensor 'x' needs external data file 'missing.bin', which is missing",
    "external_short.onnx": "tensor 'x' reads bytes up to 48 of 'external_short.bin', which has only 20",
    "external_escapes.onnx": "tensor 'x' has external data at '../../etc/passwd', outside the model's folder",
    "nested_50_deep.onnx": "nested deeper than protobuf reads",
}


def _commands(model: Path, out: Path) -> list[list[str]]:
    return [
        ["convert", str(model), "-o", str(out / "converted.onnx")],
        ["lower", str(model), "-o", str(out / "lowered.onnx")],
        ["check", str(model)],
        ["run", str(model), "--backend", "pyop", "--outputs", str(out / "outputs.npz")],
        ["parity", str(model), "--backends", "pyop,cpu", "--report", str(out / "report.json")],
    ]


def _digests(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir()) if p.is_file()}


def _assert_refused_everywhere(model: Path, message: str, out: Path, capsys, parity_message: str = "") -> None:
    out.mkdir(exist_ok=True)
    for arguments in _commands(model, out):
        assert main(arguments) == 2, arguments
        error = capsys.readouterr().err
        assert error.count("\n") == 1 and error.startswith("onnx-gather: error: "), (arguments, error)
        expected = parity_message if parity_message and arguments[0] == "parity" else message
        assert expected in error and str(model) in error, (arguments, error)
    assert not list(out.iterdir())  # no output, no temporary file


@pytest.mark.parametrize("case", CASES, ids=str)
def test_broken_model(case, tmp_path, capsys):
    folder = tmp_path / "corpus"
    shutil.copytree(CORPUS, folder)
    before = _digests(folder)
    _assert_refused_everywhere(folder / case, CASES[case], tmp_path / "out", capsys)
    assert _digests(folder) == before


def test_a_folder(tmp_path, capsys):
    (tmp_path / "folder.onnx").mkdir()
    # parity takes folders of models: an empty one is refused as such
    _assert_refused_everywhere(
        tmp_path / "folder.onnx", "is a directory, not an ONNX model file", tmp_path / "out", capsys,
        parity_message="a folder with no .onnx model in it",
    )  # fmt: skip


def test_a_missing_file(tmp_path, capsys):
    _assert_refused_everywhere(tmp_path / "absent.onnx", "absent.onnx: no such file", tmp_path / "out", capsys)


def test_an_unreadable_file(tmp_path):
    model = tmp_path / "secret.onnx"
    shutil.copy(CORPUS.parent.parent / "models" / "sample.onnx", model)
    model.chmod(0)
    prefix = []
    if os.geteuid() == 0:  # root reads anything: drop the capabilities that let it
        if shutil.which("setpriv") is None:
            pytest.skip("running as root without setpriv, so no file is unreadable")
        prefix = ["setpriv", "--bounding-set=-dac_override,-dac_read_search"]
    for arguments in _commands(model, tmp_path):
        result = subprocess.run([*prefix, sys.executable, "-m", "onnx_gather", *arguments], capture_output=True,
                                text=True, cwd=tmp_path, check=False)  # fmt: skip
        assert result.returncode == 2, result
        assert result.stderr == f"onnx-gather: error: {model}: permission denied\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["secret.onnx"]


def test_debug_adds_the_traceback(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "onnx_gather", "--debug", "check", str(CORPUS / "axis_out_of_range.onnx")],
        capture_output=True, text=True, cwd=tmp_path, check=False,
    )  # fmt: skip
    assert result.returncode == 2
    assert "Traceback" in result.stderr and result.stderr.endswith("of rank 2\n")


def test_convert_onto_its_own_path_leaves_a_valid_model_or_the_original(tmp_path):
    model = tmp_path / "model.onnx"
    shutil.copy(CORPUS / "axis_out_of_range.onnx", model)
    before = model.read_bytes()
    assert main(["convert", str(model), "-o", str(model)]) == 2
    assert model.read_bytes() == before
