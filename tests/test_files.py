"""Nothing a user has is destroyed: outputs that are inputs are refused, output paths are checked before any work,
copied external data never replaces another model's, and files get the mode the umask says."""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import onnx
import pytest
from conftest import assert_all_identical, assert_identical, require_directml, run_model, watching
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper

from onnx_gather.app.cli import main
from onnx_gather.app.demo import sample_model_path
from onnx_gather.graphs import files
from onnx_gather.runtime import backends, divergence


def _model(folder, name="model.onnx", data="model.onnx.data", seed=1):
    """A Gather from a 64 KB table kept as external data in ``data`` (inline when ``data`` is None)."""
    table = numpy_helper.from_array(np.random.default_rng(seed).random((256, 64), np.float32), "table")
    graph = h.make_graph(
        [h.make_node("Gather", ["table", "ids"], ["rows"], name="lookup", axis=0)],
        "lookup",
        [h.make_tensor_value_info("ids", T.INT64, [3])],
        [h.make_tensor_value_info("rows", T.FLOAT, [3, 64])],
        initializer=[table],
    )
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)], ir_version=10)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    if data is None:
        onnx.save(model, path)
    else:
        onnx.save(model, path, save_as_external_data=True, location=data, size_threshold=0)
    return path


FEEDS = {"ids": np.array([0, 255, 7])}


def _digests(folder):
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir()) if p.is_file()}


def _links(tmp_path, model):
    """The model itself, a symbolic link to it, and a hard link to it."""
    (tmp_path / "symbolic.onnx").symlink_to(model)
    os.link(model, tmp_path / "hard.onnx")
    return [model, tmp_path / "symbolic.onnx", tmp_path / "hard.onnx"]


