"""Where the parts of real DirectML live on this machine, and the versions this project pins."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path, PurePath

from onnx_gather.core.errors import UserError
from onnx_gather.directml import fingerprints

ORT_DIRECTML_VERSION = "1.24.4"
# The win_amd64 wheel for CPython 3.11 on PyPI; only its three DLLs are used.
WHEEL = f"onnxruntime_directml-{ORT_DIRECTML_VERSION}-cp311-cp311-win_amd64.whl"
WHEEL_SHA256 = "96642a787e5a6f33bf043521c0f06eb1eb663f6b830e5862a2026d03f9c90543"
# Its three DLLs, with their SHA-256: set-up checks them against these where state.json cannot tell.
DLL_SHA256 = {
    "onnxruntime.dll": "0a49bb13573807ad309aa9967a46471c07d6495bab5b279d1fad474aefd8ef4b",
    "DirectML.dll": "c07cb8c2f870f0152bfb690f64c4b048e78bbc219efad420a9758fc896cbecb0",
    "onnxruntime_providers_shared.dll": "85cf8642189d1ff9c4bf3c0bc07dd70ee1555fbb554586a3300c865eff7be811",
}
DLLS = tuple(DLL_SHA256)
HOME_VARIABLE = "ONNX_GATHER_DIRECTML_HOME"
WINE = "/usr/lib/wine/wine64"  # Debian's wine64 package puts nothing named wine64 on PATH
WINESERVER = "/usr/lib/wine/wineserver"
SETUP_COMMAND = "onnx-gather setup-directml"
# d3d12.dll: vkd3d 1.14 from the Wine 10 source of Debian 13 (trixie), built with DXIL (shader model 6) switched on;
# and a second one, bin/native16/d3d12.dll, that claims native 16-bit shader ops (d3d12/build.sh).
WINE_SOURCE = "wine_10.0~repack.orig.tar.xz"
WINE_SOURCE_SHA256 = "e87ff2971c9b2e79fc63341f044d7513e66f3c3782b49609746428caa87c6ee6"
D3D12_VARIABLE = "ONNX_GATHER_DIRECTML_D3D12"
NATIVE16 = "vkd3d-1.14-native16"
D3D12_STACKS = {  # the Direct3D 12 under DirectML, chosen per run by $ONNX_GATHER_DIRECTML_D3D12: its DLL override
    "vkd3d-1.14": "d3d12=n,b",  # ours, the default: shader model 6.0, no native 16-bit shader ops
    NATIVE16: "d3d12=n,b",  # ours with native 16-bit shader ops and shader model 6.2, as most GPUs report
    "wine": "d3d12=b",  # Wine 8's built-in one (vkd3d 1.6, shader model 5.1), for comparison
}
NATIVE16_FOLDER = "native16"  # in bin/: hard links to the DLLs and programs of bin/, and its own d3d12.dll
D3D12_DLLS = ("d3d12.dll", f"{NATIVE16_FOLDER}/d3d12.dll")  # what build.sh makes, in bin/
MESA_PACKAGE = "mesa-vulkan-drivers"
MESA_MINIMUM = 25  # bookworm's Mesa 22.3 lacks what vkd3d needs, and DirectML then computes garbage


class SetupError(Exception):
    """Set-up cannot go on; each line of the message is one missing thing and how to get it."""


# The Windows programs set-up compiles, each from <name>.c into <name>.exe: ONNX Runtime's DirectML provider
# (runner), and DirectML's gather operators called directly, without ONNX Runtime (direct).
PROGRAMS = ("runner", "direct")
PROTOCOL = "protocol.h"  # what both programs include: the request loop, the replies, the failure buffer
LINKED = (*DLLS, *(f"{name}.exe" for name in PROGRAMS))  # what native16/ holds as hard links to bin/'s files


def _linked(*names: str) -> tuple[str, ...]:
    return (*names, *(f"{NATIVE16_FOLDER}/{name}" for name in names))


# The files set-up places in bin/ (their hard links in native16/ too), by the part that places them: the DLLs, each
# program, both d3d12.dll. Set-up places a part again where one of its files differs from what it recorded.
PARTS = {"DLLs": _linked(*DLLS), **{name: _linked(f"{name}.exe") for name in PROGRAMS}, "d3d12": D3D12_DLLS}
# What state.json holds: versions, the hashes of what the programs and d3d12.dll were built from, and ``files``,
# each placed file's SHA-256, size and modification time (fingerprints.record).
STATE_KEYS = (
    "onnxruntime",
    "directml",
    *(f"{name}_source_sha256" for name in PROGRAMS),
    "d3d12",
    "d3d12_native16",
    "d3d12_source_sha256",
    "files",
)


def program_source(name: str) -> bytes:
    """The C source of one of ``PROGRAMS``, as installed with the package."""
    return (resources.files("onnx_gather.directml") / f"{name}.c").read_bytes()


def program_files(name: str) -> dict[str, bytes]:
    """What one of ``PROGRAMS`` is compiled from, by file name: ``<name>.c`` and ``PROTOCOL``, as installed."""
    return {
        f"{name}.c": program_source(name),
        PROTOCOL: (resources.files("onnx_gather.directml") / PROTOCOL).read_bytes(),
    }


def d3d12_files() -> Traversable:
    """The folder of d3d12.dll's build script and our sources for it, as installed with the package."""
    return resources.files("onnx_gather.directml") / "d3d12"


