"""Every rule of ``onnx_gather.graphs.placement.known`` held to its repro: ``check`` names the rule at the repro's node
(fast), and real DirectML does there what the rule says (fails with its message, or gives the values it states)."""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
import pytest
from conftest import SUMMARIES, require_directml
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper
from onnx.backend.test.case.test_case import TestCase
from onnx.reference import ReferenceEvaluator

from onnx_gather.conformance import node_suite
from onnx_gather.core.scatter import dml_scatter_elements
from onnx_gather.core.words import counted
from onnx_gather.directml.process import DirectMlError, RunnerError
from onnx_gather.graphs.placement import known
from onnx_gather.graphs.placement.check import check, flagged, measured, reads
from onnx_gather.graphs.plumbing import node_label
from onnx_gather.runtime import backends
from onnx_gather.runtime.comparison import Tolerance, compare, exactness, faulty, is_float
from onnx_gather.runtime.dmlsim import EmulatedFailure
from onnx_gather.runtime.observe import Observation

# (DirectML's outputs, the reference's (ONNX Runtime's CPU's, None where it failed, or a suite case's expected ones),
# the feeds): asserts the difference the rule states.
Differs = Callable[[list[np.ndarray], list[np.ndarray], dict[str, np.ndarray]], None]


@dataclass(frozen=True)
class Repro:
    """A model where ``rule`` applies at node ``node``: DirectML fails matching ``failure`` (or its runner ends), or
    ``differs`` holds."""

    rule: str
    name: str
    model: onnx.ModelProto
    feeds: dict[str, np.ndarray]
    node: str
    failure: str = ""
    differs: Differs | None = field(default=None, compare=False)
    attempts: int = 1  # a race: the rule holds if it shows in one of this many runs
    cpu_fails: str = ""  # ONNX Runtime's CPU fails with this message: the rule compares DirectML with core instead
    expected: list[np.ndarray] | None = field(default=None, compare=False)  # a suite case's: the reference, not the CPU


def _model(nodes, inputs, outputs, weights=(), opset=17) -> onnx.ModelProto:
    graph = h.make_graph(nodes, "repro", inputs, outputs, list(weights))
    imports = [h.make_opsetid("", opset), h.make_opsetid("com.microsoft", 1)]
    return h.make_model(graph, opset_imports=imports, ir_version=10)


def _one(op: str, feeds: dict[str, np.ndarray], out: int, weights=(), opset=17, **attributes) -> onnx.ModelProto:
    """One node ``op`` of the feeds (and ``weights``, initializers) making ``y`` of type ``out``, then a Neg or an
    Identity, so that ``op``'s output is no graph output."""
    names = [*feeds, *(w.name for w in weights)]
    inputs = [h.make_tensor_value_info(k, h.np_dtype_to_tensor_dtype(v.dtype), v.shape) for k, v in feeds.items()]
    nodes = [h.make_node(op, names, ["t"], name="node", **attributes), h.make_node("Identity", ["t"], ["y"])]
    return _model(nodes, inputs, [h.make_tensor_value_info("y", out, None)], weights, opset)


def _cast(values, dtype, to: int) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    feeds = {"x": np.array(values, dtype)}
    return _one("Cast", feeds, to, to=to), feeds


def _below_int32_is_int32_min(dml, cpu, feeds):
    x = feeds["x"]
    low = x < -(2.0**31)
    assert low.any() and (dml[0][low] == -(2**31)).all() and (cpu[0][low] < -(2**31)).all()
    assert np.array_equal(dml[0][~low], cpu[0][~low])


def _saturates(expected):
    def differs(dml, cpu, feeds):
        assert dml[0].tolist() == expected and cpu[0].tolist() != expected

    return differs


def _pow_zero_zero(dml, cpu, feeds):
    assert dml[0].tolist() == [0.0, 8.0] and cpu[0].tolist() == [1.0, 8.0]


def _log_subnormal(dml, cpu, feeds):
    assert abs(dml[0][0] - -88.03) < 0.01 and abs(cpu[0][0] - -103.28) < 0.01 and dml[0][1] == cpu[0][1] == 0


X = np.linspace(-6, 6, 10_001, dtype=np.float32)
_ERF_GELU = 0.5 * X.astype(np.float64) * (1 + np.vectorize(math.erf)(X.astype(np.float64) / math.sqrt(2)))


def _erf_gelu(dml, cpu, feeds):
    """DirectML gives erf's GELU, the CPU the tanh formula: 4.7e-4 apart at most (at |x| = 2.70)."""
    assert np.abs(-dml[0] - _ERF_GELU).max() < 2e-6
    assert np.abs(dml[0] - cpu[0]).max() > 4e-4


