"""``setup-directml`` on a cache of small fake files: what it records of each file it places, what ``--check`` and a
runner's start say of a damaged file or state.json, what set-up places again, and the system packages' step. The
downloads and builds are replaced by writers of fake files, so these run on every machine, in a second."""

from __future__ import annotations

import hashlib
import io
import json
import os
from pathlib import Path

import pytest

from onnx_gather.app import cli
from onnx_gather.directml import install, layout, packages
from onnx_gather.directml.process import RunnerError
from onnx_gather.directml.worker import Runner

DLL_CONTENTS = {name: f"fake {name}".encode() for name in layout.DLLS}


class Cache:
    """A cache folder that set-up fills with fake files, with what it downloaded, compiled or built, in order."""

    def __init__(self, home: Path) -> None:
        self.layout = layout.Layout(home)
        self.built: list[str] = []
        self.out = io.StringIO()

    def download(self, folder: Path, out: object) -> None:
        self.built.append("DLLs")
        for name, contents in DLL_CONTENTS.items():
            (folder / name).write_bytes(contents)

    def compile(self, folder: Path, name: str, out: object) -> None:
        self.built.append(name)
        (folder / f"{name}.exe").write_bytes(f"fake {name}.exe".encode())

    def build_d3d12(self, folder: Path, out: object) -> None:
        self.built.append("d3d12")
        for name in layout.D3D12_DLLS:
            (folder / name).write_bytes(f"fake {name}".encode())

    def install(self) -> dict:
        """install_binaries, with what it printed in ``out`` and what it built in ``built`` (both fresh)."""
        self.built.clear()
        self.out = io.StringIO()
        return install.install_binaries(self.layout, self.out)

    def check(self) -> tuple[int, list[str]]:
        """``setup-directml --check``'s exit code and lines."""
        out = io.StringIO()
        code = install.check_setup(self.layout, out)
        return code, out.getvalue().splitlines()


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Cache:
    """A cache set up with fake files (the DLLs' pinned hashes those of the fakes), on a machine whose system
    packages are in place, where the probes pass."""
    made = Cache(tmp_path / "cache")
    pins = {name: hashlib.sha256(contents).hexdigest() for name, contents in DLL_CONTENTS.items()}
    monkeypatch.setattr(layout, "DLL_SHA256", pins)
    monkeypatch.setattr(layout, "system_problems", lambda: [])
    monkeypatch.setattr(install, "_download_dlls", made.download)
    monkeypatch.setattr(install, "_compile", made.compile)
    monkeypatch.setattr(install, "_build_d3d12", made.build_d3d12)
    monkeypatch.setattr(install, "_version_resource", lambda dll: "1.15.4 (fake)")
    monkeypatch.setattr(install, "_versions", lambda where: "fake versions")
    monkeypatch.setattr(install.probes, "run_probes", lambda where, out: print("probe: ran", file=out))
    (made.layout.prefix).mkdir(parents=True)
    (made.layout.prefix / "system.reg").write_text("fake")
    made.install()
    assert made.built == ["DLLs", *layout.PROGRAMS, "d3d12"]
    return made


def _ready(cache: Cache) -> None:
    assert cache.check() == (0, [f"ready: fake versions; cache {cache.layout.home}", "probe: ran"])


def test_set_up_records_each_file_it_places_and_a_healthy_install_is_ready(cache):
    state = json.loads(cache.layout.state_file.read_text())
    names = [name for part in layout.PARTS.values() for name in part]
    assert sorted(state["files"]) == sorted(names) and len(names) == 12  # native16/'s hard links too
    dll = cache.layout.bin / "native16" / "DirectML.dll"
    assert state["files"]["native16/DirectML.dll"] == {
        "sha256": hashlib.sha256(DLL_CONTENTS["DirectML.dll"]).hexdigest(),
        "size": len(DLL_CONTENTS["DirectML.dll"]),
        "mtime_ns": dll.stat().st_mtime_ns,
    }
    assert dll.samefile(cache.layout.bin / "DirectML.dll")
    _ready(cache)
    before = {path: path.stat().st_mtime_ns for path in [cache.layout.state_file, *cache.layout.bin.rglob("*")]}
    cache.install()
    assert cache.built == [] and "runner.exe, direct.exe and d3d12.dll: in place" in cache.out.getvalue()
    assert {path: path.stat().st_mtime_ns for path in before} == before, "a second set-up changes nothing"


