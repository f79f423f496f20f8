"""One host's checks in progress: where its problems and warnings are reported, and what the checks found
(resolved settings, notes, how its MIG layouts fit its GPUs). Shared by the host checks (:mod:`gpuprov.fleet.checks`,
:mod:`gpuprov.fleet.mig`) and the validator that runs them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gpuprov.fleet.merge import origin_of
from gpuprov.fleet.model import Resolution
from gpuprov.fleet.problem import Path_, Problem, format_path

#: (settings path, problem, fix)
Misfit = tuple[Path_, str, str]


@dataclass(frozen=True)
class LayoutFit:
    """How a layout that a host has in its settings fits the host's GPU model (``misfits`` empty: it fits);
    ``used``: it is the host's ``mig.layout``. ``origin`` is the file path of the layer that set the layout
    (``("settings", "mig", "layouts", "x")``)."""

    origin: Path_
    model: str
    misfits: tuple[Misfit, ...]
    used: bool


@dataclass
class HostCheck:
    """Context of one host's checks: where to report and what was found."""

    name: str
    file: str
    host_line: int
    origins: dict[Path_, Path_]
    line_of: Callable[[Path_], int]
    problems: list[Problem] = field(default_factory=list)
    warnings: list[Problem] = field(default_factory=list)
    resolutions: list[Resolution] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    mig_fits: list[LayoutFit] = field(default_factory=list)

    def _where(self, sub: Path_) -> tuple[Path_, int]:
        origin = origin_of(self.origins, sub)
        if origin is None:
            return ("hosts", self.name, "settings", *sub), self.host_line
        return origin, self.line_of(origin)

    def fail(self, sub: Path_, problem: str, fix: str, *, anchor: Path_ | None = None) -> None:
        """Report ``problem`` for settings path ``sub``; with ``anchor``, on the line of that field's layer."""
        self.problems.append(self._problem(sub, problem, fix, anchor))

    def warn(self, sub: Path_, problem: str, fix: str) -> None:
        """Report ``problem`` for settings path ``sub`` as a warning: the file stays valid (an error with
        ``gpuprov validate --strict``)."""
        self.warnings.append(self._problem(sub, problem, fix, None))

    def _problem(self, sub: Path_, problem: str, fix: str, anchor: Path_ | None) -> Problem:
        if anchor is not None and origin_of(self.origins, anchor) is not None:
            origin = origin_of(self.origins, anchor)
            assert origin is not None
            path: Path_ = (*origin[: len(origin) - len(anchor)], *sub)
            line = self.line_of(origin)
        else:
            path, line = self._where(sub)
        if path[:2] != ("hosts", self.name):
            problem = f"host {self.name}: {problem}"
        return Problem(self.file, line, format_path(path), problem, fix)

    def resolve(self, settings: dict[str, Any], sub: Path_, value: Any, reason: str) -> None:
        """Set settings path ``sub`` to ``value`` and record why."""
        target = settings
        for key in sub[:-1]:
            target = target[key]
        target[sub[-1]] = value
        self.resolutions.append(Resolution(format_path(sub), value, reason))
