# Copyright: gpuprov contributors
# Apache-2.0
"""Ship the controller's pynvml to a host for one module run (the action plugins of ``nvml_facts``,
``mig_layout``, ``cdi_spec`` and ``bios_probe``); nothing of it stays on the host.

Target hosts do not have pynvml (nvidia-ml-py); gpuprov's controller does, since it depends on it. pynvml is
one pure-Python file (``pynvml.py``, ctypes over ``libnvidia-ml.so.1``), so the very file ``import pynvml``
resolves to on the controller is copied into the task's remote temporary directory and the module runs with
``pynvml_dir`` pointing there. The temporary directory is removed afterwards, whatever the outcome.
"""

from __future__ import annotations

from typing import Any

from ansible.errors import AnsibleActionFail, AnsibleError
from ansible.plugins.action import ActionBase


def controller_pynvml(user: str, error: type[AnsibleError] = AnsibleActionFail) -> str:
    """Path of the ``pynvml.py`` that the controller's Python imports; ``user`` names the plugin in messages.

    Raises:
        error: pynvml is not installed beside ansible on the controller, or is not a single ``.py`` file.
    """
    try:
        import pynvml
    except ImportError as exc:
        raise error(f"{user} needs pynvml on the controller: pip install nvidia-ml-py into the Python that runs "
                    f"ansible (gpuprov depends on it) ({exc})") from exc
    path = pynvml.__file__
    if not path or not path.endswith(".py"):
        raise error(f"{user} expects pynvml as a single .py file, found {path!r}")
    return path


class PynvmlModuleAction(ActionBase):
    """Transfer pynvml.py, run :attr:`MODULE` with ``pynvml_dir`` set, remove the temporary directory.

    A subclass sets ``MODULE`` (the module's full name) and ``_VALID_ARGS`` (the options a playbook may set;
    ``pynvml_dir`` is set here only)."""

    MODULE = ""
    TRANSFERS_FILES = True
    _supports_check_mode = True

    def run(self, tmp: str | None = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        """Run the module on the host with the shipped pynvml and return its result."""
        task_vars = task_vars or {}
        super().run(tmp, task_vars)
        del tmp  # no longer used by ansible
        shell = self._connection._shell
        try:
            remote_file = shell.join_path(shell.tmpdir, "pynvml.py")
            self._transfer_file(controller_pynvml(self.MODULE), remote_file)
            self._fixup_perms2((shell.tmpdir, remote_file), execute=False)
            module_args = dict(self._task.args)
            module_args["pynvml_dir"] = shell.tmpdir
            result: dict[str, Any] = self._execute_module(
                module_name=self.MODULE, module_args=module_args, task_vars=task_vars
            )
        finally:
            self._remove_tmp_path(shell.tmpdir)
        return result
