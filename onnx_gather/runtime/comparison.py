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


# Within float error (docs/cli.md, "run, parity and the backends"): an output outside tolerance of the reference
# passes where it is no farther from the exact (float64) value than MARGIN times the reference is, plus its type's
# rtol of the output's scale (max |exact|): two float32 computations of one thing part by rounding, each by a few
# times the other's error at most (the third-party models measured: 1.03 to 2.1), while a behaviour of its own
# (Pow(0, 0), a fused GELU, a saturating Cast) puts a backend hundreds of times farther off than the reference.
MARGIN = 4.0
# The yardstick is taken to be wrong on an output, and not used there, where every float result is farther from it
# than FAULT_SPREAD times they are from each other and than FAULT_FLOOR times the type's rtol of the scale (onnx's
# reference evaluator, which computes some nodes, has faults of its own).
FAULT_SPREAD = 10.0
FAULT_FLOOR = 100.0


@dataclass(frozen=True)
class Exactness:
    """A float output of a backend against the exact (float64) value, beside the reference's, over the positions
    where all three are finite (a backend not finite where the reference is, or another non-finite value where it is
    not, is infinitely far)."""

    from_exact: float  # max |actual - exact|
    reference_from_exact: float  # max |reference - exact|
    scale: float  # max |exact|
    rtol: float  # the type's relative tolerance: rtol * scale is where float error starts, whatever the reference
    fault: bool = False  # the yardstick is taken to be wrong here (FAULT_SPREAD): not used

    @property
    def allowance(self) -> float:
        """How far from exact the backend may be: MARGIN times the reference's distance, plus rtol of the scale."""
        return MARGIN * self.reference_from_exact + self.rtol * self.scale

    @property
    def within_float_error(self) -> bool:
        return not self.fault and self.from_exact <= self.allowance

    @property
    def reference_less_accurate(self) -> bool:
        """Whether the reference is the farther from exact, by the same rule the other way round."""
        return not self.fault and self.reference_from_exact > MARGIN * self.from_exact + self.rtol * self.scale

    @property
    def size(self) -> float:
        """How many times its allowance the backend is off exact (inf where the allowance is 0)."""
        if self.from_exact == 0:
            return 0.0
        return self.from_exact / self.allowance if self.allowance > 0 else np.inf


def is_float(array: np.ndarray) -> bool:
    """Whether the yardstick judges ``array``: a floating-point array (FLOAT, FLOAT16, BFLOAT16, DOUBLE)."""
    return array.dtype.kind == "f" or array.dtype.name == "bfloat16"


def _finite(arrays: list[np.ndarray]) -> np.ndarray:
    return np.logical_and.reduce([np.isfinite(a) for a in arrays])


def _farthest(array: np.ndarray, exact: np.ndarray, where: np.ndarray) -> float:
    if not where.any():
        return 0.0
    return float(np.abs(np.subtract(array, exact, where=where, out=np.zeros(exact.shape))).max())


def exactness(
    reference: np.ndarray, actual: np.ndarray, exact: np.ndarray, tolerance: Tolerance, fault: bool
) -> Exactness | None:
    """``actual`` (of ``reference``'s type and shape) against ``exact``; None where it does not apply (not a float
    output, or ``exact`` of another shape). ``fault``: ``faulty`` of the output."""
    if not is_float(reference) or reference.shape != actual.shape or exact.shape != reference.shape:
        return None
    ref, act, wide = (np.asarray(a, np.float64) for a in (reference, actual, exact))
    both = _finite([ref, act, wide])
    same = (ref == act) | (np.isnan(ref) & np.isnan(act))
    stray = (~np.isfinite(ref) & ~same) | (np.isfinite(ref) & ~np.isfinite(act))
    from_exact = np.inf if stray.any() else _farthest(act, wide, both)
    scale = float(np.abs(wide, where=both, out=np.zeros_like(wide)).max()) if both.any() else 0.0
    return Exactness(from_exact, _farthest(ref, wide, both), scale, tolerance.held(reference.dtype)[1], fault)


