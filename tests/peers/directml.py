"""The peers' cases on real DirectML: ONNX Runtime's DirectML provider under Wine, the ``dml`` backend of
``onnx_gather.runtime.backends`` (CPU fallback allowed, as on Windows; where each node went is part of the verdict).

The verdicts are those cases.json records (the ``directml`` entries, ``peers``' docstring); ``"on"`` names the provider
that ran a case where it was not DirectML's. A
message is the part of ONNX Runtime's after its last ") ": without the model's path, addresses and thread ids.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import onnx

from onnx_gather.directml import worker
from onnx_gather.directml.process import DirectMlError
from onnx_gather.runtime import backends
from peers import Case, feeds, identical, model

DIRECTML = "DmlExecutionProvider"


def fragment(message: str) -> str:
    """The stable part of an error message: after its last ") ", first line."""
    return str(message).rsplit(") ", 1)[-1].splitlines()[0]


class Run:
    """What the ``dml`` backend made of some cases packed into one model: outputs by case, or the error."""

    def __init__(self, cases: Sequence[Case], folder: Path) -> None:
        self.cases = list(cases)
        self.outputs: list[np.ndarray] = []
        self.placement: dict[str, int] = {}
        self.error: Exception | None = None
        self.stage = ""  # where a DirectMlError came: "creation" or "run"
        proto = model(self.cases)
        path = folder / f"peers{len(list(folder.iterdir()))}.onnx"
        onnx.save(proto, path)
        try:
            outcome = backends.create("dml").run(backends.Model(path, proto), feeds(self.cases))
        except DirectMlError as error:  # ONNX Runtime's error, in full
            self.error, self.stage = error, self._stage(path)
            return
        self.outputs = [outcome.outputs[f"output_{k}"] for k in range(len(self.cases))]
        self.placement = {provider: entry["nodes"] for provider, entry in outcome.placement.items()}

    @staticmethod
    def _stage(path: Path) -> str:
        """Where a failed run failed: creating the session, or later."""
        runner = worker.shared()
        try:
            loaded = runner.load(path, fallback=True)
        except DirectMlError:
            return "creation"
        runner.free(loaded)
        return "run"

    def failure(self) -> dict | None:
        """The verdict every case of a failed run shares (None if it ran)."""
        if self.error is None:
            return None
        return {"failed": self.stage, "message": fragment(self.error)}

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
