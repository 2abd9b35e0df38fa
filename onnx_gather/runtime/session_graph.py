"""The graph ONNX Runtime's DirectML session holds once its optimizations have run, worked out with its CPU provider.

ONNX Runtime optimizes a model as it creates a session: Constants become initializers, constant folding computes what
constants fix, and its level-1 and level-2 transformers fuse patterns into contrib operators (SkipLayerNormalization,
FusedMatMul, BiasGelu...), each level-2 one only on the providers it names. This module lets ONNX Runtime's own
optimizer do that work on its CPU provider (the installed ONNX Runtime; real DirectML runs 1.24.4), with the
transformers that only the CPU provider takes turned off, and then undoes what the CPU provider alone adds: the Casts
it inserts around FLOAT16 nodes it has no kernel for, and the function bodies it expands where it has no kernel
(``InsertCastTransformer``, function inlining). What the DirectML provider then does to that graph (its placement,
its activation fusion, the memory copies) is ``graphs.placement.session``'s.
"""

from __future__ import annotations

import tempfile
from collections import Counter
from pathlib import Path

import onnx

# Level-2 transformers whose providers do not include DirectML (onnxruntime/core/optimizer/graph_transformer_utils.cc).
CPU_ONLY_TRANSFORMERS = (
    "QDQS8ToU8Transformer",
    "QDQSelectorActionTransformer",
    "GemmActivationFusion",
    "DynamicQuantizeMatMulFusion",
    "ConvActivationFusion",
    "SimplifiedLayerNormFusion",
    "GatherSliceToSplitFusion",
    "GatherToSliceFusion",
    "BiasSoftmaxFusion",
    "MatMulNBitsFusion",
    "Avx2WeightS8ToU8Transformer",
)
_INSERTED_CAST = "InsertedPrecisionFreeCast_"  # InsertCastTransformer's names
_WEIGHTS = "weights.bin"


def optimized(model: onnx.ModelProto, path: str | Path | None = None) -> onnx.ModelProto:
    """``model``'s graph as ONNX Runtime optimizes it for a DirectML session (weights left out: each large
    initializer keeps its type and dims). ``path``: the file ``model`` was read from, which ONNX Runtime then reads
    itself (its external data beside it) instead of a serialized copy. Raises onnxruntime's error where the CPU
    provider cannot create a session of it."""
    import onnxruntime as ort

    with tempfile.TemporaryDirectory(prefix="onnx-gather-session-") as folder:
        written = Path(folder) / "optimized.onnx"
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
        options.optimized_model_filepath = str(written)
        options.log_severity_level = 3
        options.add_session_config_entry("session.optimized_model_external_initializers_file_name", _WEIGHTS)
        options.add_session_config_entry("session.optimized_model_external_initializers_min_size_in_bytes", "1024")
        source = str(path) if path is not None else model.SerializeToString()
        ort.InferenceSession(
            source, options, providers=["CPUExecutionProvider"], disabled_optimizers=list(CPU_ONLY_TRANSFORMERS)
        )
        result = onnx.load(written, load_external_data=False)
    _undo_cpu_changes(result.graph, model.graph)
    return result


def _undo_cpu_changes(graph: onnx.GraphProto, original: onnx.GraphProto) -> None:
    """Take out of ``graph`` (and its subgraphs) the Casts the CPU provider inserted and put back every node of
    ``original`` it expanded into its function body."""
    nodes = list(graph.node)
    outputs = {value.name for value in graph.output}
    uses = Counter(name for node in nodes for name in node.input) + Counter(outputs)
    producers = {output: node for node in nodes for output in node.output}
    renamed: dict[str, str] = {}  # a use of a Cast's output -> its input
    casts = [n for n in nodes if n.name.startswith(_INSERTED_CAST) and n.op_type == "Cast"]
    for cast in casts:
        source, target = cast.input[0], cast.output[0]
        if uses[source] == 1 and source in producers and source not in outputs:  # after a node: it makes the target
            made = producers[source]
            made.output[:] = [target if name == source else name for name in made.output]
        elif target not in outputs:  # before a node: its users take the source
            renamed[target] = source
        else:
            continue
        nodes.remove(cast)
    # Between two nodes the CPU provider runs in FLOAT, ONNX Runtime drops the Casts and renames the value
    known = {name for node in nodes for name in (*node.input, *node.output)} | outputs
    for node in nodes:
        for name in node.input:
            if name.startswith(_INSERTED_CAST) and name not in renamed and name[len(_INSERTED_CAST) :] not in known:
                renamed[name] = name[len(_INSERTED_CAST) :]
    for node in nodes:
        node.input[:] = [renamed.get(name, name) for name in node.input]
        node.output[:] = [renamed.get(name, name) for name in node.output]
    kept = nodes
    kept = _unexpand(kept, original)
    del graph.node[:]
    graph.node.extend(kept)
    originals = {node.name: node for node in original.node if node.name}
    for node in graph.node:
        for attribute in node.attribute:
            if attribute.type == onnx.AttributeProto.GRAPH and node.name in originals:
                inner = next((a.g for a in originals[node.name].attribute if a.name == attribute.name), None)
                if inner is not None:
                    _undo_cpu_changes(attribute.g, inner)


def _unexpand(nodes: list[onnx.NodeProto], original: onnx.GraphProto) -> list[onnx.NodeProto]:
    """``nodes`` with each original node the CPU provider expanded (its body's nodes are nameless) back in their
    place."""
    producer = {output: position for position, node in enumerate(nodes) for output in node.output}
    names = {node.name for node in nodes}
    dropped: set[int] = set()
    restored: dict[int, onnx.NodeProto] = {}
    for node in original.node:
        if not node.name or node.name in names or not node.output:
            continue
        made = [producer.get(output) for output in node.output if output]
        if not made or any(p is None or nodes[p].name for p in made):
            continue
        body, stack, stop = set(), list(made), set(node.input)
        while stack:
            position = stack.pop()
            if position in body:
                continue
            body.add(position)
            for name in nodes[position].input:
                found = producer.get(name)
                if name not in stop and found is not None and not nodes[found].name:
                    stack.append(found)
        dropped |= body
        restored[max(body)] = node
    return [restored.get(p, nodes[p]) for p in range(len(nodes)) if p not in dropped or p in restored]
