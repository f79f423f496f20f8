"""Tests for gpuprov.fleet.loader: line tracking, duplicate keys and whole-document failures."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from gpuprov.exceptions import FleetValidationError
from gpuprov.fleet.loader import MAX_DEPTH, WrittenFloat, load_text, load_yaml
from gpuprov.fleet.problem import format_path


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
        (b"  \n\t\n\n", 1, "empty"),  # a tab cannot start a YAML token, but a blank file is still empty
        (b"\t# a comment\n  # another\n", 1, "empty"),
        (b"\xef\xbb\xbf\r\n", 1, "empty"),
        (b"---\n", 1, "empty"),
        (b"%YAML 1.1\n---\n...\n", 1, "empty"),
        (b"a: " + b"[" * 400 + b"]" * 400 + b"\n", 1, f"{MAX_DEPTH} levels deep"),
        (b"version: 1\nhosts:\n  a: " + b"{b: " * 100 + b"}" * 100 + b"\n", 3, f"{MAX_DEPTH} levels deep"),
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


def test_nesting_up_to_the_limit_loads() -> None:
    depth = MAX_DEPTH - 1  # the top-level mapping is the first level
    loaded = load_text("a: " + "[" * (depth - 1) + "]" * (depth - 1) + "\n", "f.yml")
    assert not loaded.problems


def test_aliases_cannot_nest_past_the_limit() -> None:
    lines = ["a0: &a0 [x]"] + [f"a{i}: &a{i} [*a{i - 1}]" for i in range(1, MAX_DEPTH + 5)]
    with pytest.raises(FleetValidationError) as info:
        load_text("\n".join(lines) + "\n", "f.yml")
    assert "levels deep" in info.value.problems[0].problem


@pytest.mark.parametrize(
    ("text", "value", "words"),
    [
        ("022", 18, "leading 0"),
        ("-017", -15, "leading 0"),
        ("0x16", 22, "hexadecimal"),
        ("0b101", 5, "binary"),
        ("1:10", 70, "base 60"),
        ("1:10.5", 70.5, "base 60"),
        ("2_222", 2222, "`_`"),
        ("1_0.5", 10.5, "`_`"),
    ],
)
def test_yaml_1_1_number_forms_are_problems_wherever_they_stand(text: str, value: object, words: str) -> None:
    loaded = load_text(f"a:\n  b: {text}\n  {text}: key\n  c: [{text}]\n", "f.yml")
    assert loaded.data["a"]["b"] == value  # the value YAML read is kept; validation reports nothing more for it
    key = next(k for k in loaded.data["a"] if k not in ("b", "c"))
    assert key == value
    got = {(p.path, p.line) for p in loaded.problems}
    assert got == {("a.b", 2), (format_path(("a", key)), 3), ("a.c[0]", 4)}
    assert loaded.number_forms == {("a", "b"), ("a", key), ("a", "c", 0)}
    for problem in loaded.problems:
        assert words in problem.problem and "plain decimal" in problem.fix
        assert text not in problem.problem.replace("1:10 is", "").replace("022 is", "").replace("2_222 is", "")


@pytest.mark.parametrize("text", ["22", "-3", "+4", "0", "12.5", ".5", "1.0e+3", '"022"', "'0x16'", "08", "1e3"])
def test_decimal_numbers_and_quoted_strings_are_no_problem(text: str) -> None:
    assert not load_text(f"a: {text}\n", "f.yml").problems


def test_floats_keep_the_text_they_were_written_as() -> None:
    value = load_text("a: 9.10\n", "f.yml").data["a"]
    assert isinstance(value, WrittenFloat) and value == 9.1
    assert (repr(value), str(value), float.__repr__(value)) == ("9.10", "9.10", "9.1")
    assert copy.deepcopy(value).written == "9.10"
