"""Every command's options driven with generated values: never a traceback, bad values exit 2.

Commands that would reach hosts (apply, check, facts, doctor, verify, upgrade) get a fleet file that fails
validation, so their option handling runs and nothing is touched; ``lab`` (it starts and removes containers),
``doctor --fix``, ``--local``, ``bundle --download`` and ``images run --follow`` (a service that would keep
running) are left out.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import click
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuprov.cli import cli
from gpuprov.cli.__main__ import main

DATA = Path(__file__).resolve().parents[2] / "data"
BAD_FLEET = DATA / "bad" / "no_hosts.yml"
GOOD_FLEET = DATA / "good" / "minimal.yml"
LEFT_OUT = {("lab",), ("doctor", "fix"), ("doctor", "local"), ("verify", "local"), ("bundle", "download"),
            ("images run", "follow")}  # fmt: skip

#: values that have broken option handling before: empty, blank, signs, NaN, huge, lists, URLs, paths
TRICKY = ["", " ", "-1", "0", "1", "nan", "inf", "1e400", "99999999999999999999", "all", "cpu", "0,0", ",",
          "auto", "sqlite:///", "sqlite:relative.db", "redis://h/abc", "redis://127.0.0.1:1/0", "/", "~", "-",
          "--", "a=b", "{", "@missing.yml", "gpu01", "*", "!", "é"]  # fmt: skip
#: what a shell can pass: any bytes but NUL (argv strings end at it), as Python decodes them (surrogateescape for
#: bytes that are not UTF-8; a lone surrogate such as U+D800 cannot come from argv)
ARGV_TEXT = st.one_of(
    st.text(alphabet=st.characters(blacklist_characters="\x00", blacklist_categories=("Cs",)), max_size=6),
    st.binary(max_size=6).map(lambda raw: os.fsdecode(raw.replace(b"\x00", b""))),
)


def _commands(group: click.Group, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], click.Command]]:
    ctx = click.Context(group)
    for name in group.list_commands(ctx):
        cmd = group.get_command(ctx, name)
        assert cmd is not None
        if isinstance(cmd, click.Group):
            if cmd.invoke_without_command:  # `gpuprov matrix` prints; `gpuprov matrix update` is its sub-command
                yield (*path, name), cmd
            yield from _commands(cmd, (*path, name))
        else:
            yield (*path, name), cmd


COMMANDS = [(p, c) for p, c in _commands(cli) if (p[0],) not in LEFT_OUT]


def _value(param: click.Parameter) -> st.SearchStrategy[str]:
    choices = list(getattr(param.type, "choices", []))
    return st.one_of(st.sampled_from(TRICKY), st.sampled_from(choices or ["x"]),
                     st.integers(-10, 10**6).map(str), ARGV_TEXT)  # fmt: skip


@pytest.mark.parametrize(("path", "cmd"), COMMANDS, ids=lambda v: " ".join(v) if isinstance(v, tuple) else "")
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_generated_options_never_traceback(path: tuple[str, ...], cmd: click.Command, data: st.DataObject,
                                          tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                          capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("GPUPROV_IMAGES_QUEUE", raising=False)
    args = list(path)
    for param in cmd.params:
        if (" ".join(path), param.name) in LEFT_OUT or (path[0], param.name) in LEFT_OUT:
            continue
        if isinstance(param, click.Argument):
            reaches_hosts = path[0] in ("apply", "check", "facts", "doctor", "verify", "upgrade")
            fleet = BAD_FLEET if reaches_hosts else GOOD_FLEET
            value = _value(param)
            if reaches_hosts:  # `--` ends the options and leaves the optional fleet file out: `doctor` then reads
                value = value.filter(lambda v: v != "--")  # this machine, as --local does (left out above)
            given_value = data.draw(st.one_of(st.just(str(fleet)), value), label=param.name or "")
            args.append(given_value)
            continue
        assert isinstance(param, click.Option)
        if not data.draw(st.booleans(), label=f"use {param.name}"):
            continue
        args.append(param.opts[0])
        if not param.is_flag:
            args.append(data.draw(_value(param), label=param.name or ""))
    if path[0] in ("render", "bundle") and "--out" not in args and "-o" not in args:
        args += ["--out", str(tmp_path / "out")]
    if path[0] == "images" and "--queue" not in args:
        args += ["--queue", f"sqlite:///{tmp_path}/missing.db"]
    dbs_before = {p.name for p in Path.cwd().iterdir() if p.name.endswith(".db")}  # an earlier example's --out
    code = main(args)
    captured = capsys.readouterr()
    assert "Traceback" not in captured.out + captured.err, args
    assert code in (0, 2, 4), (args, code, captured.err[-500:])
    made = {p.name for p in Path.cwd().iterdir() if p.name.endswith(".db")} - dbs_before
    assert not made or path[:2] == ("images", "submit"), made
