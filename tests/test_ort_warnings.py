"""Lowered models load in ONNX Runtime without a warning: Gather, GatherElements and GatherND (with and without batch
dims), every out-of-bounds mode, static and symbolic dims, the opsets the lowering writes, FLOAT16 data carried, UINT64
indices (in DML form, which only a hand-written model has), inside an If too.

ONNX Runtime logs from C++ to the process's stderr, so the models are loaded in a child process with every severity
from verbose (0) up logged, and its stderr is read whole. A control model makes the warning this test once caught
(``CanUpdateImplicitInputNameInSubgraphs``: a Slice of a value, both used inside an If) to show the capture sees it.
"""

from __future__ import annotations

import re
import subprocess
import sys

import numpy as np
import onnx
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper

import onnx_gather
from onnx_gather.core.contract import DOMAIN

MODES = ["directml", "clamp", "zero", "error"]
_LOADER = """
import os, sys
import onnxruntime
onnxruntime.set_default_logger_severity(0)
for path in sys.stdin.read().split():
    os.write(2, f"@@ {path}\\n".encode())
    options = onnxruntime.SessionOptions()
    options.log_severity_level = 0
    onnxruntime.InferenceSession(path, options, providers=["CPUExecutionProvider"])
"""
_PROBLEM = re.compile(r"\[([WEF]):onnxruntime")  # a warning, an error or a fatal line, in ONNX Runtime's log format


def _problems(paths: list[str]) -> dict[str, list[str]]:
    """The warning (and worse) lines ONNX Runtime logs while loading each model, by path; and that it logged."""
    result = subprocess.run(
        [sys.executable, "-c", _LOADER], input="\n".join(paths), capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stderr[-2000:]
    found: dict[str, list[str]] = {}
    current, verbose = "", 0
    for line in result.stderr.splitlines():
        if line.startswith("@@ "):
            current = line[3:]
        elif _PROBLEM.search(line):
            found.setdefault(current, []).append(line)
        verbose += "[V:onnxruntime" in line
    assert verbose, "ONNX Runtime logged nothing verbose: the capture does not see its log"
    return found


def _model(op: str, opset: int, dims: list, index_dims: list, data=T.INT8, indices=T.INT64, **attributes):
    """``y = op(x, i)``; a DML op (``Dml...``, every attribute given) with ``i`` of any index type."""
    domain = DOMAIN if op.startswith("Dml") else ""
    graph = h.make_graph(
        [h.make_node(op, ["x", "i"], ["y"], name="the_gather", domain=domain, **attributes)],
        "g",
        [h.make_tensor_value_info("x", data, dims), h.make_tensor_value_info("i", indices, index_dims)],
        [h.make_tensor_value_info("y", data, dims if domain else None)],
    )
    imports = [h.make_opsetid("", opset), *([h.make_opsetid(DOMAIN, 1)] if domain else [])]
    return h.make_model(graph, opset_imports=imports, ir_version=8)


def _in_if(model: onnx.ModelProto) -> onnx.ModelProto:
    """The model's graph as the then-branch of an If (the else-branch passes ``x`` on): the lowering's If nests."""
    graph = model.graph
    then_branch = h.make_graph(list(graph.node), "then", [], [h.make_tensor_value_info("y", T.INT8, None)])
    else_branch = h.make_graph(
        [h.make_node("Identity", ["x"], ["x_out"])], "else", [], [h.make_tensor_value_info("x_out", T.INT8, None)]
    )
    outer = h.make_graph(
        [h.make_node("If", ["c"], ["out"], name="choose", then_branch=then_branch, else_branch=else_branch)],
        "g",
        [h.make_tensor_value_info("c", T.BOOL, []), *graph.input],
        [h.make_tensor_value_info("out", T.INT8, None)],
    )
    return h.make_model(outer, opset_imports=list(model.opset_import), ir_version=8)


def _models() -> dict[str, onnx.ModelProto]:
    models = {}
    for opset in (7, 9, 11, 12, 13, 14, 15, 17):
        for symbolic in (False, True):
            d3 = ["a", "b", "c"] if symbolic else [2, 3, 5]
            for mode in MODES:
                kinds = {
                    "gather-axis1": _model("Gather", opset, d3, [2, 2], axis=1),
                    "gather-axis0-1d": _model("Gather", opset, d3, [4], axis=0),
                    "gather-float16-int32": _model("Gather", opset, d3, [4], T.FLOAT16, T.INT32, axis=2),
                }
                if opset >= 11:
                    kinds["elements"] = _model("GatherElements", opset, d3, d3, axis=1)
                    kinds["elements-uint64"] = _model(
                        "DmlGatherElements", opset, d3, d3, T.FLOAT, T.UINT64, axis=1, out_of_bounds=mode
                    )
                    kinds["nd"] = _model("GatherND", opset, d3, [2, 2])
                    kinds["nd-one-tuple"] = _model("GatherND", opset, d3, [1])
                    kinds["nd-in-if"] = _in_if(_model("GatherND", opset, d3, [2, 2]))
                if opset >= 12:
                    kinds["nd-batch"] = _model("GatherND", opset, d3, [d3[0], 2, 1], batch_dims=1)
                for kind, model in kinds.items():
                    name = f"{kind}-opset{opset}-{'symbolic' if symbolic else 'static'}-{mode}"
                    models[name] = onnx_gather.to_onnx(onnx_gather.to_dml(model, out_of_bounds=mode))
    return models


def test_the_capture_sees_the_warning_it_looks_for(tmp_path):
    # Slice(shape) and shape both used inside an If: ONNX Runtime's EliminateSlice rule asks whether it could drop the
    # Slice (it cannot: it is no no-op) and warns that the If's implicit input could not be renamed.
    branch = h.make_graph(
        [h.make_node("Concat", ["shape", "part"], ["both"], axis=0)],
        "b",
        [],
        [h.make_tensor_value_info("both", T.INT64, None)],
    )
    graph = h.make_graph(
        [
            h.make_node("Shape", ["x"], ["shape"]),
            h.make_node("Slice", ["shape", "start", "end"], ["part"]),
            h.make_node("If", ["c"], ["y"], then_branch=branch, else_branch=branch),
        ],
        "g",
        [h.make_tensor_value_info("x", T.FLOAT, ["a", "b"]), h.make_tensor_value_info("c", T.BOOL, [])],
        [h.make_tensor_value_info("y", T.INT64, None)],
        initializer=[numpy_helper.from_array(np.array([0]), "start"), numpy_helper.from_array(np.array([1]), "end")],
    )
    path = tmp_path / "control.onnx"
    onnx.save(h.make_model(graph, opset_imports=[h.make_opsetid("", 12)], ir_version=8), path)
    (lines,) = _problems([str(path)]).values()
    assert any("CanUpdateImplicitInputNameInSubgraphs" in line for line in lines)


def test_lowered_models_load_without_a_warning(tmp_path):
    paths = {}
    for name, model in _models().items():
        paths[str(tmp_path / f"{name}.onnx")] = name
        onnx.save(model, tmp_path / f"{name}.onnx")
    assert len(paths) > 300
    problems = {paths[path]: lines for path, lines in _problems(list(paths)).items()}
    assert not problems, "\n".join(f"{name}: {lines[0]}" for name, lines in problems.items())
