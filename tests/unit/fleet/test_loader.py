"""Tests for gpuprov.fleet.loader: line tracking, duplicate keys and whole-document failures."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuprov.exceptions import FleetValidationError
from gpuprov.fleet.loader import load_text, load_yaml


def test_records_line_of_every_key_and_item() -> None:
    loaded = load_text("version: 1\nhosts:\n  a:\n    groups:\n      - x\n      - y\n", "f.yml")
    assert loaded.data == {"version": 1, "hosts": {"a": {"groups": ["x", "y"]}}}
    assert loaded.lines[("hosts", "a")] == 3
    assert loaded.lines[("hosts", "a", "groups", 1)] == 6
    assert loaded.line_of(("hosts", "a", "groups", 1, "deeper")) == 6
    assert loaded.line_of(("nowhere",)) == 1


def test_duplicate_key_names_both_lines_and_keeps_first() -> None:
    loaded = load_text("hosts:\n  a: {address: 1}\n  b: {}\n  a: {address: 2}\n", "f.yml")
    assert loaded.data["hosts"]["a"] == {"address": 1}
    [problem] = loaded.problems
    assert (problem.line, problem.path) == (4, "hosts.a")
    assert "line 2" in problem.problem and "line 4" in problem.problem
    assert problem.problem.startswith("duplicate host")


def test_merge_keys_are_supported_and_explicit_keys_win() -> None:
    loaded = load_text("base: &b {x: 1, y: 2}\nuse:\n  <<: *b\n  y: 3\n", "f.yml")
    assert loaded.data["use"] == {"x": 1, "y": 3}
    assert not loaded.problems


@pytest.mark.parametrize(
    ("content", "line", "words"),
    [
        (b"", 1, "empty"),
        (b"# only a comment\n", 1, "empty"),
        (b"- a\n- b\n", 1, "list"),
        (b"version: 1\nhosts: {a: [1, 2}\n", 2, "YAML syntax"),
        (b"version: 1\n\xff\xfe\n", 2, "UTF-8"),
        (b"version: 1\nx: \x00\n", 2, "not allowed"),
        (b"a: !!python/object:os.system x\n", 1, "tag"),
    ],
)
def test_document_failures_raise_one_problem(content: bytes, line: int, words: str) -> None:
    with pytest.raises(FleetValidationError) as info:
        loaded = load_text(content, "f.yml")
        if loaded.problems:  # a bad tag inside a valid mapping is a recorded problem
            raise FleetValidationError(list(loaded.problems))
    [problem] = info.value.problems
    assert problem.line == line
    assert words in str(problem)


def test_missing_file_and_directory(tmp_path: Path) -> None:
    for target in (tmp_path / "nope.yml", tmp_path):
        with pytest.raises(FleetValidationError) as info:
            load_yaml(target)
        assert info.value.problems[0].line == 0


def test_alias_bomb_is_refused() -> None:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [*a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}]" for i in range(1, 9)]
    with pytest.raises(FleetValidationError) as info:
        load_text("\n".join(lines) + "\n", "bomb.yml")
    assert "nodes" in info.value.problems[0].problem
