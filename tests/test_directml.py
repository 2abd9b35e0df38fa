"""Real DirectML under Wine: the set-up command, the runner's protocol and its processes, and conformance.

These tests run on real DirectML where ``onnx-gather setup-directml`` has prepared it; elsewhere they are skipped
with that reason, and in CI (CI=true, where the README's test command sets it up) they fail instead.
"""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import onnx
import pytest
from conftest import (
    KERNEL_OF_16_BIT_DATA,
    SIXTEEN_BIT,
    SUMMARIES,
    assert_identical,
    assert_runner_ended,
    dump_shaders,
    processes_mentioning,
    require_directml,
    runner_children,
    shaders,
)
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper

import onnx_gather
from onnx_gather.app import cli
from onnx_gather.conformance import provider_door as conformance
from onnx_gather.directml import install, layout, leftovers, memory_limit
from onnx_gather.directml.process import DirectMlError, RunnerError
from onnx_gather.directml.worker import Runner
from onnx_gather.graphs.convert import convert
from onnx_gather.graphs.placement.check import check
from onnx_gather.runtime import backends
from onnx_gather.runtime.comparison import Tolerance
from onnx_gather.runtime.inputs import Feeds
from onnx_gather.runtime.parity import run_parity

SEED = 20261122


def _gather_model(count: int = 1) -> onnx.ModelProto:
    nodes = [h.make_node("Gather", ["data", "indices"], [f"y{k}"], f"g{k}", axis=0) for k in range(count)]
    graph = h.make_graph(
        nodes,
        "gathers",
        [h.make_tensor_value_info("data", T.FLOAT, [6]), h.make_tensor_value_info("indices", T.INT64, [3])],
        [h.make_tensor_value_info(f"y{k}", T.FLOAT, [3]) for k in range(count)],
    )
    return h.make_model(graph, opset_imports=[h.make_opsetid("", 13)], ir_version=8)


FEEDS = {"data": np.arange(10, 16, dtype=np.float32), "indices": np.array([1, 0, -1])}


def _constant_gather_model(mebibytes: int) -> onnx.ModelProto:
    """A Gather of a FLOAT32 constant of ``mebibytes`` MiB: loading it takes at least that much memory, twice."""
    data = numpy_helper.from_array(np.zeros(mebibytes << 18, np.float32), "data")
    node = h.make_node("Gather", ["data", "indices"], ["y"], axis=0)
    graph = h.make_graph(
        [node],
        "constant_gather",
        [h.make_tensor_value_info("indices", T.INT64, [3])],
        [h.make_tensor_value_info("y", T.FLOAT, [3])],
        [data],
    )
    return h.make_model(graph, opset_imports=[h.make_opsetid("", 13)], ir_version=8)


# --- set-up ---------------------------------------------------------------------------------------------------------


@pytest.mark.directml
def test_check_says_ready_with_the_versions_it_uses(capsys):
    require_directml(wine=True)
    assert cli.main(["setup-directml", "--check"]) == 0
    out = capsys.readouterr().out
    assert f"ONNX Runtime {layout.ORT_DIRECTML_VERSION} with DirectML 1.15.4" in out
    assert "Mesa 25." in out and "wine-8" in out
    assert "a Gather ran on DirectML" in out
    # vkd3d 1.14 with DXIL: shader model 6, so that DirectML's DXIL-only kernels run.
    device = "shader model 6.0, WaveOps 1, Int64ShaderOps 1, Native16BitShaderOps 0"
    assert f"Direct3D 12 vkd3d-1.14 (ONNX_GATHER_DIRECTML_D3D12): {device}" in out


@pytest.mark.directml
@pytest.mark.parametrize(
    ("stack", "device"),
    [
        ("wine", "shader model 5.1, WaveOps 0, Int64ShaderOps 1, Native16BitShaderOps 0"),  # Wine 8's vkd3d 1.6
        (layout.NATIVE16, "shader model 6.2, WaveOps 1, Int64ShaderOps 1, Native16BitShaderOps 1"),  # as most GPUs
    ],
)
def test_the_other_devices_are_reachable_per_run(stack, device, capsys, monkeypatch):
    require_directml(wine=True)
    monkeypatch.setenv(layout.D3D12_VARIABLE, stack)
    assert cli.main(["setup-directml", "--check"]) == 0
    out = capsys.readouterr().out
    assert f"Direct3D 12 {stack} (ONNX_GATHER_DIRECTML_D3D12): {device}" in out
    assert ("FLOAT16: refused on this device" in out) == (stack == layout.NATIVE16)


@pytest.mark.directml
def test_a_second_set_up_changes_nothing():
    require_directml(wine=True)
    where = layout.Layout.default()
    before = {p: p.stat().st_mtime_ns for p in [where.state_file, *where.bin.iterdir(), where.prefix / "system.reg"]}
    out = io.StringIO()
    assert install.setup(where, out) == 0
    assert "system packages: installed" in out.getvalue()
    assert "runner.exe, direct.exe and d3d12.dll: in place" in out.getvalue()
    assert "Wine prefix: in place" in out.getvalue()
    after = {p: p.stat().st_mtime_ns for p in before}
    assert after == before


