"""The fuzzer (tools/fuzz.py), run in a child process so that an abort would show here as a dead child."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

FUZZ = Path(__file__).resolve().parent.parent / "tools" / "fuzz.py"


@pytest.mark.slow
def test_fuzzed_dml_nodes_never_abort_and_fail_only_cleanly():
    result = subprocess.run(
        [sys.executable, str(FUZZ), "--examples", "600", "--seed", "1"],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr  # a signal would make it negative
    summary = re.search(r"fuzz: (\d+) examples: (\d+) ran .*; (\d+) findings", result.stdout)
    assert summary, result.stdout
    examples, ran, findings = map(int, summary.groups())
    assert examples == 600 and findings == 0
    assert ran > 100  # the success path is fuzzed too, not only the refusals
