"""The peers' cases on real DirectML: ONNX Runtime's DirectML provider under Wine, the ``dml`` backend of
``onnx_gather.runtime.backends`` (CPU fallback allowed, as on Windows; where each node went is part of the verdict).

The verdicts are those cases.json records (the ``directml`` entries, ``peers``' docstring); ``"on"`` names the provider
that ran a case, or failed it as it ran, where it was not DirectML's (which did not take the node). A message is the
part of ONNX Runtime's after its last ") ": without the model's path, addresses and thread ids; where the process
running ONNX Runtime died (``"failed": "crash"``), what Wine said ended it.
"""

from __future__ import annotations

import contextlib
import os
import queue
import re
import tempfile
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import onnx

from onnx_gather.directml import worker
from onnx_gather.directml.process import DirectMlError, RunnerError, SessionCreationError
from onnx_gather.directml.worker import FallbackFailure
from onnx_gather.runtime import backends
from peers import Case, feeds, identical, model

DIRECTML = "DmlExecutionProvider"


def fragment(message: str) -> str:
    """The stable part of an error message: after its last ") ", first line."""
    return str(message).rsplit(") ", 1)[-1].splitlines()[0]


def crash(message: str) -> str:
    """What ended the runner, as Wine said it (``Unhandled division by zero``), without addresses."""
    found = re.search(r"wine: (.*?)(?: at address|$)", str(message))
    return found.group(1) if found else fragment(message)


class Run:
    """What the ``dml`` backend made of some cases packed into one model: outputs by case, or the error."""

    def __init__(self, cases: Sequence[Case], folder: Path, runner: worker.Runner | None = None) -> None:
        """``runner``: the runner under Wine to create the session in (None: the process's shared one)."""
        self.cases = list(cases)
        self.outputs: list[np.ndarray] = []
        self.placement: dict[str, int] = {}
        self.error: Exception | None = None
        self.stage = ""  # where a DirectMlError came: "creation" or "run"; "crash": the runner died
        self.on = ""  # the provider that failed it where not DirectML's
        proto = model(self.cases)
        handle, name = tempfile.mkstemp(".onnx", "peers", folder)  # a name of its own, also beside other threads
        os.close(handle)
        path = Path(name)
        onnx.save(proto, path)
        backend = backends.create("dml")
        backend.runner = runner
        try:
            outcome = backend.run(backends.Model(path, proto), feeds(self.cases))
        except FallbackFailure as failure:  # a provider beside DirectML failed it: ONNX Runtime's error, in full
            self.error, self.stage, self.on = failure.__cause__, "run", failure.provider
            return
        except DirectMlError as error:  # ONNX Runtime's error, in full
            self.error, self.stage = error, "creation" if isinstance(error, SessionCreationError) else "run"
            return
        except RunnerError as error:  # the process ended (ONNX Runtime or DirectML crashed); a new one starts
            self.error, self.stage = error, "crash"
            return
        self.outputs = [outcome.outputs[f"output_{k}"] for k in range(len(self.cases))]
        self.placement = {provider: entry["nodes"] for provider, entry in outcome.placement.items()}

    def failure(self) -> dict | None:
        """The verdict every case of a failed run shares (None if it ran)."""
        if self.error is None:
            return None
        message = crash(self.error) if self.stage == "crash" else fragment(self.error)
        return {"failed": self.stage, **({"on": self.on} if self.on else {}), "message": message}

    def verdict(self) -> dict:
        """The verdict of the one case run, as cases.json records it."""
        (case,) = self.cases
        failure = self.failure()
        if failure is not None:
            return failure
        (output,) = self.outputs
        verdict: dict = {"ran": True}
        if case.expected is None or not identical(output, case.expected):
            verdict.update(output=output.ravel().tolist(), shape=list(output.shape))
        (provider,) = self.placement
        if provider != DIRECTML:
            verdict["on"] = provider
        return verdict

    def differs(self, k: int) -> str | None:
        """How case ``k`` differs from its recorded verdict (None: it does not; the placement is checked apart)."""
        recorded, failure = self.cases[k].directml, self.failure()
        if failure is not None:
            return None if recorded == failure else f"recorded {recorded}, now {failure} ({self.error})"
        if "ran" not in recorded:
            return f"recorded {recorded}, now it ran: {self.outputs[k]}"
        if not identical(self.outputs[k], self.cases[k].directml_output):
            return f"DirectML computed {self.outputs[k]!r}, recorded {self.cases[k].directml_output!r}"
        return None


def alone(cases: Sequence[Case], folder: Path, runners: int = 2) -> list[Run]:
    """Each case in a session of its own, ``runners`` runners side by side: the shared one and others started (and
    ended) here, each a process of its own with its own Wine server, Xvfb and DirectML device, as two programs using
    DirectML would be; a session's verdict does not depend on which runner holds it, or on what the other does."""
    with contextlib.ExitStack() as stack:
        idle: queue.SimpleQueue[worker.Runner] = queue.SimpleQueue()
        idle.put(worker.shared())
        for _ in range(min(runners, len(cases)) - 1):
            idle.put(stack.enter_context(worker.Runner()))

        def run(case: Case) -> Run:
            runner = idle.get()
            try:
                return Run([case], folder, runner)
            finally:
                idle.put(runner)

        with ThreadPoolExecutor(max(1, min(runners, len(cases)))) as pool:
            return list(pool.map(run, cases))
