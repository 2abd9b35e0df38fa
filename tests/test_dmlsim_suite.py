"""dmlsim held to real DirectML on ONNX's node suite (onnx_gather.conformance.dmlsim_suite): the rule of agreement
against a stand-in for real DirectML, the recorded run's figures and the disagreements docs/node-suite.md lists, and
a fixed sample of the suite on real DirectML and dmlsim, case by case."""

from __future__ import annotations

import re
import time
from pathlib import Path

import numpy as np
import pytest

from onnx_gather.conformance import dmlsim_suite, node_suite
from onnx_gather.directml.process import DirectMlError, RunnerError
from onnx_gather.directml.worker import DML_PROVIDER
from onnx_gather.runtime import backends
from onnx_gather.runtime.comparison import Tolerance

ROOT = Path(__file__).resolve().parent.parent
# The sample the DirectML test runs: gathers and scatters (bit for bit), cases a known rule's emulation or failure
# decides, and plain float operators; each agrees in the recorded run (a test below holds it to that).
SAMPLE = (
    "test_gather_0",
    "test_gather_elements_negative_indices",
    "test_gathernd_example_int32_batch_dim1",
    "test_scatter_elements_with_axis",
    "test_scatter_elements_with_negative_indices",
    "test_scatternd",
    "test_clip_min_greater_than_max",
    "test_reduce_max_empty_set",
    "test_matmul_1d_1d",
    "test_mod_float_edge_cases_fmod_0_float32",
    "test_dynamicquantizelinear",
    "test_resize_downsample_sizes_linear_pytorch_half_pixel",
    "test_pow",
    "test_qlinearmatmul_2D_int8_float16",
    "test_resize_downsample_sizes_nearest_not_smaller",
    "test_resize_tf_crop_and_resize_axes_2_3",
    "test_abs",
    "test_add_bcast",
    "test_softmax_axis_1",
    "test_conv_with_strides_padding",
    "test_maxpool_2d_default",
)


@pytest.fixture(scope="module")
def cases() -> dict:
    return {case.name: case for case in node_suite.node_cases()}


class _Canned(backends.Backend):
    """A stand-in for real DirectML: ``give`` makes its outputs from dmlsim's (or is the error it raises)."""

    name = "dml"

    def __init__(self, give) -> None:
        super().__init__()
        self.give = give

    def run(self, model, feeds):
        if isinstance(self.give, Exception):
            raise self.give
        simulated = backends.create("dmlsim").run(model, feeds).outputs
        outputs = {name: self.give(array) for name, array in simulated.items()}
        return backends.Outcome(outputs, placement={DML_PROVIDER: {"nodes": 1, "names": []}})


def _pair(case, give) -> dict:
    sets = node_suite.data_sets(case)
    return dmlsim_suite.run_pair(_Canned(give), case.model, sets, Tolerance(atol=1e-5, rtol=1e-3))


def _next_float(array: np.ndarray) -> np.ndarray:
    """Every float value one unit in the last place up (integers kept)."""
    return np.nextafter(array, np.inf) if array.dtype.kind == "f" else array


def _one_percent_up(array: np.ndarray) -> np.ndarray:
    return array * array.dtype.type(1.01) if array.dtype.kind == "f" else array


def _same(array: np.ndarray) -> np.ndarray:
    return array


def test_a_gather_agrees_only_bit_for_bit(cases):
    same = _pair(cases["test_gather_0"], _same)
    assert (same["verdict"], same["values"], same["dml"], same["dmlsim"]) == ("agree", "bit-identical", "ran", "ran")
    assert same["directml"] == 1 and same["expected"] == {"dml": "pass", "dmlsim": "pass"}
    off = _pair(cases["test_gather_0"], _next_float)
    assert off["verdict"] == "disagree" and "not bit-identical" in off["symptom"]


def test_a_float_operator_agrees_within_its_type_s_default_tolerance(cases):
    near = _pair(cases["test_abs"], _next_float)
    assert (near["verdict"], near["values"]) == ("agree", "within tolerance")
    far = _pair(cases["test_abs"], _one_percent_up)  # beyond FLOAT's 1e-5
    assert (
        far["verdict"] == "disagree"
        and far["symptom"].startswith("dmlsim: y:")
        and "where DirectML gives" in far["symptom"]
    )
    assert not dmlsim_suite.on_verdict(far)


def test_failures_agree_by_their_hresult(cases):
    case = cases["test_qlinearmatmul_2D_int8_float16"]  # dmlsim emulates 80070057 at session creation
    assert _pair(case, DirectMlError("80070057 Invalid parameter."))["verdict"] == "agree"
    other = _pair(case, DirectMlError("887A0005 The GPU device instance has been suspended."))
    assert (
        other["verdict"] == "disagree"
        and other["symptom"] == "DirectML fails with 887A0005; dmlsim fails with 80070057"
    )
    assert dmlsim_suite.on_verdict(other)


def test_a_runner_that_ends_agrees_with_the_emulated_end_of_the_process(cases):
    case = cases["test_resize_tf_crop_and_resize_axes_2_3"]
    ended = _pair(case, RunnerError("DirectML run: the runner ended unexpectedly (exit code 3)"))
    assert ended["verdict"] == "agree" and "ending the process" in ended["dmlsim"]
    assert _pair(case, DirectMlError("80070057 Invalid parameter."))["verdict"] == "disagree"


