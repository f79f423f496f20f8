"""gpuprov.roles: the catalogue follows site.yml and each role's argument specs."""

from __future__ import annotations

import pytest
import yaml

from gpuprov.exceptions import ConfigError
from gpuprov.resources import playbooks_dir
from gpuprov.roles import _plain, list_roles, role_playbook


def test_order_is_site_order_and_every_role_documents_itself() -> None:
    plays = yaml.safe_load((playbooks_dir() / "site.yml").read_text())
    expected = [p["ansible.builtin.import_playbook"].removesuffix(".yml") for p in plays]
    roles = list_roles()
    assert [r.name for r in roles] == expected
    for role in roles:
        assert role.summary, f"{role.name}: meta/argument_specs.yml has no short_description"
        assert role.touches, f"{role.name}: meta/argument_specs.yml has no description of what it touches"
        assert role.playbook.is_file()


def test_unknown_role_suggests_the_close_one() -> None:
    with pytest.raises(ConfigError, match="did you mean 'nouveau'"):
        role_playbook("noveau")


def test_markup_is_dropped() -> None:
    assert _plain("Sets C(nouveau_reboot_required) and I(x) but not ABC(d)") == (
        "Sets nouveau_reboot_required and x but not ABC(d)")
