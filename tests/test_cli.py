"""The command line: convert, lower, check and demo, on real files, with their exit codes."""

from __future__ import annotations

import hashlib
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import onnx
import pytest
from conftest import assert_all_identical, require_directml, run_model
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper

from onnx_gather.app import model_commands
from onnx_gather.app.cli import main
from onnx_gather.app.demo import sample_model_path
from onnx_gather.core.contract import DOMAIN


def _digest(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _embedding_model(folder, external: bool):
    """An embedding lookup whose 256 KB table is kept as external data when ``external``."""
    table = numpy_helper.from_array(np.random.default_rng(1).random((1024, 64), np.float32), "table")
    graph = h.make_graph(
        [h.make_node("Gather", ["table", "ids"], ["vectors"], name="embed", axis=0)],
        "embedding",
        [h.make_tensor_value_info("ids", T.INT64, ["batch", 3])],
        [h.make_tensor_value_info("vectors", T.FLOAT, ["batch", 3, 64])],
        initializer=[table],
    )
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)], ir_version=10)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "embedding.onnx"
    onnx.save(model, path, save_as_external_data=external, location="embedding.weights", size_threshold=0)
    return path


FEEDS = {"ids": np.array([[0, 1023, -1], [5, 6, -1024]])}


@pytest.mark.parametrize("external", [False, True], ids=["inline", "external-data"])
def test_convert_and_lower_into_another_folder(tmp_path, external, capsys):
    source = _embedding_model(tmp_path / "in", external)
    before = {p.name: _digest(p) for p in source.parent.iterdir()}
    converted, lowered = tmp_path / "out" / "dml.onnx", tmp_path / "elsewhere" / "back.onnx"
    converted.parent.mkdir()
    lowered.parent.mkdir()
    assert main(["convert", str(source), "-o", str(converted)]) == 0
    printed = capsys.readouterr().out
    assert "Converted 1 of 1 gather." in printed and "onnx_gather::DmlGather       0       1" in printed
    assert main(["lower", str(converted), "-o", str(lowered)]) == 0
    assert {p.name: _digest(p) for p in source.parent.iterdir()} == before  # the input is untouched
    # Copied external data is named after the model it serves, one name per write.
    assert len(list(converted.parent.glob("dml.onnx.*.data"))) == external
    assert len(list(lowered.parent.glob("back.onnx.*.data"))) == external
    assert not [p for p in (*converted.parent.iterdir(), *lowered.parent.iterdir()) if p.name.endswith(".tmp")]
    expected = run_model(source, FEEDS)
    assert_all_identical(run_model(converted, FEEDS, custom_ops=True), expected)
    assert_all_identical(run_model(lowered, FEEDS), expected)


def test_converting_keeps_external_data_on_disk(tmp_path):
    source = _embedding_model(tmp_path, external=True)
    converted = tmp_path / "dml.onnx"
    assert main(["convert", str(source), "-o", str(converted)]) == 0
    assert converted.stat().st_size < 4096  # the weights stay in a data file (embedding.weights, hard-linked)
    tensor = onnx.load(converted, load_external_data=False).graph.initializer[0]
    assert tensor.data_location == onnx.TensorProto.EXTERNAL


def test_strict_convert_exits_1_when_a_gather_stays_standard(tmp_path, capsys):
    graph = h.make_graph(
        [h.make_node("Gather", ["words", "i"], ["y"], name="words_gather", axis=0)],
        "strings",
        [h.make_tensor_value_info("words", T.STRING, [3]), h.make_tensor_value_info("i", T.INT64, [1])],
        [h.make_tensor_value_info("y", T.STRING, [1])],
    )
    path = tmp_path / "strings.onnx"
    onnx.save(h.make_model(graph, opset_imports=[h.make_opsetid("", 17)], ir_version=10), path)
    assert main(["convert", str(path), "-o", str(tmp_path / "a.onnx")]) == 0
    assert main(["convert", str(path), "-o", str(tmp_path / "b.onnx"), "--strict"]) == 1
    assert "left as it was: node 'words_gather' (Gather, graph 'strings'): STRING data" in capsys.readouterr().out