def _tanh_gelu() -> onnx.ModelProto:
    """0.5 * x * (1 + tanh(0.7978845608 * (x + 0.044715 * x ** 3))) as PyTorch exports it, then a Neg."""
    nodes = [
        h.make_node("Mul", ["x", "half"], ["half_x"]),
        h.make_node("Pow", ["x", "three"], ["cube"]),
        h.make_node("Mul", ["cube", "c"], ["scaled_cube"]),
        h.make_node("Add", ["x", "scaled_cube"], ["inner"]),
        h.make_node("Mul", ["inner", "s"], ["argument"]),
        h.make_node("Tanh", ["argument"], ["tanh"], name="tanh"),
        h.make_node("Add", ["tanh", "one"], ["gate"]),
        h.make_node("Mul", ["half_x", "gate"], ["gelu"]),
        h.make_node("Neg", ["gelu"], ["y"]),
    ]
    constants = {"half": 0.5, "three": 3.0, "c": 0.044715, "s": 0.7978845608, "one": 1.0}
    weights = [numpy_helper.from_array(np.array(value, np.float32), name) for name, value in constants.items()]
    io = [h.make_tensor_value_info(name, T.FLOAT, ["n"]) for name in ("x", "y")]
    return _model(nodes, io[:1], io[1:], weights)


def _fast_gelu() -> onnx.ModelProto:
    nodes = [
        h.make_node("FastGelu", ["x"], ["gelu"], name="fast_gelu", domain="com.microsoft"),
        h.make_node("Neg", ["gelu"], ["y"]),
    ]
    io = [h.make_tensor_value_info(name, T.FLOAT, ["n"]) for name in ("x", "y")]
    return _model(nodes, io[:1], io[1:])


def _empty_output() -> onnx.ModelProto:
    """y = Neg(x) beside z = NonZero(e), both graph outputs (docs/semantics.md section 9)."""
    nodes = [h.make_node("Neg", ["x"], ["y"]), h.make_node("NonZero", ["e"], ["z"], name="nonzero")]
    inputs = [h.make_tensor_value_info("x", T.FLOAT, [3]), h.make_tensor_value_info("e", T.FLOAT, [3])]
    outputs = [h.make_tensor_value_info("y", T.FLOAT, [3]), h.make_tensor_value_info("z", T.INT64, [1, None])]
    return _model(nodes, inputs, outputs)


def _unwritten(dml, cpu, feeds):
    assert dml[1].shape == (1, 0) and not np.array_equal(dml[0], cpu[0])


def _scatter(op: str, data, indices, updates, **attributes) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    feeds = {"data": data, "indices": indices, "updates": updates}
    return _one(op, feeds, T.FLOAT, opset=16, **attributes), feeds


def _written_at_the_offset(dml, cpu, feeds):
    """DirectML writes the index 7 of row 1 (of 6 columns) into row 2, as core.scatter states; the CPU fails."""
    expected = dml_scatter_elements(feeds["data"], feeds["indices"], feeds["updates"], axis=1)
    assert cpu is None and expected[2, 1] == 2 and np.array_equal(dml[0], expected)


def _not_always_the_last(dml, cpu, feeds):
    kept = dml[0][0]
    assert kept in feeds["updates"] and cpu[0][0] == feeds["updates"][-1] and kept != cpu[0][0]


@functools.cache
def _suite_cases() -> dict[str, TestCase]:
    return {case.name: case for case in node_suite.node_cases()}


def _case(rule: str, name: str, failure: str = "", differs: Differs | None = None) -> Repro:
    """ONNX's node test case ``name`` as the node suite ran it on DirectML (re-stamped where ``restamp`` applies),
    its inputs and expected outputs; its one node is the rule's."""
    case = _suite_cases()[name]
    again = node_suite.restamp(case.model)
    model = case.model if again is None else again.model
    ((inputs, expected),) = node_suite.data_sets(case)
    feeds = {value.name: array for value, array in zip(model.graph.input, inputs, strict=False)}
    node = node_label(model.graph.node[0], 0)
    return Repro(
        rule, name, model, feeds, node, failure=failure, differs=differs, expected=None if failure else expected
    )


SUITE = Tolerance(atol=1e-5, rtol=1e-3)  # ONNX Runtime's backend test series' (docs/node-suite.md)


def _off(mismatches: int, max_abs: float) -> Differs:
    """DirectML's first output is outside the suite's tolerance of the expected one at ``mismatches`` values, by
    ``max_abs`` at most (to 3 digits)."""

    def differs(dml, expected, feeds):
        comparison = compare(expected[0], dml[0], SUITE)
        assert comparison.mismatches == mismatches and f"{comparison.max_abs:.3g}" == f"{max_abs:.3g}"

    return differs


def _zero_for_the_empty_set(dml, expected, feeds):
    assert feeds["data"].size == 0 and (dml[0] == 0).all() and (expected[0] != 0).all()


def _min_everywhere(dml, expected, feeds):
    assert feeds["min"] > feeds["max"] and (dml[0] == feeds["min"]).all() and (expected[0] == feeds["max"]).all()


def _first_element_of_b(max_abs: float) -> Differs:
    def differs(dml, expected, feeds):
        a, b = feeds["a"], feeds["b"]
        assert np.allclose(dml[0], a @ np.full_like(b, b[0]), atol=1e-5, rtol=1e-5)
        assert f"{np.abs(dml[0] - expected[0]).max():.3g}" == f"{max_abs:.3g}"

    return differs


