"""Property tests over random standard graphs: converted, and converted then lowered, the outputs equal native.

And for DML graphs with out-of-bounds indices: the lowered graph equals the custom op in every mode.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from conftest import assert_all_identical, random_tensor, run_model
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from onnx import TensorProto as T
from onnx import helper as h

import onnx_gather
import onnx_gather.core.contract
from onnx_gather.core.contract import DOMAIN
from onnx_gather.core.semantics import GatherError, gather_output_sizes, plain_gather
from onnx_gather.graphs.convert import convert
from onnx_gather.graphs.emit import single_node_model
from onnx_gather.graphs.lowering.lower import lower

pytestmark = pytest.mark.slow  # 60 to 150 random graphs a property, each converted, lowered and run

# No deadline and no too-slow health check: how fast examples come depends on the machine, not on the code.
SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# Every type ONNX Runtime's native Gather and GatherElements run, FLOAT16 and BOOL included.
ELEMENT_TYPES = [
    T.FLOAT,
    T.FLOAT16,
    T.DOUBLE,
    T.INT8,
    T.INT16,
    T.INT32,
    T.INT64,
    T.UINT8,
    T.UINT16,
    T.UINT32,
    T.UINT64,
    T.BOOL,
]


def _data(rng, shape, elem):
    if elem == T.BOOL:
        return rng.integers(0, 2, shape).astype(bool)
    return random_tensor(rng, shape, h.tensor_dtype_to_np_dtype(elem))


def _dims(draw, sizes, name):
    """Each dim static or, now and then, a symbol (a dynamic dim)."""
    return [f"{name}{d}" if draw(st.booleans()) and draw(st.booleans()) else size for d, size in enumerate(sizes)]


@st.composite
def standard_graphs(draw):
    op = draw(st.sampled_from(["Gather", "GatherElements"]))
    elem = draw(st.sampled_from(ELEMENT_TYPES))
    index_elem = draw(st.sampled_from([T.INT32, T.INT64]))
    opset = draw(st.sampled_from([11, 13, 17]))
    r = draw(st.integers(1, 5))
    data_shape = [draw(st.integers(1, 3)) for _ in range(r)]
    axis = draw(st.integers(-r, r - 1))
    if op == "Gather":
        index_shape = [draw(st.integers(0, 3)) for _ in range(draw(st.integers(0, 9 - r)))]
        out_shape = data_shape[: axis % r] + index_shape + data_shape[axis % r + 1 :]
    else:  # ONNX lets the indices be smaller than the data off the axis
        index_shape = [
            draw(st.integers(1, size)) if d != axis % r else draw(st.integers(0, 3))
            for d, size in enumerate(data_shape)
        ]
        out_shape = index_shape
    node = h.make_node(op, ["x", "i"], ["y"], name="the_gather", axis=axis)
    graph = h.make_graph(
        [node],
        "random",
        [
            h.make_tensor_value_info("x", elem, _dims(draw, data_shape, "d")),
            h.make_tensor_value_info("i", index_elem, _dims(draw, index_shape, "q")),
        ],
        [h.make_tensor_value_info("y", elem, [None] * len(out_shape))],
    )
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", opset)], ir_version=8)
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    size = data_shape[axis % r]
    indices = rng.integers(-size, size, index_shape).astype(h.tensor_dtype_to_np_dtype(index_elem))
    return model, {"x": _data(rng, tuple(data_shape), elem), "i": indices}


@SETTINGS
@given(standard_graphs(), st.sampled_from(["auto", 4]), st.sampled_from(["clamp", "zero", "error"]))
def test_converted_and_lowered_graphs_give_the_native_outputs(graph, dimension_count, mode):
    model, feeds = graph
    carried = feeds["x"].dtype == np.float16  # through FLOAT32: NaN payloads become canonical
    expected = run_model(model, feeds)
    converted, report = convert(model, dimension_count, mode, provider_failures="onnx")  # ONNX's values, always
    onnx.checker.check_model(converted)
    assert len(report.changed) + len(report.left) == 1
    if report.left:  # only a fixed dimension count can be too small for a node
        assert dimension_count == 4 and "more than the dimension count 4" in report.left[0].reason
    assert_all_identical(run_model(converted, feeds, custom_ops=True), expected, canonical_nans=carried)
    again = onnx_gather.to_dml(converted, dimension_count, mode, provider_failures="onnx")
    assert again.SerializeToString() == converted.SerializeToString()
    lowered = onnx_gather.to_onnx(converted)
    onnx.checker.check_model(lowered)
    assert_all_identical(run_model(lowered, feeds), expected, canonical_nans=carried and mode != "error")
    if mode == "error":
        assert [n.op_type for n in lowered.graph.node] == [n.op_type for n in model.graph.node]


@st.composite
def dml_graphs_with_bad_indices(draw):
    """A DML node fed indices from a wide range: negative, out of bounds, huge unsigned ones."""
    op = draw(st.sampled_from(["DmlGather", "DmlGatherElements"]))
    dtype = np.dtype(draw(st.sampled_from(onnx_gather.runtime.ops.NODE_DTYPES)))
    index_dtype = np.dtype(draw(st.sampled_from(onnx_gather.core.contract.INDEX_DTYPES)))
    n = draw(st.integers(1, 4))
    axis = draw(st.integers(0, n - 1))
    shape = [draw(st.integers(1, 3)) for _ in range(n)]
    if op == "DmlGather":
        index_dimensions = draw(st.integers(0, n))
        index_shape = [1] * (n - index_dimensions) + [draw(st.integers(1, 3)) for _ in range(index_dimensions)]
        attributes = {"axis": axis, "index_dimensions": index_dimensions}
        try:  # only nodes DirectML takes, as ONNX Runtime's provider makes them (lowering refuses the others)
            gather_output_sizes(shape, index_shape, axis, index_dimensions)
        except GatherError:
            assume(False)
        assume(plain_gather(shape, index_shape, axis, index_dimensions))
    else:
        index_shape = [draw(st.integers(1, 3)) if d == axis else size for d, size in enumerate(shape)]
        attributes = {"axis": axis}
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    size = shape[axis]
    if index_dtype.kind == "u":
        candidates = [0, size - 1, size, size + 3, np.iinfo(index_dtype).max]
    else:
        candidates = [0, -1, -size, -size - 1, size - 1, size, np.iinfo(index_dtype).min]
    indices = rng.choice(np.array(candidates, dtype=index_dtype), index_shape)
    feeds = {"input": random_tensor(rng, tuple(shape), dtype), "indices": indices}
    return op, dtype, index_dtype, attributes, feeds


def _typed(model, feeds):
    """Declare the feeds' ranks, which lowering needs."""
    for value in model.graph.input:
        value.type.tensor_type.shape.CopyFrom(h.make_tensor_type_proto(1, feeds[value.name].shape).tensor_type.shape)
    return model


