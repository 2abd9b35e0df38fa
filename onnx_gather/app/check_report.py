"""``onnx-gather check``'s words: the closing lines and the JSON report, made of the verdicts, flags and session
that ``graphs.placement.check`` and ``graphs.placement.session`` decide."""

from __future__ import annotations

from collections import Counter

from onnx_gather.core.words import counted
from onnx_gather.graphs.placement import known
from onnx_gather.graphs.placement.check import Verdict
from onnx_gather.graphs.placement.nodes import Where, Why
from onnx_gather.graphs.placement.session import Fate, Session

_CAUSES = {  # how the summary counts nodes on the CPU provider
    Why.CONSTANT: "constants (initializers)",
    Why.FOLDED: "folded",
    Why.CPU_PREFERRED: "shape computations",
    Why.NO_KERNEL: "without a DirectML kernel",
    Why.UNSUPPORTED: "refused by the provider's support query",
    Why.EXPANDED: "expanded into function bodies whose nodes run there",
    Why.DEVICE_TYPES: "of a type the device lacks",
}


def summary(verdicts: list[Verdict], feature_level: str, session: Session | None = None) -> list[str]:
    """A line on every node, by provider and by what DirectML is known to do; with ``session``, the nodes no
    provider runs said as such and a line on the session (its nodes, partitions and memory copies); then one on the
    gathers, if any."""
    gone = Counter(v.fate for v in verdicts if v.fate in _GONE)
    running = [v for v in verdicts if v.fate not in _GONE]
    runs = Counter(v.runs_on for v in running)
    causes = Counter(v.cause for v in running if v.runs_on == Where.CPU and v.cause)
    why = ", ".join(f"{count} {_CAUSES[cause]}" for cause, count in causes.most_common())
    on_cpu = f"{runs[Where.CPU]} on the CPU provider" + (f" ({why})" if why else "")
    parts = [f"{runs[Where.DIRECTML]} on DirectML", on_cpu]
    if gone:
        said = ", ".join(f"{gone[fate]} {_GONE[fate]}" for fate in _GONE if gone[fate])
        parts.append(f"{sum(gone.values())} run by no provider ({said})")
    failing = sum(v.status == Where.FAILS for v in verdicts)
    if failing:
        parts.append(f"{failing} failing")
    if runs[Where.UNKNOWN]:
        parts.append(f"{runs[Where.UNKNOWN]} unknown until the model runs")
    lines = [f"{counted(len(verdicts), 'node')} at DirectML feature level {feature_level}: {', '.join(parts)}."]
    if session is not None:
        lines.append(_session_line(verdicts, session))
    flagged = Counter((k.status, k.rule) for v in verdicts for k in v.known)
    if flagged:
        said = []
        for status in known.Status:
            rules = ", ".join(f"{rule} {count}" for (s, rule), count in sorted(flagged.items()) if s == status)
            if rules:
                total = sum(count for (s, _), count in flagged.items() if s == status)
                label = "ruled out by the graph" if status == known.Status.RULED_OUT else status.value
                said.append(f"{total} {label} ({rules})")
        lines.append(f"Known DirectML behaviours at these nodes: {'; '.join(said)}.")
    gathers = [v for v in verdicts if v.gather]
    if gathers:
        lines.append(_gathers(gathers, feature_level))
    return lines


_GONE = {  # how the summary counts the nodes no provider runs
    Fate.CONSTANT: "Constants made initializers",
    Fate.FOLDED: "folded into constants",
    Fate.REMOVED: "removed by ONNX Runtime's optimizations",
}


def _session_line(verdicts: list[Verdict], session: Session) -> str:
    """The session's nodes by provider, the fusions, the DirectML partitions and the memory copies."""
    nodes = [r for r in session.nodes if r.placed.why.runs]
    verdict = {(v.where, v.session_node): v.runs_on for v in verdicts if v.fate == Fate.RUNS}
    where = Counter(verdict.get((r.where, r.name), r.placed.provider) for r in nodes)
    fused = [v for v in verdicts if v.fate == Fate.FUSED]
    into = len({(v.where, v.session_node) for v in fused})
    fusion = f" ({counted(len(fused), 'node')} of the model fused into {into} by its optimizations)" if fused else ""
    copies = Counter(c.op_type for c in session.copies)
    copied = (
        f"{len(session.copies)} memory {'copy' if len(session.copies) == 1 else 'copies'} between them"
        f" ({', '.join(f'{n} {op}' for op, n in sorted(copies.items()))})"
        if session.copies
        else "no memory copy between them"
    )
    return (
        f"ONNX Runtime's session runs {counted(len(nodes), 'node')}{fusion}: {where[Where.DIRECTML]} on DirectML in "
        f"{counted(len(session.partitions), 'partition')}, {where[Where.CPU]} on the CPU provider; {copied}."
    )


def _gathers(verdicts: list[Verdict], feature_level: str) -> str:
    """One line: how many gathers the provider runs where, at ``feature_level``."""
    counts = {status: sum(v.status == status for v in verdicts) for status in Where}
    parts = [
        f"{counts[s]} {label}"
        for s, label in (
            (Where.DIRECTML, "on DirectML"),
            (Where.CPU, "on the CPU provider"),
            (Where.FAILS, "failing"),
            (Where.REFUSED, "refused"),
            (Where.UNKNOWN, "unknown until the model runs"),
            (Where.DML, "as DML nodes (converted by onnx-gather: check the original model for placement)"),
        )
        if counts[s]
    ]
    return f"{counted(len(verdicts), 'gather')} at DirectML feature level {feature_level}: {', '.join(parts)}."


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
