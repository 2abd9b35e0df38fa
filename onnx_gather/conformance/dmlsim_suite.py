"""The ``dmlsim`` backend held to real DirectML on ONNX's backend node suite (``node_suite``): every case, as stamped
and re-stamped as there, run on the ``dml`` backend and on ``dmlsim`` with the same data sets, and whether they agree.

They agree on the verdict where both run, or both fail with the same HRESULT (the 8 hex digits ``8xxxxxxx`` an error
names) or both without one (a runner that ends: the failure dmlsim emulates "ending the process"); on the values
where every output of dmlsim is within its type's default tolerance (``comparison.Tolerance()``) of real DirectML's,
and bit-identical where the case's operators are all gathers and scatters. A run real DirectML does not run for a
reason outside DirectML (``node_suite.NOT_RUN``: a stamp ONNX Runtime 1.24.4 refuses on every provider, a value that
is no tensor) is not compared, nor dmlsim run on it; a case agrees where every run of it compared agrees. The lines
have the node suite's form (``node_suite.describe`` words them), with the verdict ``agree`` or ``disagree``.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from importlib import resources
from pathlib import Path

import onnx

from onnx_gather.conformance import node_suite
from onnx_gather.core import contract
from onnx_gather.runtime import backends
from onnx_gather.runtime.comparison import Tolerance, compare
from onnx_gather.runtime.model import Model

AGREE, DISAGREE = "agree", "disagree"
RAN = "ran"
BIT_IDENTICAL, WITHIN_TOLERANCE = "bit-identical", "within tolerance"
# The operators whose cases must agree bit for bit: the gathers and scatters, which move values without computing.
EXACT_OPS = frozenset({*contract.GATHER_OPS, *contract.SCATTER_BY_STANDARD})
# Why a case is not compared: its values are no tensors (node_suite.data_sets, the dml backend's refusal), or else
# ONNX Runtime 1.24.4 refuses its stamps.
NOT_TENSORS, STAMP_REFUSED = "values not tensors", "stamp refused by ONNX Runtime 1.24.4"
_TENSORS_ONLY = re.compile(r"carries tensors only")
_DIRECTML = "DirectML gives {}"


def bit_for_bit(ops: Sequence[str]) -> bool:
    """Whether a case's values must agree bit for bit: its operators (``ops``) are all gathers and scatters."""
    return bool(ops) and set(ops) <= EXACT_OPS


def _attempt(backend: backends.Backend, model: Model, feeds: dict) -> backends.Outcome | Exception:
    try:
        return backend.run(model, feeds)
    except Exception as error:  # dmlsim's verdict, whatever fails: an emulated failure, ONNX Runtime, the emulation
        return error


def _did(outcome: backends.Outcome | Exception) -> str:
    return node_suite.error_symptom(outcome) if isinstance(outcome, Exception) else RAN


def _passes(expected: list, outcome: backends.Outcome, names: list[str], tolerance: Tolerance) -> str:
    """Whether ``outcome`` passes the case's expected outputs, as the node suite holds them."""
    return (
        node_suite.FAIL if node_suite.compare_outputs(expected, outcome.outputs, names, tolerance) else node_suite.PASS
    )


def _outcome_words(outcome: backends.Outcome | Exception) -> str:
    if not isinstance(outcome, Exception):
        return "runs"
    code = node_suite.hresult(str(outcome))
    return f"fails with {code}" if code else "fails without an HRESULT"


def _values(real: backends.Outcome, emulated: backends.Outcome, names: list[str], exact: bool) -> tuple[str, str]:
    """dmlsim's outputs against real DirectML's: how close (bit-identical or within tolerance), or '' and the first
    output that is not close enough, in a few words."""
    close = BIT_IDENTICAL
    for name in names:
        reference, actual = node_suite.by_value(real.outputs[name], emulated.outputs[name])
        comparison = compare(reference, actual, Tolerance())
        if not comparison.within_tolerance:
            return "", "dmlsim: " + node_suite.difference_symptom(name, comparison, reference, actual, _DIRECTML)
        if not comparison.equal:
            if exact:
                return "", f"dmlsim: {name}: within tolerance, not bit-identical (max abs {comparison.max_abs:.3g})"
            close = WITHIN_TOLERANCE
    return close, ""


def _rules(model: Model, feeds: dict) -> dict:
    """The rules dmlsim emulated at the model, and those it found and does not emulate."""
    try:
        emulation = model.emulated(feeds)
    except Exception:  # the emulation itself failed: the run's symptom says how
        return {"emulated": [], "unemulated": []}
    return {
        "emulated": sorted({rule for _, rule in emulation.emulated}),
        "unemulated": sorted({u.rule for u in emulation.unemulated}),
    }