@SETTINGS
@given(dml_graphs_with_bad_indices(), st.sampled_from(["directml", "clamp", "zero", "error"]))
def test_lowered_dml_nodes_equal_the_custom_op_on_out_of_bounds_indices(graph, mode):
    op, dtype, index_dtype, attributes, feeds = graph
    model = _typed(single_node_model(op, dtype, index_dtype, out_of_bounds=mode, **attributes), feeds)
    lowered = onnx_gather.to_onnx(model)
    assert not any(n.domain == DOMAIN for n in lowered.graph.node)
    try:
        expected = run_model(model, feeds, custom_ops=True)
    except GatherError:
        assert mode == "error"
        with pytest.raises(Exception, match=r"(?i)out of|invalid|indices"):
            run_model(lowered, feeds)
        return
    assert_all_identical(run_model(lowered, feeds), expected)


def _declared(draw, shape, name):
    """What a model declares of ``shape``: nothing, or per dim a size, a symbol or an unknown."""
    if draw(st.integers(0, 4)) == 0:
        return None
    return [draw(st.sampled_from([size, f"{name}{d}", None])) for d, size in enumerate(shape)]


@st.composite
def gather_chains(draw):
    """GatherElements and Gather in a chain, the dims declared symbolic or unknown, and now and then a contrib
    operator (com.microsoft Gelu) in between, past which ONNX shape inference knows nothing."""
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    shape = [draw(st.integers(1, 3)) for _ in range(draw(st.integers(1, 3)))]
    feeds = {"x": rng.standard_normal(shape).astype(np.float32)}
    inputs = [h.make_tensor_value_info("x", T.FLOAT, _declared(draw, shape, "x"))]
    nodes, value = [], "x"
    for k in range(draw(st.integers(1, 4))):
        step = draw(st.sampled_from(["Gather", "GatherElements", "Gelu"]))
        out = f"v{k}"
        if step == "Gelu":
            nodes.append(h.make_node("Gelu", [value], [out], name=f"gelu{k}", domain="com.microsoft"))
            value = out
            continue
        axis = draw(st.integers(0, len(shape) - 1))
        if step == "Gather":
            low = 0 if len(shape) > 1 else 1  # never a scalar: the next step gathers from it
            index_shape = [draw(st.integers(1, 3)) for _ in range(draw(st.integers(low, max(low, 4 - len(shape)))))]
        else:
            index_shape = [draw(st.integers(1, 3)) if d == axis else size for d, size in enumerate(shape)]
        name = f"i{k}"
        feeds[name] = rng.integers(-shape[axis], shape[axis], index_shape).astype(np.int64)
        inputs.append(h.make_tensor_value_info(name, T.INT64, _declared(draw, index_shape, name)))
        nodes.append(h.make_node(step, [value, name], [out], name=f"{step}{k}", axis=axis - len(shape)))
        shape = shape[:axis] + index_shape + shape[axis + 1 :] if step == "Gather" else index_shape
        value = out
    output = h.make_value_info(value, h.make_tensor_type_proto(T.FLOAT, None))
    graph = h.make_graph(nodes, "chain", inputs, [output])
    opsets = [h.make_opsetid("", 17), h.make_opsetid("com.microsoft", 1)]
    return h.make_model(graph, opset_imports=opsets, ir_version=8), feeds


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(gather_chains())
def test_every_gather_of_a_chain_converts_and_lowers_whatever_inference_knows(chain):
    model, feeds = chain
    gathers = sum(n.op_type in ("Gather", "GatherElements") for n in model.graph.node)
    expected = run_model(model, feeds)
    converted, report = convert(model, observation=onnx_gather.Observation(feeds=feeds))
    assert report.left == [] and len(report.changed) == gathers
    assert_all_identical(run_model(converted, feeds, custom_ops=True), expected)
    lowered, lowering = lower(converted)
    assert lowering.left == [] and len(lowering.changed) == gathers
    assert not any(n.domain == DOMAIN for n in lowered.graph.node)
    assert_all_identical(run_model(lowered, feeds), expected)


