"""Constrained value types of the fleet file, each failing with a problem text and a fix.

Validators raise :class:`pydantic_core.PydanticCustomError` of type ``gpuprov`` whose context carries
``problem`` and ``fix``; :mod:`gpuprov.fleet.errors` prints them as they are.
"""

from __future__ import annotations

import re
from functools import cache
from typing import Annotated, Any
from urllib.parse import urlsplit

from pydantic import PlainValidator
from pydantic_core import PydanticCustomError

from gpuprov.fleet.errors import suggest_fix
from gpuprov.redact import secret_query_names

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_HOST_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
_GROUP_NAME = re.compile(r"^[a-z][a-z0-9_]*$")
_SHA256 = re.compile(r"^[0-9a-fA-F]{64}$")
_FINGERPRINT = re.compile(r"^[0-9A-F]{40}$")
_DRIVER_VERSION = re.compile(r"^\d{3}\.\d{1,3}(\.\d{1,3})?$")
#: group names Ansible or gpuprov reserve
RESERVED_GROUPS = frozenset({"all", "ungrouped", "gpuprov", "gpuprov_canary"})


def fail(problem: str, fix: str) -> PydanticCustomError:
    """A validation error with gpuprov's problem/fix pair (raise it from a validator)."""
    return PydanticCustomError("gpuprov", "{problem}", {"problem": problem, "fix": fix})


def _type_name(value: object) -> str:
    if value is None:
        return "null"
    for kind, name in ((bool, "boolean"), (dict, "mapping"), (list, "list"), (int, "number"), (float, "number"),
                       (str, "string")):
        if isinstance(value, kind):
            return name
    return type(value).__name__


