"""The rich console every gpuprov command prints through."""

from __future__ import annotations

import os
import sys
from typing import Any

from rich.console import Console

REDIRECTED_WIDTH = 160
"""Columns of output written to a file or pipe (rich's own default there is 80, which wraps the
findings and facts tables of a saved report)."""


def console(**kwargs: Any) -> Console:
    """A :class:`rich.console.Console` with ``kwargs``; when its stream is not a terminal and neither
    ``width`` nor ``$COLUMNS`` says otherwise, :data:`REDIRECTED_WIDTH` columns wide."""
    stream = sys.stderr if kwargs.get("stderr") else sys.stdout
    if "width" not in kwargs and not os.environ.get("COLUMNS") and not stream.isatty():
        kwargs["width"] = REDIRECTED_WIDTH
    return Console(**kwargs)