def test_a_stamp_onnx_runtime_refuses_is_not_compared(cases):
    refused = DirectMlError("CREATE_SESSION: Unsupported model IR version: 14, max supported IR version: 13")
    line = _pair(cases["test_abs"], refused)
    assert line["verdict"] == "not run" and "dmlsim" not in line
    assert dmlsim_suite.case_verdict({**line, "restamp": None}) == "not run"


def test_a_case_agrees_where_every_run_compared_agrees():
    agree, disagree, not_run = ({"verdict": v} for v in ("agree", "disagree", "not run"))
    assert dmlsim_suite.case_verdict({**not_run, "restamp": agree}) == "agree"
    assert dmlsim_suite.case_verdict({**agree, "restamp": disagree}) == "disagree"
    assert dmlsim_suite.case_verdict({**agree, "restamp": {"opset": 21, "refused": "..."}}) == "agree"
    assert dmlsim_suite.case_verdict({**not_run, "restamp": not_run}) == "not run"


def test_the_recorded_figures_count_every_case_once():
    recorded = dmlsim_suite.recorded()
    figures = dmlsim_suite.figures(recorded)
    assert len(recorded) == figures["cases"] == len(node_suite.node_cases())
    assert figures["compared"] + sum(figures["not compared"].values()) == figures["cases"]
    assert figures["agree"] + figures["disagree"] == figures["compared"]
    assert figures["disagree on the verdict"] + figures["disagree on the values only"] == figures["disagree"]
    assert figures["agree with nodes on DirectML"] <= figures["compared with nodes on DirectML"] <= figures["compared"]
    names = dmlsim_suite.disagreements(recorded)
    assert len(names) == figures["disagree"]
    for name in names:  # each with a run that disagrees and says why
        runs = [recorded[name], recorded[name].get("restamp") or {}]
        assert any(run.get("verdict") == "disagree" and run["symptom"] for run in runs), name
    summary = dmlsim_suite.suite_summary(recorded)
    assert all(f"  {node_suite.describe(recorded[name])}" in summary.splitlines() for name in names)


def _section(text: str, heading: str) -> str:
    start = text.index(f"## {heading}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end >= 0 else len(text)]


def test_the_docs_list_every_disagreement_of_the_recorded_run_and_no_other():
    section = _section((ROOT / "docs" / "node-suite.md").read_text(), "dmlsim against real DirectML")
    listed = re.findall(r"^\* `(test_\w+)`", section, re.MULTILINE)
    assert sorted(listed) == dmlsim_suite.disagreements(dmlsim_suite.recorded())


def test_the_sample_covers_gathers_scatters_known_rules_and_float_operators_and_agrees_in_the_recorded_run():
    recorded = dmlsim_suite.recorded()
    assert [name for name in SAMPLE if dmlsim_suite.case_verdict(recorded[name]) != "agree"] == []
    runs = {
        name: [r for r in (recorded[name], recorded[name].get("restamp")) if r and "verdict" in r] for name in SAMPLE
    }
    on_directml = {name for name in SAMPLE if any(run.get("directml") for run in runs[name])}
    moving = {name for name in on_directml if dmlsim_suite.bit_for_bit(recorded[name]["ops"])}
    assert {op for name in moving for op in recorded[name]["ops"]} == dmlsim_suite.EXACT_OPS - {"Scatter"}
    rules = {rule for name in SAMPLE for run in runs[name] for rule in run.get("emulated", [])}
    assert len(rules) >= 6, rules  # rewritten as a rule says DirectML computes
    failing = {name for name in SAMPLE if all(run.get("dml") not in (None, "ran") for run in runs[name])}
    assert len(failing) >= 3, failing  # DirectML fails, with an HRESULT or ending the runner
    plain = on_directml - moving - {n for n in SAMPLE for run in runs[n] if run.get("emulated")}
    assert len(plain) >= 5, plain


@pytest.mark.directml
def test_a_sample_of_the_suite_agrees_on_real_directml_and_dmlsim(tmp_path):
    from conftest import SUMMARIES, require_directml

    require_directml(wine=True)
    start = time.perf_counter()
    results = dmlsim_suite.run_suite(tmp_path / "sample.jsonl", "^(" + "|".join(map(re.escape, SAMPLE)) + ")$")
    seconds = time.perf_counter() - start
    assert sorted(results) == sorted(SAMPLE)
    disagreeing = [
        node_suite.describe(results[name]) for name in SAMPLE if dmlsim_suite.case_verdict(results[name]) != "agree"
    ]
    assert disagreeing == []
    SUMMARIES.append(
        f"dmlsim against real DirectML, a sample of {len(SAMPLE)} node cases: all agree, in {seconds:.0f} s"
    )


def test_docs_dmlsim_gives_the_recorded_run_s_figures():
    figures = dmlsim_suite.figures(dmlsim_suite.recorded())
    text = " ".join((ROOT / "docs" / "dmlsim.md").read_text().split())
    said = re.search(r"([\d,]+) of the ([\d,]+) cases compared agree: \d+ of the ([\d,]+) others", text)
    assert said is not None, "docs/dmlsim.md no longer gives the node suite's figures: update this test"
    numbers = [int(group.replace(",", "")) for group in said.groups()]
    assert numbers == [figures["agree"], figures["compared"], figures["disagree"]]
