#!/usr/bin/python
# Copyright: gpuprov contributors
# Apache-2.0
"""Generate the NVIDIA CDI specification only when the driver, the GPU/MIG device set or the toolkit changed."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: cdi_spec
short_description: Regenerate the NVIDIA CDI specification when the driver, GPUs, MIG devices or toolkit changed
description:
  - Reads the driver version and the GPUs (index, UUID, MIG devices) through NVML, the toolkit version from
    C(nvidia-ctk --version) and the devices of the current specification from C(nvidia-ctk cdi list), and compares
    them with the fingerprint recorded at the last generation (C(module_utils/cdi.py)).
  - Only when they differ is the specification regenerated, with C(nvidia-ctk cdi generate --output=<path>) or,
    with I(method=refresh-unit), by restarting the toolkit's C(nvidia-cdi-refresh.service) (toolkit 1.18.0+);
    the regenerated specification must then list the devices NVML reports, or the module fails naming the
    difference. C(changed) is true only when it regenerated.
  - Without C(nvidia-ctk) on the host, or with I(follow_record) and no record, it does nothing. When NVML cannot
    be read (the driver is not loaded, or an upgraded driver waits for a reboot) nothing is generated and
    RV(deferred) names why; the next run after the reboot regenerates.
  - pynvml need not be installed on the host; the action plugin of the same name ships the controller's copy.
options:
  path:
    description: The specification file (C(/var/run/cdi/nvidia.yaml) is the refresh unit's).
    type: path
    default: /etc/cdi/nvidia.yaml
  method:
    description: C(generate) runs C(nvidia-ctk cdi generate); C(refresh-unit) restarts I(refresh_unit), whose
      output I(path) must be.
    type: str
    choices: [generate, refresh-unit]
    default: generate
  refresh_unit:
    description: The toolkit's refresh service.
    type: str
    default: nvidia-cdi-refresh.service
  record:
    description: JSON file recording each generation (path, method, versions, devices, fingerprint).
    type: path
    default: /var/lib/gpuprov/cdi/nvidia.json
  follow_record:
    description: Take I(path) and I(method) from I(record), and do nothing where there is no record (the mig role
      regenerates only what the container_toolkit role set up).
    type: bool
    default: false
  ctk:
    description: The nvidia-ctk executable (name or path).
    type: str
    default: nvidia-ctk
  pynvml_dir:
    description: Directory holding C(pynvml.py); set by the action plugin.
    type: path
attributes:
  check_mode:
    support: full
author: gpuprov contributors
"""

EXAMPLES = r"""
- name: Regenerate the CDI specification when it is stale
  gpuprov.gpu.cdi_spec:
    path: /etc/cdi/nvidia.yaml
"""

RETURN = r"""
devices:
  description: Device names of kind nvidia.com/gpu that C(nvidia-ctk cdi list) reports after the run.
  returned: when nvidia-ctk is installed and NVML answers
  type: list
  elements: str
expected:
  description: The names NVML implies (index, GPU UUID, C(<gpu>:<mig>), C(all)).
  returned: when NVML answers
  type: list
  elements: str
reason:
  description: Why the specification was (or in check mode would be) regenerated; empty when it was current.
  returned: always
  type: str
deferred:
  description: Why nothing could be checked (no nvidia-ctk, no record to follow, NVML not usable); empty otherwise.
  returned: always
  type: str
driver_version: {description: Driver version NVML reports, returned: when NVML answers, type: str}
toolkit_version: {description: nvidia-ctk's version, returned: when nvidia-ctk is installed, type: str}
fingerprint: {description: SHA-256 of the versions and names, returned: when NVML answers, type: str}
path: {description: The specification checked, returned: always, type: str}
method: {description: How it is regenerated, returned: always, type: str}
"""

import json
import os
import sys
import tempfile
from typing import Any

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuprov.gpu.plugins.module_utils.cdi import (
    CdiError,
    expected_names,
    fingerprint,
    nvml_state,
    parse_cdi_list,
    stale_reason,
    toolkit_version,
)


def read_record(path: str) -> dict[str, Any] | None:
    """The recorded generation, or None when the file is absent or unreadable JSON."""
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def write_record(module: AnsibleModule, path: str, data: dict[str, Any]) -> None:
    """Write ``data`` as JSON to ``path`` atomically (directory created 0755)."""
    directory = os.path.dirname(path)
    os.makedirs(directory, 0o755, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".gpuprov-", dir=directory)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        json.dump(data, handle, indent=2, sort_keys=True)
        handle.write("\n")
    os.chmod(tmp, 0o644)
    module.atomic_move(tmp, path)


