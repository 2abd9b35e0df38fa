"""``onnx-gather check``'s words: the closing lines, their figures (``Tally``) and the JSON report, made of the
verdicts, flags and session that ``graphs.placement.check`` and ``graphs.placement.session`` decide; and that
session, as ONNX Runtime's optimizer leaves the graph (``session_of``)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import onnx

from onnx_gather.core import contract
from onnx_gather.core.words import counted
from onnx_gather.graphs.placement import known
from onnx_gather.graphs.placement.check import Verdict
from onnx_gather.graphs.placement.nodes import Where, Why
from onnx_gather.graphs.placement.session import Fate, Session, session
from onnx_gather.graphs.plumbing import bodies
from onnx_gather.runtime import session_graph

CAUSES = {  # how the summary counts nodes on the CPU provider
    Why.CONSTANT: "constants (initializers)",
    Why.FOLDED: "folded",
    Why.CPU_PREFERRED: "shape computations",
    Why.NO_KERNEL: "without a DirectML kernel",
    Why.UNSUPPORTED: "refused by the provider's support query",
    Why.EXPANDED: "expanded into function bodies whose nodes run there",
    Why.DEVICE_TYPES: "of a type the device lacks",
}


@dataclass(frozen=True)
class SessionTally:
    """ONNX Runtime's session counted: its nodes by provider, the model's nodes fused and the nodes they became,
    the DirectML partitions, the memory copies by op type."""

    nodes: int
    runs: Counter  # Where -> nodes
    fused: int
    fused_into: int
    partitions: int
    copies: Counter  # op type -> copies


@dataclass(frozen=True)
class Tally:
    """What ``check``'s summary counts (the closing lines word it, the HTML page shows it): the model's nodes by
    provider, those on the CPU provider by cause, those no provider runs by fate, the failing and the unknown ones,
    the session's figures, the known behaviours by status and rule, and the gathers by status."""

    nodes: int
    runs: Counter  # Where -> nodes some provider runs
    causes: Counter  # Why -> nodes on the CPU provider
    gone: Counter  # Fate -> nodes no provider runs
    failing: int
    flagged: Counter  # (known.Status, rule) -> nodes
    gathers: Counter  # Where (the status) -> gathers
    session: SessionTally | None


def tallied(verdicts: list[Verdict], session: Session | None = None) -> Tally:
    """The figures of ``summary``."""
    running = [v for v in verdicts if v.fate not in GONE]
    return Tally(
        nodes=len(verdicts),
        runs=Counter(v.runs_on for v in running),
        causes=Counter(v.cause for v in running if v.runs_on == Where.CPU and v.cause),
        gone=Counter(v.fate for v in verdicts if v.fate in GONE),
        failing=sum(v.status == Where.FAILS for v in verdicts),
        flagged=Counter((k.status, k.rule) for v in verdicts for k in v.known),
        gathers=Counter(v.status for v in verdicts if v.gather),
        session=_session_tally(verdicts, session) if session is not None else None,
    )


def summary(verdicts: list[Verdict], feature_level: str, session: Session | None = None) -> list[str]:
    """A line on every node, by provider and by what DirectML is known to do; with ``session``, the nodes no
    provider runs said as such and a line on the session (its nodes, partitions and memory copies); then one on the
    gathers, if any."""
    counts = tallied(verdicts, session)
    runs, gone = counts.runs, counts.gone
    why = ", ".join(f"{count} {CAUSES[cause]}" for cause, count in counts.causes.most_common())
    on_cpu = f"{runs[Where.CPU]} on the CPU provider" + (f" ({why})" if why else "")
    parts = [f"{runs[Where.DIRECTML]} on DirectML", on_cpu]
    if gone:
        said = ", ".join(f"{gone[fate]} {GONE[fate]}" for fate in GONE if gone[fate])
        parts.append(f"{gone.total()} run by no provider ({said})")
    if counts.failing:
        parts.append(f"{counts.failing} failing")
    if runs[Where.UNKNOWN]:
        parts.append(f"{runs[Where.UNKNOWN]} unknown until the model runs")
    lines = [f"{counted(counts.nodes, 'node')} at DirectML feature level {feature_level}: {', '.join(parts)}."]
    if counts.session is not None:
        lines.append(_session_line(counts.session))
    if counts.flagged:
        said = []
        for status in known.Status:
            rules = ", ".join(f"{rule} {n}" for (s, rule), n in sorted(counts.flagged.items()) if s == status)
            if rules:
                total = sum(n for (s, _), n in counts.flagged.items() if s == status)
                label = "ruled out by the graph" if status == known.Status.RULED_OUT else status.value
                said.append(f"{total} {label} ({rules})")
        lines.append(f"Known DirectML behaviours at these nodes: {'; '.join(said)}.")
    if counts.gathers:
        lines.append(_gathers(counts.gathers, feature_level))
    return lines


GONE = {  # how the summary counts the nodes no provider runs
    Fate.CONSTANT: "Constants made initializers",
    Fate.FOLDED: "folded into constants",
    Fate.REMOVED: "removed by ONNX Runtime's optimizations",
}


def providers(verdicts: list[Verdict], session: Session) -> dict[tuple[str, str], Where]:
    """Where each node of the session runs, by graph and name: as the verdict of the model's node it runs as says
    (which knows the device's types), else as the session placed it."""
    verdict = {(v.where, v.session_node): v.runs_on for v in verdicts if v.fate == Fate.RUNS}
    return {(r.where, r.name): verdict.get((r.where, r.name), r.placed.provider) for r in session.nodes}