def require_str(value: object, what: str, example: str) -> str:
    """``value`` if it is a string, else a ``fail`` error saying how to write it (numbers: :func:`quote_fix`)."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool) or value is None:
        raise fail(f"expected {what}, got {_type_name(value)} {value!r}", f"write it as a string, e.g. {example}")
    if isinstance(value, int | float):
        raise fail(f"expected {what} as a quoted string, got the number {value!r}", quote_fix(value))
    raise fail(f"expected {what}, got a {_type_name(value)}", f"write it as a string, e.g. {example}")


def quote_fix(value: int | float) -> str:
    """How to quote a number where a string is meant: ``quote it: "12.4"``, or for a float that YAML read as
    another number than written (the loader's :class:`~gpuprov.fleet.loader.WrittenFloat`: ``9.10`` is 9.1)
    ``quote it as written: "9.10"`` and why."""
    written, read = str(value), repr(float(value)) if isinstance(value, float) else str(value)
    if written != read:
        return f'quote it as written: "{written}" (unquoted, YAML reads {written} as the number {read})'
    return f'quote it: "{written}"'


#: a value taken from the controller's environment at run time, ``{"env": NAME}``; never stored
EnvRef = dict[str, str]


def is_env_ref(value: object) -> bool:
    """True for an ``{env: NAME}`` reference (as validated by the schema)."""
    return isinstance(value, dict) and set(value) == {"env"} and isinstance(value["env"], str)


def _env_ref(value: object) -> EnvRef:
    if isinstance(value, dict) and set(value) == {"env"}:
        name = value["env"]
        if isinstance(name, str) and _ENV_NAME.match(name):
            return {"env": name}
        # not quoted: what stands here is sometimes the secret itself instead of the variable's name
        raise fail("not an environment variable name (the value is not shown)",
                   "give the variable's name in letters, digits and _, e.g. {env: PROXY_URL}, never its value")
    raise fail(
        f"expected an environment reference {{env: NAME}}, got {_type_name(value)}",
        "write it as {env: NAME} and export NAME before running gpuprov",
    )


#: ``$NAME``, ``${NAME}``, ``%NAME%``: a shell's or Windows' way to name a variable, which gpuprov does not expand
_ENV_LIKE = re.compile(r"^(\$\{?[A-Za-z_][A-Za-z0-9_]*\}?|%[A-Za-z_][A-Za-z0-9_]*%)$")
_ENV_FIX = "write {env: NAME} (the variable's name, no $) and export NAME before running gpuprov"


def _secret(value: object) -> EnvRef:
    if isinstance(value, str):
        if _ENV_LIKE.match(value):
            raise fail("gpuprov does not expand $NAME or %NAME% in the fleet file", _ENV_FIX)
        raise fail("a literal credential is not allowed in the fleet file", _ENV_FIX)
    return _env_ref(value)


def check_url(value: object) -> str:
    """An http(s) URL with a host and no embedded credentials. A rejected URL is not quoted: it may hold
    ``user:password@``."""
    text = require_str(value, "a URL", '"http://proxy.example.com:3128"')
    if _ENV_LIKE.match(text):
        raise fail("gpuprov does not expand $NAME or %NAME% in the fleet file", _ENV_FIX)
    try:
        parts = urlsplit(text)
        parts.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError:
        raise fail("not a valid URL (the value is not shown)", "write scheme://host[:port][/path]") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise fail("not an http(s) URL (the value is not shown)", "write http://host[:port][/path] or https://...")
    if parts.username is not None or parts.password is not None:
        raise fail(
            "the URL contains credentials (user:password@)",
            "put the whole URL in an environment variable and write {env: NAME}",
        )
    names = secret_query_names(text)
    if names:  # the names only: the values are the secret
        raise fail(
            f"the URL's query carries a credential ({', '.join(sorted(set(names)))}; the value is not shown)",
            "put the whole URL in an environment variable and write {env: NAME}",
        )
    return text


def _url_or_env(value: object) -> str | EnvRef:
    if isinstance(value, dict):
        return _env_ref(value)
    return check_url(value)


def check_download_url(value: object) -> str:
    """A URL a host downloads a file from: http(s) as :func:`check_url`, or ``file:///path`` (a file already
    on the host, e.g. from a site share). A rejected URL is not quoted."""
    text = require_str(value, "a URL", '"https://mirror.example.com/NVIDIA-Linux-x86_64-580.105.08.run"')
    scheme = text.split(":", 1)[0].lower() if ":" in text else ""
    if scheme == "file":
        parts = urlsplit(text)
        if parts.netloc not in ("", "localhost") or not parts.path.startswith("/"):
            raise fail("not a file URL with an absolute path (the value is not shown)",
                       "write file:///absolute/path/on/the/host")
        return text
    if scheme not in ("http", "https") and not _ENV_LIKE.match(text):
        raise fail("not an http(s) or file URL (the value is not shown)",
                   "write https://host[:port]/path, http://... or file:///absolute/path")
    return check_url(text)


def _download_url_or_env(value: object) -> str | EnvRef:
    if isinstance(value, dict):
        return _env_ref(value)
    return check_download_url(value)


def _check_port(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, str) and value.isascii() and value.isdigit():
            raise fail(f"expected a port number, got the string {value!r}", f"write it without quotes: {int(value)}")
        raise fail(f"expected a port number, got {_type_name(value)} {value!r}", "write a number 1-65535, e.g. 22")
    if not 1 <= value <= 65535:
        raise fail(f"port {value} is out of range", "use a port number from 1 to 65535")
    return value


#: Host names Ansible (or gpuprov's plays, which target the group ``gpuprov``) give another meaning:
#: a host called ``gpuprov`` would make every play run on that host alone.
RESERVED_HOSTS = RESERVED_GROUPS | {"localhost"}


def check_host_name(value: object) -> str:
    text = require_str(value, "a host name", "gpu01")
    if not _HOST_NAME.match(text):
        raise fail(f"{text!r} is not a valid inventory host name", "use letters, digits, _, . and -")
    if text in RESERVED_HOSTS:
        raise fail(f"host name {text!r} is reserved (Ansible patterns and gpuprov's plays use it)",
                   "choose another name, e.g. gpu01")
    return text


def check_group_name(value: object) -> str:
    text = require_str(value, "a group name", "a100")
    if not _GROUP_NAME.match(text):
        raise fail(f"{text!r} is not a valid group name",
                   "use lower-case letters, digits and _, starting with a letter")
    if text in RESERVED_GROUPS:
        raise fail(f"group name {text!r} is reserved", "choose another name")
    return text


def _version(pattern: str, what: str, example: str) -> Any:
    regex = re.compile(pattern)

    def check(value: object) -> str:
        text = require_str(value, what, f'"{example}"')
        if not regex.match(text):
            raise fail(f"{text!r} is not a valid {what}", f'write it like "{example}"')
        return text

    return check


def _check_branch(value: object) -> str:
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    if isinstance(value, float):  # 580.0: a branch is the driver version's first number, not a decimal
        whole = value.is_integer() and 100 <= value < 1000
        raise fail(f"expected a driver branch as a quoted string, got the number {value!r}",
                   f'write the branch as its three digits: "{int(value)}"' if whole
                   else 'write three digits like "580", or auto')
    text = require_str(value, "a driver branch", '"580"')
    if text != "auto" and not re.fullmatch(r"\d{3}", text):
        raise fail(f"{text!r} is not a driver branch", 'write three digits like "580", or auto')
    return text


def _check_driver_version(value: object) -> str:
    text = require_str(value, "a driver version", '"580.95.05"')
    if not _DRIVER_VERSION.match(text):
        raise fail(f"{text!r} is not a driver version", 'write it like "580.95.05"')
    return text


def _check_sha256(value: object) -> str:
    text = require_str(value, "a SHA-256 checksum", "64 hex digits")
    if not _SHA256.match(text):
        raise fail("not a SHA-256 checksum", "give the 64 hex digits from `sha256sum FILE` of the file it pins")
    return text.lower()


def _check_fingerprint(value: object) -> str:
    text = require_str(value, "a key fingerprint", "40 hex digits")
    normal = text.replace(" ", "").upper()
    if not _FINGERPRINT.match(normal):
        raise fail("not an OpenPGP key fingerprint", "give the 40 hex digits from `gpg --show-keys <key>`")
    return normal


def _all_or_indexes(value: object) -> str | list[int]:
    if value == "all":
        return "all"
    if isinstance(value, list) and all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value):
        return list(value)
    raise fail(f"expected all or a list of GPU indexes, got {value!r}", "write all or a list such as [0, 1]")


def _worker_gpus(value: object) -> str | list[int]:
    if value == "cpu":
        return "cpu"
    try:
        return _all_or_indexes(value)
    except PydanticCustomError:
        raise fail(f"expected all, cpu or a list of GPU indexes, got {value!r}",
                   "write all, cpu (one CPU worker, no GPU) or a list such as [0, 1]") from None


def _auto_or_positive(value: object) -> str | int:
    if value == "auto":
        return "auto"
    if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
        return value
    raise fail(f"expected auto or a positive number, got {value!r}", "write auto or a number such as 16")


def _number_of(choices: tuple[int, ...], word: str | None = None) -> Any:
    """A validator taking one of ``choices`` (a number, never a boolean or a quoted number) or ``word``."""
    allowed = ", ".join([*([word] if word else []), *map(str, choices)])

    def check(value: object) -> str | int:
        if word is not None and value == word:
            return word
        if isinstance(value, int) and not isinstance(value, bool) and value in choices:
            return value
        if isinstance(value, str) and value.strip().isdigit() and int(value) in choices:
            raise fail(f"expected a number, got the string {value!r}", f"write it without quotes: {int(value)}")
        shown = (f"a {_type_name(value)}" if isinstance(value, bool | dict | list) else "null" if value is None
                 else repr(value))
        raise fail(f"{shown} is not one of {allowed}", f"write one of {allowed}")

    return check


def _check_name(value: object) -> str:
    text = require_str(value, "a name", "default")
    if not text.strip():
        raise fail("the value is empty", "give a non-empty string")
    return text


def _check_path(value: object) -> str:
    text = require_str(value, "a file path", "~/.ssh/id_ed25519")
    if not text.strip() or "\n" in text:
        raise fail("not a usable file path", "give a path such as ~/.ssh/id_ed25519")
    return text


def _check_host_path(value: object) -> str:
    text = _check_path(value)
    if not text.startswith("/"):
        raise fail("a path on the managed host must be absolute (the roles do not expand ~ or a working folder)",
                   "give the absolute path on the host, e.g. /var/lib/shim-signed/mok/MOK.priv")  # fmt: skip
    return text


@cache
def finding_ids() -> tuple[str, ...]:
    """The bios_check finding ids (``FINDING_IDS`` of the collection's ``plugins/module_utils/findings.py``,
    the rules the role runs; documented in docs/bios-check.md)."""
    from ansible_collections.gpuprov.gpu.plugins.module_utils.findings import FINDING_IDS

    ids: tuple[str, ...] = tuple(FINDING_IDS)
    return ids


def _check_finding_id(value: object) -> str:
    text = require_str(value, "a bios_check finding id", "acs_redirect")
    known = finding_ids()
    if text not in known:
        raise fail(f"unknown bios_check finding {text!r}",
                   suggest_fix(text, known, "a finding id (docs/bios-check.md)"))
    return text


def _check_user(value: object) -> str:
    text = require_str(value, "a user name", "admin")
    if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.-]*\$?", text):
        return text
    if ":" in text or "@" in text:  # user:password or user@host: not quoted
        raise fail("a user name with `:` or `@` (user:password or user@host?); the value is not shown",
                   "write only the login name; the host goes in address, and a password never in the fleet file")
    raise fail("not a valid user name (the value is not shown)", "use letters, digits, _, . and -")


Url = Annotated[str, PlainValidator(check_url)]
UrlOrEnv = Annotated[str | EnvRef, PlainValidator(_url_or_env)]
#: http(s) or file URL, or {env: NAME} (a download the host fetches itself, as driver.runfile_url)
DownloadUrlOrEnv = Annotated[str | EnvRef, PlainValidator(_download_url_or_env)]
Secret = Annotated[EnvRef, PlainValidator(_secret)]
Port = Annotated[int, PlainValidator(_check_port)]
HostName = Annotated[str, PlainValidator(check_host_name)]
GroupName = Annotated[str, PlainValidator(check_group_name)]
Branch = Annotated[str, PlainValidator(_check_branch)]
DriverVersion = Annotated[str, PlainValidator(_check_driver_version)]
CudaVersion = Annotated[str, PlainValidator(_version(r"^\d{2}\.\d{1,2}(\.\d{1,3})?$", "CUDA version", "12.4"))]
LibVersion = Annotated[str, PlainValidator(_version(r"^\d+\.\d+\.\d+(\.\d+)?$", "library version", "9.1.0"))]
DcgmExporterVersion = Annotated[str, PlainValidator(_version(
    r"^\d+(\.\d+)*-\d[\w.+~-]*$", "dcgm-exporter version (<dcgm version>-<exporter version>)", "3.3.5-3.4.1"))]
"""dcgm-exporter's release name: the DCGM version it is built for, ``-``, its own version (the monitoring role's
own check, roles/monitoring/tasks/assert.yml)."""
Sha256 = Annotated[str, PlainValidator(_check_sha256)]
Fingerprint = Annotated[str, PlainValidator(_check_fingerprint)]
Name = Annotated[str, PlainValidator(_check_name)]
FilePath = Annotated[str, PlainValidator(_check_path)]
"""A file path as given (SSH key and known_hosts on the controller, resolved there; verify's Python, a path or
a command on the host's PATH)."""
HostPath = Annotated[str, PlainValidator(_check_host_path)]
"""A file on the managed host (the MOK key pair): absolute."""
User = Annotated[str, PlainValidator(_check_user)]
FindingId = Annotated[str, PlainValidator(_check_finding_id)]
AllOrIndexes = Annotated[str | list[int], PlainValidator(_all_or_indexes)]
WorkerGpus = Annotated[str | list[int], PlainValidator(_worker_gpus)]
AutoOrPositive = Annotated[str | int, PlainValidator(_auto_or_positive)]
#: PCIe lanes of a slot, and a PCIe generation or auto
PcieWidth = Annotated[int, PlainValidator(_number_of((1, 2, 4, 8, 16)))]
PcieGen = Annotated[str | int, PlainValidator(_number_of((1, 2, 3, 4, 5, 6), "auto"))]
