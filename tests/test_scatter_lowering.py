"""DmlScatterElements and DmlScatterNd lowered into standard ONNX: core.scatter's values, bit for bit, on ONNX
Runtime's CPU, in every out_of_bounds mode, for every data and index type, with static and run-time sizes."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime
import pytest
from conftest import assert_all_identical, assert_identical, random_tensor, run_model
from onnx import TensorProto, helper
from onnxruntime.capi.onnxruntime_pybind11_state import InvalidArgument

import onnx_gather
from onnx_gather.conformance.scatters import ScatterCase, random_scatter_cases
from onnx_gather.core import contract
from onnx_gather.core.contract import DOMAIN, DOMAIN_VERSION
from onnx_gather.core.scatter import ScatterError, dml_scatter_elements, dml_scatter_nd
from onnx_gather.graphs.convert import convert
from onnx_gather.graphs.lowering.lower import lower
from onnx_gather.graphs.plumbing import bodies

DML_OP = {"ScatterElements": "DmlScatterElements", "ScatterND": "DmlScatterNd"}
INDEX_DTYPES = [np.dtype(t) for t in contract.INDEX_DTYPES]
NODE_DTYPES = [helper.tensor_dtype_to_np_dtype(t) for t in sorted(contract.NODE_DATA_TYPES)]


def _retyped(case: ScatterCase, rng: np.random.Generator) -> ScatterCase:
    """The case with indices of a random index type (negative values wrap in the unsigned ones) and data of a type a
    DML node carries (FLOAT16 as UINT16: a scatter moves bits)."""
    index_dtype = INDEX_DTYPES[rng.integers(len(INDEX_DTYPES))]
    data, updates = case.data, case.updates
    if data.dtype == np.float16:
        data, updates = data.view(np.uint16), updates.view(np.uint16)
    return ScatterCase(case.op, data, case.indices.astype(index_dtype), updates, case.axis)


def _expected(case: ScatterCase, mode: str, duplicates: str = "last") -> np.ndarray:
    (data, indices, updates), attributes = case.dml()
    scatter = dml_scatter_elements if case.op == "ScatterElements" else dml_scatter_nd
    return scatter(data, indices, updates, *attributes.values(), out_of_bounds=mode, duplicates=duplicates)


def _dims(shape: tuple[int, ...], static: bool, name: str, keep_last: bool = False) -> list[int | str]:
    """``shape``, or symbols (but the last dim with ``keep_last``: ScatterND's tuple length)."""
    if static:
        return list(shape)
    return [f"{name}_{d}" for d in range(len(shape) - keep_last)] + list(shape[len(shape) - keep_last :])


def _dml_model(cases: list[ScatterCase], mode: str, static: bool, duplicates: str = "last") -> onnx.ModelProto:
    """A DML node per case (its arrays with leading ones to one N, as ``to_dml`` gives them), inputs graph inputs."""
    nodes, inputs, outputs = [], [], []
    for k, case in enumerate(cases):
        arrays, attributes = case.dml()
        names = [f"data_{k}", f"indices_{k}", f"updates_{k}"]
        nodes.append(
            helper.make_node(
                DML_OP[case.op],
                names,
                [f"output_{k}"],
                domain=DOMAIN,
                out_of_bounds=mode,
                duplicates=duplicates,
                **attributes,
            )
        )
        for name, array in zip(names, arrays, strict=True):
            element = helper.np_dtype_to_tensor_dtype(array.dtype)
            keep_last = name.startswith("indices") and case.op == "ScatterND"
            inputs.append(helper.make_tensor_value_info(name, element, _dims(array.shape, static, name, keep_last)))
        element = helper.np_dtype_to_tensor_dtype(case.data.dtype)
        outputs.append(helper.make_tensor_value_info(f"output_{k}", element, _dims(arrays[0].shape, static, "out")))
    graph = helper.make_graph(nodes, "scatters", inputs, outputs)
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid(DOMAIN, DOMAIN_VERSION)]
    return helper.make_model(graph, opset_imports=opsets, ir_version=8)


