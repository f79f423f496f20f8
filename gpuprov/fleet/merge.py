"""Deep merge of settings layers, remembering which layer set each value.

Precedence is the order of ``layers`` (later wins). Mappings merge key by key; lists, scalars and
``{env: NAME}`` references replace. ``origins`` maps each settings path (``("driver", "branch")``) to
the file path of the layer key that set it (``("groups", "a100", "settings", "driver", "branch")``),
so a problem found in the merged settings can point at the most specific layer responsible.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

from gpuprov.fleet.problem import Path_
from gpuprov.fleet.types import is_env_ref

Layer = tuple[Path_, dict[str, Any]]


def deep_merge(base: dict[str, Any], top: dict[str, Any]) -> dict[str, Any]:
    """A new mapping: ``top`` merged over ``base`` by the rules above (inputs are not changed)."""
    merged, _ = merge_layers([((), base), ((), top)])
    return merged


def merge_layers(layers: Sequence[Layer]) -> tuple[dict[str, Any], dict[Path_, Path_]]:
    """Merge ``(file_prefix, layer)`` pairs, lowest precedence first; return ``(merged, origins)``."""
    merged: dict[str, Any] = {}
    origins: dict[Path_, Path_] = {}
    for prefix, layer in layers:
        _merge_into(merged, layer, (), prefix, origins)
    return merged, origins


def _mergeable(value: object) -> bool:
    return isinstance(value, dict) and not is_env_ref(value)


def _merge_into(
    dst: dict[str, Any], src: dict[str, Any], sub: Path_, prefix: Path_, origins: dict[Path_, Path_]
) -> None:
    for key, value in src.items():
        path = (*sub, key)
        origins[path] = (*prefix, *path)
        if _mergeable(value) and _mergeable(dst.get(key)):
            _merge_into(dst[key], value, path, prefix, origins)
        else:
            dst[key] = copy.deepcopy(value)
            _record(value, path, prefix, origins)


def _record(value: object, path: Path_, prefix: Path_, origins: dict[Path_, Path_]) -> None:
    if isinstance(value, dict):
        for key, item in value.items():
            child = (*path, key)
            origins[child] = (*prefix, *child)
            _record(item, child, prefix, origins)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            child = (*path, index)
            origins[child] = (*prefix, *child)
            _record(item, child, prefix, origins)


def origin_of(origins: dict[Path_, Path_], path: Path_) -> Path_ | None:
    """File path of the layer key that set ``path``; None when ``path`` holds a schema default."""
    return origins.get(path)
