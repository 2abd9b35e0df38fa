"""onnx-gather parity and run: comparisons, the JSON report key by key, exit codes, replayable inputs."""

from __future__ import annotations

import importlib.metadata
import io
import json
import shutil
import sys

import numpy as np
import onnx
import onnxruntime
import pytest
from conftest import require_directml
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper

import onnx_gather
from onnx_gather.app.cli import main
from onnx_gather.app.demo import sample_model_path
from onnx_gather.app.hints import parity_hint
from onnx_gather.app.options import InputChoice
from onnx_gather.app.report import comparison_entry
from onnx_gather.core import semantics
from onnx_gather.runtime import backends, evaluator
from onnx_gather.runtime.comparison import Tolerance, compare
from onnx_gather.runtime.inputs import Feeds
from onnx_gather.runtime.parity import one_line, run_parity


def test_compare_bit_identical():
    c = compare(np.array([1.5, -0.0]), np.array([1.5, -0.0]), Tolerance(0, 0))
    assert (c.equal, c.within_tolerance, c.mismatches, c.first_mismatch) == (True, True, 0, None)


def test_compare_minus_zero_is_within_tolerance_but_not_equal():
    c = compare(np.array([0.0]), np.array([-0.0]), Tolerance(0, 0))
    assert (c.equal, c.within_tolerance, c.max_abs) == (False, True, 0.0)


def test_compare_tolerances_and_first_mismatch():
    reference = np.array([[1.0, 100.0], [0.0, 5.0]], np.float32)
    actual = np.array([[1.0, 100.5], [0.0, 5.25]], np.float32)
    c = compare(reference, actual, Tolerance(atol=0.0, rtol=0.01))
    assert (c.within_tolerance, c.mismatches, c.first_mismatch) == (False, 1, [1, 1])
    assert c.max_abs == 0.5 and c.max_rel == 0.05


def test_compare_nans_meet_nans_and_infinities_must_match():
    c = compare(np.array([np.nan, np.inf, 1.0]), np.array([np.nan, -np.inf, 1.0]), Tolerance(1, 1))
    assert (c.within_tolerance, c.mismatches, c.first_mismatch, c.max_abs) == (False, 1, [1], 0.0)


def test_compare_64_bit_integers_exactly():
    big = np.iinfo(np.int64).max
    c = compare(np.array([big, -big - 1], np.int64), np.array([big - 1, big], np.int64), Tolerance(0, 0))
    assert (c.mismatches, c.max_abs) == (2, float(2**64 - 1))


def test_compare_shapes_that_differ():
    c = compare(np.zeros((2, 3), np.float32), np.zeros((3, 2), np.float32), Tolerance(0, 0))
    assert (c.within_tolerance, c.mismatches, c.first_mismatch) == (False, 6, None)
    assert c.note == "FLOAT 3x2 where the reference has FLOAT 2x3"
    entry = comparison_entry(c)
    assert entry["note"] == c.note and entry["max_abs"] is None  # the JSON says what differs
    assert "note" not in comparison_entry(compare(np.zeros(2), np.zeros(2), Tolerance(0, 0)))


KEYS = [
    "model",
    "reference",
    "atol",
    "rtol",
    "inputs",
    "seed",
    "onnx_gather",
    "backends",
    "outputs",
    "out_of_bounds",
    "out_of_bounds_mode",
    "verdict",
    "passed",
]


def _ids_model(tmp_path, name="ids.onnx"):
    """An embedding lookup over 6 rows and a GatherElements pick, both fed the same ids."""
    data = numpy_helper.from_array(np.arange(12, dtype=np.float32).reshape(6, 2), "table")
    graph = h.make_graph(
        [
            h.make_node("Gather", ["table", "ids"], ["rows"], name="lookup", axis=0),
            h.make_node("Flatten", ["table"], ["flat"], name="flatten", axis=2),
            h.make_node("GatherElements", ["table", "picks"], ["picked"], name="pick", axis=0),
        ],
        "ids",
        [h.make_tensor_value_info("ids", T.INT64, ["n"]), h.make_tensor_value_info("picks", T.INT64, [1, 2])],
        [h.make_tensor_value_info("rows", T.FLOAT, ["n", 2]), h.make_tensor_value_info("picked", T.FLOAT, [1, 2])],
        initializer=[data],
    )
    path = tmp_path / name
    onnx.save(h.make_model(graph, opset_imports=[h.make_opsetid("", 17)], ir_version=10), path)
    return path


def _inputs(tmp_path, ids, picks):
    path = tmp_path / "inputs.npz"
    np.savez(path, ids=np.array(ids), picks=np.array([picks]))
    return path


