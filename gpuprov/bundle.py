"""The offline bundle: the exact NVIDIA package set a fleet needs, resolved, downloaded and re-served.

``build_bundle(fleet, out_dir)`` works per OS of the fleet's hosts:

1. :func:`stack_packages` turns a host's effective settings into the top-level packages the roles install
   (NVIDIA's names and version rules, mirrored from the roles' ``vars/main.yml``; see its docstring).
2. :func:`gpuprov.mirrorfetch.fetch_index` reads ``Packages.gz`` (or ``Packages``) of the CUDA repository the
   roles would use: ``mirrors.cuda_repo_url`` or NVIDIA's ``https://developer.download.nvidia.com/compute/cuda/repos/<os>/x86_64/``.
   ``user:password@`` in that URL is sent as HTTP basic auth, and logged and recorded as ``user:***@``.
3. :func:`resolve` picks each wanted version and follows ``Pre-Depends``/``Depends`` (not ``Recommends``: the
   roles install with ``install_recommends: false``) inside that repository. A relation the repository cannot
   name at all (``dkms``, ``libc6``, ``gcc``) is left to the distribution mirror an air-gapped site keeps anyway.
4. ``DIR/manifest.json`` records every package (name, version, filename, url, sha256, size bytes), what the
   distribution must provide, what is not bundled, and every wanted package the repository lacks.
5. With ``download``: each .deb is fetched, its sha256 checked against the index, and ``DIR/<os>/`` becomes a
   flat apt repository (Packages, Packages.gz, Release, InRelease, Release.gpg) signed with a bundle key kept
   in ``DIR/keys/`` (private GNUPGHOME, reused on rebuilds) whose public half is ``DIR/<os>/<last 8 hex>.pub``,
   the name the roles fetch by default. Served over http(s) and named in ``mirrors:``, it needs no role change.

Version comparison and relation parsing are python-debian's (:mod:`debian.deb822`, ``debian_support.Version``).
"""

from __future__ import annotations

import gzip
import hashlib
import json
import logging
import os
import re
import shutil
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ansible_collections.gpuprov.gpu.plugins.plugin_utils.driver_packages import driver_package_set, driver_packages
from debian.deb822 import Packages
from debian.debian_support import Version, version_compare

from gpuprov.aptsign import key_fingerprint, release_text, sign
from gpuprov.bundle_files import plan_files
from gpuprov.exceptions import ConfigError, GpuprovError
from gpuprov.fleet import Fleet
from gpuprov.fleet.checks import default_dcgm
from gpuprov.mirrorfetch import fetch, fetch_index, register_credentials
from gpuprov.resources import role_defaults

log = logging.getLogger(__name__)

_OPS = {"<<": lambda c: c < 0, "<=": lambda c: c <= 0, "=": lambda c: c == 0, ">=": lambda c: c >= 0,
        ">>": lambda c: c > 0}


@dataclass(frozen=True)
class Want:
    """A top-level package a role installs: ``name``; ``pattern``, a regex the whole Debian version must match
    ('' any); ``setting``/``value``, the fleet setting asking for it; ``cuda`` ("12.4"): pick the newest build
    of that CUDA major whose minor is not above it (the ``+cudaX.Y`` suffix, as the cudnn/nccl roles do);
    ``same_as``: install at exactly the version chosen for that package (the driver set, whose packages must never
    differ in version)."""

    name: str
    pattern: str
    setting: str
    value: str
    cuda: str | None = None
    same_as: str | None = None


