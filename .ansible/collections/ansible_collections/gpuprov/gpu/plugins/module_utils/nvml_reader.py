# Copyright: gpuprov contributors
# Apache-2.0
"""How the NVML collector (module_utils/nvml.py) calls NVML for one GPU and applies its error policy (described
there): :class:`GpuReader`, the ``NVML_ERROR_*`` names of pynvml errors, and helpers for the values pynvml
returns (ctypes structures, current/pending pairs).

Must stay importable on Python 3.8 (Ubuntu 20.04 targets): no ``match``, no runtime ``X | Y`` types.
"""

from __future__ import annotations

import sys
from typing import Any

#: Calls answering these errors just have no value on this GPU or driver.
QUIET_ERRORS = ("NVML_ERROR_NOT_SUPPORTED", "NVML_ERROR_FUNCTION_NOT_FOUND")

#: Errors after which a GPU is unusable until a reset or reboot; no more queries are made for it.
LOST_ERRORS = ("NVML_ERROR_GPU_IS_LOST", "NVML_ERROR_RESET_REQUIRED")


def error_name(nv: Any, exc: BaseException) -> str:
    """Return the ``NVML_ERROR_*`` name of a pynvml error (``NVML_ERROR_CODE_<n>`` for an unknown code)."""
    value = getattr(exc, "value", None)
    # The error's own module is pynvml even when ``nv`` is a stand-in without a full dir().
    for source in (nv, sys.modules.get(type(exc).__module__)):
        for attr in dir(source) if source is not None else ():
            if attr.startswith("NVML_ERROR_") and getattr(source, attr) == value:
                return attr
    return f"NVML_ERROR_CODE_{value}"


def error_reason(exc: BaseException) -> str:
    """Return pynvml's text for an error ("Driver Not Loaded"), never raising."""
    try:
        return str(exc)
    except Exception:  # pynvml's __str__ calls into the library, which may be gone
        return repr(exc)


class GpuReader:
    """Reads one GPU's values, applying the error policy of the collector (module_utils/nvml.py)."""

    def __init__(self, nv: Any, index: int) -> None:
        self.nv = nv
        self.handle: Any = None
        self.entry: dict[str, Any] = {"index": index, "lost": False, "error_name": None, "error": None}
        self.errors: dict[str, str] = {}

    def call(self, field: str, func_name: str, *args: Any) -> Any:
        """Call ``nv.<func_name>(handle, *args)``; return None for errors as the error policy says."""
        if self.entry["lost"]:
            return None
        func = getattr(self.nv, func_name, None)
        if func is None:  # pynvml older than this collector
            return None
        try:
            return func(self.handle, *args)
        except self.nv.NVMLError as exc:
            self.record(field, exc)
            return None

    def record(self, field: str, exc: BaseException) -> None:
        """Apply the error policy to an NVML error raised while reading ``field``."""
        name = error_name(self.nv, exc)
        if name in QUIET_ERRORS:
            return
        if name in LOST_ERRORS:
            self.entry.update(lost=True, error_name=name, error=f"{error_reason(exc)} (while reading {field})")
            return
        self.errors[field] = name


def struct_field(struct: Any, name: str) -> Any:
    """Read a member of a pynvml ctypes structure, or None when the structure itself is missing."""
    return None if struct is None else getattr(struct, name, None)


def split_pair(value: Any) -> tuple[Any, Any]:
    """Split a (current, pending) pair that NVML returns as a list; (None, None) when missing."""
    if value is None:
        return None, None
    return value[0], value[1]


def flag(value: Any) -> bool | None:
    """NVML's 0/1 (enabled/disabled) as a bool, None when missing."""
    return None if value is None else bool(value)
