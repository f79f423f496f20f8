#!/usr/bin/python
# Copyright: gpuprov contributors
# Apache-2.0
"""Merge the NVIDIA runtime into a container engine's configuration, changing only the keys it owns."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: container_runtime_config
short_description: Register the NVIDIA runtime in daemon.json / containerd config.toml, or set toolkit keys
description:
  - Does what C(nvidia-ctk runtime configure) does, as a merge. It reads the existing file, sets only the
    keys listed below and leaves every other key, table and (for TOML) comment as the admin wrote it.
  - The file is rewritten atomically (temporary file in the same directory, then rename) and only when a
    value differs; otherwise C(changed=false) and the file is untouched, formatting included.
  - V(docker) (C(/etc/docker/daemon.json)) sets C(runtimes.<runtime_name>) to C({path, args}) (and
    C(runtimeArgs), which dockerd reads, when O(runtime_args) is not empty); with O(set_as_default)
    also C(default-runtime).
  - V(containerd) (C(/etc/containerd/config.toml)) registers the runtime in the CRI plugin
    (config schema version 2 C(plugins."io.containerd.grpc.v1.cri"), version 3
    C(plugins."io.containerd.cri.v1.runtime")) with C(runtime_type) and C(options.BinaryName),
    copies options the C(runc) runtime has and ours lacks (e.g. C(SystemdCgroup)), as nvidia-ctk does,
    and with O(set_as_default) sets C(containerd.default_runtime_name). An empty or absent file gets
    C(version = 2). A non-empty file without C(version) (schema 1) is refused.
  - With O(cdi_spec_dirs) not empty, the engine's Container Device Interface support is switched on. V(docker)
    sets C(features.cdi = true) (Docker 25 and later; C(cdi-spec-dirs) too when the list differs from Docker's
    default), V(containerd) sets the CRI plugin's C(enable_cdi = true) and C(cdi_spec_dirs) (containerd 1.7 and
    later). The caller checks the engine's version, as older engines do not know the keys.
  - V(toml) sets the O(settings) key paths in any TOML file (the toolkit's
    C(/etc/nvidia-container-runtime/config.toml)).
  - TOML is read and written with tomlkit (Debian/Ubuntu package python3-tomlkit), which keeps comments,
    order and formatting of everything it does not change.
  - Supports check mode and diff mode.
options:
  path:
    description: The configuration file.
    type: path
    required: true
  engine:
    description: File format and key layout.
    type: str
    choices: [docker, containerd, toml]
    required: true
  runtime_name:
    description: Runtime name (V(docker), V(containerd)).
    type: str
    default: nvidia
  runtime_path:
    description: Runtime executable (C(path) in daemon.json, C(options.BinaryName) in containerd).
    type: str
    default: /usr/bin/nvidia-container-runtime
  runtime_args:
    description: Extra runtime arguments (V(docker) only).
    type: list
    elements: str
    default: []
  runtime_type:
    description: containerd runtime (shim) type.
    type: str
    default: io.containerd.runc.v2
  set_as_default:
    description: Make the runtime the engine's default. False leaves the current default as it is.
    type: bool
    default: false
  cdi_spec_dirs:
    description: V(docker) and V(containerd) only; directories of CDI specifications. Empty leaves CDI alone.
    type: list
    elements: str
    default: []
  settings:
    description: V(toml) only; each item sets the value at the key path C(key) (list of table names and key).
    type: list
    elements: dict
    default: []
  mode:
    description: Mode of a newly created file (an existing file keeps its mode and owner).
    type: str
    default: "0644"
"""

EXAMPLES = r"""
- name: Register the nvidia runtime with Docker
  container_runtime_config:
    path: /etc/docker/daemon.json
    engine: docker

- name: Point the toolkit at the host driver
  container_runtime_config:
    path: /etc/nvidia-container-runtime/config.toml
    engine: toml
    settings:
      - {key: [nvidia-container-cli, root], value: /}
"""

RETURN = r"""
runtimes:
  description: Runtime names registered in the file after the merge (V(docker), V(containerd)).
  returned: success
  type: list
  elements: str
default_runtime:
  description: The engine's default runtime after the merge, or null when the file sets none.
  returned: success
  type: str
config_version:
  description: containerd config schema version used (2 or 3); null for other engines.
  returned: success
  type: int
updated:
  description: The key paths whose values were set or changed (each a dotted path).
  returned: success
  type: list
  elements: str
"""

import json
import os
import tempfile
from typing import Any