def stack_packages(settings: dict[str, Any]) -> tuple[list[Want], list[dict[str, str]]]:
    """The packages the roles install from the CUDA repository for one host's effective settings, and those
    they install from elsewhere (``[{package, version, setting, reason}]``).

    The driver set is named by the collection's rule (``plugin_utils/driver_packages.py``, as the nvidia_driver
    role names it), Fabric Manager with ``gpus.nvswitch``, all at one version (``driver.version`` exact when it
    has a revision, else ``<v>-*``; for the unbranched names of 590 and later a version of the branch, ``595.*``,
    with NVIDIA's pinning package ``nvidia-driver-pinning-<branch>`` first). The other roles' naming, compared
    with their Jinja by tests/unit/test_bundle.py: cuda
    ``cuda-toolkit-X-Y`` at ``X.Y.<p>-<n>`` (or the given patch); cudnn 9+ ``libcudnn<M>-cuda-<X>`` and
    ``libcudnn<M>-dev-cuda-<X>``, older ``libcudnn<M>`` and ``-dev``; nccl ``libnccl2`` + ``libnccl-dev`` at
    ``<v>-<n>+cudaX.Y``; monitoring ``datacenter-gpu-manager`` ``1:<v>`` (``-4-core`` ``1:<v>-1`` from DCGM 4).
    """
    wants: list[Want] = []
    elsewhere: list[dict[str, str]] = []
    driver = settings.get("driver") or {}
    branch = str(driver.get("branch") or "auto")
    if driver.get("method") == "distro":
        # the nvidia_driver role installs the distribution's own driver from its archive, not the CUDA repository
        elsewhere.append({"package": "the OS archive's NVIDIA driver", "version": branch, "setting": "driver.method",
                          "reason": "method distro installs the driver from the OS archive, not the CUDA repository"})
    elif branch != "auto":
        version = driver.get("version") or ""
        pattern = "" if not version else re.escape(version) + ("" if "-" in version else "-.*")
        pinning = driver_packages(branch, driver.get("flavour"))["pinning"]
        if pinning and not pattern:
            # unbranched names (590 and later): the branch is in the version only
            pattern = rf"(?:\d+:)?{re.escape(branch)}\..*"
        nvswitch = bool((settings.get("gpus") or {}).get("nvswitch"))
        meta, *siblings = driver_package_set(branch, driver.get("flavour"), fabric_manager=nvswitch)
        setting = "driver.version" if version else "driver.branch"
        if pinning:
            # installed first: NVIDIA's apt preferences that keep the unbranched packages on the branch
            wants.append(Want(pinning, "", "driver.branch", branch))
        wants.append(Want(meta, pattern, setting, version or branch))
        wants += [Want(name, pattern, setting, version or branch, same_as=meta) for name in siblings]
    cuda = str((settings.get("cuda") or {}).get("version") or "")
    cuda_xy = ".".join(cuda.split(".")[:2])
    # a runfile or an archive is not from the repository: gpuprov.bundle_files carries those
    if cuda and (settings.get("cuda") or {}).get("method", "cuda-repo") == "cuda-repo":
        tail = r"\.\d+" if cuda == cuda_xy else ""
        wants.append(Want(f"cuda-toolkit-{cuda_xy.replace('.', '-')}", re.escape(cuda) + tail + r"-\d+",
                          "cuda.version", cuda))
    for section in ("cudnn", "nccl"):
        version = str((settings.get(section) or {}).get("version") or "")
        if not version or (settings.get(section) or {}).get("method", "cuda-repo") != "cuda-repo":
            continue
        extra = r"\.\d+" if len(version.split(".")) < 3 else ""
        if section == "cudnn":
            major = version.split(".")[0]
            per_cuda = f"-cuda-{cuda_xy.split('.')[0]}" if int(major) >= 9 and cuda_xy else ""
            names = [f"libcudnn{major}{per_cuda}", f"libcudnn{major}-dev{per_cuda}"]
            pattern = re.escape(version) + extra + r"\.\d+-\d+(?:\+cuda\d+\.\d+)?"
        else:
            names = ["libnccl2", "libnccl-dev"]
            pattern = re.escape(version) + extra + r"-\d+\+cuda\d+\.\d+"
        wants.append(Want(names[0], pattern, f"{section}.version", version, cuda=cuda_xy or None))
        wants.append(Want(names[1], pattern, f"{section}.version", version, same_as=names[0]))
    monitoring = settings.get("monitoring") or {}
    if monitoring.get("enabled", True):
        dcgm = str(monitoring.get("dcgm_version") or default_dcgm())
        four = int(dcgm.split(".", maxsplit=1)[0]) >= 4
        name = "datacenter-gpu-manager-4-core" if four else "datacenter-gpu-manager"
        wants.append(Want(name, re.escape(f"1:{dcgm}" + ("-1" if four else "")), "monitoring.dcgm_version", dcgm))
    if settings.get("container_runtime", "docker") != "none":
        toolkit = role_defaults("container_toolkit")
        elsewhere += [{"package": name, "version": toolkit["container_toolkit_version"], "setting": "container_runtime",
                       "reason": "installed by container_toolkit from mirrors.container_toolkit_repo_url "
                                 "(NVIDIA's libnvidia-container repository), not the CUDA repository"}
                      for name in toolkit["container_toolkit_packages"]]
    return wants, elsewhere