def test_check_at_each_feature_level_says_what_onnx_runtime_does(tmp_path, capsys):
    path = _embedding_model(tmp_path, external=False)
    assert main(["check", str(path), "--feature-level", "4.1"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "DirectML node 'embed' (Gather, graph 'embedding'): DML_GATHER with 3 dimensions, FLOAT32 (ONNX FLOAT) data, "
        "INT64 indices (feature level 3.0 or later); runs on DirectML",
        "1 node at DirectML feature level 4.1: 1 on DirectML, 0 on the CPU provider.",
        "ONNX Runtime's session runs 1 node: 1 on DirectML in 1 partition, 0 on the CPU provider; no memory copy "
        "between them.",
        "1 gather at DirectML feature level 4.1: 1 on DirectML.",
    ]
    # Below 3.0 the device has no INT64 tensors: the provider leaves the gather to the CPU provider.
    for level in ("1.0", "2.1"):
        assert main(["check", str(path), "--feature-level", level]) == 0
        printed = capsys.readouterr().out
        cpu = f"node 'embed' (Gather, graph 'embedding'): a device of feature level {level} lacks INT64 indices; ONNX"
        assert f"CPU      {cpu} Runtime's CPU provider runs it" in printed
    # INT32 indices: a device of 2.1 has INT32 tensors, so the provider takes the node; DML_GATHER at 2.1 takes
    # UINT32 indices only.
    model = onnx.load(path)
    model.graph.input[0].type.tensor_type.elem_type = T.INT32
    onnx.save(model, path)
    assert main(["check", str(path), "--feature-level", "2.1"]) == 1
    printed = capsys.readouterr().out
    refusal = (
        "INT32 indices are not supported at feature level 2.1: ONNX Runtime's provider takes the node (the "
        "device has its types) and DirectML refuses the operator"
    )
    assert "fails    node 'embed'" in printed and refusal in printed
    assert "1 gather at DirectML feature level 2.1: 1 failing." in printed


def test_check_says_where_the_directml_provider_puts_each_gather(tmp_path, capsys):
    graph = h.make_graph(
        [
            h.make_node("Gather", ["deep", "k"], ["y4"], name="nine", axis=0),
            h.make_node("Gather", ["b", "i"], ["y1"], name="bf16", axis=0),
            h.make_node("Gather", ["d", "i"], ["y2"], name="double", axis=0),
            h.make_node("GatherElements", ["d", "j"], ["y3"], name="narrow", axis=1),
        ],
        "placement",
        [
            h.make_tensor_value_info("b", T.BFLOAT16, [4]),
            h.make_tensor_value_info("d", T.DOUBLE, [4, 5]),
            h.make_tensor_value_info("i", T.INT64, [2]),
            h.make_tensor_value_info("j", T.INT64, [2, 3]),
            h.make_tensor_value_info("deep", T.FLOAT, [2] * 5),
            h.make_tensor_value_info("k", T.INT32, [1] * 5),
        ],
        [
            h.make_value_info(f"y{n}", h.make_tensor_type_proto(t, None))
            for n, t in ((1, T.BFLOAT16), (2, T.DOUBLE), (3, T.DOUBLE), (4, T.FLOAT))
        ],
    )
    path = tmp_path / "placement.onnx"
    onnx.save(h.make_model(graph, opset_imports=[h.make_opsetid("", 17)], ir_version=10), path)
    assert main(["check", str(path)]) == 1
    lines = capsys.readouterr().out.splitlines()
    # In the model's order (the one convert leaves standard first).
    assert lines[0].startswith("fails    node 'nine'") and "more than 8 dimensions (output 9)" in lines[0]
    assert lines[1].startswith("CPU      node 'bf16' (Gather, graph 'placement'): BFLOAT16 gathers are not registered")
    assert lines[2].startswith("DirectML node 'double'") and "FLOAT64 (ONNX DOUBLE) data" in lines[2]
    assert lines[3].startswith("fails    node 'narrow'") and "(dimension 0: 2 != 4)" in lines[3]
    assert lines[4] == (
        "4 nodes at DirectML feature level 4.1: 3 on DirectML, 1 on the CPU provider (1 without a DirectML kernel), "
        "2 failing."
    )
    assert lines[5] == (
        "ONNX Runtime's session runs 4 nodes: 3 on DirectML in 3 partitions, 1 on the CPU provider; no memory copy "
        "between them."
    )
    assert lines[6] == "4 gathers at DirectML feature level 4.1: 1 on DirectML, 1 on the CPU provider, 2 failing."


def test_check_of_a_converted_model_says_its_dml_nodes_tell_no_placement(tmp_path, capsys):
    # The sample's gathers all run on DirectML; a converted model's DML nodes say nothing of where the provider
    # places the gathers they came from (that depends on the original's types and opsets)
    converted = tmp_path / "sample_dml.onnx"
    assert main(["convert", sample_model_path(), "-o", str(converted)]) == 0
    capsys.readouterr()
    assert main(["check", str(converted)]) == 0
    lines = capsys.readouterr().out.splitlines()
    (embed,) = [line for line in lines if "node 'embed'" in line]
    assert embed.startswith("DML      node 'embed' (DmlGather, graph 'sample_reranker'): DML_GATHER with 3 ")
    assert embed.endswith("; onnx-gather's op: check the original model for where the provider places it")
    assert lines[-1] == (
        "3 gathers at DirectML feature level 4.1: 3 as DML nodes (converted by onnx-gather: check the original model "
        "for placement)."
    )


def test_check_refuses_gather_elements_at_1_0(tmp_path, capsys):
    converted = tmp_path / "sample_dml.onnx"
    assert main(["convert", sample_model_path(), "-o", str(converted), "--dimension-count", "4"]) == 0
    capsys.readouterr()
    assert main(["check", str(converted), "--feature-level", "1.0"]) == 1
    assert "DML_GATHER_ELEMENTS needs feature level 2.1 (this is 1.0)" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["convert", "missing.onnx", "-o", "x.onnx"], "missing.onnx: no such file"),
        (["convert", "{folder}", "-o", "x.onnx"], "is a directory, not an ONNX model file"),
        (["convert", "{text}", "-o", "x.onnx"], "not a readable ONNX model"),
        (
            ["convert", "{model}", "-o", "x.onnx", "--dimension-count", "12"],
            "argument --dimension-count: '12': expected auto or 1 to 8",
        ),
        (
            ["run", "{model}", "--backend", "cpu", "--seed", "-5"],
            "argument --seed: '-5': must be an integer of 0 or more",
        ),
        (
            ["run", "{model}", "--backend", "cpu", "--max-elements", "0"],
            "argument --max-elements: '0': must be an integer",
        ),
        (["parity", "{model}", "--atol", "-1"], "argument --atol: '-1': must be a number of 0 or more"),
        (["parity", "{model}", "--rtol", "x"], "argument --rtol: 'x' is not a number of 0 or more"),
        (["parity", "{model}", "--backends", ""], "argument --backends: '': name at least one backend"),
        (["check", "{model}", "--feature-level", "5.0"], "invalid choice: '5.0'"),
        (["convert", "{model}"], "the following arguments are required: -o/--output"),
    ],
)
def test_bad_input_exits_2_with_one_line(tmp_path, arguments, message, capsys, monkeypatch):
    # In this process: argparse's refusals leave by SystemExit, the others by main's return value (the process's
    # exit code from either: test_bad_input_exits_2_from_the_process_too).
    (tmp_path / "notes.onnx").write_text("this is text, not a model\n")
    model = _embedding_model(tmp_path, external=False)
    arguments = [a.format(folder=tmp_path, text=tmp_path / "notes.onnx", model=model) for a in arguments]
    monkeypatch.chdir(tmp_path)
    try:
        code = main(arguments)
    except SystemExit as leaving:
        code = leaving.code
    stderr = capsys.readouterr().err
    assert code == 2
    assert stderr.count("\n") == 1 and stderr.startswith("onnx-gather: error: ")
    assert message in stderr
    assert not (tmp_path / "x.onnx").exists()


