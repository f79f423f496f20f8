"""Real state after the container_toolkit role on a host upgraded in place with an old toolkit and the
admin's own engine configuration (prepare.yml): packages and holds, apt source, merged daemon.json /
config.toml (admin keys and comments kept, nvidia runtime added), what dockerd and containerd load, and
the refusals and stub results recorded for the cgroup v2, default-runtime and driver-root failures
(docs/field-failures.md).

Parsing happens here, on the controller (json, tomlkit), from the files' content on the host.
"""

from __future__ import annotations

import json

import tomlkit
import yaml

VERSION = "1.17.8-1"
PACKAGES = ["nvidia-container-toolkit", "nvidia-container-toolkit-base", "libnvidia-container-tools",
            "libnvidia-container1"]
CRI = "io.containerd.grpc.v1.cri"
RESULTS = "/var/lib/gpuprov-molecule"
MIRROR = "https://registry-mirror.example.invalid"


def is_debian12(host):
    return host.backend.get_hostname().endswith("debian12")


def daemon_json(host):
    return json.loads(host.file("/etc/docker/daemon.json").content_string)


def containerd_toml(host):
    return tomlkit.parse(host.file("/etc/containerd/config.toml").content_string)


def test_toolkit_packages_pinned_and_held(host):
    for name in PACKAGES:
        pkg = host.package(name)
        assert pkg.is_installed, name
        assert pkg.version == VERSION, (name, pkg.version)
    selections = dict(line.split() for line in host.check_output("dpkg --get-selections").splitlines())
    assert [selections[name] for name in PACKAGES] == ["hold"] * len(PACKAGES)


def test_apt_source_signed_and_hand_made_list_removed(host):
    assert not host.file("/etc/apt/sources.list.d/nvidia-container-toolkit.list").exists
    source = host.file("/etc/apt/sources.list.d/nvidia-container-toolkit.sources")
    assert source.is_file
    assert "Signed-By: /usr/share/keyrings/nvidia-container-toolkit-keyring.gpg" in source.content_string
    assert "URIs: http://127.0.0.1:8472/" in source.content_string


def test_admin_daemon_json_keys_survive(host):
    data = daemon_json(host)
    assert data["log-driver"] == "journald"
    assert data["registry-mirrors"] == [MIRROR]
    assert data["data-root"] == "/var/lib/docker-admin"
    assert data["live-restore"] is True
    assert data["runtimes"]["nvidia"] == {"path": "/usr/bin/nvidia-container-runtime", "args": []}
    if is_debian12(host):
        assert data["default-runtime"] == "nvidia"
    else:
        assert "default-runtime" not in data


def test_dockerd_runs_with_the_admin_config_and_lists_nvidia(host):
    assert host.service("docker").is_running
    runtimes = json.loads(host.check_output("docker info --format '{{json .Runtimes}}'"))
    assert runtimes["nvidia"]["path"] == "/usr/bin/nvidia-container-runtime"
    assert host.check_output("docker info --format '{{.DockerRootDir}}'") == "/var/lib/docker-admin"
    expected_default = "nvidia" if is_debian12(host) else "runc"
    assert host.check_output("docker info --format '{{.DefaultRuntime}}'") == expected_default


def test_containerd_runtime_merged_admin_settings_kept(host):
    text = host.file("/etc/containerd/config.toml").content_string
    assert text.startswith("# Site containerd configuration - owned by the platform team")
    assert "SystemdCgroup = true  # kubelet uses the systemd cgroup driver" in text
    doc = containerd_toml(host)
    assert doc["version"] == 2
    assert doc["oom_score"] == -999
    cri = doc["plugins"][CRI]
    assert cri["sandbox_image"] == "registry.k8s.io/pause:3.9"
    assert cri["registry"]["mirrors"]["docker.io"]["endpoint"] == [MIRROR]
    runtimes = cri["containerd"]["runtimes"]
    assert runtimes["runc"]["options"]["SystemdCgroup"] is True
    assert runtimes["nvidia"]["runtime_type"] == "io.containerd.runc.v2"
    # runc's options are copied to nvidia, as nvidia-ctk does
    assert runtimes["nvidia"]["options"]["SystemdCgroup"] is True
    assert runtimes["nvidia"]["options"]["BinaryName"] == "/usr/bin/nvidia-container-runtime"


