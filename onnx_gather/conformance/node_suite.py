"""ONNX's backend node test cases (those of the installed onnx) on real DirectML, through ONNX Runtime's DirectML
provider with its CPU provider beside it (the ``dml`` backend), judged as ONNX Runtime's own backend test series
judges them, and held against the cases ONNX Runtime's DirectML CI expects to fail (``ort_dml_ci.json``).

Each case runs as onnx stamps it and, where its operator has no DirectML kernel at that opset but an older version
of it has one, once more re-stamped to the newest opset the provider has a kernel for (``restamp``). One JSON line
per case is appended to a results file as it is done, so that a run stopped anywhere goes on where it stopped.
"""

from __future__ import annotations

import functools
import json
import re
import tempfile
import warnings
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import numpy as np
import onnx
from onnx.backend.test.case.test_case import TestCase

from onnx_gather.directml.process import DirectMlError, RunnerError
from onnx_gather.directml.worker import DML_PROVIDER, Runner
from onnx_gather.graphs.placement.nodes import directml_versions
from onnx_gather.graphs.plumbing import bodies
from onnx_gather.runtime import backends
from onnx_gather.runtime.comparison import Comparison, Tolerance, compare
from onnx_gather.runtime.model import Model

PASS, FAIL, NOT_RUN = "pass", "fail", "not run"
# ONNX Runtime 1.24.4 refuses, on every provider, a model stamped with an opset newer than 25 ("Current official
# support for domain ai.onnx is till opset 25") or of an IR version newer than 13 (onnx 1.23 stamps opset 28 with
# IR 14); its backend test series skips the first kind.
ORT_OPSET = 25
_REFUSED_STAMP = re.compile(r"Unsupported model IR version|is under development and support for this is limited")
_LOCATION = re.compile(r"Load model from \S+ failed:|\S*_work\\\S+:\d+ \S+ ")
CASE_SECONDS = 120.0  # a request of the runner that takes longer ends the runner: that case fails
_HRESULT = re.compile(r"\b(8[0-9A-F]{7})\b\s*(.*)")


def node_cases() -> list[TestCase]:
    """Every node test case of the installed onnx (``onnx.backend.test.case.node``), by name."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # some case generators overflow on purpose
        from onnx.backend.test.case.node import collect_testcases

        cases = collect_testcases()
    return sorted((case for case in cases if case.kind == "node"), key=lambda case: case.name)


def _main_opset(model: onnx.ModelProto) -> int | None:
    return next((entry.version for entry in model.opset_import if entry.domain in ("", "ai.onnx")), None)


def standard_ops(model: onnx.ModelProto) -> list[str]:
    """The op types of the standard domain in every graph of ``model``, without repeats, in order."""
    names = [node.op_type for body in bodies(model) for node in body.nodes if node.domain in ("", "ai.onnx")]
    return list(dict.fromkeys(names))


def _since(op_type: str, opset: int) -> int | None:
    try:
        return onnx.defs.get_schema(op_type, opset, "").since_version
    except onnx.defs.SchemaError:
        return None


def _has_kernel(op_type: str, opset: int) -> bool:
    return _since(op_type, opset) in directml_versions(op_type)


@dataclass(frozen=True)
class Restamp:
    """A case re-stamped: the opset its model was given, and the model, or why the checker refused it there."""

    opset: int
    model: onnx.ModelProto | None
    refused: str = ""


def restamp(model: onnx.ModelProto) -> Restamp | None:
    """Where an operator of ``model`` has no DirectML kernel at the model's opset (or ONNX Runtime refuses that
    opset, ``ORT_OPSET``) but an older version of it, or the same at an older opset, has one: the model at the
    newest older opset at which every such operator has a kernel (its IR version lowered to what that opset needs,
    never raised), or why onnx's checker refuses it there. None where no operator is so."""
    opset = _main_opset(model)
    if opset is None:
        return None
    ops = [op for op in standard_ops(model) if directml_versions(op)]
    lacking = [op for op in ops if opset > ORT_OPSET or not _has_kernel(op, opset)]
    if not lacking:
        return None
    newest = min(opset - 1, ORT_OPSET)
    target = next((o for o in range(newest, 0, -1) if all(_has_kernel(op, o) for op in lacking)), None)
    if target is None:
        return None
    proto = onnx.ModelProto()
    proto.CopyFrom(model)
    for entry in proto.opset_import:
        if entry.domain in ("", "ai.onnx"):
            entry.version = target
    needed = onnx.helper.find_min_ir_version_for(list(proto.opset_import), ignore_unknown=True)
    proto.ir_version = min(proto.ir_version, max(needed, 3))
    try:
        onnx.checker.check_model(proto, full_check=True)
    except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError) as error:
        return Restamp(target, None, _first_line(str(error)))
    return Restamp(target, proto)


