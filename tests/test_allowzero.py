"""``convert --reshape-allowzero-0``: Reshape's allowzero=1 set to 0 only where no 0 can reach the shape, and DirectML's
failure on allowzero=1 with a -1 in the shape (docs/directml-on-linux.md, "Known DirectML failures") on real DirectML.
"""

from __future__ import annotations

import re

import numpy as np
import onnx
import pytest
from conftest import require_directml, run_model
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper

from onnx_gather.app.cli import main
from onnx_gather.app.hints import failure_hint
from onnx_gather.app.options import InputChoice
from onnx_gather.directml.process import DirectMlError, SessionCreationError
from onnx_gather.graphs.allowzero import clear_allowzero
from onnx_gather.runtime import backends
from onnx_gather.runtime.inputs import Feeds


def _ints(values, name: str) -> onnx.TensorProto:
    return numpy_helper.from_array(np.array(values, np.int64), name)


def _model(nodes, dims, weights=(), outputs=("y",)) -> onnx.ModelProto:
    declared = [h.make_tensor_value_info(name, T.FLOAT, None) for name in outputs]
    graph = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", T.FLOAT, dims)], declared, list(weights))
    return h.make_model(graph, opset_imports=[h.make_opsetid("", 17)], ir_version=10)


def _view(dims, after: str | None = None) -> onnx.ModelProto:
    """x -> Reshape(x, [-1], allowzero=1) [-> ``after``]: DirectML's failure in one node (and its consumer)."""
    nodes = [h.make_node("Reshape", ["x", "flat"], ["r" if after else "y"], name="view", allowzero=1)]
    if after:
        nodes.append(h.make_node(after, ["r"], ["y"], name="after"))
    return _model(nodes, dims, [_ints([-1], "flat")])


def _heads(dims, tail=(-1, 64)) -> onnx.ModelProto:
    """x [batch, seq, 384] viewed as [batch, seq, -1, 64] from its own Shape, as PyTorch exports write ``view``."""
    nodes = [
        h.make_node("Shape", ["x"], ["bs"], name="shape", start=0, end=2),
        h.make_node("Concat", ["bs", "tail"], ["target"], name="concat", axis=0),
        h.make_node("Reshape", ["x", "target"], ["y"], name="node_view", allowzero=1),
    ]
    return _model(nodes, dims, [_ints(list(tail), "tail")])


def _verdicts(model, nonempty_inputs=False) -> dict[str, tuple[bool, str]]:
    _, changes = clear_allowzero(model, nonempty_inputs)
    return {change.node: (change.changed, change.reason) for change in changes}


def test_a_shape_no_zero_can_reach_gets_allowzero_0_and_the_same_outputs():
    followed = [
        h.make_node("Shape", ["x"], ["s"], name="shape"),
        h.make_node("Gather", ["s", "two"], ["last"], name="pick", axis=0),  # 384, a scalar
        h.make_node("Unsqueeze", ["last", "axis0"], ["last1"], name="unsqueeze"),
        h.make_node("Slice", ["s", "zero", "two1"], ["bs"], name="slice"),  # [2, 5]
        h.make_node("Cast", ["bs"], ["bs64"], name="cast", to=T.INT64),
        h.make_node("Concat", ["bs64", "last1", "one"], ["target"], name="concat", axis=0),
        h.make_node("Reshape", ["x", "target"], ["r"], name="computed", allowzero=1),
        h.make_node("Reshape", ["r", "flat"], ["y"], name="constant", allowzero=1),
    ]
    weights = [
        _ints(2, "two"),
        _ints([0], "axis0"),
        _ints([0], "zero"),
        _ints([2], "two1"),
        _ints([1], "one"),
        _ints([-1], "flat"),
    ]
    model = _model(followed, [2, 5, 384], weights)
    rewritten, changes = clear_allowzero(model)
    assert [(c.node, c.changed, c.reason) for c in changes] == [
        ("computed", True, "allowzero 1 -> 0: no element of its shape can be 0"),
        ("constant", True, "allowzero 1 -> 0: no element of its shape can be 0"),
    ]
    assert [a.i for n in rewritten.graph.node for a in n.attribute if a.name == "allowzero"] == [0, 0]
    assert [a.i for n in model.graph.node for a in n.attribute if a.name == "allowzero"] == [1, 1]  # not modified
    x = np.random.default_rng(3).random((2, 5, 384), np.float32)
    assert np.array_equal(run_model(rewritten, {"x": x})[0], run_model(model, {"x": x})[0])


