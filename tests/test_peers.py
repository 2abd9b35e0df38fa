"""The peers' gather and scatter tests (ONNX Runtime's kernel tests, WebNN's conformance tests;
tests/peers/cases.json) on real DirectML, the oracle, and through the routes that predict it.

* Real DirectML (the ``dml`` backend) gives each case the verdict recorded in the data: the same output bit for
  bit, or the same failure at the same stage. The cases it runs are packed into one model per opset; a case that
  fails gets a session of its own (two runners side by side, ``directml.alone``).
* ``pyop``, ``lowered``, ``evaluator`` and ``dmlsim`` give DirectML's output bit for bit where it ran, and fail where
  it failed: naming DirectML where the DirectML provider refused the node (``dmlsim`` with DirectML's HRESULT), with
  any error where ONNX Runtime refused the model
  before any provider saw it (an invalid axis). The cases that ran are packed into one model per route and opset
  (as are those ONNX Runtime's CPU kernels compute for the reference check), each case still checked and reported
  on its own; a case that should fail runs alone, and so does each case of a batch that failed.
* The peers' expectations differ from DirectML's verdicts exactly where the data say why; ONNX Runtime's CPU
  kernels meet the peers' expectations but where listed below (which checks the transcription).

The typed cases that repeat in another type what the others show (``REPEATS``) run through the routes, check and
the CPU in the slow tier only.
"""

from __future__ import annotations

import time
from collections import Counter, defaultdict

import numpy as np
import onnx
import peers
import pytest
from conftest import SUMMARIES, TALLIES, assert_identical, require_directml
from peers import directml, typed

from onnx_gather.graphs.placement.check import check
from onnx_gather.runtime import backends

CASES = peers.load()
ROUTES = ("pyop", "lowered", "evaluator", "dmlsim")

# Where ONNX Runtime's CPU kernels do not give the peer's expectation: the expectation of ORT's CUDA and ROCm build,
# and WebNN's clamping, where the CPU kernels refuse an out-of-bounds index.
CPU_DIFFERS_FROM_THE_PEER = {
    "ort/gather_op_test.cc:GatherOpTest.Gather_invalid_index_gpu",
    "wpt/webnn/conformance_tests/gather.https.any.js:gather float32 2D tensor and int32 0D out-of-bound positive "
    "indices default options",
    "wpt/webnn/conformance_tests/gather.https.any.js:gather float32 2D tensor and int32 0D out-of-bound negative "
    "indices default options",
    "wpt/webnn/conformance_tests/gatherElements.https.any.js:gatherElements float32 1D input and int32 out-of-bounds "
    "indices",
    "wpt/webnn/conformance_tests/gatherND.https.any.js:gatherND float32 1D input and 2D out-of-bounds indices",
    "wpt/webnn/conformance_tests/gatherND.https.any.js:gatherND float32 2D input and 2D out-of-bounds indices",
    "ort/scatter_op_test.cc:ScatterElements.AddReduction_MLFloat16",  # CPU-excluded in the test: no float16 'add'
}
# Where the routes do not give DirectML's verdict (they give the peer's expectation): what the DirectML build's ONNX
# Runtime did there, which neither core.scatter nor the host's ONNX Runtime does (the cases' "difference" says more).
ROUTES_DIFFER_FROM_DIRECTML = {
    **{
        f"ort/scatter_nd_op_test.cc:ScatterNDOpTest.ScatterND_zero_index_depth_{name}": "ONNX Runtime 1.24.4's CPU "
        "kernel divides by zero; the host's computes it"
        for name in ("updates_entire_tensor", "adds_multiple_updates", "empty_data")
    },
}
# Nodes left standard that the evaluator route computes with onnx's reference evaluator, where ONNX Runtime's CPU
# provider (1.24.4's beside DirectML, and the host's) refuses them.
EVALUATOR_COMPUTES = {
    "ort/scatter_op_test.cc:ScatterElements.AddReduction_MLFloat16": "ONNX Runtime has no FLOAT16 add reduction",
}
# DirectML's E_INVALIDARG in a recorded failure: the DirectML provider itself refused the node (others are ONNX
# Runtime's own refusals of an invalid model, before any provider sees it).
REFUSED_BY_DIRECTML = "80070057"
RESULTS = TALLIES["Peer cases through the routes (cpu for reference only)"]  # "route: outcome" -> cases


