"""module_utils/cdi.py (when the CDI specification is stale) and the stand-in nvidia-ctk's spec writer and
``cdi list`` reader (gpuprov/lab/standin/ctk_cdi.py), without NVML: the stand-in's YAML is read back by PyYAML,
and its listing by the parser the cdi_spec module uses."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from ansible_collections.gpuprov.gpu.plugins.module_utils import cdi
from ansible_collections.gpuprov.gpu.plugins.modules.cdi_spec import recorded_target

from gpuprov.lab.standin import ctk_cdi

UUID0 = "GPU-00000000-0000-4000-8000-0000000a1000"
UUID1 = "GPU-00000000-0000-4000-8000-0000000a1001"
# what nvidia-ctk 1.17 prints for `cdi list` (the log line on stderr, the names on stdout)
LISTING = f"""\
INFO[0000] Found 6 CDI devices
nvidia.com/gpu=0
nvidia.com/gpu=0:0
nvidia.com/gpu={UUID0}
nvidia.com/gpu=MIG-4b1a6f52-8e12-5c4f-9e0d-3c7d1b2a9f10
nvidia.com/gpu=all
example.com/net=eth0
"""


def current(names: list[str], driver: str = "535.183.01", toolkit: str = "1.17.8") -> dict[str, Any]:
    return {"driver_version": driver, "toolkit_version": toolkit, "devices": names,
            "fingerprint": cdi.fingerprint(driver, toolkit, names)}


def test_parse_cdi_list_keeps_nvidia_gpu_names_only() -> None:
    assert cdi.parse_cdi_list(LISTING) == ["0", "0:0", UUID0, "MIG-4b1a6f52-8e12-5c4f-9e0d-3c7d1b2a9f10", "all"]
    assert cdi.parse_cdi_list("INFO[0000] Found 0 CDI devices\n") == []


def test_toolkit_version_from_the_cli_banner() -> None:
    assert cdi.toolkit_version("NVIDIA Container Toolkit CLI version 1.17.8\ncommit: 3ae4bbe\n") == "1.17.8"
    assert cdi.toolkit_version("nvidia-ctk: command not found") is None


def test_expected_names_per_gpu_and_mig_device() -> None:
    gpus = [{"index": 0, "uuid": UUID0, "mig_devices": 2}, {"index": 1, "uuid": UUID1, "mig_devices": 0}]
    assert cdi.expected_names(gpus) == ["0", "0:0", "0:1", "1", UUID0, UUID1, "all"]
    assert cdi.expected_names([]) == ["all"]


MIG0 = "MIG-4b1a6f52-8e12-5c4f-9e0d-3c7d1b2a9f10"


def test_mig_uuid_names_compared_only_where_nvml_gives_them() -> None:
    assert cdi.compared(cdi.parse_cdi_list(LISTING)) == ["0", "0:0", UUID0, "all"]
    assert cdi.compared(cdi.parse_cdi_list(LISTING), mig_uuids=True) == ["0", "0:0", UUID0, MIG0, "all"]
    listed = cdi.parse_cdi_list(LISTING)
    # the spec from before a reboot names the MIG device's old UUID: stale although the index names match
    rebooted = current(cdi.expected_names([{"index": 0, "uuid": UUID0, "mig_devices": 1,
                                           "mig_uuids": ["MIG-0d4a1f3e-0000-5c4f-9e0d-3c7d1b2a9f10"]}]))
    assert "no longer present: " + MIG0 in cdi.stale_reason(rebooted, listed, dict(rebooted))
    same = current(cdi.expected_names([{"index": 0, "uuid": UUID0, "mig_devices": 1, "mig_uuids": [MIG0]}]))
    assert cdi.stale_reason(same, listed, dict(same)) == ""
    unknown = current(cdi.expected_names([{"index": 0, "uuid": UUID0, "mig_devices": 1, "mig_uuids": None}]))
    assert cdi.stale_reason(unknown, listed, dict(unknown)) == ""


class FakeNvml:
    """pynvml's MIG device handle calls for one GPU with two MIG devices in slots 0 and 2."""

    NVML_ERROR_NOT_FOUND = 6

    class NVMLError(Exception):
        def __init__(self, value: int) -> None:
            self.value = value

    def nvmlDeviceGetMaxMigDeviceCount(self, handle: str) -> int:
        return 3

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle: str, slot: int) -> str:
        if slot == 1:
            raise self.NVMLError(6)
        if handle == "old-driver":
            raise self.NVMLError(3)  # NOT_SUPPORTED
        return f"mig{slot}"

    def nvmlDeviceGetUUID(self, handle: str) -> bytes:
        return f"MIG-{handle}".encode()


