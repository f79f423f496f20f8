"""Mock NVML profiles: YAML descriptions of a host's GPUs, compiled to the flat file the C library reads.

A profile is a YAML mapping (see ``docs/mock-nvml.md`` and ``profiles/*.yaml``)::

    description: ...
    base: h200x2                 # optional: start from another profile
    init: SUCCESS                # or an NVML error name nvmlInit returns (DRIVER_NOT_LOADED, ...)
    system: {driver_version: ..., nvml_version: ..., cuda_driver_version: 13000}
    topology: {default: 30, "0-1": 10}
    p2p: {default: 0}
    gpu_defaults: {...}          # lowest precedence, merged over the base's gpu_defaults
    gpus: [{...}, ...]           # replaces the base's GPUs; each entry is merged over gpu_defaults
    all_gpus: {...}              # merged over every GPU (also the base's)
    gpu_overrides: {3: {...}}    # merged over one GPU, by index (highest precedence)

A value ``{error: NAME}`` makes the matching NVML call return ``NVML_ERROR_NAME``; a missing value
makes it return ``NVML_ERROR_NOT_SUPPORTED``. :func:`compile_profile` flattens the resolved profile to
``key=value`` lines (``gpu.0.pcie.link_gen_max=5``, ``gpu.0.fan_speed=!NOT_SUPPORTED``).
"""

from __future__ import annotations

import copy
import logging
from pathlib import Path
from typing import Any

import yaml

from gpuprov.exceptions import ConfigError

log = logging.getLogger(__name__)

PROFILES_DIR = Path(__file__).parent / "profiles"
CONF_HEADER = "# gpuprov mock NVML profile v1"

#: NVML_ERROR_* names the C library understands, with their codes.
NVML_ERRORS: dict[str, int] = {
    "SUCCESS": 0,
    "UNINITIALIZED": 1,
    "INVALID_ARGUMENT": 2,
    "NOT_SUPPORTED": 3,
    "NO_PERMISSION": 4,
    "ALREADY_INITIALIZED": 5,
    "NOT_FOUND": 6,
    "INSUFFICIENT_SIZE": 7,
    "INSUFFICIENT_POWER": 8,
    "DRIVER_NOT_LOADED": 9,
    "TIMEOUT": 10,
    "IRQ_ISSUE": 11,
    "LIBRARY_NOT_FOUND": 12,
    "FUNCTION_NOT_FOUND": 13,
    "CORRUPTED_INFOROM": 14,
    "GPU_IS_LOST": 15,
    "RESET_REQUIRED": 16,
    "OPERATING_SYSTEM": 17,
    "LIB_RM_VERSION_MISMATCH": 18,
    "IN_USE": 19,
    "MEMORY": 20,
    "NO_DATA": 21,
    "VGPU_ECC_NOT_SUPPORTED": 22,
    "INSUFFICIENT_RESOURCES": 23,
    "FREQ_NOT_SUPPORTED": 24,
    "ARGUMENT_VERSION_MISMATCH": 25,
    "DEPRECATED": 26,
    "NOT_READY": 27,
    "GPU_NOT_FOUND": 28,
    "INVALID_STATE": 29,
    "UNKNOWN": 999,
}

_TOP_KEYS = frozenset(
    {"description", "base", "init", "system", "topology", "p2p", "gpu_defaults", "gpus", "all_gpus", "gpu_overrides"}
)


def list_profiles() -> list[str]:
    """Return the names of the profiles shipped in the package, sorted."""
    return sorted(p.stem for p in PROFILES_DIR.glob("*.yaml"))


def profile_path(profile: str | Path) -> Path:
    """Resolve a profile name (``h200x2``) or a YAML file path to an existing file.

    Raises :class:`~gpuprov.exceptions.ConfigError` when neither exists.
    """
    text = str(profile)
    is_path = "/" in text or text.endswith((".yaml", ".yml"))
    path = Path(text) if is_path else PROFILES_DIR / f"{text}.yaml"
    if not path.is_file():
        raise ConfigError(f"mock NVML profile {text!r} not found; shipped profiles: {', '.join(list_profiles())}")
    return path


def _merge(low: Any, high: Any) -> Any:
    """Deep-merge two values: mappings merge key by key, anything else is replaced by ``high``.

    An ``{error: NAME}`` mapping on either side is a value, not a mapping: it replaces or is replaced
    whole, so an override can turn a supported group into an error and back.
    """
    if isinstance(low, dict) and isinstance(high, dict) and not _is_error(low) and not _is_error(high):
        out = dict(low)
        for key, value in high.items():
            out[key] = _merge(low[key], value) if key in low else copy.deepcopy(value)
        return out
    return copy.deepcopy(high)


def _is_error(value: Any) -> bool:
    return isinstance(value, dict) and set(value) == {"error"}


def _read(path: Path) -> dict[str, Any]:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"cannot read mock NVML profile {path}: {exc}") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"mock NVML profile {path}: expected a mapping at the top level")
    unknown = set(data) - _TOP_KEYS
    if unknown:
        raise ConfigError(f"mock NVML profile {path}: unknown keys {sorted(unknown)}")
    return data