def test_a_zero_that_can_reach_the_shape_leaves_the_node_alone():
    kept = _model(
        [h.make_node("Reshape", ["x", "zeros"], ["y"], name="keep", allowzero=1)], ["n", 384], [_ints([0, -1], "zeros")]
    )
    assert _verdicts(kept, nonempty_inputs=True) == {
        "keep": (False, "element 0 of its shape is 0 (the constant 'zeros'): allowzero=1 makes that dim 0")
    }
    # A dim that is 0 for an empty input: ONNX Runtime's CPU gives an empty output with allowzero=1 (though Reshape-14
    # forbids a 0 beside a -1 there), and fails with allowzero=0: so the node is left, unless the caller rules it out.
    model = _heads(["batch", "seq", 384])
    may_be_0 = "element 0 of its shape is dim 0 of 'x' ('batch'), which may be 0 (for an empty input; "
    assert _verdicts(model) == {"node_view": (False, may_be_0 + "--assume-nonempty-inputs rules that out)")}
    empty = {"x": np.zeros((0, 5, 384), np.float32)}
    assert run_model(model, empty)[0].shape == (0, 5, 6, 64)
    with pytest.raises(Exception, match="cannot be reshaped to the requested shape"):
        run_model(clear_allowzero(model, nonempty_inputs=True)[0], empty)
    assert _verdicts(model, nonempty_inputs=True) == {
        "node_view": (True, "allowzero 1 -> 0: no element of its shape can be 0 for nonempty inputs")
    }
    assert _verdicts(_heads([2, 0, 384])) == {  # a static dim of 0 is a 0
        "node_view": (False, "element 1 of its shape is 0 (dim 1 of 'x'): allowzero=1 makes that dim 0")
    }


def test_a_dim_that_may_be_0_whatever_the_inputs_and_a_shape_not_followed_leave_the_node_alone():
    nonzero = [
        h.make_node("NonZero", ["x"], ["where"], name="nonzero"),  # [1, count]: count may be 0
        h.make_node("Shape", ["where"], ["s"], name="shape"),
        h.make_node("Reshape", ["x", "s"], ["y"], name="by_count", allowzero=1),
        h.make_node("Add", ["flat", "flat"], ["doubled"], name="add"),
        h.make_node("Reshape", ["x", "doubled"], ["z"], name="by_sum", allowzero=1),
        h.make_node("Reshape", ["x", "flat"], ["w"], name="plain"),
    ]  # allowzero 0: no verdict
    model = _model(nonzero, ["n"], [_ints([-1], "flat")], outputs=("y", "z", "w"))
    verdicts = _verdicts(model, nonempty_inputs=True)
    by_count = r"element 1 of its shape is dim 1 of 'where'( \('\w+'\))?, which may be 0"  # not an input's dim
    assert verdicts["by_count"][0] is False and re.fullmatch(by_count, verdicts["by_count"][1])
    assert verdicts["by_sum"] == (
        False,
        "its shape 'doubled' comes from Add 'add', which this rewrite does not "
        "follow: whether an element may be 0 is not known",
    )
    assert "plain" not in verdicts


