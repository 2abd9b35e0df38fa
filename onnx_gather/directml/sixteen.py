"""What the native 16-bit device (``layout.NATIVE16``) is refused: FLOAT16 arithmetic, which it computes wrong."""

from __future__ import annotations

import onnx

from onnx_gather.graphs.plumbing import bodies, node_label
from onnx_gather.graphs.types import value_types

# The operators measured right on that device with FLOAT16 data, bit for bit: they move values without arithmetic.
FLOAT16_MOVES = frozenset(
    {"Gather", "GatherElements", "GatherND", "Identity", "Reshape", "Flatten", "Squeeze", "Concat", "Transpose"}
)
REFUSAL = (
    "the native 16-bit device computes FLOAT16 arithmetic wrong (vkd3d 1.14 holds DXIL's 16-bit values in 32 bits "
    "and moves their bits unconverted): it runs only gathers and copies of FLOAT16 data"
)


def float16_arithmetic(model: onnx.ModelProto) -> str | None:
    """The first node that computes with FLOAT16 values (one of its inputs or outputs is FLOAT16, and it is not one of
    ``FLOAT16_MOVES``), as reports name it; None where there is none."""
    scopes = value_types(model)
    for body in bodies(model):
        types = scopes.get(body.scope, {})
        for position, node in enumerate(body.nodes):
            if node.domain in ("", "ai.onnx") and node.op_type in FLOAT16_MOVES:
                continue
            values = [name for name in (*node.input, *node.output) if name in types]
            if any(types[name].elem_type == onnx.TensorProto.FLOAT16 for name in values):
                return f"{node.op_type} {node_label(node, position)!r}"
    return None