def _run(route: str, cases: list[peers.Case], folder) -> list[np.ndarray]:
    """The cases packed into one model through a backend of ``onnx_gather.runtime.backends``: their outputs."""
    proto, path = peers.model(cases), folder / f"{route}-{len(cases)}.onnx"
    onnx.save(proto, path)
    outcome = backends.create(route).run(backends.Model(path, proto), peers.feeds(cases))
    return [np.asarray(outcome.outputs[f"output_{k}"]) for k in range(len(cases))]


class _Batches:
    """A route's outputs, the cases that should run packed into one model per route and opset (a session each, not
    one per case). A case outside those, or in a batch that failed, runs alone: its failure is its own."""

    def __init__(self, folder) -> None:
        self.folder, self.outputs = folder, {}

    def output(self, route: str, case: peers.Case, batched, folder) -> np.ndarray:
        """``batched``: whether a case is expected to run on ``route`` (and so goes into the batches)."""
        if not batched(case):
            return _run(route, [case], folder)[0]
        if (route, case.opset) not in self.outputs:
            group = [each for each in CASES if each.opset == case.opset and batched(each)]
            try:
                found = dict(zip((each.name for each in group), _run(route, group, self.folder), strict=True))
            except Exception:  # each alone then, to fail with its own error
                found = {}
            self.outputs[route, case.opset] = found
        found = self.outputs[route, case.opset]
        return found[case.name] if case.name in found else _run(route, [case], folder)[0]


@pytest.fixture(scope="module")
def batches(tmp_path_factory) -> _Batches:
    return _Batches(tmp_path_factory.mktemp("peers-batches"))


def _cpu_runs(case: peers.Case) -> bool:
    return case.expected is not None and case.name not in CPU_DIFFERS_FROM_THE_PEER


def _repeats_in_another_type() -> set[str]:
    """The typed cases (``typed.type_axis``) that show, in another type, only what others show: a typed case is its
    call's in one of 11 types, and DirectML's verdict does not change with the type. Kept: a call's first case of
    each op and verdict, and a type's first of each op and verdict; the rest run in the slow tier."""
    axis, calls, types, repeats = typed.type_axis(), set(), set(), set()
    for case in CASES:
        if case.name in axis:
            t, call = axis[case.name]
            verdict = (case.op, peers.verdict_kind(case.directml))
            if (call, verdict) in calls and (t, verdict) in types:
                repeats.add(case.name)
            calls.add((call, verdict))
            types.add((t, verdict))
    return repeats


REPEATS = _repeats_in_another_type()


def _param(*values, case: peers.Case, id: str):
    return pytest.param(*values, case, id=id, marks=[pytest.mark.slow] if case.name in REPEATS else [])


def _case_params() -> list:
    """Every case; those of ``REPEATS`` marked slow."""
    return [_param(case=case, id=case.name) for case in CASES]


def _route_params() -> list:
    """(route, case) for every case; those of ``REPEATS`` marked slow."""
    return [_param(route, case=case, id=f"{route}-{case.name}") for route in ROUTES for case in CASES]