# --- the runner -----------------------------------------------------------------------------------------------------


@pytest.mark.directml
def test_runner_runs_a_model_and_ends_its_processes():
    require_directml(wine=True)
    with Runner() as runner:
        pids, folder = runner_children(runner)
        loaded = runner.load(_gather_model(2))
        assert loaded.inputs == ["data", "indices"] and loaded.outputs == ["y0", "y1"]
        outputs = runner.run(loaded, FEEDS)
        assert outputs["y0"].tolist() == [11, 10, 15] and outputs["y1"].tolist() == [11, 10, 15]
        assert runner.version == layout.ORT_DIRECTML_VERSION
    assert_runner_ended(pids, folder)


@pytest.mark.directml
def test_an_onnx_runtime_error_comes_back_as_a_message_and_the_runner_goes_on(directml):
    # DirectML refuses GatherElements indices smaller than the data off the axis (ONNX allows them).
    graph = h.make_graph(
        [h.make_node("GatherElements", ["data", "indices"], ["y"], "narrow", axis=0)],
        "narrow",
        [h.make_tensor_value_info("data", T.FLOAT, [3, 4]), h.make_tensor_value_info("indices", T.INT64, [2, 2])],
        [h.make_tensor_value_info("y", T.FLOAT, [2, 2])],
    )
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 13)], ir_version=8)
    with pytest.raises(DirectMlError, match="80070057"):
        directml.load(model)
    loaded = directml.load(_gather_model())
    assert directml.run(loaded, FEEDS)["y0"].tolist() == [11, 10, 15]
    directml.free(loaded)


@pytest.mark.directml
def test_missing_inputs_are_named():
    require_directml(wine=True)
    with Runner() as runner:
        loaded = runner.load(_gather_model())
        with pytest.raises(ValueError, match="no value given for the model's inputs indices"):
            runner.run(loaded, {"data": FEEDS["data"]})


@pytest.mark.directml
def test_a_runner_leaves_no_wine_folder_in_the_temporary_folder():
    # Wine's server makes a wine-XXXXXX folder in TMPDIR and leaves it; the runner gives Wine a TMPDIR of its own.
    require_directml(wine=True)
    temporary = Path(tempfile.gettempdir())
    before = set(temporary.glob("wine-*"))
    with Runner() as runner:
        runner.run(runner.load(_gather_model()), FEEDS)
    assert set(temporary.glob("wine-*")) == before


@pytest.mark.directml
def test_a_request_past_its_time_limit_ends_wine_and_xvfb():
    require_directml(wine=True)
    runner = Runner(timeout=0.5)
    runner.start()
    pids, folder = runner_children(runner)
    os.kill(runner._wine.pid, signal.SIGSTOP)  # stopped, it cannot answer however fast the machine is
    with pytest.raises(RunnerError, match=r"no answer within 0.5 s; Wine and Xvfb were ended"):
        runner.load(_gather_model())
    assert_runner_ended(pids, folder)
    assert not runner.running


@pytest.mark.directml
def test_a_runner_that_dies_during_a_run_is_reported_at_once_with_how_it_ended():
    # The crash path, on every machine: the runner is stopped (so it cannot answer first), then killed. With a
    # time limit of 600 s, "ended unexpectedly" (not "no answer within 600 s") shows the error came at once.
    require_directml(wine=True)
    with Runner(timeout=600) as runner:
        loaded = runner.load(_gather_model())
        pids, folder = runner_children(runner)
        os.kill(runner._wine.pid, signal.SIGSTOP)
        killer = threading.Timer(0.5, os.kill, (runner._wine.pid, signal.SIGKILL))
        killer.start()
        with pytest.raises(RunnerError, match=r"run: the runner ended unexpectedly \(killed by SIGKILL\); Wine and"):
            runner.run(loaded, FEEDS)
        killer.join()
        assert_runner_ended(pids, folder)


@pytest.mark.directml
def test_a_runner_that_died_is_reported_and_the_next_load_starts_a_new_one():
    require_directml(wine=True)
    with Runner() as runner:
        loaded = runner.load(_gather_model())
        pids, folder = runner_children(runner)
        os.killpg(runner._wine.pid, signal.SIGKILL)
        runner._wine.wait()
        with pytest.raises(RunnerError, match="the runner was ended; load the model again"):
            runner.run(loaded, FEEDS)
        assert_runner_ended(pids, folder)
        again = runner.load(_gather_model())
        assert runner.run(again, FEEDS)["y0"].tolist() == [11, 10, 15]
        # The old model's session id is the new one's: it must not run the new runner's session
        assert again.id == loaded.id
        with pytest.raises(RunnerError, match="the runner that loaded this model has ended since; load the model"):
            runner.run(loaded, FEEDS)
        runner.free(loaded)  # nothing to free: the new model stays loaded
        assert runner.run(again, FEEDS)["y0"].tolist() == [11, 10, 15]


