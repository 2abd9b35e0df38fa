"""How precise check's known-behaviour flags are on the test models and the third-party ones, held to real DirectML.

Each model is checked, its flags measured on one ONNX Runtime CPU run (its bundled inputs, else inputs generated as
`run` generates them), and every flag met by the run or ruled out by the graph is run on real DirectML, the node alone
with the run's values (onnx_gather.conformance.precision). Prints the flags raised by status, the met ones confirmed,
the ruled-out ones that happened (none should), per rule. Needs `onnx-gather setup-directml` and
`python tools/fetch_models.py`.
Run by hand: python tools/check_precision.py
"""

from __future__ import annotations

from pathlib import Path

from onnx_gather.conformance.precision import Precision, checkout_models, hold, precision_lines

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    precision = Precision()
    for path, observation in checkout_models(ROOT):
        hold(path, observation, precision)
        print(f"{path.name}: {sum(1 for o in precision.outcomes if o.model == path.name)} flags run on DirectML")
    print(precision_lines(precision))


if __name__ == "__main__":
    main()
