# Copyright: gpuprov contributors
# Apache-2.0
"""Action plugin of ``mig_layout``: ship the controller's pynvml.py to the host, run the module, clean up.

The same approach as the ``nvml_facts`` action plugin: pynvml is one pure-Python file, copied into the
task's remote temporary directory, which is removed afterwards whatever the outcome.
"""

from __future__ import annotations

from typing import Any

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase

USER_ARGS = frozenset(("entries", "allow_destroy", "proc_root"))


def controller_pynvml() -> str:
    """Path of the controller's ``pynvml.py``; AnsibleActionFail when pynvml is missing or not one file."""
    try:
        import pynvml
    except ImportError as exc:
        raise AnsibleActionFail(f"mig_layout needs pynvml (nvidia-ml-py) on the controller ({exc})") from exc
    path = pynvml.__file__
    if not path or not path.endswith(".py"):
        raise AnsibleActionFail(f"mig_layout expects pynvml as a single .py file, found {path!r}")
    return path


class ActionModule(ActionBase):
    """Transfer pynvml.py, run ``mig_layout``, remove the temporary directory."""

    TRANSFERS_FILES = True
    _VALID_ARGS = USER_ARGS
    _supports_check_mode = True

    def run(self, tmp: str | None = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        """Run the module with the shipped pynvml and return its result."""
        task_vars = task_vars or {}
        super().run(tmp, task_vars)
        del tmp
        shell = self._connection._shell
        try:
            remote_file = shell.join_path(shell.tmpdir, "pynvml.py")
            self._transfer_file(controller_pynvml(), remote_file)
            self._fixup_perms2((shell.tmpdir, remote_file), execute=False)
            module_args = dict(self._task.args)
            module_args["pynvml_dir"] = shell.tmpdir
            result: dict[str, Any] = self._execute_module(
                module_name="gpuprov.gpu.mig_layout", module_args=module_args, task_vars=task_vars
            )
        finally:
            self._remove_tmp_path(shell.tmpdir)
        return result