@pytest.mark.directml
def test_a_value_the_provider_fuses_away_is_named_or_left_out_and_the_others_come_back(directml):
    # An Add whose one consumer is a Relu is fused into it: marked as an output too, ONNX Runtime returns no tensor
    graph = h.make_graph(
        [
            h.make_node("Add", ["x", "x"], ["sum"], "add"),
            h.make_node("Relu", ["sum"], ["y"], "relu"),
            h.make_node("Mul", ["x", "x"], ["square"], "mul"),
        ],
        "fused",
        [h.make_tensor_value_info("x", T.FLOAT, [4])],
        [h.make_tensor_value_info(name, T.FLOAT, [4]) for name in ("y", "sum", "square")],
    )
    loaded = directml.load(h.make_model(graph, opset_imports=[h.make_opsetid("", 13)], ir_version=8), fallback=True)
    x = np.array([-2, -1, 1, 2], np.float32)
    try:
        with pytest.raises(DirectMlError, match=r"^output 'sum': ONNX Runtime returned no tensor for it: the DirectML"):
            directml.run(loaded, {"x": x})
        outputs = directml.run(loaded, {"x": x}, absent=True)
    finally:
        directml.free(loaded)
    assert sorted(outputs) == ["square", "y"]
    assert outputs["y"].tolist() == [0, 0, 2, 4] and outputs["square"].tolist() == [4, 1, 1, 4]


def _empty_model(tmp_path, consumed: bool) -> Path:
    """y = Neg(x), z = Neg(e) (empty when e is), s = Shape(x); with ``consumed``, z is no output but feeds w."""
    nodes = [
        h.make_node("Neg", ["x"], ["y"], "neg_x"),
        h.make_node("Neg", ["e"], ["z"], "neg_e"),
        h.make_node("Shape", ["x"], ["s"], "shape"),
    ]
    outputs = ["y", "z", "s"]
    if consumed:
        nodes.append(h.make_node("Concat", ["z", "x"], ["w"], "concat", axis=0))
        outputs = ["y", "w", "s"]
    types = {"y": (T.FLOAT, [3]), "z": (T.FLOAT, ["n"]), "w": (T.FLOAT, ["m"]), "s": (T.INT64, [1])}
    graph = h.make_graph(
        nodes,
        "empty",
        [h.make_tensor_value_info("x", T.FLOAT, [3]), h.make_tensor_value_info("e", T.FLOAT, ["n"])],
        [h.make_tensor_value_info(name, *types[name]) for name in outputs],
    )
    path = tmp_path / "empty.onnx"
    onnx.save(h.make_model(graph, opset_imports=[h.make_opsetid("", 17)], ir_version=8), path)
    return path


EMPTY_FEEDS = {"x": np.array([1, 2, 3], np.float32), "e": np.zeros(0, np.float32)}


@pytest.mark.directml
def test_an_empty_output_is_noted_as_spoiling_the_others(tmp_path):
    # docs/semantics.md 9: ONNX Runtime's DirectML provider leaves y unwritten (tools/empty_output.py measures it)
    require_directml()
    path = _empty_model(tmp_path, consumed=False)
    outcome = backends.create("dml").run(backends.Model(path, onnx.load(path)), EMPTY_FEEDS)
    assert outcome.outputs["z"].shape == (0,) and outcome.outputs["s"].tolist() == [3]
    assert outcome.notes == [
        "output 'z' is empty, and ONNX Runtime's DirectML provider then leaves the other outputs "
        "it copies back from the device unwritten: they hold leftover memory (docs/semantics.md, "
        "section 9)"
    ]


@pytest.mark.directml
def test_all_tensors_runs_again_without_the_marked_values_that_came_back_empty(tmp_path):
    require_directml()
    path = _empty_model(tmp_path, consumed=True)
    model = backends.Model(path, onnx.load(path))
    parity = run_parity(
        model, Feeds(EMPTY_FEEDS), [backends.create("dml")], backends.create("cpu"), Tolerance(), all_tensors=True
    )
    dml = parity.marked_runs["dml"].outcome
    assert dml.outputs["z"].shape == (0,) and not dml.notes  # z, marked, came back empty: the run was made again
    assert dml.outputs["y"].tolist() == [-1, -2, -3] and dml.outputs["w"].tolist() == [1, 2, 3]
    assert parity.passed and parity.compared == 1


@pytest.mark.directml
def test_an_error_inside_the_with_block_still_ends_everything():
    require_directml(wine=True)
    with pytest.raises(KeyError), Runner() as runner:
        pids, folder = runner_children(runner)
        raise KeyError("boom")
    assert_runner_ended(pids, folder)


# --- conformance ----------------------------------------------------------------------------------------------------