def _first_line(text: str, limit: int = 200) -> str:
    line = next((part.strip() for part in text.splitlines() if part.strip()), "")
    return line if len(line) <= limit else line[: limit - 3] + "..."


def hresult(text: str) -> str | None:
    """The HRESULT (8 hex digits, 8xxxxxxx) an error's message names, if any."""
    code = _HRESULT.search(_LOCATION.sub("", text))
    return code[1] if code else None


def refused_stamp(error: BaseException) -> bool:
    """Whether ``error`` is ONNX Runtime 1.24.4 refusing the model's stamp (IR version, opset) on every provider."""
    return bool(_REFUSED_STAMP.search(str(error)))


def error_symptom(error: BaseException) -> str:
    """A failure in a few words: DirectML's HRESULT and its text where there is one, else the message's first line."""
    text = _LOCATION.sub("", str(error))
    code = _HRESULT.search(text)
    where = f"{type(error).__name__}: "
    return where + (_first_line(f"{code[1]} {code[2]}") if code else _first_line(text))


def difference_symptom(
    name: str, comparison: Comparison, reference: np.ndarray, actual: np.ndarray, said: str = "{} is expected"
) -> str:
    """An output outside its tolerance, in a few words: how many values, how far, and the first one (``said``
    words the reference's value there)."""
    if comparison.note:
        return f"{name}: {comparison.note}"
    text = f"{name}: {comparison.mismatches} of {reference.size} differ"
    if comparison.max_abs is not None:
        text += (
            f" beyond atol {comparison.atol:g} rtol {comparison.rtol:g} (max abs {comparison.max_abs:.3g}, "
            f"max rel {comparison.max_rel:.3g} where both are finite)"
        )
    if comparison.first_mismatch is not None:
        where = tuple(comparison.first_mismatch)
        text += f"; at {list(where)}: {actual[where]} where {said.format(reference[where])}"
    return text


def _numeric(array: np.ndarray) -> np.ndarray:
    """ml_dtypes' 8- and 4-bit floats and integers as FLOAT32, which holds each of their values (and NaN), so that
    they are compared by value as assert_allclose compares them; other arrays as they are."""
    return array.astype(np.float32) if array.dtype.kind == "V" and array.dtype.itemsize == 1 else array


def compare_outputs(
    expected: Sequence[np.ndarray], outputs: Mapping[str, np.ndarray], names: Sequence[str], tolerance: Tolerance
) -> str:
    """ONNX Runtime's backend test series' rule (``OrtBackendTest.assert_similar_outputs``): as many outputs, each
    of the expected type, strings equal, numbers within ``np.testing.assert_allclose(expected, actual, rtol, atol)``
    (NaN meeting NaN, infinities equal). '' where it passes, else the first output that does not, in a few words."""
    if len(outputs) != len(expected):
        return f"{len(outputs)} outputs where {len(expected)} are expected"
    for name, reference in zip(names, expected, strict=True):
        reference, actual = by_value(reference, outputs[name])
        comparison = compare(reference, actual, tolerance)
        if not comparison.within_tolerance:
            return difference_symptom(name, comparison, reference, actual)
    return ""


def by_value(reference: object, actual: object) -> tuple[np.ndarray, np.ndarray]:
    """Two outputs as arrays to compare by value: of one type, ml_dtypes' 8- and 4-bit ones as FLOAT32."""
    reference, actual = np.asarray(reference), np.asarray(actual)
    if reference.dtype == actual.dtype:
        return _numeric(reference), _numeric(actual)
    return reference, actual


