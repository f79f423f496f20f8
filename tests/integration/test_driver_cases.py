"""The nvidia_driver role's field failures (docs/field-failures.md: Secure Boot, the repository signing key,
the `cuda` meta, upgrades splitting the set, Fabric Manager, the branch change) in one debian12 lab container.

The container (systemd, dkms, gcc, make, the real headers of its kernel) serves a signed stand-in of
NVIDIA's CUDA repository on its loopback: the 535 and 550 driver sets at NVIDIA's debian12 versions
(nvidia-driver-<b>, nvidia-dkms-<b> with a tiny real DKMS module, libnvidia-compute, nvidia-utils,
nvidia-compute-utils with nvidia-persistenced, nvidia-fabricmanager, cuda-drivers-<b>) and the `cuda`
-> cuda-runtime-12-8 -> cuda-drivers -> cuda-drivers-550 chain. playbooks/nvidia_driver.yml runs through
gpuprov.runner; outcomes come from its stats and from the host (dpkg, apt, dkms, systemd).

The tests share the container and run in file order, each starting from the state the previous one left
(Secure Boot on the fresh host, the repository key converges it, the `cuda` meta before the upgrade test
publishes newer 535 builds, the branch change, then R595 under NVIDIA's unbranched names). Loading the
module into the shared kernel is out of reach; the module DKMS built for the container's kernel is checked
instead.
"""

from __future__ import annotations

import io
import re
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpuprov.lab.container_exec import exec_output
from gpuprov.lab.standin import PackageSpec, build_repository
from gpuprov.lab.standin.catalogue import DEBIAN_REVISION, cuda_metas, driver_packages
from gpuprov.lab.standin.runfile import build_runfile, runfile_name, sha256_of
from gpuprov.lab.standin.unbranched import unbranched_driver_packages
from gpuprov.runner import RunResult
from tests.integration.kernel_lab import REPO_IN_CONTAINER, dkms_container, exec_ok, install_repository, run

pytestmark = [pytest.mark.lab, pytest.mark.slow]

V535, V535_NEW, V550 = "535.183.01", "535.261.03", "550.127.05"
V595, V610 = "595.71.05", "610.43.02"
# Upgrades read only the stand-in repository's source: the Debian mirror would bring a newer kernel (a
# pending kernel the role then rightly builds the module for, which the kernel-headers tests cover, not this one).
ONLY_STANDIN = ("-o Dir::Etc::SourceList=/etc/apt/sources.list.d/cuda-gpuprov.sources "
                "-o Dir::Etc::SourceParts=/nonexistent")
SET = ("nvidia-driver-{b}", "nvidia-dkms-{b}", "libnvidia-compute-{b}", "nvidia-utils-{b}", "nvidia-compute-utils-{b}")


def _specs(newer_535: bool = False) -> list[PackageSpec]:
    specs = driver_packages("535", V535, DEBIAN_REVISION, flavours=("",))
    specs += driver_packages("550", V550, DEBIAN_REVISION, flavours=("",))
    specs += cuda_metas("12.8", "12.8.1-1", "550", V550, DEBIAN_REVISION)
    if newer_535:
        specs += driver_packages("535", V535_NEW, DEBIAN_REVISION, flavours=("",))
    return specs


class Host:
    """The shared container, its kernel, the role's repository variables and a state dir."""

    def __init__(self, container: Any, kernel: str, repo_vars: dict[str, str], state: Path, build: Path) -> None:
        self.container, self.kernel, self.repo_vars, self.state, self.build = container, kernel, repo_vars, state, build

    @property
    def name(self) -> str:
        return str(self.container.name)

    def sh(self, script: str) -> str:
        return exec_ok(self.container, script)

    def rc(self, script: str) -> tuple[int, str]:
        return exec_output(self.container, ["sh", "-c", script], user="")

    def play(self, check: bool = False, **extra: Any) -> RunResult:
        extravars = {"gpuprov_driver_branch": "535", "nvidia_driver_running_kernel": self.kernel, **self.repo_vars,
                     **extra}
        return run(self.container, "nvidia_driver.yml", self.state, extravars, check=check)

    def failures(self, result: RunResult) -> str:
        return " ".join(str(f.get("msg", f)) for f in result.hosts[self.name].failures)

    def versions(self, pattern: str = "*nvidia*") -> dict[str, str]:
        out = self.sh(f"dpkg-query -W -f '${{db:Status-Abbrev}} ${{Package}} ${{Version}}\\n' '{pattern}' || true")
        # installed: "ii" or, when held, "hi"
        return {p[1]: p[2] for p in (line.split() for line in out.splitlines()) if len(p) == 3 and p[0][1:] == "i"}

    def holds(self) -> set[str]:
        return set(self.sh("apt-mark showhold").split())

    def publish(self, specs: list[PackageSpec]) -> None:
        """Rebuild the served repository in place (same key, same URL) and refresh apt's lists."""
        repo = build_repository(specs, self.build, gnupg_home=self.build.parent / "gnupg")
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w") as tar:
            tar.add(str(repo.path), arcname=Path(REPO_IN_CONTAINER).name)
        self.container.put_archive(str(Path(REPO_IN_CONTAINER).parent), buffer.getvalue())
        self.sh("apt-get update -qq")


