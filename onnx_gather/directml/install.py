"""``onnx-gather setup-directml``: prepare real DirectML on a Debian-like machine, and ``--check`` it.

Steps, each skipped when already done (a second run changes nothing):

1. System packages (``packages``).
2. The three DLLs of the pinned ``onnxruntime-directml`` win_amd64 wheel, downloaded with pip from the
   package registry and checked against its SHA-256.
3. ``runner.exe`` and ``direct.exe``, compiled from the package's ``runner.c`` and ``direct.c`` (both include its
   ``protocol.h``), and ``d3d12.dll``: vkd3d 1.14 with DXIL (shader model 6) switched on, from the Wine 10 source of
   Debian 13, downloaded with apt (a private apt configuration with a deb-src line for trixie: nothing of trixie is
   installed) and checked against its SHA-256, built by the package's ``d3d12/build.sh`` with our D3D12 entry points
   and two fixes (meta commands enumerated; a shader-visible descriptor heap's Vulkan descriptor sets of the heap's
   own size); and from the same source, with two more patches, a second ``d3d12.dll`` whose device has native 16-bit
   shader ops (shader model 6.2, as most GPUs), in ``native16/`` beside hard links to the other DLLs and the programs.
4. A Wine prefix (``wineboot -i``).

Everything but the system packages goes to the cache folder (``Layout``); each part is built beside its
final place and moved there when complete, so a failure leaves nothing half-installed. state.json records each placed
file's SHA-256 (``fingerprints``): ``--check`` names a file that differs, and set-up places its part again.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable, Collection
from importlib import resources
from pathlib import Path
from typing import TextIO

from onnx_gather.directml import fingerprints, probes
from onnx_gather.directml.layout import (
    D3D12_DLLS,
    DLLS,
    LINKED,
    NATIVE16_FOLDER,
    ORT_DIRECTML_VERSION,
    PARTS,
    PROGRAMS,
    SETUP_COMMAND,
    WHEEL,
    WHEEL_SHA256,
    WINE,
    WINE_SOURCE,
    WINE_SOURCE_SHA256,
    WINESERVER,
    Layout,
    SetupError,
    d3d12_files,
    d3d12_hash,
    pinned_dlls,
    program_files,
    source_hash,
    wine_environment,
)
from onnx_gather.directml.packages import install_packages
from onnx_gather.graphs.model_io import write_bytes

TRIXIE_SOURCES = (
    "deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian trixie main\n"
)
COMPILER = "x86_64-w64-mingw32-gcc"


def _replace(final: Path, build: Callable[[Path], None]) -> None:
    """Build into a fresh folder beside ``final``, then put it in ``final``'s place."""
    final.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{final.name}-", dir=final.parent))
    try:
        build(staging)
        old = final.with_name(f".{final.name}-old")
        shutil.rmtree(old, ignore_errors=True)
        if final.exists():
            final.rename(old)
        staging.rename(final)
        shutil.rmtree(old, ignore_errors=True)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _version_resource(dll: Path, key: str = "FileVersion") -> str:
    """A string of a DLL's version resource, e.g. DirectML.dll's FileVersion "1.15.4+241025-1615...."."""
    data = dll.read_bytes()
    at = data.find(key.encode("utf-16-le") + b"\0\0")
    if at < 0:
        return "unknown"
    at += 2 * len(key) + 2
    while data[at : at + 2] == b"\0\0":
        at += 2
    end = at
    while data[end : end + 2] != b"\0\0":
        end += 2
    return data[at:end].decode("utf-16-le", "replace").strip()


def _download_dlls(folder: Path, out: TextIO) -> None:
    with tempfile.TemporaryDirectory() as download:
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--no-deps",
                "--only-binary=:all:",
                "--platform",
                "win_amd64",
                "--python-version",
                "3.11",
                "--disable-pip-version-check",
                "-d",
                download,
                f"onnxruntime-directml=={ORT_DIRECTML_VERSION}",
            ],
            capture_output=True,
            text=True,
        )
        wheel = Path(download) / WHEEL
        if done.returncode != 0 or not wheel.is_file():
            last = (done.stderr.strip() or done.stdout.strip() or "no output").splitlines()[-1]
            raise SetupError(
                f"cannot download onnxruntime-directml {ORT_DIRECTML_VERSION} (win_amd64) from the "
                f"package registry: {last}"
            )
        digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
        if digest != WHEEL_SHA256:
            raise SetupError(f"{WHEEL} has SHA-256 {digest}, not the pinned {WHEEL_SHA256}")
        with zipfile.ZipFile(wheel) as archive:
            for dll in DLLS:
                (folder / dll).write_bytes(archive.read(f"onnxruntime/capi/{dll}"))
    print(f"  onnxruntime-directml {ORT_DIRECTML_VERSION}: downloaded, SHA-256 checked", file=out)


