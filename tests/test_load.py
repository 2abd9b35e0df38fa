"""Under load and at scale: threads sharing a session, long runs, deep subgraphs and large graphs."""

from __future__ import annotations

import sys
import threading
from pathlib import Path

import numpy as np
import pytest
from conftest import assert_identical

import onnx_gather
from onnx_gather.core.semantics import GatherError
from onnx_gather.graphs.convert import convert
from onnx_gather.graphs.emit import single_node_model

TOOLS = Path(__file__).resolve().parent.parent / "tools"


def _session():
    model = single_node_model("DmlGatherElements", np.float32, np.int64, axis=1, out_of_bounds="error")
    return onnx_gather.InferenceSession(model)


def _feeds(k: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(k)
    indices = rng.integers(-8, 8, (16, 8))
    if k % 10 == 9:
        indices[3, 5] = 8 + k  # every tenth run meets an out-of-bounds index, in error mode
    return {"input": rng.random((16, 8), dtype=np.float32), "indices": indices}


def _result(session, k: int):
    try:
        return session.run(None, _feeds(k))[0]
    except GatherError as error:
        return str(error)


def test_four_threads_sharing_one_session_give_the_serial_results():
    session = _session()
    runs = 1000
    serial = [_result(session, k) for k in range(runs)]
    assert sum(isinstance(r, str) for r in serial) == 100
    parallel: list = [None] * runs

    def worker(first: int) -> None:
        for k in range(first, runs, 4):
            parallel[k] = _result(session, k)

    threads = [threading.Thread(target=worker, args=(first,)) for first in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for k in range(runs):
        if isinstance(serial[k], str):
            assert parallel[k] == serial[k] and f"index {8 + k} at indices position (3, 5)" in serial[k]
        else:
            assert_identical(parallel[k], serial[k])


def _resident_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * 4096


@pytest.mark.skipif(not Path("/proc/self/statm").exists(), reason="resident memory is read from /proc (Linux)")
def test_ten_thousand_runs_do_not_grow_resident_memory():
    session = _session()
    feeds = [_feeds(k) for k in range(20)]
    for k in range(500):  # warm up: arenas, caches, the inner session
        _result(session, k % 20) if k % 10 == 9 else session.run(None, feeds[k % 20])
    before = _resident_bytes()
    for k in range(10_000):
        if k % 10 == 9:
            with pytest.raises(GatherError):
                session.run(None, feeds[k % 20])
        else:
            session.run(None, feeds[k % 20])
    growth = (_resident_bytes() - before) / before
    assert growth < 0.05, f"resident memory grew by {growth:.1%} over 10,000 runs"


def test_subgraphs_nested_as_deep_as_protobuf_allows_convert_and_run():
    sys.path.insert(0, str(TOOLS))
    try:
        from make_broken import _nested
    finally:
        sys.path.remove(str(TOOLS))
    import onnx

    # 30 levels of If: protobuf (and so onnx and onnxruntime) stops at 100 nested messages, about 32 levels.
    model = onnx.load_from_string(_nested(30))
    converted, report = convert(model)
    assert len(report.changed) == 1 and report.changed[0].where.count("subgraph") == 30
    feeds = {
        "x5": np.arange(5, dtype=np.float32),
        "x2": np.zeros(2, np.float32),
        "i": np.array([4, -5]),
        "c": np.array(True),
    }
    assert onnx_gather.InferenceSession(converted).run(None, feeds)[0].tolist() == [4.0, 0.0]


def _convert_speed():
    sys.path.insert(0, str(TOOLS))
    try:
        import convert_speed
    finally:
        sys.path.remove(str(TOOLS))
    return convert_speed


def test_a_model_of_10000_nodes_converts():
    # 100,000 and the growth from 1,000 up, against ONNX Runtime's own session: python tools/convert_speed.py --scaling
    converted, report = convert(_convert_speed().chain(10_000))
    assert len(report.changed) == 10_000 and not report.left
    assert len(converted.graph.node) == 30_000


def test_the_scaling_benchmark_prints_to_dml_against_native(capsys):
    rows = _convert_speed().scaling([10, 100])
    assert [gathers for gathers, _, _ in rows] == [10, 100] and all(native > 0 for _, _, native in rows)
    printed = capsys.readouterr().out
    assert "100 Gathers: to_dml" in printed and "to_dml/native" in printed and "x10 nodes: to_dml x" in printed


def test_a_gather_nd_with_batch_dims_past_the_ranks_is_refused_naming_the_node(tmp_path, capsys):
    import onnx
    from onnx import TensorProto as T
    from onnx import helper as h

    from onnx_gather.app.cli import main

    graph = h.make_graph(
        [h.make_node("GatherND", ["data", "indices"], ["out"], name="nd", batch_dims=2)],
        "nd",
        [h.make_tensor_value_info("data", T.FLOAT, [2, 3]), h.make_tensor_value_info("indices", T.INT64, [2, 1])],
        [h.make_tensor_value_info("out", T.FLOAT, None)],
    )
    path = tmp_path / "nd.onnx"
    onnx.save(h.make_model(graph, opset_imports=[h.make_opsetid("", 13)], ir_version=8), path)
    assert main(["check", str(path)]) == 2
    assert "node 'nd' (GatherND): batch_dims 2 is out of range [0, 2)" in capsys.readouterr().err
