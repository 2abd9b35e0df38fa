"""Constant data of DML nodes held on the Python side, so that it does not cross the bridge on every run.

onnxruntime-extensions copies every input of a Python op into a new numpy array on every run: an embedding lookup
whose data is a constant table would copy the whole table to read a few rows of it. So ``detach`` takes, before
ONNX Runtime sees the model, each main-graph DML node whose data is constant (an initializer no feed can override,
or made from such by standard, deterministic nodes: what ONNX Runtime's constant folding folds), has ONNX Runtime's
CPU kernels compute that data once, and rewrites the node into its ``Table`` twin: the data input becomes an empty
tensor of the same type, and a ``table`` attribute names the data by the SHA-256 of its type, shape and bytes. The
kernel reads the table from ``TABLES`` under that name and computes the gather from it exactly as from an input
(docs/ops.md, "What the custom ops cost, and constant tables").

A name cannot go stale: it is a digest of the contents, so a name only ever stands for the same contents, and the
array it names is a private, read-only copy that only the sessions using it hold. An entry lives as long as one of
them does (``TABLES`` keeps weak references; the session keeps the arrays).
"""

from __future__ import annotations

import hashlib
import threading
import weakref
from collections.abc import Collection
from pathlib import Path

import numpy as np
import onnx
import onnxruntime
from onnx import helper, numpy_helper

from onnx_gather.core import contract
from onnx_gather.core.semantics import GatherError
from onnx_gather.graphs.plumbing import RANDOM_OPS, Names, bodies, subgraphs, use_counts

# name -> table; the sessions that use a table hold it.
TABLES: weakref.WeakValueDictionary[str, np.ndarray] = weakref.WeakValueDictionary()
_keeping = threading.Lock()  # two sessions made at once of one table share one array
TABLE_ATTRIBUTE = "table"
# Where ONNX Runtime reads the external data of a model handed over as bytes.
EXTERNAL_DATA_KEY = "session.model_external_initializers_file_folder_path"


def name_of(array: np.ndarray) -> str:
    """The name of a table: the SHA-256 of its element type, shape and bytes."""
    digest = hashlib.sha256(f"{array.dtype.str} {array.shape} ".encode())
    digest.update(np.ascontiguousarray(array).data)
    return digest.hexdigest()


def table(name: str) -> np.ndarray:
    """The table called ``name``; a GatherError if no session holds one of that name."""
    try:
        return TABLES[name]
    except KeyError:
        raise GatherError(
            f"no session holds the constant table {name!r} (onnx_gather.InferenceSession makes Table ops)"
        ) from None


def _keep(array: np.ndarray) -> tuple[str, np.ndarray]:
    """``array``'s name and the one read-only array registered under it (the one already registered, if any)."""
    name = name_of(array)
    with _keeping:
        kept = TABLES.get(name)
        if kept is None:
            kept = np.array(array, copy=True, order="C")
            kept.flags.writeable = False
            TABLES[name] = kept
    return name, kept


def _constants(graph: onnx.GraphProto, ir_version: int, folder: Path | None) -> dict[str, onnx.NodeProto | None]:
    """The constant values of the main graph: initializers no feed can override (None; kept outside the model only
    where ``folder`` is known), and the outputs of standard, deterministic nodes without subgraphs whose every input
    is constant (their node), as ONNX Runtime's constant folding takes them."""
    overridable = {value.name for value in graph.input} if ir_version >= 4 else set()
    external = folder is None
    constants: dict[str, onnx.NodeProto | None] = {
        t.name: None
        for t in graph.initializer
        if t.name not in overridable and not (external and t.data_location == onnx.TensorProto.EXTERNAL)
    }
    for node in graph.node:
        standard = node.domain in ("", "ai.onnx") and node.op_type not in RANDOM_OPS and not any(subgraphs(node))
        if standard and all(i in constants for i in node.input if i):
            constants.update(dict.fromkeys(node.output, node))
    return constants