def d3d12_hash() -> str:
    """What d3d12.dll is built from: the Wine source's SHA-256 and every file of ``d3d12_files()``."""
    digest = hashlib.sha256(WINE_SOURCE_SHA256.encode())
    pending = [d3d12_files()]
    while pending:
        for entry in sorted(pending.pop().iterdir(), key=lambda e: e.name):
            if entry.is_dir():
                pending.append(entry)
            else:
                digest.update(entry.name.encode() + entry.read_bytes())
    return digest.hexdigest()


def d3d12_stack() -> str:
    """The Direct3D 12 that DirectML runs on: ``$ONNX_GATHER_DIRECTML_D3D12``, else vkd3d 1.14 with DXIL."""
    stack = os.environ.get(D3D12_VARIABLE) or "vkd3d-1.14"
    if stack not in D3D12_STACKS:
        raise UserError(f"${D3D12_VARIABLE}={stack!r}: expected one of {', '.join(D3D12_STACKS)}")
    return stack


@dataclass(frozen=True)
class Layout:
    """The cache folder: ``bin/`` (the DLLs and the programs), ``prefix/`` (the Wine prefix), ``state.json``."""

    home: Path

    @classmethod
    def default(cls) -> Layout:
        """``$ONNX_GATHER_DIRECTML_HOME``, else ``$XDG_CACHE_HOME/onnx-gather/directml`` (``~/.cache`` by default)."""
        if os.environ.get(HOME_VARIABLE):
            return cls(Path(os.environ[HOME_VARIABLE]).expanduser().absolute())
        cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
        return cls(cache.expanduser().absolute() / "onnx-gather" / "directml")

    @property
    def bin(self) -> Path:
        return self.home / "bin"

    @property
    def programs(self) -> Path:
        """Where the programs run, beside the DLLs they load: ``bin/``, or ``bin/native16/`` for ``NATIVE16``."""
        return self.bin / NATIVE16_FOLDER if d3d12_stack() == NATIVE16 else self.bin

    def program(self, name: str) -> Path:
        """One of ``PROGRAMS`` as set-up builds it: ``<name>.exe`` in ``programs``."""
        return self.programs / f"{name}.exe"

    @property
    def prefix(self) -> Path:
        return self.home / "prefix"

    @property
    def state_file(self) -> Path:
        return self.home / "state.json"

    def read_state(self) -> tuple[dict, str | None]:
        """What set-up recorded (``STATE_KEYS``), and where state.json is not what set-up writes, one line saying what
        is wrong with it (with what could be read of it, else {})."""
        try:
            state = json.loads(self.state_file.read_text())
        except FileNotFoundError:
            return {}, (f"{self.state_file} is missing" if self.bin.exists() else None)
        except OSError as error:
            return {}, f"{self.state_file} cannot be read ({error.strerror})"
        except ValueError as error:
            return {}, f"{self.state_file} is not valid JSON ({error})"
        if not isinstance(state, dict):
            return {}, f"{self.state_file} is not a JSON object"
        missing = [key for key in STATE_KEYS if key not in state]
        if missing:
            return state, f"{self.state_file} lacks {', '.join(missing)} (an older set-up wrote it, or it was changed)"
        files = state["files"]
        if not isinstance(files, dict) or not all(fingerprints.is_record(record) for record in files.values()):
            return state, f"{self.state_file} does not record its files as set-up does (sha256, size, mtime_ns)"
        return state, None

    def state(self) -> dict:
        """What set-up recorded: versions, hashes; empty where state.json cannot be read."""
        return self.read_state()[0]

    def outdated(self, state: dict) -> dict[str, str]:
        """The parts (``PARTS``) that ``state`` does not record as this version's, each with its line: the DLLs
        other than the pinned wheel's, the programs and d3d12.dll built from other sources."""
        files = state.get("files", {})
        current = {
            "DLLs": all(files.get(name, {}).get("sha256") == pin["sha256"] for name, pin in pinned_dlls().items()),
            **{name: state.get(f"{name}_source_sha256") == source_hash(name) for name in PROGRAMS},
            "d3d12": state.get("d3d12_source_sha256") == d3d12_hash(),
        }
        lines = {
            "DLLs": f"onnxruntime-directml {ORT_DIRECTML_VERSION}'s DLLs are not in {self.bin}",
            **{
                name: f"{name}.exe is not built from this version's {' and '.join(program_files(name))} in {self.bin}"
                for name in PROGRAMS
            },
            "d3d12": f"d3d12.dll (vkd3d 1.14 with DXIL, and its native 16-bit variant) is not built from this "
            f"version's sources in {self.bin}",
        }
        return {part: line for part, line in lines.items() if not current[part]}

    def damaged(self, state: dict, parts: Iterable[str], full: bool) -> dict[str, str]:
        """Each file of ``parts`` that differs from what ``state`` records of it, with a line saying how; ``full``
        hashes each file, else sizes and modification times are compared (``fingerprints``)."""
        names = [name for part in parts for name in PARTS[part]]
        found = fingerprints.differences(self.bin, names, state.get("files", {}), full)
        return {name: f"{self.bin / name} {how}" for name, how in found.items()}

    def versions(self) -> dict[str, str]:
        """The versions of the parts real DirectML runs on here, as set-up recorded them and Wine and Mesa report."""
        state = self.state()
        wine = subprocess.run([WINE, "--version"], capture_output=True, text=True).stdout.strip()
        return {
            "onnxruntime-directml": state.get("onnxruntime", "?"),
            "directml": state.get("directml", "?"),
            "d3d12": state.get("d3d12_native16" if d3d12_stack() == NATIVE16 else "d3d12", "?"),
            "wine": wine.removeprefix("wine-"),
            "mesa": f"{package_version(MESA_PACKAGE)} (lavapipe)",
        }

    def problems(self, full: bool = False) -> list[str]:
        """What is missing or damaged for real DirectML to run here, one line each; empty when everything is in
        place. ``full`` hashes every file set-up placed (``--check``); else (a runner's start) sizes and times tell."""
        found = system_problems()
        state, trouble = self.read_state()
        if trouble:
            found.append(trouble)
        else:
            outdated = self.outdated(state)
            found += [*outdated.values(), *self.damaged(state, PARTS.keys() - outdated.keys(), full).values()]
        if not (self.prefix / "system.reg").is_file():
            found.append(f"the Wine prefix {self.prefix} is not made")
        return found