@pytest.mark.openvino
def test_json_report_key_by_key_on_agreement(tmp_path, no_directml):
    model = _ids_model(tmp_path)
    arguments = [
        "parity",
        str(model),
        "--inputs",
        str(_inputs(tmp_path, [0, 5, -1], [1, 2])),
        "--report",
        str(tmp_path / "r.json"),
        "--atol",
        "0",
        "--rtol",
        "0",
    ]
    assert main(arguments) == 0
    report = json.loads((tmp_path / "r.json").read_text())
    assert list(report) == [*KEYS, "exact"]  # float outputs: the yardstick ran
    assert report["exact"] == {
        "status": "ok",
        "reason": None,
        "seconds": report["exact"]["seconds"],
        "routes": {"onnxruntime": {"Gather": 1, "Flatten": 1, "GatherElements": 1}, "evaluator": {}},
        "kept": {},
        "stretches": 1,
    }
    assert (report["model"], report["reference"], report["atol"], report["rtol"]) == (str(model), "pyop", 0.0, 0.0)
    assert report["inputs"] == {
        "ids": {"dtype": "INT64", "shape": [3], "source": "given"},
        "picks": {"dtype": "INT64", "shape": [1, 2], "source": "given"},
    }
    assert report["seed"] is None  # nothing was generated
    assert report["onnx_gather"] == importlib.metadata.version("onnx-gather")
    # real DirectML cannot run here: its emulation runs instead, and says what it is
    assert list(report["backends"]) == ["pyop", "cpu", "lowered", "openvino", "cuda", "dml", "dmlsim"]
    packages = {
        "pyop": ["onnxruntime", "onnxruntime-extensions"],
        "cpu": ["onnxruntime"],
        "lowered": ["onnxruntime"],
        "openvino": ["openvino"],
        "dmlsim": ["onnxruntime"],
    }
    emulation = report["backends"]["dmlsim"].pop("notes")
    assert len(emulation) == 1 and emulation[0].startswith("an emulation of DirectML on ONNX Runtime's CPU")
    for name in ("pyop", "cpu", "lowered", "openvino", "dmlsim"):
        status = report["backends"][name]
        assert list(status) == ["status", "reason", "seconds", "versions"]
        assert status["status"] == "ok" and status["reason"] is None and status["seconds"] >= 0
        assert status["versions"] == {package: importlib.metadata.version(package) for package in packages[name]}
    for name, reason in (("cuda", "onnxruntime has no"), ("dml", "real DirectML is not set up here")):
        status = report["backends"][name]
        assert (status["status"], status["seconds"]) == ("skipped", None) and reason in status["reason"]
    assert list(report["outputs"]) == ["rows", "picked"]
    for output, by_backend in report["outputs"].items():
        assert list(by_backend) == ["cpu", "lowered", "openvino", "dmlsim"]
        for comparison in by_backend.values():
            assert comparison == {
                "equal": True,
                "within_tolerance": True,
                "max_abs": 0.0,
                "max_rel": 0.0,
                "mismatches": 0,
                "first_mismatch": None,
                "atol": 0.0,
                "rtol": 0.0,
                "excess": 0.0,
                "exact": {  # a gather moves values: every one of them exact
                    "from_exact": 0.0,
                    "reference_from_exact": 0.0,
                    "scale": {"rows": 11.0, "picked": 5.0}[output],  # max |exact|
                    "rtol": 0.0,
                    "fault": False,
                    "within_float_error": False,
                    "reference_less_accurate": False,
                },
            }
    assert report["out_of_bounds"] == {"lookup": 0, "pick": 0}
    assert report["verdict"] == "partial" and report["passed"] is True  # defaulted: cuda and dml could not run


def test_out_of_bounds_counts_of_many_nodes_are_cut_to_a_line_and_all_in_the_json(tmp_path, capsys):
    table = numpy_helper.from_array(np.arange(12, dtype=np.float32).reshape(6, 2), "table")
    graph = h.make_graph(
        [h.make_node("Gather", ["table", "ids"], [f"rows{k}"], name=f"lookup{k}", axis=0) for k in range(8)],
        "lookups",
        [h.make_tensor_value_info("ids", T.INT64, [2])],
        [h.make_tensor_value_info(f"rows{k}", T.FLOAT, [2, 2]) for k in range(8)],
        [table],
    )
    onnx.save(h.make_model(graph, opset_imports=[h.make_opsetid("", 17)], ir_version=10), tmp_path / "m.onnx")
    np.savez(tmp_path / "ids.npz", ids=np.array([0, 9]))
    arguments = ["parity", str(tmp_path / "m.onnx"), "--inputs", str(tmp_path / "ids.npz"), "--backends", "lowered"]
    assert main([*arguments, "--report", str(tmp_path / "r.json")]) == 0
    assert json.loads((tmp_path / "r.json").read_text())["out_of_bounds"] == {f"lookup{k}": 1 for k in range(8)}
    said = "per DML node: lookup0 1, lookup1 1, lookup2 1, lookup3 1, lookup4 1 and 3 more, all in --report."
    assert said in capsys.readouterr().out


@pytest.mark.openvino
def test_out_of_bounds_indices_are_counted_and_backends_differ_there(tmp_path, capsys, no_directml):
    model = _ids_model(tmp_path)
    arguments = [
        "parity",
        str(model),
        "--inputs",
        str(_inputs(tmp_path, [0, 9, -7, 2], [1, 6])),
        "--report",
        str(tmp_path / "r.json"),
        "--markdown",
        str(tmp_path / "r.md"),
    ]
    assert main(arguments) == 1
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["out_of_bounds"] == {"lookup": 2, "pick": 1}
    assert report["backends"]["cpu"]["status"] == "error" and "out of" in report["backends"]["cpu"]["reason"].lower()
    assert report["backends"]["openvino"]["status"] == "error"  # its GatherElements refuses index 6
    assert report["outputs"]["rows"]["lowered"]["equal"] is True  # the lowered graph clamps too
    assert report["passed"] is False
    printed = capsys.readouterr().out
    assert (
        "per DML node: lookup 2, pick 1" in printed
        and "FAILED: errors on cpu, openvino; could not run: cuda, dml." in printed
    )
    assert "| lookup" not in (tmp_path / "r.md").read_text() and "**FAILED" in (tmp_path / "r.md").read_text()
    assert "Inputs: ids INT64 4 (given), picks INT64 1x2 (given)." in printed
    markdown = (tmp_path / "r.md").read_text()
    assert "Inputs: ids INT64 4 (given), picks INT64 1x2 (given)." in markdown
    assert f"Versions: onnx-gather {report['onnx_gather']}; pyop: onnxruntime {onnxruntime.__version__}" in markdown


