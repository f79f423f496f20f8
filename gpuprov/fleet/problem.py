"""One validation problem in a fleet file, printed as ``FILE:LINE: path.to.field: problem - fix``."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from gpuprov.redact import redact_credentials

#: a field path: mapping keys (usually ``str``, any YAML scalar) and list indexes (``int``)
Path_ = tuple[Any, ...]

#: the path used for problems that concern the whole document (syntax errors, unreadable file)
DOCUMENT = "(document)"


def format_path(path: Sequence[object]) -> str:
    """Dotted field path: ``("hosts", "gpu01", "groups", 1)`` -> ``hosts.gpu01.groups[1]``."""
    out = ""
    for part in path:
        if isinstance(part, int) and not isinstance(part, bool):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out or DOCUMENT


@dataclass(frozen=True, order=True)
class Problem:
    """A problem found in a fleet file.

    ``line`` is 1-based (0 when the file could not be read at all); ``path`` is the dotted field path
    (:func:`format_path`) or ``(document)``; ``problem`` says what is wrong and ``fix`` what to do.
    """

    file: str
    line: int
    path: str
    problem: str
    fix: str

    def __str__(self) -> str:
        text = f"{self.file}:{self.line}: {self.path}: {self.problem} - {self.fix}"
        return redact_credentials(text)
