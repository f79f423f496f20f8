# Copyright: gpuprov contributors
# Apache-2.0
"""Lookup ``mig_pynvml``: the path of the controller's ``pynvml.py``, which the role installs for the boot unit."""

from __future__ import annotations

from typing import Any

from ansible.errors import AnsibleLookupError
from ansible.plugins.lookup import LookupBase
from ansible_collections.gpuprov.gpu.plugins.plugin_utils.pynvml_transfer import controller_pynvml

DOCUMENTATION = r"""
name: mig_pynvml
short_description: Path of the controller's pynvml.py (nvidia-ml-py)
description: Returns one path, for ansible.builtin.copy to install pynvml next to the MIG boot script.
"""


class LookupModule(LookupBase):
    """Return ``[path of pynvml.py]``."""

    def run(self, terms: list[Any], variables: Any = None, **kwargs: Any) -> list[str]:
        """Raise AnsibleLookupError when pynvml is missing or not a single file."""
        return [controller_pynvml("the mig_pynvml lookup", AnsibleLookupError)]