def _assert_all_bit_identical(run: conformance.Run) -> None:
    for outcome in run.outcomes:
        assert outcome.matches, f"DirectML differs from the semantics: {outcome.case.describe()}"
        assert outcome.ops_match, f"the custom ops differ from the semantics: {outcome.case.describe()}"
        assert outcome.lowered_matches, f"the lowered graph differs from the semantics: {outcome.case.describe()}"


@pytest.mark.directml
def test_every_case_in_range_and_out_of_bounds_is_bit_identical_on_directml_the_semantics_ops_and_lowering(
    directml,
):
    # Half the cases hold out-of-bounds indices; a tenth int64 values beyond the int32 range (counted apart: GPUs
    # whose shaders have 64-bit integers may read those differently).
    cases = conformance.random_gather_cases(SEED, 2400, out_of_bounds=0.4, beyond_int32=0.1)
    start = time.perf_counter()
    run = conformance.run_cases(directml, cases)
    seconds = time.perf_counter() - start
    covered = {(o.case.op, conformance.type_name(o.case.data.dtype), o.case.indices.dtype.name) for o in run.outcomes}
    assert len(covered) == 2 * 12 * 2, "every op, data type and index type"
    assert {o.case.indices.ndim for o in run.outcomes if o.case.op == "Gather"} >= set(range(7))
    assert {o.case.data.ndim for o in run.outcomes} == set(range(1, 7))
    assert any(o.case.axis < 0 for o in run.outcomes) and any((o.case.indices < 0).any() for o in run.outcomes)
    assert sum(bool(o.case.out_of_bounds) for o in run.outcomes) == 1200
    assert sum(o.case.beyond_int32 for o in run.outcomes) == 240
    # No case reads memory outside its tensor (data of 0 elements): none is excluded.
    assert all(o.case.data.size for o in run.outcomes)
    SUMMARIES.append(
        f"Conformance, seed {SEED}, out_of_bounds=directml: {len(cases)} cases on real DirectML "
        f"({run.directml_seconds:.1f} s there, {1000 * run.directml_seconds / len(cases):.1f} s per 1,000 cases; "
        f"{seconds:.1f} s with the custom ops and the lowered graph), 0 excluded\n" + conformance.results_table(run)
    )
    _assert_all_bit_identical(run)


@pytest.mark.directml
def test_every_gather_nd_case_is_bit_identical_on_directml_the_semantics_ops_and_lowering(directml):
    # DML_GATHER_ND1 as ONNX Runtime's DirectML provider makes it of ONNX GatherND: batch_dims 0 to 2, every tuple
    # length, the 12 data types; ONNX's GatherND takes INT64 indices only.
    cases = conformance.random_gather_cases(SEED + 3, 600, out_of_bounds=0.4, beyond_int32=0.1, nd=True)
    run = conformance.run_cases(directml, cases)
    assert {conformance.type_name(o.case.data.dtype) for o in run.outcomes} == set(conformance.HARNESS_DTYPES)
    assert {o.case.batch for o in run.outcomes} == {0, 1, 2}
    assert {o.case.indices.shape[-1] for o in run.outcomes} == set(range(1, 7))
    assert {o.case.data.ndim for o in run.outcomes} == set(range(1, 7))
    assert any((o.case.indices < 0).any() for o in run.outcomes)
    assert sum(bool(o.case.out_of_bounds) for o in run.outcomes) == 300
    assert sum(o.case.beyond_int32 for o in run.outcomes) == 60
    SUMMARIES.append(
        f"GatherND conformance, seed {SEED + 3}, out_of_bounds=directml: {len(cases)} cases on real DirectML "
        f"({run.directml_seconds:.1f} s there), 0 excluded\n" + conformance.results_table(run)
    )
    _assert_all_bit_identical(run)


@pytest.mark.directml
@pytest.mark.parametrize("stack", list(KERNEL_OF_16_BIT_DATA))
def test_16_bit_gathers_are_bit_identical_to_the_semantics_on_the_dxbc_and_on_the_dxil_kernel(
    stack, tmp_path, monkeypatch
):
    # The same FLOAT16, INT16 and UINT16 cases on the default device (DXBC kernels) and on the native 16-bit one
    # (DXIL cs_6_2 kernels, what GPUs with native 16-bit shader ops run). The custom ops and the lowered graph do not
    # depend on the device: the tests above hold them.
    require_directml(wine=True)
    monkeypatch.setenv(layout.D3D12_VARIABLE, stack)
    dumps = dump_shaders(monkeypatch, tmp_path / "shaders")
    cases = conformance.random_gather_cases(SEED + 4, 450, out_of_bounds=0.4, beyond_int32=0.1, data_types=SIXTEEN_BIT)
    cases += conformance.random_gather_cases(
        SEED + 5, 150, out_of_bounds=0.4, beyond_int32=0.1, nd=True, data_types=SIXTEEN_BIT
    )
    start = time.perf_counter()
    with Runner() as runner:
        results = conformance.run_directml(runner, cases)
    seconds = time.perf_counter() - start
    kinds = shaders(dumps)
    assert bool(kinds["dxil"]) == (KERNEL_OF_16_BIT_DATA[stack] == "dxil")
    assert {(c.op, conformance.type_name(c.data.dtype)) for c in cases} == {
        (op, t) for op in ("Gather", "GatherElements", "GatherND") for t in SIXTEEN_BIT
    }
    for case, result in zip(cases, results, strict=True):
        assert conformance.identical(result, conformance.expected(case)), case.describe()
    outside = sum(bool(c.out_of_bounds) for c in cases)
    SUMMARIES.append(
        f"16-bit gathers on {stack} ({KERNEL_OF_16_BIT_DATA[stack].upper()} kernels; {len(kinds['dxil'])} DXIL "
        f"shaders compiled): {len(cases)} cases ({outside} out of bounds) in {seconds:.1f} s, each bit-identical to "
        "the semantics"
    )