@dataclass(frozen=True)
class Expectations:
    """ONNX Runtime's DirectML CI (``ort_dml_ci.json``): which cases its Python backend test series runs on a
    DirectML-only wheel, which it expects to fail there, and the tolerances it holds each to."""

    data: dict

    @classmethod
    def bundled(cls) -> Expectations:
        text = resources.files("onnx_gather.conformance").joinpath("ort_dml_ci.json").read_text()
        return cls(json.loads(text))

    def _matching(self, patterns: Iterable[str], case: str) -> str | None:
        # Its runner names a case's test after the device (test_abs_cpu) and excludes one a pattern finds anywhere in
        # that name (re.search), as onnx.backend.test.runner.Runner does.
        test = case + self.data["test_name_suffix"]
        return next((pattern for pattern in patterns if re.search(pattern, test)), None)

    def ran(self, case: str) -> bool:
        """Whether the CI's onnx has ``case`` at all (newer onnx releases add cases it never ran)."""
        return case in self._cases

    @functools.cached_property
    def _cases(self) -> frozenset[str]:
        return frozenset(self.data["cases"])

    def excluded(self, case: str) -> str | None:
        """The pattern of the lists for every provider (and FLOAT16) that keeps ``case`` out of its runs, if any."""
        general = [pattern for patterns in self.data["general"].values() for pattern in patterns]
        return self._matching([*self.data["always_excluded"], *general], case)

    def failing_on_directml(self, case: str) -> str | None:
        """The pattern of its DirectML list (``current_failing_tests_pure_DML``) that marks ``case`` failing."""
        return self._matching(self.data["current_failing_tests_pure_DML"], case)

    def tolerance(self, case: str) -> Tolerance:
        """rtol 1e-3 and atol 1e-5 unless its overrides name ``case`` (they name cases without the device)."""
        rtol = self.data["rtol_overrides"].get(case, self.data["rtol_default"])
        return Tolerance(atol=self.data["atol_overrides"].get(case, self.data["atol_default"]), rtol=rtol)


def _tensor(value: object) -> np.ndarray | None:
    """A value of a case as an array (TensorProtos of the types numpy lacks as ml_dtypes'), or None: not a tensor."""
    if isinstance(value, onnx.TensorProto):
        return onnx.numpy_helper.to_array(value)
    if isinstance(value, np.ndarray | np.generic):
        return np.asarray(value)
    return None


def data_sets(case: TestCase) -> list[tuple[list[np.ndarray], list[np.ndarray]]] | str:
    """``case``'s inputs and expected outputs as arrays, or why the runner cannot take them (it carries tensors
    only: no sequences, optionals or maps)."""
    sets = []
    for inputs, outputs in case.data_sets:
        arrays = [[_tensor(value) for value in values] for values in (inputs, outputs)]
        for values, arrayed in zip((inputs, outputs), arrays, strict=True):
            for value, array in zip(values, arrayed, strict=True):
                if array is None:
                    return f"a value of the case is a {type(value).__name__}: the runner carries tensors only"
        sets.append((arrays[0], arrays[1]))
    return backends.create("dml").refusal(case.model) or sets


# How the dml backend fails a case: DirectML or ONNX Runtime refuses it, or the runner ends.
FAILURES = (DirectMlError, RunnerError, backends.CannotRun)
DataSets = Sequence[tuple[list, list]]
# How a case's model is run on its data sets (``run_model``): one results line's run, as stamped or re-stamped.
RunModel = Callable[[backends.Backend, onnx.ModelProto, DataSets, Tolerance], dict]


def suite_model(model: onnx.ModelProto) -> Model:
    """A case's model as the backends run it."""
    return Model(Path(tempfile.gettempdir()) / "case.onnx", model)


def feeds(model: onnx.ModelProto, inputs: Sequence[np.ndarray]) -> dict[str, np.ndarray]:
    """A data set's inputs by the names of the model's inputs (a case may leave its last optional ones out)."""
    return {value.name: array for value, array in zip(model.graph.input, inputs, strict=False)}