from ansible.module_utils.basic import AnsibleModule

try:
    import tomlkit

    HAS_TOMLKIT = True
except ImportError:  # pragma: no cover - reported through fail_json
    HAS_TOMLKIT = False

CRI_PLUGIN = {2: "io.containerd.grpc.v1.cri", 3: "io.containerd.cri.v1.runtime"}
#: Where Docker looks for CDI specifications when daemon.json sets no cdi-spec-dirs (Docker's documentation).
DOCKER_CDI_SPEC_DIRS = ("/etc/cdi", "/var/run/cdi")


class ConfigRefused(Exception):
    """The file cannot be merged safely (not an object, unknown schema)."""


def _plain(value: Any) -> Any:
    """A tomlkit item (or container) as plain Python values, for comparing and returning."""
    if hasattr(value, "items") and callable(value.items):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, bool):
        return bool(value)
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, str):
        return str(value)
    return value


def _new_table(toml: bool) -> Any:
    return tomlkit.table() if toml else {}


def set_path(root: Any, keys: list[str], value: Any, toml: bool, updated: list[str]) -> None:
    """Set ``root[k0][k1]...[kn] = value``, creating missing tables; record the dotted path in
    ``updated`` only when the stored value differs. A non-table in the way raises ConfigRefused."""
    node = root
    for index, key in enumerate(keys[:-1]):
        if key not in node:
            node[key] = _new_table(toml)
        elif not hasattr(node[key], "items"):
            raise ConfigRefused(
                "{} is {!r}, not a table; refusing to replace it".format(".".join(keys[: index + 1]), node[key])
            )
        node = node[key]
    last = keys[-1]
    if last in node and _plain(node[last]) == value:
        return
    node[last] = value
    updated.append(".".join(keys))


def get_path(root: Any, keys: list[str]) -> Any:
    """``root[k0]...[kn]`` or None when a key is missing."""
    node = root
    for key in keys:
        if not hasattr(node, "items") or key not in node:
            return None
        node = node[key]
    return node


def merge_docker(text: str, params: dict[str, Any]) -> tuple[str, dict[str, Any], list[str], dict[str, Any]]:
    """Merge into daemon.json text; return (new text, parsed result, updated paths, extra results)."""
    data = json.loads(text) if text.strip() else {}
    if not isinstance(data, dict):
        raise ConfigRefused("daemon.json does not hold a JSON object")
    updated: list[str] = []
    name = params["runtime_name"]
    entry = {"path": params["runtime_path"], "args": list(params["runtime_args"])}
    if params["runtime_args"]:
        entry["runtimeArgs"] = list(params["runtime_args"])
    for key, value in entry.items():
        set_path(data, ["runtimes", name, key], value, False, updated)
    if params["set_as_default"]:
        set_path(data, ["default-runtime"], name, False, updated)
    if params["cdi_spec_dirs"]:
        set_path(data, ["features", "cdi"], True, False, updated)
        if list(params["cdi_spec_dirs"]) != list(DOCKER_CDI_SPEC_DIRS):
            set_path(data, ["cdi-spec-dirs"], list(params["cdi_spec_dirs"]), False, updated)
    extra = {"runtimes": sorted(data.get("runtimes", {})), "default_runtime": data.get("default-runtime"),
             "config_version": None}
    return json.dumps(data, indent=4) + "\n", data, updated, extra