def test_mig_uuids_through_mig_device_handles() -> None:
    nv = FakeNvml()
    assert cdi._mig_uuids(nv, "gpu0", 2) == ["MIG-mig0", "MIG-mig2"]
    assert cdi._mig_uuids(nv, "gpu0", 3) is None  # not all of them: not compared
    assert cdi._mig_uuids(nv, "old-driver", 2) is None


def test_fingerprint_changes_with_driver_toolkit_and_devices() -> None:
    base = cdi.fingerprint("535.183.01", "1.17.8", ["0", "all"])
    assert base == cdi.fingerprint("535.183.01", "1.17.8", ["all", "0"])  # order does not matter
    assert len({base, cdi.fingerprint("550.54.15", "1.17.8", ["0", "all"]),
                cdi.fingerprint("535.183.01", "1.18.0", ["0", "all"]),
                cdi.fingerprint("535.183.01", "1.17.8", ["0", "0:0", "all"])}) == 4


def test_stale_reasons() -> None:
    names = ["0", "0:0", UUID0, "all"]
    now = current(names)
    assert cdi.stale_reason(now, None, None) == "there is no CDI specification yet"
    listed = cdi.parse_cdi_list(LISTING)
    assert cdi.stale_reason(now, listed, dict(now)) == ""
    assert "gpuprov did not write it" in cdi.stale_reason(now, listed, None)
    # a MIG layout change: the spec still lists the old MIG devices
    relaid = current(["0", "0:0", "0:1", UUID0, "all"])
    assert cdi.stale_reason(relaid, listed, dict(now)) == (
        "the specification's devices differ from NVML's (missing: 0:1; no longer present: none)")
    upgraded = current(names, driver="550.54.15")
    assert cdi.stale_reason(upgraded, listed, dict(now)) == (
        "the driver changed from 535.183.01 to 550.54.15 since the specification was generated")
    toolkit = current(names, toolkit="1.18.0")
    assert "NVIDIA Container Toolkit changed from 1.17.8 to 1.18.0" in cdi.stale_reason(toolkit, listed, dict(now))


def spec(mig: int) -> dict[str, Any]:
    devices = [{"name": "0", "containerEdits": {"deviceNodes": [{"path": "/dev/nvidia0"}]}},
               {"name": UUID0, "containerEdits": {"deviceNodes": [{"path": "/dev/nvidia0"}]}}]
    devices += [{"name": f"0:{i}", "containerEdits": {"deviceNodes": [{"path": "/dev/nvidia0"}]}} for i in range(mig)]
    devices.append({"name": "all", "containerEdits": {"deviceNodes": [{"path": "/dev/nvidia0"}]}})
    return {"cdiVersion": "0.5.0", "kind": "nvidia.com/gpu", "devices": devices,
            "containerEdits": {"env": ["NVIDIA_VISIBLE_DEVICES=void"],
                               "deviceNodes": [{"path": "/dev/nvidiactl"}],
                               "mounts": [{"hostPath": "/usr/lib/libnvidia-ml.so.1", "options": ["ro", "bind"]}]}}