def run_model(backend: backends.Backend, model: onnx.ModelProto, sets: DataSets, tolerance: Tolerance) -> dict:
    """Run ``model`` on each data set (inputs, expected outputs): its verdict, symptom and the nodes placed on DirectML
    and on the CPU provider (None where the run failed before ONNX Runtime reported them)."""
    wrapped = suite_model(model)
    names = wrapped.output_names
    placed: dict = {}
    for inputs, expected in sets:
        try:
            outcome = backend.run(wrapped, feeds(model, inputs))
        except FAILURES as error:
            verdict = NOT_RUN if refused_stamp(error) else FAIL
            return {"verdict": verdict, "symptom": error_symptom(error), "directml": None, "cpu": None}
        placed = outcome.placement
        symptom = compare_outputs(expected, outcome.outputs, names, tolerance)
        if symptom:
            note = f" ({outcome.notes[0]})" if outcome.notes else ""
            return {"verdict": FAIL, "symptom": symptom + note, **counts(placed)}
    return {"verdict": PASS, "symptom": "", **counts(placed)}


def counts(placement: Mapping[str, dict]) -> dict:
    """The nodes a run placed on DirectML and on the CPU provider (``directml``, ``cpu``)."""
    directml = placement.get(DML_PROVIDER, {}).get("nodes", 0)
    return {"directml": directml, "cpu": sum(p["nodes"] for name, p in placement.items() if name != DML_PROVIDER)}


def run_case(backend: backends.Backend, case: TestCase, expectations: Expectations, run: RunModel = run_model) -> dict:
    """One results line of ``case``, each run by ``run``: as stamped and, where ``restamp`` applies, re-stamped."""
    line = {"case": case.name, "opset": _main_opset(case.model), "ops": standard_ops(case.model)}
    sets = data_sets(case)
    if isinstance(sets, str):
        return {**line, "verdict": NOT_RUN, "symptom": sets, "directml": None, "cpu": None, "restamp": None}
    tolerance = expectations.tolerance(case.name)
    line.update(run(backend, case.model, sets, tolerance))
    again = restamp(case.model)
    if again is None:
        line["restamp"] = None
    elif again.model is None:
        line["restamp"] = {"opset": again.opset, "refused": again.refused}
    else:
        line["restamp"] = {"opset": again.opset, **run(backend, again.model, sets, tolerance)}
    return line


def read_results(path: Path) -> dict[str, dict]:
    """The results file's lines by case (a last line cut short by a stop is left out: that case runs again)."""
    results: dict[str, dict] = {}
    if path.exists():
        for text in path.read_text().splitlines():
            try:
                line = json.loads(text)
            except json.JSONDecodeError:
                continue
            results[line["case"]] = line
    return results


def run_suite(
    results: Path,
    select: str | None = None,
    report: Callable[[dict], None] = lambda line: None,
    run: RunModel = run_model,
) -> dict[str, dict]:
    """Run every node case (those whose name ``select`` finds, a regular expression) not yet in ``results``, each
    model by ``run`` on the ``dml`` backend, one runner for all, appending each case's line as it is done; a case
    that ends the runner fails, and the next one starts it again. Returns every line of ``results``."""
    done = read_results(results)
    pending = [case for case in node_cases() if case.name not in done and (not select or re.search(select, case.name))]
    expectations = Expectations.bundled()
    backend = backends.create("dml")
    with Runner(timeout=CASE_SECONDS) as runner, results.open("a") as out:
        backend.runner = runner
        for case in pending:
            line = run_case(backend, case, expectations, run)
            out.write(json.dumps(line) + "\n")
            out.flush()
            done[case.name] = line
            report(line)
    return done


def _run_words(run: Mapping) -> str:
    placed = "" if run.get("directml") is None else f" [DirectML {run['directml']}, CPU {run['cpu']}]"
    return f"{run['verdict']}{placed}" + (f": {run['symptom']}" if run.get("symptom") else "")


def describe(line: Mapping) -> str:
    """A results line in one line of text: the verdict as stamped, and re-stamped where that applies."""
    text = f"{line['case']} (opset {line['opset']}): {_run_words(line)}"
    again = line.get("restamp")
    if again and "refused" in again:
        text += f"; at opset {again['opset']}: the checker refuses it ({again['refused']})"
    elif again:
        text += f"; re-stamped to opset {again['opset']}: {_run_words(again)}"
    return text


