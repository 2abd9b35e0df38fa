"""The tanh approximation of GELU, as PyTorch exports HF's GELU of T5 and GPT-2 (``NewGELUActivation``): ONNX
Runtime's FastGeluFusion turns it into one ``com.microsoft`` FastGelu on its CPU and DirectML providers alike, and
the DirectML provider's FastGelu is DirectML's exact GELU (with erf), not the formula (docs/directml-on-linux.md,
"Known DirectML failures").
"""

from __future__ import annotations

import math

import numpy as np
import onnx
import onnxruntime
import pytest
from conftest import SUMMARIES, require_directml
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper

from onnx_gather.runtime import backends

X = np.linspace(-6, 6, 100_001, dtype=np.float32)
_x = X.astype(np.float64)
TANH_FORMULA = 0.5 * _x * (1 + np.tanh(math.sqrt(2 / math.pi) * (_x + 0.044715 * _x**3)))
ERF_FORMULA = 0.5 * _x * (1 + np.vectorize(math.erf)(_x / math.sqrt(2)))
# The two formulas differ by up to 4.73e-4 (at |x| = 2.70); both providers compute either within 1e-6.
APART, WITHIN = 4.5e-4, 2e-6


def _tanh_gelu(consumed: bool = True) -> onnx.ModelProto:
    """0.5 * x * (1 + tanh(0.7978845608 * (x + 0.044715 * x ** 3))) in the exporter's nodes and order, then a Neg
    (``consumed``): FastGeluFusion leaves the subgraph alone where its last Mul makes a graph output."""
    nodes = [
        h.make_node("Mul", ["x", "half"], ["half_x"], name="mul_half"),
        h.make_node("Pow", ["x", "three"], ["cube"], name="pow"),
        h.make_node("Mul", ["cube", "c"], ["scaled_cube"], name="mul_c"),
        h.make_node("Add", ["x", "scaled_cube"], ["inner"], name="add_x"),
        h.make_node("Mul", ["inner", "s"], ["argument"], name="mul_s"),
        h.make_node("Tanh", ["argument"], ["tanh"], name="tanh"),
        h.make_node("Add", ["tanh", "one"], ["gate"], name="add_one"),
        h.make_node("Mul", ["half_x", "gate"], ["gelu"], name="mul_gate"),
    ]
    if consumed:
        nodes.append(h.make_node("Neg", ["gelu"], ["y"], name="neg"))
    constants = {"half": 0.5, "three": 3.0, "c": 0.044715, "s": 0.7978845608, "one": 1.0}
    weights = [numpy_helper.from_array(np.array(value, np.float32), name) for name, value in constants.items()]
    graph = h.make_graph(
        nodes,
        "tanh_gelu",
        [h.make_tensor_value_info("x", T.FLOAT, ["n"])],
        [h.make_tensor_value_info("y" if consumed else "gelu", T.FLOAT, ["n"])],
        weights,
    )
    return h.make_model(graph, opset_imports=[h.make_opsetid("", 17)], ir_version=10)


def _fast_gelu() -> onnx.ModelProto:
    """One com.microsoft FastGelu, then a Neg: what the fusion leaves of ``_tanh_gelu()``."""
    nodes = [
        h.make_node("FastGelu", ["x"], ["gelu"], name="fast_gelu", domain="com.microsoft"),
        h.make_node("Neg", ["gelu"], ["y"], name="neg"),
    ]
    graph = h.make_graph(
        nodes,
        "fast_gelu",
        [h.make_tensor_value_info("x", T.FLOAT, ["n"])],
        [h.make_tensor_value_info("y", T.FLOAT, ["n"])],
    )
    imports = [h.make_opsetid("", 17), h.make_opsetid("com.microsoft", 1)]
    return h.make_model(graph, opset_imports=imports, ir_version=10)


def _gelu(outputs: dict[str, np.ndarray]) -> np.ndarray:
    return outputs["gelu"].astype(np.float64) if "gelu" in outputs else -outputs["y"].astype(np.float64)


def _apart(gelu: np.ndarray) -> tuple[float, float]:
    """The max. abs. differences from the tanh formula and from the erf formula."""
    return float(np.abs(gelu - TANH_FORMULA).max()), float(np.abs(gelu - ERF_FORMULA).max())


@pytest.mark.parametrize("level", ["BASIC", "EXTENDED", "ALL"])
def test_the_cpu_provider_fuses_it_into_fast_gelu_too_from_level_2_and_computes_the_tanh_formula(tmp_path, level):
    options = onnxruntime.SessionOptions()
    options.log_severity_level = 3  # not its remark that an optimized model may be machine-specific
    options.graph_optimization_level = getattr(onnxruntime.GraphOptimizationLevel, f"ORT_ENABLE_{level}")
    options.optimized_model_filepath = str(tmp_path / "optimized.onnx")
    session = onnxruntime.InferenceSession(_tanh_gelu().SerializeToString(), options, ["CPUExecutionProvider"])
    from_tanh, from_erf = _apart(-session.run(None, {"x": X})[0].astype(np.float64))
    assert from_tanh < WITHIN and from_erf > APART
    ops = [node.op_type for node in onnx.load(tmp_path / "optimized.onnx").graph.node]
    assert ops == ([n.op_type for n in _tanh_gelu().graph.node] if level == "BASIC" else ["FastGelu", "Neg"])


def _on_directml(tmp_path, model: onnx.ModelProto, name: str) -> tuple[np.ndarray, int | None]:
    """The GELU DirectML computed, and how many nodes ONNX Runtime placed on it (None natively, where it is not
    reported)."""
    path = tmp_path / f"{name}.onnx"
    onnx.save(model, path)
    outcome = backends.create("dml").run(backends.Model(path, model), {"x": X})
    return _gelu(outcome.outputs), outcome.placement.get("DmlExecutionProvider", {}).get("nodes")


@pytest.mark.directml
def test_directml_computes_the_fused_tanh_gelu_with_erf_and_the_unfused_one_as_written(tmp_path):
    require_directml()
    fused, placed = _on_directml(tmp_path, _tanh_gelu(), "fused")
    from_tanh, from_erf = _apart(fused)
    assert from_erf < WITHIN and from_tanh > APART
    assert placed in (None, 2)  # FastGelu and Neg, of 9 nodes
    direct = _apart(_on_directml(tmp_path, _fast_gelu(), "fast_gelu")[0])  # the cause: its FastGelu is erf's GELU
    assert direct[1] < WITHIN and direct[0] > APART
    unfused, placed = _on_directml(tmp_path, _tanh_gelu(consumed=False), "unfused")
    kept = _apart(unfused)
    assert kept[0] < WITHIN and kept[1] > APART
    assert placed in (None, 8)
    SUMMARIES.append(
        f"tanh-GELU on real DirectML, {X.size:,} x in [-6, 6]: fused into FastGelu {from_tanh:.3g} from the tanh "
        f"formula, {from_erf:.3g} from erf's; a com.microsoft FastGelu {direct[0]:.3g}, {direct[1]:.3g}; left "
        f"unfused {kept[0]:.3g}, {kept[1]:.3g}"
    )