@pytest.mark.directml
def test_the_stand_in_modes_differ_from_directml_out_of_bounds(directml):
    cases = conformance.random_gather_cases(SEED + 1, 250, out_of_bounds=1.0)
    results = conformance.run_directml(directml, cases)
    for mode in ("clamp", "zero"):
        pairs = zip(cases, results, strict=True)
        differing = sum(not conformance.identical(conformance.expected(case, mode), r) for case, r in pairs)
        assert differing > 100, mode


@pytest.mark.directml
def test_directml_is_deterministic(directml):
    cases = conformance.random_gather_cases(SEED + 2, 100, out_of_bounds=0.5)
    first = conformance.run_directml(directml, cases)
    second = conformance.run_directml(directml, cases)
    for a, b in zip(first, second, strict=True):
        assert_identical(a, b)


# --- where the DirectML provider puts a gather: check's verdicts against the real provider -------------------------


def _one_gather(op, data_type, data_dims, index_dims, axis=0, opset=13, index_type=T.INT64, batch=0):
    attributes = {"axis": axis} if axis is not None else {"batch_dims": batch}
    graph = h.make_graph(
        [h.make_node(op, ["data", "indices"], ["y"], name="g", **attributes)],
        "placement",
        [
            h.make_tensor_value_info("data", data_type, data_dims),
            h.make_tensor_value_info("indices", index_type, index_dims),
        ],
        [h.make_value_info("y", h.make_tensor_type_proto(data_type, None))],
    )
    return h.make_model(graph, opset_imports=[h.make_opsetid("", opset)], ir_version=8)


PLACEMENT_CASES = {
    "FLOAT Gather": (_one_gather("Gather", T.FLOAT, [4, 3], [2]), "DirectML"),
    "FLOAT16 Gather opset 11": (_one_gather("Gather", T.FLOAT16, [4, 3], [2], opset=11), "DirectML"),
    "DOUBLE GatherElements": (_one_gather("GatherElements", T.DOUBLE, [4, 3], [2, 3]), "DirectML"),
    "BOOL Gather, INT32 indices": (_one_gather("Gather", T.BOOL, [4], [2], index_type=T.INT32), "DirectML"),
    "UINT64 Gather, 8 dimensions": (_one_gather("Gather", T.UINT64, [1] * 4 + [2], [2] * 4, axis=4), "DirectML"),
    "BFLOAT16 Gather": (_one_gather("Gather", T.BFLOAT16, [4, 3], [2]), "CPU"),
    "BFLOAT16 GatherElements": (_one_gather("GatherElements", T.BFLOAT16, [4, 3], [2, 3]), "CPU"),
    "STRING Gather": (_one_gather("Gather", T.STRING, [4], [2]), "CPU"),
    "output of 9 dimensions": (_one_gather("Gather", T.FLOAT, [2] * 5, [1] * 5), "fails"),
    "indices of 9 dimensions": (_one_gather("Gather", T.FLOAT, [3], [1] * 9), "fails"),
    "GatherElements indices narrower off the axis": (
        _one_gather("GatherElements", T.FLOAT, [4, 5], [2, 5], axis=1),
        "fails",
    ),
    "GatherElements, dynamic dims": (_one_gather("GatherElements", T.FLOAT, ["a", 5], ["a", 2], axis=1), "DirectML"),
    "INT64 GatherND, batch_dims 1": (
        _one_gather("GatherND", T.INT64, [2, 3, 4], [2, 5, 1], axis=None, batch=1),
        "DirectML",
    ),
    "BFLOAT16 GatherND": (_one_gather("GatherND", T.BFLOAT16, [3, 4], [2, 2], axis=None), "CPU"),
    "GatherND to a scalar": (_one_gather("GatherND", T.FLOAT, [3, 4], [2], axis=None), "fails"),
    "GatherND of 9 dimensions": (_one_gather("GatherND", T.FLOAT, [2] * 9, [1, 1], axis=None), "fails"),
}


