"""FLOAT16 on real DirectML: conversions as Direct3D's floating-point conversion rules require, and the native 16-bit
device refused for FLOAT16 arithmetic.

Direct3D's data conversion rules (learn.microsoft.com, "Data conversion rules", Floating Point Conversion), which
the shader conversions and typed stores DirectML writes FLOAT16 with follow: from a higher range representation to a
lower, "Round-to-zero is used during conversion to another float format", and "For source values greater than the
dynamic range of a lower range target format ... the maximum representable (appropriately signed) value results, NOT
including signed infinity"; INF stays INF, NaN NaN. numpy's astype(np.float16) rounds to nearest even and overflows
to infinity instead. DOUBLE goes to float first (dtof: round to nearest even), then to FLOAT16 by that rule.
"""

from __future__ import annotations

import numpy as np
import pytest
from conftest import require_directml
from onnx import TensorProto, helper

from onnx_gather.core.errors import UserError
from onnx_gather.directml import layout, sixteen

FLOAT16_MAX = np.float16(65504)


def _model(nodes: list, inputs: dict[str, int], outputs: dict[str, int]):
    graph = helper.make_graph(
        nodes,
        "float16",
        [helper.make_tensor_value_info(name, kind, [None]) for name, kind in inputs.items()],
        [helper.make_tensor_value_info(name, kind, [None]) for name, kind in outputs.items()],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


def _cast(source: int, target: int):
    return _model([helper.make_node("Cast", ["x"], ["y"], to=target)], {"x": source}, {"y": target})


def d3d_float16(x: np.ndarray) -> np.ndarray:
    """FLOAT to FLOAT16 as Direct3D converts: toward zero, finite values beyond FLOAT16's range to +-65504."""
    x = np.asarray(x, np.float32)
    with np.errstate(over="ignore"):
        nearest = x.astype(np.float16)
    bits = nearest.view(np.uint16).copy()
    bits[np.isfinite(x) & (np.abs(nearest.astype(np.float32)) > np.abs(x))] -= 1  # one step toward zero (inf: 65504)
    return bits.view(np.float16)


def neighbours() -> np.ndarray:
    """Every finite FLOAT16 value as FLOAT, the FLOATs just below and above it, the halfway points between
    neighbouring FLOAT16 values (ties) and the FLOATs either side of them; FLOAT's denormals, the overflow's edge,
    infinities and NaN."""
    finite = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16)
    finite = finite[np.isfinite(finite)].astype(np.float32)
    ordered = np.unique(finite)
    ties = ((ordered[:-1].astype(np.float64) + ordered[1:]) / 2).astype(np.float32)  # exact in FLOAT
    edges = np.array([65519.996, 65520, 65535.996, 65536, 1e5, 3.4e38, np.inf, np.nan, 1e-45, 1e-40], np.float32)
    steps = [np.nextafter(p, np.float32(side)) for p in (finite, ties) for side in (np.inf, -np.inf)]
    return np.concatenate([finite, ties, *steps, edges, -edges])


def assert_same_bits(actual: np.ndarray, expected: np.ndarray) -> None:
    """FLOAT16 bit for bit; any NaN for a NaN (its payload is the device's)."""
    nan = np.isnan(expected)
    assert np.array_equal(np.isnan(actual), nan)
    wrong = np.flatnonzero(actual[~nan].view(np.uint16) != expected[~nan].view(np.uint16))
    assert wrong.size == 0, f"{wrong.size} differ, first {expected[~nan][wrong[0]]!r}: {actual[~nan][wrong[0]]!r}"


@pytest.mark.directml
def test_float_and_double_to_float16_convert_as_direct3d_requires(directml):
    values = neighbours()
    expected = d3d_float16(values)
    assert values.size == 380_942
    # where numpy's round-to-nearest-even (and overflow to infinity) gives other bits than Direct3D's rule
    with np.errstate(over="ignore"):
        assert np.count_nonzero(values.astype(np.float16).view(np.uint16) != expected.view(np.uint16)) == 158_724
    got = directml.run(directml.load(_cast(TensorProto.FLOAT, TensorProto.FLOAT16)), {"x": values})["y"]
    assert_same_bits(got, expected)
    doubles = values.astype(np.float64)
    doubles = np.concatenate([doubles, np.nextafter(doubles, np.inf), np.nextafter(doubles, -np.inf)])
    got = directml.run(directml.load(_cast(TensorProto.DOUBLE, TensorProto.FLOAT16)), {"x": doubles})["y"]
    with np.errstate(over="ignore"):
        assert_same_bits(got, d3d_float16(doubles.astype(np.float32)))  # dtof rounds to nearest even first