@pytest.mark.parametrize("command", ["convert", "lower"])
@pytest.mark.parametrize("link", ["same path", "symbolic link", "hard link"])
def test_an_output_that_is_the_input_model_is_refused_before_any_work(tmp_path, capsys, command, link):
    model = _model(tmp_path)
    output = _links(tmp_path, model)[["same path", "symbolic link", "hard link"].index(link)]
    before = _digests(tmp_path)
    assert main([command, str(model), "-o", str(output)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""  # nothing was converted
    assert f"-o/--output {output}: is the input {model}; writing it would destroy it" in captured.err
    assert _digests(tmp_path) == before


def test_an_output_that_is_the_input_models_data_file_is_refused(tmp_path, capsys):
    model = _model(tmp_path)
    before = _digests(tmp_path)
    assert main(["convert", str(model), "-o", str(tmp_path / "model.onnx.data")]) == 2
    assert "-o/--output" in capsys.readouterr().err and _digests(tmp_path) == before


@pytest.mark.parametrize(
    ("flag", "command"),
    [("--report", "parity"), ("--markdown", "parity"), ("--save-inputs", "parity"), ("--outputs", "run")],
)
def test_a_report_or_outputs_file_that_is_an_input_is_refused(tmp_path, capsys, flag, command):
    model = _model(tmp_path, data=None)
    inputs = tmp_path / "inputs.npz"
    np.savez(inputs, **FEEDS)
    before = _digests(tmp_path)
    backend = ["--backend", "cpu"] if command == "run" else ["--backends", "cpu"]
    for target in (model, inputs):
        assert main([command, str(model), *backend, "--inputs", str(inputs), flag, str(target)]) == 2
        assert f"{flag} {target}: is the input {target}" in capsys.readouterr().err
    assert _digests(tmp_path) == before


def test_two_report_files_on_one_path_are_refused(tmp_path, capsys):
    model = _model(tmp_path, data=None)
    report = tmp_path / "r.json"
    assert main(["parity", str(model), "--backends", "cpu", "--report", str(report), "--markdown", str(report)]) == 2
    assert f"--markdown {report}: is also the --report file" in capsys.readouterr().err
    assert not report.exists()


@pytest.mark.parametrize(
    ("where", "message"),
    [("folder", "is a folder; give a file name"), ("missing/r.json", "folder {tmp}/missing does not exist")],
)
@pytest.mark.parametrize("flag", ["--report", "--markdown", "--save-inputs"])
def test_output_paths_are_checked_before_the_work(tmp_path, capsys, flag, where, message):
    models = tmp_path / "models"
    _model(models, "a.onnx", "a.onnx.data")
    (tmp_path / "folder").mkdir()
    target = tmp_path / where
    arguments = ["parity", str(models / "a.onnx"), "--backends", "cpu", flag, str(target)]
    assert main(arguments) == 2
    captured = capsys.readouterr()
    assert captured.out == ""  # no model ran
    assert f"{flag} {target}: {message.format(tmp=tmp_path)}" in captured.err
    assert not (tmp_path / "missing").exists()


def test_converting_two_models_into_one_folder_keeps_each_models_data(tmp_path):
    first = _model(tmp_path / "one", seed=1)
    second = _model(tmp_path / "two", seed=2)  # both call their data model.onnx.data
    out = tmp_path / "out"
    out.mkdir()
    assert main(["convert", str(first), "-o", str(out / "first.onnx")]) == 0
    assert main(["convert", str(second), "-o", str(out / "second.onnx")]) == 0
    names = sorted(p.name for p in out.iterdir())
    assert len(names) == 4 and names[0] == "first.onnx" and names[2] == "second.onnx"
    assert re.fullmatch(r"first\.onnx\.[0-9a-f]{12}\.data", names[1])
    assert re.fullmatch(r"second\.onnx\.[0-9a-f]{12}\.data", names[3])
    assert_all_identical(run_model(out / "first.onnx", FEEDS, custom_ops=True), run_model(first, FEEDS))
    assert_all_identical(run_model(out / "second.onnx", FEEDS, custom_ops=True), run_model(second, FEEDS))


@pytest.mark.parametrize("umask", [0o022, 0o027, 0o077])
def test_written_files_get_the_mode_the_umask_says(tmp_path, umask):
    model = _model(tmp_path / "in")
    out = tmp_path / "out"
    out.mkdir()
    previous = os.umask(umask)
    try:
        assert main(["convert", str(model), "-o", str(out / "dml.onnx")]) == 0
        assert main(["lower", str(out / "dml.onnx"), "-o", str(out / "lowered.onnx")]) == 0
        assert main(["parity", str(model), "--backends", "cpu", "--report", str(out / "r.json")]) == 0
    finally:
        os.umask(previous)
    modes = {re.sub(r"\.[0-9a-f]{12}\.", ".ID.", p.name): p.stat().st_mode & 0o777 for p in out.iterdir()}
    # lowered.onnx, in the same folder, has a hard link to dml.onnx's data
    names = ("dml.onnx", "dml.onnx.ID.data", "lowered.onnx", "lowered.onnx.ID.data", "r.json")
    assert modes == {name: 0o666 & ~umask for name in names}


@pytest.fixture(params=["tmpfs", "ENOSPC"])
def full_folder(request, tmp_path, monkeypatch):
    """A folder on a full filesystem, both ways: a 64 kB tmpfs filled up (where this runs as root and may mount
    one; skipped elsewhere), and a folder whose writes the package makes fail with ENOSPC (model_io's
    files.write_atomically, through which every output is written)."""
    folder = tmp_path / "full"
    folder.mkdir()
    if request.param == "ENOSPC":

        def no_space(path, write):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

        monkeypatch.setattr(files, "write_atomically", no_space)
        yield folder
        return
    mount = ["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(folder)]
    if os.geteuid() != 0 or subprocess.run(mount, capture_output=True, check=False).returncode != 0:
        pytest.skip("cannot mount a tmpfs here (needs root and a mount namespace that allows it)")
    try:
        with contextlib.suppress(OSError), (folder / "filler").open("wb") as filler:
            while True:
                filler.write(bytes(4096))
                filler.flush()
        yield folder
    finally:
        subprocess.run(["umount", str(folder)], check=True)


@pytest.mark.parametrize(
    ("arguments", "flag", "name"),
    [
        (["convert", "{model}", "-o", "{out}"], "-o/--output", "out.onnx"),
        (["run", "{model}", "--backend", "cpu", "--outputs", "{out}"], "--outputs", "out.npz"),
        (["parity", "{model}", "--backends", "cpu", "--save-inputs", "{out}"], "--save-inputs", "in.npz"),
        (["parity", "{model}", "--backends", "cpu", "--report", "{out}"], "--report", "report.json"),
        (["parity", "{model}", "--backends", "cpu", "--markdown", "{out}"], "--markdown", "report.md"),
    ],
)
def test_a_full_disk_names_the_flag_and_the_file_and_no_verdict_comes_first(
    tmp_path, capsys, full_folder, no_directml, arguments, flag, name
):
    folder = full_folder
    out = folder / name
    model = sample_model_path()
    shape = ["--shape", "token_ids:4x6"]  # real sizes: no warning of dims generated as 1 before the error
    assert main([a.format(model=model, out=out) for a in arguments] + shape) == 2
    printed = capsys.readouterr()
    assert printed.err == f"onnx-gather: error: {flag} {out}: cannot write it: No space left on device\n"
    assert "PASSED" not in printed.out and "Converted" not in printed.out
    assert [p.name for p in folder.iterdir() if p.name != "filler"] == []


def _unnamed_chain(folder: Path) -> tuple[Path, dict[str, np.ndarray]]:
    """A Gather from a table, then a Mul by 2, both nodes without names, the table and the factor in one external
    data file under a subfolder; with the values the model computes from ``FEEDS``, the intermediate one included."""
    table = np.random.default_rng(3).random((256, 64), np.float32)
    graph = h.make_graph(
        [h.make_node("Gather", ["table", "ids"], ["rows"], axis=0), h.make_node("Mul", ["rows", "two"], ["twice"])],
        "unnamed",
        [h.make_tensor_value_info("ids", T.INT64, [3])],
        [h.make_tensor_value_info("twice", T.FLOAT, [3, 64])],
        initializer=[numpy_helper.from_array(table, "table"), numpy_helper.from_array(np.float32([2]), "two")],
    )
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)], ir_version=10)
    (folder / "weights").mkdir(parents=True)
    onnx.save(model, folder / "model.onnx", save_as_external_data=True, location="weights/model.data", size_threshold=0)
    rows = table[FEEDS["ids"]]
    return folder / "model.onnx", {"rows": rows, "twice": rows * 2}