def merge_containerd(text: str, params: dict[str, Any]) -> tuple[str, dict[str, Any], list[str], dict[str, Any]]:
    """Merge into containerd's config.toml text (schema 2 or 3)."""
    doc = tomlkit.parse(text)
    updated: list[str] = []
    if "version" not in doc:
        if _plain(doc):
            raise ConfigRefused(
                "config.toml has no 'version' key, i.e. containerd's schema version 1; migrate it first "
                "(containerd config migrate > config.toml.new, review, replace) and run again"
            )
        doc["version"] = 2
        updated.append("version")
    version = int(doc["version"])
    if version not in CRI_PLUGIN:
        raise ConfigRefused(f"config.toml schema version {version} is not supported (2 or 3)")
    base = ["plugins", CRI_PLUGIN[version], "containerd"]
    name = params["runtime_name"]
    runtime = [*base, "runtimes", name]
    set_path(doc, [*runtime, "runtime_type"], params["runtime_type"], True, updated)
    runc_options = get_path(doc, [*base, "runtimes", "runc", "options"])
    ours = get_path(doc, [*runtime, "options"])
    if runc_options is not None and name != "runc":
        for key, value in runc_options.items():
            if key != "BinaryName" and (ours is None or key not in ours):
                set_path(doc, [*runtime, "options", str(key)], _plain(value), True, updated)
                ours = get_path(doc, [*runtime, "options"])
    set_path(doc, [*runtime, "options", "BinaryName"], params["runtime_path"], True, updated)
    if params["set_as_default"]:
        set_path(doc, [*base, "default_runtime_name"], name, True, updated)
    if params["cdi_spec_dirs"]:
        set_path(doc, ["plugins", CRI_PLUGIN[version], "enable_cdi"], True, True, updated)
        set_path(doc, ["plugins", CRI_PLUGIN[version], "cdi_spec_dirs"], list(params["cdi_spec_dirs"]), True, updated)
    runtimes = get_path(doc, [*base, "runtimes"])
    default = get_path(doc, [*base, "default_runtime_name"])
    extra = {"runtimes": sorted(str(k) for k in runtimes) if runtimes is not None else [],
             "default_runtime": None if default is None else str(default), "config_version": version}
    return tomlkit.dumps(doc), _plain(doc), updated, extra


def merge_toml(text: str, params: dict[str, Any]) -> tuple[str, dict[str, Any], list[str], dict[str, Any]]:
    """Set each ``settings`` key path in a TOML document."""
    doc = tomlkit.parse(text)
    updated: list[str] = []
    for item in params["settings"]:
        keys = item.get("key")
        if not isinstance(keys, list) or not keys or "value" not in item:
            raise ConfigRefused(f"each settings item needs key (a non-empty list) and value: {item!r}")
        set_path(doc, [str(k) for k in keys], item["value"], True, updated)
    return tomlkit.dumps(doc), _plain(doc), updated, {"runtimes": [], "default_runtime": None,
                                                      "config_version": None}


MERGERS = {"docker": merge_docker, "containerd": merge_containerd, "toml": merge_toml}


def write_atomic(module: AnsibleModule, path: str, text: str, mode: str) -> None:
    """Write ``text`` to a temporary file beside ``path`` and rename it over ``path``."""
    directory = os.path.dirname(path) or "."
    if not os.path.isdir(directory):
        os.makedirs(directory, 0o755)
    fd, tmp = tempfile.mkstemp(prefix=".gpuprov-", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        existed = os.path.exists(path)
        module.atomic_move(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    if not existed:
        module.set_mode_if_different(path, mode, False)


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "path": {"type": "path", "required": True},
            "engine": {"type": "str", "required": True, "choices": sorted(MERGERS)},
            "runtime_name": {"type": "str", "default": "nvidia"},
            "runtime_path": {"type": "str", "default": "/usr/bin/nvidia-container-runtime"},
            "runtime_args": {"type": "list", "elements": "str", "default": []},
            "runtime_type": {"type": "str", "default": "io.containerd.runc.v2"},
            "set_as_default": {"type": "bool", "default": False},
            "settings": {"type": "list", "elements": "dict", "default": []},
            "cdi_spec_dirs": {"type": "list", "elements": "str", "default": []},
            "mode": {"type": "str", "default": "0644"},
        },
        supports_check_mode=True,
    )
    params = module.params
    path = params["path"]
    if params["engine"] != "docker" and not HAS_TOMLKIT:
        module.fail_json(msg="tomlkit is missing on the host: install python3-tomlkit (the container_toolkit role "
                             f"does) to merge {path} without losing its comments")
    before = ""
    if os.path.exists(path):
        with open(path, encoding="utf-8") as handle:
            before = handle.read()
    try:
        after, _data, updated, extra = MERGERS[params["engine"]](before, params)
    except ConfigRefused as exc:
        module.fail_json(msg=f"{path}: {exc}")
    except ValueError as exc:  # json.JSONDecodeError and tomlkit's ParseError both derive from ValueError
        module.fail_json(msg="{} is not valid {}: {}; fix or remove it, then run again".format(
            path, "JSON" if params["engine"] == "docker" else "TOML", exc))
    changed = bool(updated)
    result: dict[str, Any] = dict(changed=changed, path=path, updated=updated, **extra)
    if changed and module._diff:
        result["diff"] = {"before": before, "after": after, "before_header": path, "after_header": path}
    if changed and not module.check_mode:
        write_atomic(module, path, after, params["mode"])
    module.exit_json(**result)


if __name__ == "__main__":
    main()
