"""Lowering at every opset a model may have: converted with to_dml and lowered in every out-of-bounds mode, the
lowered model runs in plain ONNX Runtime and equals the custom ops bit for bit; the model's opset is raised (onnx's
version converter) only where the lowering needs operators it lacks; where it cannot be, to_onnx says which node
and why, as ``lower`` reports it, and the command line gives no hint to lower it first."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from conftest import random_tensor, run_model
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper

import onnx_gather
from onnx_gather.app.cli import main
from onnx_gather.core.contract import DOMAIN
from onnx_gather.core.errors import UserError
from onnx_gather.graphs.lowering.lower import LoweringError, lower
from onnx_gather.graphs.plumbing import bodies

RNG = np.random.default_rng(11)
MODES = ["directml", "clamp", "zero", "error"]
DATA_TYPES = [np.float32, np.int8]  # INT8: 15 bytes, so DirectML's reading past the end meets padding


def _opset(model: onnx.ModelProto) -> int:
    return next(o.version for o in model.opset_import if o.domain == "")


def _dml_nodes(model: onnx.ModelProto) -> int:
    return sum(node.domain == DOMAIN for body in bodies(model) for node in body.nodes)


def _ir_version(opset: int) -> int:
    return 3 if opset < 9 else 4 if opset < 11 else 6  # what onnx wrote with these opsets


# op, opset, data dims, indices dims, attributes, constant in-range indices, index values in and out of bounds.
GATHER = ([3, 5], [2, 3], {"axis": 1}, [[4, -5, 0], [1, 2, -1]], [[5, -6, 2**33], [1, -(2**33), 7]])
ELEMENTS = ([3, 4], [3, 2], {"axis": 1}, [[3, -4], [0, 1], [-1, 2]], [[4, -5], [0, 9], [-1, 2**40]])
ND = ([3, 4, 2], [2, 2], {}, [[2, 3], [-3, -4]], [[3, 0], [1, -5]])
ND_BATCH = ([3, 4, 2], [3, 1, 1], {"batch_dims": 1}, [[[3]], [[-4]], [[0]]], [[[4]], [[-5]], [[2**33]]])
CASES = [
    *(("Gather", opset, *GATHER) for opset in (1, 7, 9, 10, 11, 12)),
    *(("GatherElements", opset, *ELEMENTS) for opset in (11, 12)),
    *(("GatherND", opset, *ND) for opset in (11, 12)),
    ("GatherND", 12, *ND_BATCH),
]


def _model(op, opset, data_dims, indices_dims, attributes, data_type, constant=None):
    """``y = op(x, i)``, ``i`` a graph input or the ``constant`` initializer."""
    elem = h.np_dtype_to_tensor_dtype(np.dtype(data_type))
    inputs = [h.make_tensor_value_info("x", elem, data_dims)]
    initializers = []
    if constant is None:
        inputs.append(h.make_tensor_value_info("i", T.INT64, indices_dims))
    else:
        initializers.append(numpy_helper.from_array(np.array(constant, np.int64), "i"))
        if opset < 9:  # before IR 4 an initializer is also a graph input
            inputs.append(h.make_tensor_value_info("i", T.INT64, indices_dims))
    node = h.make_node(op, ["x", "i"], ["y"], name=f"the_{op.lower()}", **attributes)
    graph = h.make_graph([node], "g", inputs, [h.make_tensor_value_info("y", elem, None)], initializer=initializers)
    return h.make_model(graph, opset_imports=[h.make_opsetid("", opset)], ir_version=_ir_version(opset))


def _assert_same(lowered, converted, feeds, fails=False):
    """The lowered model in plain ONNX Runtime gives the custom ops' outputs bit for bit; or, where ``fails`` (``error``
    mode, indices out of bounds), both runs fail."""
    if fails:
        with pytest.raises(Exception, match=r"(?i)out of|invalid index"):
            run_model(converted, feeds, custom_ops=True)
        with pytest.raises(Exception, match=r"(?i)out of|invalid index"):
            run_model(lowered, feeds)
        return
    expected, actual = run_model(converted, feeds, custom_ops=True), run_model(lowered, feeds)
    assert len(actual) == len(expected)
    for a, e in zip(actual, expected, strict=True):
        assert a.dtype == e.dtype and a.shape == e.shape and a.tobytes() == e.tobytes(), f"{a}\n!=\n{e}"


def _case_id(case) -> str:
    return f"{case[0]}-{case[1]}{'-batch' if case[4].get('batch_dims') else ''}"


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("data_type", DATA_TYPES, ids=lambda t: np.dtype(t).name)
@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_indices_from_the_graph_lower_at_every_opset(case, data_type, mode):
    op, opset, data_dims, indices_dims, attributes, inside, outside = case
    model = _model(op, opset, data_dims, indices_dims, attributes, data_type)
    converted = onnx_gather.to_dml(model, out_of_bounds=mode)
    assert _dml_nodes(converted) == 1
    lowered, report = lower(converted)
    assert report.left == [] and _dml_nodes(lowered) == 0
    onnx.checker.check_model(lowered)
    # A Gather that is the native op alone (error mode, signed indices) keeps the opset; the rest need opset 11.
    needed = 12 if attributes.get("batch_dims") else 1 if (op, mode) == ("Gather", "error") else 11
    assert _opset(lowered) == max(opset, needed)
    raised = (
        [
            f"default-domain opset raised from {opset} to {needed} with onnx's version converter: lowering 1 DML "
            "node needs it"
        ]
        if needed > opset
        else []
    )
    assert report.notes == raised
    data = random_tensor(RNG, tuple(data_dims), data_type)
    _assert_same(lowered, converted, {"x": data, "i": np.array(inside, np.int64)})
    _assert_same(lowered, converted, {"x": data, "i": np.array(outside, np.int64)}, fails=mode == "error")


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_constant_indices_in_range_become_the_native_op_at_the_models_opset(case, mode):
    op, opset, data_dims, indices_dims, attributes, inside, _ = case
    model = _model(op, opset, data_dims, indices_dims, attributes, np.float32, constant=inside)
    converted = onnx_gather.to_dml(model, out_of_bounds=mode)
    lowered, report = lower(converted)
    assert report.left == [] and report.notes == []
    assert _opset(lowered) == opset
    assert [node.op_type for node in lowered.graph.node] == [op]  # the original's node
    feeds = {"x": random_tensor(RNG, tuple(data_dims), np.float32)}  # before IR 4 the initializer is no input to feed
    _assert_same(lowered, converted, feeds)
    _assert_same(lowered, model, feeds)


def _branch(name, data):
    node = h.make_node("Gather", [data, "i"], [f"{name}_out"], name=f"{name}_gather", axis=1)
    return h.make_graph([node], name, [], [h.make_tensor_value_info(f"{name}_out", T.FLOAT, None)])


def test_subgraphs_are_raised_with_the_main_graph():
    # Both branches make the same shape: If-1 (before opset 11) takes no others.
    graph = h.make_graph(
        [
            h.make_node(
                "If",
                ["c"],
                ["y"],
                name="choose",
                then_branch=_branch("x_columns", "x"),
                else_branch=_branch("z_columns", "z"),
            )
        ],
        "g",
        [
            h.make_tensor_value_info("c", T.BOOL, []),
            h.make_tensor_value_info("x", T.FLOAT, [4, 4]),
            h.make_tensor_value_info("z", T.FLOAT, [4, 4]),
            h.make_tensor_value_info("i", T.INT64, [3]),
        ],
        [h.make_tensor_value_info("y", T.FLOAT, None)],
    )
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 7)], ir_version=3)
    converted = onnx_gather.to_dml(model)
    assert _dml_nodes(converted) == 2
    lowered = onnx_gather.to_onnx(converted)
    assert _opset(lowered) == 11 and _dml_nodes(lowered) == 0
    x, z = random_tensor(RNG, (4, 4), np.float32), random_tensor(RNG, (4, 4), np.float32)
    for choice in (True, False):
        for values in ([3, -4, 0], [4, -5, 2**32 + 1]):
            _assert_same(lowered, converted, {"c": np.array(choice), "x": x, "z": z, "i": np.array(values)})


def _function_model(refers_to_attribute: bool):
    """A model-local function at opset 7 holding a Gather, and a LeakyRelu whose slope is 0.5 (or an attribute
    reference that says 0.5)."""
    gather = h.make_node("Gather", ["a", "b"], ["picked"], name="inner_gather", axis=1)
    leaky = h.make_node("LeakyRelu", ["picked"], ["o"], name="leaky")
    if refers_to_attribute:
        leaky.attribute.append(onnx.AttributeProto(name="alpha", ref_attr_name="slope", type=onnx.AttributeProto.FLOAT))
    else:
        leaky.attribute.append(h.make_attribute("alpha", 0.5))
    function = h.make_function(
        "local",
        "Pick",
        ["a", "b"],
        ["o"],
        [gather, leaky],
        [h.make_opsetid("", 7)],
        attributes=["slope"] if refers_to_attribute else [],
    )
    graph = h.make_graph(
        [
            h.make_node(
                "Pick",
                ["x", "i"],
                ["y"],
                name="pick",
                domain="local",
                **({"slope": 0.5} if refers_to_attribute else {}),
            )
        ],
        "g",
        [h.make_tensor_value_info("x", T.FLOAT, [2, 5]), h.make_tensor_value_info("i", T.INT64, [3])],
        [h.make_tensor_value_info("y", T.FLOAT, [2, 3])],
    )
    imports = [h.make_opsetid("", 7), h.make_opsetid("local", 1)]
    return h.make_model(graph, opset_imports=imports, ir_version=8, functions=[function])


def test_functions_are_raised_with_the_model():
    model = _function_model(refers_to_attribute=False)
    converted = onnx_gather.to_dml(model)
    assert _dml_nodes(converted) == 1
    lowered = onnx_gather.to_onnx(converted)
    assert _opset(lowered) == 11 and _dml_nodes(lowered) == 0
    assert [next(o.version for o in f.opset_import if o.domain == "") for f in lowered.functions] == [11]
    onnx.checker.check_model(lowered)  # the function's opset is compatible with the model's again
    data = random_tensor(RNG, (2, 5), np.float32)
    for values in ([4, -5, 0], [5, -6, 2**33]):
        _assert_same(lowered, converted, {"x": data, "i": np.array(values)})


def _scan_8_model(sequence_lengths: bool):
    """A Gather beside a Scan-8 (a batch of 2 sequences of 5 scalars), which onnx's version converter cannot take to
    opset 9 with sequence lengths, and without them takes by dropping the batch dim from the declared sizes."""
    body = h.make_graph(
        [h.make_node("Identity", ["s"], ["t"])],
        "body",
        [h.make_tensor_value_info("s", T.FLOAT, [])],
        [h.make_tensor_value_info("t", T.FLOAT, [])],
    )
    inputs = [h.make_tensor_value_info("x", T.FLOAT, [2, 5]), h.make_tensor_value_info("i", T.INT64, [3])]
    if sequence_lengths:
        inputs.append(h.make_tensor_value_info("lengths", T.INT32, [2]))
    graph = h.make_graph(
        [
            h.make_node("Gather", ["x", "i"], ["y"], name="lookup", axis=1),
            h.make_node(
                "Scan",
                ["lengths" if sequence_lengths else "", "x"],
                ["x_again"],
                name="scan",
                body=body,
                num_scan_inputs=1,
            ),
        ],
        "g",
        inputs,
        [h.make_tensor_value_info("y", T.FLOAT, [2, 3]), h.make_tensor_value_info("x_again", T.FLOAT, [2, 5])],
    )
    return h.make_model(graph, opset_imports=[h.make_opsetid("", 8)], ir_version=3)


@pytest.mark.parametrize(
    ("model", "reason"),
    [
        (
            _scan_8_model(True),
            "onnx's version converter cannot raise graph 'g' from opset 8 to 11: Unsupported conversion to opset 9",
        ),
        (
            _scan_8_model(False),
            "onnx's version converter changed the declared type of 'x' from FLOAT[2,5] to "
            "FLOAT[5] when raising graph 'g' to opset 11: refused, as what the model computes may "
            "have changed",
        ),
        (
            _function_model(refers_to_attribute=True),
            "function 'local.Pick' is at opset 7 and refers to its "
            "attributes, which onnx's version converter does not carry: it cannot be raised to opset 11",
        ),
    ],
    ids=["scan-8-lengths", "scan-8-batch", "attribute-reference"],
)
def test_a_model_that_cannot_be_raised_is_an_error_naming_the_node_and_why(model, reason):
    converted = onnx_gather.to_dml(model)
    _, report = lower(converted)
    (left,) = report.left
    assert (
        left.reason == f"out_of_bounds=directml needs opset 11 (If, NonZero, ScatterND, ScatterElements, Range, "
        f"Mod) (this is opset {_opset(model)}); {reason}"
    )
    with pytest.raises(LoweringError) as raised:
        onnx_gather.to_onnx(converted)
    assert isinstance(raised.value, UserError)
    assert str(raised.value) == f"cannot lower 1 DML node into standard ONNX: {left.describe()}"
    # The same node in error mode is the native op alone: no opset to raise.
    lowered = onnx_gather.to_onnx(onnx_gather.to_dml(model, out_of_bounds="error"))
    assert _opset(lowered) == _opset(model) and _dml_nodes(lowered) == 0


def test_the_command_line_reports_the_raise_and_a_lowering_failure_without_the_lower_hint(tmp_path, capsys):
    path = tmp_path / "old.onnx"
    onnx.save(_model("Gather", 7, *GATHER[:3], np.float32), path)
    converted = tmp_path / "old.dml.onnx"
    assert main(["convert", str(path), "-o", str(converted)]) == 0
    assert main(["lower", str(converted), "-o", str(tmp_path / "old.lowered.onnx")]) == 0
    printed = capsys.readouterr().out
    assert (
        "default-domain opset raised from 7 to 11 with onnx's version converter: lowering 1 DML node needs it"
        in printed
    )
    assert main(["run", str(path), "--backend", "lowered"]) == 0

    scan = tmp_path / "scan.onnx"
    onnx.save(_scan_8_model(False), scan)
    capsys.readouterr()
    assert main(["run", str(scan), "--backend", "lowered"]) == 1
    error = capsys.readouterr().err
    assert "LoweringError: cannot lower 1 DML node into standard ONNX: node 'lookup' (DmlGather" in error
    assert "onnx's version converter changed the declared type of 'x'" in error
    assert "it first" not in error and "--backend pyop" not in error
    report = tmp_path / "r.json"
    assert main(["parity", str(scan), "--backends", "pyop,lowered", "--report", str(report)]) == 1
    assert "it first" not in report.read_text() and "--backend pyop" not in report.read_text()
    scan_dml = tmp_path / "scan.dml.onnx"
    assert main(["convert", str(scan), "-o", str(scan_dml)]) == 0
    capsys.readouterr()
    assert main(["lower", str(scan_dml), "-o", str(tmp_path / "scan.lowered.onnx")]) == 1
    printed = capsys.readouterr().out
    assert "left as it was: node 'lookup' (DmlGather, graph 'g'): out_of_bounds=directml needs opset 11" in printed


@pytest.mark.parametrize("mode", ["directml", "clamp", "zero"])
def test_initializers_a_feed_can_override_are_not_constant_indices(mode):
    # From IR 4 an initializer that is also a graph input is a default: ONNX Runtime takes a feed for it instead.
    # Before IR 4 every initializer is a graph input, and a constant (ONNX Runtime refuses a feed for it).
    for ir_version, native_alone in ((7, False), (3, True)):
        model = _model("Gather", 9, *GATHER[:3], np.float32, constant=GATHER[3])
        model.ir_version = ir_version
        if ir_version >= 4:
            model.graph.input.append(h.make_tensor_value_info("i", T.INT64, GATHER[1]))
        converted = onnx_gather.to_dml(model, out_of_bounds=mode)
        lowered = onnx_gather.to_onnx(converted)
        assert ([node.op_type for node in lowered.graph.node] == ["Gather"]) == native_alone
        data = random_tensor(RNG, tuple(GATHER[0]), np.float32)
        _assert_same(lowered, converted, {"x": data})
        if not native_alone:
            _assert_same(lowered, converted, {"x": data, "i": np.array(GATHER[4], np.int64)})


def _dml_model(op_type, opset, data_dims, indices_dims, index_type, **attributes):
    """A DML-form model written by hand (``to_dml`` makes no unsigned indices): ``y = op_type(x, i)``, rank 2."""
    node = h.make_node(op_type, ["x", "i"], ["y"], name="by_hand", domain=DOMAIN, **attributes)
    out_dims = indices_dims if op_type == "DmlGatherElements" else [data_dims[0], indices_dims[-1]]
    graph = h.make_graph(
        [node],
        "g",
        [h.make_tensor_value_info("x", T.FLOAT, data_dims), h.make_tensor_value_info("i", index_type, indices_dims)],
        [h.make_tensor_value_info("y", T.FLOAT, out_dims)],
    )
    imports = [h.make_opsetid("", opset), h.make_opsetid(DOMAIN, 1)]
    return h.make_model(graph, opset_imports=imports, ir_version=_ir_version(opset))


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("index_type", [T.UINT32, T.UINT64], ids=["uint32", "uint64"])
@pytest.mark.parametrize(("op_type", "opset"), [("DmlGather", 7), ("DmlGather", 11), ("DmlGatherElements", 11)])
def test_unsigned_indices_lower_at_old_opsets(op_type, opset, index_type, mode):
    attributes = {"axis": 1, "out_of_bounds": mode}
    if op_type == "DmlGather":
        attributes["index_dimensions"] = 1  # the indices' last dim: DML output [3, 4]
    model = _dml_model(
        op_type, opset, [3, 5], [3, 4] if op_type == "DmlGatherElements" else [1, 4], index_type, **attributes
    )
    lowered, report = lower(model)
    assert report.left == [] and _dml_nodes(lowered) == 0
    # Capping unsigned indices takes Min-12 (ONNX Runtime has no UINT64 Where); DirectML's reading casts them first.
    assert _opset(lowered) == (11 if mode == "directml" else 12)
    dtype = h.tensor_dtype_to_np_dtype(index_type)
    top = np.iinfo(dtype).max
    inside, outside = [[4, 0, 3, 1]], [[5, top, 2**31 + 3, 1]]
    rows = 3 if op_type == "DmlGatherElements" else 1
    data = random_tensor(RNG, (3, 5), np.float32)
    for values, fails in ((inside, False), (outside, mode == "error")):
        _assert_same(lowered, model, {"x": data, "i": np.array(values * rows, dtype)}, fails=fails)