def _session_tally(verdicts: list[Verdict], session: Session) -> SessionTally:
    nodes = [r for r in session.nodes if r.placed.why.runs]
    where = providers(verdicts, session)
    fused = [v for v in verdicts if v.fate == Fate.FUSED]
    return SessionTally(
        nodes=len(nodes),
        runs=Counter(where[(r.where, r.name)] for r in nodes),
        fused=len(fused),
        fused_into=len({(v.where, v.session_node) for v in fused}),
        partitions=len(session.partitions),
        copies=Counter(c.op_type for c in session.copies),
    )


def _session_line(counts: SessionTally) -> str:
    """The session's nodes by provider, the fusions, the DirectML partitions and the memory copies."""
    fusion = (
        f" ({counted(counts.fused, 'node')} of the model fused into {counts.fused_into} by its optimizations)"
        if counts.fused
        else ""
    )
    copies = counts.copies.total()
    copied = (
        f"{copies} memory {'copy' if copies == 1 else 'copies'} between them"
        f" ({', '.join(f'{n} {op}' for op, n in sorted(counts.copies.items()))})"
        if copies
        else "no memory copy between them"
    )
    return (
        f"ONNX Runtime's session runs {counted(counts.nodes, 'node')}{fusion}: {counts.runs[Where.DIRECTML]} on "
        f"DirectML in {counted(counts.partitions, 'partition')}, {counts.runs[Where.CPU]} on the CPU provider; "
        f"{copied}."
    )


GATHER_STATUSES = {  # how the summary counts the gathers, by status
    Where.DIRECTML: "on DirectML",
    Where.CPU: "on the CPU provider",
    Where.FAILS: "failing",
    Where.REFUSED: "refused",
    Where.UNKNOWN: "unknown until the model runs",
    Where.DML: "as DML nodes (converted by onnx-gather: check the original model for placement)",
}


def _gathers(counts: Counter, feature_level: str) -> str:
    """One line: how many gathers the provider runs where, at ``feature_level``."""
    parts = [f"{counts[status]} {label}" for status, label in GATHER_STATUSES.items() if counts[status]]
    return f"{counted(counts.total(), 'gather')} at DirectML feature level {feature_level}: {', '.join(parts)}."


def check_document(
    model: str,
    feature_level: str,
    verdicts: list[Verdict],
    lines: list[str],
    every: bool = False,
    session: Session | None = None,
) -> dict:
    """``check --json``: every node with its provider, reason, fate in ONNX Runtime's session and known behaviours
    (the ruled-out ones with ``every``), the flags counted by status, the session (its nodes, partitions and memory
    copies; null where it is not known), and the summary lines."""
    nodes = [
        {
            "name": v.node,
            "op_type": v.op_type,
            "graph": v.where,
            "provider": v.runs_on,
            "status": v.status,
            "reason": v.reason,
            "known": [
                {
                    "kind": k.kind.value,
                    "rule": k.rule,
                    "what": k.what,
                    "status": k.status.value,
                    **({"when": k.when} if k.when else {}),
                    **({"ruled_out": k.ruled_out} if k.status == known.Status.RULED_OUT else {}),
                    **({"count": k.count} if k.count is not None else {}),
                }
                for k in v.known
                if every or k.status != known.Status.RULED_OUT
            ],
            **({"ranks": v.ranks} if v.ranks else {}),
            **({"session": v.fate.value} if v.fate else {}),
            **({"session_node": v.session_node} if v.session_node else {}),
        }
        for v in verdicts
    ]
    statuses = Counter(k.status.value for v in verdicts for k in v.known)
    counts = {status.value: statuses[status.value] for status in known.Status}
    return {
        "model": model,
        "feature_level": feature_level,
        "nodes": nodes,
        "known": counts,
        "session": _session_document(session) if session is not None else None,
        "summary": lines,
    }


def _session_document(session: Session) -> dict:
    ran = [r for r in session.nodes if r.placed.why.runs]
    return {
        "nodes": [
            {
                "name": r.name,
                "op_type": r.op_type,
                "graph": r.where,
                "provider": r.placed.provider,
                "reason": r.placed.reason,
                **({"fused_from": list(r.fused_from)} if r.fused_from else {}),
            }
            for r in ran
        ],
        "partitions": [list(p) for p in session.partitions],
        "copies": [
            {"op_type": c.op_type, "value": c.value, "to": c.to, "producer": c.producer, "consumers": list(c.consumers)}
            for c in session.copies
        ],
    }


def session_of(model: onnx.ModelProto, path: str) -> tuple[Session | None, str]:
    """ONNX Runtime's DirectML session of ``model`` (the file at ``path``) as its optimizations leave it, or None
    and why not."""
    if any(contract.is_dml(n) or contract.is_dml_scatter(n) for body in bodies(model) for n in body.nodes):
        return None, "A model with onnx-gather's DML nodes: counted as it is, not as ONNX Runtime's session holds it."
    try:
        optimized = session_graph.optimized(model, path)
    except Exception as error:  # onnxruntime's own errors (Fail, InvalidGraph, NotImplemented...) have no common base
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        return None, f"ONNX Runtime's CPU provider cannot optimize the model ({first}): counted as it is."
    return session(model, optimized), ""