def test_a_truncated_directml_dll_is_named_and_set_up_downloads_the_dlls_again(cache):
    bin_ = cache.layout.bin
    size = len(DLL_CONTENTS["DirectML.dll"])
    with open(bin_ / "DirectML.dll", "r+b") as dll:  # native16/'s hard link with it
        dll.truncate(3)
    names = ("DirectML.dll", "native16/DirectML.dll")
    lines = [f"{bin_ / name} has 3 bytes, not the {size} set-up placed" for name in names]
    assert cache.check() == (
        2,
        [*(f"not ready: {line}" for line in lines), "Run `onnx-gather setup-directml` (as root) to set it up."],
    )
    assert cache.layout.problems() == lines  # a runner's quick check too
    with pytest.raises(RunnerError, match=rf"^real DirectML is not set up \({lines[0]}\): run `onnx-gather setup-di"):
        Runner(cache.layout).start()
    cache.install()
    assert cache.built == ["DLLs"]
    assert [line.strip() for line in cache.out.getvalue().splitlines()[:2]] == [
        f"{line}: placing it again" for line in lines
    ]
    assert (bin_ / "native16" / "DirectML.dll").read_bytes() == DLL_CONTENTS["DirectML.dll"]
    _ready(cache)


def test_a_changed_runner_exe_is_named_and_compiled_again_alone(cache):
    runner = cache.layout.bin / "runner.exe"
    d3d12 = {name: (cache.layout.bin / name).stat().st_mtime_ns for name in layout.D3D12_DLLS}
    runner.write_bytes(runner.read_bytes().upper())  # the same size
    code, lines = cache.check()
    assert code == 2 and len(lines) == 3
    assert lines[0].startswith(f"not ready: {runner} has SHA-256 ") and lines[0].endswith("... set-up placed")
    assert lines[1].startswith(f"not ready: {cache.layout.bin / 'native16' / 'runner.exe'} has SHA-256 ")
    cache.install()
    assert cache.built == ["runner"]
    assert runner.read_bytes() == b"fake runner.exe"
    assert {name: (cache.layout.bin / name).stat().st_mtime_ns for name in layout.D3D12_DLLS} == d3d12
    _ready(cache)


def test_the_quick_check_hashes_a_file_whose_time_changed(cache):
    runner = cache.layout.bin / "runner.exe"
    os.utime(runner, ns=(0, 0))  # as a copy that did not keep times: the same bytes
    assert cache.layout.problems() == []
    runner.write_bytes(b"fake RUNNER.exe")
    os.utime(runner, ns=(0, 0))
    assert cache.layout.problems()[0].startswith(f"{runner} has SHA-256 ")


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ('{"onnxruntime": "1.24', "is not valid JSON (Unterminated string starting at: line 1 column 17 (char 16))"),
        ("[1, 2]", "is not a JSON object"),
        (
            '{"onnxruntime": "1.24.4"}',
            "lacks directml, runner_source_sha256, direct_source_sha256, d3d12, "
            "d3d12_native16, d3d12_source_sha256, files (an older set-up wrote it, or it was changed)",
        ),
        (
            json.dumps({**dict.fromkeys(layout.STATE_KEYS, ""), "files": {"DirectML.dll": "c07cb8c2"}}),
            "does not record its files as set-up does (sha256, size, mtime_ns)",
        ),
    ],
)
def test_a_state_json_that_is_not_set_ups_is_named_and_set_up_writes_it_again(cache, text, says):
    cache.layout.state_file.write_text(text)
    assert cache.check() == (
        2,
        [f"not ready: {cache.layout.state_file} {says}", "Run `onnx-gather setup-directml` (as root) to set it up."],
    )
    cache.install()
    # The DLLs are checked against their pinned hashes; what state.json no longer says was built from which sources
    # is built again.
    assert cache.built == [*layout.PROGRAMS, "d3d12"]
    assert cache.out.getvalue().startswith(f"  {cache.layout.state_file} {says}: checking each file again\n")
    _ready(cache)