def _compile(folder: Path, name: str, out: TextIO) -> None:
    """One of the Windows programs (``PROGRAMS``): <name>.c (with ``PROTOCOL``) compiled into <name>.exe in
    ``folder``."""
    files = program_files(name)
    with tempfile.TemporaryDirectory(prefix="onnx-gather-compile-") as sources:
        for file, text in files.items():
            (Path(sources) / file).write_bytes(text)
        done = subprocess.run(
            [COMPILER, "-O2", "-Wall", "-o", str(folder / f"{name}.exe"), str(Path(sources) / f"{name}.c")],
            capture_output=True,
            text=True,
        )
    if done.returncode != 0:
        raise SetupError(f"compiling {name}.c failed: {done.stderr.strip().splitlines()[-1]}")
    print(f"  {name}.exe: compiled from {' and '.join(files)}", file=out)


def _wine_source(folder: Path) -> Path:
    """Debian's Wine 10 source tarball, downloaded with apt from trixie's deb-src into ``folder``, SHA-256 checked."""
    (folder / "lists" / "partial").mkdir(parents=True)
    (folder / "sources.list").write_text(TRIXIE_SOURCES)
    private = [
        "-o",
        f"Dir::Etc::SourceList={folder / 'sources.list'}",
        "-o",
        "Dir::Etc::SourceParts=/dev/null",
        "-o",
        f"Dir::State::Lists={folder / 'lists'}",
    ]
    for arguments in (["update", "-q"], ["source", "--download-only", "--tar-only", "-q", "wine"]):
        done = subprocess.run(["apt-get", *private, *arguments], cwd=folder, capture_output=True, text=True)
        if done.returncode != 0:
            last = (done.stderr.strip() or done.stdout.strip() or "no output").splitlines()[-1]
            raise SetupError(f"cannot download Wine 10's source from Debian's trixie: apt-get {arguments[0]}: {last}")
    tarball = folder / WINE_SOURCE
    digest = hashlib.sha256(tarball.read_bytes()).hexdigest() if tarball.is_file() else "none (not downloaded)"
    if digest != WINE_SOURCE_SHA256:
        raise SetupError(f"{WINE_SOURCE} has SHA-256 {digest}, not the pinned {WINE_SOURCE_SHA256}")
    return tarball


def _build_d3d12(folder: Path, out: TextIO) -> None:
    """Both of ``D3D12_DLLS`` into ``folder``."""
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="onnx-gather-d3d12-") as work, resources.as_file(d3d12_files()) as files:
        tarball = _wine_source(Path(work) / "source")
        done = subprocess.run(
            [
                "bash",
                str(files / "build.sh"),
                str(tarball),
                str(Path(work) / "build"),
                *(str(folder / dll) for dll in D3D12_DLLS),
            ],
            capture_output=True,
            text=True,
        )
    if done.returncode != 0 or not all((folder / dll).is_file() for dll in D3D12_DLLS):
        last = (done.stderr.strip() or done.stdout.strip() or "no output").splitlines()[-1]
        raise SetupError(f"building d3d12.dll (vkd3d 1.14) failed: {last}")
    print(
        f"  d3d12.dll: vkd3d 1.14 with DXIL, and {NATIVE16_FOLDER}/d3d12.dll with native 16-bit shader ops, built "
        f"in {time.perf_counter() - start:.0f} s",
        file=out,
    )


def _what_is_known(layout: Layout, out: TextIO) -> dict:
    """What set-up recorded; where state.json is not what set-up writes (lost, damaged, an older set-up's), what can
    still be told: the DLLs by their pinned SHA-256, and the programs and d3d12.dll where it still names this version's
    sources as theirs (as recorded, else as they are); the rest is placed again."""
    state, trouble = layout.read_state()
    if trouble is None:
        return state
    print(f"  {trouble}: checking each file again", file=out)
    files: dict[str, object] = {**pinned_dlls()}
    known = {**state, "files": files}
    recorded = state.get("files") if isinstance(state.get("files"), dict) else {}
    for part in PARTS.keys() - layout.outdated(known).keys() - {"DLLs"}:
        for name in PARTS[part]:
            if fingerprints.is_record(recorded.get(name)):
                files[name] = recorded[name]
            elif (layout.bin / name).is_file():
                files[name] = fingerprints.record(layout.bin / name)
    return known


def _place(layout: Layout, stale: Collection[str], out: TextIO) -> None:
    """A new ``layout.bin``: the ``stale`` parts downloaded or built again, the others copied, native16/'s links."""

    def build(folder: Path) -> None:
        (folder / NATIVE16_FOLDER).mkdir()
        linked = {f"{NATIVE16_FOLDER}/{name}" for name in LINKED}
        for part in PARTS.keys() - set(stale):
            for name in set(PARTS[part]) - linked:
                shutil.copy2(layout.bin / name, folder / name)
        if "DLLs" in stale:
            _download_dlls(folder, out)
        for name in PROGRAMS:
            if name in stale:
                _compile(folder, name, out)
        if "d3d12" in stale:
            _build_d3d12(folder, out)
        for name in LINKED:  # all the native 16-bit device needs besides its d3d12.dll
            os.link(folder / name, folder / NATIVE16_FOLDER / name)

    _replace(layout.bin, build)


