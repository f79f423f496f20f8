"""Turn pydantic validation errors into :class:`~gpuprov.fleet.problem.Problem` lines.

Each error's ``loc`` is prefixed with where the validated part sits in the file and mapped to a line
through the loader's line map. Unknown keys get a "did you mean" from :mod:`difflib` over the keys the
model accepts at that place; wrong types get a fix that says how to write the value.
"""

from __future__ import annotations

import difflib
import re
import types
import typing
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from pydantic import BaseModel, ValidationError

from gpuprov.fleet.problem import Path_, Problem, format_path

#: (path in file) -> (path to report, line)
Locate = Callable[[Path_], tuple[Path_, int]]

_KIND = {
    "string_type": "a string",
    "int_type": "a whole number",
    "bool_type": "true or false",
    "float_type": "a number",
    "dict_type": "a mapping",
    "model_type": "a mapping",
    "model_attributes_type": "a mapping",
    "list_type": "a list",
}
_FIX = {
    "a string": "write a string; quote values that look like numbers",
    "a whole number": "write a number without quotes",
    "true or false": "write true or false without quotes",
    "a number": "write a number without quotes",
    "a mapping": "write it as `key: value` lines indented under this key",
    "a list": "write a list, e.g. [a, b] or one `- item` per line",
}

#: the words YAML 1.1 (PyYAML) reads as true and as false: a choice spelled so must be quoted in the file
_YAML_BOOL_WORDS = {True: frozenset({"yes", "true", "on", "y"}), False: frozenset({"no", "false", "off", "n"})}


def did_you_mean(word: object, candidates: Iterable[str]) -> str | None:
    """The closest of ``candidates`` to ``word`` (difflib, cutoff 0.6), or None."""
    matches = difflib.get_close_matches(str(word), list(candidates), n=1, cutoff=0.6)
    return matches[0] if matches else None


def _squash(text: str) -> str:
    return re.sub(r"[^a-z0-9]", "", text.lower())


def suggest_fix(word: object, candidates: Sequence[str], what: str = "one of") -> str:
    """The choices ``word`` begins (``'H100'`` -> every H100 model), else ``did you mean 'x'?`` when close, else
    the list of valid choices. Case and separators are ignored in the prefix match."""
    stem = _squash(str(word))
    begun = [c for c in candidates if stem and _squash(c).startswith(stem)]
    if len(begun) > 1:
        return f"{str(word)!r} names several - use one of {', '.join(begun)}"
    if begun:
        return f"did you mean {begun[0]!r}?"
    close = did_you_mean(word, candidates)
    if close is not None:
        return f"did you mean {close!r}?"
    return f"use {what}: {', '.join(candidates)}" if candidates else "remove it"


def describe(value: object) -> str:
    """A short description of an input value for a problem text."""
    kind = {dict: "a mapping", list: "a list", bool: "a boolean", type(None): "null"}.get(type(value))
    if kind is not None:
        return kind
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def problems_from(
    exc: ValidationError, model: type[BaseModel], prefix: Path_, file: str, locate: Locate
) -> list[Problem]:
    """Problems for every error in ``exc``; ``model`` was validated at ``prefix`` in the file."""
    problems: list[Problem] = []
    for err in exc.errors(include_url=False):
        loc: Path_ = tuple(err["loc"])
        if loc and isinstance(loc[-1], str) and loc[-1] == "[key]":
            loc = loc[:-1]
        path, line = locate((*prefix, *loc))
        problem, fix = _explain(err, model, loc)
        problems.append(Problem(file, line, format_path(path), problem, fix))
    return problems


def _explain(err: Any, model: type[BaseModel], loc: Path_) -> tuple[str, str]:
    kind: str = err["type"]
    ctx = err.get("ctx") or {}
    value = err.get("input")
    if kind == "gpuprov":
        return str(ctx["problem"]), str(ctx["fix"])
    if kind == "extra_forbidden":
        known = known_keys(model, loc[:-1])
        return f"unknown key {loc[-1]!r}", suggest_fix(loc[-1], known, "one of the known keys")
    if kind == "missing":
        return "required field is missing", f"add `{loc[-1]}:` here"
    if kind == "literal_error":
        # pydantic words them "'auto', 1, 2 or 3": quoted strings and bare numbers
        choices = [text or number for text, number in re.findall(r"'([^']*)'|(-?\d+)", str(ctx.get("expected", "")))]
        if isinstance(value, bool) and (spelled := [c for c in choices if c.lower() in _YAML_BOOL_WORDS[value]]):
            fix = f"quote it: '{spelled[0]}' (unquoted, YAML reads on, off, yes and no as true or false)"
            return f"{describe(value)} is not a valid choice", fix
        return f"{describe(value)} is not a valid choice", suggest_fix(value, choices)
    if kind in _KIND:
        want = _KIND[kind]
        if want == "a whole number" and isinstance(value, float):
            return f"expected {want}, got {describe(value)}", "write it without a decimal point"
        return f"expected {want}, got {describe(value)}", _FIX[want]
    if kind in ("greater_than_equal", "greater_than", "less_than_equal", "less_than"):
        bound = next(iter(ctx.values()), "?")
        words = {"greater_than_equal": ">=", "greater_than": ">", "less_than_equal": "<=", "less_than": "<"}
        return f"{describe(value)} is out of range", f"use a value {words[kind]} {bound}"
    return str(err.get("msg", "invalid value")), "see docs/fleet-file.md for this field"


def known_keys(model: type[BaseModel], loc: Path_) -> list[str]:
    """Field names the model accepts at ``loc`` (dict keys and list indexes are skipped)."""
    current: Any = model
    for part in loc:
        current = _unwrap(current)
        if isinstance(current, type) and issubclass(current, BaseModel):
            field = current.model_fields.get(part) if isinstance(part, str) else None
            if field is None:
                return []
            current = field.annotation
        elif typing.get_origin(current) is dict:
            current = typing.get_args(current)[1]
        elif typing.get_origin(current) is list:
            current = typing.get_args(current)[0]
        else:
            return []
    current = _unwrap(current)
    if isinstance(current, type) and issubclass(current, BaseModel):
        return list(current.model_fields)
    return []


def _unwrap(tp: Any) -> Any:
    """Strip Annotated and Optional/Union down to the first model, dict or list member."""
    while True:
        origin = typing.get_origin(tp)
        if origin is typing.Annotated:
            tp = typing.get_args(tp)[0]
        elif origin is typing.Union or origin is types.UnionType:
            members = [a for a in typing.get_args(tp) if a is not type(None)]
            structured = [
                a for a in members
                if typing.get_origin(a) in (dict, list) or (isinstance(a, type) and issubclass(a, BaseModel))
            ]
            tp = (structured or members)[0]
        else:
            return tp