@pytest.fixture(scope="module")
def host(tmp_path_factory: pytest.TempPathFactory, lab_images: dict[str, str]) -> Iterator[Host]:
    tmp = tmp_path_factory.mktemp("driver")
    with dkms_container(lab_images["debian12"], "driver") as (container, kernel):
        repo_vars = install_repository(container, _specs(), tmp / "repo")
        yield Host(container, kernel, repo_vars, tmp / "state", tmp / "repo")


def _ok(h: Host, result: RunResult) -> RunResult:
    assert result.status == "successful", h.failures(result)
    return result


def test_secure_boot_without_key_refuses_before_installing(host: Host) -> None:
    result = host.play(nvidia_driver_secure_boot="enabled")
    assert result.failed_hosts == [host.name]
    message = host.failures(result)
    assert "Secure Boot is enabled" in message and "nvidia_driver_mok_signing_key" in message
    assert "nothing was installed" in message
    # refused before anything: no package, no repository source, no DKMS module
    assert host.versions() == {}
    host.sh("test ! -e /etc/apt/sources.list.d/cuda-gpuprov.sources && test ! -e /etc/apt/keyrings/cuda-gpuprov.gpg")
    assert "nvidia" not in host.sh("dkms status")


def test_repository_pinned_to_its_key_without_duplicates(host: Host) -> None:
    url = host.repo_vars["nvidia_driver_cuda_repo_url"]
    # earlier installs left the same URL three more times: a one-line list (from install_repository), a line
    # in sources.list and a half-migrated deb822 file naming another keyring, so apt-get update fails
    host.sh(f"echo 'deb {url} ./' >> /etc/apt/sources.list && printf 'Types: deb\\nURIs: {url}\\nSuites: ./\\n"
            "Signed-By: /usr/share/keyrings/cuda-archive-keyring.gpg\\n' > /etc/apt/sources.list.d/cuda-old.sources")
    assert "Conflicting values set for option Signed-By" in host.rc("apt-get update")[1]

    wrong = host.play(nvidia_driver_cuda_repo_key_fingerprint="EB693B3035CD5710E231E123A4B469963BF863CC")
    assert wrong.failed_hosts == [host.name]
    assert "not the configured EB693B3035CD5710E231E123A4B469963BF863CC" in host.failures(wrong)
    host.sh("test ! -e /etc/apt/keyrings/cuda-gpuprov.gpg")
    assert host.versions() == {}

    first = _ok(host, host.play())
    assert first.hosts[host.name].changed > 0
    defined = host.sh(f"grep -rlE '{url.rstrip('/')}/?( |$)' /etc/apt/sources.list /etc/apt/sources.list.d || true")
    assert defined.split() == ["/etc/apt/sources.list.d/cuda-gpuprov.sources"]
    source = host.sh("cat /etc/apt/sources.list.d/cuda-gpuprov.sources")
    assert "Signed-By: /etc/apt/keyrings/cuda-gpuprov.gpg" in source
    fprs = host.sh("gpg --show-keys --with-colons /etc/apt/keyrings/cuda-gpuprov.gpg | grep ^fpr: | head -n1")
    assert host.repo_vars["nvidia_driver_cuda_repo_key_fingerprint"] in fprs
    assert host.rc("grep -rniE 'trusted=yes|allow-unauthenticated|allow-insecure' /etc/apt")[0] == 1
    installed = host.versions()
    assert {name.format(b="535"): installed.get(name.format(b="535")) for name in SET} == {
        name.format(b="535"): f"{V535}-1" for name in SET}
    assert {n.format(b="535") for n in SET} <= host.holds()
    host.sh(f"modinfo -k {host.kernel} -F version nvidia | grep -qx {V535}")
    host.sh("systemctl is-active nvidia-persistenced && systemctl is-enabled nvidia-persistenced")

    again = _ok(host, host.play())
    assert again.hosts[host.name].changed == 0


