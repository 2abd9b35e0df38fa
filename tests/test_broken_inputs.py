"""Broken and hostile inputs: every command answers exit 2 with one line naming the problem and the file,
leaves the input byte-identical and writes no output. One test per case of the corpus in tests/broken/
(tools/make_broken.py), plus the cases made on the spot: a folder, a missing file, an unreadable file."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

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
    "axis_out_of_range.onnx": "node 'the_gather' (Gather): axis 5 is out of range [-2, 2) for data of rank 2 "
    "(input 'x')",
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
        tmp_path / "folder.onnx",
        "is a directory, not an ONNX model file",
        tmp_path / "out",
        capsys,
        parity_message="a folder with no .onnx model in it",
    )


def test_a_missing_file(tmp_path, capsys):
    _assert_refused_everywhere(tmp_path / "absent.onnx", "absent.onnx: no such file", tmp_path / "out", capsys)


# Each command of argv[1] (JSON) in this one process, which cannot read the file: [exit code, stderr] of each.
_EACH_COMMAND = """
import contextlib, io, json, sys
from onnx_gather.app.cli import main
answers = []
for arguments in json.loads(sys.argv[1]):
    with contextlib.redirect_stderr(io.StringIO()) as error:
        answers.append([main(arguments), error.getvalue()])
print(json.dumps(answers))
"""


def test_an_unreadable_file(tmp_path):
    model = tmp_path / "secret.onnx"
    shutil.copy(CORPUS.parent.parent / "models" / "sample.onnx", model)
    model.chmod(0)
    prefix = []
    if os.geteuid() == 0:  # root reads anything: drop the capabilities that let it
        if shutil.which("setpriv") is None:
            pytest.skip("running as root without setpriv, so no file is unreadable")
        prefix = ["setpriv", "--bounding-set=-dac_override,-dac_read_search"]
    commands = _commands(model, tmp_path)
    result = subprocess.run(
        [*prefix, sys.executable, "-c", _EACH_COMMAND, json.dumps(commands)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        check=True,
    )
    assert json.loads(result.stdout) == [[2, f"onnx-gather: error: {model}: permission denied\n"]] * len(commands)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["secret.onnx"]


def test_debug_adds_the_traceback(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["--debug", "check", str(CORPUS / "axis_out_of_range.onnx")]) == 2
    stderr = capsys.readouterr().err
    assert "Traceback" in stderr and stderr.endswith("of rank 2 (input 'x')\n")


def test_convert_onto_its_own_path_leaves_a_valid_model_or_the_original(tmp_path):
    model = tmp_path / "model.onnx"
    shutil.copy(CORPUS / "axis_out_of_range.onnx", model)
    before = model.read_bytes()
    assert main(["convert", str(model), "-o", str(model)]) == 2
    assert model.read_bytes() == before


def _dynamic_model(folder: Path) -> Path:
    """A model of one float input x of dynamic size n (y = x)."""
    graph = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n"])],
    )
    path = folder / "dynamic.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def _zeros_member(archive: zipfile.ZipFile, name: str, elements: int) -> None:
    """A member of float32 zeros that deflates to almost nothing and inflates to 4 bytes an element."""
    with archive.open(zipfile.ZipInfo(name), "w", force_zip64=True) as member:
        np.lib.format.write_array_header_1_0(member, {"descr": "<f4", "fortran_order": False, "shape": (elements,)})
        chunk = bytes(2**22)
        for _ in range(elements * 4 // len(chunk)):
            member.write(chunk)


@pytest.fixture
def no_array_read(monkeypatch):
    """An array's data read from an --inputs file fails the test: the refusals below come from headers alone."""

    def read_array(*args, **kwargs):
        raise AssertionError("an array was read")

    monkeypatch.setattr(np.lib.format, "read_array", read_array)


@pytest.mark.parametrize(
    ("member", "arguments", "message"),
    [
        (
            "x.npy",
            ["--max-elements", "1000"],
            "array 'x' of shape 16777216 has 16,777,216 elements, more than --max-elements 1000",
        ),
        ("big.npy", [], "--inputs holds 'big', which the model has no input for (its inputs: x)"),
    ],
)
def test_a_huge_member_is_refused_from_its_header(tmp_path, capsys, no_array_read, member, arguments, message):
    # 64 MB of zeros (deflated to 64 kB): refused from the zip directory and the .npy header, nothing inflated.
    model, npz = _dynamic_model(tmp_path), tmp_path / "huge.npz"
    with zipfile.ZipFile(npz, "w", zipfile.ZIP_DEFLATED) as archive:
        _zeros_member(archive, member, 2**24)
    started = time.perf_counter()
    assert main(["run", str(model), "--backend", "cpu", "--inputs", str(npz), *arguments]) == 2
    error = capsys.readouterr().err
    with capsys.disabled():  # shown with -s; no assertion on time
        print(f"{member} refused in {time.perf_counter() - started:.3f} s")
    assert error.count("\n") == 1 and message in error


