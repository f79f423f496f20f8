"""torch and torchvision, imported on first use.

They are optional for gpuprov (the ``images`` extra), so the rest of gpuprov never pays for them; at this
boundary they are typed ``Any``.
"""

from __future__ import annotations

import importlib
from typing import Any

from gpuprov.exceptions import EnvironmentMissing

#: how to get the workers' optional libraries: the extra on a controller, the worker distribution on a GPU host
INSTALL_HINT = "pip install 'gpuprov[images]' (a GPU host: gpuprov-worker, which requires them)"


def torch_modules() -> tuple[Any, Any]:
    """``(torch, torchvision)``, imported on first use; raises EnvironmentMissing without the extra."""
    try:
        import torch

        torchvision = importlib.import_module("torchvision")
    except ImportError as exc:
        raise EnvironmentMissing(f"gpuprov images needs torch and torchvision: {INSTALL_HINT}") from exc
    return torch, torchvision