def _quantized_one_below(dml, expected, feeds):
    (at,) = np.flatnonzero(dml[0] != expected[0])
    assert feeds["x"][at] == -2.5 and dml[0][at] == 25 and expected[0][at] == 26


def _nan_mod_infinity(dml, expected, feeds):
    x, y = feeds["x"], feeds["y"]
    infinite = np.isinf(y) & np.isfinite(x)
    assert infinite.sum() == 4 and np.isnan(dml[0][infinite]).all() and not np.isnan(expected[0][infinite]).any()
    assert compare(expected[0][~infinite], dml[0][~infinite], SUITE).within_tolerance


def _suite_repros() -> list[Repro]:
    """The DirectML behaviours ONNX's node suite found (docs/node-suite.md), each on the suite's own cases."""
    invalid, runner_ends = "80070057", "ended unexpectedly"
    reductions = ["max", "min", "prod", "log_sum", "log_sum_exp"]
    return [
        *(
            _case("reduce-empty-set", f"test_reduce_{op}_empty_set", differs=_zero_for_the_empty_set)
            for op in reductions
        ),
        _case("clip-min-above-max", "test_clip_min_greater_than_max", differs=_min_everywhere),
        _case("matmul-1d-b", "test_matmul_1d_1d", differs=_first_element_of_b(0.0124)),
        _case("matmul-1d-b", "test_matmul_4d_1d", differs=_first_element_of_b(1.25)),
        *(
            _case("qlinearmatmul-float16-scales", f"test_qlinearmatmul_{d}_{t}_float16", failure=invalid)
            for d in ("2D", "3D")
            for t in ("int8", "uint8")
        ),
        _case("resize-antialias", "test_resize_downsample_scales_linear_antialias", differs=_off(3, 0.208)),
        _case("resize-antialias", "test_resize_downsample_sizes_linear_antialias", differs=_off(8, 0.53)),
        _case(
            "resize-pytorch-half-pixel", "test_resize_downsample_sizes_linear_pytorch_half_pixel", differs=_off(3, 1.5)
        ),
        *(
            _case("resize-keep-aspect-ratio", f"test_resize_{way}_sizes_nearest_{policy}", failure=invalid)
            for way in ("downsample", "upsample")
            for policy in ("not_larger", "not_smaller")
        ),
        _case("resize-tf-crop-and-resize", "test_resize_tf_crop_and_resize", differs=_off(8, 2.0)),
        *(
            _case("resize-tf-crop-and-resize-axes", f"test_resize_tf_crop_and_resize_axes_{axes}", failure=runner_ends)
            for axes in ("2_3", "3_2")
        ),
        _case("dynamicquantizelinear-rounding", "test_dynamicquantizelinear", differs=_quantized_one_below),
        _case(
            "averagepool-3d-dilations-ceil",
            "test_averagepool_3d_dilations_large_count_include_pad_is_1_ceil_mode_is_True",
            differs=_off(216, 0.0637),
        ),
        _case("asin-accuracy", "test_asin_example", differs=_off(1, 6.76e-5)),
        *(
            _case("mod-fmod-0-infinity", f"test_mod_float_edge_cases_fmod_0_{t}", differs=_nan_mod_infinity)
            for t in ("float32", "float16")
        ),
        _case("convtranspose-same-strided", "test_convtranspose_autopad_same", failure=invalid),
        *(
            _case("quantize-per-axis-21", name, failure=invalid)
            for name in (
                "test_quantizelinear_axis",
                "test_dequantizelinear_axis",
                "test_quantizelinear_int4",
                "test_quantizelinear_uint4",
            )
        ),
    ]


def _unwritten_output(dml, cpu, feeds):
    assert cpu[0].tolist() == feeds["data"].tolist() and not dml[0].any()


