"""Every tensor type ONNX Runtime 1.24.4 takes, between Python and real DirectML's runner: the tensor files both ways,
STRING gathers on the dml backend against ONNX Runtime's CPU kernels, and one model per type through real DirectML.

The tests that run real DirectML are skipped where ``onnx-gather setup-directml`` has not prepared it, and fail in CI
(CI=true) instead, through the ``directml`` fixture and ``require_directml``.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import ml_dtypes
import numpy as np
import onnx
import onnxruntime
import pytest
from conftest import require_directml
from onnx import TensorProto as T
from onnx import helper as h

from onnx_gather.app.cli import main
from onnx_gather.core import contract
from onnx_gather.directml import tensors
from onnx_gather.directml.process import DirectMlError
from onnx_gather.runtime import backends

# Non-ASCII, empty, NUL inside and at either end: what a numpy str array cannot hold whole (trailing NULs) included.
WORDS = np.array([["Grüße", "", "a\0b"], ["\0lead", "日本語😀", "tail\0"]], dtype=object)
PACKED_VALUES = {  # every value of each packed type (ml_dtypes holds one per byte)
    T.INT4: np.arange(-8, 8).astype(ml_dtypes.int4),
    T.UINT4: np.arange(16).astype(ml_dtypes.uint4),
    T.FLOAT4E2M1: np.arange(16, dtype=np.uint8).view(ml_dtypes.float4_e2m1fn),
    T.INT2: np.arange(-2, 2).astype(ml_dtypes.int2),
    T.UINT2: np.arange(4).astype(ml_dtypes.uint2),
}


def _name(element: int) -> str:
    return T.DataType.Name(element)


def _values(element: int, shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    """Values of ``element`` for a round trip: random bit patterns (NaN payloads, -0, subnormals) where every pattern is
    a value, booleans and the packed types' values drawn from what they hold, INT64 and UINT64 within 2^53 (so that a
    Cast to DOUBLE is exact)."""
    rng = np.random.default_rng(seed + element)
    count = int(np.prod(shape))
    if element in PACKED_VALUES:
        return rng.choice(PACKED_VALUES[element], count).reshape(shape)
    dtype = np.dtype(h.tensor_dtype_to_np_dtype(element))
    if element == T.BOOL:
        return rng.integers(0, 2, shape).astype(bool)
    if element in (T.INT64, T.UINT64):
        return rng.integers(0 if element == T.UINT64 else -(2**53), 2**53, shape).astype(dtype)
    return rng.integers(0, 256, count * dtype.itemsize, dtype=np.uint8).view(dtype).reshape(shape)


def _assert_same_values(actual: np.ndarray, expected: np.ndarray) -> None:
    """Same type and shape; NaN where the expected value is NaN (a Cast may change its payload), every other value
    bit for bit."""
    assert (actual.dtype, actual.shape) == (expected.dtype, expected.shape)
    nans = np.isnan(expected.astype(np.float64))
    assert np.array_equal(np.isnan(actual.astype(np.float64)), nans)
    assert actual[~nans].tobytes() == expected[~nans].tobytes(), f"{actual} != {expected}"


# --- tensor files, without DirectML ---------------------------------------------------------------------------------


@pytest.mark.parametrize("element", sorted(tensors.CARRIED), ids=_name)
def test_every_carried_type_goes_through_a_tensor_file_exactly(tmp_path, element):
    if element == T.STRING:
        samples = [WORDS, np.array("Grüße\0", dtype=object), np.empty((0, 4), dtype=object)]
    else:
        samples = [_values(element, shape) for shape in ((2, 3, 5), (), (0, 4))]
    for value in samples:
        tensors.write(tmp_path / "t.tensor", "x", value)
        back = tensors.read(tmp_path / "t.tensor", "y")
        assert (back.dtype, back.shape) == (value.dtype, value.shape)
        if element == T.STRING:
            assert back.tolist() == value.tolist() and all(type(s) is str for s in back.flat)
        else:
            assert back.tobytes() == value.tobytes()


def test_string_inputs_may_be_numpy_str_or_bytes_arrays_or_objects_of_either(tmp_path):
    path = tmp_path / "t.tensor"
    for value in (
        np.array(["Grüße", "a\0b"]),
        np.array([b"Gr\xc3\xbc\xc3\x9fe", b"a\0b"]),
        np.array(["Grüße", b"a\0b"], dtype=object),
    ):
        tensors.write(path, "x", value)
        assert tensors.read(path, "y").tolist() == ["Grüße", "a\0b"]


def test_runner_c_carries_the_types_and_dimensions_tensors_carries():
    source = (Path(tensors.__file__).parent / "runner.c").read_text()
    bits = [int(b) for b in re.search(r"bits\[\] = \{([^}]*)\}", source)[1].split(",")]
    assert {element for element, width in enumerate(bits) if width} | {T.STRING} == tensors.CARRIED
    packed = {T.INT4: 4, T.UINT4: 4, T.FLOAT4E2M1: 4, T.INT2: 2, T.UINT2: 2}
    for element in tensors.CARRIED - {T.STRING}:
        expected = packed.get(element) or 8 * np.dtype(h.tensor_dtype_to_np_dtype(element)).itemsize
        assert bits[element] == expected, _name(element)
    assert f"#define MAX_DIMS {tensors.MAX_DIMS}\n" in source


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (
            np.zeros(2, np.complex64),
            "input 'x' is COMPLEX64, which ONNX Runtime 1.24.4 does not take: the DirectML runner cannot carry it",
        ),
        (np.zeros(2, ml_dtypes.float8_e8m0fnu), "input 'x' is FLOAT8E8M0, which ONNX Runtime 1.24.4 does not take"),
        (np.zeros(2, "datetime64[s]"), "input 'x' is a numpy datetime64[s] array, which is no ONNX tensor type"),
        (np.array(["a", 3], dtype=object), "input 'x' holds a int at [1], where a STRING tensor holds str or bytes"),
        (np.array(["a", "\ud800"], dtype=object), "input 'x': the string at [1] cannot be UTF-8 (surrogates not "),
        (np.zeros([1] * 17, np.float32), "input 'x' has 17 dimensions; the DirectML runner carries at most 16"),
    ],
    ids=["complex64", "float8e8m0", "datetime", "object", "surrogate", "dims"],
)
def test_what_cannot_be_carried_is_refused_in_one_line_naming_the_input(tmp_path, value, message):
    with pytest.raises(tensors.CarryError, match=re.escape(message)):
        tensors.write(tmp_path / "t.tensor", "x", value)


def test_a_string_output_that_is_not_utf8_is_named_with_its_position(tmp_path):
    tensors.write(tmp_path / "t.tensor", "x", np.array([[b"ok", b"\xff"]], dtype=object))
    with pytest.raises(ValueError, match=r"^output 'y': the string at \[0, 1\] is not UTF-8$"):
        tensors.read(tmp_path / "t.tensor", "y")


# --- STRING gathers on real DirectML against ONNX Runtime's CPU kernels ---------------------------------------------


def _identity(element: int, count: int) -> onnx.ModelProto:
    graph = h.make_graph(
        [h.make_node("Identity", ["w"], ["v"])],
        "identity",
        [h.make_tensor_value_info("w", element, [count])],
        [h.make_tensor_value_info("v", element, [count])],
    )
    return h.make_model(graph, opset_imports=[h.make_opsetid("", 17)], ir_version=8)


def _string_gathers() -> onnx.ModelProto:
    graph = h.make_graph(
        [
            h.make_node("Gather", ["words", "i"], ["picked"], name="pick", axis=1),
            h.make_node("GatherElements", ["words", "e"], ["elements"], name="elements", axis=0),
            h.make_node("GatherND", ["words", "nd"], ["tuples"], name="tuples"),
        ],
        "strings",
        [
            h.make_tensor_value_info("words", T.STRING, [2, 3]),
            h.make_tensor_value_info("i", T.INT64, [2]),
            h.make_tensor_value_info("e", T.INT64, [2, 3]),
            h.make_tensor_value_info("nd", T.INT64, [4, 2]),
        ],
        [
            h.make_tensor_value_info("picked", T.STRING, [2, 2]),
            h.make_tensor_value_info("elements", T.STRING, [2, 3]),
            h.make_tensor_value_info("tuples", T.STRING, [4]),
        ],
    )
    return h.make_model(graph, opset_imports=[h.make_opsetid("", 17)], ir_version=8)


INDICES = {
    "i": np.array([2, -3]),
    "e": np.array([[1, 0, 1], [0, 1, 0]]),
    "nd": np.array([[0, 2], [1, 2], [1, 0], [0, 1]]),
}


@pytest.mark.directml
def test_string_gathers_on_directml_equal_onnx_runtime_cpu_exactly(directml):
    model = _string_gathers()
    feeds = {"words": WORDS, **INDICES}
    loaded = directml.load(model, fallback=True)
    try:
        real = directml.run(loaded, feeds)
        # STRING gathers have no DirectML kernel: ONNX Runtime's provider leaves all three to its CPU provider.
        assert loaded.placed == {"CPUExecutionProvider": 3}, loaded.placed
    finally:
        directml.free(loaded)
    session = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for name, expected in zip(loaded.outputs, session.run(None, feeds), strict=True):
        assert (real[name].dtype, real[name].shape) == (expected.dtype, expected.shape) == (object, expected.shape)
        assert real[name].tolist() == expected.tolist() and all(type(s) is str for s in real[name].flat), name
    assert real["tuples"].tolist() == ["a\0b", "tail\0", "\0lead", ""]


@pytest.mark.directml
def test_parity_of_cpu_and_dml_compares_strings_whole(tmp_path, capsys):
    # From an .npz file strings come as numpy str arrays (trailing NULs are numpy's to drop, inner ones stay): every
    # backend gets them whole, ONNX Runtime's Python binding included (it would cut "a\0b" to "a").
    require_directml()
    path = tmp_path / "strings.onnx"
    onnx.save(_string_gathers(), path)
    inputs = tmp_path / "in.npz"
    np.savez(inputs, words=np.array([["Grüße", "", "a\0b"], ["日本語", "😀", "\0x"]]), **INDICES)
    report = tmp_path / "r.json"
    arguments = [
        "parity",
        str(path),
        "--backends",
        "pyop,cpu,lowered,dml,evaluator",
        "--reference",
        "cpu",
        "--inputs",
        str(inputs),
        "--report",
        str(report),
    ]
    assert main(arguments) == 0, capsys.readouterr().out
    outputs = json.loads(report.read_text())["outputs"]
    assert all(c["equal"] and c["mismatches"] == 0 for by in outputs.values() for c in by.values())
    assert set(outputs["tuples"]) == {"pyop", "lowered", "dml", "evaluator"}
    assert "dml: nodes placed by ONNX Runtime: 3 on CPUExecutionProvider." in capsys.readouterr().out


def test_the_cpu_backend_gets_strings_with_nul_whole(tmp_path):
    model = _identity(T.STRING, 3)
    onnx.save(model, tmp_path / "words.onnx")
    cpu, loaded = backends.create("cpu"), backends.Model(tmp_path / "words.onnx", model)
    for words in (np.array(["a\0b", "Grüße", ""]), np.array([b"a\0b", "Grüße".encode(), b""])):
        assert cpu.run(loaded, {"w": words}).outputs["v"].tolist() == ["a\0b", "Grüße", ""]
    with pytest.raises(ValueError, match=r"input 'w': the bytes at \[0\] are not UTF-8"):
        cpu.run(loaded, {"w": np.array([b"\xff", b"", b""])})


def test_the_onnx_runtime_backends_name_an_input_of_a_type_their_binding_does_not_take(tmp_path):
    model = _identity(T.BFLOAT16, 3)
    onnx.save(model, tmp_path / "halves.onnx")
    loaded = backends.Model(tmp_path / "halves.onnx", model)
    for name in ("cpu", "pyop", "lowered"):
        with pytest.raises(ValueError, match=r"^input 'w' is BFLOAT16, which ONNX Runtime's Python binding does not"):
            backends.create(name).run(loaded, {"w": np.zeros(3, ml_dtypes.bfloat16)})


# --- one model per type through real DirectML -----------------------------------------------------------------------

# Each type but STRING passes through (input to output) and through an operator: the types DirectML has (its eleven
# and BOOL, carried as UINT8) through a Transpose on DirectML, which moves values without arithmetic; the others
# through ONNX Runtime's CPU kernels, widened to FLOAT by a Cast and cast back (exact: every value of theirs is a
# FLOAT; FLOAT8 without saturation, which would make an infinity the largest finite value). FLOAT4E2M1 only passes
# through: ONNX Runtime 1.24.4 takes it as an input and an output but has no operator on it. INT2 and UINT2 need
# opset 25. (DirectML's own Casts are not used: here a Cast from FLOAT or DOUBLE to INT64 makes values below -2^31
# -2^31, and one from DOUBLE to UINT64 fails at session creation, in DmlGraphFusionHelper.cpp.)
ROUND_TRIP_TYPES = sorted(tensors.CARRIED - {T.STRING})
ON_DIRECTML = {h.np_dtype_to_tensor_dtype(dtype) for dtype in contract.DIRECTML_DTYPES.values()} | {T.BOOL}
SHAPE = (2, 3, 5)


def _round_trip_model(element: int) -> onnx.ModelProto:
    if element in ON_DIRECTML:
        nodes = [h.make_node("Transpose", ["x"], ["moved"], perm=[2, 0, 1])]
        outputs = [h.make_tensor_value_info("moved", element, [5, 2, 3])]
    elif element == T.FLOAT4E2M1:
        nodes, outputs = [], []
    else:
        exact = {"saturate": 0} if "FLOAT8" in _name(element) else {}
        nodes = [
            h.make_node("Cast", ["x"], ["wide"], to=T.FLOAT),
            h.make_node("Cast", ["wide"], ["back"], to=element, **exact),
        ]
        outputs = [h.make_tensor_value_info("wide", T.FLOAT, SHAPE), h.make_tensor_value_info("back", element, SHAPE)]
    opset = 25 if element in (T.INT2, T.UINT2, T.FLOAT4E2M1) else 21
    graph = h.make_graph(
        nodes,
        "round_trip",
        [h.make_tensor_value_info("x", element, SHAPE)],
        [h.make_tensor_value_info("x", element, SHAPE), *outputs],
    )
    return h.make_model(graph, opset_imports=[h.make_opsetid("", opset)], ir_version=11 if opset == 25 else 10)


@pytest.mark.directml
@pytest.mark.parametrize("element", ROUND_TRIP_TYPES, ids=_name)
def test_every_type_goes_in_and_out_of_directml_exactly(directml, element):
    x = _values(element, SHAPE)
    loaded = directml.load(_round_trip_model(element), fallback=True)
    try:
        outputs = directml.run(loaded, {"x": x})
    finally:
        directml.free(loaded)
    on = {"DmlExecutionProvider": 1} if element in ON_DIRECTML else {"CPUExecutionProvider": 2}
    assert loaded.placed == ({} if element == T.FLOAT4E2M1 else on), loaded.placed
    assert outputs["x"].dtype == x.dtype and outputs["x"].tobytes() == x.tobytes()  # passed through, bit for bit
    if element in ON_DIRECTML:
        moved = outputs["moved"]
        assert moved.dtype == x.dtype and moved.tobytes() == np.ascontiguousarray(x.transpose(2, 0, 1)).tobytes()
    elif element != T.FLOAT4E2M1:  # ONNX Runtime read the values, and wrote its own
        _assert_same_values(outputs["wide"], x.astype(np.float32))
        _assert_same_values(outputs["back"], x)


@pytest.mark.directml
def test_a_value_that_cannot_be_carried_is_refused_and_the_runner_goes_on(directml):
    loaded = directml.load(_round_trip_model(T.FLOAT), fallback=True)
    try:
        with pytest.raises(tensors.CarryError, match=r"input 'x' is COMPLEX64, which ONNX Runtime 1\.24\.4 does not"):
            directml.run(loaded, {"x": np.zeros((2, 3, 5), np.complex64)})
        with pytest.raises(DirectMlError, match=r"Unexpected input data type. Actual: \(tensor\(double\)\)"):
            directml.run(loaded, {"x": np.zeros((2, 3, 5), np.float64)})  # a carried type the model does not take
        x = _values(T.FLOAT, (2, 3, 5))
        assert directml.run(loaded, {"x": x})["x"].tobytes() == x.tobytes()
    finally:
        directml.free(loaded)


@pytest.mark.directml
def test_a_string_output_that_is_not_utf8_is_an_error_naming_it_and_the_runner_goes_on(directml):
    loaded = directml.load(_identity(T.STRING, 2), fallback=True)
    try:
        with pytest.raises(ValueError, match=r"output 'v': the string at \[1\] is not UTF-8"):
            directml.run(loaded, {"w": np.array([b"ok", b"\xff\0"], dtype=object)})  # bytes travel as they are
        assert directml.run(loaded, {"w": np.array(["ok", "a\0b"])})["v"].tolist() == ["ok", "a\0b"]
    finally:
        directml.free(loaded)


@pytest.mark.directml
def test_in_ci_a_machine_without_directml_fails_these_tests_instead_of_skipping_them(no_directml, monkeypatch):
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match=r"in CI, real DirectML is not set up \(onnxruntime-directml"):
        require_directml(wine=True)
    monkeypatch.setenv("CI", "")
    with pytest.raises(pytest.skip.Exception):
        require_directml(wine=True)
