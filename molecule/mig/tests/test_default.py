"""The mixed layout of molecule.yml on the a100x8-nvswitch mock, read back through NVML (pynvml in the
container, the mock library answering from its shared GPU state): GPUs 0-3 seven 1g.10gb, GPUs 4-5
3g.40gb + 2g.20gb + 2x 1g.10gb, GPU 6 one 7g.80gb, GPU 7 MIG off; one full compute instance per GPU
instance; the boot unit installed, enabled and ordered before the GPU clients."""

from __future__ import annotations

import json

# Reads every GPU's MIG mode and GPU/compute instances with plain pynvml calls (not the role's engine).
PROBE = r"""
import ctypes, json, sys
sys.path.insert(0, "/opt/gpuprov-test-probe")  # NVIDIA's pynvml.py, put there by prepare.yml for this probe
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


def test_layout_stored_and_no_controller_code_on_the_host(host):
    layout = json.loads(host.file("/etc/gpuprov/mig/layout.json").content_string)
    assert layout["layout"] == "mixed"
    assert layout["entries"][2] == {"devices": [6], "mig_enabled": True, "mig_devices": {"7g.80gb": 1}}
    assert not host.file("/usr/local/lib/gpuprov").exists
    assert host.run("find / -xdev -name 'pynvml.py' -not -path '/opt/gpuprov-test-probe/*'").stdout == ""


def test_boot_unit_runs_nvidia_smi_largest_first(host):
    unit = host.file("/etc/systemd/system/gpuprov-mig.service").content_string
    assert "python" not in unit
    command = host.run("systemctl show -p ExecStart --value gpuprov-mig.service").stdout
    creates = [part.split(" -C")[0].split("-cgi ")[1] for part in command.split("||") if "-cgi" in part]
    assert len(creates) == 7, command  # GPU 7 is MIG off: nothing to create at boot
    assert creates[4] == "3g.40gb,2g.20gb,1g.10gb,1g.10gb", creates


def test_boot_unit_recreates_lost_instances_and_leaves_others(host):
    """Instances of GPUs 0 and 4 destroyed (what a reboot does to all): the unit re-creates exactly those; a GPU
    that fails (GPU 0 with MIG mode off) fails the unit but does not stop the GPUs after it."""
    for index in (0, 4):
        assert host.run(f"nvidia-smi mig -i {index} -dci && nvidia-smi mig -i {index} -dgi").rc == 0
    assert counts(gpus(host)[0]) == {}
    result = host.run("systemctl restart gpuprov-mig.service")
    assert result.rc == 0, host.run("journalctl -u gpuprov-mig.service --no-pager -o cat").stdout
    data = gpus(host)
    assert counts(data[0]) == {"1g.10gb": 7} and counts(data[1]) == {"1g.10gb": 7}
    assert counts(data[4]) == {"3g.40gb": 1, "2g.20gb": 1, "1g.10gb": 2}
    assert counts(data[6]) == {"7g.80gb": 1}

    # GPU 0 loses its instances and its MIG mode: the unit fails, and GPU 4 still gets its instances back
    for index in (0, 4):
        assert host.run(f"nvidia-smi mig -i {index} -dci && nvidia-smi mig -i {index} -dgi").rc == 0
    assert host.run("nvidia-smi -i 0 -mig 0").rc == 0
    assert host.run("systemctl restart gpuprov-mig.service").rc != 0
    data = gpus(host)
    assert counts(data[0]) == {} and counts(data[4]) == {"3g.40gb": 1, "2g.20gb": 1, "1g.10gb": 2}
    # put GPU 0 back as declared for whatever runs after
    assert host.run("nvidia-smi -i 0 -mig 1").rc == 0
    assert host.run("systemctl restart gpuprov-mig.service").rc == 0
    assert counts(gpus(host)[0]) == {"1g.10gb": 7}