@pytest.mark.parametrize(
    "arguments",
    [["convert", "missing.onnx", "-o", "x.onnx"], ["run", "{model}", "--backend", "cpu", "--seed", "-5"]],
    ids=["returned", "argparse"],
)
def test_bad_input_exits_2_from_the_process_too(tmp_path, arguments):
    arguments = [a.format(model=_embedding_model(tmp_path, external=False)) for a in arguments]
    result = subprocess.run(
        [sys.executable, "-m", "onnx_gather", *arguments], capture_output=True, text=True, cwd=tmp_path, check=False
    )
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("onnx-gather: error: ")


@pytest.mark.openvino
@pytest.mark.parametrize("real", [False, pytest.param(True, marks=pytest.mark.directml)], ids=["here", "real DirectML"])
def test_demo_shows_the_sample_model_agreeing_everywhere(tmp_path, request, real):
    """Here: without real DirectML (the fast tier starts no Wine); and beside real DirectML, where it is set up."""
    if real:
        require_directml(wine=True)
    else:
        request.getfixturevalue("no_directml")
    result = subprocess.run(
        [sys.executable, "-m", "onnx_gather", "demo"],
        capture_output=True,
        text=True,
        check=False,
        cwd=tmp_path,
        env={**os.environ, "PYTHONWARNINGS": "error"},
    )
    assert result.returncode == 0, result.stderr
    first, second = result.stdout.split("2. Two token ids out of range")
    assert "embed: Gather -> DmlGather, N=3" in first and "rerank: GatherElements -> DmlGatherElements" in first
    assert "openvino  DIFFERENT" in second and "cpu       error" in second and "per DML node: embed 2." in second
    # The backends defaulted: cuda (onnxruntime's CPU build here) could not run, so the verdict is PARTIAL, not PASSED.
    if not real:  # 3 outputs on cpu, lowered, openvino and dmlsim
        assert first.count("bit-identical") == 12 and "PASSED" not in first
        assert (
            "PARTIAL: every output of cpu, lowered, openvino, dmlsim is within tolerance of the reference pyop; could "
            "not run: cuda, dml (see above)." in first
        )
        assert "Real DirectML did not run here (skipped: real DirectML is not set up here" in second
        assert "; dmlsim emulates it." in second and second.count("    dmlsim [") == 2
    else:  # and on real DirectML, with its emulation beside it
        assert first.count("bit-identical") == 15 and "PASSED" not in first
        assert (
            "PARTIAL: every output of cpu, lowered, openvino, dml, dmlsim is within tolerance of the reference pyop; "
            "could not run: cuda (see above)." in first
        )
        assert "pyop, dml, dmlsim (dmlsim: DirectML emulated on the CPU):" in second
        assert second.count("    dml    [") == 2 and second.count("    dmlsim [") == 2
    # DirectML's reads of the out-of-range ids, emulated: the same embeddings as the custom ops'
    rows = re.findall(r"^    (pyop|dmlsim) +(\[.*\])$", second, re.MULTILINE)
    assert [row for name, row in rows if name == "pyop"] == [row for name, row in rows if name == "dmlsim"]


