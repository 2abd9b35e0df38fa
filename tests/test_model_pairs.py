"""A model and its external data are one: a kill between them, two writers racing, a data file swapped for
another's, and the temporary files a killed writer leaves, all in real processes."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest
from conftest import assert_all_identical, run_model
from test_files import FEEDS, _model

from onnx_gather.app.cli import main
from onnx_gather.graphs import files, model_io

# A writer in its own process whose rename of the model over ``target`` first kills it ("kill") or says AT_COMMIT.ready
# and waits for AT_COMMIT.go (a path), or does neither ("-").
WRITER = textwrap.dedent("""
    import os, signal, sys, time
    from pathlib import Path
    target, at_commit = Path(sys.argv[1]), sys.argv[2]
    replace = os.replace
    def hooked(source, destination):
        if Path(destination) == target and at_commit != "-":
            if at_commit == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            Path(at_commit + ".ready").touch()
            while not Path(at_commit + ".go").exists():
                time.sleep(0.01)
        return replace(source, destination)
    os.replace = hooked
    from onnx_gather.app.cli import main
    sys.exit(main(sys.argv[3:]))
""")


def _writer(output, at_commit, *arguments):
    command = [sys.executable, "-c", WRITER, str(output), str(at_commit), *map(str, arguments)]
    return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def _wait_for(path, process):
    while not path.exists():
        assert process.poll() is None, process.stderr.read()
        time.sleep(0.01)


def _data(folder, name="o.onnx"):
    return sorted(p.name for p in folder.glob(f"{name}.*.data"))


def _assert_pair(output, source):
    """``output`` loads (its data checked against the model) and computes what ``source`` computes."""
    model_io.load(output)
    assert_all_identical(run_model(output, FEEDS, custom_ops=True), run_model(source, FEEDS))


@pytest.fixture
def sources(tmp_path):
    """Two models of different weights, each with its own external data."""
    return _model(tmp_path / "one", seed=1), _model(tmp_path / "two", seed=2)


def test_a_kill_between_the_data_and_the_model_leaves_the_old_pair(tmp_path, sources):
    out = tmp_path / "out"
    out.mkdir()
    output = out / "o.onnx"
    assert main(["convert", str(sources[0]), "-o", str(output)]) == 0
    old = _data(out)
    writer = _writer(output, "kill", "convert", sources[1], "-o", output)
    assert writer.wait() == -9
    assert len(_data(out)) == 2  # the killed writer's data file, which no model names
    assert [p.name for p in out.glob(".o.onnx.og-*.tmp")]  # and its model's temporary file
    _assert_pair(output, sources[0])
    assert main(["convert", str(sources[1]), "-o", str(output)]) == 0
    _assert_pair(output, sources[1])
    assert len(_data(out)) == 1 and _data(out) != old  # the killed write's data and the old data are gone
    assert sorted(p.name for p in out.iterdir()) == ["o.onnx", *_data(out)]  # and so are its temporary files


def test_two_writers_racing_leave_the_last_ones_pair(tmp_path, sources):
    out = tmp_path / "out"
    out.mkdir()
    output = out / "o.onnx"
    # The first writer has its data in place and waits at its commit; the second writes and commits meanwhile.
    first = _writer(output, tmp_path / "first", "convert", sources[0], "-o", output)
    _wait_for(tmp_path / "first.ready", first)
    assert main(["convert", str(sources[1]), "-o", str(output)]) == 0
    _assert_pair(output, sources[1])
    assert len(_data(out)) == 2  # the first writer's data is kept: it is still writing
    (tmp_path / "first.go").touch()
    assert first.wait() == 0, first.stderr.read()
    _assert_pair(output, sources[0])  # the last rename wins, with its own data
    assert sorted(p.name for p in out.iterdir()) == ["o.onnx", *_data(out)] and len(_data(out)) == 1


@pytest.mark.slow  # 12 writers in processes of their own
def test_writers_racing_freely_leave_a_consistent_pair(tmp_path, sources):
    out = tmp_path / "out"
    out.mkdir()
    output = out / "o.onnx"
    for _ in range(3):
        writers = [_writer(output, "-", "convert", source, "-o", output) for source in sources * 2]
        assert [writer.wait() for writer in writers] == [0] * 4
        model_io.load(output)
        outputs = run_model(output, FEEDS, custom_ops=True)
        assert any(np.array_equal(outputs[0], run_model(source, FEEDS)[0]) for source in sources)
        assert not list(out.glob(".*.tmp"))


@pytest.mark.parametrize("command", [["run", "--backend", "pyop"], ["check"], ["lower", "-o", "x.onnx"]])
def test_a_data_file_swapped_for_another_models_is_refused(tmp_path, sources, capsys, command):
    out = tmp_path / "out"
    out.mkdir()
    assert main(["convert", str(sources[0]), "-o", str(out / "a.onnx")]) == 0
    assert main(["convert", str(sources[1]), "-o", str(out / "b.onnx")]) == 0
    a_data, b_data = out / _data(out, "a.onnx")[0], out / _data(out, "b.onnx")[0]
    shutil.copyfile(b_data, a_data)
    capsys.readouterr()
    arguments = [command[0], str(out / "a.onnx"), *(str(out / a) if a == "x.onnx" else a for a in command[1:])]
    assert main(arguments) == 2
    error = capsys.readouterr().err
    assert len(error.splitlines()) == 1
    assert f"{out / 'a.onnx'}: external data file {a_data} is not the one this model was written with" in error
    assert not (out / "x.onnx").exists()


def test_a_model_written_by_others_loads_without_a_checksum(tmp_path, sources):
    model = model_io.load(sources[0])  # onnx.save wrote it: no checksum to check
    assert not [e for t in model.graph.initializer for e in t.external_data if e.key == "checksum"]


def _other_process_tag():
    """A live process of onnx-gather's and its owner tag; the caller ends it."""
    script = "from onnx_gather.graphs import files; import sys; print(files.owner_tag(), flush=True); sys.stdin.read()"
    process = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    return process, process.stdout.readline().strip()