def test_cuda_meta_cannot_replace_the_driver(host: Host) -> None:
    before, held = host.versions(), host.holds()
    assert {n.format(b="535") for n in SET} <= held
    # without gpuprov's preferences and holds the lab reproduces the swap: cuda replaces the 535 set with 550.
    # --ignore-hold (APT::Ignore-Hold), not --allow-change-held-packages: the latter only lets apt-get carry out
    # a plan that changes held packages, while the resolver still refuses to remove them ("pkgProblemResolver::
    # Resolve generated breaks, this may be caused by held packages"). This runs before the upgrade test offers newer
    # 535 builds: with a newer candidate for the installed libnvidia-compute-535 (and siblings), apt 2.6 answers the
    # unversioned Conflicts on their virtual names by upgrading them rather than removing them, and gives up
    # with the same error whatever the holds, so the plan would show apt's limit, not the swap
    plain = host.rc("apt-get -s --ignore-hold -o Dir::Etc::PreferencesParts=/nonexistent "
                    "-o Dir::Etc::Preferences=/nonexistent install cuda")[1]
    for name in SET:
        assert f"Remv {name.format(b='535')} " in plain and f"Inst {name.format(b='550')} " in plain, plain
    # the holds alone already stop it; the preferences stop it even with the holds ignored: no candidate at all
    code, out = host.rc("apt-get -s -o Dir::Etc::PreferencesParts=/nonexistent "
                        "-o Dir::Etc::Preferences=/nonexistent install cuda")
    assert code != 0 and "held packages" in out, out
    code, out = host.rc("DEBIAN_FRONTEND=noninteractive apt-get -y --ignore-hold --allow-change-held-packages "
                        "install cuda")
    assert code != 0 and "Package 'cuda' has no installation candidate" in out, out
    for name in ("cuda", "cuda-runtime-12-8", "cuda-drivers", "cuda-drivers-550"):
        policy = host.sh(f"apt-cache policy {name}")
        # the version table shows the pin's priority after each version: -1, never a candidate
        assert "Candidate: (none)" in policy and re.search(r"^ +\S+ -1$", policy, re.M), policy
    assert host.versions() == before and host.holds() == held

    # installed behind apt's back (dpkg), the role stops with a clear message and changes nothing
    host.sh(f"dpkg --force-depends -i {REPO_IN_CONTAINER}/cuda_12.8.1-1_amd64.deb >/dev/null 2>&1")
    result = host.play()
    assert result.failed_hosts == [host.name]
    message = host.failures(result)
    assert "cuda installed" in message and "cuda-toolkit-X-Y" in message and "apt-get purge cuda" in message
    assert host.versions() == before
    host.sh("dpkg --purge cuda >/dev/null")


def test_apt_upgrade_cannot_split_the_driver_set(host: Host) -> None:
    before = host.versions()
    host.publish(_specs(newer_535=True))
    # the repository really offers a newer build of every package of the set
    assert f"{V535_NEW}-1" in host.sh("apt-cache madison libnvidia-compute-535")
    held = host.holds()
    assert {n.format(b="535") for n in SET} <= held
    assert any(name.startswith("linux-image-") for name in held), held  # the running kernel's image
    # without the holds and pins an upgrade would move the whole set past the built module
    plain = host.rc(f"apt-get -s --ignore-hold {ONLY_STANDIN} -o Dir::Etc::PreferencesParts=/nonexistent "
                    "-o Dir::Etc::Preferences=/nonexistent dist-upgrade")[1]
    assert f"Inst libnvidia-compute-535 [{V535}-1] ({V535_NEW}-1" in plain, plain
    host.sh(f"DEBIAN_FRONTEND=noninteractive apt-get -y -qq {ONLY_STANDIN} upgrade >/dev/null")
    host.sh(f"DEBIAN_FRONTEND=noninteractive apt-get -y -qq {ONLY_STANDIN} dist-upgrade >/dev/null")
    code, out = host.rc("DEBIAN_FRONTEND=noninteractive apt-get -y install libnvidia-compute-535")
    assert code != 0 or "is already the newest version" in out, out
    assert host.versions() == before
    # the pin keeps the installed build the candidate, and unattended-upgrades skips the families
    assert f"Candidate: {V535}-1" in host.sh("apt-cache policy libnvidia-compute-535")
    assert '"libnvidia-";' in host.sh("cat /etc/apt/apt.conf.d/51gpuprov-nvidia-driver")

    again = _ok(host, host.play())
    assert again.hosts[host.name].changed == 0
    assert host.versions() == before