def repo_url(settings: dict[str, Any], os_name: str) -> str:
    """The CUDA repository URL the roles use for a host (with one trailing slash); ``{env: NAME}`` is read
    from the environment. Raises ConfigError when that variable is unset."""
    url = (settings.get("mirrors") or {}).get("cuda_repo_url")
    if isinstance(url, dict):
        value = os.environ.get(str(url.get("env")))
        if not value:
            raise ConfigError(f"mirrors.cuda_repo_url names environment variable {url.get('env')}, which is unset")
        url = value
    if not url:
        url = f"{role_defaults('nvidia_driver', 'vars')['__nvidia_driver_cuda_repo_base']}/{os_name}/x86_64"
    return str(url).rstrip("/") + "/"


@dataclass
class Resolution:
    """One OS's result: ``selected`` name -> paragraph; ``distribution`` relation text -> packages needing it;
    ``missing`` ``[{package, setting, value, reason, hosts?}]``; ``wanted_by`` name -> settings asking for it."""

    selected: dict[str, Packages] = field(default_factory=dict)
    distribution: dict[str, set[str]] = field(default_factory=dict)
    missing: list[dict[str, str]] = field(default_factory=list)
    wanted_by: dict[str, set[str]] = field(default_factory=dict)


def _satisfies(version: str, relation: tuple[str, str] | None) -> bool:
    if relation is None:
        return True
    op, wanted = relation
    return bool(_OPS[op](version_compare(version, wanted)))


def _cuda_build(version: str) -> tuple[int, int] | None:
    match = re.search(r"\+cuda(\d+)\.(\d+)$", version)
    return (int(match[1]), int(match[2])) if match else None


def _pick(candidates: list[Packages], want: Want) -> Packages | None:
    """The newest candidate whose version fully matches ``want.pattern``; with ``want.cuda`` the newest of the
    highest CUDA build of that major not above it (builds without a suffix count as minor 0, any major)."""
    ok = sorted((p for p in candidates if re.fullmatch(want.pattern or ".*", p["Version"])),
                key=lambda p: Version(p["Version"]), reverse=True)
    if want.cuda is None:
        return ok[0] if ok else None
    major, minor = (int(x) for x in want.cuda.split("."))
    best: Packages | None = None
    best_minor = -1
    for paragraph in ok:
        build = _cuda_build(paragraph["Version"])
        m = build[1] if build else 0
        if (build is None or (build[0] == major and m <= minor)) and m > best_minor:
            best, best_minor = paragraph, m
    return best


def resolve(index: list[Packages], wants: Iterable[Want]) -> Resolution:
    """Choose each want's version, then close over Pre-Depends/Depends inside ``index``.

    Alternatives are tried in order, as apt does: the first the repository satisfies is bundled; the first
    the repository does not name at all goes to the distribution mirror. A relation the repository names
    but cannot satisfy (or a second version of a chosen package) is ``missing``. Greedy, no backtracking:
    NVIDIA's repository pins siblings by exact version, so the first choice is the one apt makes.
    """
    by_name: dict[str, list[Packages]] = {}
    providers: dict[str, list[tuple[Packages, str | None]]] = {}
    for paragraph in index:
        by_name.setdefault(paragraph["Package"], []).append(paragraph)
        for group in paragraph.relations["provides"] or []:
            for alt in group:
                providers.setdefault(alt["name"], []).append(
                    (paragraph, alt["version"][1] if alt["version"] else None))
    result = Resolution()
    queue: list[Packages] = []

    def select(paragraph: Packages, needed_by: str) -> str | None:
        name = paragraph["Package"]
        have = result.selected.get(name)
        if have is not None:
            if have["Version"] == paragraph["Version"]:
                return None
            return f"{needed_by} needs {name} {paragraph['Version']}, but {have['Version']} is already chosen"
        result.selected[name] = paragraph
        queue.append(paragraph)
        return None

    for want in wants:
        result.wanted_by.setdefault(want.name, set()).add(f"{want.setting}={want.value}")
        candidates = by_name.get(want.name, [])
        if want.same_as is not None:
            anchor = result.selected.get(want.same_as)
            if anchor is None:
                continue  # the anchor is missing and already reported
            candidates = [p for p in candidates if p["Version"] == anchor["Version"]]
        chosen = _pick(candidates, want)
        if chosen is None:
            offered = sorted({p["Version"] for p in by_name.get(want.name, [])}, key=Version, reverse=True)
            reason = (f"{want.name} is not in the repository" if not offered else
                      f"no {want.name} version matches {want.setting}={want.value}"
                      + (f" at {want.same_as}'s version" if want.same_as else "")
                      + f" (offered: {', '.join(offered[:8])})")
            result.missing.append({"package": want.name, "setting": want.setting, "value": want.value,
                                   "reason": reason})
            continue
        clash = select(chosen, f"{want.setting}={want.value}")
        if clash:
            result.missing.append({"package": want.name, "setting": want.setting, "value": want.value,
                                   "reason": clash})

    while queue:
        paragraph = queue.pop(0)
        owner = f"{paragraph['Package']} {paragraph['Version']}"
        for group in (paragraph.relations["pre-depends"] or []) + (paragraph.relations["depends"] or []):
            if any(_already(result, providers, alt) for alt in group):
                continue
            text = " | ".join(_relation_text(alt) for alt in group)
            for alt in group:
                real = [p for p in by_name.get(alt["name"], []) if _satisfies(p["Version"], alt["version"])]
                virtual = [p for p, v in providers.get(alt["name"], [])
                           if alt["version"] is None or (v is not None and _satisfies(v, alt["version"]))]
                if real or virtual:
                    best = max(real or virtual, key=lambda p: Version(p["Version"]))
                    clash = select(best, owner)
                    if clash:
                        result.missing.append({"package": best["Package"], "setting": "dependency",
                                               "value": owner, "reason": clash})
                    break
                if alt["name"] not in by_name and alt["name"] not in providers:
                    result.distribution.setdefault(text, set()).add(paragraph["Package"])
                    break
            else:
                result.missing.append({"package": text, "setting": "dependency", "value": owner,
                                       "reason": f"the repository cannot satisfy {text}, needed by {owner}"})
    return result