def _repros() -> list[Repro]:
    shape = numpy_helper.from_array(np.array([-1], np.int64), "shape")
    weights_1d = numpy_helper.from_array(np.ones((1, 1, 3), np.float32), "w")
    x6 = {"x": np.arange(6, dtype=np.float32)}
    many = 1 << 20
    duplicates = (np.zeros(many, np.float32), np.zeros(many, np.int64), np.arange(1, many + 1, dtype=np.float32))
    beyond = (np.zeros(4, np.float32), np.zeros(5, np.int64), np.ones(5, np.float32))
    empty_nd = (
        np.arange(1, 7, dtype=np.float32).reshape(2, 3),
        np.zeros((0, 1), np.int64),
        np.zeros((0, 3), np.float32),
    )
    past = (np.zeros((3, 6), np.float32), np.array([[0], [7], [0]]), np.array([[1], [2], [3]], np.float32))
    padded = {"strides": [2], "output_padding": [1]}
    return [
        Repro(
            "reshape-allowzero",
            "fixed dims",
            _one("Reshape", x6, T.FLOAT, [shape], allowzero=1),
            x6,
            "node",
            failure="80070057",
        ),
        Repro(
            "convtranspose-1d",
            "3-D tensors, output_padding",
            _one("ConvTranspose", {"x": np.ones((1, 1, 4), np.float32)}, T.FLOAT, [weights_1d], **padded),
            {"x": np.ones((1, 1, 4), np.float32)},
            "node",
            failure="80070057",
        ),
        Repro(
            "cast-to-int64",
            "FLOAT",
            *_cast([-3e9, -2.2e9, -1e9, 3e9, 2.5], np.float32, T.INT64),
            "node",
            differs=_below_int32_is_int32_min,
        ),
        Repro(
            "cast-to-int64",
            "DOUBLE",
            *_cast([-3e9, -2.2e9, -1e9, 3e9, 2.5], np.float64, T.INT64),
            "node",
            differs=_below_int32_is_int32_min,
        ),
        Repro("cast-double-to-uint64", "DOUBLE", *_cast([1.0, 2.0], np.float64, T.UINT64), "node", failure="80004005"),
        Repro(
            "cast-saturates",
            "INT32",
            *_cast([3e9, np.nan, -3e9, 7.9], np.float32, T.INT32),
            "node",
            differs=_saturates([2147483647, 0, -2147483648, 7]),
        ),
        Repro(
            "cast-saturates",
            "UINT8",
            *_cast([-1, 300, 7], np.float32, T.UINT8),
            "node",
            differs=_saturates([0, 255, 7]),
        ),
        Repro(
            "pow-zero-zero",
            "FLOAT",
            _one("Pow", {"a": np.zeros(2, np.float32), "b": np.zeros(2, np.float32)}, T.FLOAT),
            {"a": np.array([0, 2], np.float32), "b": np.array([0, 3], np.float32)},
            "node",
            differs=_pow_zero_zero,
        ),
        Repro(
            "log-subnormal",
            "FLOAT",
            _one("Log", {"x": np.zeros(2, np.float32)}, T.FLOAT),
            {"x": np.array([1e-45, 1], np.float32)},
            "node",
            differs=_log_subnormal,
        ),
        Repro("tanh-gelu", "the exporter's nodes", _tanh_gelu(), {"x": X}, "tanh", differs=_erf_gelu),
        Repro("tanh-gelu", "FastGelu", _fast_gelu(), {"x": X}, "fast_gelu", differs=_erf_gelu),
        Repro(
            "empty-output",
            "NonZero of zeros",
            _empty_output(),
            {"x": np.array([1, 2, 3], np.float32), "e": np.zeros(3, np.float32)},
            "nonzero",
            differs=_unwritten,
        ),
        Repro(
            "scatter-out-of-bounds",
            "past a row",
            *_scatter("ScatterElements", *past, axis=1),
            "node",
            differs=_written_at_the_offset,
            cpu_fails="indices element out of data bounds",
        ),
        Repro(
            "scatter-duplicates",
            "2^20 onto one",
            *_scatter("ScatterElements", *duplicates),
            "node",
            differs=_not_always_the_last,
            attempts=12,
        ),
        Repro(
            "scatter-nd-empty-indices",
            "indices [0, 1]",
            *_scatter("ScatterND", *empty_nd),
            "node",
            differs=_unwritten_output,
        ),
        Repro(
            "scatter-elements-shapes",
            "5 into 4",
            *_scatter("ScatterElements", *beyond),
            "node",
            failure="80070057",
        ),
    ]


REPROS = _repros() + _suite_repros()
# The differs rules dmlsim does not emulate (each says why): there it gives the CPU's values, not DirectML's.
UNEMULATED = {rule.name for rule in known.RULES if isinstance(rule.emulated, str)}
_HRESULT = re.compile(r"\b8[0-9A-F]{7}\b")


def _dmlsim_fails_as_directml(model: backends.Model, repro: Repro, directml: Exception) -> None:
    """dmlsim fails at the repro with real DirectML's HRESULT (where the runner ended: saying the process ends)."""
    with pytest.raises(EmulatedFailure) as emulated:
        backends.create("dmlsim").run(model, repro.feeds)
    failure = emulated.value.fault.failure
    assert failure.hresult in _HRESULT.findall(str(directml)) if failure.hresult else isinstance(directml, RunnerError)


def _dmlsim_computes_as_directml(model: backends.Model, repro: Repro, directml: dict[str, np.ndarray]) -> None:
    """dmlsim gives real DirectML's outputs at the repro: bit for bit for a scatter, else within tolerance."""
    emulated = backends.create("dmlsim").run(model, repro.feeds).outputs
    tolerance = Tolerance(atol=0, rtol=0) if repro.rule.startswith("scatter") else Tolerance()
    for name in model.output_names:
        assert compare(directml[name], emulated[name], tolerance).within_tolerance, name


def test_every_rule_has_a_repro():
    assert {repro.rule for repro in REPROS} == set(known.rule_names())


@pytest.mark.parametrize("repro", REPROS, ids=lambda r: f"{r.rule}-{r.name}")
def test_check_names_the_rule_at_the_repros_node(repro):
    (verdict,) = [v for v in check(repro.model) if v.node == repro.node]
    assert verdict.runs_on == "DirectML", verdict
    (found,) = [k for k in verdict.known if k.rule == repro.rule]
    assert found.kind == (known.FAILS if repro.failure else known.DIFFERS)
    assert verdict.status == ("fails" if repro.failure else "DirectML")