def list_devices(module: AnsibleModule, ctk: str, path: str) -> list[str] | None:
    """Names ``nvidia-ctk cdi list`` gives for the specification's directory; None when ``path`` is absent."""
    if not os.path.exists(path):
        return None
    rc, out, err = module.run_command([ctk, "cdi", "list", "--spec-dir=" + os.path.dirname(path)])
    if rc != 0:
        module.fail_json(msg="nvidia-ctk cdi list failed (rc %s): %s" % (rc, (err or out).strip()[-500:]))
    return parse_cdi_list(out + "\n" + err)


def regenerate(module: AnsibleModule, ctk: str, path: str, method: str, unit: str) -> None:
    """Run the generation; fail with the command's error output."""
    if method == "refresh-unit":
        argv = [module.get_bin_path("systemctl", required=True), "restart", unit]
    else:
        argv = [ctk, "cdi", "generate", "--output=" + path]
    rc, out, err = module.run_command(argv)
    if rc != 0:
        module.fail_json(msg="%s failed (rc %s): %s" % (" ".join(argv), rc, (err or out).strip()[-800:]))


def main() -> None:
    """Compare, and outside check mode regenerate when stale."""
    module = AnsibleModule(
        argument_spec={
            "path": {"type": "path", "default": "/etc/cdi/nvidia.yaml"},
            "method": {"type": "str", "choices": ["generate", "refresh-unit"], "default": "generate"},
            "refresh_unit": {"type": "str", "default": "nvidia-cdi-refresh.service"},
            "record": {"type": "path", "default": "/var/lib/gpuprov/cdi/nvidia.json"},
            "follow_record": {"type": "bool", "default": False},
            "ctk": {"type": "str", "default": "nvidia-ctk"},
            "pynvml_dir": {"type": "path"},
        },
        supports_check_mode=True,
    )
    params = module.params
    record = read_record(params["record"])
    path, method = params["path"], params["method"]
    if params["follow_record"] and record:
        path, method = record.get("path", path), record.get("method", method)
    result: dict[str, Any] = {"changed": False, "path": path, "method": method, "reason": "", "deferred": ""}
    if params["follow_record"] and not record:
        module.exit_json(**dict(result, deferred="no CDI generation is recorded in %s" % params["record"]))
    ctk = module.get_bin_path(params["ctk"])
    if not ctk:
        module.exit_json(**dict(result, deferred="%s is not installed" % params["ctk"]))
    _rc, out, err = module.run_command([ctk, "--version"])
    result["toolkit_version"] = toolkit_version(out + err) or "unknown"
    if params["pynvml_dir"]:
        sys.path.insert(0, params["pynvml_dir"])
    try:
        import pynvml
    except ImportError as exc:
        module.fail_json(msg="pynvml is not importable; run cdi_spec through its action plugin: %s" % exc)
    try:
        state = nvml_state(pynvml)
    except CdiError as exc:
        module.exit_json(**dict(result, deferred="%s; the specification is regenerated on a run after the driver "
                                                 "is loaded" % exc))
    names = expected_names(state["gpus"])
    current = {"driver_version": state["driver_version"], "toolkit_version": result["toolkit_version"],
               "devices": names, "fingerprint": fingerprint(state["driver_version"], result["toolkit_version"],
                                                            names)}
    listed = list_devices(module, ctk, path)
    reason = stale_reason(current, listed, record)
    result.update(expected=names, driver_version=current["driver_version"], fingerprint=current["fingerprint"],
                  devices=listed or [], reason=reason)
    if not reason or module.check_mode:
        module.exit_json(**dict(result, changed=bool(reason)))
    regenerate(module, ctk, path, method, params["refresh_unit"])
    listed = list_devices(module, ctk, path)
    left = stale_reason(current, listed, dict(current))
    if left:
        module.fail_json(msg="the regenerated specification %s is still not what NVML reports: %s" % (path, left),
                         **dict(result, devices=listed or []))
    write_record(module, params["record"], dict(current, path=path, method=method))
    module.exit_json(**dict(result, changed=True, devices=listed))


if __name__ == "__main__":
    main()
