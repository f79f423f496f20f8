"""MIG layouts against the GPUs that would carry them.

A layout (``mig.layouts.<name>``) is a list of mig-parted entries ``{devices: all | [index, ...], mig_enabled:
bool, mig_devices: {profile: count}}``. Each entry is checked against one GPU model's
:class:`~gpuprov.mig_profiles.MigGeometry` (NVIDIA MIG User Guide, "Supported MIG Profiles", in
``plugins/plugin_utils/matrix.yml``): every profile must be one of that model's, used at most its "instances available"
times, and an entry's instances together must fit the GPU's compute slices (7) and memory slices (8). The
budgets are necessary, not sufficient: where instances sit on the GPU (placement) is NVML's to refuse when the
mig role creates them.

The layout a host uses (``mig.layout``) must fit that host's GPU model. A layout it only defines must fit at
least one GPU model of the MIG hosts that have it in their settings (a fleet-wide set of layouts for several
models is fine; a layout no host could apply is a mistake): :func:`unused_layout_problems` reports those.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import Any

from gpuprov.fleet.errors import suggest_fix
from gpuprov.fleet.hostcheck import HostCheck, LayoutFit, Misfit
from gpuprov.fleet.merge import origin_of
from gpuprov.fleet.problem import Path_, Problem, format_path
from gpuprov.matrix import GpuModel, Matrix
from gpuprov.mig_profiles import MigGeometry

_COMPUTE = re.compile(r"^(\d+)g\.")


def check_mig(ctx: HostCheck, s: dict[str, Any], m: Matrix, gpu: GpuModel) -> None:
    """Check the host's MIG settings: the used layout strictly; the other layouts are noted in ``ctx.mig_fits``."""
    layout, layouts, count = s["mig"]["layout"], s["mig"]["layouts"], s["gpus"]["count"]
    geometry = m.mig_geometry(gpu.model)
    if layout is not None and geometry is None:
        capable = ", ".join(g.model for g in m.gpus.values() if g.mig)
        ctx.fail(("mig", "layout"), f"{gpu.model} does not support MIG", f"remove mig.layout (MIG GPUs: {capable})")
    elif layout is not None and layout not in layouts:
        ctx.fail(("mig", "layout"), f"MIG layout {layout!r} is not defined in mig.layouts",
                 suggest_fix(layout, sorted(layouts), "a layout defined in mig.layouts"))
    elif layout is not None:
        for i, entry in enumerate(layouts[layout]):
            where = ("mig", "layouts", layout, i)
            devices = entry["devices"]
            if isinstance(devices, list) and any(index >= count for index in devices):
                ctx.fail((*where, "devices"), f"GPU index {max(devices)} does not exist on a host with {count} GPUs",
                         f"use indexes 0 to {count - 1}, or all")
            if not entry["mig_enabled"] and entry["mig_devices"]:
                ctx.fail((*where, "mig_devices"), "MIG devices are listed for GPUs with mig_enabled: false",
                         "set mig_enabled: true, or remove mig_devices")
    if geometry is None:
        return
    for name, entries in layouts.items():
        misfits = layout_misfits(name, entries, gpu.model, geometry, m)
        if name == layout:
            for sub, problem, fix in misfits:
                ctx.fail(sub, problem, fix)
        origin = origin_of(ctx.origins, ("mig", "layouts", name))
        if origin is not None:
            ctx.mig_fits.append(LayoutFit(origin, gpu.model, tuple(misfits), name == layout))


def layout_misfits(name: str, entries: list[dict[str, Any]], model: str, geometry: MigGeometry,
                   m: Matrix) -> list[Misfit]:
    """Every way layout ``name`` does not fit one GPU of ``model`` (empty when it fits)."""
    out: list[Misfit] = []
    for i, entry in enumerate(entries):
        where: Path_ = ("mig", "layouts", name, i, "mig_devices")
        if not entry["mig_enabled"]:
            continue
        compute = memory = 0
        for profile_name, count in entry["mig_devices"].items():
            profile = geometry.profiles.get(profile_name)
            if profile is None:
                out.append(((*where, profile_name), *_not_a_profile(profile_name, model, geometry, m)))
                continue
            if count > profile.most:
                out.append(((*where, profile_name), f"{count} x {profile_name}: at most {profile.most} fit one "
                            f"{model}", f"use {profile_name}: {profile.most} or fewer"))
            compute += count * profile.compute
            memory += count * profile.memory
        if compute > geometry.compute_slices:
            out.append((where, f"the instances take {compute} compute slices; one {model} has "
                        f"{geometry.compute_slices}", "use fewer or smaller instances (<n>g: n compute slices)"))
        elif memory > geometry.memory_slices:
            out.append((where, f"the instances take {memory} memory slices; one {model} has "
                        f"{geometry.memory_slices}", "use fewer or smaller instances (each profile's memory "
                        "slices: gpuprov matrix --section mig)"))
    return out


def _not_a_profile(name: str, model: str, geometry: MigGeometry, m: Matrix) -> tuple[str, str]:
    elsewhere = sorted({g for g, other in m.mig.items() if name in other.profiles})
    size = _COMPUTE.match(name)
    same = [p for p in geometry.profiles.values() if size and p.compute == int(size.group(1))]
    if elsewhere:
        problem = f"MIG profile {name!r} is not one of {model}'s (it is a profile of {', '.join(elsewhere)})"
    else:
        problem = f"unknown MIG profile {name!r}: no MIG GPU has it"
    if same and elsewhere:
        return problem, f"use a {size.group(1) if size else ''}g profile of {model}: {', '.join(p.name for p in same)}"
    return problem, suggest_fix(name, list(geometry.profiles), f"a profile of {model}")


def unused_layout_problems(fits: Iterable[LayoutFit], file: str, line_of: Callable[[Path_], int]) -> list[Problem]:
    """A problem for each layout that no host uses and that fits none of the GPU models of the hosts that have it
    (a used layout is checked on its hosts): the models and the first misfit on each."""
    by_origin: dict[Path_, dict[str, tuple[Misfit, ...]]] = {}
    used: set[Path_] = set()
    for fit in fits:
        by_origin.setdefault(fit.origin, {})[fit.model] = fit.misfits
        if fit.used:
            used.add(fit.origin)
    problems = []
    for origin, models in by_origin.items():
        if origin in used or any(not misfits for misfits in models.values()):
            continue
        why = "; ".join(f"{model}: {misfits[0][1]}" for model, misfits in sorted(models.items()))
        problems.append(Problem(file, line_of(origin), format_path(origin),
                                f"MIG layout {origin[-1]!r} fits none of the GPUs of the hosts that have it ({why})",
                                "correct it for one of those GPU models (gpuprov matrix --section mig), or remove it"))
    return problems
