# Copyright: gpuprov contributors
# Apache-2.0
"""Action plugin of ``nvml_facts``: ship the controller's pynvml to the host, run the module, clean up.

Target hosts do not have pynvml (nvidia-ml-py); gpuprov's controller does, since it depends on it. pynvml is
one pure-Python file (``pynvml.py``, ctypes over ``libnvidia-ml.so.1``), so this plugin copies that very file
(the one ``import pynvml`` resolves to on the controller) into the task's remote temporary directory and runs
the module with ``pynvml_dir`` pointing there. The temporary directory is removed afterwards, whatever the
outcome, so nothing is left on the host; the module only reads, so it runs unchanged in check mode.
"""

from __future__ import annotations

from typing import Any

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase

#: Options a playbook may set; ``pynvml_dir`` is set by this plugin only.
USER_ARGS = frozenset(("sysfs_root", "proc_root"))


def controller_pynvml() -> str:
    """Path of the ``pynvml.py`` that the controller's Python imports.

    Raises:
        AnsibleActionFail: pynvml is not installed beside ansible on the controller.
    """
    try:
        import pynvml
    except ImportError as exc:
        raise AnsibleActionFail(
            "nvml_facts needs pynvml on the controller: pip install nvidia-ml-py into the Python that runs "
            f"ansible (gpuprov depends on it) ({exc})"
        ) from exc
    path = pynvml.__file__
    if not path or not path.endswith(".py"):
        raise AnsibleActionFail(f"nvml_facts expects pynvml as a single .py file, found {path!r}")
    return path


class ActionModule(ActionBase):
    """Transfer pynvml.py, run the ``nvml_facts`` module, remove the temporary directory."""

    TRANSFERS_FILES = True
    _VALID_ARGS = USER_ARGS
    _supports_check_mode = True

    def run(self, tmp: str | None = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        """Run the module on the host with the shipped pynvml and return its result (facts, changed false)."""
        task_vars = task_vars or {}
        super().run(tmp, task_vars)
        del tmp  # no longer used by ansible
        shell = self._connection._shell
        try:
            source = controller_pynvml()
            remote_file = shell.join_path(shell.tmpdir, "pynvml.py")
            self._transfer_file(source, remote_file)
            self._fixup_perms2((shell.tmpdir, remote_file), execute=False)
            module_args = dict(self._task.args)
            module_args["pynvml_dir"] = shell.tmpdir
            result: dict[str, Any] = self._execute_module(
                module_name="gpuprov.gpu.nvml_facts", module_args=module_args, task_vars=task_vars
            )
        finally:
            self._remove_tmp_path(shell.tmpdir)
        result["changed"] = False
        return result