def test_the_cases_are_the_peers_tests_as_transcribed():
    counts = Counter(case.source for case in CASES)
    assert counts == {
        "ort/gather_op_test.cc": 33,
        "ort/gather_elements_op_test.cc": 242,
        "ort/gather_nd_op_test.cc": 59,
        "wpt/webnn/conformance_tests/gather.https.any.js": 22,
        "wpt/webnn/conformance_tests/gatherElements.https.any.js": 13,
        "wpt/webnn/conformance_tests/gatherND.https.any.js": 16,
        "ort/scatter_op_test.cc": 435,
        "ort/scatter_nd_op_test.cc": 32,
        "wpt/webnn/conformance_tests/scatterElements.https.any.js": 8,
        "wpt/webnn/conformance_tests/scatterND.https.any.js": 4,
    }
    names = {case.name for case in CASES}
    assert len(names) == len(CASES)
    assert CPU_DIFFERS_FROM_THE_PEER | set(ROUTES_DIFFER_FROM_DIRECTML) | set(EVALUATOR_COMPUTES) <= names
    assert set(peers.document()["sources"]) == set(counts)
    table = Counter((case.source, peers.verdict_kind(case.directml)) for case in CASES)
    SUMMARIES.append(
        "Peer cases and DirectML's recorded verdicts:\n"
        + "\n".join(f"  {source}: {kind} {count}" for (source, kind), count in sorted(table.items()))
    )


def test_the_typed_cases_are_the_tests_calls_with_the_fixed_rand():
    # Microsoft's C runtime after srand(1) (C's seed before any srand) draws 41, 18467, 6334, 26500, 19169, ...
    draws = typed.rand()
    assert [next(draws) for _ in range(5)] == [41, 18467, 6334, 26500, 19169]
    gathers, scatters = typed.specs(), typed.scatter_specs()
    assert len(gathers) == len(typed.TYPES) * len(typed.CALLS) == 231
    assert len(scatters) == len(typed.TYPES) * len(typed.SCATTER_CALLS) * len(typed.SCATTER_TESTERS) == 418
    measured = ("directml", "difference")
    written = {spec["name"]: {k: v for k, v in spec.items() if k not in measured} for spec in peers.document()["cases"]}
    assert [written.get(spec["name"]) for spec in gathers + scatters] == gathers + scatters
    assert set(typed.type_axis()) == {spec["name"] for spec in gathers + scatters}
    assert len(REPEATS) == 530  # of the 649; the fast tier keeps 119: each of the 59 calls, each type's ops' verdicts
    for spec in gathers + scatters:  # every index in the test's range, -dim to dim - 1
        axis = spec.get("attributes", {}).get("axis", 0)
        dim = spec["data"]["shape"][axis]
        assert all(-dim <= index < dim for index in spec["indices"]["values"])


@pytest.fixture(scope="module")
def live(tmp_path_factory) -> dict[str, tuple[directml.Run, int]]:
    """Every case on real DirectML: case name -> (the run it was in, its place there)."""
    require_directml(wine=True)
    folder = tmp_path_factory.mktemp("peers")
    groups = defaultdict(list)  # the cases that ran, and those it cannot feed, per opset
    for case in CASES:
        if "failed" not in case.directml:
            groups["ran" in case.directml, case.opset].append(case)
    start, found = time.perf_counter(), {}
    alone = [case for case in CASES if "failed" in case.directml]  # each failing case in a session of its own
    for cases in groups.values():
        run = directml.Run(cases, folder)
        if len(cases) > 1 and any(run.differs(k) for k in range(len(cases))):  # each alone, to say which changed
            alone += cases
        else:
            found.update((case.name, (run, k)) for k, case in enumerate(cases))
    found.update((run.cases[0].name, (run, 0)) for run in directml.alone(alone, folder))
    SUMMARIES.append(
        f"Peer cases on real DirectML: {len(CASES)} cases in {len(groups) + len(alone)} sessions, "
        f"{time.perf_counter() - start:.1f} s (the failing cases alone, two runners side by side)"
    )
    return found


@pytest.mark.directml
@pytest.mark.parametrize("case", CASES, ids=lambda case: case.name)
def test_directml_gives_the_recorded_verdict(live, case):
    run, k = live[case.name]
    assert run.differs(k) is None, run.differs(k)