@pytest.mark.directml
@pytest.mark.parametrize("case", PLACEMENT_CASES)
def test_check_predicts_where_the_directml_provider_puts_each_gather(directml, case):
    model, expected = PLACEMENT_CASES[case]
    (verdict,) = [v for v in check(model) if v.gather]
    assert verdict.status == expected, verdict.reason
    if expected == "fails":  # the provider takes the node and fails, CPU fallback or not
        with pytest.raises(DirectMlError, match="80070057"):
            directml.load(model, fallback=True)
        return
    loaded = directml.load(model, fallback=True)
    try:
        on = {"DirectML": "DmlExecutionProvider", "CPU": "CPUExecutionProvider"}[expected]
        assert loaded.placed == {on: 1}, loaded.placed
    finally:
        directml.free(loaded)


@pytest.mark.directml
def test_keep_cpu_gathers_leaves_what_the_provider_keeps_on_cpu_so_the_custom_ops_predict_it(directml):
    # A BFLOAT16 gather runs on ONNX Runtime's CPU provider, where an out-of-bounds index is an error: so it is in
    # the route converted with keep_cpu_gathers. The FLOAT gather beside it runs on DirectML and reads as DirectML does.
    graph = h.make_graph(
        [
            h.make_node("Cast", ["f"], ["b"], name="to_bf16", to=T.BFLOAT16),
            h.make_node("Gather", ["b", "i"], ["g"], name="bf16", axis=0),
            h.make_node("Cast", ["g"], ["y"], name="from_bf16", to=T.FLOAT),
            h.make_node("Gather", ["f", "i"], ["z"], name="f32", axis=0),
        ],
        "mixed",
        [h.make_tensor_value_info("f", T.FLOAT, [4]), h.make_tensor_value_info("i", T.INT64, [2])],
        [h.make_tensor_value_info("y", T.FLOAT, [2]), h.make_tensor_value_info("z", T.FLOAT, [2])],
    )
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 13)], ir_version=8)
    kept, report = convert(model, keep_cpu_gathers=True)
    assert [c.node for c in report.left] == ["bf16"] and [c.node for c in report.changed] == ["f32"]
    assert "kept standard, as the DirectML provider keeps it: BFLOAT16" in report.left[0].reason
    loaded = directml.load(model, fallback=True)
    try:
        on_cpu = loaded.placement["CPUExecutionProvider"]
        assert "Gather (bf16)" in on_cpu and "Gather (f32)" not in on_cpu, loaded.placement
        f = np.array([1.5, 2.5, -3.0, 4.0], np.float32)
        inside = {"f": f, "i": np.array([3, -4])}
        real = directml.run(loaded, inside)
        predicted = onnx_gather.InferenceSession(kept).run(None, inside)
        for name, value in zip(("y", "z"), predicted, strict=True):
            assert_identical(real[name], value)
        outside = {"f": f, "i": np.array([1, 6])}
        with pytest.raises(DirectMlError, match=r"out of bounds|invalid|indices"):
            directml.run(loaded, outside)
        with pytest.raises(Exception, match=r"out of bounds|invalid|indices"):
            onnx_gather.InferenceSession(kept).run(None, outside)
        onnx_gather.InferenceSession(convert(model)[0]).run(None, outside)  # without: DirectML's reading, no error
    finally:
        directml.free(loaded)


def _dml_run(tmp_path) -> tuple[list[str], dict[str, str], Path]:
    """The command line of `run --backend dml` on 200 gathers (a load of seconds: time to interrupt or kill it), its
    environment with a private TMPDIR, and that folder."""
    model = tmp_path / "gathers.onnx"
    onnx.save(_gather_model(200), model)
    private = tmp_path / "tmp"
    private.mkdir()
    command = [sys.executable, "-m", "onnx_gather", "run", str(model), "--backend", "dml"]
    return command, {**os.environ, "TMPDIR": str(private)}, private


@pytest.mark.directml
def test_ctrl_c_during_a_dml_run_ends_at_once_with_one_line_and_leaves_nothing(tmp_path):
    require_directml(wine=True)
    command, environment, private = _dml_run(tmp_path)
    child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=environment)
    deadline = time.monotonic() + 120
    while not list(private.glob("onnx-gather-dml-*/wine.log")) and time.monotonic() < deadline:
        time.sleep(0.1)  # until Wine runs
    folders = [str(folder) for folder in private.glob("onnx-gather-dml-*")]
    assert folders, "the runner should have started"
    child.send_signal(signal.SIGINT)
    err = child.communicate(timeout=60)[1]
    assert (child.returncode, err) == (130, "onnx-gather: interrupted\n"), err
    # No private prefix, no wine-XXXXXX folder (ONNX Runtime 1.32's telemetry leaves its .ses file: not ours).
    assert [p.name for p in private.iterdir() if p.name != ".ses"] == []
    assert processes_mentioning(folders[0]) == [], "a Wine server, Wine service or Xvfb of the runner is left"