@pytest.mark.openvino
def test_a_mismatch_exits_1_with_its_position(tmp_path, capsys):
    # OpenVINO's Gather reads 0 for index 9 where DirectML's semantics clamp to the last row.
    model = _ids_model(tmp_path)
    arguments = [
        "parity",
        str(model),
        "--backends",
        "pyop,openvino",
        "--inputs",
        str(_inputs(tmp_path, [0, 9], [1, 2])),
        "--report",
        str(tmp_path / "r.json"),
    ]
    assert main(arguments) == 1
    comparison = json.loads((tmp_path / "r.json").read_text())["outputs"]["rows"]["openvino"]
    assert comparison == {
        "equal": False,
        "within_tolerance": False,
        "max_abs": 11.0,
        "max_rel": 1.0,
        "mismatches": 2,
        "first_mismatch": [1, 0],
        "atol": 1e-5,
        "rtol": 1e-5,
        "excess": pytest.approx(11 / (1e-5 + 1e-5 * 11)),  # how many times its tolerance it is off
    }
    assert "rows    openvino  DIFFERENT      11       1        2           (1, 0)          1e-05 / 1e-05" in (
        capsys.readouterr().out
    )


def test_saved_inputs_replay_the_same_report(tmp_path):
    model = _ids_model(tmp_path)
    first = [
        "parity",
        str(model),
        "--backends",
        "pyop,cpu",
        "--shape",
        "ids:5",
        "--seed",
        "4",
        "--int-range",
        "0:6",
        "--save-inputs",
        str(tmp_path / "in.npz"),
        "--report",
        str(tmp_path / "a.json"),
    ]
    assert main(first) == 0
    replay = [
        "parity",
        str(model),
        "--backends",
        "pyop,cpu",
        "--inputs",
        str(tmp_path / "in.npz"),
        "--report",
        str(tmp_path / "b.json"),
    ]
    assert main(replay) == 0
    saved = np.load(tmp_path / "in.npz")
    assert saved["ids"].shape == (5,) and saved["picks"].shape == (1, 2)
    a, b = (json.loads((tmp_path / n).read_text()) for n in ("a.json", "b.json"))
    assert (a.pop("seed"), b.pop("seed")) == (4, None)
    sources = {name: (a["inputs"][name].pop("source"), b["inputs"][name].pop("source")) for name in a["inputs"]}
    assert sources == {"ids": ("generated", "given"), "picks": ("generated", "given")}
    drawn = {name: a["inputs"][name].pop("drawn") for name in a["inputs"]}  # said of generated inputs only
    assert drawn == {"ids": "integers in [0, 6)", "picks": "integers in [0, 6)"}
    for report in (a, b):
        for status in [*report["backends"].values(), report["exact"]]:
            status["seconds"] = None
    assert a == b


def test_several_models_in_a_folder(tmp_path, capsys):
    folder = tmp_path / "zoo"
    folder.mkdir()
    _ids_model(folder, "a.onnx")
    shutil.copy(sample_model_path(), folder / "b.onnx")
    assert main(["parity", str(folder), "--backends", "pyop,cpu,lowered", "--report", str(tmp_path / "r.json")]) == 0
    document = json.loads((tmp_path / "r.json").read_text())
    assert list(document) == ["models", "passed"] and document["passed"] is True
    assert [report["model"] for report in document["models"]] == [str(folder / "a.onnx"), str(folder / "b.onnx")]
    captured = capsys.readouterr()
    assert captured.err == ""  # no progress where stderr is not a terminal
    assert "2 of 2 models passed." in captured.out


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_on_a_terminal_names_each_backend_as_it_runs_and_ends_full(tmp_path, monkeypatch, capsys):
    folder = tmp_path / "zoo"
    folder.mkdir()
    _ids_model(folder, "a.onnx")
    _ids_model(folder, "b.onnx")
    terminal = _Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    assert main(["parity", str(folder), "--backends", "pyop,cpu"]) == 0
    shown = terminal.getvalue()
    assert shown.startswith(f"\r\033[K[....................] 1/2 {folder / 'a.onnx'}: pyop")
    assert f"\r\033[K[....................] 1/2 {folder / 'a.onnx'}: cpu" in shown
    assert f"\r\033[K[##########..........] 2/2 {folder / 'b.onnx'}: cpu" in shown
    assert shown.endswith("\r\033[K[####################] 2/2 models\n")
    # Each report comes on a cleared line: the progress is erased before it.
    assert "2 of 2 models passed." in capsys.readouterr().out
    terminal.truncate(0)
    terminal.seek(0)
    assert main(["run", str(folder / "a.onnx"), "--backend", "cpu", "--shape", "ids:2"]) == 0
    assert terminal.getvalue() == f"\r\033[K[....................] {folder / 'a.onnx'}: cpu\r\033[K"


def test_a_folder_with_a_model_that_cannot_be_loaded_reports_it_as_refused_and_runs_the_others(tmp_path, capsys):
    folder = tmp_path / "zoo"
    folder.mkdir()
    _ids_model(folder, "a.onnx")
    (folder / "broken.onnx").write_text("not a model")
    _ids_model(folder, "c.onnx")
    strings = [h.make_tensor_value_info(name, T.STRING, [2]) for name in ("w", "v")]
    words = h.make_graph([h.make_node("Identity", ["w"], ["v"])], "words", strings[:1], strings[1:])
    onnx.save(h.make_model(words, opset_imports=[h.make_opsetid("", 17)], ir_version=10), folder / "d_words.onnx")
    report, markdown = tmp_path / "r.json", tmp_path / "r.md"
    arguments = ["parity", str(folder), "--backends", "pyop,cpu", "--report", str(report), "--markdown", str(markdown)]
    assert main(arguments) == 1
    printed = capsys.readouterr().out
    assert "2 of 4 models passed." in printed and f"  refused {folder / 'broken.onnx'}" in printed
    document = json.loads(report.read_text())
    assert document["passed"] is False
    assert [(r["model"], r["passed"]) for r in document["models"]] == [
        (str(folder / "a.onnx"), True),
        (str(folder / "c.onnx"), True),
        (str(folder / "broken.onnx"), False),
        (str(folder / "d_words.onnx"), False),
    ]
    assert "not a readable ONNX model" in document["models"][2]["refused"]
    assert "input 'w' holds strings, which are not generated" in document["models"][3]["refused"]
    assert "**Refused:**" in markdown.read_text()