def _feeds(cases: list[ScatterCase]) -> dict[str, np.ndarray]:
    feeds = {}
    for k, case in enumerate(cases):
        arrays = case.dml()[0]
        feeds |= dict(zip((f"data_{k}", f"indices_{k}", f"updates_{k}"), arrays, strict=True))
    return feeds


def _lowered(model: onnx.ModelProto) -> onnx.ModelProto:
    lowered = onnx_gather.to_onnx(model)
    onnx.checker.check_model(lowered, full_check=True)
    assert not any(n.domain == DOMAIN for body in bodies(lowered) for n in body.nodes)
    return lowered


@pytest.mark.parametrize("static", [True, False], ids=["static", "run-time sizes"])
@pytest.mark.parametrize("mode", ["directml", "clamp"])
@pytest.mark.parametrize("seed", range(2))
def test_random_lowered_scatters_give_core_scatters_values(seed, mode, static):
    """In range, negative, just and far past, at the int32 limit and beyond 2^32 (wrapping in unsigned types), with
    duplicates of different values: 100 scatters per model, each output core.scatter's bit for bit."""
    rng = np.random.default_rng(seed)
    cases = []
    for case in random_scatter_cases(200 + seed, 100):
        case = _retyped(case, rng)
        noise = rng.integers(0, 256, case.updates.nbytes, dtype=np.uint8).view(case.updates.dtype)
        cases.append(ScatterCase(case.op, case.data, case.indices, noise.reshape(case.updates.shape), case.axis))
    assert {c.indices.dtype for c in cases} == set(INDEX_DTYPES) and {c.op for c in cases} == set(DML_OP)
    outputs = run_model(_lowered(_dml_model(cases, mode, static)), _feeds(cases))
    for case, output in zip(cases, outputs, strict=True):
        assert_identical(output, _expected(case, mode))


def test_random_lowered_scatters_fail_out_of_bounds_under_error():
    rng = np.random.default_rng(7)
    cases = [_retyped(case, rng) for case in random_scatter_cases(300, 40)]
    failed = 0
    for case in cases:
        for static in (True, False):
            model = _lowered(_dml_model([case], "error", static))
            try:
                expected = _expected(case, "error")
            except ScatterError:
                with pytest.raises(InvalidArgument, match="indices element out of data bounds"):
                    run_model(model, _feeds([case]))
                failed += 1
                continue
            assert_identical(run_model(model, _feeds([case]))[0], expected)
    assert 10 < failed < 2 * len(cases)


def _written(case: ScatterCase) -> list[int]:
    """Where the lowered scatter writes 101 into FLOAT32 [3, 6] = 0..17, flat."""
    output = run_model(_lowered(_dml_model([case], "directml", True)), _feeds([case]))[0]
    assert_identical(output, _expected(case, "directml"))
    return np.flatnonzero(output.reshape(-1) == 101).tolist()


DATA = np.arange(18, dtype=np.float32).reshape(3, 6)
# docs/semantics.md section 10: row 1's index (axis 1; rows 0 and 2 write index 0) and where it writes 101.
ROW_WRITES = [
    (7, np.int32, [13]),
    (12, np.int32, []),
    (2**31 - 1, np.int32, []),
    (-1, np.int32, [11]),
    (-6, np.int32, [6]),
    (-7, np.int32, [5]),
    (-13, np.int64, []),
    (2**32 + 1, np.int64, [7]),
    (2**32 - 1, np.int64, [5]),
    (-(2**32) + 1, np.int64, [13]),
    (2**32 - 1, np.uint32, [5]),
    (2**64 - 1, np.uint64, [11]),
]


