"""``gpuprov matrix``: print the NVIDIA compatibility matrix gpuprov validates against.

Rich tables by default, ``--json`` for the raw data; ``--section`` (repeatable) picks sections.
Each row shows whether its numbers were verified against the cited NVIDIA page (a GPU row: which of its
fields were). ``gpuprov matrix update`` (:mod:`gpuprov.cli.matrix_update`) checks the CUDA rows against a CUDA
repository's Packages index.
"""

from __future__ import annotations

import json

import click
from rich.console import Group
from rich.table import Table
from rich.text import Text

from gpuprov.cli import output
from gpuprov.cli.matrix_update import command as update_command
from gpuprov.matrix import GpuModel, Matrix, load_matrix

SECTIONS = ("cuda", "cudnn", "nccl", "gpus", "os", "driver_branches", "mig")


def _yes(flag: bool) -> str:
    return "yes" if flag else "no"


#: How the GPU table names the checked fields of a GPU row.
_FIELD_NAMES = {"compute_capability": "CC", "min_branch": "branch", "min_cuda": "CUDA", "mig": "MIG"}


def _checked(gpu: GpuModel) -> str:
    if gpu.verified:
        return "yes"
    return ", ".join(_FIELD_NAMES.get(name, name) for name in gpu.checked) or "no"


class _Sources:
    """The NVIDIA pages one table cites: each distinct URL gets a number, which the rows' ``source`` column shows
    and the lines under the table list with the URL."""

    def __init__(self) -> None:
        self.urls: list[str] = []

    def ref(self, url: str) -> str:
        if url not in self.urls:
            self.urls.append(url)
        return f"[{self.urls.index(url) + 1}]"

    def table(self, title: str, columns: tuple[str, ...]) -> Table:
        """An empty table with ``columns`` and a last ``source`` column."""
        t = Table(title=title, title_justify="left")
        for col in (*columns, "source"):
            t.add_column(col)
        return t

    def under(self, t: Table) -> Group:
        """The filled table ``t`` and, under it, its sources, one ``[n] URL`` line each (never wrapped)."""
        cited = "\n".join(f"[{n}] {url}" for n, url in enumerate(self.urls, start=1))
        return Group(t, Text(cited, no_wrap=True, overflow="ignore"))


def tables(m: Matrix, sections: tuple[str, ...]) -> list[Group]:
    """One rich table per requested section, each row citing its NVIDIA page (listed under the table)."""
    out: list[Group] = []
    if "cuda" in sections:
        s = _Sources()
        t = s.table("CUDA toolkit -> driver it shipped with (Linux x86_64)",
                    ("CUDA", "driver", "branch", "runs from (minor compat)", "verified"))
        for c in m.cuda.values():
            t.add_row(c.version, c.driver, c.branch, m.min_driver(c.version) or "?", _yes(c.verified), s.ref(c.source))
        out.append(s.under(t))
    if "cudnn" in sections:
        s = _Sources()
        t = s.table("cuDNN builds", ("cuDNN", "CUDA", "min driver", "verified"))
        for r in m.cudnn.values():
            for b in r.builds:
                t.add_row(r.version, ", ".join(b.cuda), b.min_driver, _yes(r.verified), s.ref(r.source))
        out.append(s.under(t))
    if "nccl" in sections:
        s = _Sources()
        t = s.table("NCCL builds", ("NCCL", "built for CUDA", "verified"))
        for n in m.nccl.values():
            t.add_row(n.version, ", ".join(n.cuda), _yes(n.verified), s.ref(n.source))
        out.append(s.under(t))
    if "gpus" in sections:
        s = _Sources()
        t = s.table("GPU models (verified: the fields checked)", ("model", "arch", "CC", "branches", "CUDA",
                    "open modules", "MIG", "NVSwitch", "W", "host", "verified"))
        for g in m.gpus.values():
            t.add_row(g.model, g.architecture, g.compute_capability, f"{g.min_branch}-{g.max_branch or ''}",
                      f"{g.min_cuda}-{g.max_cuda or ''}", g.open_modules, _yes(g.mig), _yes(g.nvswitch_capable),
                      str(g.tdp_watts), g.host_arch, _checked(g), s.ref(g.source))
        out.append(s.under(t))
    if "os" in sections:
        s = _Sources()
        t = s.table("NVIDIA repository per OS", ("OS", "driver branches (cuda-repo)", "CUDA", "distro branches",
                                                 "Fabric Manager via", "verified"))
        for o in m.os.values():
            t.add_row(o.name, " ".join(o.cuda_repo_branches), f"{o.cuda_first}-{o.cuda_last}",
                      " ".join(o.distro_branches) if o.distro_branches else "not checked",
                      ", ".join(o.fabric_manager), _yes(o.verified), s.ref(o.source))
        out.append(s.under(t))
    if "driver_branches" in sections:
        s = _Sources()
        t = s.table("Driver branches", ("branch", "kind", "end of life", "open modules", "verified"))
        for branch in m.branches.values():
            number = int(branch.branch)
            open_modules = "default" if number >= int(m.open_default_branch) else (
                "yes" if number >= int(m.open_first_branch) else "no")
            t.add_row(branch.branch, branch.kind, branch.eol_text() if branch.eol else "-", open_modules,
                      _yes(branch.verified), s.ref(branch.source))
        out.append(s.under(t))
    if "mig" in sections:
        s = _Sources()
        t = s.table("MIG profiles: compute slices / memory slices, most instances per GPU",
                    ("models", "slices", "profiles", "verified"))
        for row in m.raw["mig"]:
            geometry = m.mig[row["models"][0]]
            profiles = ", ".join(f"{p.name} {p.compute}/{p.memory} x{p.most}" for p in geometry.profiles.values())
            t.add_row(", ".join(geometry.models), f"{geometry.compute_slices}/{geometry.memory_slices}", profiles,
                      _yes(geometry.verified), s.ref(geometry.source))
        out.append(s.under(t))
    return out


@click.group("matrix", invoke_without_command=True)
@click.option("--json", "as_json", is_flag=True, help="Print the matrix data as JSON.")
@click.option("--section", "sections", multiple=True, type=click.Choice(SECTIONS),
              help="Only this section (repeatable).")
@click.pass_context
def command(ctx: click.Context, as_json: bool, sections: tuple[str, ...]) -> None:
    """Print the CUDA / driver / cuDNN / NCCL / GPU / OS compatibility matrix and the MIG profiles, with sources.

    `gpuprov matrix update --packages URL|PATH` checks the CUDA rows against a CUDA repository's index.
    """
    if ctx.invoked_subcommand is not None:
        return
    m = load_matrix()
    chosen = sections or SECTIONS
    if as_json:
        click.echo(json.dumps({k: m.raw[k] for k in chosen}, indent=2, sort_keys=True))
        return
    console = output.console()
    for table in tables(m, chosen):
        console.print(table, crop=False)


command.add_command(update_command)
