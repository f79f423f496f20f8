"""``gpuprov doctor``: collect a host's facts (locally, or on a fleet's hosts) and apply the doctor rules.

The rules are ``plugins/module_utils/doctor.py`` and its ``doctor_*.py`` groups (pure, Python 3.8); bios_check's
PCIe, BAR and lost-GPU rules come from ``plugins/module_utils/findings.py``. The facts come from the code that
already reads them: the NVML collector (:mod:`gpuprov.facts`), ``platform_info``'s
``plugins/module_utils/platform_report.py``, ``gpu_pci_info`` and ``kernel_dkms_info``. Locally the last two
modules are loaded with :mod:`importlib`; for a fleet a one-play run executes the same modules on every host and
the facts are taken from the runner events' registered results, never from ansible-playbook's output.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import os
import re
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from ansible_collections.gpuprov.gpu.plugins.module_utils import doctor as doctor_rules
from ansible_collections.gpuprov.gpu.plugins.module_utils import findings as findings_rules
from ansible_collections.gpuprov.gpu.plugins.module_utils import kernels as kernels_utils
from ansible_collections.gpuprov.gpu.plugins.module_utils import nvml as nvml_collector
from ansible_collections.gpuprov.gpu.plugins.module_utils import platform_report
from ansible_collections.gpuprov.gpu.plugins.module_utils.doctor_driver import SECURE_BOOT_LOG
from ansible_collections.gpuprov.gpu.plugins.module_utils.gpu_holders import printable

from gpuprov import holders
from gpuprov.exceptions import EnvironmentMissing
from gpuprov.hostplay import TaskResults
from gpuprov.resources import role_defaults

log = logging.getLogger(__name__)

#: gpu_pci_info's default module list (the module's own default, repeated for the local call).
PCI_MODULES = ["nouveau", "nova_core", "nova_drm", "nvidia", "nvidia_drm", "nvidia_modeset", "nvidia_uvm", "vfio_pci"]


def _library(name: str) -> ModuleType:
    """One of the collection's read-only modules (gpu_pci_info, kernel_dkms_info), which ``--local`` runs in
    this process. Imported on first use: an Ansible module imports
    ``ansible.module_utils.basic``, which patches ``sys.intern`` for the rest of the process."""
    return importlib.import_module(f"ansible_collections.gpuprov.gpu.plugins.modules.{name}")


def diagnose(facts: dict[str, Any]) -> list[dict[str, Any]]:
    """Apply the doctor rules (and bios_check's kept rules) to one host's facts."""
    result: list[dict[str, Any]] = doctor_rules.diagnose(facts, findings_rules.evaluate)
    return result


def problems(found: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The diagnoses of ``found`` that make doctor exit 1 (severity fail or warn)."""
    result: list[dict[str, Any]] = doctor_rules.problems(found)
    return result


# -- local collection ----------------------------------------------------------------------------------------


def _run(argv: list[str]) -> tuple[int | None, str]:
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.SubprocessError):
        return None, ""
    return proc.returncode, proc.stdout


def kernel_facts(running: str | None = None, modules_dir: str = "/lib/modules", boot_dir: str = "/boot",
                 src_dir: str = "/usr/src") -> dict[str, Any]:
    """The running kernel's row of kernel_dkms_info (its own ``kernel_entry``), from ``dkms status``/``modinfo``."""
    info = _library("kernel_dkms_info")
    running = running or os.uname().release
    _rc, out = _run(["dkms", "status"])
    entries = info.parse_dkms_status(out)
    versions: dict[str, set[str]] = {}
    for entry in entries:
        versions.setdefault(entry["module"], set()).add(entry["version"])
    dkms_versions = {k: sorted(v, key=kernels_utils.version_key) for k, v in versions.items()}

    def modinfo(kernel: str, name: str) -> tuple[str | None, str]:
        rc, filename = _run(["modinfo", "-k", kernel, "-F", "filename", name])
        if rc != 0 or not filename.strip():
            return None, ""
        rc, signer = _run(["modinfo", "-k", kernel, "-F", "signer", name])
        return filename.strip().splitlines()[0], signer.strip() if rc == 0 else ""

    params = {"modules_dir": modules_dir, "boot_dir": boot_dir, "src_dir": src_dir, "modules": ["nvidia"]}
    row = info.kernel_entry(running, params, entries, dkms_versions, modinfo)
    row["running"] = True
    return {"running_kernel": running, "kernels": [row], "problems": info.problems_of([row], [])}