def load_profile(profile: str | Path, _seen: tuple[Path, ...] = ()) -> dict[str, Any]:
    """Load a profile and resolve ``base`` inheritance into one mapping.

    The result has ``name``, ``description``, ``init``, ``system``, ``topology``, ``p2p``,
    ``gpu_defaults`` and ``gpus`` (a list of fully merged per-GPU mappings). A base named by a bare
    name is looked up next to the profile first, then among the shipped profiles.
    """
    path = profile_path(profile).resolve()
    if path in _seen:
        chain = [str(p) for p in _seen]
        raise ConfigError(f"mock NVML profile {path}: 'base' loop through {chain}")
    data = _read(path)
    resolved: dict[str, Any] = {
        "description": "",
        "init": "SUCCESS",
        "system": {},
        "topology": {},
        "p2p": {},
        "gpus": [],
        "gpu_defaults": {},
    }
    base = data.get("base")
    if base is not None:
        sibling = path.parent / f"{base}.yaml"
        base_ref: str | Path = sibling if sibling.is_file() else str(base)
        resolved = load_profile(base_ref, (*_seen, path))
    for key in ("system", "topology", "p2p"):
        resolved[key] = _merge(resolved[key], data.get(key) or {})
    for key in ("description", "init"):
        if key in data:
            resolved[key] = data[key]
    gpus: list[dict[str, Any]] = resolved["gpus"]
    resolved["gpu_defaults"] = _merge(resolved["gpu_defaults"], data.get("gpu_defaults") or {})
    if "gpus" in data:
        gpus = [_merge(resolved["gpu_defaults"], gpu or {}) for gpu in data["gpus"]]
    elif "gpu_defaults" in data:
        raise ConfigError(f"mock NVML profile {path}: 'gpu_defaults' needs 'gpus'; use 'all_gpus'")
    if "all_gpus" in data:
        gpus = [_merge(gpu, data["all_gpus"]) for gpu in gpus]
    for index, override in (data.get("gpu_overrides") or {}).items():
        if not isinstance(index, int) or not 0 <= index < len(gpus):
            raise ConfigError(f"mock NVML profile {path}: gpu_overrides index {index!r} out of range")
        gpus[index] = _merge(gpus[index], override)
    resolved["gpus"] = gpus
    resolved["name"] = path.stem
    return resolved


def _scalar(key: str, value: Any) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, (int, float, str)):
        text = str(value)
        if "\n" in text:
            raise ConfigError(f"mock NVML profile key {key}: values must be single-line")
        return text
    raise ConfigError(f"mock NVML profile key {key}: unsupported value {value!r}")


def _error(key: str, value: dict[str, Any]) -> str:
    name = str(value["error"]).upper().removeprefix("NVML_ERROR_")
    if name not in NVML_ERRORS:
        raise ConfigError(f"mock NVML profile key {key}: unknown NVML error {value['error']!r}")
    return f"!{name}"


def _flatten(prefix: str, value: Any, out: list[tuple[str, str]]) -> None:
    if _is_error(value):
        out.append((prefix, _error(prefix, value)))
    elif isinstance(value, dict):
        for key, sub in value.items():
            _flatten(f"{prefix}.{key}", sub, out)
    elif isinstance(value, list):
        raise ConfigError(f"mock NVML profile key {prefix}: lists are not supported, use a mapping")
    elif value is not None:
        out.append((prefix, _scalar(prefix, value)))


def _pair_key(group: str, key: Any) -> str:
    """``topology: {"0-1": 10}`` -> ``topology.0.1``; ``default`` stays ``default``."""
    text = str(key)
    if text == "default":
        return f"{group}.default"
    parts = text.replace(",", "-").split("-")
    if len(parts) != 2 or not all(p.strip().isdigit() for p in parts):
        raise ConfigError(f"mock NVML profile {group} key {key!r}: expected 'default' or 'I-J'")
    lo, hi = sorted(int(p) for p in parts)
    return f"{group}.{lo}.{hi}"


def compile_resolved(resolved: dict[str, Any]) -> str:
    """Flatten an already resolved profile (from :func:`load_profile`) to the C library's format."""
    lines: list[tuple[str, str]] = [("profile", str(resolved["name"]))]
    init = resolved["init"]
    init_name = str(init["error"] if _is_error(init) else init).upper().removeprefix("NVML_ERROR_")
    if init_name not in NVML_ERRORS:
        raise ConfigError(f"mock NVML profile {resolved['name']}: unknown init result {init!r}")
    lines.append(("init.result", "SUCCESS" if init_name == "SUCCESS" else f"!{init_name}"))
    _flatten("system", resolved["system"], lines)
    for group in ("topology", "p2p"):
        for key, value in resolved[group].items():
            _flatten(_pair_key(group, key), value, lines)
    lines.append(("gpu.count", str(len(resolved["gpus"]))))
    for index, gpu in enumerate(resolved["gpus"]):
        _flatten(f"gpu.{index}", gpu, lines)
    body = "\n".join(f"{key}={value}" for key, value in lines)
    description = " ".join(str(resolved["description"]).split())
    return f"{CONF_HEADER}\n# {resolved['name']}: {description}\n{body}\n"


def compile_profile(profile: str | Path) -> str:
    """Compile a profile (shipped name or YAML path) to the flat ``key=value`` text the C library reads.

    Write the result to a file and point ``GPUPROV_MOCK_NVML_CONF`` at it, or install it as
    ``/etc/gpuprov/mock-nvml.conf`` (see :func:`gpuprov.lab.mocknvml.install`).
    """
    resolved = load_profile(profile)
    log.debug("compiled mock NVML profile %s (%d GPUs)", resolved["name"], len(resolved["gpus"]))
    return compile_resolved(resolved)