def _relation_text(alt: dict[str, Any]) -> str:
    return str(alt["name"]) + (f" ({alt['version'][0]} {alt['version'][1]})" if alt["version"] else "")


def _already(result: Resolution, providers: dict[str, list[tuple[Packages, str | None]]],
             alt: dict[str, Any]) -> bool:
    have = result.selected.get(alt["name"])
    if have is not None and _satisfies(have["Version"], alt["version"]):
        return True
    return any(p["Package"] in result.selected and result.selected[p["Package"]] is p
               and (alt["version"] is None or (v is not None and _satisfies(v, alt["version"])))
               for p, v in providers.get(alt["name"], []))


def plan(fleet: Fleet, index_reader: Any = fetch_index) -> dict[str, Any]:
    """The manifest (see docs/bundle.md) for every OS of ``fleet``'s hosts; ``index_reader(url)`` reads an index.

    A credentialed mirror (``https://user:password@host/...``) appears in the manifest as ``user:***@``; the
    password stays in this process only (:func:`register_credentials`), so :func:`download` and
    :func:`write_repositories` can use the manifest as it is.

    Raises ConfigError for a host without ``os`` or two CUDA repository URLs for one OS.
    """
    per_os: dict[str, dict[str, Any]] = {}
    for host in fleet.hosts.values():
        settings = host.settings
        os_name = settings.get("os")
        if not os_name:
            raise ConfigError(f"{host.name}: settings.os is not set; the bundle needs it to pick the repository")
        url = register_credentials(repo_url(settings, os_name))  # the manifest never holds the password
        entry = per_os.setdefault(os_name, {"url": url, "wants": [], "elsewhere": [], "hosts": []})
        if entry["url"] != url:
            raise ConfigError(f"{host.name}: mirrors.cuda_repo_url {url} differs from {entry['url']} of another "
                              f"{os_name} host; bundle one repository per OS")
        wants, elsewhere = stack_packages(settings)
        entry["wants"] += wants
        entry["elsewhere"] += [dict(e, host=host.name) for e in elsewhere]
        entry["hosts"].append(host.name)
    manifest: dict[str, Any] = {"format": 1, "fleet": str(fleet.source), "oses": {}, "missing": [],
                                "files": plan_files(fleet)}
    for os_name, entry in sorted(per_os.items()):
        url = entry["url"]
        log.info("bundle %s: reading %s", os_name, url)
        result = resolve(index_reader(url), _unique(entry["wants"]))
        packages = [{"name": p["Package"], "version": p["Version"], "filename": p["Filename"],
                     "url": url + p["Filename"].removeprefix("./"), "sha256": p.get("SHA256", ""),
                     "size": int(p.get("Size", 0)), "wanted_by": sorted(result.wanted_by.get(p["Package"], []))}
                    for p in sorted(result.selected.values(), key=lambda p: p["Package"])]
        manifest["oses"][os_name] = {
            "repo_url": url, "hosts": entry["hosts"], "packages": packages,
            "from_distribution": [{"relation": rel, "needed_by": sorted(by)}
                                  for rel, by in sorted(result.distribution.items())],
            "not_bundled": [json.loads(e) for e in sorted({json.dumps(e, sort_keys=True) for e in entry["elsewhere"]})],
        }
        manifest["missing"] += [dict(m, os=os_name) for m in result.missing]
    return manifest


