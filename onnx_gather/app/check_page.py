"""``check --html``: one model's page. The summary's figures first (``check_report.Tally``) with the closing lines,
then the picture of the model as ONNX Runtime's session runs it (``picture``: DirectML partitions and runs of CPU
nodes as boxes, the memory copies as edges, the known behaviours marked), the flags by rule, the copies, and every
node's row of the JSON report (``check_report.check_document``) in a sortable table."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence

from onnx_gather.app import pages
from onnx_gather.app.check_report import CAUSES, GATHER_STATUSES, GONE, Tally, providers
from onnx_gather.core.words import counted, listed
from onnx_gather.graphs.placement import known
from onnx_gather.graphs.placement.check import Verdict, flagged
from onnx_gather.graphs.placement.nodes import Where, Why
from onnx_gather.graphs.placement.session import Fate, Session

_OPS_SHOWN = 3  # a box's most common op types


def _groups(session: Session, graph: str, names: Sequence[str], on_dml: Sequence[bool]) -> list[int]:
    """Each node of ``graph`` (by position in ``names``): its partition's number, or for a node off DirectML its run
    of CPU nodes (those joined by values between them), numbered after every partition."""
    index = {name: position for position, name in enumerate(names)}
    group = [-1] * len(names)
    for number, members in enumerate(session.partitions):
        if all(name in index for name in members):
            for name in members:
                if group[index[name]] == -1 and on_dml[index[name]]:
                    group[index[name]] = number
    parent = list(range(len(names)))

    def root(position: int) -> int:
        while parent[position] != position:
            parent[position] = parent[parent[position]]
            position = parent[position]
        return position

    for link in session.links:
        if link.where == graph and link.producer in index and link.consumer in index:
            first, second = index[link.producer], index[link.consumer]
            if group[first] == -1 and group[second] == -1:
                parent[root(first)] = root(second)
    runs: dict[int, int] = {}
    for position in range(len(names)):
        if group[position] == -1:
            group[position] = len(session.partitions) + runs.setdefault(root(position), len(runs))
    return group


def _flags(verdicts: Sequence[Verdict]) -> dict:
    """The met and possible flags of the model's nodes one session node stands for (counted, and said by rule), and
    whether one fails."""
    shown = [k for v in verdicts for k in v.known if k.status in (known.Status.MET, known.Status.POSSIBLE)]
    statuses = Counter(k.status for k in shown)
    found: dict = {"met": statuses[known.Status.MET], "possible": statuses[known.Status.POSSIBLE]}
    found = {key: count for key, count in found.items() if count}
    if shown:
        found["flags"] = [f"{k.kind} {k.rule} ({k.status})" for k in shown]
    if any(v.status == Where.FAILS for v in verdicts):
        found["fails"] = True
    return found


def picture(
    verdicts: list[Verdict], session: Session, marks: Mapping[tuple[str, str], Sequence[str]] | None = None
) -> list[dict]:
    """What the page draws, per graph of the session: its nodes (name, op type, provider, box, reason, the model's
    nodes it stands for, their flags, and the ``marks`` of those, by graph and model node), the links between them
    (with the memory copy a link takes), and the boxes: each DirectML partition and each run of CPU nodes."""
    where = providers(verdicts, session)
    standing: dict[tuple[str, str], list[Verdict]] = {}
    for v in verdicts:
        if v.fate in (Fate.RUNS, Fate.FUSED) and v.session_node:
            standing.setdefault((v.where, v.session_node), []).append(v)
    copied = {(c.where, c.value, consumer): c.op_type for c in session.copies for consumer in c.consumers}
    result = []
    for graph in dict.fromkeys(r.where for r in session.nodes):
        ran = [r for r in session.nodes if r.where == graph]
        names = [r.name for r in ran]
        on = [where[(graph, r.name)] for r in ran]
        group = _groups(session, graph, names, [provider == Where.DIRECTML for provider in on])
        nodes = []
        for r, provider, box in zip(ran, on, group, strict=True):
            model = standing.get((graph, r.name), [])
            node: dict = {"name": r.name, "op": r.op_type, "on": provider.value, "box": box, "reason": r.placed.reason}
            running = [v for v in model if v.fate == Fate.RUNS]
            cause = r.placed.why if provider == Where.CPU else None
            if running:  # its own verdict says more than the session's placement (a gather's DirectML form)
                node["reason"], cause = running[0].reason, running[0].cause or cause
            if cause is not None:
                node["cause"] = cause.value
            if [v.node for v in model] != [r.name]:
                node["of"] = [v.node for v in model]
            node.update(_flags(model))
            marked = [text for v in model for text in (marks or {}).get((graph, v.node), ())]
            if marked:
                node["marks"] = marked
            nodes.append(node)
        index = {name: position for position, name in enumerate(names)}
        links = [
            [index[link.producer], index[link.consumer], copied.get((graph, link.value, link.consumer), "")]
            for link in session.links
            if link.where == graph and link.producer in index and link.consumer in index
        ]
        result.append({"graph": graph, "nodes": nodes, "links": links, "boxes": _boxes(nodes, len(session.partitions))})
    return result


def _boxes(nodes: list[dict], partitions: int) -> dict[str, dict]:
    """Each box of a graph's nodes, by number: a partition's or a CPU run's title, node count, op types or causes,
    and its nodes' flags and marks."""
    members: dict[int, list[dict]] = {}
    for node in nodes:
        members.setdefault(node["box"], []).append(node)
    boxes = {}
    for number, inside in sorted(members.items()):
        ops = Counter(node["op"] for node in inside).most_common()
        dml = number < partitions
        box = {
            "title": f"DirectML partition {number + 1} of {partitions}" if dml else "on the CPU provider",
            "size": len(inside),
            "ops": listed([f"{op} {n}" for op, n in ops], _OPS_SHOWN, quoted=False),
            "dml": dml,
        }
        causes = Counter(node["cause"] for node in inside if "cause" in node).most_common()
        if causes:
            box["causes"] = ", ".join(f"{n} {CAUSES.get(Why(cause), cause)}" for cause, n in causes)
        for key in ("met", "possible"):
            total = sum(node.get(key, 0) for node in inside)
            if total:
                box[key] = total
        if any(node.get("fails") for node in inside):
            box["fails"] = True
        marked = sum(len(node.get("marks", ())) for node in inside)
        if marked:
            box["marks"] = marked
        boxes[str(number)] = box
    return boxes


