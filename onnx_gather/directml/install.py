"""``onnx-gather setup-directml``: prepare real DirectML on a Debian-like machine, and ``--check`` it.

Steps, each skipped when already done (a second run changes nothing):

1. System packages: Wine, Xvfb, mingw-w64's C compiler, and Mesa's Vulkan driver 25 or newer (on Debian 12
   from bookworm-backports, whose apt source is added for it). Needs root and apt.
2. The three DLLs of the pinned ``onnxruntime-directml`` win_amd64 wheel, downloaded with pip from the
   package registry and checked against its SHA-256.
3. ``runner.exe`` and ``direct.exe``, compiled from the package's ``runner.c`` and ``direct.c``, and ``d3d12.dll``:
   vkd3d 1.14 with DXIL (shader model 6) switched on, from the Wine 10 source of Debian 13, downloaded with apt (a
   private apt configuration with a deb-src line for trixie: nothing of trixie is installed) and checked against its
   SHA-256, built by the package's ``d3d12/build.sh`` with our D3D12 entry points and one fix; and from the same
   source, with two more patches, a second ``d3d12.dll`` whose device has native 16-bit shader ops (shader model 6.2,
   as most GPUs), in ``native16/`` beside hard links to the other DLLs and the programs.
4. A Wine prefix (``wineboot -i``).

Everything but the system packages goes to the cache folder (``Layout``); each part is built beside its
final place and moved there when complete, so a failure leaves nothing half-installed.
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
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import TextIO

from onnx_gather.directml import probes
from onnx_gather.directml.layout import (
    D3D12_DLLS,
    DLLS,
    MESA_MINIMUM,
    MESA_PACKAGE,
    NATIVE16_FOLDER,
    ORT_DIRECTML_VERSION,
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
    mesa_major,
    package_version,
    program_source,
    source_hash,
    wine_environment,
)
from onnx_gather.graphs.model_io import write_bytes

# Wine, Xvfb, mingw-w64 for the programs and d3d12.dll, what d3d12.dll's build needs besides, Mesa's Vulkan driver.
PACKAGES = ("wine", "wine64", "xvfb", "gcc-mingw-w64-x86-64", "flex", "bison", "wine64-tools", "libvulkan-dev",
            MESA_PACKAGE)  # fmt: skip
TRIXIE_SOURCES = (
    "deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian trixie main\n"
)
COMPILER = "x86_64-w64-mingw32-gcc"
BACKPORTS_SOURCE = Path("/etc/apt/sources.list.d/onnx-gather-bookworm-backports.sources")


def _os_release() -> dict[str, str]:
    try:
        lines = Path("/etc/os-release").read_text().splitlines()
    except OSError:
        return {}
    pairs = (line.split("=", 1) for line in lines if "=" in line)
    return {key: value.strip().strip('"') for key, value in pairs}


def _missing_packages() -> list[str]:
    missing = [p for p in PACKAGES if p != MESA_PACKAGE and package_version(p) is None]
    mesa = package_version(MESA_PACKAGE)
    if mesa is None or mesa_major(mesa) < MESA_MINIMUM:
        missing.append(MESA_PACKAGE)
    return missing


def _apt(arguments: list[str], out: TextIO) -> None:
    environment = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    done = subprocess.run(["apt-get", *arguments], env=environment, capture_output=True, text=True)
    if done.returncode != 0:
        last = (done.stderr.strip() or done.stdout.strip() or "no output").splitlines()[-1]
        raise SetupError(f"apt-get {' '.join(arguments)} failed: {last}")
    print(f"  apt-get {' '.join(arguments)}: done", file=out)


def _backports_configured(codename: str) -> bool:
    sources = [Path("/etc/apt/sources.list"), *Path("/etc/apt/sources.list.d").glob("*")]
    return any(f"{codename}-backports" in path.read_text(errors="replace") for path in sources if path.is_file())


def install_packages(out: TextIO) -> None:
    """Step 1: the system packages, through apt (root only); nothing to do when they are there."""
    missing = _missing_packages()
    if not missing:
        print(f"  system packages: installed (Mesa {package_version(MESA_PACKAGE)})", file=out)
        return
    release = _os_release()
    problems = []
    if os.geteuid() != 0:
        problems.append(f"root is needed to install {', '.join(missing)}: run `sudo {SETUP_COMMAND}`")
    if shutil.which("apt-get") is None:
        problems.append(
            f"apt-get is not here: install {', '.join(missing)} (Wine 8, Xvfb, mingw-w64's gcc, Mesa {MESA_MINIMUM}+ "
            "Vulkan drivers) with this system's package manager, then run this again"
        )
    if "debian" not in (release.get("ID", "") + " " + release.get("ID_LIKE", "")):
        problems.append(f"this is not Debian-like ({release.get('PRETTY_NAME', 'no /etc/os-release')}); "
                        "the set-up knows Debian 12 and later")  # fmt: skip
    if problems:
        raise SetupError("\n".join(problems))
    codename = release.get("VERSION_CODENAME", "")
    added = False
    if codename == "bookworm" and not _backports_configured(codename):
        BACKPORTS_SOURCE.write_text(
            "Types: deb\nURIs: http://deb.debian.org/debian\nSuites: bookworm-backports\nComponents: main\n"
            "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n"
        )
        added = True
        print(f"  added {BACKPORTS_SOURCE} (Mesa {MESA_MINIMUM} for Debian 12)", file=out)
    try:
        _apt(["update", "-q"], out)
        ordinary = [p for p in missing if p != MESA_PACKAGE]
        if ordinary:
            _apt(["install", "-y", "-q", "--no-install-recommends", *ordinary], out)
        if MESA_PACKAGE in missing:
            suite = ["-t", f"{codename}-backports"] if codename == "bookworm" else []
            _apt(["install", "-y", "-q", "--no-install-recommends", *suite, MESA_PACKAGE], out)
    except SetupError:
        if added:
            BACKPORTS_SOURCE.unlink(missing_ok=True)
        raise
    still = _missing_packages()
    if still:
        raise SetupError(f"after apt-get, still missing or too old: {', '.join(still)} (Mesa {MESA_MINIMUM}+ needed)")


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
            [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--platform", "win_amd64",
             "--python-version", "3.11", "--disable-pip-version-check", "-d", download,
             f"onnxruntime-directml=={ORT_DIRECTML_VERSION}"],
            capture_output=True, text=True,
        )  # fmt: skip
        wheel = Path(download) / WHEEL
        if done.returncode != 0 or not wheel.is_file():
            last = (done.stderr.strip() or done.stdout.strip() or "no output").splitlines()[-1]
            raise SetupError(f"cannot download onnxruntime-directml {ORT_DIRECTML_VERSION} (win_amd64) from the "
                             f"package registry: {last}")  # fmt: skip
        digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
        if digest != WHEEL_SHA256:
            raise SetupError(f"{WHEEL} has SHA-256 {digest}, not the pinned {WHEEL_SHA256}")
        with zipfile.ZipFile(wheel) as archive:
            for dll in DLLS:
                (folder / dll).write_bytes(archive.read(f"onnxruntime/capi/{dll}"))
    print(f"  onnxruntime-directml {ORT_DIRECTML_VERSION}: downloaded, SHA-256 checked", file=out)


def _compile(folder: Path, name: str, out: TextIO) -> None:
    """One of the Windows programs (``PROGRAMS``): <name>.c compiled into <name>.exe in ``folder``."""
    source = folder / f"{name}.c"
    source.write_bytes(program_source(name))
    done = subprocess.run(
        [COMPILER, "-O2", "-Wall", "-o", str(folder / f"{name}.exe"), str(source)], capture_output=True, text=True
    )
    source.unlink()
    if done.returncode != 0:
        raise SetupError(f"compiling {name}.c failed: {done.stderr.strip().splitlines()[-1]}")
    print(f"  {name}.exe: compiled from {name}.c", file=out)


def _wine_source(folder: Path) -> Path:
    """Debian's Wine 10 source tarball, downloaded with apt from trixie's deb-src into ``folder``, SHA-256 checked."""
    (folder / "lists" / "partial").mkdir(parents=True)
    (folder / "sources.list").write_text(TRIXIE_SOURCES)
    private = ["-o", f"Dir::Etc::SourceList={folder / 'sources.list'}", "-o", "Dir::Etc::SourceParts=/dev/null",
               "-o", f"Dir::State::Lists={folder / 'lists'}"]  # fmt: skip
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
            ["bash", str(files / "build.sh"), str(tarball), str(Path(work) / "build"),
             *(str(folder / dll) for dll in D3D12_DLLS)],
            capture_output=True, text=True,
        )  # fmt: skip
    if done.returncode != 0 or not all((folder / dll).is_file() for dll in D3D12_DLLS):
        last = (done.stderr.strip() or done.stdout.strip() or "no output").splitlines()[-1]
        raise SetupError(f"building d3d12.dll (vkd3d 1.14) failed: {last}")
    print(f"  d3d12.dll: vkd3d 1.14 with DXIL, and {NATIVE16_FOLDER}/d3d12.dll with native 16-bit shader ops, built "
          f"in {time.perf_counter() - start:.0f} s", file=out)  # fmt: skip


def install_binaries(layout: Layout, out: TextIO) -> dict[str, str]:
    """Steps 2 and 3: the DLLs, the programs and d3d12.dll in ``layout.bin``; returns what state.json records."""
    state = layout.state()
    have_dlls = all((layout.bin / dll).is_file() for dll in DLLS) and state.get("onnxruntime") == ORT_DIRECTML_VERSION
    have_programs = all(layout.program_is_current(name) for name in PROGRAMS)
    have_d3d12 = layout.d3d12_is_current()
    if have_dlls and have_programs and have_d3d12:
        print(f"  onnxruntime-directml {ORT_DIRECTML_VERSION}, runner.exe, direct.exe and d3d12.dll: in place",
              file=out)  # fmt: skip
        return state

    def build(folder: Path) -> None:
        (folder / NATIVE16_FOLDER).mkdir()
        for dll in (*DLLS, *D3D12_DLLS) if have_dlls else D3D12_DLLS:
            if (layout.bin / dll).is_file():
                shutil.copy2(layout.bin / dll, folder / dll)
        if not have_dlls:
            _download_dlls(folder, out)
        for name in PROGRAMS:
            _compile(folder, name, out)
        if not have_d3d12:
            _build_d3d12(folder, out)
        for name in (*DLLS, *(f"{program}.exe" for program in PROGRAMS)):  # all the native 16-bit device needs
            os.link(folder / name, folder / NATIVE16_FOLDER / name)

    _replace(layout.bin, build)
    return {
        "onnxruntime": ORT_DIRECTML_VERSION,
        "directml": _version_resource(layout.bin / "DirectML.dll"),
        **{f"{name}_source_sha256": source_hash(name) for name in PROGRAMS},
        "d3d12": "vkd3d 1.14 (Debian's Wine 10 source) with DXIL",
        "d3d12_native16": "vkd3d 1.14 with DXIL, native 16-bit shader ops and shader model 6.2 claimed, structured "
        "buffers of byte stride 2 as 16-bit texel buffers (d3d12/native-16-bit.patch, d3d12/structured-stride-2.patch)",
        "d3d12_source_sha256": d3d12_hash(),
    }


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
    return (f"ONNX Runtime {versions['onnxruntime-directml']} with DirectML {versions['directml']}, "
            f"wine-{versions['wine']}, Mesa {versions['mesa']}")  # fmt: skip


def check(layout: Layout, out: TextIO) -> int:
    """``--check``: 0 if real DirectML is ready (a probe runs on it through each program), else 2 with what is
    missing."""
    problems = layout.problems()
    if problems:
        for problem in problems:
            print(f"not ready: {problem}", file=out)
        print(f"Run `{SETUP_COMMAND}` (as root) to set it up.", file=out)
        return 2
    print(f"ready: {_versions(layout)}; cache {layout.home}", file=out)
    probes.run(layout, out)
    return 0


def setup(layout: Layout, out: TextIO) -> int:
    """Every step in order; 0 when real DirectML is ready, else raises SetupError."""
    start = time.perf_counter()
    print(f"Setting up real DirectML in {layout.home}", file=out)
    install_packages(out)
    state = install_binaries(layout, out)
    if state != layout.state():
        write_bytes(layout.state_file, (json.dumps(state, indent=2) + "\n").encode())
    make_prefix(layout, out)
    print(f"ready: {_versions(layout)}", file=out)
    probes.run(layout, out)
    print(f"Set-up took {time.perf_counter() - start:.1f} s.", file=out)
    return 0