def _unique(wants: list[Want]) -> list[Want]:
    seen: dict[tuple[str, str, str | None, str | None], Want] = {}
    for want in wants:
        seen.setdefault((want.name, want.pattern, want.cuda, want.same_as), want)
    return list(seen.values())


def missing_message(manifest: dict[str, Any]) -> str:
    """One line per missing package: ``<os>: <package> (<setting>=<value>): <reason>``."""
    return "\n".join(f"{m['os']}: {m['package']} ({m['setting']}={m['value']}): {m['reason']}"
                     for m in manifest["missing"])


def download(manifest: dict[str, Any], out_dir: Path, getter: Any = fetch) -> None:
    """Fetch every package of ``manifest`` into ``out_dir/<os>/`` and check its sha256 and size.

    A file already there with the right sha256 is kept. Raises GpuprovError (exit 2) on a mismatch; the
    bad download is removed, nothing is indexed.
    """
    for os_name, entry in manifest["oses"].items():
        target = out_dir / os_name
        target.mkdir(parents=True, exist_ok=True)
        for package in entry["packages"]:
            path = target / Path(package["filename"]).name
            if path.exists() and hashlib.sha256(path.read_bytes()).hexdigest() == package["sha256"]:
                continue
            data = getter(package["url"])
            digest = hashlib.sha256(data).hexdigest()
            if digest != package["sha256"] or len(data) != package["size"]:
                path.unlink(missing_ok=True)
                raise GpuprovError(f"{package['url']}: sha256 {digest} ({len(data)} bytes) does not match the "
                                   f"repository index ({package['sha256']}, {package['size']} bytes); refused")
            path.write_bytes(data)
            log.info("bundle %s: %s %s (%d bytes)", os_name, package["name"], package["version"], len(data))


BUNDLE_UID = "gpuprov offline bundle <bundle@gpuprov.invalid>"


def write_repositories(manifest: dict[str, Any], out_dir: Path, index_reader: Any = fetch_index) -> str:
    """Index and sign ``out_dir/<os>/`` for each OS (control data copied from the source index, Filename made
    local) with the bundle key in ``out_dir/keys/gnupg`` (generated once, 0700); return its fingerprint.

    Raises EnvironmentMissing without gpg."""
    gnupg = out_dir / "keys" / "gnupg"
    fingerprint = ""
    for os_name, entry in manifest["oses"].items():
        repo = out_dir / os_name
        repo.mkdir(parents=True, exist_ok=True)
        wanted = {(p["name"], p["version"]) for p in entry["packages"]}
        paragraphs = []
        for paragraph in index_reader(entry["repo_url"]):
            if (paragraph["Package"], paragraph["Version"]) in wanted:
                paragraph["Filename"] = "./" + Path(paragraph["Filename"]).name
                paragraphs.append(paragraph.dump())
                wanted.discard((paragraph["Package"], paragraph["Version"]))
        if wanted:
            raise GpuprovError(f"{entry['repo_url']} changed while bundling: {sorted(wanted)} no longer listed")
        text = "\n".join(paragraphs)
        (repo / "Packages").write_text(text, encoding="utf-8")
        (repo / "Packages.gz").write_bytes(gzip.compress(text.encode(), mtime=0))
        (repo / "Release").write_text(release_text(repo, ["Packages", "Packages.gz"], origin="gpuprov-bundle"),
                                      encoding="utf-8")
        key = sign(repo, gnupg, BUNDLE_UID, expiry="2y")
        fingerprint = key_fingerprint(key)
        shutil.copyfile(key, repo / f"{fingerprint[-8:].lower()}.pub")
        shutil.copyfile(key, out_dir / "keys" / "bundle.pub")
    return fingerprint


def snippet(fingerprint: str, base_url: str, os_name: str) -> str:
    """The fleet-file ``mirrors:`` block that points the roles at ``<base_url><os>/``."""
    return (f"mirrors:\n  cuda_repo_url: {base_url.rstrip('/')}/{os_name}/\n"
            f"  cuda_repo_key_fingerprint: {fingerprint}\n")


def write_manifest(manifest: dict[str, Any], out_dir: Path) -> Path:
    """Write ``out_dir/manifest.json`` (sorted keys, 2-space indent) and return its path."""
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "manifest.json"
    path.write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return path