def test_fabric_manager_at_the_driver_version(host: Host) -> None:
    first = _ok(host, host.play(gpuprov_gpus_nvswitch="true"))
    assert first.hosts[host.name].changed > 0
    assert host.versions()["nvidia-fabricmanager-535"] == f"{V535}-1"
    assert "nvidia-fabricmanager-535" in host.holds()
    host.sh("systemctl is-active nvidia-fabricmanager && systemctl is-enabled nvidia-fabricmanager")

    # another build of Fabric Manager than the driver's: the daemon refuses to start, as NVIDIA's does
    host.sh("systemctl stop nvidia-fabricmanager; DEBIAN_FRONTEND=noninteractive apt-get -y -qq "
            f"--allow-change-held-packages install nvidia-fabricmanager-535={V535_NEW}-1 >/dev/null")
    code, _ = host.rc("systemctl start nvidia-fabricmanager")
    assert code != 0
    code, out = host.rc("/usr/bin/nv-fabricmanager -c /usr/share/nvidia/nvswitch/fabricmanager.cfg")
    assert code == 1 and f"version {V535_NEW} don't match with driver version {V535}" in out, out

    # check mode reports the repair apply would make (drift), not a failed host
    planned = _ok(host, host.play(check=True, gpuprov_gpus_nvswitch="true"))
    assert planned.hosts[host.name].changed > 0
    assert host.versions()["nvidia-fabricmanager-535"] == f"{V535_NEW}-1"

    repaired = _ok(host, host.play(gpuprov_gpus_nvswitch="true"))
    assert repaired.hosts[host.name].changed > 0
    assert host.versions()["nvidia-fabricmanager-535"] == f"{V535}-1"
    host.sh("systemctl is-active nvidia-fabricmanager")
    again = _ok(host, host.play(gpuprov_gpus_nvswitch="true"))
    assert again.hosts[host.name].changed == 0


def test_branch_change_is_confirmed_then_replaces_the_set(host: Host) -> None:
    before = host.versions()
    # the branch comes as the fleet file's driver.branch does: gpuprov_driver_branch, mapped by gpuprov/rolevars.py
    refused = host.play(gpuprov_driver_branch="550", gpuprov_gpus_nvswitch="true")
    assert refused.failed_hosts == [host.name]
    message = host.failures(refused)
    assert "nvidia-driver-535" in message
    assert "driver.allow_branch_change: true" in message and "--allow-branch-change" in message
    assert "nvidia_driver_branch_change_ok=true" in message
    assert host.versions() == before

    # the fleet route: driver.allow_branch_change renders to gpuprov_driver_allow_branch_change, mapped the same way
    check = _ok(host, host.play(check=True, gpuprov_driver_branch="550", gpuprov_driver_allow_branch_change="true",
                                gpuprov_gpus_nvswitch="true"))
    assert check.hosts[host.name].changed > 0
    assert host.versions() == before

    change = _ok(host, host.play(gpuprov_driver_branch="550", nvidia_driver_branch_change_ok="true",
                                 gpuprov_gpus_nvswitch="true"))
    assert change.hosts[host.name].changed > 0
    after = host.versions()
    assert not [name for name in after if "535" in name], after
    wanted = [n.format(b="550") for n in SET] + ["nvidia-fabricmanager-550"]
    assert {n: after.get(n) for n in wanted} == dict.fromkeys(wanted, f"{V550}-1")
    held = host.holds()
    assert set(wanted) <= held and not [n for n in held if "535" in n]
    status = host.sh("dkms status")
    assert "550.127.05" in status and "535." not in status, status
    host.sh(f"modinfo -k {host.kernel} -F version nvidia | grep -qx {V550}")
    host.sh("systemctl is-active nvidia-persistenced nvidia-fabricmanager")
    assert "Package: nvidia-driver-550" in host.sh("cat /etc/apt/preferences.d/gpuprov-nvidia-driver")
    for name in wanted[:len(SET)]:
        policy = host.sh(f"apt-cache policy {name}")
        assert f"Candidate: {V550}-1" in policy and f"*** {V550}-1 1001" in policy, policy  # installed and pinned
    assert "535" not in host.sh("cat /etc/apt/preferences.d/gpuprov-nvidia-driver")

    again = _ok(host, host.play(gpuprov_driver_branch="550", gpuprov_gpus_nvswitch="true"))
    assert again.hosts[host.name].changed == 0