def test_compare_strings_and_booleans_for_equality_never_as_numbers():
    words = np.array([["a", "b"], ["c", "d"]], dtype=object)
    same = compare(words, words.copy(), Tolerance(1e-5, 1e-5))
    assert same.equal and same.within_tolerance and same.mismatches == 0 and same.max_abs is None
    other = np.array([["a", "b"], ["c", "x"]], dtype=object)
    differ = compare(words, other, Tolerance(1e-5, 1e-5))
    assert (differ.equal, differ.within_tolerance, differ.mismatches) == (False, False, 1)
    assert differ.first_mismatch == [1, 1]
    assert compare(words, other.astype(str), Tolerance(1e-5, 1e-5)).first_mismatch == [
        1,
        1,
    ]  # strings held as numpy unicode
    flags = np.array([True, False, True])
    assert compare(flags, flags.copy(), Tolerance(0, 0)).equal
    flipped = compare(flags, np.array([True, True, True]), Tolerance(1.0, 1.0))  # no tolerance makes False equal True
    assert (flipped.within_tolerance, flipped.mismatches, flipped.first_mismatch) == (False, 1, [1])


def test_parity_on_a_model_with_string_and_bool_outputs(tmp_path, capsys):
    graph = h.make_graph(
        [
            h.make_node("Gather", ["words", "i"], ["picked"], name="pick_words", axis=0),
            h.make_node("Greater", ["x", "zero"], ["positive"], name="sign"),
        ],
        "strings",
        [
            h.make_tensor_value_info("words", T.STRING, [3]),
            h.make_tensor_value_info("i", T.INT64, [2]),
            h.make_tensor_value_info("x", T.FLOAT, [3]),
        ],
        [h.make_tensor_value_info("picked", T.STRING, [2]), h.make_tensor_value_info("positive", T.BOOL, [3])],
        initializer=[h.make_tensor("zero", T.FLOAT, [], [0.0])],
    )
    path = tmp_path / "strings.onnx"
    onnx.save(h.make_model(graph, opset_imports=[h.make_opsetid("", 17)], ir_version=10), path)
    inputs = tmp_path / "in.npz"
    x = np.array([1.0, -2.0, 0.0], np.float32)
    np.savez(inputs, words=np.array(["one", "two", "three"]), i=np.array([2, 0]), x=x)
    report = tmp_path / "r.json"
    assert (
        main(["parity", str(path), "--backends", "pyop,cpu,lowered", "--inputs", str(inputs), "--report", str(report)])
        == 0
    )
    document = json.loads(report.read_text())
    outputs = document["outputs"]
    assert all(c["equal"] and c["max_abs"] is None for by in outputs.values() for c in by.values())
    printed = capsys.readouterr().out
    assert "picked    cpu      bit-identical" in printed
    # ONNX's type names, not numpy's (str160 for the <U5 array of the .npz)
    assert "Inputs: words STRING 3 (given), i INT64 2 (given), x FLOAT 3 (given)." in printed
    assert document["inputs"]["words"]["dtype"] == "STRING"
    assert main(["run", str(path), "--backend", "cpu", "--inputs", str(inputs)]) == 0
    printed = capsys.readouterr().out
    assert "  input  words                STRING 3  [one, two, three]" in printed
    assert "  output picked               STRING 2  [three, one]" in printed
    np.savez(inputs, words=np.array([1, 2, 3]))
    assert main(["run", str(path), "--backend", "cpu", "--inputs", str(inputs)]) == 2
    assert "--inputs array 'words' is INT64 where the model takes STRING\n" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["parity", "{model}", "--backends", "pyop,tpu"], "unknown backend 'tpu'"),
        (["parity", "missing.onnx"], "missing.onnx: no such file"),
        (["parity", "{model}", "--inputs", "nothing.npz"], "nothing.npz: no such file"),
        (["parity", "{model}", "--shape", "ids:2xtwo"], "argument --shape: 'ids:2xtwo': expected NAME:DIMS"),
        (["parity", "{model}", "--shape", "other:2"], "--shape names 'other', which is not an input of the model"),
        (["parity", "{model}", "--int-range", "5:1"], "argument --int-range: '5:1': expected LOW:HIGH"),
        (
            ["parity", "{model}", "--inputs", "{other}"],
            "--inputs holds 'idx', which the model has no input for (its inputs: ids, picks)",
        ),
        (["parity", "{model}", "--inputs", "{int32}"], "--inputs array 'ids' is INT32 where the model takes INT64"),
        (["parity", "{model}", "--inputs", "{wide}"], "--inputs array 'picks' has shape 1x3 where the model takes 1x2"),
        (
            ["parity", "{model}", "--inputs", "{mixed}"],
            "--inputs holds 'idx', which the model has no input for (its inputs: ids, picks); array 'ids' is FLOAT "
            "where the model takes INT64; array 'picks' has shape 2 where the model takes 1x2",
        ),
        (["run", "{model}", "--backend", "cpu", "--shape", "picks:1x5"], "--shape picks:1x5: dimension 1 is 2 in"),
        (
            ["run", "{model}", "--backend", "cpu", "--shape", "ids:2", "--shape", "ids:3"],
            "argument --shape: names 'ids' twice (2 and 3)",
        ),
    ],
)
def test_bad_input_exits_2(tmp_path, capsys, arguments, message, no_directml):
    model = _ids_model(tmp_path)
    files = {
        "other": {"idx": np.array([1])},
        "int32": {"ids": np.array([1], np.int32)},
        "wide": {"picks": np.array([[1, 2, 3]])},
        "mixed": {"idx": np.array([1]), "ids": np.array([1.0], np.float32), "picks": np.array([1, 2])},
    }
    for name, arrays in files.items():
        np.savez(tmp_path / f"{name}.npz", **arrays)
    paths = {name: tmp_path / f"{name}.npz" for name in files}
    assert main([a.format(model=model, **paths) for a in arguments]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and message in error


def test_run_generates_inputs_and_saves_outputs(tmp_path, capsys):
    model = _ids_model(tmp_path)
    arguments = [
        "run",
        str(model),
        "--backend",
        "pyop",
        "--shape",
        "ids:4",
        "--int-range",
        "0:6",
        "--outputs",
        str(tmp_path / "out.npz"),
    ]
    assert main(arguments) == 0
    printed = capsys.readouterr().out
    assert "input  ids                  INT64 4" in printed and "output rows                 FLOAT 4x2" in printed
    outputs = np.load(tmp_path / "out.npz")
    assert sorted(outputs.files) == ["picked", "rows"] and outputs["rows"].shape == (4, 2)


def test_run_reports_a_failing_backend_with_exit_1(tmp_path, capsys):
    model = _ids_model(tmp_path)
    assert main(["run", str(model), "--backend", "cpu", "--inputs", str(_inputs(tmp_path, [9], [0, 0]))]) == 1
    assert "onnx-gather: cpu failed on" in capsys.readouterr().err


def test_a_generated_input_above_max_elements_is_refused_before_allocating(tmp_path, capsys):
    model = _ids_model(tmp_path)
    assert main(["run", str(model), "--backend", "pyop", "--shape", "ids:3000000000"]) == 2
    assert "input 'ids' of shape (3000000000,) would have 3000000000 elements, more than --max-elements" in (
        capsys.readouterr().err
    )


def test_an_op_output_above_max_elements_fails_before_allocating(tmp_path, capsys):
    model = _ids_model(tmp_path)
    arguments = ["run", str(model), "--backend", "pyop", "--shape", "ids:600", "--max-elements", "1000"]
    assert main(arguments) == 1
    assert (
        "DmlGather: the output (600, 2) would have 1200 elements, more than the limit 1000" in capsys.readouterr().err
    )


def test_a_corrupt_inputs_file_is_bad_input(tmp_path, capsys):
    model = _ids_model(tmp_path)
    (tmp_path / "corrupt.npz").write_bytes(b"PK\x03\x04 not really a zip")
    assert main(["parity", str(model), "--inputs", str(tmp_path / "corrupt.npz")]) == 2
    assert "corrupt.npz: not a readable .npz file of arrays" in capsys.readouterr().err


@pytest.mark.directml
def test_parity_on_real_directml_reports_where_each_node_ran(tmp_path, capsys):
    require_directml()
    model = _ids_model(tmp_path)
    arguments = [
        "parity",
        str(model),
        "--backends",
        "pyop,dml",
        "--inputs",
        str(_inputs(tmp_path, [0, 5, -1], [1, 2])),
        "--report",
        str(tmp_path / "r.json"),
        "--atol",
        "0",
        "--rtol",
        "0",
    ]
    assert main(arguments) == 0
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["backends"]["dml"]["placement"] == {"DmlExecutionProvider": {"nodes": 2, "names": []}}
    versions = report["backends"]["dml"]["versions"]
    assert (versions["onnxruntime-directml"], versions["directml"][:7]) == ("1.24.4", "1.15.4+")
    assert versions["wine"][0].isdigit() and versions["mesa"].endswith("(lavapipe)")
    assert all(by_backend["dml"]["equal"] for by_backend in report["outputs"].values())
    assert "dml: nodes placed by ONNX Runtime: 2 on DmlExecutionProvider." in capsys.readouterr().out


@pytest.mark.directml
def test_run_on_real_directml_prints_its_outputs(tmp_path, capsys):
    require_directml()
    model = _ids_model(tmp_path)
    arguments = [
        "run",
        str(model),
        "--backend",
        "dml",
        "--inputs",
        str(_inputs(tmp_path, [0, 5, -1], [1, 2])),
        "--outputs",
        str(tmp_path / "out.npz"),
    ]
    assert main(arguments) == 0
    assert "on dml: the model as given, ONNX Runtime's DirectML execution provider" in capsys.readouterr().out
    expected = main(
        [
            "run",
            str(model),
            "--backend",
            "pyop",
            "--inputs",
            str(tmp_path / "inputs.npz"),
            "--outputs",
            str(tmp_path / "pyop.npz"),
        ]
    )
    assert expected == 0
    dml, pyop = np.load(tmp_path / "out.npz"), np.load(tmp_path / "pyop.npz")
    for name in pyop.files:
        assert dml[name].tobytes() == pyop[name].tobytes() and dml[name].dtype == pyop[name].dtype


def test_a_standard_model_failing_on_pyop_is_not_pointed_to_pyop(capsys):
    sample = sample_model_path()
    # The error names DmlGather (pyop converts first), yet the model holds no DML ops and pyop was chosen.
    assert main(["run", str(sample), "--backend", "pyop", "--max-elements", "10"]) == 1
    failure = capsys.readouterr().err.strip().splitlines()[-1]
    assert failure == (
        f"onnx-gather: pyop failed on {sample}: GatherError: DmlGather: the output (1, 6, 8) would have 48 elements, "
        "more than the limit 10"
    )


def test_a_converted_model_on_a_native_backend_cannot_run_there_and_is_pointed_to_pyop_or_lower(tmp_path, capsys):
    model = _ids_model(tmp_path)
    converted = tmp_path / "dml.onnx"
    assert main(["convert", str(model), "-o", str(converted)]) == 0
    capsys.readouterr()
    assert main(["run", str(converted), "--backend", "cpu"]) == 4  # nothing ran: not a difference, not bad input
    assert capsys.readouterr().err.strip().splitlines() == [
        f"onnx-gather: cannot run: backend cpu cannot take {converted}: the model holds onnx-gather's DML ops, which "
        "the cpu backend cannot run: use pyop, or `onnx-gather lower` the model into standard ONNX first"
    ]
    report = tmp_path / "r.json"
    assert main(["parity", str(converted), "--backends", "pyop,cpu", "--report", str(report)]) == 4
    document = json.loads(report.read_text())
    assert document["verdict"] == "incomplete" and document["passed"] is False
    assert document["backends"]["cpu"]["status"] == "skipped"
    assert "which the cpu backend cannot run" in document["backends"]["cpu"]["reason"]
    assert capsys.readouterr().out.strip().splitlines()[-1] == (
        "INCOMPLETE: cpu could not run, though named (--allow-skipped accepts that); no backend besides the "
        "reference compared every output."
    )


@pytest.mark.directml
def test_a_device_that_does_not_exist_gets_no_dynamic_dims_hint(tmp_path, capsys):
    require_directml(wine=True)
    model = _ids_model(tmp_path)
    assert main(["run", str(model), "--backend", "dml", "--device-id", "3"]) == 1
    error = capsys.readouterr().err
    assert "real DirectML under Wine has one device, 0 (lavapipe), not 3" in error
    assert "dynamic dims" not in error.strip().splitlines()[-1] and "Hint" not in error


def _exp_model(tmp_path):
    """x * w -> Exp -> + w: the exponential is where float backends part (each its own approximation)."""
    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal(256).astype(np.float32), "w")
    nodes = [
        h.make_node("Mul", ["x", "w"], ["scaled"], name="scale"),
        h.make_node("Exp", ["scaled"], ["grown"], name="grow"),
        h.make_node("Add", ["grown", "w"], ["y"], name="shift"),
    ]
    graph = h.make_graph(
        nodes,
        "exp",
        [h.make_tensor_value_info("x", T.FLOAT, [256])],
        [h.make_tensor_value_info("y", T.FLOAT, [256])],
        [w],
    )
    path = tmp_path / "exp.onnx"
    onnx.save(h.make_model(graph, opset_imports=[h.make_opsetid("", 17)], ir_version=8), path)
    return path


