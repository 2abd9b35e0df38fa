"""Models whose backends differ by float32 rounding alone, each with its inputs (deterministic, from fixed seeds).

Made at build time, never shipped: the weights and inputs come from seeded generators, so a test builds them in
memory (``sys.path`` holding tools/, as tests/test_load.py imports make_broken) and a person writes them with
python tools/rounding_models.py OUT_DIR (NAME.onnx and NAME.npz for each, for ``parity --inputs``).

Each is a small stand-in for a third-party model on which real DirectML and ONNX Runtime's CPU parted by more than
parity's 1e-5 with neither wrong: they sum in other orders, or the CPU folds a BatchNormalization into its Conv.

* ``mel_frontend``: a log-mel front end, the STFT as one Conv of cos and sin kernels (Whisper's n_fft 400, hop 160);
* ``global_mean``: a GlobalAveragePool over a 1x64x512x512 map of positive values;
* ``cqt_frontend``: a constant-Q bank, a Conv pair (real, imaginary kernels) per octave, as a pitch model's front end;
* ``conv_batchnorm``: a stack of Conv, BatchNormalization, Relu on a detector's 1x3x640x640 image.
"""

from __future__ import annotations

import argparse
import itertools
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper

RATE = 16_000  # audio samples a second
OPSET = 17


def _model(name: str, nodes, inputs, outputs, weights: dict[str, np.ndarray], doc: str) -> onnx.ModelProto:
    initializers = [numpy_helper.from_array(value, key) for key, value in weights.items()]
    graph = h.make_graph(nodes, name, inputs, outputs, initializer=initializers)
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", OPSET)], ir_version=10, producer_name="onnx-gather")
    model.doc_string = doc.splitlines()[0]
    onnx.checker.check_model(model, full_check=True)
    return model


def _audio(seed: int, seconds: float, tones: list[tuple[float, float]], noise: float) -> np.ndarray:
    """Tones (frequency in Hz, amplitude) with a little noise, as float32 of shape [1, 1, samples]."""
    rng = np.random.default_rng(seed)
    time = np.arange(int(seconds * RATE)) / RATE
    signal = noise * rng.standard_normal(time.size)
    for frequency, amplitude in tones:
        signal += amplitude * np.sin(2 * np.pi * frequency * time + rng.uniform(0, 2 * np.pi))
    return signal.astype(np.float32).reshape(1, 1, -1)


def _mel_filters(bins: int, mels: int, n_fft: int) -> np.ndarray:
    """Triangular filters on the HTK mel scale, each with a peak of 1: [mels, bins]."""
    to_mel = lambda hz: 2595 * np.log10(1 + hz / 700)  # noqa: E731
    edges = 700 * (10 ** (np.linspace(to_mel(0), to_mel(RATE / 2), mels + 2) / 2595) - 1)
    frequencies = np.arange(bins) * RATE / n_fft
    rising = (frequencies[None, :] - edges[:-2, None]) / (edges[1:-1] - edges[:-2])[:, None]
    falling = (edges[2:, None] - frequencies[None, :]) / (edges[2:] - edges[1:-1])[:, None]
    return np.maximum(0, np.minimum(rising, falling))