def module_log(kernel_log_path: str | None) -> list[str]:
    """Kernel log lines that the Secure Boot rule reads, from a file or ``journalctl -k -b``."""
    if kernel_log_path:
        try:
            text = Path(kernel_log_path).read_text(encoding="utf-8", errors="replace")
        except OSError:
            text = ""
    else:
        _rc, text = _run(["journalctl", "-k", "-b", "--no-pager", "-q"])
    return [line for line in text.splitlines() if SECURE_BOOT_LOG.search(line)]


def _nvml_extras(nv: Any, count: int) -> tuple[dict[str, int], list[int] | None, dict[int, int]]:
    """Throttle reasons per GPU index, the pids NVML lists on any GPU (None when it cannot say) and the GPU
    memory each uses (pid -> bytes, summed over GPUs; ``usedGpuMemory``, absent where NVML cannot say)."""
    throttle: dict[str, int] = {}
    pids: list[int] | None = []
    memory: dict[int, int] = {}
    try:
        nv.nvmlInit()
    except nv.NVMLError:
        return throttle, None, memory
    try:
        for index in range(count):
            try:
                handle = nv.nvmlDeviceGetHandleByIndex(index)
            except nv.NVMLError:
                continue
            reasons = getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None) or getattr(
                nv, "nvmlDeviceGetCurrentClocksThrottleReasons", None)
            with contextlib.suppress(nv.NVMLError, TypeError):
                throttle[str(index)] = int(reasons(handle)) if reasons else 0
            for name in ("nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetGraphicsRunningProcesses"):
                try:
                    procs = getattr(nv, name)(handle)
                except (nv.NVMLError, AttributeError):
                    pids = None
                    continue
                for p in procs:
                    if pids is not None:
                        pids.append(int(p.pid))
                    used = getattr(p, "usedGpuMemory", None)
                    if isinstance(used, int):
                        memory[int(p.pid)] = memory.get(int(p.pid), 0) + used
    finally:
        with contextlib.suppress(nv.NVMLError):
            nv.nvmlShutdown()
    return throttle, pids, memory


def local_facts(window_s: float = 10.0, samples: int = 5, sysfs_root: str = "/sys", proc_root: str = "/proc",
                kernel_log_path: str | None = None, running_kernel: str | None = None,
                device_glob: str = holders.DEVICE_GLOB) -> dict[str, Any]:
    """Collect this machine's doctor facts. The roots let tests point the reads at fixture trees; ``device_glob``
    names the device files whose holders are listed (:mod:`gpuprov.holders`).

    Raises:
        EnvironmentMissing: neither NVML (pynvml) nor the PCI bus could be read: nothing can be checked. Exit 4.
    """
    def collect_with(nv: Any) -> dict[str, Any]:
        result: dict[str, Any] = nvml_collector.collect(nv, sysfs_root, proc_root)
        return result

    facts: dict[str, Any] = {}
    try:
        import pynvml
    except ImportError:
        pynvml = None
    pci = _library("gpu_pci_info").collect(sysfs_root, ["0x10de"], PCI_MODULES)
    if pynvml is None and not pci["pci_readable"]:
        raise EnvironmentMissing("pynvml (nvidia-ml-py) is not installed and the PCI bus is unreadable: "
                                 "nothing to check (pip install nvidia-ml-py)")
    facts["pci"] = pci
    facts["platform"] = platform_report.collect(sysfs_root, proc_root, kernel_log_path, daemons=True, services=True)
    facts["kernel"] = kernel_facts(running_kernel)
    facts["module_log"] = module_log(kernel_log_path)
    facts["holders"] = holders.collect(proc_root, device_glob)
    facts["daemons"] = facts["platform"].get("daemons")
    facts["services"] = facts["platform"].get("services")
    if pynvml is None:
        return facts
    facts["nvml"] = collect_with(pynvml)
    series: dict[str, list[Any]] = {}
    if facts["nvml"].get("available") and facts["nvml"].get("count"):
        for n in range(max(1, samples)):
            snapshot = facts["nvml"] if n == 0 else collect_with(pynvml)
            for gpu in snapshot.get("gpus") or []:
                series.setdefault(str(gpu["index"]), []).append((gpu.get("live") or {}).get("utilization_gpu_pct"))
            if n < samples - 1:
                time.sleep(window_s / max(1, samples - 1))
        facts["throttle"], facts["nvml_pids"], memory = _nvml_extras(pynvml, int(facts["nvml"]["count"]))
        if memory:  # add the processes NVML lists with GPU memory, and how much
            facts["holders"] = holders.collect(proc_root, device_glob, memory)
    facts["samples"] = {"window_s": window_s, "gpus": series}
    return facts


