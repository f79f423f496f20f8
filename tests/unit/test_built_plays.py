"""The plays gpuprov builds in code (facts, doctor, the drift probe) pass ansible-playbook's syntax check with
the collections path gpuprov gives it: every role and module they name resolves in the gpuprov.gpu collection
(a short role name such as ``verify`` does not)."""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuprov.doctor import doctor_play
from gpuprov.drift_report import DRIFT_PLAY
from gpuprov.facts import FACTS_PLAY
from gpuprov.resources import collections_path

PLAYS = {"facts": FACTS_PLAY, "doctor": doctor_play(2, 1.0), "drift": DRIFT_PLAY}


def _syntax_check(play: list[dict[str, Any]]) -> tuple[int, str]:
    import ansible_runner

    with tempfile.TemporaryDirectory(prefix="gpuprov-play-") as private:
        playbook = Path(private) / "play.yml"
        playbook.write_text(yaml.safe_dump(play, sort_keys=False), encoding="utf-8")
        (Path(private) / "inventory").mkdir()
        (Path(private) / "inventory" / "hosts").write_text("[gpuprov]\nlocalhost ansible_connection=local\n")
        run = ansible_runner.run(
            private_data_dir=private, playbook=str(playbook), cmdline="--syntax-check", quiet=True,
            suppress_env_files=True,
            envvars={"ANSIBLE_COLLECTIONS_PATH": str(collections_path()), "ANSIBLE_COLLECTIONS_SCAN_SYS_PATH": "False",
                     "ANSIBLE_NOCOLOR": "1",
                     "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])},
        )
        return int(run.rc), run.stdout.read()[-2000:]


@pytest.mark.parametrize("name", sorted(PLAYS))
def test_built_play_passes_syntax_check(name: str) -> None:
    rc, out = _syntax_check(PLAYS[name])
    assert rc == 0, out


def test_a_short_role_name_fails_the_check() -> None:
    """The check sees an unresolved role: the drift probe named by its short name fails it."""
    task = DRIFT_PLAY[0]["tasks"][0]
    short = [{**DRIFT_PLAY[0], "tasks": [{**task, "ansible.builtin.import_role": {"name": "verify",
                                                                                 "tasks_from": "drift"}}]}]
    rc, out = _syntax_check(short)
    assert rc != 0 and "verify" in out
