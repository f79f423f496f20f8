"""The Ansible settings gpuprov runs with, as environment (for ansible-runner) and as ``ansible.cfg``
(for a plain ``ansible-playbook`` on a rendered inventory): one source for both."""

from __future__ import annotations

import importlib.util
import logging
import os
from pathlib import Path

import jinja2

from gpuprov.exceptions import ConfigError
from gpuprov.resources import templates_dir

log = logging.getLogger(__name__)

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


#: Execution strategies: ``linear`` (Ansible's own: a Python process per task on the host, over the SSH
#: connection) and ``mitogen`` (the mitogen_linear strategy of the ``mitogen`` package: one Python interpreter per
#: host, kept for the whole run, that imports each module once). ``GPUPROV_STRATEGY`` picks one for a run.
STRATEGIES = ("linear", "mitogen")
DEFAULT_STRATEGY = "mitogen"


def strategy_env(name: str | None = None) -> dict[str, str]:
    """The ``ANSIBLE_STRATEGY*`` settings of strategy ``name`` (default: ``GPUPROV_STRATEGY``, else
    :data:`DEFAULT_STRATEGY`): none for ``linear``; for ``mitogen`` the installed ``ansible_mitogen`` package's
    strategy plugins, or none (Ansible's linear strategy, with a log line) where it is not installed.

    Raises:
        ConfigError: ``name`` is not one of :data:`STRATEGIES` (exit 2).
    """
    name = name or os.environ.get("GPUPROV_STRATEGY") or DEFAULT_STRATEGY
    if name not in STRATEGIES:
        raise ConfigError(f"GPUPROV_STRATEGY={name!r} is not a strategy gpuprov runs - use one of "
                          f"{', '.join(STRATEGIES)}")
    if name == "linear":
        return {}
    spec = importlib.util.find_spec("ansible_mitogen")
    if spec is None or spec.origin is None:
        log.info("the mitogen package is not installed: running Ansible's linear strategy")
        return {}
    plugins = Path(spec.origin).parent / "plugins" / "strategy"
    return {"ANSIBLE_STRATEGY_PLUGINS": str(plugins), "ANSIBLE_STRATEGY": "mitogen_linear"}


def ansible_cfg_text(collections_path: Path) -> str:
    """Return an ``ansible.cfg`` holding the same settings as :data:`BASE_ENV`, the strategy
    (:func:`strategy_env`) and ``collections_path`` (the directory holding ``ansible_collections/gpuprov/gpu``).

    Rendered from ``templates/ansible.cfg.j2``; :func:`gpuprov.render.render_inventory` writes it beside
    the rendered inventory, so that ``ANSIBLE_CONFIG=DIR/ansible.cfg ansible-playbook -i DIR
    playbooks/site.yml`` runs as gpuprov does.
    """
    environment = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(templates_dir())), undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True, autoescape=False, trim_blocks=True,
    )
    return environment.get_template("ansible.cfg.j2").render(collections_path=collections_path,
                                                             env={**BASE_ENV, **strategy_env()})