@st.composite
def gather_nd_graphs(draw):
    """A standard GatherND (opsets 11 to 13, batch_dims, every tuple length, symbolic dims now and then) with
    indices in bounds, some negative."""
    elem = draw(st.sampled_from(ELEMENT_TYPES))
    r = draw(st.integers(1, 5))
    batch = draw(st.integers(0, min(r - 1, 2)))
    opset = draw(st.sampled_from([12, 13, 17] if batch else [11, 12, 13, 17]))
    k = draw(st.integers(1, r - batch))
    data_shape = [draw(st.integers(1, 3)) for _ in range(r)]
    index_shape = [*data_shape[:batch], *(draw(st.integers(0, 3)) for _ in range(draw(st.integers(0, 2)))), k]
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    sizes = np.array(data_shape[batch : batch + k])
    indices = np.floor(rng.random(index_shape) * 2 * sizes - sizes).astype(np.int64)
    node = h.make_node("GatherND", ["x", "i"], ["y"], name="the_gather", **({"batch_dims": batch} if batch else {}))
    graph = h.make_graph(
        [node],
        "random",
        [
            h.make_tensor_value_info("x", elem, _dims(draw, data_shape, "d")),
            h.make_tensor_value_info("i", T.INT64, [*_dims(draw, index_shape[:-1], "q"), k]),
        ],
        [h.make_tensor_value_info("y", elem, None)],
    )
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", opset)], ir_version=8)
    return model, {"x": _data(rng, data_shape, elem), "i": indices}


@SETTINGS
@given(gather_nd_graphs(), st.sampled_from(["directml", "clamp", "zero", "error"]))
def test_converted_and_lowered_gather_nd_give_the_native_outputs(graph, mode):
    model, feeds = graph
    expected = run_model(model, feeds)
    converted, report = convert(model, out_of_bounds=mode, provider_failures="onnx")
    assert report.left == [] and [c.op_type for c in report.changed] == ["GatherND"]
    carried = model.graph.input[0].type.tensor_type.elem_type == T.FLOAT16
    assert_all_identical(run_model(converted, feeds, custom_ops=True), expected, canonical_nans=carried)
    lowered, lowering = lower(converted)
    assert lowering.left == [] and not any(n.domain == DOMAIN for n in lowered.graph.node)
    # The lowered zero mode's Where makes FLOAT16 NaN payloads canonical (docs/ops.md, Known deviations).
    assert_all_identical(run_model(lowered, feeds), expected, canonical_nans=carried and mode == "zero")
    if mode == "error":  # the round trip gives back the original node
        assert [n.op_type for n in lowered.graph.node] == ["GatherND"]


@SETTINGS
@given(gather_nd_graphs(), st.sampled_from(["directml", "clamp", "zero", "error"]), st.integers(0, 2**32 - 1))
def test_lowered_dml_gather_nd_equals_the_custom_op_out_of_bounds(graph, mode, seed):
    model, feeds = graph
    indices = feeds["i"].copy()
    assume(indices.size)
    rng = np.random.default_rng(seed)
    flat = indices.reshape(-1)
    flat[rng.integers(flat.size)] = rng.choice([3, -4, 7, 10**6, -(10**6), 2**32 - 1, 2**40, -(2**63)])
    feeds = {**feeds, "i": indices}
    # directml-16bit where FLOAT16 travels as FLOAT32
    converted = onnx_gather.to_dml(model, out_of_bounds=mode, provider_failures="onnx")
    lowered, lowering = lower(converted)
    assert lowering.left == []
    try:
        expected = run_model(converted, feeds, custom_ops=True)
    except GatherError:
        assert mode == "error"
        with pytest.raises(Exception, match=r"(?i)invalid index|out of|indices"):
            run_model(lowered, feeds)
        return
    carried = model.graph.input[0].type.tensor_type.elem_type == T.FLOAT16  # NaN payloads made canonical by the op
    assert_all_identical(run_model(lowered, feeds), expected, canonical_nans=carried)
