"""The runtime-install checker (tests/integration/runtime_plugins.py) reports each kind of name it claims to
check when that name does not resolve: a module in ``action:``/``local_action:`` form too, filters and tests
named as strings to map/select/selectattr, debug's bare ``var``, play-level vars and ``*.yaml`` task files."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import yaml

CHECKER_DIR = Path(__file__).resolve().parents[1] / "integration"

SCRIPT = """
import json, sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from ansible.plugins.loader import init_plugin_loader
init_plugin_loader()
import runtime_plugins
root = Path(sys.argv[2])
print(json.dumps(runtime_plugins.check_playbook(root, root / "playbooks" / "play.yml")))
"""


def test_every_kind_of_unresolved_name_is_reported(tmp_path: Path) -> None:
    tasks = tmp_path / "roles" / "probe" / "tasks"
    tasks.mkdir(parents=True)
    (tasks / "main.yml").write_text(yaml.safe_dump([
        {"name": "Action form", "action": "gpuprov_nowhere.none.module_a", "args": {"x": 1}},
        {"name": "Local action form", "local_action": {"module": "gpuprov_nowhere.none.module_b"}},
        {"name": "Strings naming plugins", "ansible.builtin.debug": {
            "msg": "{{ [1] | map('gpuprov_no_filter') | select('gpuprov_no_test_a') "
                   "| selectattr('k', 'gpuprov_no_test_b') | list }}"}},
        {"name": "Bare var", "ansible.builtin.debug": {"var": "x | gpuprov_no_filter_in_var"}},
        {"name": "Fine", "ansible.builtin.include_tasks": "more.yaml"},
    ]))
    (tasks / "more.yaml").write_text(yaml.safe_dump([
        {"name": "In a .yaml file", "ansible.builtin.debug": {"msg": "{{ x | gpuprov_no_filter_in_yaml }}"}}]))
    (tmp_path / "playbooks").mkdir()
    (tmp_path / "playbooks" / "play.yml").write_text(yaml.safe_dump([
        {"hosts": "all", "vars": {"v": "{{ y | gpuprov_no_filter_in_play_vars }}"}, "roles": ["probe"]}]))
    proc = subprocess.run([sys.executable, "-c", SCRIPT, str(CHECKER_DIR), str(tmp_path)], capture_output=True,
                          text=True, check=False, timeout=300)
    assert proc.returncode == 0, proc.stderr
    found = {(u["kind"], u["name"]) for u in json.loads(proc.stdout)["unresolved"]}
    assert found == {
        ("module", "gpuprov_nowhere.none.module_a"), ("module", "gpuprov_nowhere.none.module_b"),
        ("filter", "gpuprov_no_filter"), ("test", "gpuprov_no_test_a"), ("test", "gpuprov_no_test_b"),
        ("filter", "gpuprov_no_filter_in_var"), ("filter", "gpuprov_no_filter_in_yaml"),
        ("filter", "gpuprov_no_filter_in_play_vars"),
    }, found