@pytest.mark.openvino
def test_all_tensors_names_the_gather_where_openvino_parts_from_the_custom_ops(tmp_path, capsys):
    # Out of bounds, OpenVINO's Gather reads 0 where DirectML reads memory; the Flatten after it then differs too,
    # but its input already did: the Gather is named, not the Flatten.
    model = _ids_model(tmp_path)
    report, markdown = tmp_path / "r.json", tmp_path / "r.md"
    inputs = _inputs(tmp_path, [0, 9], [1, 2])  # 9: past the table's 6 rows
    arguments = [
        "parity",
        str(model),
        "--backends",
        "pyop,openvino",
        "--inputs",
        str(inputs),
        "--all-tensors",
        "--report",
        str(report),
        "--markdown",
        str(markdown),
    ]
    assert main(arguments) == 1
    document = json.loads(report.read_text())
    assert document["all_tensors"]["note"].startswith("marking every value as an output can change what a backend")
    (first,) = document["divergence"]["openvino"][:1]
    assert (first["node"], first["op_type"], first["output"]) == ("lookup", "Gather", "rows")
    printed = capsys.readouterr().out
    assert "node 'lookup' (Gather): output 'rows'" in printed and "can change what a backend fuses" in printed
    assert "node 'lookup' (Gather): output 'rows'" in markdown.read_text()


