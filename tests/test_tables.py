"""Constant data of DML nodes held on the Python side (runtime.tables): the lookup reads the same table, computes the
same result, and the table does not cross the bridge on each run."""

from __future__ import annotations

import gc

import numpy as np
import onnx
import onnxruntime
import pytest
from conftest import assert_identical
from onnx import TensorProto, helper, numpy_helper

import onnx_gather
from onnx_gather.core.semantics import GatherError
from onnx_gather.runtime import ops, tables

RNG = np.random.default_rng(5)
TABLE = RNG.standard_normal((50, 8)).astype(np.float32)
IDS = np.array([[3, 49, 0], [-1, 7, 7]], np.int64)


def _lookup(table: np.ndarray = TABLE, table_is_input: bool = False, ir_version: int = 8) -> onnx.ModelProto:
    """Gather(table, ids), the table an initializer (also declared a graph input where ``table_is_input``)."""
    inputs = [helper.make_tensor_value_info("ids", TensorProto.INT64, ["b", "s"])]
    if table_is_input:
        inputs.append(helper.make_tensor_value_info("table", TensorProto.FLOAT, list(table.shape)))
    graph = helper.make_graph(
        [helper.make_node("Gather", ["table", "ids"], ["y"])],
        "lookup",
        inputs,
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(table, "table")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=ir_version)


def _native(model: onnx.ModelProto, feeds: dict) -> np.ndarray:
    return onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[
        0
    ]


def _detached(model: onnx.ModelProto) -> onnx.ModelProto:
    detached = tables.detach(model, None, {o.op_type for o in ops._UNTABLED})
    assert detached is not None
    return detached[0]


def test_an_embedding_lookup_reads_the_table_held_here_and_equals_onnx_runtime():
    model = _lookup()
    converted = onnx_gather.to_dml(model)
    detached = _detached(converted)
    (node,) = [n for n in detached.graph.node if n.domain == onnx_gather.DOMAIN]
    assert node.op_type == "DmlGatherTable"
    # The table and the Unsqueeze padding it are gone from the model; the op's data input is an empty placeholder.
    assert [list(t.dims) for t in detached.graph.initializer] == [[0]]
    # What pads the indices stays; what padded the table is gone.
    assert sorted(n.op_type for n in detached.graph.node) == ["Constant", "DmlGatherTable", "Unsqueeze"]
    session = onnx_gather.InferenceSession(converted)
    assert_identical(session.run(None, {"ids": IDS})[0], _native(model, {"ids": IDS}))


def test_a_dequantized_table_is_computed_once_as_onnx_runtime_computes_it():
    quantized = RNG.integers(-128, 128, (40, 6)).astype(np.int8)
    scale = RNG.random((40, 1)).astype(np.float32)
    graph = helper.make_graph(
        [
            helper.make_node("Cast", ["q"], ["f"], to=TensorProto.FLOAT),
            helper.make_node("Mul", ["f", "scale"], ["t"]),
            helper.make_node("Gather", ["t", "ids"], ["y"]),
        ],
        "dequantized",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, ["b", "s"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(quantized, "q"), numpy_helper.from_array(scale, "scale")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    converted = onnx_gather.to_dml(model)
    assert {n.op_type for n in _detached(converted).graph.node} == {"Constant", "Unsqueeze", "DmlGatherTable"}
    ids = np.array([[39, 0, 5]], np.int64)
    assert_identical(onnx_gather.InferenceSession(converted).run(None, {"ids": ids})[0], _native(model, {"ids": ids}))


@pytest.mark.parametrize("mode", ["directml", "clamp", "zero"])
def test_out_of_bounds_indices_read_the_table_as_the_semantics_read_an_input(mode):
    converted = onnx_gather.to_dml(_lookup(), out_of_bounds=mode)
    ids = np.array([[50, -51, 10**6, 2]], np.int64)
    expected = onnx_gather.dml_gather(TABLE[None], ids[None], 1, 2, mode)  # DML form: the rank-3 output
    assert_identical(onnx_gather.InferenceSession(converted).run(None, {"ids": ids})[0], expected)


def test_error_mode_raises_from_run_with_the_ops_message():
    session = onnx_gather.InferenceSession(onnx_gather.to_dml(_lookup(), out_of_bounds="error"))
    with pytest.raises(GatherError, match=r"^DmlGather: index 50 at indices position"):
        session.run(None, {"ids": np.array([[50]], np.int64)})


def test_a_table_is_held_once_while_sessions_use_it_and_released_after():
    gc.collect()
    before = len(tables.TABLES)
    converted = onnx_gather.to_dml(_lookup(TABLE * 3))
    first, second = onnx_gather.InferenceSession(converted), onnx_gather.InferenceSession(converted)
    assert len(tables.TABLES) == before + 1
    del first
    gc.collect()
    assert_identical(second.run(None, {"ids": IDS})[0], (TABLE * 3)[IDS])
    del second
    gc.collect()
    assert len(tables.TABLES) == before


def test_an_initializer_a_feed_may_override_stays_an_input():
    model = _lookup(table_is_input=True)
    converted = onnx_gather.to_dml(model)
    assert tables.detach(converted, None, {o.op_type for o in ops._UNTABLED}) is None
    other = TABLE + 1
    session = onnx_gather.InferenceSession(converted)
    assert_identical(session.run(None, {"ids": IDS, "table": other})[0], other[IDS])


def test_a_table_kept_in_external_data_is_read_from_the_models_folder(tmp_path):
    path = tmp_path / "lookup.onnx"
    onnx.save(onnx_gather.to_dml(_lookup()), path, save_as_external_data=True, location="table.bin", size_threshold=0)
    assert onnx.load(path, load_external_data=False).graph.initializer[0].data_location == TensorProto.EXTERNAL
    for source in (path, str(path)):
        assert_identical(onnx_gather.InferenceSession(source).run(None, {"ids": IDS})[0], TABLE[IDS])


def test_a_table_op_whose_table_no_session_holds_fails_naming_it(caplog):
    detached = _detached(onnx_gather.to_dml(_lookup(TABLE * 5)))
    gc.collect()  # the table detach registered is held by nothing now
    name = next(a.s.decode() for n in detached.graph.node for a in n.attribute if a.name == "table")
    session = onnxruntime.InferenceSession(
        detached.SerializeToString(), onnx_gather.session_options(), providers=["CPUExecutionProvider"]
    )
    session.run(None, {"ids": IDS})  # a plain session: the op logs its error and returns an empty output
    assert [r.getMessage() for r in caplog.records] == [
        f"no session holds the constant table '{name}' (onnx_gather.InferenceSession makes Table ops) (the node's "
        "output is empty)"
    ]


def test_out_of_bounds_indices_are_counted_per_node_on_a_table():
    session = onnx_gather.InferenceSession(ops.traced(onnx_gather.to_dml(_lookup())))
    with ops.counting_out_of_bounds() as counts:
        session.run(None, {"ids": np.array([[50, 1, -51]], np.int64)})
    assert dict(counts) == {"Gather_0": 2}
