"""Standard ONNX gathers and scatters into DML form, as ONNX Runtime's DirectML provider maps them, in every graph,
subgraph and model-local function: what becomes of each node is decided by ``graphs.analysis`` (a ``DmlPlan``), the
nodes that stand for it written by ``graphs.dml_plan.emit_dml``. What ``to_dml`` writes for a node, and each of its
parameters: docs/semantics.md, "6.1 What to_dml does" (``onnx-gather docs semantics``).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import onnx
from onnx import TensorProto, helper

from onnx_gather.core import contract, semantics
from onnx_gather.core.contract import DOMAIN
from onnx_gather.core.errors import UserError
from onnx_gather.core.scatter import DUPLICATE_MODES
from onnx_gather.graphs.analysis import HIGHEST_LEVEL, Analysis, Options, parse_dimension_count
from onnx_gather.graphs.changes import NodeChange, Report, count_ops
from onnx_gather.graphs.dml_plan import DmlPlan, Left, emit_dml
from onnx_gather.graphs.emit import Emitter
from onnx_gather.graphs.placement.gather import FEATURE_LEVELS
from onnx_gather.graphs.plumbing import Body, bodies, sort_topologically
from onnx_gather.graphs.ranks import Observer
from onnx_gather.graphs.types import ValueType

_CONVERTED = {*contract.GATHER_OPS, *contract.SCATTER_BY_STANDARD}
PROVIDER_FAILURES = ("raise", "onnx")  # what to_dml does with a gather the provider fails


class ProviderFailure(semantics.GatherError):
    """A standard gather that ONNX Runtime's DirectML provider fails: DirectML computes nothing for it."""


class _Converter:
    def __init__(self, model: onnx.ModelProto, analysis: Analysis) -> None:
        self.model = model
        self.analysis = analysis
        self.options = analysis.options
        self.names = analysis.names
        self.report = Report()

    def run(self) -> None:
        for body in reversed(bodies(self.model)):
            types = self.analysis.types.get(body.scope, {})
            rebuilt, changed, declared = [], False, _declarations(body)
            for index, node in enumerate(body.nodes):
                new_nodes = None
                if node.domain in ("", "ai.onnx") and node.op_type in _CONVERTED:
                    new_nodes, typed = self._convert(body, types, node, index)
                if new_nodes is not None:
                    rebuilt.extend(new_nodes)
                    _record(body, declared, typed)
                    changed = True
                    continue
                rebuilt.append(node)
            if changed:
                body.replace_nodes(rebuilt)
                _import_domain(body.container.opset_import if isinstance(body.container, onnx.FunctionProto) else None)
        if self.report.changed:
            _import_domain(self.model.opset_import)

    def _convert(
        self, body: Body, types: dict[str, ValueType], node: onnx.NodeProto, index: int
    ) -> tuple[list[onnx.NodeProto] | None, dict[str, ValueType]]:
        """A standard gather or scatter into DML form (``graphs.dml_plan``), or None where it stays standard."""
        change = self.analysis.decide(body, types, node, index)
        plan = change.plan
        if change.fails and self.options.provider_failures == "raise":
            raise _failure(change)
        if isinstance(plan, Left):
            self.report.left.append(change)
            return None, {}
        if plan.crop is not None and self.options.provider_failures == "raise":
            plan = dataclasses.replace(plan, crop=None)  # dynamic dims: the DML node fails if they differ, as DirectML
        self.report.changed.append(change)
        return emit_dml(Emitter(body, self.names, change.result), node, change.result, plan, self._modes(plan))

    def _modes(self, plan: DmlPlan) -> dict[str, str]:
        """The DML node's string attributes: what an out-of-bounds index does, and for a scatter duplicates."""
        mode = self.options.out_of_bounds
        if plan.op in contract.SCATTER_BY_STANDARD:
            return {"out_of_bounds": mode, "duplicates": self.options.scatter_duplicates}
        if mode == "directml" and plan.carrier is not None and plan.data.elem_type != TensorProto.BOOL:
            return {"out_of_bounds": contract.DIRECTML_16BIT}  # the op sees FLOAT32; DirectML's reading is 2-byte
        return {"out_of_bounds": mode}


def _failure(change: NodeChange) -> ProviderFailure:
    return ProviderFailure(
        f"{change.op_type} node {change.node!r} ({change.where}) fails on DirectML: {change.fails}. To compute "
        "ONNX's values instead, convert with provider_failures='onnx' (--provider-failures onnx)"
    )