def run_pair(dml: backends.Backend, model: onnx.ModelProto, sets: node_suite.DataSets, tolerance: Tolerance) -> dict:
    """Run ``model`` on each data set on ``dml`` and on dmlsim: whether they agree (``verdict``, and ``symptom``,
    why not), what each did (``dml``, ``dmlsim``: ``ran`` or the error's symptom), how close the values are, whether
    each passes the expected outputs (at ``tolerance``), the rules dmlsim emulated and those it does not, and the
    nodes real DirectML's run placed. It stops at the first data set that either fails or they disagree on."""
    wrapped = node_suite.suite_model(model)
    simulated = backends.create(backends.DmlSim.name)
    exact = bit_for_bit(node_suite.standard_ops(model))
    line: dict = {"directml": None, "cpu": None}
    values = BIT_IDENTICAL
    for inputs, expected in sets:
        feeds = node_suite.feeds(model, inputs)
        try:
            real: backends.Outcome | Exception = dml.run(wrapped, feeds)
        except node_suite.FAILURES as error:
            if node_suite.refused_stamp(error):
                return {"verdict": node_suite.NOT_RUN, "symptom": node_suite.error_symptom(error), **line}
            real = error
        emulated = _attempt(simulated, wrapped, feeds)
        line = {
            **(line if isinstance(real, Exception) else node_suite.counts(real.placement)),
            "dml": _did(real),
            "dmlsim": _did(emulated),
            **_rules(wrapped, feeds),
        }
        if isinstance(real, Exception) or isinstance(emulated, Exception):
            same = _outcome_words(real) == _outcome_words(emulated)
            symptom = "" if same else f"DirectML {_outcome_words(real)}; dmlsim {_outcome_words(emulated)}"
            return {"verdict": AGREE if same else DISAGREE, "symptom": symptom, **line}
        line["notes"] = [*real.notes, *emulated.notes]
        line["expected"] = {
            "dml": _passes(expected, real, wrapped.output_names, tolerance),
            "dmlsim": _passes(expected, emulated, wrapped.output_names, tolerance),
        }
        close, symptom = _values(real, emulated, wrapped.output_names, exact)
        if symptom:
            return {"verdict": DISAGREE, "symptom": symptom, **line}
        values = close if values == BIT_IDENTICAL else values
    return {"verdict": AGREE, "symptom": "", **line, "values": values}


def run_suite(
    results: Path, select: str | None = None, report: Callable[[dict], None] = lambda line: None
) -> dict[str, dict]:
    """``node_suite.run_suite`` with each run on real DirectML and dmlsim (``run_pair``), into ``results``."""
    return node_suite.run_suite(results, select, report, run_pair)


def _runs(line: Mapping) -> list[Mapping]:
    """The runs of a case compared: as stamped and re-stamped, those real DirectML ran or failed."""
    again = line.get("restamp")
    runs = [line, *([again] if again and "verdict" in again else [])]
    return [run for run in runs if run["verdict"] != node_suite.NOT_RUN]


def case_verdict(line: Mapping) -> str:
    """A case's verdict: not run where no run of it was compared, else disagree where a run of it disagrees."""
    runs = _runs(line)
    if not runs:
        return node_suite.NOT_RUN
    return DISAGREE if any(run["verdict"] == DISAGREE for run in runs) else AGREE


def on_verdict(run: Mapping) -> bool:
    """Whether a run that disagrees disagrees on the verdict (one ran, or they failed otherwise), not the values."""
    return run["verdict"] == DISAGREE and not (run.get("dml") == RAN and run.get("dmlsim") == RAN)


def disagreements(results: Mapping[str, Mapping]) -> list[str]:
    """The cases that disagree, by name."""
    return sorted(name for name, line in results.items() if case_verdict(line) == DISAGREE)


def _why_not_compared(line: Mapping) -> str:
    return NOT_TENSORS if _TENSORS_ONLY.search(line["symptom"]) else STAMP_REFUSED


def _on_directml(line: Mapping) -> bool:
    return any(run.get("directml") for run in _runs(line))


def _both_fail(line: Mapping) -> bool:
    return all(run.get("dml") != RAN for run in _runs(line))


def figures(results: Mapping[str, Mapping]) -> dict:
    """The counts: cases, those not compared (and why), compared, agreeing (and of those, failing on both) and
    disagreeing (on the verdict, on the values only, where dmlsim noted a rule it does not emulate), the same among
    the cases whose real DirectML run placed nodes on DirectML, and the runs."""
    lines = list(results.values())
    compared = [line for line in lines if case_verdict(line) != node_suite.NOT_RUN]
    agreeing = [line for line in compared if case_verdict(line) == AGREE]
    disagreeing = [line for line in compared if case_verdict(line) == DISAGREE]
    runs = [run for line in lines for run in _runs(line)]
    return {
        "cases": len(lines),
        "not compared": dict(
            Counter(_why_not_compared(line) for line in lines if case_verdict(line) == node_suite.NOT_RUN)
        ),
        "compared": len(compared),
        "agree": len(agreeing),
        "agree, both failing": sum(_both_fail(line) for line in agreeing),
        "disagree": len(disagreeing),
        "disagree on the verdict": sum(any(on_verdict(run) for run in _runs(line)) for line in disagreeing),
        "disagree on the values only": sum(not any(on_verdict(run) for run in _runs(line)) for line in disagreeing),
        "disagree at a rule dmlsim does not emulate": sum(
            any(run["verdict"] == DISAGREE and run.get("unemulated") for run in _runs(line)) for line in disagreeing
        ),
        "compared with nodes on DirectML": sum(_on_directml(line) for line in compared),
        "agree with nodes on DirectML": sum(_on_directml(line) for line in agreeing),
        "runs compared": len(runs),
        "runs agree": sum(run["verdict"] == AGREE for run in runs),
    }


def agreement(counts: Mapping) -> float:
    """The share of compared cases that agree (``figures``)."""
    return counts["agree"] / counts["compared"] if counts["compared"] else 1.0


def suite_summary(results: Mapping[str, Mapping]) -> str:
    """The figures in words, and every case that disagrees, in a line each."""
    counts = figures(results)
    names = disagreements(results)
    text = [
        json.dumps(counts, indent=1),
        f"agree: {agreement(counts):.2%} of the cases compared",
        f"disagree: {len(names)}",
    ]
    return "\n".join([*text, *(f"  {node_suite.describe(results[name])}" for name in names)])


def recorded() -> dict[str, dict]:
    """The full suite's comparison as recorded (``dmlsim_suite.jsonl`` beside this module; docs/node-suite.md)."""
    with resources.as_file(resources.files("onnx_gather.conformance").joinpath("dmlsim_suite.jsonl")) as path:
        return node_suite.read_results(path)
