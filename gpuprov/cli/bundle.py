"""``gpuprov bundle FILE -o DIR [--no-download] [--base-url URL]``: the offline bundle of the fleet's NVIDIA stack."""

from __future__ import annotations

from pathlib import Path

import click

from gpuprov.cli import output
from gpuprov.exceptions import ConfigError

PLACEHOLDER = "http://MIRROR/gpuprov-bundle/"


@click.command("bundle")
@click.argument("fleet", type=click.Path(path_type=Path, dir_okay=False))
@click.option("-o", "--output", "out_dir", required=True, type=click.Path(path_type=Path, file_okay=False),
              help="Bundle directory: manifest.json, one flat apt repository per OS, keys/.")
@click.option("--download/--no-download", default=True, show_default=True,
              help="Download, verify and index the packages; --no-download writes only the manifest.")
@click.option("--base-url", metavar="URL", default=PLACEHOLDER, show_default=True,
              help="Where DIR will be served over http(s); used in the printed mirrors: snippet.")
def command(fleet: Path, out_dir: Path, download: bool, base_url: str) -> None:
    """Resolve the exact package set FLEET's hosts need from NVIDIA's CUDA repository (or mirrors.cuda_repo_url):
    names, versions, URLs and sha256 into DIR/manifest.json; with --download fetch them into a signed flat apt
    repository per OS and print the fleet-file mirrors: block that points the roles at it. NVIDIA's files that
    hosts install from (cuda.method runfile, cudnn.method archive) go into DIR/files/, checked against the fleet's
    sha256, with the fleet-file URLs that point at them.

    Exit codes: 0 bundled; 2 invalid input, a wanted package or version the repository lacks (named with its
    setting), or a download whose sha256 does not match; 4 the repository or gpg is not available.
    """
    out_dir = out_dir.resolve()  # gpg signs from inside each repository directory: a relative homedir breaks
    from gpuprov import bundle
    from gpuprov.bundle_files import download_files, files_snippet
    from gpuprov.fleet import load_fleet

    console = output.console(highlight=False)
    manifest = bundle.plan(load_fleet(fleet))
    path = bundle.write_manifest(manifest, out_dir)
    for os_name, entry in manifest["oses"].items():
        size = sum(p["size"] for p in entry["packages"])
        console.print(f"{os_name}: {len(entry['packages'])} package(s), {size / 1e6:.1f} MB from "
                      f"{entry['repo_url']}; {len(entry['from_distribution'])} relation(s) from the distribution "
                      f"mirror; {len({e['package'] for e in entry['not_bundled']})} package(s) not bundled",
                      markup=False)
    for entry in manifest["files"]:
        console.print(f"{entry['name']}: {entry['setting']} of {len(entry['hosts'])} host(s), sha256 {entry['sha256']}",
                      markup=False)
    console.print(f"manifest: {path}", markup=False)
    if manifest["missing"]:
        raise ConfigError("the repository lacks what the fleet asks for:\n" + bundle.missing_message(manifest))
    if not download:
        return
    bundle.download(manifest, out_dir)
    download_files(manifest["files"], out_dir)
    bundle.write_manifest(manifest, out_dir)  # with the files' sizes
    fingerprint = bundle.write_repositories(manifest, out_dir)
    console.print(f"signed with {fingerprint} (private key in {out_dir / 'keys' / 'gnupg'}: do not ship it)",
                  markup=False)
    for os_name in manifest["oses"]:
        console.print(f"# serve {out_dir} at {base_url}, then in the fleet file for the {os_name} hosts:",
                      markup=False)
        console.print(bundle.snippet(fingerprint, base_url, os_name), markup=False, end="", soft_wrap=True)
    if manifest["files"]:
        console.print(f"# NVIDIA's files are in {out_dir / 'files'}; in the fleet file, for the hosts named:",
                      markup=False)
        console.print(files_snippet(manifest["files"], base_url), markup=False, end="", soft_wrap=True)
