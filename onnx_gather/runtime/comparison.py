"""One output of a backend against the reference's: the tolerance it is held to (by its element type unless given)
and the comparison, position by position."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from onnx_gather.graphs.types import array_type
from onnx_gather.runtime.inputs import dims_text

# The tolerances (atol, rtol) an output is held to by default, by element type. FLOAT16 and BFLOAT16: about 2 units
# in the last place of 1.0 absolute and 5 relative (their steps at 1.0 are 2^-10 and 2^-7): runtimes that keep
# float32 between 16-bit nodes and runtimes that round at each one part by a few units, more the deeper the model
# (the FLOAT16 text model of the tests needs 1.4e-3 at rtol 5e-3 on real DirectML). Every other type: 1e-5 both.
TYPE_TOLERANCES = {"float16": (2e-3, 5e-3), "bfloat16": (1.6e-2, 4e-2)}
OTHER_TOLERANCE = (1e-5, 1e-5)


@dataclass(frozen=True)
class Tolerance:
    """How far an output may be from the reference's: ``|actual - reference| <= atol + rtol * |reference|``; an
    ``atol`` or ``rtol`` not given is the output type's (``TYPE_TOLERANCES``, else ``OTHER_TOLERANCE``)."""

    atol: float | None = None
    rtol: float | None = None

    def held(self, dtype: np.dtype) -> tuple[float, float]:
        """The (atol, rtol) an output of element type ``dtype`` is held to."""
        return self._given_or(TYPE_TOLERANCES.get(np.dtype(dtype).name, OTHER_TOLERANCE))

    def _given_or(self, default: tuple[float, float]) -> tuple[float, float]:
        return (default[0] if self.atol is None else self.atol, default[1] if self.rtol is None else self.rtol)

    def describe(self) -> str:
        """The tolerance in words, for reports: as given, or by type."""
        if self.atol is not None and self.rtol is not None:
            return f"atol {self.atol:g}, rtol {self.rtol:g}"
        by_type = [f"{name.upper()} {_pair(self._given_or(pair))}" for name, pair in TYPE_TOLERANCES.items()]
        return f"tolerances by type: {'; '.join(by_type)}; others {_pair(self._given_or(OTHER_TOLERANCE))}"


def _pair(pair: tuple[float, float]) -> str:
    return f"atol {pair[0]:g} rtol {pair[1]:g}"


@dataclass(frozen=True)
class Tie:
    """A sort-like node (TopK, ArgMax, ArgMin, NonMaxSuppression) that ordered keys equal within their tolerance
    otherwise than the reference did (``runtime.ties``)."""

    node: str  # its name, or what reports call a node without one
    op_type: str
    rows: tuple[int, ...]  # the positions ordered otherwise: along TopK's axis, rows of NonMaxSuppression's
    # selected indices, or flat positions of ArgMax's and ArgMin's output
    key_gap: float  # the largest difference between two keys taken as equal there


@dataclass(frozen=True)
class Comparison:
    """One output of one backend against the reference's, held to ``atol`` and ``rtol``."""

    equal: bool  # same type, shape and bytes
    within_tolerance: bool  # |actual - reference| <= atol + rtol * |reference| everywhere, NaN meeting NaN
    max_abs: float | None  # over the positions where both are finite; None for STRING and BOOL outputs
    max_rel: float | None  # the same, relative to a nonzero reference
    mismatches: int  # positions outside the tolerance (all of them when the shapes or types differ)
    first_mismatch: list[int] | None
    atol: float
    rtol: float
    note: str = ""  # what differs when the comparison cannot be made position by position
    # Where it is outside tolerance only because sort-like nodes ordered tied keys otherwise: those nodes
    ties: tuple[Tie, ...] = ()

    def accepted(self, strict_ties: bool = False) -> bool:
        """Whether it passes: within tolerance, or (unless ``strict_ties``) apart only by the order of tied keys."""
        return self.within_tolerance or (bool(self.ties) and not strict_ties)


def _integer_difference(reference: np.ndarray, actual: np.ndarray) -> np.ndarray:
    """``|actual - reference|`` exactly, as UINT64 (wrapping arithmetic: 64-bit integers never overflow here)."""
    wide = np.uint64 if reference.dtype == np.uint64 else np.int64
    ref, act = reference.astype(wide), actual.astype(wide)
    ref_bits, act_bits = ref.view(np.uint64), act.view(np.uint64)
    return np.where(act >= ref, act_bits - ref_bits, ref_bits - act_bits)