def test_r595_open_converges_through_its_pinning_package(host: Host) -> None:
    """R590 and later: NVIDIA's names carry no branch (nvidia-open, nvidia-dkms-open, libnvidia-compute ...) and
    its pinning package chooses the branch. The repository also carries R610 under the same names: the role
    installs nvidia-driver-pinning-595 and the set at R595, pins and holds it by version, and a second run
    changes nothing."""
    host.publish([*_specs(), *unbranched_driver_packages("595", V595, DEBIAN_REVISION),
                  *unbranched_driver_packages("610", V610, DEBIAN_REVISION)])
    wanted = ["nvidia-open", "nvidia-dkms-open", "libnvidia-compute", "nvidia-utils", "nvidia-compute-utils",
              "nvidia-fabricmanager"]
    extra = {"gpuprov_driver_branch": "595", "gpuprov_driver_flavour": "open", "gpuprov_gpus_nvswitch": "true"}
    # from a fresh host (this test alone) or from the 550 set the branch change left
    _ok(host, host.play(nvidia_driver_branch_change_ok="true", **extra))
    after = host.versions()
    assert {n: after.get(n) for n in wanted} == dict.fromkeys(wanted, f"{V595}-1"), after
    assert after.get("nvidia-driver-pinning-595") == f"{V595}-1"
    assert not [n for n in after if re.search(r"-(535|550)(-|$)", n)], after
    assert set(wanted) <= host.holds()
    preferences = host.sh("cat /etc/apt/preferences.d/gpuprov-nvidia-driver")
    assert "Package: nvidia-open\n" in preferences and f"Pin: version {V595}-1" in preferences, preferences
    policy = host.sh("apt-cache policy nvidia-open")
    assert f"*** {V595}-1 1001" in policy and f"{V610}-1" in policy, policy  # R610 offered, R595 kept
    assert "595.71.05" in host.sh("dkms status")
    host.sh(f"modinfo -k {host.kernel} -F version nvidia | grep -qx {V595}")
    host.sh("systemctl is-active nvidia-persistenced nvidia-fabricmanager")

    again = _ok(host, host.play(**extra))
    assert again.hosts[host.name].changed == 0

# --- Method runfile ---------------------------------------------------------------------------------------------
# A container of its own: NVIDIA's runfile stand-in (gpuprov.lab.standin.runfile) at two versions of one branch,
# served with the stand-in repository (which also carries a packaged 535 driver to be found in the way).
RUN_OLD, RUN_NEW = "580.95.05", "580.105.08"


class RunfileHost(Host):
    """The runfile container: a :class:`Host` that also knows each runfile's URL and SHA-256 by version."""

    runfiles: dict[str, tuple[str, str]]


@pytest.fixture(scope="module")
def runfile_host(tmp_path_factory: pytest.TempPathFactory, lab_images: dict[str, str]) -> Iterator[RunfileHost]:
    tmp = tmp_path_factory.mktemp("runfile")
    sums = {v: sha256_of(build_runfile(v, tmp / "repo")) for v in (RUN_OLD, RUN_NEW)}
    with dkms_container(lab_images["debian12"], "runfile") as (container, kernel):
        # the same serving code as the driver repository: the runfiles lie next to its packages
        repo_vars = install_repository(container, driver_packages("535", V535, DEBIAN_REVISION, flavours=("",)),
                                       tmp / "repo")
        host = RunfileHost(container, kernel, {}, tmp / "state", tmp / "repo")
        host.runfiles = {v: (f"{repo_vars['nvidia_driver_cuda_repo_url']}{runfile_name(v)}", s)
                         for v, s in sums.items()}
        yield host