@pytest.mark.parametrize(("index", "index_dtype", "written"), ROW_WRITES)
def test_the_documented_scatter_elements_offsets(index, index_dtype, written):
    indices = np.array([[0], [index], [0]], index_dtype)
    updates = np.array([[100], [101], [102]], np.float32)
    assert _written(ScatterCase("ScatterElements", DATA, indices, updates, 1)) == written


@pytest.mark.parametrize(
    ("tuple_", "written"), [((0, 6), [6]), ((1, -7), [5]), ((0, 2**32 + 1), [1]), ((-1, 6), []), ((3, 0), [])]
)
def test_the_documented_scatter_nd_offsets(tuple_, written):
    case = ScatterCase("ScatterND", DATA, np.array([tuple_], np.int64), np.array([101], np.float32))
    assert _written(case) == written


# Every type the provider runs a standard scatter in: DirectML's eleven, and BOOL, which DML nodes carry as UINT8
# (FLOAT16 as FLOAT32). Not BFLOAT16: the provider's scatters take none, to_dml leaves them standard.
ROUND_TRIP_TYPES = sorted({t.onnx for t in contract.DATA_TYPES} | {TensorProto.BOOL})


def _standard_model(element: int, index_type: int) -> onnx.ModelProto:
    """ScatterElements (axis 1) and ScatterND (pairs) of [3, 4, 5] data."""
    nodes = [
        helper.make_node("ScatterElements", ["data", "indices", "updates"], ["elements"], axis=1),
        helper.make_node("ScatterND", ["data", "tuples", "slices"], ["nd"]),
    ]
    inputs = [
        helper.make_tensor_value_info("data", element, [3, 4, 5]),
        helper.make_tensor_value_info("indices", index_type, [3, 2, 5]),
        helper.make_tensor_value_info("updates", element, [3, 2, 5]),
        helper.make_tensor_value_info("tuples", TensorProto.INT64, [4, 2]),
        helper.make_tensor_value_info("slices", element, [4, 5]),
    ]
    outputs = [helper.make_tensor_value_info(name, element, [3, 4, 5]) for name in ("elements", "nd")]
    graph = helper.make_graph(nodes, "scatters", inputs, outputs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 16)], ir_version=8)


def _round_trip_feeds(rng: np.random.Generator, element: int, index_dtype: type, in_range: bool) -> dict:
    """Random bits (0 and 1 for BOOL); indices in range, or in and out of it, negative ones too, duplicates."""
    dtype = np.dtype(helper.tensor_dtype_to_np_dtype(element))

    def values(shape: tuple[int, ...]) -> np.ndarray:
        return rng.integers(0, 2, shape).astype(bool) if dtype.kind == "b" else random_tensor(rng, shape, dtype)

    reach = 4 if in_range else 9
    indices = rng.integers(-reach if np.dtype(index_dtype).kind == "i" else 0, reach, (3, 2, 5))
    tuples = np.stack([rng.integers(-3 if in_range else -5, 3 if in_range else 5, 4), rng.integers(0, 4, 4)], axis=1)
    feeds = {"data": values((3, 4, 5)), "indices": indices.astype(index_dtype), "updates": values((3, 2, 5))}
    return feeds | {"tuples": tuples.astype(np.int64), "slices": values((4, 5))}


def _core_outputs(feeds: dict) -> list[np.ndarray]:
    """core.scatter's outputs on the feeds' bits (a scatter moves them whatever their type)."""
    bits = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[feeds["data"].itemsize]
    data, updates, slices = (feeds[name].view(bits) for name in ("data", "updates", "slices"))
    elements = dml_scatter_elements(data, feeds["indices"], updates, 1)
    nd = dml_scatter_nd(data, feeds["tuples"][None], slices[None], 3, 2)
    return [elements.view(feeds["data"].dtype), nd.view(feeds["data"].dtype)]


