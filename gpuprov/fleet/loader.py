"""Load a fleet file as plain Python data plus the line of every mapping key and list item.

PyYAML composes the document into nodes (which carry their line) and this module builds the data from
the nodes itself, so it can record ``path -> line`` for every key and item, report duplicate keys with
both lines, and refuse recursive aliases, alias bombs and nesting deeper than :data:`MAX_DEPTH`. Scalars
are built by PyYAML's safe constructor, so types are those of ``yaml.safe_load`` (YAML 1.1: ``yes`` is
``True``), except that a float keeps the text it was written as (:class:`WrittenFloat`: ``9.10``, which
YAML reads as 9.1) for the messages that quote it, and that a number written in a YAML 1.1 form other
than plain decimal (octal ``022`` = 18, hex ``0x16``, binary ``0b1``, sexagesimal ``1:10`` = 70,
underscores ``2_222``) is a problem wherever it stands (:func:`number_form`).

Whole-document failures (unreadable, not UTF-8, YAML syntax, empty, too deep, top level not a mapping)
raise :class:`~gpuprov.exceptions.FleetValidationError`; duplicate keys and number forms are returned as
problems so that validation can go on and report everything at once.
"""

from __future__ import annotations

import re
import stat
from collections.abc import Hashable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from gpuprov.exceptions import FleetValidationError
from gpuprov.fleet.problem import DOCUMENT, Path_, Problem, format_path

#: refuse documents that expand (through aliases) to more nodes than this
MAX_NODES = 200_000
#: refuse documents nested deeper than this many levels (the top-level mapping is level 1, a value in it
#: level 2): a fleet file needs 10 (``hosts.<host>.settings.mig.layouts.<name>[i].mig_devices.<profile>``),
#: and PyYAML composes recursively, so a few hundred levels of ``[[[...`` would end in Python's recursion limit
MAX_DEPTH = 64
_MAP_TAG = "tag:yaml.org,2002:map"
_SEQ_TAG = "tag:yaml.org,2002:seq"
_MERGE_TAG = "tag:yaml.org,2002:merge"
_NULL_TAG = "tag:yaml.org,2002:null"
_INT_TAG = "tag:yaml.org,2002:int"
_FLOAT_TAG = "tag:yaml.org,2002:float"
#: plain decimal numbers, the only number forms a fleet file takes (``.inf``/``.nan`` are left to the schema)
_DECIMAL_INT = re.compile(r"[-+]?(0|[1-9][0-9]*)")
_DECIMAL_FLOAT = re.compile(r"[-+]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][-+][0-9]+)?|[-+]?\.(inf|Inf|INF)|\.(nan|NaN|NAN)")
#: YAML 1.1 number forms (PyYAML's int and float resolvers) -> what a reader of the file would not expect
_FORMS = {
    "sexagesimal": "a number with `:`, which YAML 1.1 reads in base 60 (1:10 is 70)",
    "hex": "a hexadecimal number (0x...)",
    "binary": "a binary number (0b...)",
    "octal": "a number with a leading 0, which YAML 1.1 reads in base 8 (022 is 18)",
    "underscore": "a number with `_`, which YAML 1.1 drops (2_222 is 2222)",
}


class WrittenFloat(float):
    """A float of the fleet file that keeps the text it was written as (``written``: ``"9.10"``, value 9.1).

    ``repr`` and ``str`` give that text, so a message quoting the value quotes what the file says;
    ``float.__repr__`` gives what YAML read.
    """

    written: str

    def __new__(cls, value: float, written: str) -> WrittenFloat:
        obj = super().__new__(cls, value)
        obj.written = written
        return obj

    def __repr__(self) -> str:
        return self.written

    def __str__(self) -> str:
        return self.written

    def __reduce__(self) -> tuple[Any, ...]:
        return WrittenFloat, (float(self), self.written)


def number_form(text: str, tag: str) -> str | None:
    """The key of :data:`_FORMS` for a plain scalar ``text`` that YAML resolved to ``tag`` (int or float) but
    that is not written as a plain decimal number; None for decimal numbers and for anything else."""
    decimal = {_INT_TAG: _DECIMAL_INT, _FLOAT_TAG: _DECIMAL_FLOAT}.get(tag)
    if decimal is None or decimal.fullmatch(text):
        return None
    body = text.lstrip("+-")
    if ":" in body:
        return "sexagesimal"
    if body.startswith("0x"):
        return "hex"
    if body.startswith("0b"):
        return "binary"
    if tag == _INT_TAG and body.startswith("0"):
        return "octal"
    return "underscore"


@dataclass
class LoadedYaml:
    """A loaded document: ``data``, ``lines`` (path tuple -> 1-based line) and non-fatal ``problems``."""

    file: str
    data: Any
    lines: dict[Path_, int] = field(default_factory=dict)
    problems: list[Problem] = field(default_factory=list)
    #: paths whose value was written in a non-decimal number form (reported in ``problems``): validation
    #: reports nothing more for them
    number_forms: set[Path_] = field(default_factory=set)

    def line_of(self, path: Path_) -> int:
        """Line of ``path``, or of its nearest recorded ancestor (1 for the document)."""
        for end in range(len(path), -1, -1):
            line = self.lines.get(tuple(path[:end]))
            if line is not None:
                return line
        return 1