@pytest.mark.directml
def test_directml_places_every_node_where_recorded(live):
    runs = {id(run): run for run, _ in live.values() if run.error is None}
    for run in runs.values():
        expected = Counter(case.directml.get("on", directml.DIRECTML) for case in run.cases)
        assert run.placement == expected


@pytest.mark.parametrize("case", _case_params())
def test_check_gives_directml_s_verdict(case):
    (verdict,) = [v for v in check(peers.model([case])) if v.op_type == case.op]
    elsewhere = case.directml.get("on", directml.DIRECTML) != directml.DIRECTML  # DirectML did not take the node
    if case.ran:
        assert verdict.status == ("CPU" if elsewhere else "DirectML"), verdict.reason
    elif case.directml["failed"] == "crash":  # no DirectML kernel (ScatterND-18): ONNX Runtime crashed on the CPU side
        assert verdict.status == "CPU", verdict.reason
    elif REFUSED_BY_DIRECTML in case.directml["message"]:
        assert verdict.status == "fails", verdict.reason
    elif elsewhere:  # the CPU provider's own error as it ran the node (an index out of bounds), where check says CPU
        assert verdict.status == "CPU", verdict.reason
    else:  # ONNX Runtime refuses the model before any provider sees it
        assert verdict.status in ("fails", "refused"), verdict.reason
    RESULTS[f"check: {verdict.status} (DirectML: {peers.verdict_kind(case.directml)})"] += 1


@pytest.mark.parametrize(("route", "case"), _route_params())
def test_route_gives_directml_s_verdict(route, case, tmp_path, batches):
    if case.name in ROUTES_DIFFER_FROM_DIRECTML or (route == "evaluator" and case.name in EVALUATOR_COMPUTES):
        # the peer's expectation, which DirectML's build did not give
        assert_identical(_run(route, [case], tmp_path)[0], case.expected)
        RESULTS[f"{route}: the peer's expectation, not DirectML's"] += 1
        return
    if not case.ran:
        with pytest.raises(Exception) as failure:
            _run(route, [case], tmp_path)
        if REFUSED_BY_DIRECTML in case.directml["message"]:
            assert "DirectML" in str(failure.value)
            if route == "dmlsim":  # the emulation gives DirectML's own HRESULT
                assert REFUSED_BY_DIRECTML in str(failure.value)
        RESULTS[f"{route}: fails as DirectML does"] += 1
        return
    assert_identical(batches.output(route, case, lambda each: each.ran, tmp_path), case.directml_output)
    RESULTS[f"{route}: bit-identical with DirectML"] += 1


def test_the_peers_differ_from_directml_exactly_where_the_data_say_why():
    found = {case.name: peers.difference(case) for case in CASES if peers.difference(case)}
    recorded = {case.name: case.difference["kind"] for case in CASES if case.difference}
    assert found == recorded
    assert all(case.difference["reason"] for case in CASES if case.difference)
    SUMMARIES.append(
        "Peers' expectations against DirectML: "
        + ", ".join(f"{kind} {count}" for kind, count in sorted(Counter(recorded.values()).items()))
        + f"; the other {len(CASES) - len(recorded)} measured cases agree"
    )


@pytest.mark.parametrize("case", _case_params())
def test_onnx_runtime_cpu_meets_the_peer_s_expectation(case, tmp_path, batches):
    # The peers' own reference for ORT's tests, and a check of the transcription; not an oracle for DirectML.
    try:
        actual = batches.output("cpu", case, _cpu_runs, tmp_path)
    except Exception as error:
        met, outcome = case.expected is None and case.error in str(error), "fails"
    else:
        met = case.expected is not None and peers.within_tolerance(case, actual)
        outcome = "bit-identical" if case.ran and peers.identical(actual, case.directml_output) else "computes"
    assert met != (case.name in CPU_DIFFERS_FROM_THE_PEER)
    RESULTS[f"cpu: {outcome} (DirectML: {peers.verdict_kind(case.directml)})"] += 1