def summary_figures(counts: Tally) -> str:
    """The summary's figures, each with its breakdown, as the closing lines count them."""
    runs = counts.runs
    cpu = [f"{n} {CAUSES[cause]}" for cause, n in counts.causes.most_common()]
    parts = [
        pages.card("nodes of the model", counts.nodes),
        pages.card("on DirectML", runs[Where.DIRECTML], kind="dml"),
        pages.card("on the CPU provider", runs[Where.CPU], cpu, kind="cpu"),
    ]
    if counts.gone:
        gone = [f"{counts.gone[fate]} {GONE[fate]}" for fate in GONE if counts.gone[fate]]
        parts.append(pages.card("run by no provider", counts.gone.total(), gone))
    if runs[Where.UNKNOWN]:
        parts.append(pages.card("unknown until the model runs", runs[Where.UNKNOWN]))
    if counts.failing:
        parts.append(pages.card("failing", counts.failing, kind="fails"))
    if counts.session is not None:
        session = counts.session
        fused = f"{counted(session.fused, 'node')} of the model fused into {session.fused_into}"
        ran = [f"{session.runs[Where.DIRECTML]} on DirectML", f"{session.runs[Where.CPU]} on the CPU provider"]
        parts.append(pages.card("nodes in the session", session.nodes, ran + ([fused] if session.fused else [])))
        parts.append(pages.card("DirectML partitions", session.partitions, kind="dml"))
        copies = [f"{n} {op}" for op, n in sorted(session.copies.items())]
        parts.append(pages.card("memory copies", session.copies.total(), copies, kind="copy"))
    for status in (known.Status.MET, known.Status.POSSIBLE):
        rules = [f"{rule} {n}" for (s, rule), n in sorted(counts.flagged.items()) if s == status]
        total = sum(n for (s, _), n in counts.flagged.items() if s == status)
        parts.append(pages.card(f"known behaviours {status.value}", total, rules, kind=f"known {status.name}"))
    if counts.gathers:
        gathers = [f"{counts.gathers[s]} {label}" for s, label in GATHER_STATUSES.items() if counts.gathers[s]]
        parts.append(pages.card("gathers", counts.gathers.total(), gathers))
    return f'<div class="figures">{"".join(parts)}</div>'


