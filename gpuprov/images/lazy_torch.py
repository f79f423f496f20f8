"""torch and torchvision, imported on first use.

They are optional for gpuprov (the ``images`` extra), so the rest of gpuprov never pays for them; at this
boundary they are typed ``Any``.

torchvision is imported without ``torch._dynamo`` (:func:`import_torchvision`): ``torchvision.ops.roi_align`` takes
one function from ``torch._dynamo.utils`` when it is imported, and importing ``torch._dynamo`` is nearly all of
torchvision's import time (docs/benchmarks.md, "start-up phases apart"), which every worker paid before its first
batch although the workers' TorchScript path never uses it.
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import Any

from gpuprov.exceptions import EnvironmentMissing

#: how to get the workers' optional libraries: the extra on a controller, the worker distribution on a GPU host
INSTALL_HINT = "pip install 'gpuprov[images]' (a GPU host: gpuprov-worker, which requires them)"
DYNAMO_UTILS = "torch._dynamo.utils"


def torch_modules() -> tuple[Any, Any]:
    """``(torch, torchvision)``, imported on first use; raises EnvironmentMissing without the extra."""
    try:
        import torch

        torchvision = import_torchvision()
    except ImportError as exc:
        raise EnvironmentMissing(f"gpuprov images needs torch and torchvision: {INSTALL_HINT}") from exc
    return torch, torchvision


def _is_compile_supported(device_type: str) -> bool:
    """``torch._dynamo.utils.is_compile_supported(device_type)``, the real one imported on the first call."""
    return bool(importlib.import_module(DYNAMO_UTILS).is_compile_supported(device_type))


def import_torchvision() -> Any:
    """``torchvision``, imported without importing ``torch._dynamo`` where that is not already done.

    While torchvision is imported, ``sys.modules["torch._dynamo.utils"]`` is a stand-in whose only name,
    ``is_compile_supported``, imports the real module on its first call (torchvision calls it only where its
    compiled ops are missing); afterwards the name is removed again, so any later ``import torch._dynamo`` (a
    ``torch.compile`` of an exported model) gets the real module. A torchvision that imports anything else from
    it: the partial import is undone and torchvision imported as it is. Raises ImportError without torchvision."""
    if DYNAMO_UTILS in sys.modules or "torchvision" in sys.modules:
        return importlib.import_module("torchvision")
    stand_in = types.ModuleType(DYNAMO_UTILS)
    stand_in.__dict__["is_compile_supported"] = _is_compile_supported
    before = set(sys.modules)
    sys.modules[DYNAMO_UTILS] = stand_in
    try:
        return importlib.import_module("torchvision")
    except ImportError:
        for name in set(sys.modules) - before:  # the stand-in and whatever the failed import left
            del sys.modules[name]
        return importlib.import_module("torchvision")
    finally:
        if sys.modules.get(DYNAMO_UTILS) is stand_in:
            del sys.modules[DYNAMO_UTILS]