@pytest.mark.directml
def test_the_kernels_directml_compiles_for_the_gathers_are_reported(tmp_path, monkeypatch):
    # vkd3d dumps every shader it compiles, named by its source kind: DXBC (shader model 5) or DXIL (6).
    require_directml(wine=True)
    dumps = dump_shaders(monkeypatch, tmp_path / "shaders")
    cases = conformance.random_gather_cases(SEED, 240, out_of_bounds=0.4) + conformance.random_gather_cases(
        SEED, 60, nd=True
    )
    with Runner() as runner:
        run = conformance.run_cases(runner, cases)
    _assert_all_bit_identical(run)
    kinds = {kind: len(names) for kind, names in shaders(dumps).items()}
    assert sum(kinds.values()) > 0, "vkd3d compiled no shader: the dump folder is not where Wine writes"
    SUMMARIES.append(
        f"Kernels DirectML compiled for {len(cases)} gathers (Gather, GatherElements, GatherND; 12 data types) on "
        f"{layout.d3d12_stack()}: {kinds['dxbc']} DXBC (shader model 5), {kinds['dxil']} DXIL (shader model 6)"
    )


@pytest.mark.directml
def test_the_runner_has_a_memory_limit_and_says_when_directml_runs_out_of_it(monkeypatch):
    require_directml(wine=True)
    monkeypatch.setenv(memory_limit.VARIABLE, "0.3")
    runner = Runner()
    runner.start()  # Wine and an idle runner: about 140 MiB
    name = runner._folder.name  # its memory cgroup's name
    with pytest.raises(RunnerError, match=r"DirectML under Wine ran out of memory \(the runner's limit: 0\.3 GB"):
        runner.load(_constant_gather_model(128))
    assert not runner.running
    roots = (Path("/sys/fs/cgroup"), Path("/sys/fs/cgroup/memory"))  # cgroup v2, v1
    assert not any((root / name).exists() for root in roots)  # the runner's cgroup is removed


@pytest.mark.directml
@pytest.mark.parametrize("stack", ["vkd3d-1.14", layout.NATIVE16])
def test_a_descriptor_heap_costs_what_it_holds(stack, monkeypatch):
    # vkd3d 1.14 as released gives a shader-visible descriptor heap's Vulkan descriptor sets the layouts of the
    # device's largest heap, and lavapipe allocates a set whole for its layout: this model's one heap cost about
    # 490 MiB (the runner's peak: 691 MiB; 201 MiB with d3d12/heap-sized-set-layouts.patch, as measured).
    require_directml(wine=True)
    monkeypatch.setenv(layout.D3D12_VARIABLE, stack)
    monkeypatch.setenv(memory_limit.VARIABLE, "0.3")
    with Runner() as runner:
        outputs = runner.run(runner.load(_gather_model()), FEEDS)
    assert outputs["y0"].tolist() == [11, 10, 15]


# --- what a killed run left -----------------------------------------------------------------------------------------


def test_only_folders_of_dead_owners_in_onnx_gathers_form_are_removed(tmp_path):
    own = f"{leftovers.PREFIX}{os.getpid()}-{leftovers.start_time(os.getpid())}-live"
    assert leftovers.prefix() == own[: -len("live")]
    reused = f"{leftovers.PREFIX}{os.getpid()}-{leftovers.start_time(os.getpid()) + 1}-reused"  # pid reused since
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead = f"{leftovers.PREFIX}{int(gone.stdout)}-1-dead"
    others = ["onnx-gather-dml-abc123", f"{leftovers.PREFIX}1-2-x.y", "unrelated-1-2-abc"]
    for name in (own, reused, dead, *others):
        (tmp_path / name).mkdir()
        (tmp_path / name / "wine.log").write_text("")
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / f"{leftovers.PREFIX}{int(gone.stdout)}-1-link").symlink_to(tmp_path / "elsewhere")
    removed = leftovers.remove_dead(tmp_path)
    assert sorted(removed) == sorted([reused, dead])
    link = f"{leftovers.PREFIX}{int(gone.stdout)}-1-link"  # not a folder of its own
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([own, *others, "elsewhere", link])


