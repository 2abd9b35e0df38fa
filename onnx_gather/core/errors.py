"""The one base class of what a user did wrong (a bad model, input, flag or path): the command line prints its one
line and exits 2. Any other exception that reaches the command line is onnx-gather's own failure: exit 3."""

from __future__ import annotations


class UserError(ValueError):
    """Something the user gave is wrong; the message names what and where, in one line."""