def test_default_runtime_or_runtimeclass(host):
    default = containerd_toml(host)["plugins"][CRI]["containerd"]["default_runtime_name"]
    dump = host.check_output("containerd config dump")
    assert "containerd.runtimes.nvidia]" in dump
    if "SystemdCgroup = true" in dump:  # containerd >= 1.5 dumps runtime options (1.4 leaves them out)
        assert 'BinaryName = "/usr/bin/nvidia-container-runtime"' in dump
    manifest = host.file("/etc/gpuprov/kubernetes/runtimeclass-nvidia.yaml")
    assert manifest.is_file
    runtime_class = yaml.safe_load(manifest.content_string)
    assert runtime_class == {"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass",
                             "metadata": {"name": "nvidia"}, "handler": "nvidia"}
    if is_debian12(host):  # containerd_mode: default
        assert default == "nvidia"
        assert 'default_runtime_name = "nvidia"' in dump
    else:  # containerd_mode: runtimeclass leaves the admin's default
        assert default == "runc"
        assert 'default_runtime_name = "runc"' in dump
    assert host.service("containerd").is_running


def test_old_library_failed_on_the_v2_fixture_before(host):
    before = host.file(f"{RESULTS}/cgroup-v2-before.txt").content_string
    assert "cgroup subsystem devices not found" in before


def test_pin_below_floor_refused_naming_pin_and_versions(host):
    msg = host.file(f"{RESULTS}/cgroup-v2-refusal.txt").content_string
    assert "cgroup v2 host needs libnvidia-container >= 1.8.0" in msg
    assert "container_toolkit_version pins 1.3.2-1" in msg
    assert "(installed 1.3.2-1)" in msg
    assert "/opt/gpuprov-cgroup-v2 is a unified hierarchy" in msg


def test_upgraded_library_works_on_the_v2_fixture(host):
    result = json.loads(host.file(f"{RESULTS}/result.json").content_string)
    assert result["cgroup_mode"] == "unified"
    out = host.run("nvidia-container-cli --cgroup-root /opt/gpuprov-cgroup-v2 info")
    assert out.rc == 0, out.stderr
    assert host.file("/opt/gpuprov-cgroup-v2/cgroup.controllers").exists
    assert not host.file("/opt/gpuprov-cgroup-v2/devices").exists


def test_wrong_root_failed_before_and_was_refused_with_both_paths(host):
    before = host.file(f"{RESULTS}/driver-root-before.txt").content_string
    assert "load library failed: libnvidia-ml.so.1" in before
    msg = host.file(f"{RESULTS}/driver-root-refusal.txt").content_string
    assert "config root /run/nvidia/driver has no libnvidia-ml.so.1" in msg
    # ldconfig may name the merged-/usr alias /lib/x86_64-linux-gnu as well
    located = msg.split("host driver libraries are in ", 1)[1].split(";", 1)[0].split(", ")
    assert "/usr/lib/x86_64-linux-gnu" in located
    assert "set container_toolkit_driver_root: /" in msg


def test_toolkit_config_points_at_host_driver(host):
    text = host.file("/etc/nvidia-container-runtime/config.toml").content_string
    cli = tomlkit.parse(text)["nvidia-container-cli"]
    assert cli["root"] == "/"
    ldconfig = "@/sbin/ldconfig.real" if host.file("/sbin/ldconfig.real").exists else "@/sbin/ldconfig"
    assert cli["ldconfig"] == ldconfig
    # the package's commented defaults are kept
    assert '#debug = "/var/log/nvidia-container-toolkit.log"' in text
    assert 'log-level = "info"' in text
    out = host.run("nvidia-container-cli --cgroup-root /opt/gpuprov-cgroup-v2 info")
    assert out.rc == 0, out.stderr
    assert "root /," in out.stdout