def test_version_and_debug_anywhere(tmp_path, capsys):
    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0 and capsys.readouterr().out.startswith("onnx-gather ")
    # --debug after the command too: the one line, then the traceback.
    assert main(["convert", str(tmp_path / "missing.onnx"), "-o", str(tmp_path / "x.onnx"), "--debug"]) == 2
    error = capsys.readouterr().err
    assert "Traceback" in error and error.rstrip().endswith("missing.onnx: no such file")


def test_help_names_gather_nd(capsys):
    for arguments, text in (
        (["--help"], "Gather, GatherElements and GatherND"),
        (["convert", "--help"], "Convert standard Gather, GatherElements and GatherND into DML custom ops."),
    ):
        with pytest.raises(SystemExit) as done:
            main(arguments)
        assert done.value.code == 0 and text in capsys.readouterr().out


def test_lower_says_what_the_directml_mode_costs_and_names_the_cheaper_modes(tmp_path, capsys):
    model = tmp_path / "ids.onnx"
    inputs = [h.make_tensor_value_info("table", T.FLOAT, [6, 2]), h.make_tensor_value_info("ids", T.INT64, ["n"])]
    graph = h.make_graph(
        [h.make_node("Gather", ["table", "ids"], ["rows"], name="lookup", axis=0)],
        "ids",
        inputs,
        [h.make_tensor_value_info("rows", T.FLOAT, ["n", 2])],
    )
    onnx.save(h.make_model(graph, opset_imports=[h.make_opsetid("", 17)], ir_version=10), model)
    for mode, told in (("directml", True), ("clamp", False)):
        converted, lowered = tmp_path / f"{mode}.onnx", tmp_path / f"{mode}_lowered.onnx"
        assert main(["convert", str(model), "-o", str(converted), "--out-of-bounds", mode]) == 0
        assert main(["lower", str(converted), "-o", str(lowered)]) == 0
        printed = capsys.readouterr().out
        assert ("--out-of-bounds clamp, zero or error" in printed) == told, printed