@pytest.mark.directml
@pytest.mark.parametrize("repro", REPROS, ids=lambda r: f"{r.rule}-{r.name}")
def test_real_directml_does_what_the_rule_says(repro, tmp_path):
    require_directml(wine=True)
    (verdict,) = [v for v in _measured(repro.model, repro.feeds) if v.node == repro.node]
    (flag,) = [k for k in verdict.known if k.rule == repro.rule]
    assert flag.status == known.Status.MET, flag  # what check --inputs says, confirmed on DirectML below
    model = backends.Model(tmp_path / "repro.onnx", repro.model)
    dml = backends.create("dml")
    if repro.failure:
        with pytest.raises((DirectMlError, RunnerError), match=repro.failure) as failure:
            dml.run(model, repro.feeds)
        _dmlsim_fails_as_directml(model, repro, failure.value)
        SUMMARIES.append(
            f"known rule {repro.rule} ({repro.name}): {_said(flag)}, DirectML fails with {repro.failure}, dmlsim too"
        )
        return
    reference = None
    if repro.expected is not None:
        reference = dict(zip(model.output_names, repro.expected, strict=True))
    elif repro.cpu_fails:
        with pytest.raises(Exception, match=repro.cpu_fails):
            backends.create("cpu").run(model, repro.feeds)
    else:
        reference = backends.create("cpu").run(model, repro.feeds).outputs
    for attempt in range(1, repro.attempts + 1):
        outputs = dml.run(model, repro.feeds).outputs
        try:
            repro.differs(
                [outputs[k] for k in model.output_names],
                None if reference is None else [reference[k] for k in model.output_names],
                repro.feeds,
            )
            break
        except AssertionError:
            if attempt == repro.attempts:
                raise
    verdicts = ""
    if repro.expected is None and reference is not None:  # parity's verdict against the CPU: the yardstick keeps it
        verdicts = _judged_exactly(model, repro.feeds, reference, outputs)
    emulated = "dmlsim does not emulate it"
    if repro.rule not in UNEMULATED:
        _dmlsim_computes_as_directml(model, repro, outputs)
        emulated = "dmlsim computes what DirectML computes"
    SUMMARIES.append(
        f"known rule {repro.rule} ({repro.name}): {_said(flag)}, DirectML differs as it says{verdicts}; {emulated}"
    )


def _said(flag: known.Known) -> str:
    return "met by the graph" if flag.certain else f"met by {counted(flag.count, 'element')} of the repro's inputs"


def _judged(model, feeds, reference, outputs) -> dict:
    """Each output outside tolerance of the reference's, judged against the exact yardstick as parity judges it."""
    wide = backends.create("exact").run(model, feeds).outputs
    tolerance, judged = Tolerance(), {}
    for name in model.output_names:
        comparison = compare(reference[name], outputs[name], tolerance)
        if comparison.within_tolerance or not is_float(reference[name]):
            continue
        fault = faulty([reference[name], outputs[name]], wide[name], tolerance)
        found = exactness(reference[name], outputs[name], wide[name], tolerance, fault)
        judged[name] = dataclasses.replace(comparison, exact=found)
    return judged


def _judged_exactly(model, feeds, reference, outputs) -> str:
    """Every output that differs from the CPU's beyond tolerance differs beyond float error too; said in words for
    the summary."""
    said = []
    for name, judged in _judged(model, feeds, reference, outputs).items():
        assert not judged.accepted(), (name, judged.exact)  # still DIFFERENT: a behaviour, not rounding
        found = judged.exact
        said.append(f"{name}: {found.from_exact:.3g} from exact where the CPU is {found.reference_from_exact:.3g}")
    return f"; beyond float error ({'; '.join(said)})" if said else ""


def test_every_rule_is_named_in_the_docs_known_failures():
    docs = Path(__file__).resolve().parents[1] / "docs" / "directml-on-linux.md"
    text = docs.read_text()
    section = text[text.index("## Known DirectML failures") :]
    named = set(re.findall(r"`([a-z0-9]+(?:-[a-z0-9]+)+)`", " ".join(re.findall(r"^\* \[([^\]]+)\]", section, re.M))))
    assert named == set(known.rule_names())