# -- fleet collection ----------------------------------------------------------------------------------------

#: Play variables the fleet play reads (tests point them at fixture trees); defaults are the real paths.
_V = "gpuprov_doctor"

#: What doctor compares the host with -> (role, role variable) the expectation is read from, as those roles
#: read it: verify (GPUs, driver, MIG layout) and bios_check (the PCIe link the board is built for).
_EXPECTED = {
    "model": ("verify", "verify_expected_gpu_model"),
    "count": ("verify", "verify_expected_gpu_count"),
    "nvswitch": ("verify", "verify_nvswitch"),
    "driver_version": ("verify", "verify_expected_driver_version"),
    "pcie_width": ("bios_check", "bios_check_pcie_width"),
    "pcie_gen": ("bios_check", "bios_check_pcie_gen"),
    "mig_layout": ("verify", "verify_mig_layout"),
    "mig_layouts": ("verify", "verify_mig_layouts"),
}


def doctor_play(samples: int, window_s: float) -> list[dict[str, Any]]:
    """The one play ``gpuprov doctor FILE`` runs: the existing read-only modules, registered per task."""
    pause = round(window_s / max(1, samples - 1), 2)
    roots = {"sysfs_root": f"{{{{ {_V}_sysfs_root | default('/sys') }}}}"}
    ro = {"check_mode": False, "changed_when": False}
    return [{
        "name": "Diagnose GPU hosts",
        "hosts": "gpuprov",
        "gather_facts": False,
        "become": True,
        "vars": {"__doctor_defaults": {var: role_defaults(role)[var] for role, var in _EXPECTED.values()}},
        "tasks": [
            {"name": "Read NVML facts", "gpuprov.gpu.nvml_facts": {}, "register": "__doctor_nvml", **ro},
            # the fleet file's expectations: the role variables gpuprov maps it onto, else the roles' defaults
            {"name": "Read what the fleet file expects", "ansible.builtin.set_fact": {"__doctor_expected": {
                key: f"{{{{ {var} | default(__doctor_defaults.{var}) }}}}" for key, (_, var) in _EXPECTED.items()}}},
            # MIG instances exist only as NVML state; nvidia-smi lists them (as verify's mig step reads them)
            {"name": "List the MIG GPU instances", "ansible.builtin.command": {"argv": ["nvidia-smi", "mig", "-lgi"]},
             "when": "__doctor_nvml.ansible_facts.gpuprov_gpus.gpus | default([]) | map(attribute='mig', default=none)"
                     " | select('mapping') | selectattr('current') | list | length > 0",
             "failed_when": False, "register": "__doctor_mig", **ro},
            {"name": "Read the platform", "gpuprov.gpu.platform_info": {
                **roots, "proc_root": f"{{{{ {_V}_proc_root | default('/proc') }}}}", "daemons": True,
                "services": True, "kernel_log_path": f"{{{{ {_V}_kernel_log_path | default(omit) }}}}"},
             "register": "__doctor_platform", **ro},
            {"name": "Read GPU PCI bindings", "gpuprov.gpu.gpu_pci_info": roots, "register": "__doctor_pci", **ro},
            {"name": "Read kernels and DKMS", "gpuprov.gpu.kernel_dkms_info": {
                "running_kernel": f"{{{{ {_V}_running_kernel | default(omit) }}}}"},
             "register": "__doctor_kernel", **ro},
            {"name": "Sample NVML utilisation", "gpuprov.gpu.nvml_facts": {},
             "loop": f"{{{{ range({max(1, samples)}) | list }}}}",
             "loop_control": {"pause": pause, "label": "sample {{ item }}"}, "register": "__doctor_samples", **ro},
            {"name": "Find the NVIDIA device files", "ansible.builtin.find": {
                "paths": "/dev", "patterns": "nvidia*", "file_type": "any"}, "register": "__doctor_dev", **ro},
            # Only a CLI exists for this: fuser lists the holders on stderr; rc 1 means none, missing fuser 127.
            {"name": "List processes holding the NVIDIA device files", "ansible.builtin.command": {
                "argv": "{{ ['fuser', '-v'] + (__doctor_dev.files | map(attribute='path') | list) }}"},
             "when": "__doctor_dev.files | length > 0", "failed_when": False, "register": "__doctor_fuser", **ro},
            {"name": "Read module load errors from the kernel log", "ansible.builtin.command": {
                "argv": ["journalctl", "-k", "-b", "--no-pager", "-q", "--grep",
                         "unsigned module|Key was rejected|module verification failed"]},
             "when": f"{_V}_kernel_log_path is not defined", "failed_when": False, "register": "__doctor_log", **ro},
            {"name": "Read the kernel log file", "ansible.builtin.slurp": {"src": f"{{{{ {_V}_kernel_log_path }}}}"},
             "when": f"{_V}_kernel_log_path is defined", "register": "__doctor_log_file", **ro},
        ],
    }]