def pinned_dlls() -> dict[str, dict[str, str]]:
    """The files of the DLLs' part (``PARTS``), each with its pinned SHA-256 (as ``fingerprints.differences`` takes)."""
    return {name: {"sha256": DLL_SHA256[PurePath(name).name]} for name in PARTS["DLLs"]}


def system_problems() -> list[str]:
    """What of the system packages real DirectML runs on is missing, one line each."""
    found = [
        f"Wine is not installed ({program} is missing)" for program in (WINE, WINESERVER) if not Path(program).is_file()
    ]
    if shutil.which("Xvfb") is None:
        found.append("Xvfb is not installed")
    mesa = package_version(MESA_PACKAGE)
    if mesa is None or mesa_major(mesa) < MESA_MINIMUM:
        found.append(f"Mesa's Vulkan driver {MESA_MINIMUM}+ is not installed ({MESA_PACKAGE}: {mesa or 'none'})")
    return found


def wine_environment(prefix: Path, temporary: Path, **extra: str) -> dict[str, str]:
    """The environment for a Wine program in ``prefix``: quiet, never offering to install Mono or Gecko, and with
    ``temporary`` (an existing folder the caller removes) as its TMPDIR, where the Wine server keeps its socket
    folder (``wine-XXXXXX``), which Wine leaves behind."""
    # No Mono or Gecko installer; no winedbg, which would wait on a crashed process until the time limit; the
    # Direct3D 12 chosen (d3d12_stack); no vkd3d FIXME lines.
    overrides = f"mscoree,mshtml=;winedbg.exe=d;{D3D12_STACKS[d3d12_stack()]}"
    quiet = {"WINEDEBUG": "-all", "WINEDLLOVERRIDES": overrides, "VKD3D_DEBUG": "none", "VKD3D_SHADER_DEBUG": "none"}
    return {**os.environ, "WINEPREFIX": str(prefix), "TMPDIR": str(temporary), **quiet, **extra}


def source_hash(name: str) -> str:
    """The SHA-256 of what a program is compiled from (``program_files``): set-up records it, and a change to its C
    source or to ``PROTOCOL`` means the program is rebuilt."""
    digest = hashlib.sha256()
    for file, text in program_files(name).items():
        digest.update(f"{file} {len(text)}\n".encode() + text)
    return digest.hexdigest()


def package_version(package: str) -> str | None:
    """The installed version of a Debian package, or None (also where there is no dpkg)."""
    try:
        done = subprocess.run(
            ["dpkg-query", "-W", "-f=${db:Status-Abbrev}${Version}", package], capture_output=True, text=True
        )
    except OSError:
        return None
    text = done.stdout.strip()
    return text[3:].strip() if done.returncode == 0 and text.startswith("ii") else None


def mesa_major(version: str) -> int:
    """25 for "25.0.7-2~bpo12+1"; 0 where it cannot be read."""
    head = version.split(":")[-1].split(".")[0]
    return int(head) if head.isdigit() else 0