def test_an_older_set_ups_state_json_is_completed_without_building_anything(cache):
    state = json.loads(cache.layout.state_file.read_text())
    del state["files"]
    cache.layout.state_file.write_text(json.dumps(state))
    lacks = "lacks files (an older set-up wrote it, or it was changed)"
    assert cache.check()[1][0] == f"not ready: {cache.layout.state_file} {lacks}"
    cache.install()
    assert cache.built == []
    _ready(cache)


def test_a_runner_built_from_another_runner_c_is_not_used_and_set_up_rebuilds_it(cache):
    # A machine set up before runner.c changed: state.json holds the old source's hash.
    state = json.loads(cache.layout.state_file.read_text())
    cache.layout.state_file.write_text(json.dumps({**state, "runner_source_sha256": "0" * 64}))
    where = cache.layout
    assert where.problems() == [f"runner.exe is not built from this version's runner.c and protocol.h in {where.bin}"]
    assert cache.install()["runner_source_sha256"] == layout.source_hash("runner")
    assert cache.built == ["runner"]
    _ready(cache)


def test_a_changed_protocol_h_means_both_programs_are_rebuilt(cache, monkeypatch):
    files = layout.program_files

    def changed(name: str) -> dict[str, bytes]:
        return {**files(name), layout.PROTOCOL: files(name)[layout.PROTOCOL] + b"\n"}

    monkeypatch.setattr(layout, "program_files", changed)
    where = cache.layout
    assert where.problems() == [
        f"{name}.exe is not built from this version's {name}.c and protocol.h in {where.bin}"
        for name in layout.PROGRAMS
    ]
    assert cache.install()["direct_source_sha256"] == layout.source_hash("direct")
    assert cache.built == list(layout.PROGRAMS)
    _ready(cache)


def test_check_without_set_up_names_what_is_missing_and_the_command(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv(layout.HOME_VARIABLE, str(tmp_path / "empty"))
    assert cli.main(["setup-directml", "--check"]) == 2
    out = capsys.readouterr().out
    assert "not ready: onnxruntime-directml 1.24.4's DLLs are not in" in out
    assert "not ready: the Wine prefix" in out
    assert "Run `onnx-gather setup-directml` (as root)" in out


def test_set_up_without_root_or_apt_says_what_is_missing_per_line_and_exits_2(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv(layout.HOME_VARIABLE, str(tmp_path / "cache"))
    monkeypatch.setattr(packages, "package_version", lambda package: None)
    monkeypatch.setattr(packages.os, "geteuid", lambda: 1000)
    monkeypatch.setattr(packages.shutil, "which", lambda program: None)
    monkeypatch.setattr(packages, "_os_release", lambda: {"ID": "fedora", "PRETTY_NAME": "Fedora Linux 41"})
    assert cli.main(["setup-directml"]) == 2
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 3
    assert lines[0].startswith("onnx-gather: setup-directml: root is needed to install wine, wine64, xvfb")
    assert "apt-get is not here" in lines[1]
    assert "this is not Debian-like (Fedora Linux 41)" in lines[2]
    assert not (tmp_path / "cache").exists(), "nothing may be left half-installed"


def test_without_a_state_json_the_dlls_are_checked_against_their_pinned_hashes(cache):
    cache.layout.state_file.unlink()
    (cache.layout.bin / "onnxruntime.dll").write_bytes(b"other")
    assert cache.check()[1][0] == f"not ready: {cache.layout.state_file} is missing"
    cache.install()
    assert cache.built == ["DLLs", *layout.PROGRAMS, "d3d12"]
    pinned = layout.DLL_SHA256["onnxruntime.dll"][:16]
    assert f"{cache.layout.bin / 'onnxruntime.dll'} has SHA-256 " in cache.out.getvalue()
    assert f"..., not the {pinned}... pinned: placing it again" in cache.out.getvalue()
    _ready(cache)
