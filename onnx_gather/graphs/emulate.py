"""The model as ONNX Runtime's DirectML provider would run it, in standard ONNX for any ONNX Runtime (the ``dmlsim``
backend): the DML form with its gathers and scatters as DirectML computes them, lowered; each node ``check`` places
on DirectML rewritten where a rule of ``placement.known`` says DirectML computes otherwise (the rule's emulation);
and where DirectML fails, the failure it gives. Where no rule is known, DirectML is taken to compute what ONNX
Runtime's CPU computes."""

from __future__ import annotations

from dataclasses import dataclass, replace

import onnx

from onnx_gather.graphs.convert import to_dml
from onnx_gather.graphs.emit import Emitter
from onnx_gather.graphs.lowering.lower import to_onnx
from onnx_gather.graphs.placement import known
from onnx_gather.graphs.placement.check import Verdict, check
from onnx_gather.graphs.placement.nodes import CREATION_INVALID, Failure, Where
from onnx_gather.graphs.plumbing import Names, bodies, needed_nodes
from onnx_gather.graphs.ranks import Observer


@dataclass(frozen=True)
class Fault:
    """Where DirectML fails and how: the node, the rule that says so ("" for a gather the provider takes and fails,
    whose reason says how), the failure, what it is, and for a failure a run's values decide, the flag to hold them
    to (None where the graph decides)."""

    where: str
    node: str
    rule: str
    failure: Failure
    what: str
    flag: known.Known | None = None


@dataclass(frozen=True)
class Unemulated:
    """A node where DirectML computes otherwise, or may, and the emulation does not: the rule, and why not."""

    node: str
    rule: str
    why: str
    status: known.Status


@dataclass(frozen=True)
class Emulation:
    """The emulated model (standard ONNX), the failures the graph decides (``faults``), those a run's values decide
    (``pending``), the nodes rewritten (node, rule) and those left as the CPU computes them."""

    model: onnx.ModelProto
    faults: tuple[Fault, ...]
    pending: tuple[Fault, ...]
    emulated: tuple[tuple[str, str], ...]
    unemulated: tuple[Unemulated, ...]


def emulated(model: onnx.ModelProto, observation: Observer | None = None) -> Emulation:
    """``model`` as ONNX Runtime's DirectML provider would run it, in standard ONNX (``Emulation.model``), with the
    failures DirectML gives (``faults``, and ``pending`` for those a run's values decide); ``observation`` tells the
    ranks no shape inference can (``onnx_gather.Observation``), as for ``to_dml``."""
    verdicts = check(model, observation=observation)
    converted = to_dml(
        model, observation=observation, keep_cpu_gathers=True, provider_failures="onnx", scatter_duplicates="last"
    )
    return emulate(converted, verdicts)


def emulate(converted: onnx.ModelProto, verdicts: list[Verdict]) -> Emulation:
    """``converted`` (``to_dml`` of a model with ``keep_cpu_gathers``, ``out_of_bounds="directml"``) with the
    emulations of the known behaviours ``verdicts`` (``check`` of that model) find on DirectML, lowered."""
    faults, pending, emulations, unemulated = [], [], [], []
    for verdict in verdicts:
        if verdict.runs_on != Where.DIRECTML:
            continue
        flags = [k for k in verdict.known if k.status not in (known.Status.RULED_OUT, known.Status.NOT_MET)]
        failing = [k for k in flags if k.kind == known.FAILS]
        if verdict.status == Where.FAILS and not any(k.status == known.Status.MET for k in failing):
            faults.append(Fault(verdict.where, verdict.node, "", verdict.failure or CREATION_INVALID, verdict.reason))
        for flag in failing:
            fault = Fault(verdict.where, verdict.node, flag.rule, flag.failure, flag.what)
            if flag.status == known.Status.MET:
                faults.append(fault)
            else:
                pending.append(replace(fault, flag=flag))
        for flag in flags:
            if flag.kind == known.FAILS:
                continue
            if flag.emulation is None:
                unemulated.append(Unemulated(verdict.node, flag.rule, flag.unemulated, flag.status))
            else:
                emulations.append((verdict.where, verdict.node, flag))
    model = onnx.ModelProto()
    model.CopyFrom(converted)
    found = {body.where for body in bodies(model)}
    for where, node, flag in [e for e in emulations if e[0] not in found]:  # a subgraph of a node the DML form renamed
        unemulated.append(Unemulated(node, flag.rule, f"its {where} has another name in the DML form", flag.status))
    done = _rewrite(model, [e for e in emulations if e[0] in found])
    return Emulation(to_onnx(model), tuple(faults), tuple(pending), tuple(done), tuple(unemulated))


def _rewrite(model: onnx.ModelProto, emulations: list[tuple[str, str, known.Known]]) -> list[tuple[str, str]]:
    """Each emulation written in place of the node that makes the value it writes; the nodes no longer needed
    removed. Returns the (node, rule) rewritten."""
    names, done = Names(model), []
    by_where = {body.where: body for body in bodies(model)}
    for where in dict.fromkeys(where for where, _, _ in emulations):
        body = by_where[where]
        emit = Emitter(body, names, "onnx_gather/dmlsim")
        instead: dict[str, list[onnx.NodeProto]] = {}
        for _, node, flag in (e for e in emulations if e[0] == where):
            start = len(emit.nodes)
            target = flag.emulation(emit)
            if target and target not in instead:
                instead[target] = emit.nodes[start:]
                done.append((node, flag.rule))
        if not instead:
            continue
        nodes = []
        for node in body.nodes:
            made = [instead[out] for out in node.output if out in instead]
            nodes.extend(made[0] if made else [node])
        body.replace_nodes(nodes)
        container = body.container
        if isinstance(container, onnx.GraphProto):
            body.replace_nodes(needed_nodes(container, [value.name for value in container.output]))
    return done