def mel_frontend() -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """A log-mel front end: STFT as a Conv of cos/sin kernels, power, a mel MatMul, Log(x + 1e-10).

    Input ``audio`` FLOAT [1, 1, 16000] (1 s at 16 kHz: tones of amplitude up to 6, noise 1e-3); output ``log_mel``
    FLOAT [1, 80, 101]. The power reaches about 5e5, and the bins far from the tones hold what is left of sums of 400
    products of that size: their few significant bits are what every backend rounds otherwise.
    """
    n_fft, hop, mels = 400, 160, 80
    bins = n_fft // 2 + 1
    window = 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(n_fft) / n_fft)  # periodic Hann
    phase = 2 * np.pi * np.outer(np.arange(bins), np.arange(n_fft)) / n_fft
    kernels = np.concatenate([window * np.cos(phase), -window * np.sin(phase)])[:, None, :].astype(np.float32)
    weights = {
        "stft_kernels": kernels,  # [2 * bins, 1, n_fft]: the real parts, then the imaginary ones
        "split": np.array([bins, bins], np.int64),
        "mel_filters": _mel_filters(bins, mels, n_fft).astype(np.float32),
        "floor": np.array(1e-10, np.float32),
    }
    nodes = [
        h.make_node("Conv", ["audio", "stft_kernels"], ["stft"], name="stft", strides=[hop], pads=[n_fft // 2] * 2),
        h.make_node("Split", ["stft", "split"], ["real", "imaginary"], name="split", axis=1),
        h.make_node("Mul", ["real", "real"], ["real_squared"], name="real_squared"),
        h.make_node("Mul", ["imaginary", "imaginary"], ["imaginary_squared"], name="imaginary_squared"),
        h.make_node("Add", ["real_squared", "imaginary_squared"], ["power"], name="power"),
        h.make_node("MatMul", ["mel_filters", "power"], ["mel"], name="mel"),
        h.make_node("Add", ["mel", "floor"], ["mel_floored"], name="floor"),
        h.make_node("Log", ["mel_floored"], ["log_mel"], name="log"),
    ]
    audio = _audio(400, 1.0, [(440.0, 6.0), (1230.0, 2.0), (3100.0, 0.5)], 1e-3)
    frames = audio.shape[-1] // hop + 1
    model = _model(
        "mel_frontend",
        nodes,
        [h.make_tensor_value_info("audio", T.FLOAT, list(audio.shape))],
        [h.make_tensor_value_info("log_mel", T.FLOAT, [1, mels, frames])],
        weights,
        mel_frontend.__doc__,
    )
    return model, {"audio": audio}


def global_mean() -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """A GlobalAveragePool over a 1x64x512x512 map of positive values: per channel an offset and a little variation.

    Input ``features`` FLOAT [1, 64, 512, 512] (per channel an offset from uniform [0.5, 2), plus 0.01 times uniform
    [0, 1)); output ``mean`` FLOAT [1, 64, 1, 1]. Each mean is of 262,144 nearly equal values: added one after another
    in float32, each addition rounds the same way, so the sum drifts from the exact one (ONNX Runtime's CPU, by up to
    about 2e-3 relative), where a summation in parts stays within about 1e-7.
    """
    channels, side = 64, 512
    rng = np.random.default_rng(512)
    offsets = rng.uniform(0.5, 2, (1, channels, 1, 1))
    features = (offsets + 0.01 * rng.random((1, channels, side, side))).astype(np.float32)
    nodes = [h.make_node("GlobalAveragePool", ["features"], ["mean"], name="pool")]
    model = _model(
        "global_mean",
        nodes,
        [h.make_tensor_value_info("features", T.FLOAT, list(features.shape))],
        [h.make_tensor_value_info("mean", T.FLOAT, [1, channels, 1, 1])],
        {},
        global_mean.__doc__,
    )
    return model, {"features": features}


def cqt_frontend() -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """A constant-Q front end: per octave a Conv pair (real, imaginary kernels), magnitude, Log(magnitude + 1e-6).

    Input ``audio`` FLOAT [1, 1, 16000]; output ``log_cqt`` FLOAT [1, 60, 100] (5 octaves of 12 bins from 65.4 Hz,
    hop 160). Each octave's kernels are as long as its lowest bin needs (Q = 1 / (2^(1/12) - 1): 4,111 samples down
    to 259), centred, with a Hann window.
    """
    octaves, per_octave, lowest, hop = 5, 12, 65.406, 160
    quality = 1 / (2 ** (1 / per_octave) - 1)
    nodes, weights, parts = [], {}, []
    for octave in range(octaves):
        frequencies = lowest * 2 ** (octave + np.arange(per_octave) / per_octave)
        length = int(np.ceil(quality * RATE / frequencies[0])) | 1  # odd: centred, every octave has the same frames
        kernels = np.zeros((2, per_octave, 1, length))
        for k, frequency in enumerate(frequencies):
            size = int(np.ceil(quality * RATE / frequency)) | 1
            offset = np.arange(size) - size // 2
            window = 0.5 + 0.5 * np.cos(2 * np.pi * offset / size)
            phase = 2 * np.pi * frequency * offset / RATE
            start = (length - size) // 2
            kernels[0, k, 0, start : start + size] = window * np.cos(phase) / size
            kernels[1, k, 0, start : start + size] = window * np.sin(phase) / size
        for part, name in enumerate(("real", "imaginary")):
            weights[f"octave{octave}_{name}_kernels"] = kernels[part].astype(np.float32)
            nodes.append(
                h.make_node(
                    "Conv",
                    ["audio", f"octave{octave}_{name}_kernels"],
                    [f"octave{octave}_{name}"],
                    name=f"octave{octave}_{name}",
                    strides=[hop],
                    pads=[length // 2] * 2,
                )
            )
            nodes.append(
                h.make_node(
                    "Mul",
                    [f"octave{octave}_{name}"] * 2,
                    [f"octave{octave}_{name}_squared"],
                    name=f"octave{octave}_{name}_squared",
                )
            )
        nodes.append(
            h.make_node(
                "Add",
                [f"octave{octave}_real_squared", f"octave{octave}_imaginary_squared"],
                [f"octave{octave}_power"],
                name=f"octave{octave}_power",
            )
        )
        parts.append(f"octave{octave}_power")
    weights["floor"] = np.array(1e-6, np.float32)
    nodes += [
        h.make_node("Concat", parts, ["power"], name="octaves", axis=1),
        h.make_node("Sqrt", ["power"], ["magnitude"], name="magnitude"),
        h.make_node("Add", ["magnitude", "floor"], ["magnitude_floored"], name="floor"),
        h.make_node("Log", ["magnitude_floored"], ["log_cqt"], name="log"),
    ]
    audio = _audio(60, 1.0, [(110.0, 0.8), (220.0, 0.4), (330.0, 0.3), (987.8, 0.2)], 1e-3)
    frames = (audio.shape[-1] - 1) // hop + 1
    model = _model(
        "cqt_frontend",
        nodes,
        [h.make_tensor_value_info("audio", T.FLOAT, list(audio.shape))],
        [h.make_tensor_value_info("log_cqt", T.FLOAT, [1, octaves * per_octave, frames])],
        weights,
        cqt_frontend.__doc__,
    )
    return model, {"audio": audio}


def conv_batchnorm() -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """A detector's stem: four Conv (3x3, stride 2), each followed by a BatchNormalization and (but the last) a Relu.

    Input ``images`` FLOAT [1, 3, 640, 640] (uniform [0, 1)); output ``features`` FLOAT [1, 64, 40, 40]. ONNX
    Runtime's CPU folds each BatchNormalization into its Conv (weights scaled, rounded to float32); the variances
    are small (scales up to about 30), so the Conv's rounding is magnified.
    """
    rng = np.random.default_rng(640)
    widths = [3, 16, 32, 64, 64]
    nodes, weights, value = [], {}, "images"
    for layer, (before, after) in enumerate(itertools.pairwise(widths)):
        fan_in = before * 9
        weights[f"conv{layer}_weight"] = (rng.standard_normal((after, before, 3, 3)) / np.sqrt(fan_in)).astype(
            np.float32
        )
        weights[f"conv{layer}_bias"] = (0.1 * rng.standard_normal(after)).astype(np.float32)
        weights[f"bn{layer}_scale"] = rng.uniform(0.5, 1.5, after).astype(np.float32)
        weights[f"bn{layer}_bias"] = (0.1 * rng.standard_normal(after)).astype(np.float32)
        weights[f"bn{layer}_mean"] = (0.2 * rng.standard_normal(after)).astype(np.float32)
        weights[f"bn{layer}_var"] = rng.uniform(1e-3, 1e-1, after).astype(np.float32)
        nodes.append(
            h.make_node(
                "Conv",
                [value, f"conv{layer}_weight", f"conv{layer}_bias"],
                [f"conv{layer}"],
                name=f"conv{layer}",
                kernel_shape=[3, 3],
                strides=[2, 2],
                pads=[1, 1, 1, 1],
            )
        )
        names = [f"bn{layer}_{part}" for part in ("scale", "bias", "mean", "var")]
        nodes.append(h.make_node("BatchNormalization", [f"conv{layer}", *names], [f"bn{layer}"], name=f"bn{layer}"))
        value = f"bn{layer}"
        if layer < len(widths) - 2:
            nodes.append(h.make_node("Relu", [value], [f"relu{layer}"], name=f"relu{layer}"))
            value = f"relu{layer}"
    nodes[-1].output[0] = "features"
    images = np.random.default_rng(641).random((1, 3, 640, 640)).astype(np.float32)
    model = _model(
        "conv_batchnorm",
        nodes,
        [h.make_tensor_value_info("images", T.FLOAT, list(images.shape))],
        [h.make_tensor_value_info("features", T.FLOAT, [1, widths[-1], 40, 40])],
        weights,
        conv_batchnorm.__doc__,
    )
    return model, {"images": images}


BUILDERS = {builder.__name__: builder for builder in (mel_frontend, global_mean, cqt_frontend, conv_batchnorm)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="the folder to write NAME.onnx and NAME.npz into")
    parser.add_argument("names", nargs="*", choices=[[], *BUILDERS], help="the models (default: all)")
    arguments = parser.parse_args()
    arguments.out.mkdir(parents=True, exist_ok=True)
    for name in arguments.names or BUILDERS:
        model, feeds = BUILDERS[name]()
        onnx.save(model, arguments.out / f"{name}.onnx")
        np.savez(arguments.out / f"{name}.npz", **feeds)
        print(f"wrote {name}.onnx ({(arguments.out / f'{name}.onnx').stat().st_size} bytes): {model.doc_string}")


if __name__ == "__main__":
    main()