def test_a_member_holding_other_than_its_header_declares_is_refused(tmp_path, capsys, no_array_read):
    model, npz = _dynamic_model(tmp_path), tmp_path / "forged.npz"
    with zipfile.ZipFile(npz, "w") as archive, archive.open("x.npy", "w") as member:
        np.lib.format.write_array_header_1_0(member, {"descr": "<f4", "fortran_order": False, "shape": (2**40,)})
        member.write(bytes(8))
    assert main(["check", str(model), "--inputs", str(npz)]) == 2
    assert capsys.readouterr().err == (
        f"onnx-gather: error: {npz}: member 'x.npy' declares float32 1099511627776 (4,398,046,511,232 bytes with "
        "its header) but holds 136 bytes\n"
    )


@pytest.mark.parametrize("command", [["check"], ["convert", "-o", "out.onnx"], ["run", "--backend", "cpu"]])
def test_every_command_checks_the_inputs_file_against_the_model(tmp_path, capsys, command):
    model, npz = _dynamic_model(tmp_path), tmp_path / "ints.npz"
    np.savez(npz, x=np.arange(3))
    assert main([command[0], str(model), *command[1:], "--inputs", str(npz)]) == 2
    assert capsys.readouterr().err == "onnx-gather: error: --inputs array 'x' is INT64 where the model takes FLOAT\n"
    assert not (tmp_path / "out.onnx").exists()


def test_an_error_names_at_most_5_members(tmp_path, capsys):
    model, npz = _dynamic_model(tmp_path), tmp_path / "many.npz"
    np.savez(npz, **{f"member_{i:05}": np.zeros(1, np.float32) for i in range(10_000)})
    assert main(["check", str(model), "--inputs", str(npz)]) == 2
    assert capsys.readouterr().err == (
        "onnx-gather: error: --inputs holds 'member_00000', 'member_00001', 'member_00002', 'member_00003', "
        "'member_00004' and 9,995 more, which the model has no input for (its inputs: x)\n"
    )


def _model_with_a_default(folder: Path, ir_version: int) -> Path:
    """y = Gather(table, i): ``table`` a graph input that its initializer also provides (a default from IR 4)."""
    table = onnx.numpy_helper.from_array(np.arange(10, 16, dtype=np.float32), "table")
    graph = helper.make_graph(
        [helper.make_node("Gather", ["table", "i"], ["y"], name="lookup")],
        "g",
        [
            helper.make_tensor_value_info("table", TensorProto.FLOAT, [6]),
            helper.make_tensor_value_info("i", TensorProto.INT64, [2]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
        [table],
    )
    path = folder / f"default{ir_version}.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 9)], ir_version=ir_version), path)
    return path


def test_an_input_with_a_default_may_be_fed_from_ir_version_4(tmp_path, capsys):
    npz = tmp_path / "fed.npz"
    np.savez(npz, i=np.array([1, 5]), table=np.arange(20, 26, dtype=np.float32))
    assert main(["run", str(_model_with_a_default(tmp_path, 8)), "--backend", "cpu", "--inputs", str(npz)]) == 0
    assert "[21, 25]" in capsys.readouterr().out
    # Before IR 4 every initializer is a graph input and a constant: ONNX Runtime refuses a feed for it
    assert main(["run", str(_model_with_a_default(tmp_path, 3)), "--backend", "cpu", "--inputs", str(npz)]) == 2
    assert "--inputs holds 'table', which the model has no input for (its inputs: i)\n" in capsys.readouterr().err


def test_an_unknown_array_is_told_the_inputs_with_a_default_too(tmp_path, capsys):
    npz, model = tmp_path / "other.npz", _model_with_a_default(tmp_path, 8)
    np.savez(npz, other=np.zeros(2, np.float32))
    assert main(["check", str(model), "--inputs", str(npz)]) == 2
    assert capsys.readouterr().err == (
        "onnx-gather: error: --inputs holds 'other', which the model has no input for (its inputs: i; with a default: "
        "table)\n"
    )
    assert main(["run", str(model), "--backend", "cpu", "--shape", "table:6"]) == 2
    assert capsys.readouterr().err == (
        "onnx-gather: error: --shape names 'table', an input with a default (its initializer), never generated: give "
        "it with --inputs\n"
    )
