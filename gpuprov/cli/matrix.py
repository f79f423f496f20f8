"""``gpuprov matrix``: print the NVIDIA compatibility matrix gpuprov validates against.

Rich tables by default, ``--json`` for the raw data; ``--section`` (repeatable) picks sections.
Each row shows whether its numbers were verified against the cited NVIDIA page.
"""

from __future__ import annotations

import json

import click
from rich.table import Table

from gpuprov.cli import output
from gpuprov.matrix import Matrix, load_matrix

SECTIONS = ("cuda", "cudnn", "nccl", "gpus", "os", "driver_branches", "mig")


def _yes(flag: bool) -> str:
    return "yes" if flag else "no"


def tables(m: Matrix, sections: tuple[str, ...]) -> list[Table]:
    """One rich table per requested section."""
    out: list[Table] = []
    if "cuda" in sections:
        t = Table(title="CUDA toolkit -> driver it shipped with (Linux x86_64)", title_justify="left")
        for col in ("CUDA", "driver", "branch", "runs from (minor compat)", "verified"):
            t.add_column(col)
        for c in m.cuda.values():
            t.add_row(c.version, c.driver, c.branch, m.min_driver(c.version) or "?", _yes(c.verified))
        out.append(t)
    if "cudnn" in sections:
        t = Table(title="cuDNN builds", title_justify="left")
        for col in ("cuDNN", "CUDA", "min driver", "verified"):
            t.add_column(col)
        for r in m.cudnn.values():
            for b in r.builds:
                t.add_row(r.version, ", ".join(b.cuda), b.min_driver, _yes(r.verified))
        out.append(t)
    if "nccl" in sections:
        t = Table(title="NCCL builds", title_justify="left")
        for col in ("NCCL", "built for CUDA", "verified"):
            t.add_column(col)
        for n in m.nccl.values():
            t.add_row(n.version, ", ".join(n.cuda), _yes(n.verified))
        out.append(t)
    if "gpus" in sections:
        t = Table(title="GPU models", title_justify="left")
        for col in ("model", "arch", "CC", "branches", "CUDA", "open modules", "MIG", "NVSwitch", "W", "verified"):
            t.add_column(col)
        for g in m.gpus.values():
            t.add_row(g.model, g.architecture, g.compute_capability, f"{g.min_branch}-{g.max_branch or ''}",
                      f"{g.min_cuda}-{g.max_cuda or ''}", g.open_modules, _yes(g.mig), _yes(g.nvswitch_capable),
                      str(g.tdp_watts), _yes(g.verified))
        out.append(t)
    if "os" in sections:
        t = Table(title="NVIDIA repository per OS", title_justify="left")
        for col in ("OS", "driver branches (cuda-repo)", "CUDA", "distro branches", "Fabric Manager via", "verified"):
            t.add_column(col)
        for o in m.os.values():
            t.add_row(o.name, " ".join(o.cuda_repo_branches), f"{o.cuda_first}-{o.cuda_last}",
                      " ".join(o.distro_branches) if o.distro_branches else "not checked",
                      ", ".join(o.fabric_manager), _yes(o.verified))
        out.append(t)
    if "driver_branches" in sections:
        t = Table(title="Driver branches", title_justify="left")
        for col in ("branch", "kind", "end of life", "open modules", "verified"):
            t.add_column(col)
        for branch in m.branches.values():
            number = int(branch.branch)
            open_modules = "default" if number >= int(m.open_default_branch) else (
                "yes" if number >= int(m.open_first_branch) else "no")
            t.add_row(branch.branch, branch.kind, branch.eol_text() if branch.eol else "-", open_modules,
                      _yes(branch.verified))
        out.append(t)
    if "mig" in sections:
        t = Table(title="MIG profiles: compute slices / memory slices, most instances per GPU", title_justify="left")
        for col in ("models", "slices", "profiles", "verified"):
            t.add_column(col)
        for row in m.raw["mig"]:
            geometry = m.mig[row["models"][0]]
            profiles = ", ".join(f"{p.name} {p.compute}/{p.memory} x{p.most}" for p in geometry.profiles.values())
            t.add_row(", ".join(geometry.models), f"{geometry.compute_slices}/{geometry.memory_slices}", profiles,
                      _yes(geometry.verified))
        out.append(t)
    return out


@click.command("matrix")
@click.option("--json", "as_json", is_flag=True, help="Print the matrix data as JSON.")
@click.option("--section", "sections", multiple=True, type=click.Choice(SECTIONS),
              help="Only this section (repeatable).")
def command(as_json: bool, sections: tuple[str, ...]) -> None:
    """Print the CUDA / driver / cuDNN / NCCL / GPU / OS compatibility matrix and the MIG profiles, with sources."""
    m = load_matrix()
    chosen = sections or SECTIONS
    if as_json:
        click.echo(json.dumps({k: m.raw[k] for k in chosen}, indent=2, sort_keys=True))
        return
    console = output.console()
    for table in tables(m, chosen):
        console.print(table)