@pytest.mark.directml
def test_every_float16_converts_to_float_exactly(directml):
    every = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16)
    got = directml.run(directml.load(_cast(TensorProto.FLOAT16, TensorProto.FLOAT)), {"x": every})["y"]
    nan = np.isnan(every)
    assert np.isnan(got[nan]).all()
    assert np.array_equal(got[~nan].view(np.uint32), every[~nan].astype(np.float32).view(np.uint32))


def _float16_add():
    node = helper.make_node("Add", ["a", "b"], ["y"])
    return _model([node], {"a": TensorProto.FLOAT16, "b": TensorProto.FLOAT16}, {"y": TensorProto.FLOAT16})


@pytest.mark.directml
def test_float16_sums_round_toward_zero(directml):
    every = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16)
    a = every[np.isfinite(every) & (np.abs(every) < 32768)]
    b = np.roll(a, 12_345)  # sums of every magnitude, inexact ones among them; none beyond FLOAT16's range
    got = directml.run(directml.load(_float16_add()), {"a": a, "b": b})["y"]
    assert_same_bits(got, d3d_float16(a.astype(np.float32) + b.astype(np.float32)))


@pytest.mark.directml
def test_a_float16_sum_beyond_its_range_is_infinity_here_where_direct3d_says_the_largest_float16(directml):
    # The set-up's deviation: lavapipe stores FLOAT16 (an R16_FLOAT typed UAV) beyond its range as infinity, where
    # Direct3D's conversion rules give the largest FLOAT16, 65504 (docs/directml-on-linux.md)
    a = np.array([60000, -60000, 65504], np.float16)
    got = directml.run(directml.load(_float16_add()), {"a": a, "b": a})["y"]
    assert_same_bits(got, np.array([np.inf, -np.inf, np.inf], np.float16))


def test_float16_arithmetic_is_what_moves_no_float16_value_only():
    gather = helper.make_node("Gather", ["x", "i"], ["g"], axis=0)
    inputs = {"x": TensorProto.FLOAT16, "i": TensorProto.INT64}
    assert sixteen.float16_arithmetic(_model([gather], inputs, {"g": TensorProto.FLOAT16})) is None
    relu = helper.make_node("Relu", ["g"], ["y"])
    assert sixteen.float16_arithmetic(_model([gather, relu], inputs, {"y": TensorProto.FLOAT16})) == "Relu 'Relu #1'"
    assert sixteen.float16_arithmetic(_cast(TensorProto.FLOAT, TensorProto.FLOAT16)) == "Cast 'Cast #0'"
    assert sixteen.float16_arithmetic(_cast(TensorProto.FLOAT, TensorProto.DOUBLE)) is None


@pytest.mark.directml
def test_the_native_16_bit_device_refuses_float16_arithmetic_in_one_line(monkeypatch):
    require_directml(wine=True)
    from onnx_gather.directml.worker import Runner

    monkeypatch.setenv(layout.D3D12_VARIABLE, layout.NATIVE16)
    gather = helper.make_node("Gather", ["x", "i"], ["y"], axis=0)
    inputs = {"x": TensorProto.FLOAT16, "i": TensorProto.INT64}
    with Runner() as runner:
        with pytest.raises(UserError) as refused:
            runner.load(_cast(TensorProto.FLOAT, TensorProto.FLOAT16))
        x = np.array([1.5, -2, 65504], np.float16)
        moved = runner.run(runner.load(_model([gather], inputs, {"y": TensorProto.FLOAT16})), {"x": x, "i": [2, 0]})
    assert str(refused.value) == f"Cast 'Cast #0': {sixteen.REFUSAL}; unset ${layout.D3D12_VARIABLE} to run it"
    assert "\n" not in str(refused.value)
    assert_same_bits(moved["y"], x[[2, 0]])