@pytest.mark.parametrize("index_type", [TensorProto.INT32, TensorProto.INT64], ids=["INT32", "INT64"])
@pytest.mark.parametrize("element", ROUND_TRIP_TYPES, ids=TensorProto.DataType.Name)
def test_every_type_converts_and_lowers_compactly_with_the_originals_values(element, index_type):
    """In range: the lowered model's outputs are the original's, bit for bit; out of bounds, core.scatter's. The
    Casts carrying FLOAT16, BFLOAT16 and BOOL, and the leading ones of ScatterND's data, go with the DML nodes."""
    model = _standard_model(element, index_type)
    converted, report = convert(model, scatter_duplicates="last")  # random indices write one element twice at times
    assert len(report.changed) == 2 and not report.left
    lowered, lowering = lower(converted)
    assert len(lowering.changed) == 2 and not lowering.left
    ops = [n.op_type for n in lowered.graph.node]
    assert ops.count("ScatterElements") == 2 and "ScatterND" not in ops
    wrote = {n.name for n in converted.graph.node} - {n.name for n in model.graph.node}
    assert wrote and not wrote & {n.name for n in lowered.graph.node}
    rng = np.random.default_rng(element * 10 + index_type)
    index_dtype = helper.tensor_dtype_to_np_dtype(index_type)
    for _ in range(3):
        feeds = _round_trip_feeds(rng, element, index_dtype, in_range=True)
        assert_all_identical(run_model(lowered, feeds), run_model(model, feeds))
        feeds = _round_trip_feeds(rng, element, index_dtype, in_range=False)
        assert_all_identical(run_model(lowered, feeds), _core_outputs(feeds))


def test_onnxruntime_scatter_elements_keeps_the_last_of_duplicates():
    """Why the lowering writes with ScatterElements: 2^20 updates of four elements, values 0 to 2^20 - 1, on four
    threads, kept the last in order in every run. ONNX Runtime 1.32's ScatterND splits its updates between threads:
    in a run by hand it kept 393,212 to 393,215, not 1,048,572 to 1,048,575."""
    n = 1 << 20
    node = helper.make_node("ScatterElements", ["x", "i", "u"], ["y"])
    inputs = [
        helper.make_tensor_value_info("x", TensorProto.FLOAT, [4]),
        helper.make_tensor_value_info("i", TensorProto.INT64, [n]),
        helper.make_tensor_value_info("u", TensorProto.FLOAT, [n]),
    ]
    graph = helper.make_graph([node], "last", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 16)], ir_version=8)
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 4
    session = onnxruntime.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    feeds = {"x": np.zeros(4, np.float32), "i": np.arange(n) % 4, "u": np.arange(n, dtype=np.float32)}
    for _ in range(3):
        assert session.run(None, feeds)[0].tolist() == [n - 4, n - 3, n - 2, n - 1]


@pytest.mark.parametrize("seed", range(3))
def test_duplicates_of_different_values_fail_lowered_where_core_refuses_them(seed):
    """duplicates=error: the lowered graph fails exactly where core.scatter refuses (different values written to one
    element: which DirectML keeps is a race), and gives core's values elsewhere."""
    rng = np.random.default_rng(seed)
    refused = 0
    for case in random_scatter_cases(300 + seed, 40):
        if case.data.dtype == np.float16:
            continue  # the lowering compares values: NaN payloads aside, as the custom ops carry FLOAT16
        noise = rng.integers(0, 4, case.updates.size).astype(case.updates.dtype).reshape(case.updates.shape)
        case = ScatterCase(case.op, case.data, case.indices, noise, case.axis)
        session = onnxruntime.InferenceSession(
            _lowered(_dml_model([case], "directml", True, "error")).SerializeToString(),
            providers=["CPUExecutionProvider"],
        )
        try:
            expected = _expected(case, "directml", "error")
        except ScatterError:
            refused += 1
            with pytest.raises(InvalidArgument, match="out of data bounds"):
                session.run(None, _feeds([case]))
            continue
        assert_identical(session.run(None, _feeds([case]))[0], expected)
    assert refused > 5
