"""container_runtime_config (the collection's plugins/modules): before/after files for daemon.json,
containerd config.toml (schema 2 and 3) and the toolkit's config.toml; idempotence (changed=false on a
second run, file untouched); refusals; check mode, diff and atomic writes through the Ansible module
entry point. The containerd drift (an installer re-rendering config.toml without the nvidia table) is
detected as a change and repaired without touching the installer's settings."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import tomlkit
from ansible_collections.gpuprov.gpu.plugins.modules import container_runtime_config

ROOT = Path(__file__).resolve().parents[3]
RUNTIME = "/usr/bin/nvidia-container-runtime"
CRI = "io.containerd.grpc.v1.cri"

# Before/after files. AFTER_DEFAULT is tomlkit's rendering of BEFORE with the nvidia runtime added as the
# default (reviewed by hand: every admin line, comment included, is unchanged; the new tables follow runc).
CONTAINERD_BEFORE = """\
# Site containerd configuration - owned by the platform team.
version = 2
oom_score = -999

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "registry.k8s.io/pause:3.9"

[plugins."io.containerd.grpc.v1.cri".containerd]
  default_runtime_name = "runc"

[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"

[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
  SystemdCgroup = true  # kubelet uses the systemd cgroup driver

[plugins."io.containerd.grpc.v1.cri".registry.mirrors."docker.io"]
  endpoint = ["https://registry-mirror.example.invalid"]
"""

CONTAINERD_AFTER_DEFAULT = """\
# Site containerd configuration - owned by the platform team.
version = 2
oom_score = -999

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "registry.k8s.io/pause:3.9"

[plugins."io.containerd.grpc.v1.cri".containerd]
  default_runtime_name = "nvidia"

[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"

[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
  SystemdCgroup = true  # kubelet uses the systemd cgroup driver

[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]
runtime_type = "io.containerd.runc.v2"

[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia.options]
SystemdCgroup = true
BinaryName = "/usr/bin/nvidia-container-runtime"
[plugins."io.containerd.grpc.v1.cri".registry.mirrors."docker.io"]
  endpoint = ["https://registry-mirror.example.invalid"]
"""

# What a cluster installer's template renders over the file: its own settings, no nvidia table (drift).
INSTALLER_TEMPLATE = """\
# Rendered by the cluster installer's template.
version = 2

[plugins."io.containerd.grpc.v1.cri".containerd]
  snapshotter = "overlayfs"
  default_runtime_name = "runc"

[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"

[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
  SystemdCgroup = true

[plugins."io.containerd.grpc.v1.cri".registry.mirrors."registry.local:5000"]
  endpoint = ["http://registry.local:5000"]
"""


@pytest.fixture(scope="module")
def merge() -> ModuleType:
    return container_runtime_config


def params(**overrides: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"runtime_name": "nvidia", "runtime_path": RUNTIME, "runtime_args": [],
                            "runtime_type": "io.containerd.runc.v2", "set_as_default": False, "settings": [],
                            "cdi_spec_dirs": []}
    base.update(overrides)
    return base


# --- Docker daemon.json ---------------------------------------------------------------------------

ADMIN_DAEMON = {"log-driver": "journald", "log-opts": {"tag": "{{.Name}}"},
                "registry-mirrors": ["https://mirror.example.invalid"], "data-root": "/data/docker",
                "runtimes": {"crun": {"path": "/usr/bin/crun"}}, "default-runtime": "runc"}


def test_docker_adds_runtime_and_keeps_admin_keys(merge: ModuleType) -> None:
    text, data, updated, extra = merge.merge_docker(json.dumps(ADMIN_DAEMON), params())
    after = json.loads(text)
    assert after == data
    for key in ("log-driver", "log-opts", "registry-mirrors", "data-root", "default-runtime"):
        assert after[key] == ADMIN_DAEMON[key]
    assert after["runtimes"] == {"crun": {"path": "/usr/bin/crun"}, "nvidia": {"path": RUNTIME, "args": []}}
    assert updated == ["runtimes.nvidia.path", "runtimes.nvidia.args"]
    assert extra["runtimes"] == ["crun", "nvidia"]
    assert extra["default_runtime"] == "runc"  # set_as_default false leaves the admin's default


def test_docker_twice_is_unchanged(merge: ModuleType) -> None:
    first, _, _, _ = merge.merge_docker(json.dumps(ADMIN_DAEMON), params(set_as_default=True))
    second, _, updated, extra = merge.merge_docker(first, params(set_as_default=True))
    assert updated == []
    assert second == first
    assert extra["default_runtime"] == "nvidia"


def test_docker_runtime_args_reach_dockerd_key(merge: ModuleType) -> None:
    text, _, _, _ = merge.merge_docker("", params(runtime_args=["--debug"]))
    assert json.loads(text)["runtimes"]["nvidia"] == {"path": RUNTIME, "args": ["--debug"], "runtimeArgs": ["--debug"]}


def test_docker_updates_a_stale_runtime_path_only(merge: ModuleType) -> None:
    stale = {"runtimes": {"nvidia": {"path": "nvidia-container-runtime", "args": [], "extra": 1}}}
    text, _, updated, _ = merge.merge_docker(json.dumps(stale), params())
    assert json.loads(text)["runtimes"]["nvidia"] == {"path": RUNTIME, "args": [], "extra": 1}
    assert updated == ["runtimes.nvidia.path"]


@pytest.mark.parametrize("text", ["[]", '{"runtimes": "nvidia"}'])
def test_docker_refuses_unexpected_shapes(merge: ModuleType, text: str) -> None:
    with pytest.raises(merge.ConfigRefused):
        merge.merge_docker(text, params())


# --- containerd config.toml -----------------------------------------------------------------------

def test_containerd_nvidia_default_before_after_file(merge: ModuleType) -> None:
    before = CONTAINERD_BEFORE
    expected = CONTAINERD_AFTER_DEFAULT
    text, _, updated, extra = merge.merge_containerd(before, params(set_as_default=True))
    assert text == expected
    assert extra == {"runtimes": ["nvidia", "runc"], "default_runtime": "nvidia", "config_version": 2}
    assert f"plugins.{CRI}.containerd.default_runtime_name" in updated


def test_containerd_runtimeclass_mode_keeps_default(merge: ModuleType) -> None:
    before = CONTAINERD_BEFORE
    text, _, _, extra = merge.merge_containerd(before, params())
    doc = tomlkit.parse(text)
    assert doc["plugins"][CRI]["containerd"]["default_runtime_name"] == "runc"
    assert extra["default_runtime"] == "runc"
    assert doc["plugins"][CRI]["containerd"]["runtimes"]["nvidia"]["options"]["BinaryName"] == RUNTIME


def test_containerd_twice_is_unchanged(merge: ModuleType) -> None:
    before = CONTAINERD_BEFORE
    first, _, _, _ = merge.merge_containerd(before, params(set_as_default=True))
    second, _, updated, _ = merge.merge_containerd(first, params(set_as_default=True))
    assert updated == []
    assert second == first


def test_containerd_drift_after_installer_rewrite_is_detected_and_repaired(merge: ModuleType) -> None:
    before = CONTAINERD_BEFORE
    configured, _, _, _ = merge.merge_containerd(before, params(set_as_default=True))
    # another tool re-renders the file from its own template: the nvidia table is gone
    rewritten = INSTALLER_TEMPLATE
    assert "nvidia" not in rewritten
    repaired, _, updated, extra = merge.merge_containerd(rewritten, params(set_as_default=True))
    assert updated, "drift must show as a change (gpuprov check exits 1 on it)"
    assert extra["default_runtime"] == "nvidia"
    doc = tomlkit.parse(repaired)
    cri = doc["plugins"][CRI]
    assert cri["registry"]["mirrors"]["registry.local:5000"]["endpoint"] == ["http://registry.local:5000"]
    assert cri["containerd"]["snapshotter"] == "overlayfs"
    assert cri["containerd"]["runtimes"]["nvidia"]["options"]["SystemdCgroup"] is True
    assert configured != rewritten


def test_docker_cdi_feature_and_spec_dirs(merge: ModuleType) -> None:
    """CDI on: features.cdi is set beside the admin's keys; Docker's default spec dirs are not written out."""
    dirs = ["/etc/cdi", "/var/run/cdi"]
    text, _, updated, _ = merge.merge_docker(json.dumps(ADMIN_DAEMON), params(cdi_spec_dirs=dirs))
    after = json.loads(text)
    assert after["features"] == {"cdi": True}
    assert "cdi-spec-dirs" not in after
    assert updated == ["runtimes.nvidia.path", "runtimes.nvidia.args", "features.cdi"]
    again, _, updated, _ = merge.merge_docker(text, params(cdi_spec_dirs=dirs))
    assert (again, updated) == (text, [])
    other, _, updated, _ = merge.merge_docker(text, params(cdi_spec_dirs=["/srv/cdi"]))
    assert json.loads(other)["cdi-spec-dirs"] == ["/srv/cdi"]
    assert updated == ["cdi-spec-dirs"]
    # CDI off (an engine too old for it): nothing CDI is written
    assert "features" not in json.loads(merge.merge_docker("", params())[0])


def test_containerd_cdi_in_the_cri_plugin(merge: ModuleType) -> None:
    dirs = ["/etc/cdi", "/var/run/cdi"]
    text, data, updated, _ = merge.merge_containerd(CONTAINERD_BEFORE, params(cdi_spec_dirs=dirs))
    cri = data["plugins"][CRI]
    assert (cri["enable_cdi"], cri["cdi_spec_dirs"]) == (True, dirs)
    assert cri["sandbox_image"] == "registry.k8s.io/pause:3.9"  # the admin's key stays
    assert f"plugins.{CRI}.enable_cdi" in updated
    assert "# kubelet uses the systemd cgroup driver" in text
    again, _, updated, _ = merge.merge_containerd(text, params(cdi_spec_dirs=dirs))
    assert (again, updated) == (text, [])
    _, data, _, _ = merge.merge_containerd("version = 3\n", params(cdi_spec_dirs=dirs))
    assert data["plugins"]["io.containerd.cri.v1.runtime"]["enable_cdi"] is True


def test_containerd_schema_3_uses_the_v3_plugin(merge: ModuleType) -> None:
    text, _, _, extra = merge.merge_containerd('version = 3\n', params(set_as_default=True))
    doc = tomlkit.parse(text)
    runtime = doc["plugins"]["io.containerd.cri.v1.runtime"]["containerd"]["runtimes"]["nvidia"]
    assert runtime["options"]["BinaryName"] == RUNTIME
    assert extra["config_version"] == 3


def test_containerd_empty_file_gets_version_2(merge: ModuleType) -> None:
    text, _, _, extra = merge.merge_containerd("# only a comment\n", params())
    doc = tomlkit.parse(text)
    assert doc["version"] == 2
    assert text.startswith("# only a comment\n")
    assert extra["runtimes"] == ["nvidia"]


@pytest.mark.parametrize("text", ['root = "/var/lib/containerd"\n', "version = 1\n",
                                  f'version = 2\n[plugins."{CRI}"]\ncontainerd = "x"\n'])
def test_containerd_refuses_schema_1_and_non_tables(merge: ModuleType, text: str) -> None:
    with pytest.raises(merge.ConfigRefused):
        merge.merge_containerd(text, params())


# --- toolkit config.toml (driver root) ------------------------------------------------------------

def test_toolkit_root_rendered_and_comments_kept(merge: ModuleType) -> None:
    from gpuprov.lab.standin.container import CONFIG_TOML

    seeded = CONFIG_TOML.replace('#root = "/run/nvidia/driver"', 'root = "/run/nvidia/driver"').replace(
        'ldconfig = "@/sbin/ldconfig"', 'ldconfig = "@/run/nvidia/driver/sbin/ldconfig.real"')
    settings = [{"key": ["nvidia-container-cli", "root"], "value": "/"},
                {"key": ["nvidia-container-cli", "ldconfig"], "value": "@/sbin/ldconfig"}]
    text, _, updated, _ = merge.merge_toml(seeded, params(settings=settings))
    assert updated == ["nvidia-container-cli.root", "nvidia-container-cli.ldconfig"]
    # only the two lines differ
    changed = [(a, b) for a, b in zip(seeded.splitlines(), text.splitlines(), strict=True) if a != b]
    assert changed == [('ldconfig = "@/run/nvidia/driver/sbin/ldconfig.real"', 'ldconfig = "@/sbin/ldconfig"'),
                       ('root = "/run/nvidia/driver"', 'root = "/"')]
    again, _, updated2, _ = merge.merge_toml(text, params(settings=settings))
    assert (again, updated2) == (text, [])


# --- the module entry point: check mode, diff, atomic write, mode -----------------------------------

def run_module(merge: ModuleType, monkeypatch: pytest.MonkeyPatch, args: dict[str, Any]) -> dict[str, Any]:
    from ansible.module_utils import basic
    from ansible.module_utils.common.text.converters import to_bytes

    monkeypatch.setattr(basic, "_ANSIBLE_ARGS", to_bytes(json.dumps({"ANSIBLE_MODULE_ARGS": args})))
    monkeypatch.setattr(basic, "_ANSIBLE_PROFILE", "legacy", raising=False)
    with pytest.raises(SystemExit):
        merge.main()
    return dict(run_module.last)  # type: ignore[attr-defined]


@pytest.fixture
def capture(monkeypatch: pytest.MonkeyPatch, merge: ModuleType) -> None:
    from ansible.module_utils import basic

    def exit_json(self: Any, **kwargs: Any) -> None:
        run_module.last = kwargs  # type: ignore[attr-defined]
        sys.exit(0)

    def fail_json(self: Any, **kwargs: Any) -> None:
        run_module.last = dict(kwargs, failed=True)  # type: ignore[attr-defined]
        sys.exit(1)

    monkeypatch.setattr(basic.AnsibleModule, "exit_json", exit_json)
    monkeypatch.setattr(basic.AnsibleModule, "fail_json", fail_json)


@pytest.mark.usefixtures("capture")
def test_module_check_mode_writes_nothing_and_diffs(merge: ModuleType, monkeypatch: pytest.MonkeyPatch,
                                                    tmp_path: Path) -> None:
    path = tmp_path / "daemon.json"
    path.write_text(json.dumps(ADMIN_DAEMON), encoding="utf-8")
    before = path.read_bytes()
    result = run_module(merge, monkeypatch, {"path": str(path), "engine": "docker", "_ansible_check_mode": True,
                                             "_ansible_diff": True})
    assert result["changed"] is True
    assert path.read_bytes() == before
    assert '"nvidia"' in result["diff"]["after"]
    assert result["diff"]["before"] == before.decode()


@pytest.mark.usefixtures("capture")
def test_module_writes_once_then_reports_unchanged(merge: ModuleType, monkeypatch: pytest.MonkeyPatch,
                                                   tmp_path: Path) -> None:
    path = tmp_path / "etc" / "docker" / "daemon.json"
    result = run_module(merge, monkeypatch, {"path": str(path), "engine": "docker", "set_as_default": True})
    assert result["changed"] is True
    assert path.stat().st_mode & 0o777 == 0o644
    assert json.loads(path.read_text(encoding="utf-8"))["default-runtime"] == "nvidia"
    path.chmod(0o600)
    stat = path.stat()
    result = run_module(merge, monkeypatch, {"path": str(path), "engine": "docker", "set_as_default": True})
    assert result["changed"] is False
    assert path.stat().st_mtime_ns == stat.st_mtime_ns
    assert path.stat().st_ino == stat.st_ino
    assert [p.name for p in path.parent.iterdir()] == ["daemon.json"]  # no temporary file left


@pytest.mark.usefixtures("capture")
def test_module_refuses_invalid_toml_without_writing(merge: ModuleType, monkeypatch: pytest.MonkeyPatch,
                                                     tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text("version = 2\n[plugins\n", encoding="utf-8")
    result = run_module(merge, monkeypatch, {"path": str(path), "engine": "containerd"})
    assert result["failed"] is True
    assert "is not valid TOML" in result["msg"]
    assert path.read_text(encoding="utf-8") == "version = 2\n[plugins\n"