@pytest.mark.directml
def test_a_run_killed_with_kill_9_leaves_what_the_next_run_removes_and_a_live_runs_folder_is_kept(
    tmp_path, monkeypatch
):
    require_directml(wine=True)
    command, environment, private = _dml_run(tmp_path)
    child = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=environment)
    deadline = time.monotonic() + 120
    while not list(private.glob("onnx-gather-dml-*/wine.log")) and time.monotonic() < deadline:
        time.sleep(0.1)  # until Wine runs
    time.sleep(1.0)  # its Wine server and services start
    (folder,) = private.glob("onnx-gather-dml-*")
    assert folder.name.startswith(f"onnx-gather-dml-{child.pid}-{leftovers.start_time(child.pid)}-")
    children = [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit() and _parent(p) == child.pid]
    assert len(children) == 2  # Wine's runner and Xvfb
    child.kill()
    child.wait()
    roots = (Path("/sys/fs/cgroup"), Path("/sys/fs/cgroup/memory"))  # cgroup v2, v1
    assert folder.exists(), "kill -9: nothing of the killed run ran to clean up"
    monkeypatch.setenv("TMPDIR", str(private))
    monkeypatch.setattr(tempfile, "tempdir", None)
    with Runner() as runner:  # a later run removes what the dead one left
        assert not folder.exists() and not any((root / folder.name).exists() for root in roots)
        assert processes_mentioning(str(folder)) == [], "a Wine process of the killed run is left"
        for pid in children:  # they died with their parent (a zombie until whoever inherited it reaps it)
            assert _state(pid) in (None, "Z"), f"{pid} ({_state(pid)}) outlived its parent"
        pids, live = runner_children(runner)
        # A second run while this one lives keeps this one's folder (and cgroup), and removes its own at the end.
        second = subprocess.run(command, capture_output=True, text=True, env=environment, timeout=600)
        assert second.returncode == 0, second.stderr
        assert [p.name for p in private.glob("onnx-gather-dml-*")] == [Path(live).name]
        assert runner.run(runner.load(_gather_model()), FEEDS)["y0"].tolist() == [11, 10, 15]
    assert_runner_ended(pids, live)


def _parent(process: Path) -> int | None:
    fields = leftovers.stat_fields(process.name)
    return int(fields[1]) if fields else None


def _state(pid: int) -> str | None:
    fields = leftovers.stat_fields(pid)
    return fields[0] if fields else None


@pytest.mark.directml
def test_a_model_newer_than_onnx_runtime_1_24_reads_is_refused_with_the_ir_version_to_save_it_with(tmp_path, capsys):
    require_directml()
    graph = h.make_graph(
        [h.make_node("Neg", ["x"], ["y"])],
        "g",
        [h.make_tensor_value_info("x", T.FLOAT, [2])],
        [h.make_tensor_value_info("y", T.FLOAT, [2])],
    )
    onnx.save(h.make_model(graph, opset_imports=[h.make_opsetid("", 17)], ir_version=14), tmp_path / "new.onnx")
    assert cli.main(["run", str(tmp_path / "new.onnx"), "--backend", "dml"]) == 1
    error = capsys.readouterr().err
    assert "Unsupported model IR version: 14, max supported IR version: 13" in error
    hint = (
        "; this ONNX Runtime reads models of IR version 13 at most: save the model with ir_version = 13 (onnx's "
        "helper.make_model writes the newest by default)"
    )
    assert error.rstrip().endswith(hint)


@pytest.mark.directml
def test_int8_kernels_of_the_cpu_provider_beside_directml_run_on_a_cpu_with_amx_tiles(tmp_path):
    """ONNX Runtime's CPU provider in the runner multiplies int8 with MLAS, whose kernels use AMX tiles where the CPU
    has them (Xeons since Sapphire Rapids): Linux allows those only to a process that asked for them, which the runner
    does under Wine (runner.c, allow_amx_tiles). Without it the runner died here with "Unhandled illegal instruction"
    at a tileloadd in onnxruntime.dll. On a CPU without AMX this runs the other kernels, and must agree all the same."""
    require_directml(wine=True)
    rng = np.random.default_rng(5)
    weights = {
        "b": rng.integers(-128, 128, (256, 256), dtype=np.int8),
        "a_scale": np.array(0.02, np.float32),
        "a_zero": np.array(128, np.uint8),
        "b_scale": np.array(0.01, np.float32),
        "b_zero": np.array(0, np.int8),
    }
    node = h.make_node(
        "QGemm", ["a", "a_scale", "a_zero", "b", "b_scale", "b_zero"], ["y"], name="qgemm", domain="com.microsoft"
    )
    graph = h.make_graph(
        [node],
        "int8",
        [h.make_tensor_value_info("a", T.UINT8, [64, 256])],
        [h.make_tensor_value_info("y", T.FLOAT, [64, 256])],
        [numpy_helper.from_array(value, name) for name, value in weights.items()],
    )
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17), h.make_opsetid("com.microsoft", 1)])
    model.ir_version = 10
    onnx.save(model, tmp_path / "int8.onnx")
    loaded = backends.Model.read(tmp_path / "int8.onnx")
    feeds = {"a": rng.integers(0, 256, (64, 256), dtype=np.uint8)}
    parity = run_parity(loaded, Feeds(feeds), [backends.create("dml")], backends.create("cpu"), Tolerance())
    dml = parity.backends["dml"]
    assert dml.status == "ok", dml.reason
    assert dml.outcome.placement["CPUExecutionProvider"]["nodes"] == 1  # a contrib operator DirectML lacks
    assert parity.outputs["y"]["dml"].equal  # the same kernels as the CPU's, on the same integers
