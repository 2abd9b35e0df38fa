"""Regenerate the corpus of broken models in tests/broken/ (deterministic): python tools/make_broken.py

Each file is one kind of bad input every command must refuse with exit 2 and one line (tests/test_broken_inputs.py).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto as T
from onnx import helper as h

CORPUS = Path(__file__).resolve().parent.parent / "tests" / "broken"
SAMPLE = Path(__file__).resolve().parent.parent / "models" / "sample.onnx"


def _model(nodes, inputs, outputs, initializers=(), domains=()):
    graph = h.make_graph(nodes, "broken", inputs, outputs, initializer=list(initializers))
    imports = [h.make_opsetid("", 17)] + [h.make_opsetid(d, 1) for d in domains]
    return h.make_model(graph, opset_imports=imports, ir_version=10)


def _gather(axis=0, op="Gather", domain="", inputs=("x", "i"), **attributes):
    return h.make_node(op, list(inputs), ["y"], name="the_gather", axis=axis, domain=domain, **attributes)


X = h.make_tensor_value_info("x", T.FLOAT, [3, 4])
I = h.make_tensor_value_info("i", T.INT64, [2])  # noqa: E741
Y = h.make_tensor_value_info("y", T.FLOAT, [2, 4])


def _external(location: str, length: int) -> onnx.ModelProto:
    table = onnx.TensorProto(name="x", data_type=T.FLOAT, dims=[3, 4], data_location=onnx.TensorProto.EXTERNAL)
    for key, value in (("location", location), ("offset", "0"), ("length", str(length))):
        table.external_data.add(key=key, value=value)
    return _model([_gather()], [I], [Y], initializers=[table])


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _nested(depth: int) -> bytes:
    """A model with a Gather inside If nodes ``depth`` deep, written as protobuf wire bytes by hand: protobuf's
    own Python encoder refuses to build messages this deep (it checks its 100-message decode limit)."""
    output = lambda name: h.make_tensor_value_info(name, T.FLOAT, [2]).SerializeToString()  # noqa: E731
    graph = h.make_graph([_gather(inputs=("x5", "i"))], "level0", [], []).SerializeToString() + _field(12, output("y"))
    otherwise = h.make_graph(
        [h.make_node("Identity", ["x2"], ["z"])], "other", [], [h.make_tensor_value_info("z", T.FLOAT, [2])]
    ).SerializeToString()
    for level in range(1, depth + 1):
        graph_type = _varint(20 << 3) + _varint(onnx.AttributeProto.GRAPH)  # AttributeProto.type, a varint field
        attributes = b"".join(
            _field(5, _field(1, name.encode()) + _field(6, body) + graph_type)
            for name, body in (("else_branch", otherwise), ("then_branch", graph))
        )
        node = _field(1, b"c") + _field(2, f"y{level}".encode()) + _field(3, f"if{level}".encode()) + _field(4, b"If")
        graph = _field(1, node + attributes) + _field(2, f"level{level}".encode()) + _field(12, output(f"y{level}"))
    inputs = [
        h.make_tensor_value_info(n, t, s)
        for n, t, s in (("x5", T.FLOAT, [5]), ("x2", T.FLOAT, [2]), ("i", T.INT64, [2]), ("c", T.BOOL, []))
    ]
    graph += b"".join(_field(11, value.SerializeToString()) for value in inputs)
    return _varint(1 << 3) + _varint(10) + _field(7, graph) + _field(8, h.make_opsetid("", 17).SerializeToString())


def main() -> None:
    CORPUS.mkdir(parents=True, exist_ok=True)
    sample = SAMPLE.read_bytes()
    files = {
        "empty.onnx": b"",
        "random_bytes.onnx": np.random.default_rng(7).integers(0, 256, 4096, dtype=np.uint8).tobytes(),
        "truncated.onnx": sample[: len(sample) * 3 // 5],
        "text.onnx": b"This is not a model.\nIt is a text file with a model's name.\n",
        "undefined_input.onnx": _model([_gather(inputs=("x", "ghost"))], [X], [Y]).SerializeToString(),
        "axis_out_of_range.onnx": _model([_gather(axis=5)], [X, I], [Y]).SerializeToString(),
        "cycle.onnx": _model(
            [
                _gather(inputs=("x", "j")),
                h.make_node("ArgMax", ["y"], ["k"], name="pick", axis=1, keepdims=0),
                h.make_node("Add", ["k", "i"], ["j"], name="shift"),
            ],
            [X, I],
            [Y],
        ).SerializeToString(),
        "dml_unknown_attribute.onnx": _model(
            [_gather(op="DmlGather", domain="onnx_gather", index_dimensions=1, out_of_bounds="clamp", mode=1)],
            [X, h.make_tensor_value_info("i", T.INT64, [1, 2])],
            [Y],
            domains=["onnx_gather"],
        ).SerializeToString(),
        "dml_missing_attribute.onnx": _model(
            [_gather(op="DmlGatherElements", domain="onnx_gather")],
            [X, h.make_tensor_value_info("i", T.INT64, [3, 4])],
            [h.make_tensor_value_info("y", T.FLOAT, [3, 4])],
            domains=["onnx_gather"],
        ).SerializeToString(),
        "external_missing.onnx": _external("missing.bin", 48).SerializeToString(),
        "external_short.onnx": _external("external_short.bin", 48).SerializeToString(),
        "external_short.bin": np.zeros(5, np.float32).tobytes(),
        "external_escapes.onnx": _external("../../etc/passwd", 48).SerializeToString(),
        "nested_50_deep.onnx": _nested(50),
    }
    for name, data in files.items():
        (CORPUS / name).write_bytes(data)
        print(f"tests/broken/{name} ({len(data)} bytes)")


if __name__ == "__main__":
    main()