@pytest.mark.directml
def test_all_tensors_on_real_directml_names_the_first_node_where_directml_parts_from_the_cpu(tmp_path):
    require_directml()
    report = tmp_path / "r.json"
    arguments = [
        "parity",
        str(_exp_model(tmp_path)),
        "--backends",
        "cpu,dml",
        "--reference",
        "cpu",
        "--atol",
        "0",
        "--rtol",
        "0",
        "--all-tensors",
        "--report",
        str(report),
    ]
    # Exp's last place: within float error of the float64 values (as far from them as the CPU's), so it passes;
    # judged by a tolerance of 0 alone, the Exp is the first node that differs.
    assert main(arguments) == 0
    assert main([*arguments, "--no-exact"]) == 1
    (first,) = json.loads(report.read_text())["divergence"]["dml"][:1]
    assert (first["node"], first["op_type"], first["placement"]) == ("grow", "Exp", "DirectML")
    assert first["mismatches"] > 0 and first["max_abs"] > 0
    assert [p.name for p in tmp_path.iterdir() if "all-tensors" in p.name] == []  # the marked copy is gone


def test_markdown_escapes_what_markdown_would_eat_and_sums_up_several_models(tmp_path):
    folder = tmp_path / "zoo"
    folder.mkdir()
    _ids_model(folder, "a_b.onnx")
    _ids_model(folder, "c.onnx")
    markdown = tmp_path / "r.md"
    assert main(["parity", str(folder), "--backends", "pyop,cpu", "--markdown", str(markdown)]) == 0
    text = markdown.read_text()
    assert "**2 of 2 models passed.**" in text
    assert f"## {folder / 'a_b.onnx'!s}".replace("_", "\\_") in text  # a_b, not a<em>b
    assert "Hint: " not in text  # nothing failed, no hint
    assert "Warning: dynamic dims were generated as 1 (ids \\[n\\] as 1)" in text  # a warning all the same


