"""gpuprov.engine guards that run before anything reaches a host, and fixes from the break-it review."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gpuprov.engine import check_output_path, check_tags
from gpuprov.exceptions import ConfigError, FleetValidationError
from gpuprov.fleet import load_fleet
from gpuprov.fleet.environment import check_env_refs, env_refs
from gpuprov.recap import write_summary

FLEET = """\
version: 1
ssh: {user: admin, become_password: {env: GPUPROV_T_BECOME}}
settings:
  os: debian12
  gpus: {model: H200, count: 2}
  proxy: {http: {env: GPUPROV_T_PROXY}}
hosts:
  gpu01: {address: 10.0.0.1}
"""


def test_env_refs_are_found_anywhere() -> None:
    assert list(env_refs({"a": {"b": {"env": "X"}}, "c": [1], "d": {"env": "Y"}})) == [("a.b", "X"), ("d", "Y")]


def test_unset_secret_variable_stops_the_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "f.yml"
    path.write_text(FLEET)
    fleet = load_fleet(path)
    monkeypatch.setenv("GPUPROV_T_BECOME", "x")
    monkeypatch.delenv("GPUPROV_T_PROXY", raising=False)
    with pytest.raises(ConfigError, match=r"settings\.proxy\.http: environment variable GPUPROV_T_PROXY is not set"):
        check_env_refs(fleet)
    monkeypatch.setenv("GPUPROV_T_PROXY", "http://proxy:3128")
    monkeypatch.delenv("GPUPROV_T_BECOME")
    with pytest.raises(ConfigError, match="GPUPROV_T_BECOME"):
        check_env_refs(fleet)
    monkeypatch.setenv("GPUPROV_T_BECOME", "")  # exported but empty: said so, not "not set"
    with pytest.raises(ConfigError, match="variable GPUPROV_T_BECOME is set but empty - export GPUPROV_T_BECOME"):
        check_env_refs(fleet)
    monkeypatch.setenv("GPUPROV_T_BECOME", "x")
    check_env_refs(fleet)


def test_unknown_tag_is_refused_with_a_suggestion() -> None:
    check_tags("nouveau,gpuprov", "--tags")
    with pytest.raises(ConfigError, match="did you mean 'nouveau'"):
        check_tags("noveau", "--tags")


def test_tags_that_select_no_task_of_the_chosen_roles_are_refused() -> None:
    """``--role nouveau --tags cuda`` ran only the argument checks and reported "in sync"."""
    check_tags("nouveau", "--tags", ["nouveau"])
    check_tags("cuda,nouveau", "--tags", ["nouveau"])
    check_tags("cuda", "--tags", None)  # the whole site has the cuda play
    for tags in ("cuda", "never", "cuda,image_workers"):
        with pytest.raises(ConfigError, match=rf"--tags {tags}: selects no task of nouveau - the tags of this run: "):
            check_tags(tags, "--tags", ["nouveau"])
    check_tags("cuda", "--skip-tags", ["nouveau"])  # skipping what is not there skips nothing: allowed


def test_output_path_checked_before_the_run(tmp_path: Path) -> None:
    check_output_path(tmp_path / "s.json", "--json")
    with pytest.raises(ConfigError, match="is a directory"):
        check_output_path(tmp_path, "--json")
    with pytest.raises(ConfigError, match="not a writable directory"):
        check_output_path(tmp_path / "missing" / "s.json", "--json")


def test_summary_is_written_through_links_and_special_files(tmp_path: Path) -> None:
    target = tmp_path / "target.json"
    target.write_text("old")
    link = tmp_path / "link.json"
    link.symlink_to(target)
    write_summary(link, {"a": 1})
    assert link.is_symlink() and '"a": 1' in target.read_text()
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    try:
        write_summary(fifo, {"b": 2})
        assert b'"b": 2' in os.read(reader, 4096)
    finally:
        os.close(reader)
    assert fifo.exists() and not fifo.is_file()
    write_summary(tmp_path / "plain.json", {"c": 3})
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []


@pytest.mark.parametrize("name", ["gpuprov", "all", "ungrouped", "localhost"])
def test_reserved_host_names_are_rejected(tmp_path: Path, name: str) -> None:
    path = tmp_path / "f.yml"
    path.write_text(FLEET.replace("gpu01:", f"{name}:"))
    with pytest.raises(FleetValidationError) as info:
        load_fleet(path)
    assert any("reserved" in str(p) and f"hosts.{name}" in str(p) for p in info.value.problems)


def test_credentials_in_urls_never_reach_problem_lines(tmp_path: Path) -> None:
    path = tmp_path / "f.yml"
    path.write_text(FLEET.replace("{env: GPUPROV_T_PROXY}", "'htp://user:S3cretPW@proxy:3128'"))
    with pytest.raises(FleetValidationError) as info:
        load_fleet(path)
    text = "\n".join(str(p) for p in info.value.problems)
    assert "S3cretPW" not in text and "settings.proxy.http" in text


def test_fifo_and_oversized_files_are_refused_without_reading(tmp_path: Path) -> None:
    fifo = tmp_path / "fleet.yml"
    os.mkfifo(fifo)
    with pytest.raises(FleetValidationError, match="not a regular file"):
        load_fleet(fifo)
    big = tmp_path / "big.yml"
    with big.open("wb") as handle:
        handle.truncate(17 * 1024 * 1024)
    with pytest.raises(FleetValidationError, match="over the"):
        load_fleet(big)


def test_render_never_overwrites_a_users_file(tmp_path: Path) -> None:
    from gpuprov.render import render_inventory

    path = tmp_path / "f.yml"
    path.write_text(FLEET)
    fleet = load_fleet(path)
    out = tmp_path / "inv"
    (out / "host_vars").mkdir(parents=True)
    mine = out / "host_vars" / "gpu01.yml"
    mine.write_text("my: own\n")
    with pytest.raises(ConfigError, match="was not generated by gpuprov"):
        render_inventory(fleet, out)
    assert mine.read_text() == "my: own\n" and not (out / "hosts.yml").exists()
    with pytest.raises(ConfigError, match="cannot write the inventory"):
        render_inventory(fleet, path / "sub")


def test_limit_names_every_unknown_host(tmp_path: Path) -> None:
    """Ansible only warns about a misspelt name in a --limit list and runs the rest; gpuprov refuses it."""
    from gpuprov.hostplay import check_limit
    from gpuprov.render import render_inventory

    path = tmp_path / "f.yml"
    path.write_text(FLEET.replace("  gpu01: {address: 10.0.0.1}\n",
                                  "  gpu01: {address: 10.0.0.1}\n  gpu02: {address: 10.0.0.2}\n"))
    inventory = render_inventory(load_fleet(path), tmp_path / "inv")
    for good in ("gpu01", "gpu01,gpu02", "all:!gpu02", "gpu0*", "gpuprov"):
        check_limit(inventory, good)
    with pytest.raises(ConfigError, match=r"--limit gpu01,gpu0l: gpu0l matches no host or group"):
        check_limit(inventory, "gpu01,gpu0l")
    with pytest.raises(ConfigError, match="matches no host in the fleet"):
        check_limit(inventory, "nosuch")


@pytest.mark.parametrize("command", [["apply"], ["doctor"], ["facts"], ["verify"]])
def test_limit_does_not_narrow_the_secret_check(
    command: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """apply and the probing commands agree: every {env: NAME} of the fleet file is checked, whatever --limit
    picks (here a host that does not use the unset one), before any host is reached."""
    from gpuprov.cli.__main__ import main

    path = tmp_path / "f.yml"
    path.write_text(FLEET.replace("ssh: {user: admin, become_password: {env: GPUPROV_T_BECOME}}", "ssh: {user: admin}")
                    .replace("  gpu01: {address: 10.0.0.1}",
                             "  gpu01: {address: 10.0.0.1}\n"
                             "  gpu02: {address: 10.0.0.2, become_password: {env: GPUPROV_T_BECOME}}"))
    monkeypatch.setenv("GPUPROV_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("GPUPROV_T_PROXY", "http://proxy:3128")
    monkeypatch.delenv("GPUPROV_T_BECOME", raising=False)
    assert main([*command, str(path), "--limit", "gpu01"]) == 2
    err = capsys.readouterr().err
    assert "hosts.gpu02.become_password: environment variable GPUPROV_T_BECOME is not set" in err, err
    assert not (tmp_path / "state" / "runs").exists() or not any((tmp_path / "state" / "runs").iterdir())


@pytest.mark.parametrize("command", [["doctor"], ["facts"], ["verify"]])
def test_host_commands_stop_on_an_unset_secret_before_any_run(
    command: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """doctor, facts and verify on a fleet file check its {env: NAME} secrets as apply does: exit 2 naming the
    field and the variable, and no run record (nothing reached a host)."""
    from gpuprov.cli.__main__ import main

    path = tmp_path / "f.yml"
    path.write_text(FLEET)
    monkeypatch.setenv("GPUPROV_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("GPUPROV_T_PROXY", "http://proxy:3128")
    monkeypatch.delenv("GPUPROV_T_BECOME", raising=False)
    assert main([*command, str(path)]) == 2
    err = capsys.readouterr().err
    assert "hosts.gpu01.become_password: environment variable GPUPROV_T_BECOME is not set" in err, err
    assert not (tmp_path / "state" / "runs").exists() or not any((tmp_path / "state" / "runs").iterdir())