#: a line of the ``fuser -v`` table; the command (``comm``) may hold spaces (``Web Content``)
_FUSER_LINE = re.compile(r"^(?:(?P<dev>/dev/\S+):)?\s+(?P<user>\S+)\s+(?P<pid>[0-9]+)\s+\S+\s+(?P<cmd>\S.*?)\s*$")


def parse_fuser(text: str) -> list[dict[str, Any]]:
    """``fuser -v`` table (stderr) -> [{pid, command, devices}]; continuation lines inherit the device; commands
    have control characters escaped (module_utils/gpu_holders.py ``printable``)."""
    holders: dict[int, dict[str, Any]] = {}
    device = None
    for line in text.splitlines():
        match = _FUSER_LINE.match(line)
        if not match:
            continue
        device = match.group("dev") or device
        pid = int(match.group("pid"))
        entry = holders.setdefault(pid, {"pid": pid, "command": printable(match.group("cmd")), "devices": []})
        if device and device not in entry["devices"]:
            entry["devices"].append(device)
    return [holders[pid] for pid in sorted(holders)]


class DoctorEvents(TaskResults):
    """ansible-runner event handler (the shared :class:`gpuprov.hostplay.TaskResults`) whose ``facts`` turn each
    host's registered results into doctor facts."""

    @property
    def facts(self) -> dict[str, dict[str, Any]]:
        """Host -> doctor facts built from the results of :func:`doctor_play`'s tasks."""
        return {host: _doctor_facts(tasks) for host, tasks in self.results.items()}


def _doctor_facts(tasks: dict[str, dict[str, Any]]) -> dict[str, Any]:
    facts: dict[str, Any] = {}
    for task, res in tasks.items():
        if task == "Read NVML facts":
            facts["nvml"] = (res.get("ansible_facts") or {}).get("gpuprov_gpus")
        elif task == "Read what the fleet file expects":
            facts["expected"] = (res.get("ansible_facts") or {}).get("__doctor_expected")
        elif task == "Read the platform":
            facts["platform"] = res.get("platform")
            facts["daemons"] = (res.get("platform") or {}).get("daemons")
            facts["services"] = (res.get("platform") or {}).get("services")
        elif task == "Read GPU PCI bindings":
            facts["pci"] = {k: res.get(k) for k in ("devices", "modules", "loaded_modules", "bindings", "pci_readable")}
        elif task == "Read kernels and DKMS":
            facts["kernel"] = {k: res.get(k) for k in ("running_kernel", "kernels", "problems")}
        elif task == "Sample NVML utilisation":
            series: dict[str, list[Any]] = {}
            for item in res.get("results") or []:
                for gpu in ((item.get("ansible_facts") or {}).get("gpuprov_gpus") or {}).get("gpus") or []:
                    live = gpu.get("live") or {}
                    series.setdefault(str(gpu.get("index")), []).append(live.get("utilization_gpu_pct"))
            facts["samples"] = {"gpus": series}
        elif task == "List processes holding the NVIDIA device files" and res.get("rc") in (0, 1):
            facts["holders"] = parse_fuser(str(res.get("stderr") or ""))
        elif task == "List the MIG GPU instances" and res.get("rc") is not None:
            facts["mig_instances"] = str(res.get("stdout") or "")
        elif task == "Read module load errors from the kernel log" and res.get("rc") in (0, 1):
            facts["module_log"] = str(res.get("stdout") or "").splitlines()
        elif task == "Read the kernel log file" and res.get("content"):
            import base64

            text = base64.b64decode(str(res["content"])).decode("utf-8", "replace")
            facts["module_log"] = [line for line in text.splitlines() if SECURE_BOOT_LOG.search(line)]
    return facts