def test_run_prints_shapes_as_shape_takes_them(tmp_path, capsys):
    path = _embedding_model(tmp_path, external=False)
    assert main(["run", str(path), "--backend", "cpu", "--shape", "ids:2x3"]) == 0
    printed = capsys.readouterr().out
    assert "ids                  INT64 2x3 " in printed and "vectors              FLOAT 2x3x64 " in printed


def test_the_docs_the_messages_cite_are_installed_and_printed(capsys):
    assert main(["docs"]) == 0
    listed = capsys.readouterr().out
    assert listed.startswith("cli                ") and "\nsemantics          " in listed
    assert "onnx-gather docs NAME" in listed
    assert "semantics.md" in listed and "design.md" in listed
    assert main(["docs", "semantics"]) == 0
    text = capsys.readouterr().out
    assert text.startswith("# The semantics onnx-gather implements") and "## 4" in text
    # What the messages cite is there: section 4.3 and the provider's placement (section 6).
    assert "4.3" in text and "GetCpuPreferredNodes" in text
    assert main(["docs", "nothing"]) == 2
    error = capsys.readouterr().err
    listed = "cli, design, directml-on-linux, dmlsim, measurements, node-suite, ops, semantics"
    assert f"no document 'nothing' (there are: {listed})" in error


def test_an_internal_error_exits_3_with_one_line_and_debug_gives_its_traceback(tmp_path, capsys, monkeypatch):
    def broken(*args, **kwargs):
        raise KeyError("a bug")

    monkeypatch.setattr("onnx_gather.app.model_commands.check", broken)
    path = _embedding_model(tmp_path, external=False)
    assert main(["check", str(path)]) == 3
    error = capsys.readouterr().err
    assert error == "onnx-gather: internal error: KeyError: 'a bug'; run with --debug for the traceback\n"
    assert main(["check", str(path), "--debug"]) == 3
    error = capsys.readouterr().err
    assert error.startswith("Traceback (most recent call last):")
    assert error.endswith("onnx-gather: internal error: KeyError: 'a bug'\n")


def test_symbolic_shape_inference_that_cannot_finish_leaves_nothing_in_the_current_folder(
    tmp_path, monkeypatch, capsys
):
    """Where ONNX Runtime's symbolic shape inference cannot finish (an operator it does not know), its own
    ``infer_shapes`` saves ``sym_shape_infer_temp.onnx`` and ``<uuid>.data`` into the current folder: not here."""
    import tempfile

    from onnx_gather.graphs.convert import to_dml

    weights = numpy_helper.from_array(np.zeros(3000, np.float32), "w")
    graph = h.make_graph(
        [
            h.make_node("Add", ["x", "w"], ["s"]),
            h.make_node("Mystery", ["s"], ["y"], domain="custom"),
            h.make_node("GatherElements", ["y", "i"], ["out"], axis=0),
        ],
        "mystery",
        [h.make_tensor_value_info("x", T.FLOAT, [3000]), h.make_tensor_value_info("i", T.INT64, [2])],
        [h.make_tensor_value_info("out", T.FLOAT, None)],
        initializer=[weights],
    )
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17), h.make_opsetid("custom", 1)])
    (tmp_path / "model").mkdir()
    path = tmp_path / "model" / "mystery.onnx"
    onnx.save(model, path)
    work, temporary = tmp_path / "work", tmp_path / "temporary"
    work.mkdir()
    temporary.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.setenv("TMPDIR", str(temporary))
    monkeypatch.setattr(tempfile, "tempdir", None)
    assert main(["check", str(path)]) == 0
    assert "the rank of data 'y' is unknown" in capsys.readouterr().out
    assert to_dml(model) is not None
    assert sorted(os.listdir(work)) == [] and sorted(os.listdir(temporary)) == []
    assert sorted(os.listdir(tmp_path / "model")) == ["mystery.onnx"]


