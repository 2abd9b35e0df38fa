"""``graphs.ranges``: the ranges it finds hold every number ONNX Runtime's CPU computes there (a NaN aside), on
inputs that reach the ends of float32: extremes, subnormals, zeros of both signs."""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper

from onnx_gather.graphs.plumbing import DefUse, bodies
from onnx_gather.graphs.ranges import Range, Ranges
from onnx_gather.graphs.types import value_types

TINY = np.finfo(np.float32).tiny
EDGES = np.array(
    [0.0, -0.0, 1e-45, -1e-45, TINY, -TINY, 0.5, -0.5, 1.5, 2.5, -2.5, 88.0, 89.0, -104.0, 3e9, -3e9, 3.4e38, -3.4e38],
    np.float32,
)
EDGES = np.concatenate([EDGES, np.array([np.inf, -np.inf], np.float32)])
X = np.concatenate([EDGES, np.random.default_rng(0).standard_normal(200).astype(np.float32) * 50])
C = {"low": -5.0, "high": 255.0, "tiny": 1e-10, "two": 2.0, "one": 1.0, "scale": 1e6, "big": 1e30}
# (nodes from x to y, the range expected where it is exact)
CASES = {
    "relu": ([h.make_node("Relu", ["x"], ["y"])], Range(0, math.inf)),
    "sigmoid": ([h.make_node("Sigmoid", ["x"], ["y"])], Range(0, 1)),
    "softmax": ([h.make_node("Tanh", ["x"], ["t"]), h.make_node("Softmax", ["t"], ["y"], axis=0)], Range(0, 1)),
    "exp": ([h.make_node("Exp", ["x"], ["y"])], None),
    "abs": ([h.make_node("Abs", ["x"], ["y"])], Range(0, math.inf)),
    "sqrt of abs": ([h.make_node("Abs", ["x"], ["a"]), h.make_node("Sqrt", ["a"], ["y"])], None),
    "square": ([h.make_node("Mul", ["x", "x"], ["y"])], Range(0, math.inf)),
    "pow 2": ([h.make_node("Pow", ["x", "two"], ["y"])], Range(0, math.inf)),
    "square + tiny": ([h.make_node("Mul", ["x", "x"], ["s"]), h.make_node("Add", ["s", "tiny"], ["y"])], None),
    "clip": ([h.make_node("Clip", ["x", "low", "high"], ["y"])], Range(-5, 255)),
    "clip tiny": ([h.make_node("Clip", ["x", "tiny", ""], ["y"])], None),
    "max one": ([h.make_node("Max", ["x", "one"], ["y"])], Range(1, math.inf)),
    "min one": ([h.make_node("Min", ["x", "one"], ["y"])], Range(-math.inf, 1)),
    "neg sigmoid": ([h.make_node("Sigmoid", ["x"], ["s"]), h.make_node("Neg", ["s"], ["y"])], Range(-1, 0)),
    "sigmoid * scale": ([h.make_node("Sigmoid", ["x"], ["s"]), h.make_node("Mul", ["s", "scale"], ["y"])], None),
    "sigmoid - one": ([h.make_node("Sigmoid", ["x"], ["s"]), h.make_node("Sub", ["s", "one"], ["y"])], None),
    "tanh * big": ([h.make_node("Tanh", ["x"], ["s"]), h.make_node("Mul", ["s", "big"], ["y"])], None),
    "floor of clip": ([h.make_node("Clip", ["x", "low", "high"], ["c"]), h.make_node("Floor", ["c"], ["y"])], None),
    "round of clip": ([h.make_node("Clip", ["x", "low", "high"], ["c"]), h.make_node("Round", ["c"], ["y"])], None),
    "erf": ([h.make_node("Erf", ["x"], ["y"])], Range(-1, 1)),
    "shape as float": (
        [h.make_node("Shape", ["x"], ["s"]), h.make_node("Cast", ["s"], ["y"], to=T.FLOAT)],
        Range(0, 2.0**63, True),
    ),
    "cast to uint8 of clip": (
        [h.make_node("Clip", ["x", "low", "high"], ["c"]), h.make_node("Cast", ["c"], ["y"], to=T.UINT8)],
        None,
    ),
    "cast to int32 and back": (
        [h.make_node("Cast", ["x"], ["i"], to=T.INT32), h.make_node("Cast", ["i"], ["y"], to=T.FLOAT)],
        None,
    ),
    "cast to float16 of clip tiny": (
        [h.make_node("Clip", ["x", "tiny", "high"], ["c"]), h.make_node("Cast", ["c"], ["y"], to=T.FLOAT16)],
        None,
    ),
    "cast to bool of sigmoid + one": (
        [
            h.make_node("Sigmoid", ["x"], ["s"]),
            h.make_node("Add", ["s", "one"], ["p"]),
            h.make_node("Cast", ["p"], ["y"], to=T.BOOL),
        ],
        Range(1, 1, True),
    ),
    "concat of relu and sigmoid": (
        [
            h.make_node("Relu", ["x"], ["r"]),
            h.make_node("Sigmoid", ["x"], ["s"]),
            h.make_node("Concat", ["r", "s"], ["y"], axis=0),
        ],
        Range(0, math.inf),
    ),
    "unknown op": ([h.make_node("Sin", ["x"], ["y"])], Range()),
}


def _model(nodes: list[onnx.NodeProto]) -> onnx.ModelProto:
    weights = [numpy_helper.from_array(np.array(value, np.float32), name) for name, value in C.items()]
    graph = h.make_graph(
        nodes,
        "ranges",
        [h.make_tensor_value_info("x", T.FLOAT, [len(X)])],
        [h.make_value_info("y", onnx.TypeProto())],
        weights,
    )
    return h.make_model(graph, opset_imports=[h.make_opsetid("", 17)], ir_version=10)


def _range(model: onnx.ModelProto, value: str) -> Range:
    (body,) = bodies(model)
    types = value_types(model).get(body.scope, {})
    return Ranges(DefUse(body, Counter(), model.ir_version), types).of(value)


@pytest.mark.parametrize("case", CASES, ids=str)
def test_the_range_holds_every_number_the_cpu_computes(case):
    nodes, expected = CASES[case]
    model = _model(nodes)
    found = _range(model, "y")
    if expected is not None:
        assert found == expected
    session = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    (y,) = session.run(None, {"x": X})
    numbers = y.astype(np.float64)
    numbers = numbers[~np.isnan(numbers)]
    assert numbers.size, case
    assert numbers.min() >= found.low and numbers.max() <= found.high, (case, found, numbers.min(), numbers.max())
    if found.integral:
        finite = numbers[np.isfinite(numbers)]
        assert np.array_equal(finite, np.round(finite)), case


def test_a_square_plus_a_normal_constant_holds_no_subnormal():
    found = _range(_model(CASES["square + tiny"][0]), "y")
    assert found.low >= TINY and found.low <= 1e-10
