"""The Ansible settings gpuprov runs with, as environment (for ansible-runner) and as ``ansible.cfg``
(for a plain ``ansible-playbook`` on a rendered inventory): one source for both."""

from __future__ import annotations

from pathlib import Path

import jinja2

from gpuprov.resources import templates_dir

#: Environment for every run. Host-key checking stays on (the fleet file names the known_hosts file);
#: facts are read only through ansible_facts['...']; SSH connections are reused.
BASE_ENV: dict[str, str] = {
    "ANSIBLE_HOST_KEY_CHECKING": "True",
    "ANSIBLE_INJECT_FACT_VARS": "False",
    "ANSIBLE_RETRY_FILES_ENABLED": "False",
    "ANSIBLE_NOCOLOR": "1",
    "ANSIBLE_PIPELINING": "True",
    "ANSIBLE_SSH_ARGS": "-C -o ControlMaster=auto -o ControlPersist=60s",
    "ANSIBLE_DEPRECATION_WARNINGS": "False",
}


def ansible_cfg_text(collections_path: Path) -> str:
    """Return an ``ansible.cfg`` holding the same settings as :data:`BASE_ENV` and ``collections_path`` (the
    directory holding ``ansible_collections/gpuprov/gpu``).

    Rendered from ``templates/ansible.cfg.j2``; :func:`gpuprov.render.render_inventory` writes it beside
    the rendered inventory, so that ``ANSIBLE_CONFIG=DIR/ansible.cfg ansible-playbook -i DIR
    playbooks/site.yml`` runs as gpuprov does.
    """
    environment = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(templates_dir())), undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True, autoescape=False,
    )
    return environment.get_template("ansible.cfg.j2").render(collections_path=collections_path, env=BASE_ENV)