def test_convert_reshape_allowzero_0_says_per_node_what_it_did(tmp_path, capsys):
    source, target = tmp_path / "heads.onnx", tmp_path / "out.onnx"
    onnx.save(_heads(["batch", "seq", 384]), source)
    assert main(["convert", str(source), "-o", str(target), "--reshape-allowzero-0"]) == 0
    printed = capsys.readouterr().out
    assert (
        "Set allowzero=0 on 0 of 1 Reshape node with allowzero=1.\n  left as it was: node 'node_view' (Reshape, "
        "graph 'g'): element 0 of its shape is dim 0 of 'x' ('batch'), which may be 0" in printed
    )
    arguments = ["convert", str(source), "-o", str(target), "--reshape-allowzero-0", "--assume-nonempty-inputs"]
    assert main(arguments) == 0
    assert "  node 'node_view' (Reshape, graph 'g'): allowzero 1 -> 0: " in capsys.readouterr().out
    assert [a.i for a in onnx.load(target).graph.node[-1].attribute] == [0]
    assert main(["convert", str(source), "-o", str(target), "--assume-nonempty-inputs"]) == 2
    assert "--assume-nonempty-inputs is a word for --reshape-allowzero-0" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        (
            "RUN: Non-zero status code returned while running Reshape node. Name:'view' Status Message: "
            "MLOperatorAuthorImpl.cpp(2597) 8007023E",
            "Reshape 'view' has allowzero=1, which DirectML fails on",
        ),
        (
            "CREATE_SESSION: Exception during initialization: "
            "MLOperatorAuthorImpl.cpp(2853) 80070057 Invalid parameter.",
            "the model has 1 Reshape with allowzero=1, which DirectML fails on at session creation",
        ),
        ("RUN: Non-zero status code returned while running Neg node. Name:'after' 8007023E", None),
    ],
)
def test_the_hint_points_a_directml_failure_on_a_reshape_with_allowzero_1_to_the_option(message, expected):
    feeds = Feeds({"x": np.zeros(6, np.float32)}, frozenset(), seed=0)
    hint = failure_hint(DirectMlError(message), "dml", _view(["n"], "Neg"), feeds, InputChoice())
    assert hint.endswith("'Known DirectML failures'")
    assert ("convert --reshape-allowzero-0" in hint) == (expected is not None)
    assert expected is None or expected in hint
    plain = _model([h.make_node("Reshape", ["x", "flat"], ["y"], name="view")], ["n"], [_ints([-1], "flat")])
    assert "allowzero" not in failure_hint(DirectMlError(message), "dml", plain, feeds, InputChoice())


# What real DirectML 1.15.4 (ONNX Runtime 1.24.4) answered, the same on every run: a -1 with allowzero=1 fails at
# session creation where the input's dims are fixed, and when it runs where they are symbolic, with a code that
# depends on what takes the Reshape's output.
FAILURES = [
    ([6], None, SessionCreationError, r"MLOperatorAuthorImpl\.cpp\(2853\).* 80070057 Invalid parameter\."),
    (
        ["n"],
        None,
        DirectMlError,
        r"running Reshape node\. Name:'view'.*MLOperatorAuthorImpl\.cpp\(2597\).* 8007000E "
        r"Out of memory\.",
    ),
    (["n"], "Neg", DirectMlError, r"running Reshape node\. Name:'view'.*MLOperatorAuthorImpl\.cpp\(2597\).* 8007023E"),
]


@pytest.mark.directml
@pytest.mark.parametrize(("dims", "after", "kind", "message"), FAILURES, ids=["fixed", "symbolic", "consumed"])
def test_directml_fails_on_allowzero_1_with_a_minus_1_and_runs_it_rewritten(tmp_path, dims, after, kind, message):
    require_directml(wine=True)  # the codes were measured under Wine
    dml = backends.create("dml")
    model = _view(dims, after)
    onnx.save(model, tmp_path / "view.onnx")
    x = np.arange(6, dtype=np.float32)
    with pytest.raises(kind, match=message) as failed:
        dml.run(backends.Model(tmp_path / "view.onnx", model), {"x": x})
    assert type(failed.value) is kind
    rewritten, changes = clear_allowzero(model)
    assert [change.changed for change in changes] == [True]
    onnx.save(rewritten, tmp_path / "rewritten.onnx")
    outputs = dml.run(backends.Model(tmp_path / "rewritten.onnx", rewritten), {"x": x}).outputs
    assert outputs["y"].tolist() == (-x if after == "Neg" else x).tolist()


@pytest.mark.directml
def test_run_on_real_directml_points_a_failing_reshape_to_the_option(tmp_path, capsys):
    require_directml(wine=True)  # natively, ONNX Runtime's own errors
    onnx.save(_heads(["batch", "seq", 384]), tmp_path / "heads.onnx")
    assert main(["run", str(tmp_path / "heads.onnx"), "--backend", "dml", "--shape", "x:2x5x384"]) == 1
    error = capsys.readouterr().err
    assert (
        "Reshape 'node_view' has allowzero=1, which DirectML fails on with a -1 in the shape: `onnx-gather "
        "convert --reshape-allowzero-0`" in error
    )