def test_the_out_of_bounds_line_says_when_the_reference_did_not_run(tmp_path, capsys):
    model = _ids_model(tmp_path)
    assert (
        main(
            [
                "parity",
                str(model),
                "--backends",
                "cpu",
                "--reference",
                "cpu",
                "--inputs",
                str(_inputs(tmp_path, [7], [1, 2])),
            ]
        )
        == 1
    )
    printed = capsys.readouterr().out
    assert "Out-of-bounds indices: not counted, the reference did not run." in printed
    assert "No out-of-bounds indices met" not in printed


def test_run_with_debug_prints_the_traceback_of_a_backend_failure(tmp_path, capsys):
    model = _ids_model(tmp_path)
    assert (
        main(["run", str(model), "--backend", "cpu", "--inputs", str(_inputs(tmp_path, [7], [1, 2])), "--debug"]) == 1
    )
    error = capsys.readouterr().err
    assert "Traceback" in error and "cpu failed on" in error


@pytest.mark.openvino
def test_openvino_outputs_under_every_name_of_their_port(tmp_path):
    # An Identity folded away: OpenVINO's port carries 'hidden' and 'probability', and gives 'hidden' as its name.
    graph = h.make_graph(
        [
            h.make_node("Neg", ["x"], ["hidden"], name="neg"),
            h.make_node("Identity", ["hidden"], ["probability"]),
            h.make_node("Abs", ["hidden"], ["size"]),
        ],
        "names",
        [h.make_tensor_value_info("x", T.FLOAT, [2])],
        [h.make_tensor_value_info("probability", T.FLOAT, [2]), h.make_tensor_value_info("size", T.FLOAT, [2])],
    )
    path = tmp_path / "names.onnx"
    onnx.save(h.make_model(graph, opset_imports=[h.make_opsetid("", 17)], ir_version=10), path)
    assert main(["run", str(path), "--backend", "openvino"]) == 0


@pytest.mark.directml
def test_dml_placement_lists_nodes_only_with_unnamed_ones_by_op_type_and_position(tmp_path):
    require_directml()
    graph = h.make_graph(
        [
            h.make_node("Shape", ["x"], ["s"]),
            h.make_node("Cast", ["s"], ["f"], to=T.FLOAT),
            h.make_node("Add", ["f", "f"], ["y"]),
        ],
        "unnamed",
        [h.make_tensor_value_info("x", T.FLOAT, ["n", 3])],
        [h.make_tensor_value_info("y", T.FLOAT, None)],
    )
    path = tmp_path / "unnamed.onnx"
    onnx.save(h.make_model(graph, opset_imports=[h.make_opsetid("", 17)], ir_version=8), path)
    report = tmp_path / "r.json"
    assert main(["parity", str(path), "--backends", "cpu,dml", "--reference", "cpu", "--report", str(report)]) == 0
    placement = json.loads(report.read_text())["backends"]["dml"]["placement"]
    names = [name for value in placement.values() for name in value["names"]]
    # ONNX Runtime's remark "Some nodes were not assigned ..." is not a node; every node is counted once.
    assert sorted(names) == ["Add (Add #2)", "Cast (Cast #1)", "Shape (Shape #0)"]
    assert sum(value["nodes"] for value in placement.values()) == 3
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # the named copy is gone


def test_a_generated_integer_input_beyond_an_index_range_is_named_with_the_int_range_to_give(tmp_path, capsys):
    # As in MiniLM: token type ids (two types) pass through a Cast before the lookup; --int-range 0:4 goes beyond.
    table = numpy_helper.from_array(np.arange(4, dtype=np.float32).reshape(2, 2), "types")
    graph = h.make_graph(
        [
            h.make_node("Cast", ["token_type_ids"], ["ids"], name="cast", to=T.INT64),
            h.make_node("Gather", ["types", "ids"], ["vectors"], name="type_embedding"),
        ],
        "types",
        [h.make_tensor_value_info("token_type_ids", T.INT32, ["batch", 8])],
        [h.make_tensor_value_info("vectors", T.FLOAT, ["batch", 8, 2])],
        initializer=[table],
    )
    path = tmp_path / "types.onnx"
    onnx.save(h.make_model(graph, opset_imports=[h.make_opsetid("", 17)], ir_version=10), path)
    hint = (
        "the generated integer input token_type_ids (drawn from --int-range 0:4) reaches the indices of Gather "
        "node 'type_embedding', which takes [-2, 1]: give --int-range 0:2, or real values with --inputs"
    )
    assert main(["run", str(path), "--backend", "cpu", "--seed", "3"]) == 1
    error = capsys.readouterr().err
    assert error.endswith(f"; {hint}\n") and "dynamic dims" not in error.splitlines()[-1]  # the batch is not it
    report = tmp_path / "r.json"
    assert main(["parity", str(path), "--backends", "pyop,cpu", "--seed", "3", "--report", str(report)]) == 1
    assert json.loads(report.read_text())["hint"] == hint
    assert main(["run", str(path), "--backend", "cpu", "--int-range", "0:2"]) == 0


def test_a_model_that_draws_random_values_is_said_to_be_not_deterministic_naming_the_nodes(tmp_path, capsys):
    graph = h.make_graph(
        [
            h.make_node("RandomNormalLike", ["x"], ["noise"], name="noise"),
            h.make_node("Mul", ["noise", "scale"], ["scaled"], name="scale_noise"),
            h.make_node("Add", ["x", "scaled"], ["y"], name="add"),
        ],
        "noisy",
        [h.make_tensor_value_info("x", T.FLOAT, [2, 3]), h.make_tensor_value_info("scale", T.FLOAT, [])],
        [h.make_tensor_value_info("y", T.FLOAT, [2, 3])],
    )
    path = tmp_path / "noisy.onnx"
    onnx.save(h.make_model(graph, opset_imports=[h.make_opsetid("", 17)], ir_version=10), path)
    report = tmp_path / "r.json"
    main(["parity", str(path), "--backends", "pyop,cpu", "--report", str(report)])  # equal or not, by chance
    assert "The model is not deterministic: RandomNormalLike 'noise' draws new values on every run" in (
        capsys.readouterr().out
    )
    assert json.loads(report.read_text())["random_nodes"] == ["RandomNormalLike 'noise'"]
    # Inputs that cancel the noise make the backends agree, and the report still says why to be careful.
    np.savez(tmp_path / "quiet.npz", x=np.ones((2, 3), np.float32), scale=np.zeros((), np.float32))
    assert main(["parity", str(path), "--backends", "pyop,cpu", "--inputs", str(tmp_path / "quiet.npz")]) == 0
    assert "The model is not deterministic" in capsys.readouterr().out