def test_smoke_test_skipped_with_reason(host):
    result = json.loads(host.file(f"{RESULTS}/result.json").content_string)
    assert not host.file("/dev/nvidia0").exists
    assert result["smoke_test"]["ran"] is False
    assert result["smoke_test"]["reason"] == "no GPU device node /dev/nvidia0 on this host"
    assert result["services_skipped"] == ""


UUIDS = [f"GPU-00000000-0000-4000-8000-0000000a100{i}" for i in range(8)]
MIG_DEVICES = ["0:0", "0:1", "0:2", "1:0", "1:1", "1:2"]  # 3g.40gb + 2x 1g.10gb on GPUs 0 and 1


def test_cdi_spec_lists_the_mock_gpus_and_the_mig_devices(host):
    spec_file = host.file("/etc/cdi/nvidia.yaml")
    assert spec_file.is_file
    assert spec_file.mode == 0o644
    spec = yaml.safe_load(spec_file.content_string)
    assert spec["kind"] == "nvidia.com/gpu"
    assert spec["cdiVersion"] == "0.5.0"
    devices = {device["name"]: device["containerEdits"]["deviceNodes"] for device in spec["devices"]}
    assert set(devices) == {str(i) for i in range(8)} | set(UUIDS) | set(MIG_DEVICES) | {"all"}
    assert devices["3"] == [{"path": "/dev/nvidia3"}]
    assert devices[UUIDS[3]] == [{"path": "/dev/nvidia3"}]
    assert devices["1:2"] == [{"path": "/dev/nvidia1"}]
    assert {"path": "/dev/nvidia7"} in devices["all"]
    assert "NVIDIA_VISIBLE_DEVICES=void" in spec["containerEdits"]["env"]
    listed = host.check_output("nvidia-ctk cdi list").splitlines()
    assert sorted(listed) == sorted(f"nvidia.com/gpu={name}" for name in devices)


def test_cdi_generated_once_then_regenerated_after_the_mig_layout(host):
    first = json.loads(host.file(f"{RESULTS}/result.json").content_string)["cdi"]
    assert first["changed"] is True
    assert first["reason"] == "there is no CDI specification yet"
    assert (first["method"], first["path"], first["driver_version"]) == ("generate", "/etc/cdi/nvidia.yaml",
                                                                        "535.183.01")
    assert len(first["devices"]) == 17  # 8 GPUs by index and UUID, and all: no MIG devices yet
    after = json.loads(host.file(f"{RESULTS}/cdi-after-mig.json").content_string)
    assert after["changed"] is True
    assert after["reason"] == ("the specification's devices differ from NVML's (missing: 0:0, 0:1, 0:2, 1:0, 1:1, 1:2;"
                               " no longer present: none)")
    record = json.loads(host.file("/var/lib/gpuprov/cdi/nvidia.json").content_string)
    assert record["fingerprint"] == after["fingerprint"]
    assert (record["toolkit_version"], record["path"]) == ("1.17.8", "/etc/cdi/nvidia.yaml")
    assert set(MIG_DEVICES) <= set(record["devices"])


def test_cdi_left_off_in_engines_too_old_for_it(host):
    """Debian's Docker 20.10 and containerd 1.4/1.6 predate CDI (Docker 25, containerd 1.7): no keys written."""
    result = json.loads(host.file(f"{RESULTS}/result.json").content_string)
    assert result["cdi_engines"]["docker"].startswith("docker 20.10 has no CDI support (25.0 or later)")
    assert "has no CDI support (1.7 or later)" in result["cdi_engines"]["containerd"]
    assert "features" not in daemon_json(host)
    assert "enable_cdi" not in containerd_toml(host)["plugins"][CRI]
    assert result["cdi_smoke_test"]["ran"] is False