#: Largest fleet file read (bytes): a 10,000-host fleet file is about 1 MB.
MAX_FLEET_BYTES = 16 * 1024 * 1024


def load_yaml(path: Path, display: str | None = None) -> LoadedYaml:
    """Read ``path`` and return its data with line numbers; ``display`` names the file in problems.

    Raises FleetValidationError (with one problem) when the file cannot be used at all.
    """
    name = display if display is not None else str(path)
    try:
        info = path.stat()
        if stat.S_ISDIR(info.st_mode):
            raise IsADirectoryError(str(path))
        if not stat.S_ISREG(info.st_mode):
            raise _fatal(name, 0, "is not a regular file (a device, FIFO or socket)", "pass the fleet file itself")
        if info.st_size > MAX_FLEET_BYTES:
            raise _fatal(name, 0, f"is {info.st_size} bytes, over the {MAX_FLEET_BYTES}-byte limit",
                         "split the fleet, or check that this is a fleet file")
        raw = path.read_bytes()
    except FileNotFoundError:
        raise _fatal(name, 0, "file not found", "check the path to the fleet file") from None
    except IsADirectoryError:
        raise _fatal(name, 0, "is a directory, not a file", "pass the fleet file itself") from None
    except OSError as exc:
        raise _fatal(name, 0, f"cannot read file ({exc.strerror})", "check its permissions") from None
    return load_text(raw, name)


def load_text(raw: bytes | str, name: str) -> LoadedYaml:
    """Like :func:`load_yaml` for content already in memory (bytes are decoded as UTF-8)."""
    if isinstance(raw, bytes):
        try:
            text = raw.decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            line = raw[: exc.start].count(b"\n") + 1
            raise _fatal(
                name, line, f"not UTF-8 text (byte 0x{raw[exc.start]:02x})", "save the fleet file as UTF-8 YAML"
            ) from None
    else:
        text = raw
    if all(not line.strip() or line.lstrip().startswith("#") for line in text.splitlines()):
        raise _empty(name)
    try:
        root = yaml.compose(text, Loader=_Loader)
    except _TooDeep as exc:
        raise _too_deep(name, exc.line) from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else 1
        problem = " ".join(p for p in (exc.context, exc.problem) if p) or "invalid YAML"
        raise _fatal(name, line, f"YAML syntax error: {problem}", "fix the YAML syntax on this line") from None
    except yaml.reader.ReaderError as exc:
        line = text[: exc.position].count("\n") + 1
        raise _fatal(
            name, line, f"character {exc.character!r} is not allowed in YAML", "remove the character"
        ) from None
    except RecursionError:  # not expected below MAX_DEPTH; kept so that no input ends in a traceback
        raise _too_deep(name, 1) from None
    except yaml.YAMLError as exc:
        raise _fatal(name, 1, f"cannot parse YAML ({type(exc).__name__})", "fix the YAML syntax") from None
    if root is None or (isinstance(root, ScalarNode) and root.tag == _NULL_TAG and root.value == ""):
        raise _empty(name)  # nothing, or only `---` / `...` markers and directives
    if not isinstance(root, MappingNode) or root.tag != _MAP_TAG:
        kind = _kind(root)
        raise _fatal(
            name, root.start_mark.line + 1, f"top level is a {kind}, not a mapping",
            "the fleet file is a mapping with version, hosts and optional ssh, settings, groups",
        )
    builder = _Builder(name)
    try:
        data = builder.build(root, ())
    except _TooDeep as exc:
        raise _too_deep(name, exc.line) from None
    except RecursionError:
        raise _too_deep(name, 1) from None
    except _TooLarge:
        raise _fatal(name, 1, f"the document expands to more than {MAX_NODES} nodes", "remove alias loops") from None
    loaded = LoadedYaml(name, data, builder.lines, builder.problems, builder.number_forms)
    loaded.lines[()] = root.start_mark.line + 1
    return loaded


class _TooLarge(Exception):
    pass


class _TooDeep(Exception):
    def __init__(self, line: int) -> None:
        super().__init__(line)
        self.line = line


