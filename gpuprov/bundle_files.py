"""NVIDIA's files in the offline bundle: the CUDA runfile (``cuda.method: runfile``) and the cuDNN archive
(``cudnn.method: archive``), for sites that install from NVIDIA's files rather than packages.

:func:`plan_files` lists, per file, the URL the fleet names, the sha256 it pins and the hosts that use it (the
manifest's ``files``); :func:`download_files` fetches each into ``DIR/files/<name>`` and refuses one whose sha256
is not the pinned one; :func:`files_snippet` prints the fleet-file settings that point the hosts at the bundle's
copies. An ``{env: NAME}`` URL is read from the environment, and ``user:password@`` in it is sent as HTTP basic
auth and recorded as ``user:***@`` (:func:`gpuprov.mirrorfetch.register_credentials`), as for the repository.
"""

from __future__ import annotations

import hashlib
import logging
import os
from pathlib import Path
from typing import Any

from gpuprov.exceptions import ConfigError, GpuprovError
from gpuprov.fleet import Fleet
from gpuprov.fleet.nvidia_files import file_name
from gpuprov.mirrorfetch import fetch, register_credentials

log = logging.getLogger(__name__)

#: (section, method, URL key, sha256 key) of each setting that installs from one of NVIDIA's files.
FILE_SETTINGS = (("cuda", "runfile", "runfile_url", "runfile_sha256"),
                 ("cudnn", "archive", "archive_url", "archive_sha256"))


def _url(value: Any, setting: str) -> str:
    if isinstance(value, dict):
        text = os.environ.get(str(value.get("env")))
        if not text:
            raise ConfigError(f"{setting} names environment variable {value.get('env')}, which is unset - export it")
        return text
    return str(value)


def plan_files(fleet: Fleet) -> list[dict[str, Any]]:
    """The manifest's ``files``: ``[{name, url, sha256, setting, hosts}]`` for every runfile and archive the
    fleet's hosts install from, one entry per file (``url`` with any password as ``***``).

    Raises:
        ConfigError: an ``{env: NAME}`` URL whose variable is unset; a URL naming no file; two files of one name
            with different sha256.
    """
    files: dict[str, dict[str, Any]] = {}
    for host in fleet.hosts.values():
        for section, method, url_key, sha_key in FILE_SETTINGS:
            values = host.settings.get(section) or {}
            if values.get("method") != method or not values.get("version"):
                continue
            setting = f"{section}.{url_key}"
            url = register_credentials(_url(values[url_key], setting))
            name = file_name(url)
            if not name:
                raise ConfigError(f"{host.name}: {setting} {url} names no file - give the URL of the file itself")
            entry = files.setdefault(name, {"name": name, "url": url, "sha256": values[sha_key],
                                            "setting": setting, "hosts": []})
            if entry["sha256"] != values[sha_key]:
                raise ConfigError(f"{host.name}: {setting} {name} is pinned to sha256 {values[sha_key]}, another host "
                                  f"to {entry['sha256']} - one file, one {section}.{sha_key}")
            entry["hosts"].append(host.name)
    return [files[name] for name in sorted(files)]


def download_files(files: list[dict[str, Any]], out_dir: Path, getter: Any = fetch) -> None:
    """Fetch each of ``files`` (:func:`plan_files`) into ``out_dir/files/<name>``, checking its sha256, and record
    its ``size`` (bytes). A file already there with the right sha256 is kept.

    Raises:
        GpuprovError: a download whose sha256 is not the pinned one (exit 2); it is not kept.
    """
    target = out_dir / "files"
    target.mkdir(parents=True, exist_ok=True)
    for entry in files:
        path = target / entry["name"]
        if path.exists() and hashlib.sha256(path.read_bytes()).hexdigest() == entry["sha256"]:
            entry["size"] = path.stat().st_size
            continue
        data = getter(entry["url"])
        digest = hashlib.sha256(data).hexdigest()
        if digest != entry["sha256"]:
            path.unlink(missing_ok=True)
            raise GpuprovError(f"{entry['url']}: sha256 {digest} ({len(data)} bytes) is not the "
                               f"{entry['setting'].split('.')[0]} sha256 the fleet pins ({entry['sha256']}); refused")
        path.write_bytes(data)
        entry["size"] = len(data)
        log.info("bundle files: %s (%d bytes)", entry["name"], len(data))


def files_snippet(files: list[dict[str, Any]], base_url: str) -> str:
    """The fleet-file settings that point each file's hosts at ``<base_url>files/<name>`` (sha256 unchanged)."""
    out = []
    for entry in files:
        section, key = entry["setting"].split(".")
        url = f"{base_url.rstrip('/')}/files/{entry['name']}"
        out.append(f"# {', '.join(entry['hosts'])}:\n{section}:\n  {key}: {url}\n")
    return "".join(out)