def install_binaries(layout: Layout, out: TextIO) -> dict[str, object]:
    """Steps 2 and 3: the DLLs, the programs and d3d12.dll in ``layout.bin``, each part (``PARTS``) placed again
    where it is not this version's or one of its files differs from what set-up recorded; then state.json, which it
    returns. The sources' hashes are taken before anything is built, so that a source edited while set-up runs is
    built again by the next set-up."""
    sources = {f"{name}_source_sha256": source_hash(name) for name in PROGRAMS}
    known = _what_is_known(layout, out)
    stale = layout.outdated(known)
    damaged = layout.damaged(known, PARTS.keys() - stale.keys(), full=True)
    for line in damaged.values():
        print(f"  {line}: placing it again", file=out)
    stale.update({part: "damaged" for part, names in PARTS.items() if any(name in damaged for name in names)})
    if stale:
        _place(layout, stale.keys(), out)
    else:
        print(
            f"  onnxruntime-directml {ORT_DIRECTML_VERSION}, runner.exe, direct.exe and d3d12.dll: in place", file=out
        )
    state = {
        "onnxruntime": ORT_DIRECTML_VERSION,
        "directml": _version_resource(layout.bin / "DirectML.dll"),
        **sources,
        "d3d12": "vkd3d 1.14 (Debian's Wine 10 source) with DXIL, descriptor heaps' Vulkan descriptor sets of each "
        "heap's size (d3d12/enumerate-meta-commands.patch, d3d12/heap-sized-set-layouts.patch)",
        "d3d12_native16": "vkd3d 1.14 with DXIL, native 16-bit shader ops and shader model 6.2 claimed, structured "
        "buffers of byte stride 2 as 16-bit texel buffers (d3d12/native-16-bit.patch, d3d12/structured-stride-2.patch)",
        "d3d12_source_sha256": d3d12_hash(),
        "files": {name: fingerprints.record(layout.bin / name) for names in PARTS.values() for name in names},
    }
    if state != layout.state():
        write_bytes(layout.state_file, (json.dumps(state, indent=2) + "\n").encode())
    return state


def make_prefix(layout: Layout, out: TextIO) -> None:
    """Step 4: the Wine prefix (``wineboot -i``, seconds), unless it is there."""
    if (layout.prefix / "system.reg").is_file():
        print(f"  Wine prefix: in place ({layout.prefix})", file=out)
        return

    def build(folder: Path) -> None:
        with tempfile.TemporaryDirectory(prefix="onnx-gather-wineboot-") as temporary:
            environment = wine_environment(folder, Path(temporary))
            try:
                subprocess.run([WINE, "wineboot", "-i"], env=environment, capture_output=True, timeout=300, check=False)
                subprocess.run([WINESERVER, "-w"], env=environment, timeout=60, check=False)
            finally:
                subprocess.run([WINESERVER, "-k"], env=environment, capture_output=True, timeout=60, check=False)
        if not (folder / "system.reg").is_file():
            raise SetupError(f"wineboot did not make a Wine prefix in {folder}")

    _replace(layout.prefix, build)
    print(f"  Wine prefix: made ({layout.prefix})", file=out)


def _versions(layout: Layout) -> str:
    versions = layout.versions()
    return (
        f"ONNX Runtime {versions['onnxruntime-directml']} with DirectML {versions['directml']}, "
        f"wine-{versions['wine']}, Mesa {versions['mesa']}"
    )


def check_setup(layout: Layout, out: TextIO) -> int:
    """``--check``: 0 if real DirectML is ready (a probe runs on it through each program), else 2 with what is
    missing."""
    problems = layout.problems(full=True)
    if problems:
        for problem in problems:
            print(f"not ready: {problem}", file=out)
        print(f"Run `{SETUP_COMMAND}` (as root) to set it up.", file=out)
        return 2
    print(f"ready: {_versions(layout)}; cache {layout.home}", file=out)
    probes.run_probes(layout, out)
    return 0


def setup(layout: Layout, out: TextIO) -> int:
    """Every step in order; 0 when real DirectML is ready, else raises SetupError."""
    start = time.perf_counter()
    print(f"Setting up real DirectML in {layout.home}", file=out)
    install_packages(out)
    install_binaries(layout, out)
    make_prefix(layout, out)
    print(f"ready: {_versions(layout)}", file=out)
    probes.run_probes(layout, out)
    print(f"Set-up took {time.perf_counter() - start:.1f} s.", file=out)
    return 0