def test_the_reference_evaluator_backend_runs_the_dml_form_in_onnxs_own_evaluator(tmp_path):
    # Out-of-bounds indices included: DirectML's reading, through onnx.reference instead of ONNX Runtime.
    model = _ids_model(tmp_path)
    report = tmp_path / "r.json"
    inputs = _inputs(tmp_path, [0, 9, -7, 2], [1, 6])
    arguments = [
        "parity",
        str(model),
        "--backends",
        "pyop,evaluator",
        "--inputs",
        str(inputs),
        "--atol",
        "0",
        "--rtol",
        "0",
        "--report",
        str(report),
    ]
    assert main(arguments) == 0
    document = json.loads(report.read_text())
    assert document["out_of_bounds"] == {"lookup": 2, "pick": 1}
    assert all(by["evaluator"]["equal"] for by in document["outputs"].values())
    assert document["backends"]["evaluator"]["versions"] == {"onnx": importlib.metadata.version("onnx")}


def test_the_reference_evaluator_takes_float16_as_it_is(tmp_path):
    # FLOAT16 on the DML nodes themselves (no carrying Casts): NaN payloads kept, DirectML's 2-byte reading out of
    # bounds (an odd element count: the padding reads 0), bit for bit as the semantics compute it.
    bits = np.array([0x7C01, 0xFE33, 0x3C00, 0x8001, 0x7E00], np.uint16)  # NaNs with payloads, 1, a subnormal
    table = bits.view(np.float16)
    graph = h.make_graph(
        [h.make_node("Gather", ["table", "ids"], ["rows"], name="lookup", axis=0)],
        "half",
        [h.make_tensor_value_info("table", T.FLOAT16, [5]), h.make_tensor_value_info("ids", T.INT64, [6])],
        [h.make_tensor_value_info("rows", T.FLOAT16, [6])],
    )
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)], ir_version=10)
    converted = onnx_gather.to_dml(model, native_float16=True)
    assert [n.op_type for n in converted.graph.node] == ["DmlGather"]
    assert converted.graph.node[0].input[0] == "table"
    ids = np.array([0, 1, 4, -5, 5, 7], np.int64)  # in range, negative, and out of bounds past the odd end
    expected = semantics.dml_gather(table, ids, 0, 1)
    assert evaluator.evaluate(converted, {"table": table, "ids": ids})[0].view(np.uint16).tolist() == (
        expected.view(np.uint16).tolist()
    )
    path = tmp_path / "half.onnx"
    onnx.save(model, path)
    outcome = backends.create("evaluator").run(backends.Model(path, model), {"table": table, "ids": ids})
    assert outcome.outputs["rows"].view(np.uint16).tolist() == expected.view(np.uint16).tolist()
    assert expected.view(np.uint16).tolist()[:2] == [0x7C01, 0xFE33] and 0 in expected.view(np.uint16).tolist()[4:]


def test_run_parity_returns_typed_results_and_the_caller_words_the_hint(tmp_path):
    path = _ids_model(tmp_path)
    model = backends.Model(path, onnx.load(path))
    feeds = Feeds({"ids": np.array([0, 9]), "picks": np.array([[1, 2]])}, frozenset({"picks"}), seed=7)
    built = [backends.create(name) for name in ("cpu", "lowered", "cuda")]
    parity = run_parity(model, feeds, built, backends.create("pyop"), Tolerance(0.0, 0.0))
    assert [(name, run.status) for name, run in parity.backends.items()] == [
        ("pyop", "ok"),
        ("cpu", "error"),
        ("lowered", "ok"),
        ("cuda", "skipped"),
    ]
    cpu = parity.backends["cpu"]
    assert isinstance(cpu.error, Exception) and cpu.outcome is None and cpu.reason == one_line(cpu.error)
    assert parity.failures == [cpu.error] and parity.passed is False
    rows = [parity.backends[name].outcome.outputs["rows"] for name in ("pyop", "lowered")]
    assert parity.outputs["rows"]["lowered"] == compare(*rows, Tolerance(0.0, 0.0))
    assert parity.out_of_bounds == {"lookup": 1, "pick": 0} and parity.out_of_bounds_mode == "directml"
    document = json.loads(json.dumps(comparison_entry(parity.outputs["rows"]["lowered"])))
    assert document["equal"] is True
    # The hint is worded after the run, from the typed failure: the generated input is not the index's source.
    assert parity_hint(parity, model.proto, InputChoice()) == ""


def test_parity_builds_each_backend_once_for_a_folder(tmp_path, monkeypatch):
    folder = tmp_path / "zoo"
    folder.mkdir()
    _ids_model(folder, "a.onnx")
    _ids_model(folder, "b.onnx")
    built = []
    create = backends.create
    monkeypatch.setattr(backends, "create", lambda name, *rest: built.append(name) or create(name, *rest))
    assert (
        main(["parity", str(folder), "--backends", "pyop,cpu,lowered", "--reference", "cpu", "--shape", "ids:2"]) == 0
    )
    assert sorted(built) == ["cpu", "exact", "lowered", "pyop"]  # and the yardstick