def _compute(
    model: onnx.ModelProto, values: list[str], constants: dict, folder: Path | None
) -> list[np.ndarray] | None:
    """``values`` as the model computes them: its constant nodes that make them, run once by ONNX Runtime's CPU
    kernels, node by node (no graph optimization), as a session of the model computes them; None if that fails."""
    needed, stack = set(), list(values)
    while stack:
        node = constants.get(name := stack.pop())
        if name not in needed:
            needed.add(name)
            stack.extend(i for i in (node.input if node is not None else ()) if i)
    graph = model.graph
    probe = helper.make_graph(
        [n for n in graph.node if any(o in needed for o in n.output)],
        "constant_tables",
        [],
        [helper.make_value_info(v, onnx.TypeProto()) for v in values],
        [t for t in graph.initializer if t.name in needed],
    )
    probe_model = helper.make_model(probe, opset_imports=model.opset_import, ir_version=model.ir_version)
    options = onnxruntime.SessionOptions()
    options.log_severity_level = 4
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_DISABLE_ALL
    if folder is not None:
        options.add_session_config_entry(EXTERNAL_DATA_KEY, str(folder))
    try:
        session = onnxruntime.InferenceSession(probe_model.SerializeToString(), options, ["CPUExecutionProvider"])
        return session.run(values, {})
    except Exception:  # the model's own session then says what fails, in the model's terms
        return None


def detach(
    model: onnx.ModelProto, folder: Path | None, op_types: Collection[str]
) -> tuple[onnx.ModelProto, list[np.ndarray]] | None:
    """``model`` with every main-graph node of ``op_types`` (domain onnx_gather) whose data is constant turned into its
    ``Table`` twin (``<op type>Table``), and the tables (registered in ``TABLES``; the caller keeps them for as long as
    the model runs); None where no such node's data is constant. ``folder`` holds the model's external data (None:
    data kept outside is not read)."""
    constants = _constants(model.graph, model.ir_version, folder)
    nodes = [n for n in model.graph.node if n.domain == contract.DOMAIN and n.op_type in op_types]
    values = list(dict.fromkeys(n.input[0] for n in nodes if n.input[0] in constants))
    if not values:
        return None
    computed = _compute(model, values, constants, folder)
    if computed is None:
        return None
    kept = dict(zip(values, map(_keep, computed), strict=True))
    result = onnx.ModelProto()
    result.CopyFrom(model)
    names = Names(result)
    placeholders: dict[np.dtype, str] = {}
    for node in result.graph.node:
        if node.domain != contract.DOMAIN or node.op_type not in op_types or node.input[0] not in kept:
            continue
        name, table = kept[node.input[0]]
        if table.dtype not in placeholders:
            placeholders[table.dtype] = names.fresh("onnx_gather/table_placeholder")
            empty = numpy_helper.from_array(np.empty((0,), table.dtype), placeholders[table.dtype])
            result.graph.initializer.append(empty)
        node.input[0] = placeholders[table.dtype]
        node.op_type = f"{node.op_type}Table"
        node.attribute.append(helper.make_attribute(TABLE_ATTRIBUTE, name))
    _drop_unused(result, constants)
    return result, [table for _, table in kept.values()]


def _drop_unused(model: onnx.ModelProto, constants: dict[str, onnx.NodeProto | None]) -> None:
    """Remove the constant nodes and initializers of the main graph that nothing uses any more."""
    graph = model.graph
    while True:
        uses = use_counts(model)[bodies(model)[0].scope]
        inputs = {value.name for value in graph.input}
        nodes = [n for n in graph.node if n.output[0] not in constants or any(uses[o] for o in n.output)]
        initializers = [t for t in graph.initializer if uses[t.name] or t.name in inputs]
        if len(nodes) == len(graph.node) and len(initializers) == len(graph.initializer):
            return
        del graph.node[:], graph.initializer[:]
        graph.node.extend(nodes)
        graph.initializer.extend(initializers)
