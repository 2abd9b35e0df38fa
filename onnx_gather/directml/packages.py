"""Step 1 of ``onnx-gather setup-directml``: the system packages real DirectML runs on, through apt.

Wine, Xvfb, mingw-w64's C compiler, what d3d12.dll's build needs besides, and Mesa's Vulkan driver 25 or newer (on
Debian 12 from bookworm-backports, whose apt source is added for it); and, not for DirectML, Chromium: the browser the
tests of the HTML reports open them in (tests/test_page_browser.py), set up here as the README's test command runs
this. Needs root and apt.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import TextIO

from onnx_gather.directml.layout import (
    MESA_MINIMUM,
    MESA_PACKAGE,
    SETUP_COMMAND,
    SetupError,
    mesa_major,
    package_version,
)

# Wine, Xvfb, mingw-w64 for the programs and d3d12.dll, what d3d12.dll's build needs besides, Mesa's Vulkan driver;
# Chromium and a font for the tests of the HTML reports.
PACKAGES = (
    "wine",
    "wine64",
    "xvfb",
    "gcc-mingw-w64-x86-64",
    "flex",
    "bison",
    "wine64-tools",
    "libvulkan-dev",
    MESA_PACKAGE,
    "chromium",
    "fonts-dejavu-core",  # the pages' text in Chromium's screenshots (installed without chromium's recommended fonts)
)
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
            "Vulkan drivers; Chromium for the tests) with this system's package manager, then run this again"
        )
    if "debian" not in (release.get("ID", "") + " " + release.get("ID_LIKE", "")):
        problems.append(
            f"this is not Debian-like ({release.get('PRETTY_NAME', 'no /etc/os-release')}); "
            "the set-up knows Debian 12 and later"
        )
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