def test_stand_in_yaml_is_the_spec_and_lists_back(tmp_path: Path) -> None:
    written = spec(mig=2)
    path = tmp_path / "nvidia.yaml"
    path.write_text("---\n" + "\n".join(ctk_cdi.to_yaml(written)) + "\n", encoding="utf-8")
    assert yaml.safe_load(path.read_text(encoding="utf-8")) == written
    listed = ctk_cdi.device_names(str(path))
    assert listed == ["nvidia.com/gpu=0", f"nvidia.com/gpu={UUID0}", "nvidia.com/gpu=0:0", "nvidia.com/gpu=0:1",
                      "nvidia.com/gpu=all"]
    assert cdi.parse_cdi_list("\n".join(listed)) == ["0", UUID0, "0:0", "0:1", "all"]


def test_stand_in_list_reads_json_specs_and_spec_dirs(tmp_path: Path, capsys: Any) -> None:
    import json

    (tmp_path / "nvidia.json").write_text(json.dumps(spec(mig=0)), encoding="utf-8")
    (tmp_path / "notes.txt").write_text("not a spec\n", encoding="utf-8")
    assert ctk_cdi.main(["cdi", "list", f"--spec-dir={tmp_path}"]) == 0
    out, err = capsys.readouterr()
    assert out.splitlines() == ["nvidia.com/gpu=0", f"nvidia.com/gpu={UUID0}", "nvidia.com/gpu=all"]
    assert "Found 3 CDI devices" in err
    assert ctk_cdi.main(["cdi", "transform"]) == 2


def test_engine_cdi_state_from_the_version_banners() -> None:
    assert cdi.engine_cdi_state("docker", "Docker version 27.5.1, build 9f9e405") == "enabled"
    assert cdi.engine_cdi_state("docker", "Docker version 25.0.0, build e758fe5") == "enabled"
    assert cdi.engine_cdi_state("docker", "Docker version 20.10.24+dfsg1, build 297e128") == (
        "docker 20.10 has no CDI support (25.0 or later)")
    debian = "containerd github.com/containerd/containerd 1.6.20~ds1 1.6.20~ds1-1+b1"
    assert cdi.engine_cdi_state("containerd", debian) == "containerd 1.6 has no CDI support (1.7 or later)"
    assert cdi.engine_cdi_state("containerd", "containerd containerd.io 1.7.27 05044ec0a9a7") == "enabled"
    assert cdi.engine_cdi_state("containerd", "containerd github.com/containerd/containerd/v2 v2.0.5 fb4c30d") == (
        "enabled")
    assert cdi.engine_cdi_state("docker", "", rc=2) == "dockerd --version gave no version (rc 2)"


def test_cdi_engine_states_filter() -> None:
    import pytest
    from ansible.errors import AnsibleFilterError
    from ansible_collections.gpuprov.gpu.plugins.filter.cdi import cdi_engine_states

    results = [{"item": "dockerd", "rc": 0, "stdout": "Docker version 26.1.3, build b72abbb", "stderr": ""},
               {"item": "containerd", "rc": 2, "stdout": "", "msg": "[Errno 2] No such file or directory"}]
    assert cdi_engine_states(results) == {
        "docker": "enabled",
        "containerd": "containerd --version gave no version ([Errno 2] No such file or directory)"}
    assert cdi_engine_states([]) == {}
    with pytest.raises(AnsibleFilterError, match="got 'podman'"):
        cdi_engine_states([{"item": "podman", "rc": 0}])


def test_a_damaged_record_falls_back_to_the_given_path_and_method() -> None:
    given = ("/etc/cdi/nvidia.yaml", "generate")
    assert recorded_target({"path": "/var/run/cdi/nvidia.yaml", "method": "refresh-unit"}, *given) == (
        "/var/run/cdi/nvidia.yaml", "refresh-unit")
    for damaged in ({"path": None, "method": 3}, {"path": "relative.yaml", "method": "rm -rf"}, {"path": ["/x"]}):
        assert recorded_target(damaged, *given) == given