def _differences(
    reference: np.ndarray, actual: np.ndarray, atol: float, rtol: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Of two numeric arrays of one type and shape, position by position: ``|actual - reference|`` (0 where either
    is not finite), ``|reference|``, where both are finite, and where they are close (NaN meeting NaN)."""
    magnitude = np.abs(reference.astype(np.float64))
    if reference.dtype.kind in "iu":
        exact = _integer_difference(reference, actual)
        difference = exact.astype(np.float64)
        close = (exact == 0) | (difference <= atol + rtol * magnitude)
        return difference, magnitude, np.ones(reference.shape, bool), close
    ref, act = reference.astype(np.float64), actual.astype(np.float64)
    finite = np.isfinite(ref) & np.isfinite(act)
    difference = np.abs(np.subtract(act, ref, out=np.zeros_like(ref), where=finite))
    close = np.where(finite, difference <= atol + rtol * magnitude, (ref == act) | (np.isnan(ref) & np.isnan(act)))
    return difference, magnitude, finite, close


def excess(reference: np.ndarray, actual: np.ndarray, comparison: Comparison) -> float:
    """How many times its tolerance the worst position of ``actual`` is off (``comparison``: ``compare``'s of the
    two): ``max |a - r| / (atol + rtol |r|)``; inf where a position is off without a size (another shape or type, a
    NaN or infinity not matched, a STRING or BOOL that differs); 0 where they agree. What sizes a difference whatever
    the scale of the values (``reduce``)."""
    if comparison.equal or (comparison.within_tolerance and comparison.max_abs is None):
        return 0.0
    if comparison.max_abs is None:  # another shape or type, a STRING or BOOL that differs
        return np.inf
    atol, rtol = comparison.atol, comparison.rtol
    difference, magnitude, finite, close = _differences(reference, actual, atol, rtol)
    if not close[~finite].all():
        return np.inf
    allowed = atol + rtol * magnitude
    with np.errstate(divide="ignore", invalid="ignore"):
        ratios = np.where(
            allowed > 0, difference / np.where(allowed > 0, allowed, 1.0), np.where(difference > 0, np.inf, 0)
        )
    return float(ratios.max()) if ratios.size else 0.0


def compare(reference: np.ndarray, actual: np.ndarray, tolerance: Tolerance) -> Comparison:
    """Compare ``actual`` with ``reference`` position by position, held to ``tolerance`` at the reference's type."""
    atol, rtol = tolerance.held(reference.dtype)
    textual = reference.dtype.kind in "OUS" and actual.dtype.kind in "OUS"  # runtimes hold strings differently
    if reference.shape != actual.shape or (reference.dtype != actual.dtype and not textual):
        note = (
            f"{array_type(actual.dtype)} {dims_text(actual.shape)} where the reference has "
            f"{array_type(reference.dtype)} {dims_text(reference.shape)}"
        )
        return Comparison(False, False, None, None, max(reference.size, actual.size), None, atol, rtol, note)
    if reference.dtype.kind not in "fiu" and reference.dtype.name != "bfloat16":  # STRING, BOOL: equal or not
        bad = np.argwhere(reference.astype(object) != actual.astype(object))
        first = [int(i) for i in bad[0]] if len(bad) else None
        return Comparison(not len(bad), not len(bad), None, None, len(bad), first, atol, rtol)
    difference, magnitude, finite, close = _differences(reference, actual, atol, rtol)
    nonzero = finite & (magnitude != 0)
    relative = np.where(nonzero, difference / np.where(nonzero, magnitude, 1.0), 0.0)
    bad = np.argwhere(~close)
    return Comparison(
        equal=reference.tobytes() == actual.tobytes(),
        within_tolerance=bool(close.all()),
        max_abs=float(difference.max()) if difference.size else 0.0,
        max_rel=float(relative.max()) if relative.size else 0.0,
        mismatches=len(bad),
        first_mismatch=[int(i) for i in bad[0]] if len(bad) else None,
        atol=atol,
        rtol=rtol,
    )
