"""Hatch build hook: put the gpuprov.gpu collection into the wheel as ``ansible_collections/gpuprov/gpu/``.

A standard wheel gets copies of the collection's files (galaxy.yml, meta/, plugins/, roles/, playbooks/)
and of gpuprov's own templates. An editable install gets none: its ``.pth`` file lists the checkout and
``.collections/`` (``dev-mode-dirs`` in pyproject.toml), whose ``ansible_collections/gpuprov/gpu`` link
points at the checkout, so Python and Ansible both read the files being edited.
"""

from __future__ import annotations

from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

COLLECTION = "ansible_collections/gpuprov/gpu"
COLLECTION_PARTS = ("galaxy.yml", "meta", "plugins", "roles", "playbooks", "README.md", "LICENSE", "CHANGELOG.md")


class CollectionBuildHook(BuildHookInterface):  # type: ignore[misc]
    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        if self.target_name != "wheel" or version != "standard":
            return
        include = build_data["force_include"]
        for part in COLLECTION_PARTS:
            include[part] = f"{COLLECTION}/{part}"
        include["templates"] = "gpuprov/_templates"