@contextlib.contextmanager
def _untouched(folder: Path, mode: str) -> Iterator[None]:
    """``folder`` watched while the block runs: nothing may be created, written, moved or removed in it, also for a
    moment. With mode "read-only" it is also mounted read-only over itself, as a folder the user may not write in
    (root writes in a chmod 555 one), where this runs as root and may mount; skipped elsewhere."""
    mount = ["mount", "--bind", "-o", "ro", str(folder), str(folder)]
    if mode == "read-only" and (os.geteuid() != 0 or subprocess.run(mount, capture_output=True).returncode != 0):
        pytest.skip("cannot mount a folder read-only here (needs root and a mount namespace that allows it)")
    try:
        with watching(folder) as events:
            yield
        assert events == []
    finally:
        if mode == "read-only":
            subprocess.run(["umount", str(folder)], check=True)


FOLDERS = ["watched", "read-only"]
BACKENDS = [
    "pyop",
    "cpu",
    "lowered",
    pytest.param("openvino", marks=pytest.mark.openvino),
    pytest.param("dml", marks=pytest.mark.directml),
]


@pytest.mark.parametrize("mode", FOLDERS)
@pytest.mark.parametrize("backend", BACKENDS)
def test_parity_all_tensors_writes_nothing_beside_a_model_with_external_data(tmp_path, capsys, backend, mode):
    # Each backend runs a model of other outputs than the file's, and the file's own (the dml backend both with
    # their nodes named): ONNX Runtime gets a derived model as bytes, OpenVINO and the runner under Wine as a file in
    # a folder of their own, the data files linked there (copied from a read-only mount, which no hard link crosses).
    if backend == "dml":
        require_directml()
    path, expected = _unnamed_chain(tmp_path / "model")
    inputs = tmp_path / "inputs.npz"
    np.savez(inputs, **FEEDS)
    with _untouched(path.parent, mode):
        reference = "cpu" if backend == "pyop" else "pyop"  # one besides the reference is compared
        code = main(
            [
                "parity",
                str(path),
                "--all-tensors",
                "--backends",
                backend,
                "--reference",
                reference,
                "--inputs",
                str(inputs),
            ]
        )
        model = backends.Model.read(path)
        wide, own = [backends.create(backend).run(m, FEEDS) for m in (divergence.marked(model), model)]
    assert code == 0, capsys.readouterr()
    assert set(wide.outputs) == set(expected) and set(own.outputs) == {"twice"}
    for name, values in expected.items():
        assert_identical(wide.outputs[name], values)
    assert_identical(own.outputs["twice"], expected["twice"])


@pytest.mark.parametrize("mode", FOLDERS)
@pytest.mark.parametrize(
    ("model", "arguments"),
    [
        ("sample.onnx", ["--backend", "cpu", "--reference", "pyop", "--shape", "token_ids:4x6", "--int-range", "0:40"]),
        pytest.param(
            "pow_chain.onnx",
            ["--backend", "dml", "--reference", "cpu", "--inputs", "pow_chain.npz"],
            marks=pytest.mark.directml,
        ),
    ],
)
def test_reduce_writes_nothing_beside_the_model(tmp_path, capsys, model, arguments, mode):
    if "dml" in arguments:
        require_directml()
    bundled = Path(sample_model_path()).parent
    folder = tmp_path / "model"
    folder.mkdir()
    shutil.copy(bundled / model, folder / model)
    arguments = [str(bundled / a) if a.endswith(".npz") else a for a in arguments]
    with _untouched(folder, mode):
        code = main(["reduce", str(folder / model), *arguments, "-o", str(tmp_path / "small.onnx")])
    assert code == 0, capsys.readouterr()
    assert "cut down to 1 that still show" in capsys.readouterr().out
