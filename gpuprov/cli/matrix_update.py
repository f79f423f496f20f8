"""``gpuprov matrix update``: check the CUDA rows of the compatibility matrix against a CUDA repository's
``Packages`` index (NVIDIA's, a site's mirror, or a local copy), print the difference as a unified diff, and with
``--write`` rewrite those rows (and the OS row's branches and CUDA range) in the matrix file.

The comparison is :mod:`gpuprov.matrix_update`'s, the index reading :mod:`gpuprov.matrix_index`'s. Exit 0 (also
when rows differ), 2 for input that cannot be read or is no CUDA repository index.
"""

from __future__ import annotations

import re
import urllib.parse
from pathlib import Path

import click
from ansible_collections.gpuprov.gpu.plugins.plugin_utils import cuda_drivers

from gpuprov.exceptions import ConfigError, GpuprovError
from gpuprov.matrix import matrix_from_text
from gpuprov.matrix_index import index_facts, read_index
from gpuprov.matrix_update import plan, write_matrix

#: NVIDIA's CUDA repositories: rows from an index read elsewhere (a mirror, a local copy) cite the OS's folder here.
NVIDIA_REPOS = "https://developer.download.nvidia.com/compute/cuda/repos/"
_OS_IN_PATH = re.compile(r"/repos/([a-z0-9]+)/x86_64(?:/|$)")


@click.command("update")
@click.option("--packages", required=True, metavar="URL|PATH",
              help="The Packages index: an http(s) URL of the file or of the repository folder (ending in /), or a "
                   "local file or folder.")
@click.option("--os", "os_name", metavar="NAME",
              help="Also regenerate this OS row's driver branches and CUDA range from the index (default: the OS "
                   "in a .../repos/<os>/x86_64/ path, when the matrix has it).")
@click.option("--source", metavar="URL",
              help="The public https URL the rows cite (default: the index's folder on developer.download.nvidia.com, "
                   "else NVIDIA's repository of the OS, else NVIDIA's repository root).")
@click.option("--matrix", "matrix_path", type=click.Path(path_type=Path, dir_okay=False), metavar="PATH",
              help="The matrix file to compare and write (default: the one gpuprov validates against).")
@click.option("--write", is_flag=True, help="Rewrite the rows in the matrix file (comments kept).")
def command(packages: str, os_name: str | None, source: str | None, matrix_path: Path | None, write: bool) -> None:
    """Check the CUDA rows (minimum driver per CUDA release) against a CUDA repository's Packages index."""
    path = matrix_path or cuda_drivers.MATRIX_FILE
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"--matrix {path}: cannot read it ({exc}) - name gpuprov's matrix.yml or a copy of it") \
            from None
    facts = index_facts(read_index(packages))
    inferred = _os_in(packages)
    if os_name is None and inferred is not None and re.search(rf"(?m)^  {inferred}:\s*$", text):
        os_name = inferred
    update = plan(text, facts, cited_source(source, packages, os_name), os_name)
    diff = update.diff(text, str(path))
    click.echo(diff, nl=False)
    for cuda, result in update.compared.items():
        click.echo(f"CUDA {cuda}: {result}")
    for note in update.notes:
        click.echo(note)
    if os_name is None:
        click.echo("no OS row compared: name one with --os to check its driver branches and CUDA range")
    if not diff:
        click.echo("the matrix agrees with the index: nothing to change")
        return
    try:
        matrix_from_text(update.text)
    except GpuprovError as exc:
        raise ConfigError(f"the updated matrix would not load ({exc.message}) - nothing was written") from None
    if not write:
        click.echo("not written: run again with --write to apply")
        return
    try:
        write_matrix(path, update.text)
    except OSError as exc:
        raise ConfigError(f"--matrix {path}: cannot write it ({exc.strerror or exc})") from None
    click.echo(f"wrote {path}")


def _os_in(packages: str) -> str | None:
    match = _OS_IN_PATH.search(urllib.parse.urlsplit(packages).path if "://" in packages else packages)
    return match[1] if match else None


def cited_source(source: str | None, packages: str, os_name: str | None) -> str:
    """The URL new rows cite: ``--source``, else the index's folder on NVIDIA's site, else NVIDIA's folder of the
    OS, else NVIDIA's repository root. Never a mirror's URL (it may carry credentials)."""
    if source is not None:
        given = urllib.parse.urlsplit(source)
        if given.scheme != "https" or "@" in given.netloc or given.query or given.fragment:
            # shown without its user part, query and fragment: they may hold a credential (?token=...)
            shown = urllib.parse.urlunsplit((given.scheme, given.netloc.rpartition("@")[2], given.path, "", ""))
            raise ConfigError(f"--source {shown}: give the public https URL the index comes from, without "
                              "credentials, query or fragment (it is written into the matrix)")
        return source
    parts = urllib.parse.urlsplit(packages)
    if parts.scheme == "https" and parts.netloc == urllib.parse.urlsplit(NVIDIA_REPOS).netloc:
        folder = parts.path if parts.path.endswith("/") else parts.path.rsplit("/", 1)[0] + "/"
        return urllib.parse.urlunsplit(("https", parts.netloc, folder, "", ""))
    if os_name is not None:
        return f"{NVIDIA_REPOS}{os_name}/x86_64/"
    return NVIDIA_REPOS
