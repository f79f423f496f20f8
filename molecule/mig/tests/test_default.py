"""The mixed layout of molecule.yml on the a100x8-nvswitch mock, read back through NVML (pynvml in the
container, the mock library answering from its shared GPU state): GPUs 0-3 seven 1g.10gb, GPUs 4-5
3g.40gb + 2g.20gb + 2x 1g.10gb, GPU 6 one 7g.80gb, GPU 7 MIG off; one full compute instance per GPU
instance; the boot unit installed, enabled and ordered before the GPU clients."""

from __future__ import annotations

import json

# Reads every GPU's MIG mode and GPU/compute instances with plain pynvml calls (not the role's engine).
PROBE = r"""
import ctypes, json, sys
sys.path.insert(0, "/usr/local/lib/gpuprov/mig")  # NVIDIA's pynvml.py, installed for the boot unit
import pynvml as n
n.nvmlInit()
out = []
for i in range(n.nvmlDeviceGetCount()):
    h = n.nvmlDeviceGetHandleByIndex(i)
    cur, pend = n.nvmlDeviceGetMigMode(h)
    gis = {}
    if cur:
        for p in range(n.NVML_GPU_INSTANCE_PROFILE_COUNT):
            try:
                info = n.nvmlDeviceGetGpuInstanceProfileInfo(h, p)
            except n.NVMLError:
                continue
            arr = (n.c_nvmlGpuInstance_t * 8)(); cnt = ctypes.c_uint()
            n.nvmlDeviceGetGpuInstances(h, info.id, arr, ctypes.byref(cnt))
            for k in range(cnt.value):
                cis = []
                for c in range(n.NVML_COMPUTE_INSTANCE_PROFILE_COUNT):
                    carr = (n.c_nvmlComputeInstance_t * 8)(); ccnt = ctypes.c_uint()
                    try:
                        n.nvmlGpuInstanceGetComputeInstances(arr[k], c, carr, ctypes.byref(ccnt))
                    except n.NVMLError:
                        continue
                    cis += [n.nvmlGpuInstanceGetComputeInstanceProfileInfo(arr[k], c, 0).sliceCount] * ccnt.value
                gis.setdefault(info.name, []).append({"slices": info.sliceCount, "ci_slices": cis})
    out.append({"current": cur, "pending": pend, "gis": gis})
n.nvmlShutdown()
print(json.dumps(out))
"""


def gpus(host):
    result = host.run("python3 -c %s", PROBE)
    assert result.rc == 0, result.stderr
    return json.loads(result.stdout)


def counts(gpu):
    return {name.removeprefix("MIG "): len(items) for name, items in gpu["gis"].items()}


def test_instances_exist_as_declared(host):
    data = gpus(host)
    assert len(data) == 8
    for index in range(4):
        assert counts(data[index]) == {"1g.10gb": 7}, index
    for index in (4, 5):
        assert counts(data[index]) == {"3g.40gb": 1, "2g.20gb": 1, "1g.10gb": 2}, index
    assert counts(data[6]) == {"7g.80gb": 1}
    assert (data[7]["current"], data[7]["pending"], data[7]["gis"]) == (0, 0, {})
    assert all((g["current"], g["pending"]) == (1, 1) for g in data[:7])


def test_one_full_compute_instance_per_gpu_instance(host):
    for gpu in gpus(host):
        for items in gpu["gis"].values():
            for gi in items:
                assert gi["ci_slices"] == [gi["slices"]]


def test_state_is_gpu_state_in_the_mock_state_file(host):
    state = host.file("/etc/gpuprov/mock-nvml.state")
    assert state.is_file
    assert "gpu.6.gi=" in state.content_string
    assert "gpu.7.mig=0 0" in state.content_string


def test_boot_unit_installed_enabled_and_ordered(host):
    unit = host.file("/etc/systemd/system/gpuprov-mig.service")
    assert unit.is_file
    assert unit.mode == 0o644
    assert host.service("gpuprov-mig.service").is_enabled
    before = host.run("systemctl show -p Before --value gpuprov-mig.service").stdout.split()
    for client in ("nvidia-persistenced.service", "nvidia-fabricmanager.service", "nvidia-dcgm.service",
                   "dcgm-exporter.service", "docker.service"):
        assert client in before
    assert "systemd-modules-load.service" in host.run("systemctl show -p After --value gpuprov-mig.service").stdout
    verify = host.run("systemd-analyze verify /etc/systemd/system/gpuprov-mig.service")
    assert verify.rc == 0, verify.stderr


def test_layout_stored_for_the_boot_unit(host):
    layout = json.loads(host.file("/etc/gpuprov/mig/layout.json").content_string)
    assert layout["layout"] == "mixed"
    assert layout["entries"][2] == {"devices": [6], "mig_enabled": True, "mig_devices": {"7g.80gb": 1}}
    assert host.file("/usr/local/lib/gpuprov/mig/gpuprov_mig.py").is_file
    assert host.file("/usr/local/lib/gpuprov/mig/pynvml.py").is_file


def test_boot_engine_asserts_the_applied_layout(host):
    result = host.run("python3 /usr/local/lib/gpuprov/mig/gpuprov_mig.py --config /etc/gpuprov/mig/layout.json --check")
    assert result.rc == 0, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == 8
    assert all(line.endswith(": ok") for line in lines), lines