# How a case stands against ONNX Runtime's DirectML CI: among the cases its lists do not exclude for every provider.
PASS_BOTH, FAIL_BOTH = "pass here and there", "fail here and there"
FAIL_HERE_ONLY, PASS_HERE_ONLY = "fail here, pass there", "pass here, listed failing there"


def standing(line: Mapping, expectations: Expectations) -> str | None:
    """Where ``line`` (as stamped) stands against the CI: one of the four above; None where the CI's onnx has no such
    case, its general lists exclude the case, or it did not run here."""
    if not expectations.ran(line["case"]) or expectations.excluded(line["case"]) or line["verdict"] == NOT_RUN:
        return None
    listed = expectations.failing_on_directml(line["case"]) is not None
    if line["verdict"] == PASS:
        return PASS_HERE_ONLY if listed else PASS_BOTH
    return FAIL_BOTH if listed else FAIL_HERE_ONLY


def _on_directml(run: Mapping | None) -> bool:
    return bool(run and run.get("directml"))


def _final(line: Mapping) -> Mapping:
    """The run that counts after re-stamping: the re-stamped one where there is one, else the one as stamped."""
    again = line.get("restamp")
    return again if again and "verdict" in again else line


def figures(results: Mapping[str, Mapping], expectations: Expectations) -> dict:
    """The suite's counts: verdicts as stamped and after re-stamping, the cases whose run placed nodes on DirectML
    (all of them, and those that passed), and the standing against the CI (``standing``)."""
    lines = list(results.values())
    restamped = [line["restamp"] for line in lines if line.get("restamp") and "verdict" in line["restamp"]]
    standings = Counter(standing(line, expectations) for line in lines)
    return {
        "cases": len(lines),
        "as stamped": dict(Counter(line["verdict"] for line in lines)),
        "re-stamped": dict(Counter(run["verdict"] for run in restamped)),
        "re-stamp refused": sum(1 for line in lines if line.get("restamp") and "refused" in line["restamp"]),
        "after re-stamping": dict(Counter(_final(line)["verdict"] for line in lines)),
        "ran on DirectML": sum(_on_directml(line) for line in lines),
        "passed on DirectML": sum(_on_directml(line) and line["verdict"] == PASS for line in lines),
        "ran on DirectML after re-stamping": sum(_on_directml(_final(line)) for line in lines),
        "passed on DirectML after re-stamping": sum(
            _on_directml(_final(line)) and _final(line)["verdict"] == PASS for line in lines
        ),
        "not in the CI's onnx": sum(1 for line in lines if not expectations.ran(line["case"])),
        "excluded by the CI for every provider": sum(
            1 for line in lines if expectations.ran(line["case"]) and expectations.excluded(line["case"])
        ),
        "CI": {key: standings[key] for key in (PASS_BOTH, FAIL_BOTH, FAIL_HERE_ONLY, PASS_HERE_ONLY)},
    }


def suite_summary(results: Mapping[str, Mapping], expectations: Expectations) -> str:
    """The figures in words, with the cases that fail here but pass on the CI's GPUs, and those it lists failing
    that pass here."""
    counts = figures(results, expectations)
    text = [json.dumps(counts, indent=1)]
    for title in (FAIL_HERE_ONLY, PASS_HERE_ONLY):
        names = [describe(line) for line in results.values() if standing(line, expectations) == title]
        text += [f"{title}: {len(names)}", *(f"  {name}" for name in names)]
    return "\n".join(text)


def recorded() -> dict[str, dict]:
    """The full suite's results as recorded (``node_suite.jsonl`` beside this module; docs/node-suite.md)."""
    with resources.as_file(resources.files("onnx_gather.conformance").joinpath("node_suite.jsonl")) as path:
        return read_results(path)


def sample(results: Mapping[str, Mapping]) -> list[str]:
    """A fixed sample of ``results``' cases holding every operator the provider has a DirectML kernel for that some
    case holds: for each, the case of it with DirectML's run (re-stamped where that applies) and the fewest operators,
    the first by name among equals."""
    ops = sorted({op for line in results.values() for op in line["ops"] if directml_versions(op)})
    chosen = {
        min(
            (line for line in results.values() if op in line["ops"]),
            key=lambda line: (not _on_directml(_final(line)), len(line["ops"]), line["case"]),
        )["case"]
        for op in ops
    }
    return sorted(chosen)
