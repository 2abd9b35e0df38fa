"""The DML form in onnx's own reference evaluator:
``onnx.reference.ReferenceEvaluator(model, new_ops=EVALUATOR_OPS)`` runs a converted model with DmlGather,
DmlGatherElements and DmlGatherNd computed by ``onnx_gather.core.semantics``, DmlScatterElements and DmlScatterNd by
``onnx_gather.core.scatter`` (no ONNX Runtime, no bridge: FLOAT16 data as they are), and the standard
GatherElements DML form leaves as ONNX Runtime's CPU kernels compute it. ``run(model, feeds)`` does it for a whole
model."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import onnx
from onnx.reference import ReferenceEvaluator
from onnx.reference.op_run import OpRun

from onnx_gather.core import scatter, semantics
from onnx_gather.core.contract import DOMAIN


def _mode(mode: str | bytes) -> str:
    return mode.decode() if isinstance(mode, bytes) else mode


class DmlGather(OpRun):
    op_domain = DOMAIN

    def _run(self, input, indices, axis=None, index_dimensions=None, out_of_bounds=None):  # noqa: ANN001
        return (semantics.dml_gather(input, indices, int(axis), int(index_dimensions), _mode(out_of_bounds)),)


class DmlGatherElements(OpRun):
    op_domain = DOMAIN

    def _run(self, input, indices, axis=None, out_of_bounds=None):  # noqa: ANN001
        return (semantics.dml_gather_elements(input, indices, int(axis), _mode(out_of_bounds)),)


class DmlGatherNd(OpRun):
    op_domain = DOMAIN

    def _run(
        self,
        input,  # noqa: ANN001
        indices,  # noqa: ANN001
        input_dimension_count=None,  # noqa: ANN001
        indices_dimension_count=None,  # noqa: ANN001
        batch_dimension_count=None,  # noqa: ANN001
        out_of_bounds=None,  # noqa: ANN001
    ):
        return (
            semantics.dml_gather_nd(
                input,
                indices,
                int(input_dimension_count),
                int(indices_dimension_count),
                int(batch_dimension_count),
                _mode(out_of_bounds),
            ),
        )


class DmlScatterElements(OpRun):
    op_domain = DOMAIN

    def _run(self, input, indices, updates, axis=None, out_of_bounds=None, duplicates=None):  # noqa: ANN001
        modes = _mode(out_of_bounds), _mode(duplicates)
        return (scatter.dml_scatter_elements(input, indices, updates, int(axis), *modes),)


class DmlScatterNd(OpRun):
    op_domain = DOMAIN

    def _run(
        self,
        input,  # noqa: ANN001
        indices,  # noqa: ANN001
        updates,  # noqa: ANN001
        input_dimension_count=None,  # noqa: ANN001
        indices_dimension_count=None,  # noqa: ANN001
        out_of_bounds=None,  # noqa: ANN001
        duplicates=None,  # noqa: ANN001
    ):
        counts = (int(input_dimension_count), int(indices_dimension_count))
        return (scatter.dml_scatter_nd(input, indices, updates, *counts, _mode(out_of_bounds), _mode(duplicates)),)


class GatherElements(OpRun):
    """ONNX's own GatherElements as ONNX Runtime's CPU kernels compute it, for the gathers DML form leaves standard
    (STRING data): indices smaller than the data off the axis read its first rows, which onnx's reference op refuses,
    and an index out of bounds is an error."""

    op_domain = ""

    def _run(self, data, indices, axis=0):  # noqa: ANN001
        axis = int(axis) % data.ndim
        rows = tuple(slice(None) if d == axis else slice(0, size) for d, size in enumerate(indices.shape))
        fixed, _ = semantics.fix_indices("GatherElements", indices, data.shape[axis], "error")
        return (np.take_along_axis(data[rows], fixed, axis),)


EVALUATOR_OPS = [DmlGather, DmlGatherElements, DmlGatherNd, DmlScatterElements, DmlScatterNd, GatherElements]


def evaluate(model: onnx.ModelProto, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
    """Every output of ``model`` (standard ONNX and the DML ops) by onnx's reference evaluator."""
    return [np.asarray(o) for o in ReferenceEvaluator(model, new_ops=EVALUATOR_OPS).run(None, dict(feeds))]
