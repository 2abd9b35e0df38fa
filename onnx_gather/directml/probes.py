"""What ``onnx-gather setup-directml`` and its ``--check`` run to show that real DirectML works: a Gather through
ONNX Runtime's DirectML provider (runner.exe) and DML_GATHER through DirectML called directly (direct.exe), on the
Direct3D 12 that ``$ONNX_GATHER_DIRECTML_D3D12`` chooses."""

from __future__ import annotations

import time
from typing import TextIO

import numpy as np
from onnx import TensorProto, helper

from onnx_gather.directml import sixteen
from onnx_gather.directml.layout import D3D12_VARIABLE, NATIVE16, Layout, SetupError, d3d12_stack


def probe(layout: Layout) -> str:
    """Run one Gather on real DirectML, placed there with CPU fallback off; returns what ran, raises if it did not."""
    from onnx_gather.directml.worker import Runner

    node = helper.make_node("Gather", ["data", "indices"], ["output"], axis=0)
    graph = helper.make_graph(
        [node],
        "probe",
        [
            helper.make_tensor_value_info("data", TensorProto.FLOAT, [6]),
            helper.make_tensor_value_info("indices", TensorProto.INT64, [3]),
        ],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, [3])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    start = time.perf_counter()
    with Runner(layout) as runner:
        loaded = runner.load(model)
        output = runner.run(loaded, {"data": np.arange(10, 16, dtype=np.float32), "indices": np.array([1, 0, -1])})
        caps = runner.capabilities()
        memory = runner.memory_limit
    if output["output"].tolist() != [11.0, 10.0, 15.0]:
        raise SetupError(f"the probe Gather on DirectML gave {output['output'].tolist()}, not [11, 10, 15]")
    device = (
        f"shader model {caps['shader_model']}, WaveOps {caps['wave_ops']}, Int64ShaderOps {caps['int64_ops']}, "
        f"Native16BitShaderOps {caps['native16']}"
    )
    return (
        f"a Gather ran on DirectML in {time.perf_counter() - start:.1f} s (Wine and Xvfb started and ended); "
        f"Direct3D 12 {d3d12_stack()} ({D3D12_VARIABLE}): {device}; memory limit {memory}"
    )


def probe_direct(layout: Layout) -> str:
    """Run DirectML's documented DML_GATHER example 1 through direct.exe (DirectML.dll called directly, no ONNX
    Runtime); returns what ran, raises if it did not."""
    from onnx_gather.core.descs import Case, TensorDesc, from_buffer, to_buffer
    from onnx_gather.directml.direct import DirectRunner

    data, indices, output = TensorDesc.of("FLOAT32", [4]), TensorDesc.of("UINT32", [5]), TensorDesc.of("FLOAT32", [5])
    case = Case(
        "GATHER",
        {"axis": 0, "index_dimensions": 1},
        data,
        indices,
        output,
        to_buffer(data, np.array([11, 12, 13, 14])),
        to_buffer(indices, np.array([3, 1, 3, 0, 2])),
    )
    start = time.perf_counter()
    with DirectRunner(layout) as runner:
        outcome = runner.run([case])[0]
        level = runner.feature_level
    got = outcome.refused or from_buffer(output, outcome.output or b"").tolist()
    if got != [14, 12, 14, 11, 13]:
        raise SetupError(f"DML_GATHER's example 1 through direct.exe gave {got}, not [14, 12, 14, 11, 13]")
    return (
        f"a DML_GATHER ran on DirectML called directly (direct.exe) in {time.perf_counter() - start:.1f} s; "
        f"DirectML feature level {level}"
    )


def run_probes(layout: Layout, out: TextIO) -> None:
    """Each probe, one line each."""
    print(f"probe: {probe(layout)}", file=out)
    print(f"direct: {probe_direct(layout)}", file=out)
    if d3d12_stack() == NATIVE16:
        print(f"FLOAT16: refused on this device: {sixteen.REFUSAL}", file=out)