def faulty(results: list[np.ndarray], exact: np.ndarray, tolerance: Tolerance) -> bool:
    """Whether the yardstick is taken to be wrong on an output (FAULT_SPREAD): ``results``, the float results of
    the reference and the backends, of one type and shape, are all far from ``exact`` and near each other."""
    if len(results) < 2 or not is_float(results[0]):
        return False
    rtol = tolerance.held(results[0].dtype)[1]
    results = [np.asarray(r, np.float64) for r in results if r.shape == exact.shape]
    if len(results) < 2:
        return False
    both = _finite([*results, exact])
    scale = float(np.abs(exact, where=both, out=np.zeros_like(exact, np.float64)).max()) if both.any() else 0.0
    nearest = min(_farthest(r, exact, both) for r in results)
    spread = max(_farthest(a, b, both) for a in results for b in results)
    return nearest > FAULT_SPREAD * spread and nearest > FAULT_FLOOR * rtol * scale


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
    excess: float = 0.0  # how many times its tolerance the worst position is off (inf: off without a size)
    note: str = ""  # what differs when the comparison cannot be made position by position
    # Where it is outside tolerance only because sort-like nodes ordered tied keys otherwise: those nodes
    ties: tuple[Tie, ...] = ()
    exact: Exactness | None = None  # a float output against the exact value, where the yardstick ran

    @property
    def within_float_error(self) -> bool:
        """Outside tolerance of the reference but no farther from the exact value than float error allows."""
        return not self.within_tolerance and self.exact is not None and self.exact.within_float_error

    @property
    def judged_exactly(self) -> bool:
        """Whether the yardstick judges it (it ran, and is not taken to be wrong here)."""
        return self.exact is not None and not self.exact.fault

    @property
    def size(self) -> float:
        """How far off it is: in allowances of float error where the yardstick judges it, else in tolerances."""
        return self.exact.size if self.exact is not None and self.judged_exactly else self.excess

    def accepted(self, strict_ties: bool = False) -> bool:
        """Whether it passes: within tolerance, within float error, or (unless ``strict_ties``) apart only by the
        order of tied keys."""
        return self.within_tolerance or self.within_float_error or (bool(self.ties) and not strict_ties)


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


def _excess(difference: np.ndarray, magnitude: np.ndarray, atol: float, rtol: float) -> float:
    """``max |a - r| / (atol + rtol |r|)`` over finite positions: how many times its tolerance the worst one is off
    (what sizes a difference whatever the scale of the values: ``reduce``)."""
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
        return Comparison(False, False, None, None, max(reference.size, actual.size), None, atol, rtol, np.inf, note)
    if reference.dtype.kind not in "fiu" and reference.dtype.name != "bfloat16":  # STRING, BOOL: equal or not
        bad = np.argwhere(reference.astype(object) != actual.astype(object))
        first = [int(i) for i in bad[0]] if len(bad) else None
        return Comparison(
            not len(bad), not len(bad), None, None, len(bad), first, atol, rtol, np.inf if len(bad) else 0.0
        )
    difference, magnitude, finite, close = _differences(reference, actual, atol, rtol)
    nonzero = finite & (magnitude != 0)
    relative = np.where(nonzero, difference / np.where(nonzero, magnitude, 1.0), 0.0)
    bad = np.argwhere(~close)
    excess = 0.0 if close.all() else np.inf if not close[~finite].all() else _excess(difference, magnitude, atol, rtol)
    return Comparison(
        equal=reference.tobytes() == actual.tobytes(),
        within_tolerance=bool(close.all()),
        max_abs=float(difference.max()) if difference.size else 0.0,
        max_rel=float(relative.max()) if relative.size else 0.0,
        mismatches=len(bad),
        first_mismatch=[int(i) for i in bad[0]] if len(bad) else None,
        atol=atol,
        rtol=rtol,
        excess=excess,
    )


DECADES = 16  # the decades a histogram of differences spans, below its largest (smaller ones fall into its first)


@dataclass(frozen=True)
class Histogram:
    """How far two numeric arrays of one shape are apart, position by position: the positions equal (NaN meeting
    NaN), those apart by ``|actual - reference|`` in each decade (``counts[i]`` from ``edges[i]`` up to
    ``edges[i + 1]``; the first also holds every smaller one), and those where one is not finite and they differ."""

    equal: int
    edges: tuple[float, ...]
    counts: tuple[int, ...]
    unfinite: int


def histogram(reference: np.ndarray, actual: np.ndarray) -> Histogram | None:
    """The ``Histogram`` of ``actual`` against ``reference``; None where they are not numbers of one shape (STRING,
    BOOL; a backend's output of another shape)."""
    numeric = [a.dtype.kind in "fiu" or a.dtype.name == "bfloat16" for a in (reference, actual)]
    if not all(numeric) or reference.shape != actual.shape:
        return None
    with np.errstate(invalid="ignore"):  # no tolerance: 0 times an infinite reference
        difference, _, finite, close = _differences(reference, actual, 0.0, 0.0)
    apart = difference[finite & (difference > 0)]
    unfinite = int((~finite & ~close).sum())
    if not apart.size:
        return Histogram(int(reference.size) - unfinite, (), (), unfinite)
    exponents = np.floor(np.log10(apart)).astype(np.int64)
    top = int(exponents.max())
    bottom = max(int(exponents.min()), top - DECADES + 1)
    counts = np.bincount(np.clip(exponents, bottom, top) - bottom, minlength=top - bottom + 1)
    edges = tuple(10.0**e for e in range(bottom, top + 2))
    return Histogram(int(reference.size) - int(apart.size) - unfinite, edges, tuple(map(int, counts)), unfinite)