class _Loader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing mappings and lists nested deeper than :data:`MAX_DEPTH` while composing."""

    depth = 0

    def compose_node(self, parent: Node | None, index: Any) -> Node | None:
        self.depth += 1
        try:
            if self.depth > MAX_DEPTH:
                raise _TooDeep(self.peek_event().start_mark.line + 1)  # type: ignore[no-untyped-call]
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1


class _Builder:
    def __init__(self, name: str) -> None:
        self.name = name
        self.lines: dict[Path_, int] = {}
        self.problems: list[Problem] = []
        self.constructor = yaml.SafeLoader("")
        self.count = 0
        self.active: set[int] = set()
        self.number_forms: set[Path_] = set()
        self.reported: set[int] = set()

    def problem(self, path: Path_, line: int, problem: str, fix: str) -> None:
        self.problems.append(Problem(self.name, line, format_path(path), problem, fix))

    def build(self, node: Node, path: Path_) -> Any:
        self.count += 1
        if self.count > MAX_NODES:
            raise _TooLarge
        if len(path) >= MAX_DEPTH:  # deeper through aliases than the composer saw (the root's path is ())
            raise _TooDeep(node.start_mark.line + 1)
        if id(node) in self.active:
            self.problem(path, node.start_mark.line + 1, "recursive YAML alias", "remove the alias loop")
            return None
        if isinstance(node, ScalarNode):
            return self._scalar(node, path)
        self.active.add(id(node))
        try:
            if isinstance(node, SequenceNode):
                if node.tag != _SEQ_TAG:
                    self.problem(path, node.start_mark.line + 1, f"unsupported YAML tag {node.tag}", "remove the tag")
                    return None
                items = []
                for index, item in enumerate(node.value):
                    item_path = (*path, index)
                    self.lines[item_path] = item.start_mark.line + 1
                    items.append(self.build(item, item_path))
                return items
            assert isinstance(node, MappingNode)
            if node.tag != _MAP_TAG:
                self.problem(path, node.start_mark.line + 1, f"unsupported YAML tag {node.tag}", "remove the tag")
                return None
            return self._mapping(node, path)
        finally:
            self.active.discard(id(node))

    def _scalar(self, node: ScalarNode, path: Path_, *, key: bool = False) -> Any:
        """The value of ``node`` at ``path`` (with ``key``: a mapping key under ``path``)."""
        try:
            value = self.constructor.construct_object(node, deep=True)
        except yaml.YAMLError:
            self.problem(path, node.start_mark.line + 1, f"unsupported YAML tag {node.tag}", "remove the tag")
            return None
        if node.style is not None:  # quoted or block scalar: a string as written
            return value
        if isinstance(value, float):
            value = WrittenFloat(value, node.value)
        form = number_form(node.value, node.tag)
        if form is not None:
            self._number_form(node, (*path, value) if key else path, form)
        return value

    def _number_form(self, node: ScalarNode, path: Path_, form: str) -> None:
        """Report a number in a YAML 1.1 form; its value is not quoted (the field could be a credential)."""
        if id(node) in self.reported:  # a key is built twice; an alias can use the node again
            return
        self.reported.add(id(node))
        self.number_forms.add(path)
        self.problem(path, node.start_mark.line + 1, f"{_FORMS[form]}; a fleet file takes plain decimal numbers only",
                     "write the plain decimal number, or quote the value where a string is meant")

    def _mapping(self, node: MappingNode, path: Path_) -> dict[Any, Any]:
        first_line: dict[Hashable, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == _MERGE_TAG or not isinstance(key_node, ScalarNode):
                continue
            key = self._scalar(key_node, path, key=True)
            if not isinstance(key, Hashable):
                continue
            line = key_node.start_mark.line + 1
            if key in first_line:
                what = "host" if path == ("hosts",) else "key"
                self.problem(
                    (*path, key), line,
                    f"duplicate {what} {key!r} (first defined on line {first_line[key]}, again on line {line})",
                    "remove or rename one of them",
                )
            else:
                first_line[key] = line
        pairs = node.value
        if any(k.tag == _MERGE_TAG for k, _ in pairs):
            try:
                self.constructor.flatten_mapping(node)
            except yaml.YAMLError:
                self.problem(path, node.start_mark.line + 1, "invalid YAML merge key (<<)", "merge only mappings")
                return {}
            pairs = node.value
        result: dict[Any, Any] = {}
        for key_node, value_node in pairs:
            if not isinstance(key_node, ScalarNode):
                self.problem(
                    path, key_node.start_mark.line + 1,
                    f"a mapping key must be a plain value, not a {_kind(key_node)}", "use a plain name as the key",
                )
                continue
            key = self._scalar(key_node, path, key=True)
            if not isinstance(key, Hashable):
                continue
            line = key_node.start_mark.line + 1
            if key in first_line and first_line[key] != line:
                # a merged (<<) value that an explicit key overrides, or a duplicate reported above:
                # the first explicit definition wins
                continue
            key_path = (*path, key)
            self.lines[key_path] = line
            result[key] = self.build(value_node, key_path)
        return result


def _kind(node: Node) -> str:
    if isinstance(node, MappingNode):
        return "mapping"
    if isinstance(node, SequenceNode):
        return "list"
    return "plain value"


def _empty(name: str) -> FleetValidationError:
    return _fatal(name, 1, "the file is empty (nothing but blank lines, comments and document markers)",
                  "start from inventory/example.yml")


def _too_deep(name: str, line: int) -> FleetValidationError:
    return _fatal(name, line, f"the document nests more than {MAX_DEPTH} levels deep, gpuprov's limit (a fleet file "
                  "needs 10)", "flatten the structure, or close the brackets opened above this line")


def _fatal(name: str, line: int, problem: str, fix: str) -> FleetValidationError:
    return FleetValidationError([Problem(name, line, DOCUMENT, problem, fix)])