def test_a_dead_writers_temporary_files_are_removed_by_the_next_save_and_a_live_ones_are_not(tmp_path, sources):
    out = tmp_path / "out"
    out.mkdir()
    dead, dead_tag = _other_process_tag()
    dead.communicate("")
    live, live_tag = _other_process_tag()
    try:
        place, boot, pid, start = live_tag.removeprefix("og-").split("-")
        reused = f"og-{place}-{boot}-{pid}-{int(start) + 1}"  # the live pid, started at another time: reused
        names = {
            f".o.onnx.data.{dead_tag}.abcd1234.tmp": False,
            f".o.onnx.{dead_tag}.abcd_234.tmp": False,
            f".a.onnx.{reused}.zz12yy34.tmp": False,
            f".o.onnx.data.{live_tag}.abcd1234.tmp": True,
            f".o.onnx.data.og-ffffff-{boot}-{pid}-1.abcd1234.tmp": True,  # another host or container: unknown
            ".o.onnx.data.abcd1234.tmp": True,  # not named by an owner: not known to be onnx-gather's
            f"o.onnx.{dead_tag}.abcd1234.tmp": True,  # no leading dot: the user's
            f".o.onnx.data.{dead_tag}.abcd1234.tmp.bak": True,
        }
        for name in names:
            (out / name).write_bytes(b"x" * 1024)
        assert main(["convert", str(sources[0]), "-o", str(out / "o.onnx")]) == 0
        assert {name: (out / name).exists() for name in names} == names
    finally:
        live.communicate("")


def test_temporary_files_name_their_owner():
    handle, path = files.temporary_file(model_io.Path("/tmp"), "x.onnx")
    os.close(handle)
    path.unlink()
    assert path.name.startswith(f".x.onnx.{files.owner_tag()}.") and path.name.endswith(".tmp")
