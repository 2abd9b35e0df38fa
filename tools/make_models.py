"""Regenerate the sample models in models/ (deterministic): python tools/make_models.py > models/sample.txt"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper

MODELS = Path(__file__).resolve().parent.parent / "models"


def sample_model() -> onnx.ModelProto:
    """A tiny re-ranker: embed tokens, score them, re-rank the token ids by score, and look up their positions.

    Gathers of three kinds: an embedding lookup (Gather, 2-D indices), a re-ranking (GatherElements), and a
    FLOAT16 position table read with a negative axis; the batch is dynamic.
    """
    rng = np.random.default_rng(2026)
    vocabulary, width, length = 32, 8, 6
    # Multiples of 1/16 and 1/4 with few significant bits: every product and sum of the scores is exact in FLOAT32,
    # so any backend, summing in any order with or without fused multiply-add, on any CPU, gets the same bits.
    embeddings = (rng.integers(-64, 64, (vocabulary, width)) / 16).astype(np.float32)
    score_weights = (rng.integers(-8, 8, (width, 1)) / 4).astype(np.float32)
    assert len(np.unique(embeddings @ score_weights)) == vocabulary, "distinct scores: no ties in TopK"
    table = numpy_helper.from_array(embeddings, "embedding_table")
    positions = numpy_helper.from_array(rng.standard_normal((width, length)).astype(np.float16), "position_table")
    weights = numpy_helper.from_array(score_weights, "score_weights")
    k = numpy_helper.from_array(np.array([length], np.int64), "k")
    nodes = [
        h.make_node("Gather", ["embedding_table", "token_ids"], ["embeddings"], name="embed", axis=0),
        h.make_node("MatMul", ["embeddings", "score_weights"], ["scores_3d"], name="score"),
        h.make_node("Squeeze", ["scores_3d", "last_axis"], ["scores"], name="squeeze_scores"),
        h.make_node("TopK", ["scores", "k"], ["top_scores", "order"], name="rank", axis=1),
        h.make_node("GatherElements", ["token_ids", "order"], ["ranked_ids"], name="rerank", axis=1),
        h.make_node("Gather", ["position_table", "order"], ["ranked_positions"], name="positions", axis=-1),
    ]
    graph = h.make_graph(
        nodes,
        "sample_reranker",
        [h.make_tensor_value_info("token_ids", T.INT64, ["batch", length])],
        [
            h.make_tensor_value_info("embeddings", T.FLOAT, ["batch", length, width]),
            h.make_tensor_value_info("ranked_ids", T.INT64, ["batch", length]),
            h.make_tensor_value_info("ranked_positions", T.FLOAT16, [width, "batch", length]),
        ],
        initializer=[table, positions, weights, k, numpy_helper.from_array(np.array([2], np.int64), "last_axis")],
    )
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)], ir_version=10, producer_name="onnx-gather")
    model.doc_string = sample_model.__doc__.splitlines()[0]
    onnx.checker.check_model(model, full_check=True)
    return model


def pow_chain() -> onnx.ModelProto:
    """A chain of 40 Adds with one Pow(v, 0) after the 26th: DirectML's 0 ** 0 (0) is not ONNX Runtime's CPU's (1).

    Its inputs, models/pow_chain.npz, make the Pow's base 0 in the first element: README's "A model differs on
    DirectML" finds the Pow with parity and reduce.
    """
    nodes, value = [], "x"
    for position in range(40):
        nodes.append(h.make_node("Add", [value, "one"], [f"a{position}"], name=f"add{position}"))
        value = f"a{position}"
        if position == 25:
            nodes.append(h.make_node("Pow", [value, "zero"], ["p"], name="power"))
            value = "p"
    weights = [
        numpy_helper.from_array(np.array(1, np.float32), "one"),
        numpy_helper.from_array(np.zeros(4, np.float32), "zero"),
    ]
    graph = h.make_graph(
        nodes,
        "pow_chain",
        [h.make_tensor_value_info("x", T.FLOAT, [4])],
        [h.make_tensor_value_info(value, T.FLOAT, [4])],
        weights,
    )
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)], ir_version=10, producer_name="onnx-gather")
    model.doc_string = pow_chain.__doc__.splitlines()[0]
    onnx.checker.check_model(model, full_check=True)
    return model


def main() -> None:
    for name, model in (("sample", sample_model()), ("pow_chain", pow_chain())):
        path = MODELS / f"{name}.onnx"
        onnx.save(model, path)
        print(f"wrote {path.relative_to(MODELS.parent)} ({path.stat().st_size} bytes): {model.doc_string}")
        if name == "sample":
            for node in model.graph.node:
                print(f"  {node.name}: {node.op_type}({', '.join(node.input)}) -> {', '.join(node.output)}")
    np.savez(MODELS / "pow_chain.npz", x=np.array([-26, 1, 2, 3], np.float32))


if __name__ == "__main__":
    main()