_NODE_HEADER = ["node", "op type", "graph", "provider", "status", "reason", "session", "session node", "known"]


def _flag_said(flag: dict) -> str:
    """A flag of the JSON report: kind, rule, status and, where a run counted them, the elements."""
    count = f", {counted(flag['count'], 'element')}" if "count" in flag else ""
    return f"{flag['kind']} {flag['rule']} ({flag['status']}{count})"


def node_table(document: dict) -> str:
    """Every node's row of the JSON report."""
    rows = [
        [
            node["name"],
            node["op_type"],
            node["graph"],
            node["provider"],
            node["status"],
            node["reason"],
            node.get("session", ""),
            node.get("session_node", ""),
            "; ".join(map(_flag_said, node["known"])),
        ]
        for node in document["nodes"]
    ]
    return pages.html_table(_NODE_HEADER, rows, "nodes-table")


def _flag_table(verdicts: list[Verdict]) -> str:
    rows = [
        [
            group.rule,
            group.kind,
            group.status,
            len(group.nodes),
            listed((name for name, _ in group.nodes), 5),
            group.what + (f"; {group.when}" if group.when else ""),
        ]
        for group in flagged(verdicts)
    ]
    return pages.html_table(["rule", "kind", "status", "nodes", "which", "what DirectML does"], rows, "flags-table")


def _copy_table(document: dict) -> str:
    copies = document["session"]["copies"] if document["session"] else []
    rows = [
        [
            c["op_type"],
            c["value"],
            "DirectML to the CPU" if c["to"] == Where.CPU else "the CPU to DirectML",
            c["producer"],
            listed(c["consumers"], 5),
        ]
        for c in copies
    ]
    return pages.html_table(["copy", "value", "from", "made by", "taken by"], rows, "copies-table")


CAPTION = (
    "ONNX Runtime's session as it runs the model: each DirectML partition (DirectML nodes joined by values that stay "
    "in device memory) and each run of nodes on the CPU provider is one box with its node count; click a box to "
    "open it, a node for its reason. Edges are values; a red dashed one is a memory copy. A red badge counts the "
    "known behaviours met at its nodes, an amber one those possible."
)


def check_page(document: dict, counts: Tally, verdicts: list[Verdict], session: Session | None) -> str:
    """The page of ``check --html``: ``document`` (``check_document``, every flag) and ``counts`` shown, the
    session drawn (where it is known; else the closing lines say why)."""
    model = document["model"]
    drawn = (
        pages.drawing("picture-data", {"graphs": picture(verdicts, session)}, CAPTION)
        if session is not None and session.nodes
        else '<p class="caption">No picture: ONNX Runtime\'s session of this model is not known (the summary says '
        "why).</p>"
    )
    body = (
        f"<header><h1>onnx-gather check: {pages.escaped(model)}</h1>"
        f'<p class="sub">DirectML feature level {pages.escaped(document["feature_level"])}</p></header>'
        f'<section id="summary"><h2>Summary</h2>{summary_figures(counts)}{pages.lines(document["summary"], "closing")}'
        "</section>"
        f'<section id="session"><h2>The model as it will run</h2>{drawn}</section>'
        f'<section id="flags"><h2>Known DirectML behaviours, by rule</h2>{_flag_table(verdicts)}</section>'
        f'<section id="copies"><h2>Memory copies</h2>{_copy_table(document)}</section>'
        f'<section id="nodes"><h2>Every node</h2>'
        '<input class="filter" type="search" placeholder="filter the rows: a node name, an op type, a reason" '
        f'aria-label="filter the rows">{node_table(document)}</section>'
    )
    return pages.page(f"onnx-gather check: {model}", body)