def _declarations(body: Body) -> dict[str, onnx.ValueInfoProto]:
    """The values ``body`` gives a type: its inputs, outputs and value_info (a function: none)."""
    container = body.container
    if not isinstance(container, onnx.GraphProto):
        return {}
    return {v.name: v for v in (*container.input, *container.output, *container.value_info)}


def _record(body: Body, declared: dict[str, onnx.ValueInfoProto], typed: dict[str, ValueType]) -> None:
    """Give ``body`` the types in ``typed``: a new ``value_info``, or the shape a declaration lacks (a graph input or
    output that declares no shape: the DML form works only at the rank it was made for). A function has neither."""
    container = body.container
    if not isinstance(container, onnx.GraphProto):
        return
    for name, value_type in typed.items():
        found = declared.get(name)
        if found is None:
            container.value_info.append(value_type.value_info(name))
            declared[name] = container.value_info[-1]
        elif found.type.HasField("tensor_type") and not found.type.tensor_type.HasField("shape"):
            found.type.tensor_type.shape.CopyFrom(value_type.value_info(name).type.tensor_type.shape)


def _import_domain(imports: object) -> None:
    if imports is not None and not any(o.domain == DOMAIN for o in imports):
        imports.append(helper.make_opsetid(DOMAIN, contract.DOMAIN_VERSION))


def convert(
    model: onnx.ModelProto,
    dimension_count: str | int = "auto",
    out_of_bounds: str = "directml",
    observation: Observer | None = None,
    keep_cpu_gathers: bool = False,
    feature_level: str = HIGHEST_LEVEL,
    native_float16: bool = False,
    provider_failures: str = "raise",
    scatter_duplicates: str = "error",
) -> tuple[onnx.ModelProto, Report]:
    """``to_dml`` with a report of what was converted and what was left standard, and why."""
    semantics.check_out_of_bounds("to_dml", out_of_bounds)
    if scatter_duplicates not in DUPLICATE_MODES:
        raise UserError(f"scatter_duplicates must be one of {', '.join(DUPLICATE_MODES)}, got {scatter_duplicates!r}")
    if provider_failures not in PROVIDER_FAILURES:
        raise UserError(f"provider_failures must be one of {', '.join(PROVIDER_FAILURES)}, got {provider_failures!r}")
    contract.register_schemas()
    count = parse_dimension_count(dimension_count)
    if feature_level not in FEATURE_LEVELS:
        raise UserError(f"feature_level must be one of {', '.join(FEATURE_LEVELS)}, got {feature_level!r}")
    result = onnx.ModelProto()
    result.CopyFrom(model)
    sort_topologically(result)
    chosen = Options(
        dimension_count=count,
        out_of_bounds=out_of_bounds,
        feature_level=FEATURE_LEVELS[feature_level],
        keep_on_cpu=keep_cpu_gathers,
        carrying=contract.NATIVE_FLOAT16 if native_float16 else contract.CUSTOM_OPS,
        provider_failures=provider_failures,
        scatter_duplicates=scatter_duplicates,
    )
    converter = _Converter(result, Analysis(result, chosen, observation))
    converter.report.before = count_ops(model)
    converter.run()
    converter.report.after = count_ops(result)
    return result, converter.report


def to_dml(
    model: onnx.ModelProto, dimension_count: str | int = "auto", out_of_bounds: str = "directml", **options: Any
) -> onnx.ModelProto:
    """Every standard Gather, GatherElements and GatherND that DirectML can express, and every ScatterElements,
    Scatter and ScatterND the DirectML provider runs, rewritten into DML form.

    ``dimension_count`` is ``"auto"`` (the least N each node needs, as ONNX Runtime's DirectML provider does) or a
    fixed N from 1 to 8. ``out_of_bounds`` is written on every DML node. ``options`` are ``convert``'s:
    ``observation`` (inputs for one run that tells the ranks inference cannot), ``keep_cpu_gathers`` (leave standard
    the gathers the provider keeps on its CPU provider on a device of ``feature_level``, ``"4.1"`` unless given),
    ``native_float16``, ``provider_failures`` (``"raise"``, the default, or ``"onnx"``) and ``scatter_duplicates``
    (``"error"``, the default: a scatter writing different values to one element fails, for which one DirectML keeps
    is a race; or ``"last"``: the last stays, as on ONNX Runtime's CPU); docs/semantics.md, "6.1 What
    to_dml does", tells each. Nodes that cannot be expressed stay standard (``convert`` reports them); a gather or
    scatter ONNX Runtime's DirectML provider fails raises ``ProviderFailure`` unless ``provider_failures="onnx"``.
    """
    return convert(model, dimension_count, out_of_bounds, **options)[0]
