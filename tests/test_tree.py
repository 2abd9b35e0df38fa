"""The repository holds the project, not downloads: no wheel or archive anywhere, no file over 5 MB outside models/."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LARGEST = 5 * 2**20
ARCHIVES = (".whl", ".tar.gz", ".zip", ".tgz", ".egg")


@pytest.fixture(scope="module")
def tracked() -> list[Path]:
    if not (ROOT / ".git").exists():
        pytest.skip(f"{ROOT} is not a git checkout: what the repository holds is told by git ls-files")
    listing = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    return [Path(name) for name in listing.decode().split("\0") if name]


def test_no_archive_is_tracked(tracked):
    assert tracked  # the listing itself worked
    assert [str(p) for p in tracked if p.name.endswith(ARCHIVES)] == []


def test_no_large_file_outside_models(tracked):
    large = [
        str(p)
        for p in tracked
        if p.parts[0] != "models" and (ROOT / p).is_file() and (ROOT / p).stat().st_size > LARGEST
    ]
    assert large == []


def test_downloads_are_ignored():
    """A wheel or a download folder left in the tree is not picked up by ``git add``."""
    if not (ROOT / ".git").exists():
        pytest.skip(f"{ROOT} is not a git checkout")
    names = ["dl/x.whl", "onnx_gather/x.whl", "downloads/a.onnx", "sdist.tar.gz"]
    result = subprocess.run(["git", "check-ignore", *names], cwd=ROOT, capture_output=True, text=True, check=False)
    assert result.stdout.split() == names