def test_symbolic_shape_inference_still_tells_a_rank_past_a_contrib_operator():
    """``ranks`` runs ONNX Runtime's symbolic shape inference by its steps (not ``infer_shapes``, which saves files):
    a newer ONNX Runtime that renamed them would fail here rather than lose the ranks quietly."""
    from onnx_gather.graphs.ranks import symbolic_types

    graph = h.make_graph(
        [h.make_node("BiasGelu", ["x", "b"], ["y"], domain="com.microsoft")],
        "contrib",
        [h.make_tensor_value_info("x", T.FLOAT, ["n", 4]), h.make_tensor_value_info("b", T.FLOAT, [4])],
        [h.make_tensor_value_info("y", T.FLOAT, None)],
    )
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17), h.make_opsetid("com.microsoft", 1)])
    found = symbolic_types(model, ["y"])
    assert found["y"].dims == ("n", 4)


def _numpy_loaded(pid: int) -> bool:
    try:
        return "_multiarray_umath" in Path(f"/proc/{pid}/maps").read_text()
    except OSError:  # gone already
        return True


@pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="needs /proc to see the imports under way")
@pytest.mark.parametrize("delay", [0, 0.05, 0.2])
@pytest.mark.parametrize("how", ["script", "module"])
def test_ctrl_c_while_importing_is_one_line_and_130(tmp_path, how, delay):
    # Ctrl-C while cli imports numpy, onnx and the runtimes (its first quarter second). Before that is Python's own
    # startup (about 25 ms, site and the venv's path hooks), which no code of ours can reach: the signal is sent
    # once numpy's extension is loaded, then after `delay`.
    script = Path(sys.executable).parent / "onnx-gather"
    if how == "script" and not script.exists():
        pytest.skip("the onnx-gather script is not installed beside this Python")
    command = [str(script)] if how == "script" else [sys.executable, "-m", "onnx_gather"]
    child = subprocess.Popen(
        [*command, "demo"], cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        deadline = time.monotonic() + 30
        while not _numpy_loaded(child.pid) and time.monotonic() < deadline:
            time.sleep(0.001)
        time.sleep(delay)
        child.send_signal(signal.SIGINT)
        _, stderr = child.communicate(timeout=60)
    finally:
        child.kill()
    assert (child.returncode, stderr) == (130, "onnx-gather: interrupted\n")


def test_an_os_error_naming_no_file_names_the_command(tmp_path, capsys, monkeypatch):
    def full(self, args):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(model_commands.CheckCommand, "run", full)
    assert main(["check", str(sample_model_path())]) == 2
    assert capsys.readouterr().err == (
        "onnx-gather: error: check: No space left on device (on a file the system did not name; --debug shows where)\n"
    )


def test_a_negative_int_range_is_taken_without_an_equals_sign_by_every_command(tmp_path):
    model = _embedding_model(tmp_path, external=False)
    saved = tmp_path / "in.npz"
    arguments = [
        "parity",
        str(model),
        "--backends",
        "pyop,cpu",
        "--shape",
        "ids:40x3",
        "--int-range",
        "-90:160",
        "--save-inputs",
        str(saved),
    ]
    assert main(arguments) == 0
    ids = np.load(saved)["ids"]
    assert -90 <= ids.min() < 0 and 0 < ids.max() < 160  # drawn from [-90, 160)
    assert main(["run", str(model), "--backend", "cpu", "--int-range", "-90:160"]) == 0
    assert main(["check", str(model), "--int-range", "-90:-10"]) == 0
    assert main(["convert", str(model), "-o", str(tmp_path / "out.onnx"), "--int-range", "-90:160"]) == 0


_TAKING_SHAPES = {
    "check": ["check", "{model}"],
    "convert": ["convert", "{model}", "-o", "{output}"],
    "run": ["run", "{model}", "--backend", "cpu"],
    "parity": ["parity", "{model}", "--backends", "pyop,cpu"],
}


@pytest.mark.parametrize("command", list(_TAKING_SHAPES))
@pytest.mark.parametrize(
    ("shape", "message"),
    [
        ("nosuch:1x2", "--shape names 'nosuch', which is not an input of the model"),
        ("ids:2x4", "--shape ids:2x4: dimension 1 is 3 in the model"),  # the model says [batch, 3]
        ("ids:2", "--shape ids: 1 dimensions given, the model says 2"),
        (
            "ids:2xtwo",
            "argument --shape: 'ids:2xtwo': expected NAME:DIMS such as token_ids:4x6 (see onnx-gather "
            "{command} --help)",
        ),
    ],
)
def test_every_command_refuses_a_bad_shape_alike_with_exit_2(tmp_path, capsys, command, shape, message):
    model = _embedding_model(tmp_path, external=False)
    output = tmp_path / "out.onnx"
    arguments = [a.format(model=model, output=output) for a in _TAKING_SHAPES[command]]
    assert main([*arguments, "--shape", shape]) == 2
    assert capsys.readouterr().err == f"onnx-gather: error: {message.format(command=command)}\n"
    assert not output.exists()


def _help(command, capsys) -> str:
    with pytest.raises(SystemExit):
        main([command, "--help"])
    return capsys.readouterr().out


def _flag_help(shown: str, flag: str) -> str:
    """A flag's entry in a help text: its line and those that continue it."""
    lines = shown.splitlines()
    start = next(i for i, line in enumerate(lines) if f"{line} ".startswith(f"  {flag} "))
    end = next((i for i in range(start + 1, len(lines)) if not lines[i].startswith(" " * 10)), len(lines))
    return "\n".join(lines[start:end])


def test_every_command_lists_the_shared_flags_the_same_way(capsys):
    sections = {}
    for command in _TAKING_SHAPES:
        shown = _help(command, capsys)
        sections[command] = shown[shown.index("\ninputs:") :].split("\n\n")[0]
    assert len(set(sections.values())) == 1, sections
    assert all(f"  {flag} " in sections["check"] for flag in ("--inputs", "--shape", "--seed", "--int-range"))
    helps = {command: _help(command, capsys) for command in ("demo", "convert", "run", "parity")}
    for flag, commands in (
        ("--out-of-bounds", helps),
        ("--device-id", ("run", "parity")),
        ("--max-elements", ("run", "parity")),
    ):
        assert len({_flag_help(helps[command], flag) for command in commands}) == 1, flag


def test_a_node_without_a_name_is_named_alike_by_every_command(tmp_path, capsys):
    # What reports call it, 'Gather #2' (its op type and position), in check, convert, lower, reduce and errors
    table = numpy_helper.from_array(np.arange(8, dtype=np.float16).reshape(4, 2), "table")
    graph = h.make_graph(
        [
            h.make_node("Abs", ["i"], ["a"]),
            h.make_node("Cast", ["a"], ["k"], to=T.INT64),
            h.make_node("Gather", ["table", "k"], ["y"]),
        ],
        "g",
        [h.make_tensor_value_info("i", T.FLOAT, [2])],
        [h.make_tensor_value_info("y", T.FLOAT16, [2, 2])],
        [table],
    )
    model = tmp_path / "unnamed.onnx"
    onnx.save(h.make_model(graph, opset_imports=[h.make_opsetid("", 17)]), model)
    assert main(["check", str(model)]) == 0
    assert "node 'Gather #2' (Gather, graph 'g')" in capsys.readouterr().out
    assert main(["convert", str(model), "-o", str(tmp_path / "c.onnx")]) == 0
    assert "  node 'Gather #2': FLOAT16 data travels as FLOAT" in capsys.readouterr().out
    np.savez(tmp_path / "in.npz", i=np.array([1, 9], np.float32))  # 9: out of bounds, where the CPU kernels fail
    assert (
        main(
            [
                "reduce",
                str(model),
                "--backend",
                "cpu",
                "--inputs",
                str(tmp_path / "in.npz"),
                "-o",
                str(tmp_path / "r.onnx"),
            ]
        )
        == 0
    )
    assert "1 that still show it on cpu (" in (printed := capsys.readouterr().out)
    assert "): Gather 'Gather #2'\n" in printed
    dml = h.make_node("DmlGather", ["x", "k"], ["y"], domain=DOMAIN, axis=0, index_dimensions=1, out_of_bounds="zero")
    graph = h.make_graph(
        [h.make_node("Neg", ["a"], ["x"]), dml],
        "g",
        [h.make_tensor_value_info("a", T.FLOAT, None), h.make_tensor_value_info("k", T.INT64, None)],
        [h.make_tensor_value_info("y", T.FLOAT, None)],
    )
    onnx.save(h.make_model(graph, opset_imports=[h.make_opsetid("", 17), h.make_opsetid(DOMAIN, 1)]), model)
    assert main(["lower", str(model), "-o", str(tmp_path / "l.onnx")]) == 1
    assert "left as it was: node 'DmlGather #1' (DmlGather, graph 'g')" in capsys.readouterr().out
    graph.node[0].input[0] = "nothing"
    onnx.save(h.make_model(graph, opset_imports=[h.make_opsetid("", 17), h.make_opsetid(DOMAIN, 1)]), model)
    assert main(["check", str(model)]) == 2
    assert "node 'Neg #0' (Neg) uses 'nothing', which nothing defines" in capsys.readouterr().err


def test_a_reader_that_goes_away_ends_the_command_silently_with_141(tmp_path):
    """``onnx-gather check many.onnx | head -1``: the pipe closes while check still writes (a line per gather, more
    than a pipe holds); no error line."""
    data = numpy_helper.from_array(np.arange(4, dtype=np.float32), "data")
    nodes = [h.make_node("Gather", ["data", "i"], [f"g{k}"], name=f"gather_number_{k}", axis=0) for k in range(3000)]
    outputs = [h.make_tensor_value_info(f"g{k}", T.FLOAT, [2]) for k in range(3000)]
    graph = h.make_graph(nodes, "many", [h.make_tensor_value_info("i", T.INT64, [2])], outputs, [data])
    onnx.save(h.make_model(graph, opset_imports=[h.make_opsetid("", 17)], ir_version=10), tmp_path / "many.onnx")
    command = (
        f"{shlex.quote(sys.executable)} -m onnx_gather check {shlex.quote(str(tmp_path / 'many.onnx'))} "
        "| head -1 >/dev/null; echo ${PIPESTATUS[0]}"
    )
    result = subprocess.run(["bash", "-c", command], capture_output=True, text=True, check=True, timeout=120)
    assert result.stdout.strip() == "141" and result.stderr == ""


def test_check_of_a_gather_elements_whose_ranks_differ_says_so_instead_of_an_internal_error(tmp_path, capsys):
    graph = h.make_graph(
        [h.make_node("GatherElements", ["x", "i"], ["y"], axis=0, name="ge")],
        "g",
        [h.make_tensor_value_info("x", T.FLOAT, [3, 4]), h.make_tensor_value_info("i", T.INT64, [2])],
        [h.make_tensor_value_info("y", T.FLOAT, None)],
    )
    onnx.save(h.make_model(graph, opset_imports=[h.make_opsetid("", 17)], ir_version=10), tmp_path / "ranks.onnx")
    assert main(["check", str(tmp_path / "ranks.onnx")]) == 0  # was exit 3: a ValueError in the off-axis rule
    first = capsys.readouterr().out.splitlines()[0]
    assert first.startswith(
        "unknown  node 'ge' (GatherElements, graph 'g'): its indices have rank 1 and its data rank 2"
    )