def _runfile_play(h: RunfileHost, version: str, check: bool = False, **extra: Any) -> RunResult:
    url, sha = h.runfiles[version]
    return h.play(check=check, **{"gpuprov_driver_branch": "580", "gpuprov_driver_method": "runfile",
                                  "gpuprov_driver_version": version, "gpuprov_driver_runfile_url": url,
                                  "gpuprov_driver_runfile_sha256": sha, **extra})


def _runfile_state(h: RunfileHost) -> tuple[str, str]:
    """The version nvidia-installer recorded and `dkms status` for the nvidia module."""
    return h.sh("head -n1 /var/lib/nvidia/log 2>/dev/null || true").strip(), h.sh("dkms status nvidia").strip()


def test_runfile_refuses_a_packaged_driver_then_replaces_it_when_allowed(runfile_host: RunfileHost) -> None:
    h = runfile_host
    h.sh("DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libnvidia-compute-535 >/dev/null")
    refused = _runfile_play(h, RUN_OLD)
    assert refused.failed_hosts == [h.name]
    message = h.failures(refused)
    assert "libnvidia-compute-535" in message and "driver.replace_packaged: true" in message
    assert h.versions() == {"libnvidia-compute-535": f"{V535}-1"}
    assert _runfile_state(h) == ("", "")
    h.sh("test ! -e /var/cache/gpuprov/nvidia-runfile")  # nothing downloaded

    # check mode: the plan as a change, nothing downloaded, purged or installed
    planned = _ok(h, _runfile_play(h, RUN_OLD, check=True, gpuprov_driver_replace_packaged="true"))
    assert planned.hosts[h.name].changed > 0
    assert h.versions() == {"libnvidia-compute-535": f"{V535}-1"} and _runfile_state(h) == ("", "")
    h.sh("test ! -e /var/cache/gpuprov/nvidia-runfile")

    first = _ok(h, _runfile_play(h, RUN_OLD, gpuprov_driver_replace_packaged="true"))
    assert first.hosts[h.name].changed > 0
    assert h.versions() == {}
    recorded, status = _runfile_state(h)
    assert recorded == RUN_OLD and f"nvidia/{RUN_OLD}, {h.kernel}, x86_64: installed" in status, status
    h.sh(f"modinfo -k {h.kernel} -F version nvidia | grep -qx {RUN_OLD}")
    h.sh(f"test -e /usr/lib/x86_64-linux-gnu/libnvidia-cfg.so.{RUN_OLD}")
    # the installer got NVIDIA's flags: the module type from the flavour, the kernel the role treats as running
    assert f"kernel module type: proprietary, for kernel {h.kernel}" in h.sh("cat /var/log/nvidia-installer.log")
    cached = h.sh(f"sha256sum /var/cache/gpuprov/nvidia-runfile/{runfile_name(RUN_OLD)}").split()[0]
    assert cached == h.runfiles[RUN_OLD][1]
    h.sh("systemctl is-active nvidia-persistenced && systemctl is-enabled nvidia-persistenced")

    again = _ok(h, _runfile_play(h, RUN_OLD))
    assert again.hosts[h.name].changed == 0


def test_runfile_version_change_uninstalls_then_installs(runfile_host: RunfileHost) -> None:
    h = runfile_host
    # a runfile whose content is not the checksum's fails before anything runs, without showing the URL
    url, _ = h.runfiles[RUN_NEW]
    bad = _runfile_play(h, RUN_NEW, gpuprov_driver_runfile_sha256="0" * 64)
    assert bad.failed_hosts == [h.name]
    message = h.failures(bad)
    assert "Could not get NVIDIA-Linux-x86_64-580.105.08.run" in message and url not in message
    assert _runfile_state(h)[0] == RUN_OLD

    changed = _ok(h, _runfile_play(h, RUN_NEW))
    assert changed.hosts[h.name].changed > 0
    recorded, status = _runfile_state(h)
    assert recorded == RUN_NEW and RUN_OLD not in status and f"nvidia/{RUN_NEW}" in status, status
    h.sh(f"test ! -e /usr/lib/x86_64-linux-gnu/libnvidia-cfg.so.{RUN_OLD} && test ! -e /usr/src/nvidia-{RUN_OLD}")
    h.sh(f"modinfo -k {h.kernel} -F version nvidia | grep -qx {RUN_NEW}")
    h.sh("systemctl is-active nvidia-persistenced")
