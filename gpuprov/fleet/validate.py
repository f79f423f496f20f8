"""Validate a loaded fleet file part by part and build the :class:`~gpuprov.fleet.model.Fleet`.

Each part (top-level keys, ``ssh``, fleet settings, every group, every host) is validated on its own so
that one bad host does not hide the problems of the others; then every host whose layers are valid
gets its merged settings checked (:mod:`gpuprov.fleet.checks`). All problems are collected and raised
together as one :class:`~gpuprov.exceptions.FleetValidationError`, sorted by line.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError
from pydantic_core import PydanticCustomError

from gpuprov.exceptions import FleetValidationError
from gpuprov.fleet.addresses import address_key
from gpuprov.fleet.checks import check_host
from gpuprov.fleet.errors import describe, problems_from, suggest_fix
from gpuprov.fleet.hostcheck import HostCheck, LayoutFit
from gpuprov.fleet.loader import LoadedYaml, load_yaml
from gpuprov.fleet.merge import Layer, merge_layers, origin_of
from gpuprov.fleet.mig import unused_layout_problems
from gpuprov.fleet.model import Connection, Fleet, Host
from gpuprov.fleet.problem import Path_, Problem, format_path
from gpuprov.fleet.schema import TOP_LEVEL, Group, HostEntry, Settings, Ssh
from gpuprov.fleet.types import check_group_name, check_host_name
from gpuprov.matrix import Matrix, load_matrix

log = logging.getLogger(__name__)
M = TypeVar("M", bound=BaseModel)
_REQUIRED_AFTER_MERGE: tuple[tuple[Path_, str], ...] = (
    (("os",), "os: ubuntu2204"),
    (("gpus", "model"), "gpus: {model: H100-SXM5-80GB}"),
    (("gpus", "count"), "gpus: {count: 8}"),
)


def load_fleet(path: Path, *, check_files: bool = False) -> Fleet:
    """Load, validate and resolve the fleet file at ``path``.

    The files the fleet names on this controller (``ssh.key``, ``ssh.known_hosts`` while host-key checking is
    on, each host's ``key``) must be absolute or ``~/`` paths; with ``check_files`` they must also exist and be
    readable regular files (:func:`local_file_problem`); off by default, so a fleet file renders and validates
    on a machine that is not its controller (CI).

    Raises :class:`~gpuprov.exceptions.FleetValidationError` listing every problem found (exit 2).
    """
    loaded = load_yaml(path)
    return validate_loaded(loaded, path, check_files=check_files)


def validate_loaded(loaded: LoadedYaml, source: Path, *, check_files: bool = False) -> Fleet:
    """Validate an already loaded document; ``source`` is recorded in the Fleet; ``check_files`` as in
    :func:`load_fleet`."""
    validator = _Validator(loaded, load_matrix(), check_files=check_files)
    fleet = validator.run(source)
    # a value written in a non-decimal number form is reported once, by the loader
    written = {format_path(path) for path in loaded.number_forms}
    problems = [*loaded.problems, *(p for p in validator.problems if p.path not in written)]
    if problems:
        ordered: list[Problem] = sorted(problems, key=_order)
        raise FleetValidationError(list[object](ordered))
    assert fleet is not None
    log.debug("fleet %s: %d hosts, %d groups", source, len(fleet.hosts), len(fleet.groups))
    return fleet


def _order(problem: Problem) -> tuple[int, str, str]:
    return problem.line, problem.path, problem.problem


class _Validator:
    def __init__(self, loaded: LoadedYaml, matrix: Matrix, *, check_files: bool = False) -> None:
        self.loaded = loaded
        self.file = loaded.file
        self.matrix = matrix
        self.check_files = check_files
        self.problems: list[Problem] = []  # the loader's problems are added by validate_loaded
        self.mig_fits: list[LayoutFit] = []

    # -- helpers ------------------------------------------------------------------------------------
    def fail(self, path: Path_, problem: str, fix: str, line: int | None = None) -> None:
        line = self.loaded.line_of(path) if line is None else line
        self.problems.append(Problem(self.file, line, format_path(path), problem, fix))

    def locate(self, path: Path_) -> tuple[Path_, int]:
        return path, self.loaded.line_of(path)

    def model(self, cls: type[M], value: Any, prefix: Path_) -> M | None:
        try:
            return cls.model_validate({} if value is None else value)
        except ValidationError as exc:
            self.problems.extend(problems_from(exc, cls, prefix, self.file, self.locate))
            return None

    def layer(self, settings: Settings | None) -> dict[str, Any]:
        return {} if settings is None else settings.model_dump(mode="json", exclude_unset=True)

    def named(self, check: Callable[[object], str], key: object, path: Path_) -> bool:
        try:
            check(key)
        except PydanticCustomError as exc:
            ctx = exc.context or {}
            self.fail(path, str(ctx.get("problem", exc.message())), str(ctx.get("fix", "rename it")))
            return False
        return True

    def mapping(self, data: dict[Any, Any], key: str) -> dict[Any, Any] | None:
        value = data.get(key)
        if value is None:
            return {}
        if not isinstance(value, dict):
            self.fail((key,), f"expected a mapping of {key}, got {describe(value)}",
                      f"write one `name:` entry per {key[:-1]} under {key}:")
            return None
        return value

    # -- the run ------------------------------------------------------------------------------------
    def run(self, source: Path) -> Fleet | None:
        data: dict[Any, Any] = self.loaded.data
        for key in data:
            if key not in TOP_LEVEL:
                self.fail((key,), f"unknown key {key!r}", suggest_fix(key, list(TOP_LEVEL), "one of the known keys"))
        for key, required in TOP_LEVEL.items():
            if required and key not in data:
                self.fail((key,), f"required key {key!r} is missing", f"add `{key}:` at the top level",
                          line=self.loaded.lines.get((), 1))
        if "version" in data:
            self.version(data["version"])
        name = data.get("name")
        if name is not None and not isinstance(name, str):
            self.fail(("name",), f"expected a string, got {describe(name)}", "write the fleet name as a string")
        ssh = self.model(Ssh, data.get("ssh"), ("ssh",))
        fleet_settings = self.model(Settings, data.get("settings"), ("settings",))
        fleet_ok = fleet_settings is not None or data.get("settings") is None
        groups = self.groups(data)
        hosts = self.hosts(data, groups)
        self.local_files(ssh, hosts or {})
        if not fleet_ok or groups is None or hosts is None:
            return None
        ssh = ssh or Ssh()  # a bad ssh section is already reported; keep checking the hosts
        fleet = Fleet(
            source=source,
            version=1,
            name=name if isinstance(name, str) else None,
            defaults=Settings().model_dump(mode="json"),
            settings=self.layer(fleet_settings),
            groups={g: self.layer(group.settings) for g, group in groups.items() if group is not None},
        )
        bad_groups = {g for g, group in groups.items() if group is None}
        for host_name, entry in hosts.items():
            if entry is None or bad_groups & set(entry.groups) or not set(entry.groups) <= set(groups):
                continue
            host = self.host(fleet, host_name, entry, ssh)
            if host is not None:
                fleet.hosts[host_name] = host
        self.problems.extend(unused_layout_problems(self.mig_fits, self.file, self.loaded.line_of))
        return fleet

    def version(self, version: object) -> None:
        """``version`` must be the number 1: not ``"1"``, ``1.0`` or ``true`` (which Python compares equal to 1)."""
        if type(version) is int and version == 1:
            return
        if isinstance(version, str) and version.strip() in ("1", "1.0"):
            self.fail(("version",), f"expected the number 1, got the string {version!r}",
                      "write `version: 1` without quotes")
        elif isinstance(version, int | float) and not isinstance(version, bool):
            self.fail(("version",), f"unsupported fleet file version {version!r}",
                      "this gpuprov reads `version: 1` (a whole number, no quotes)")
        else:
            self.fail(("version",), f"expected the fleet file version as a number, got {describe(version)}",
                      "write `version: 1`")

    def local_files(self, ssh: Ssh | None, hosts: dict[str, HostEntry | None]) -> None:
        """Report each controller file the fleet names that ssh could not use: always a path ansible-playbook
        cannot resolve (relative: it runs in gpuprov's run directory) or ssh cannot pass on (known_hosts with
        whitespace); with ``check_files`` also a file missing on this machine (see :func:`load_fleet`)."""
        named: list[tuple[Path_, str, str]] = []
        if ssh is not None and ssh.key is not None:
            named.append((("ssh", "key"), ssh.key, "SSH private key"))
        if ssh is not None and ssh.known_hosts is not None and ssh.host_key_checking:
            named.append((("ssh", "known_hosts"), ssh.known_hosts, "known_hosts file"))
        for name, entry in hosts.items():
            if entry is not None and entry.key is not None:
                named.append((("hosts", name, "key"), entry.key, "SSH private key"))
        for path, value, what in named:
            if not value.startswith("~") and not Path(value).is_absolute():
                self.fail(path, f"{what} {value} is a relative path, and ansible-playbook runs in gpuprov's run "
                          "directory, not here", "write an absolute path or one under ~/")
                continue
            if what == "known_hosts file" and any(c.isspace() for c in value):
                self.fail(path, f"{what} {value!r} has whitespace, which ssh's UserKnownHostsFile reads as a list of "
                          "files", "use a path without spaces")
                continue
            problem = local_file_problem(value) if self.check_files else None
            if problem is not None:
                fix = ("correct the path to the private key the hosts authorize" if what.startswith("SSH")
                       else "correct the path, or record the hosts' keys in it (ssh-keyscan, then verify them)")
                self.fail(path, f"{what} {value} {problem}", f"{fix}; paths are read on this controller")

    def groups(self, data: dict[Any, Any]) -> dict[str, Group | None] | None:
        raw = self.mapping(data, "groups")
        if raw is None:
            return None
        out: dict[str, Group | None] = {}
        for name, value in raw.items():
            if self.named(check_group_name, name, ("groups", name)):
                out[name] = self.model(Group, value, ("groups", name))
        return out

    def hosts(self, data: dict[Any, Any], groups: dict[str, Group | None] | None) -> dict[str, HostEntry | None] | None:
        raw = self.mapping(data, "hosts")
        if raw is None:
            return None
        if not raw and "hosts" in data:
            self.fail(("hosts",), "the fleet has no hosts", "add at least one host under hosts:")
        out: dict[str, HostEntry | None] = {}
        seen: dict[tuple[str, int], str] = {}
        default_port = data.get("ssh", {}).get("port", 22) if isinstance(data.get("ssh"), dict) else 22
        for name, value in raw.items():
            if not self.named(check_host_name, name, ("hosts", name)):
                continue
            if groups is not None and name in groups:
                self.fail(("hosts", name), f"host {name!r} has the name of a group (groups.{name}, line "
                          f"{self.loaded.line_of(('groups', name))}): Ansible warns, and --limit {name} would mean "
                          "both", "rename the host or the group")
            entry = out[name] = self.model(HostEntry, value, ("hosts", name))
            if entry is None:
                continue
            for index, group in enumerate(entry.groups):
                if groups is not None and group not in groups:
                    self.fail(("hosts", name, "groups", index), f"unknown group {group!r}",
                              suggest_fix(group, list(groups), "a group defined under groups:"))
                if group in entry.groups[:index]:
                    self.fail(("hosts", name, "groups", index), f"group {group!r} is listed twice", "list it once")
            port = entry.port if entry.port is not None else default_port
            key = (address_key(entry.address), port if isinstance(port, int) else 22)
            if key in seen:
                first = seen[key]
                shown = f"[{entry.address}]" if ":" in entry.address else entry.address
                same = f" (the same address as {key[0]})" if key[0] != entry.address else ""
                self.fail(("hosts", name, "address"),
                          f"{shown}:{key[1]}{same} is also used by host {first!r} (line "
                          f"{self.loaded.line_of(('hosts', first))})", "give each host its own address or port")
            else:
                seen[key] = name
        return out

    def host(self, fleet: Fleet, name: str, entry: HostEntry, ssh: Ssh) -> Host | None:
        host_line = self.loaded.line_of(("hosts", name))
        own = self.layer(entry.settings)
        layers: list[Layer] = [(("settings",), fleet.settings)]
        layers += [(("groups", g, "settings"), fleet.groups[g]) for g in entry.groups]
        layers.append((("hosts", name, "settings"), own))
        merged, origins = merge_layers(layers)

        def locate(path: Path_) -> tuple[Path_, int]:
            origin = origin_of(origins, path[3:])
            return (origin, self.loaded.line_of(origin)) if origin else (path, host_line)

        try:
            effective = Settings.model_validate(merged)
        except ValidationError as exc:
            self.problems.extend(problems_from(exc, Settings, ("hosts", name, "settings"), self.file, locate))
            return None
        settings = effective.model_dump(mode="json")
        missing = False
        for path, example in _REQUIRED_AFTER_MERGE:
            section = settings
            for key in path:
                section = section[key] if isinstance(section, dict) else None
            if section is None:
                missing = True
                self.fail(("hosts", name, "settings", *path),
                          f"host {name} has no {format_path(path)} in the fleet, its groups or its own settings",
                          f"set `{example}` in settings, a group of this host, or the host", line=host_line)
        if missing:
            return None
        ctx = HostCheck(name, self.file, host_line, origins, self.loaded.line_of)
        check_host(ctx, settings, self.matrix)
        self.problems.extend(ctx.problems)
        self.mig_fits.extend(ctx.mig_fits)
        return Host(
            name=name,
            line=host_line,
            connection=_connection(entry, ssh),
            groups=tuple(entry.groups),
            layer=own,
            settings=settings,
            resolutions=tuple(ctx.resolutions),
            notes=tuple(ctx.notes),
            description=entry.description,
            warnings=tuple(ctx.warnings),
            canary=entry.canary,
        )


def local_file_problem(value: str) -> str | None:
    """Why the controller file ``value`` (``~`` expanded, relative to the working directory) is unusable, as
    the end of a sentence ("does not exist"), or None when it is a readable regular file."""
    try:
        path = Path(value).expanduser()
        if not path.exists():
            return "does not exist" if str(path) == value else f"does not exist ({path})"
        if not path.is_file():
            return "is not a regular file"
    except ValueError:  # a NUL byte in the path
        return "is not a usable path"
    except (OSError, RuntimeError) as exc:  # a parent without search permission; ~user of no such user
        return f"cannot be read: {getattr(exc, 'strerror', None) or exc}"
    if not os.access(path, os.R_OK):
        return "is not readable by this user"
    return None


def _connection(entry: HostEntry, ssh: Ssh) -> Connection:
    secret = entry.become_password or ssh.become_password
    return Connection(
        address=entry.address,
        port=entry.port if entry.port is not None else ssh.port,
        user=entry.user if entry.user is not None else ssh.user,
        key=entry.key if entry.key is not None else ssh.key,
        become=entry.become if entry.become is not None else ssh.become,
        become_password_env=secret["env"] if secret else None,
        known_hosts=ssh.known_hosts,
        host_key_checking=ssh.host_key_checking,
    )