def _measured(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list:
    """``check``'s verdicts with every flag held to one CPU run of ``model`` on ``feeds``, as ``check --inputs``."""
    verdicts = check(model)
    run = Observation(feeds).values(model, reads(verdicts))
    assert not run.failure, run.failure
    return measured(verdicts, run.arrays)


@pytest.mark.parametrize("repro", REPROS, ids=lambda r: f"{r.rule}-{r.name}")
def test_the_repros_inputs_meet_the_rule(repro):
    (verdict,) = [v for v in _measured(repro.model, repro.feeds) if v.node == repro.node]
    (found,) = [k for k in verdict.known if k.rule == repro.rule]
    assert found.status == known.Status.MET, found
    assert found.certain or found.count > 0


def _graph(nodes, inputs, weights=(), opset=17, outputs=("y",)) -> onnx.ModelProto:
    """``nodes`` (the one the test asks about named "node") of float inputs ``inputs`` (name -> dims), making
    ``outputs``."""
    io = [h.make_tensor_value_info(name, T.FLOAT, dims) for name, dims in inputs.items()]
    constants = [numpy_helper.from_array(np.asarray(value), name) for name, value in dict(weights).items()]
    made = [h.make_value_info(name, onnx.TypeProto()) for name in outputs]
    return _model(nodes, io, made, constants, opset)


def _flag(model: onnx.ModelProto, rule: str) -> known.Known:
    (verdict,) = [v for v in check(model) if v.node == "node"]
    (found,) = [k for k in verdict.known if k.rule == rule]
    return found


f32 = np.float32


def _cast_node(to: int) -> onnx.NodeProto:
    return h.make_node("Cast", ["r"], ["y"], name="node", to=to)


INF = np.float32(np.inf)
# rule -> (a model whose graph rules the condition out, one where a run may meet it), each at the node "node"
RULED_OUT = {
    "pow-zero-zero": (
        _graph([h.make_node("Pow", ["x", "two"], ["y"], name="node")], {"x": [3]}, {"two": f32(2.0)}),
        _graph([h.make_node("Pow", ["x", "zero"], ["y"], name="node")], {"x": [3]}, {"zero": f32(0.0)}),
    ),
    "pow-zero-zero/base": (
        _graph(
            [
                h.make_node("Exp", ["x"], ["e"]),
                h.make_node("Add", ["e", "one"], ["b"]),
                h.make_node("Pow", ["b", "p"], ["y"], name="node"),
            ],
            {"x": [3], "p": [3]},
            {"one": f32(1.0)},
        ),
        _graph(
            [h.make_node("Exp", ["x"], ["b"]), h.make_node("Pow", ["b", "p"], ["y"], name="node")],
            {"x": [3], "p": [3]},
        ),
    ),
    "clip-min-above-max": (
        _graph([h.make_node("Clip", ["x", "low", "high"], ["y"], name="node")], {"x": [3], "low": []}, {"high": INF}),
        _graph([h.make_node("Clip", ["x", "low", "high"], ["y"], name="node")], {"x": [3], "low": [], "high": []}),
    ),
    "log-subnormal": (
        _graph(
            [h.make_node("Clip", ["x", "tiny", "inf"], ["c"]), h.make_node("Log", ["c"], ["y"], name="node")],
            {"x": [3]},
            {"tiny": f32(1e-10), "inf": INF},
        ),
        _graph(
            [h.make_node("Clip", ["x", "zero", "inf"], ["c"]), h.make_node("Log", ["c"], ["y"], name="node")],
            {"x": [3]},
            {"zero": f32(0.0), "inf": INF},
        ),
    ),
    "log-subnormal/square": (
        _graph(
            [
                h.make_node("Mul", ["x", "x"], ["s"]),
                h.make_node("Add", ["s", "eps"], ["a"]),
                h.make_node("Log", ["a"], ["y"], name="node"),
            ],
            {"x": [3]},
            {"eps": f32(1e-10)},
        ),
        _graph(
            [
                h.make_node("Mul", ["x", "x"], ["s"]),
                h.make_node("Add", ["s", "eps"], ["a"]),
                h.make_node("Log", ["a"], ["y"], name="node"),
            ],
            {"x": [3]},
            {"eps": f32(1e-45)},  # itself subnormal
        ),
    ),
    "cast-to-int64": (
        _graph(
            [h.make_node("Relu", ["x"], ["r"]), h.make_node("Cast", ["r"], ["y"], name="node", to=T.INT64)], {"x": [3]}
        ),
        _graph(
            [h.make_node("Neg", ["x"], ["r"]), h.make_node("Cast", ["r"], ["y"], name="node", to=T.INT64)], {"x": [3]}
        ),
    ),
    "cast-saturates": (
        _graph(
            [
                h.make_node("Clip", ["x", "low", "high"], ["c"]),
                h.make_node("Cast", ["c"], ["y"], name="node", to=T.UINT8),
            ],
            {"x": [3]},
            {"low": f32(0), "high": f32(255)},
        ),
        _graph(
            [
                h.make_node("Clip", ["x", "low", "high"], ["c"]),
                h.make_node("Cast", ["c"], ["y"], name="node", to=T.UINT8),
            ],
            {"x": [3]},
            {"low": f32(-5), "high": f32(255)},
        ),
    ),
    "cast-saturates/sigmoid": (
        _graph(
            [
                h.make_node("Sigmoid", ["x"], ["s"]),
                h.make_node("Mul", ["s", "scale"], ["r"]),
                _cast_node(T.INT32),
            ],
            {"x": [3]},
            {"scale": f32(1e6)},
        ),
        _graph(
            [h.make_node("Exp", ["x"], ["m"]), h.make_node("Cast", ["m"], ["y"], name="node", to=T.INT32)], {"x": [3]}
        ),
    ),
    "mod-fmod-0-infinity": (
        _graph([h.make_node("Mod", ["x", "three"], ["y"], name="node")], {"x": [3]}, {"three": f32(3)}),
        _graph([h.make_node("Mod", ["x", "d"], ["y"], name="node")], {"x": [3], "d": [3]}),
    ),
    "empty-output": (
        _graph(
            [
                h.make_node("Abs", ["x"], ["a"]),
                h.make_node("Add", ["a", "one"], ["p"]),
                h.make_node("NonZero", ["p"], ["y"], name="node"),
                h.make_node("Neg", ["x"], ["z"]),
            ],
            {"x": [3]},
            {"one": f32(1)},
            outputs=("y", "z"),
        ),
        _graph(
            [h.make_node("NonZero", ["x"], ["y"], name="node"), h.make_node("Neg", ["x"], ["z"])],
            {"x": [3]},
            outputs=("y", "z"),
        ),
    ),
    "reshape-allowzero": (
        _graph(
            [h.make_node("Reshape", ["x", "s"], ["y"], name="node", allowzero=1)], {"x": [6]}, {"s": np.array([2, 3])}
        ),
        _graph(
            [h.make_node("Relu", ["x"], ["r"]), h.make_node("Reshape", ["r", "s"], ["y"], name="node", allowzero=1)],
            {"x": [6], "s": [1]},
        ),
    ),
    "scatter-out-of-bounds": (
        _graph(
            [h.make_node("ScatterElements", ["x", "i", "u"], ["y"], name="node", axis=0)],
            {"x": [3], "u": [2]},
            {"i": np.array([0, -3])},
            opset=16,
        ),
        _graph(
            [h.make_node("ScatterElements", ["x", "i", "u"], ["y"], name="node", axis=0)],
            {"x": [3], "u": [2]},
            {"i": np.array([0, 3])},
            opset=16,
        ),
    ),
    "scatter-duplicates": (
        _graph(
            [h.make_node("ScatterElements", ["x", "i", "u"], ["y"], name="node", axis=0)],
            {"x": [3], "u": [2]},
            {"i": np.array([0, 2])},
            opset=16,
        ),
        _graph(
            [h.make_node("ScatterElements", ["x", "i", "u"], ["y"], name="node", axis=0)],
            {"x": [3], "u": [2]},
            {"i": np.array([2, -1])},  # the same element twice
            opset=16,
        ),
    ),
    "resize-pytorch-half-pixel": (
        _graph(
            [
                h.make_node(
                    "Resize",
                    ["x", "", "", "sizes"],
                    ["y"],
                    name="node",
                    mode="linear",
                    coordinate_transformation_mode="pytorch_half_pixel",
                )
            ],
            {"x": [1, 1, 4, 4]},
            {"sizes": np.array([1, 1, 3, 2])},
        ),
        _graph(
            [
                h.make_node(
                    "Resize",
                    ["x", "", "", "sizes"],
                    ["y"],
                    name="node",
                    mode="linear",
                    coordinate_transformation_mode="pytorch_half_pixel",
                )
            ],
            {"x": [1, 1, 4, 4], "sizes": [4]},
        ),
    ),
}


@pytest.mark.parametrize("case", RULED_OUT, ids=str)
def test_a_rule_the_graph_rules_out_is_not_raised(case):
    rule = case.split("/")[0]
    out, possible = RULED_OUT[case]
    found = _flag(out, rule)
    assert found.status == known.Status.RULED_OUT and found.ruled_out and found.when, found
    assert [(g.status, len(g.nodes)) for g in flagged(check(out)) if g.rule == rule] == [(known.Status.RULED_OUT, 1)]
    other = _flag(possible, rule)
    assert other.status in (known.Status.POSSIBLE, known.Status.MET) and not other.ruled_out, other


# Values at the edges: zeros of both signs, subnormals, values far from 1 (not so far that an interpolation between
# them cancels: a linear Resize of 1e9 and -1e9 rounds otherwise on each, by more than the outputs' scale tells), the
# integer types' largest and smallest
_EDGES = {
    np.dtype(np.float32): [0.0, -0.0, 1.0, -1.0, 0.5, 2.0, 1e-40, -1e-40, 1e4, -3e3, 65504.0, 1e-10, -2.5, 100.0],
    np.dtype(np.float16): [0.0, -0.0, 1.0, -1.0, 0.5, 2.0, 6e-8, -6e-8, 65504.0, -65504.0, 1e-3, -2.5, 100.0],
}


def _edges(value: onnx.ValueInfoProto) -> np.ndarray:
    dtype = h.tensor_dtype_to_np_dtype(value.type.tensor_type.elem_type)
    dims = [d.dim_value if d.HasField("dim_value") else 14 for d in value.type.tensor_type.shape.dim]
    size = math.prod(dims)
    if dtype.kind == "f":
        cycle = _EDGES.get(dtype, _EDGES[np.dtype(np.float32)])
    else:
        info = np.iinfo(dtype)
        cycle = [0, 1, info.max, info.min, 2, 3, info.max - 1] if dtype.kind == "i" else [0, 1, info.max, 2, 3]
    return np.resize(np.asarray(cycle, dtype=dtype), size).reshape(dims)


@pytest.mark.directml
@pytest.mark.parametrize("case", RULED_OUT, ids=str)
def test_what_the_graph_rules_out_does_not_happen_on_real_directml(case, tmp_path):
    """The model whose graph rules the condition out, run on real DirectML with inputs at the edges of their types
    (zeros of both signs, subnormals, the largest values): it agrees with ONNX Runtime's CPU (with ONNX's reference
    evaluator where the CPU provider has no kernel) within tolerance, or within float error of the exact value as
    parity judges it (a linear Resize of 1e9 and -1e9 cancels otherwise on each)."""
    require_directml(wine=True)
    model = backends.Model(tmp_path / "ruled_out.onnx", RULED_OUT[case][0])
    feeds = {value.name: _edges(value) for value in model.proto.graph.input}
    dml = backends.create("dml").run(model, feeds).outputs
    try:
        cpu = backends.create("cpu").run(model, feeds).outputs
    except Exception:  # a node the CPU provider has no kernel for at this opset (Mod of floats, fmod=0): ONNX's own
        expected = ReferenceEvaluator(model.proto).run(None, feeds)
        for name, value in zip(model.output_names, expected, strict=True):
            assert compare(value, dml[name], Tolerance()).within_tolerance, (feeds, value, dml[name])
    else:
        far = {name: judged for name, judged in _judged(model, feeds, cpu, dml).items() if not judged.accepted()}
        assert not far, (feeds, cpu, dml)
    SUMMARIES.append(f"known rule {case}: ruled out by the graph; on real DirectML its inputs' edges agree")


def test_every_rule_that_depends_on_values_has_a_ruled_out_case_or_none_can():
    """The rules whose condition a run decides: those the graph can rule out have a case above."""
    conditional = {k.rule for r in REPROS for v in check(r.model) for k in v.known if k.when}
    unrulable = {"dynamicquantizelinear-rounding", "reduce-empty-set", "quantize-per-axis-21"}
    cases = {case.split("/")[0] for case in RULED_OUT}
    assert conditional - unrulable <= cases <= set(known.rule_names())


def test_check_inputs_says_met_with_a_count_and_not_met_in_its_json(tmp_path, capsys):
    from onnx_gather.app.cli import main

    model = Path(__file__).resolve().parents[1] / "models" / "pow_chain.onnx"
    given = np.load(model.with_suffix(".npz"))["x"]
    np.savez(tmp_path / "ones.npz", x=np.ones_like(given))

    def flags(*words: str) -> tuple[list[dict], dict]:
        capsys.readouterr()
        assert main(["check", str(model), "--json", *words]) == 0
        document = json.loads(capsys.readouterr().out)
        return [k for node in document["nodes"] for k in node["known"]], document["known"]

    (found,), counts = flags("--inputs", str(model.with_suffix(".npz")))
    assert (found["rule"], found["status"], found["count"]) == ("pow-zero-zero", "met", 1)
    assert counts == {"met": 1, "not met": 0, "possible": 0, "ruled out": 0}
    (found,), counts = flags("--inputs", str(tmp_path / "ones.npz"))
    assert (found["status"], found["count"]) == ("not met", 0) and found["when"]
    (found,), _ = flags()
    assert found["status"] == "possible"


def test_ruled_out_flags_are_said_only_with_all_nodes(tmp_path, capsys):
    from onnx_gather.app.cli import main

    model, rule = RULED_OUT["pow-zero-zero"][0], "pow-zero-zero"
    onnx.save(model, tmp_path / "pow_two.onnx")
    for words, shown in (([], False), (["--all-nodes"], True)):
        capsys.readouterr()
        assert main(["check", str(tmp_path / "pow_two.onnx"), *words]) == 0
        text = capsys.readouterr().out
        assert (f"{rule}, ruled out at 1 node" in text) == shown, text
        assert "its exponent is the constant 2" in text if shown else "1 ruled out by the graph" in text
        assert "possible" not in text


@pytest.mark.directml
@pytest.mark.slow
def test_the_flags_a_run_of_the_test_models_meets_happen_on_real_directml():
    """check's flags on the test models and the third-party ones, measured on one CPU run each: every met flag's
    node, run alone on real DirectML with the run's values, fails or differs there; none ruled out by the graph
    happens there (tools/check_precision.py prints the same figures)."""
    require_directml(wine=True)
    from onnx_gather.conformance.precision import Precision, checkout_models, hold, precision_lines

    root = Path(__file__).resolve().parents[1]
    models = checkout_models(root)
    if len(models) < 11:
        pytest.skip("the third-party models are missing: run python tools/fetch_models.py (the README's test command)")
    precision = Precision()
    for path, observation in models:
        hold(path, observation, precision)
    confirmed, met = precision.confirmed()
    assert met >= 1 and confirmed == met, precision_lines(precision)
    assert not precision.ruled_out_happened(), precision_lines(precision)
    SUMMARIES.append("check's flags on the test models, held to real DirectML:\n" + precision_lines(precision))