@dataclass
class FleetDoctor:
    """Per host: facts and diagnoses; ``failed`` maps failed or unreachable hosts to the error."""

    facts: dict[str, dict[str, Any]] = field(default_factory=dict)
    diagnoses: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)
    run_dir: Path | None = None


def fleet_doctor(fleet_path: Path, limit: str | None = None, window_s: float = 10.0, samples: int = 5,
                 extravars: dict[str, str] | None = None) -> FleetDoctor:
    """Run the doctor play on the fleet's hosts and diagnose each from its registered results.

    Raises:
        FleetValidationError / ConfigError: invalid fleet file or ``--limit``. Exit 2.
        PlaybookError: ansible-playbook could not run the play at all.
    """
    from gpuprov.hostplay import prepare_fleet, run_play, write_play

    run_dir, inventory = prepare_fleet(fleet_path, "doctor", limit)
    playbook = write_play(run_dir, "doctor", doctor_play(samples, window_s))
    events = DoctorEvents()
    failed = run_play(run_dir, inventory, playbook, limit=limit, extravars=extravars, results=events).failed
    out = FleetDoctor(failed=failed, run_dir=run_dir)
    for host, facts in sorted(events.facts.items()):
        if host in failed:
            continue
        facts.setdefault("samples", {})["window_s"] = window_s
        out.facts[host] = facts
        out.diagnoses[host] = diagnose(facts)
    return out


# -- safe repairs ------------------------------------------------------------------------------------------


def fix_local(diagnoses: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Run each fixable diagnosis's action here; returns [{id, action, rc, output}] (one per distinct action)."""
    done: list[dict[str, Any]] = []
    for diagnosis in diagnoses:
        action = diagnosis.get("action")
        if not diagnosis.get("fixable") or not action or any(d["action"] == action for d in done):
            continue
        try:
            proc = subprocess.run(action, capture_output=True, text=True, timeout=600, check=False)
            rc, output = proc.returncode, (proc.stdout + proc.stderr).strip()
        except (OSError, subprocess.SubprocessError) as exc:
            rc, output = 127, str(exc)
        log.info("doctor fix %s: %s -> rc %s", diagnosis["id"], " ".join(action), rc)
        done.append({"id": diagnosis["id"], "action": action, "rc": rc, "output": output[-2000:]})
    return done


def fix_fleet(fleet_path: Path, diagnoses: dict[str, list[dict[str, Any]]],
              limit: str | None = None) -> dict[str, list[dict[str, Any]]]:
    """Run the fixable actions on their hosts (one play, a command task per host and action).

    Returns host -> [{id, action, rc, output}] from the runner events' results.
    """
    from gpuprov.hostplay import prepare_fleet, write_play
    from gpuprov.runner import RunRequest, run_playbook

    tasks = []
    for host, items in sorted(diagnoses.items()):
        seen: list[list[str]] = []
        for d in items:
            if d.get("fixable") and d.get("action") and d["action"] not in seen:
                seen.append(d["action"])
                tasks.append({"name": f"Fix {d['id']} on {host}", "ansible.builtin.command": {"argv": d["action"]},
                              "when": f"inventory_hostname == {host!r}", "failed_when": False})
    if not tasks:
        return {}
    run_dir, inventory = prepare_fleet(fleet_path, "doctor-fix", limit)
    play = [{"name": "Apply safe doctor repairs", "hosts": "gpuprov", "gather_facts": False, "become": True,
             "tasks": tasks}]
    playbook = write_play(run_dir, "doctor-fix", play)
    done: dict[str, list[dict[str, Any]]] = {}

    def on_event(event: dict[str, Any]) -> None:
        data = event.get("event_data") or {}
        res = data.get("res") or {}
        if event.get("event") in ("runner_on_ok", "runner_on_failed") and isinstance(res, dict) and "cmd" in res:
            task = str(data.get("task") or "")
            done.setdefault(str(data.get("host")), []).append({
                "id": task.split(" ")[1] if task.startswith("Fix ") else task, "action": res.get("cmd"),
                "rc": res.get("rc"), "output": (str(res.get("stdout") or "") + str(res.get("stderr") or ""))[-2000:]})

    run_playbook(RunRequest(inventory=inventory, playbook=playbook, run_dir=run_dir,
                            limit=limit), on_event=on_event)
    return done
