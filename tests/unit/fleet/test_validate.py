"""Tests for gpuprov.fleet.validate: every bad file fails on the named fields and lines, good files
pass with the expected resolutions, and no input raises anything but FleetValidationError."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuprov.exceptions import FleetValidationError
from gpuprov.fleet import Fleet, load_fleet
from gpuprov.fleet.loader import load_text
from gpuprov.fleet.validate import validate_loaded

DATA = Path(__file__).resolve().parents[2] / "data"
BAD = sorted((DATA / "bad").glob("*.yml"))
GOOD = sorted((DATA / "good").glob("*.yml"))
EXAMPLE = Path(__file__).resolve().parents[3] / "inventory" / "example.yml"


def expectations(path: Path) -> dict[str, int]:
    """Expected field -> line, from the `# expect:` first line and the `# <- field` markers."""
    lines = path.read_bytes().split(b"\n")
    fields = lines[0].decode().removeprefix("# expect:").split("#")[0].split()
    found: dict[str, int] = {}
    for number, raw in enumerate(lines, start=1):
        for marker in re.findall(rb"# <- (\S+)", raw):
            found.setdefault(marker.decode(), number)
    missing = [f for f in fields if f not in found]
    assert not missing, f"{path.name}: no `# <- field` marker for {missing}"
    return {f: found[f] for f in fields}


#: What the problem at each expected field must say, per bad file: each word must be in one problem text at
#: that field; a word starting with ``!`` must not be in it. Keys of the file-wide NEVER_PRINTED are strings no
#: problem of that file may print (credentials written into a field).
MESSAGES: dict[str, dict[str, tuple[str, ...]]] = {
    "number_forms.yml": {
        "ssh.port": ("leading 0", "base 8", "plain decimal"),
        "settings.gpus.count": ("hexadecimal", "plain decimal"),
        "settings.reboot.serial": ("binary", "plain decimal"),
        "settings.psu_watts": ("`_`", "plain decimal", "!expected"),
        "hosts.gpu01.port": ("base 60", "plain decimal"),
        "hosts.gpu01.description": ("`_`", "quote the value where a string is meant"),
    },
    "float_trap_fixes.yml": {
        "settings.gpus.model": ('quote it: "4090"', "!YAML reads"),
        "settings.cuda.version": ('quote it as written: "12.10"', "reads 12.10 as the number 12.1"),
        "settings.cudnn.version": ("the number 9.10", 'quote it as written: "9.10"', '!"9.1"'),
        "settings.driver.branch": ('"580"', '!"580.0"', "!YAML reads"),
        "settings.psu_watts": ("got 1200.50", "without a decimal point", "!quote"),
    },
    "whitespace_only.yml": {"(document)": ("empty", "!syntax")},
    "document_marker_only.yml": {"(document)": ("empty", "!top level")},
    "deep_nesting.yml": {"(document)": ("64 levels", "limit", "!syntax")},
    "address_credentials.yml": {
        "hosts.gpu01.address": ("credentials", "`user:`", "SSH key", "!IPv6"),
        "hosts.gpu02.address": ("URL", "`user:`", "`port:`", "!IPv6"),
        "hosts.gpu03.user": ("user:password",),
        "settings.proxy.http": ("http(s)",),
        "settings.proxy.https": ("does not expand", "{env: NAME}"),
        "ssh.become_password": ("not an environment variable name", "never its value"),
    },
    "address_forms.yml": {
        "hosts.gpu01.address": ("host:port", "`port: 2222`", "!IPv6"),
        "hosts.gpu02.address": ("user@host", "`user:`", "ssh.user"),
        "hosts.gpu03.address": ("[address]:port", "`port: 2200`"),
        "hosts.gpu04.address": ("host:port", "`port: 22`", "!RFC 1123"),
        "hosts.gpu05.address": ("URL", "`port:`"),
    },
    "address_unusable.yml": {
        "hosts.gpu01.address": ("unspecified", "SSH cannot connect"),
        "hosts.gpu02.address": ("unspecified",),
        "hosts.gpu03.address": ("broadcast",),
        "hosts.gpu04.address": ("multicast",),
        "hosts.gpu05.address": ("multicast",),
        "hosts.gpu06.address": ("unspecified",),
    },
    "duplicate_ipv4_mapped.yml": {"hosts.gpu02.address": ("the same address as 10.0.0.11", "'gpu01'")},
    "host_named_like_group.yml": {"hosts.a100": ("name of a group", "--limit a100", "rename")},
    "dcgm_exporter_mismatch.yml": {
        "groups.hgx.settings.monitoring.dcgm_exporter_version": (
            "host gpu01", "built for DCGM 3.3.5", "runs DCGM 3.3.7", "API version mismatch", "3.3.7-<exporter"),
        "hosts.gpu03.settings.monitoring.dcgm_exporter_version": ("runs DCGM 3.3.5", "role's default"),
        "hosts.gpu04.settings.monitoring.dcgm_exporter_version": ("<dcgm version>-<exporter version>",),
    },
    "mig_profile_of_another_model.yml": {
        "settings.mig.layouts.split[0].mig_devices.3g.40gb": (
            "not one of A100-SXM4-40GB's", "A100-SXM4-80GB", "3g profile of A100-SXM4-40GB: 3g.20gb"),
        "hosts.gpu02.settings.mig.layouts.x[0].mig_devices.1g.20gb": ("1g.5gb, 1g.5gb+me, 1g.10gb",),
    },
    "mig_layout_too_big.yml": {
        "groups.h100.settings.mig.layouts.twice[0].mig_devices": ("host gpu01", "14 compute slices", "has 7"),
        "groups.h100.settings.mig.layouts.mem[0].mig_devices": ("9 memory slices", "has 8"),
        "groups.h100.settings.mig.layouts.media[0].mig_devices.1g.10gb+me": ("at most 1",),
    },
    "mig_unknown_profile.yml": {
        "settings.mig.layouts.all-1g[0].mig_devices.1g.11gb": ("unknown MIG profile", "did you mean '1g.18gb'"),
        "settings.mig.layouts.spare": ("fits none", "H200: MIG profile '1g.10gb' is not one of H200's"),
    },
    "gpu_model_family.yml": {
        "settings.gpus.model": ("unknown GPU model 'h100'", "names several", "H100-NVL, H100-PCIe, H100-SXM5-80GB"),
    },
    "bios_check_pcie_link.yml": {
        "settings.bios_check.pcie_width": ("12 is not one of 1, 2, 4, 8, 16",),
        "settings.bios_check.pcie_gen": ("7 is not one of auto, 1, 2, 3, 4, 5, 6",),
        "hosts.gpu01.settings.bios_check.pcie_width": ("a boolean",),
        "hosts.gpu01.settings.bios_check.pcie_gen": ("without quotes: 4",),
    },
    "image_workers_mps_bare_off.yml": {
        "settings.image_workers.mps": ("a boolean", "quote it: 'off'", "!use one of"),
        "groups.gpu.settings.image_workers.mps": ("quote it: 'on'",),
    },
}
#: credentials written into fields (address_credentials.yml) and the parts around them
NEVER_PRINTED: dict[str, tuple[str, ...]] = {
    "address_credentials.yml": ("s3cret", "hunter2", "toor", "pa55w0rd", "Tr0ub4dor", "admin:", "deploy"),
}


def test_there_are_enough_bad_files() -> None:
    assert len(BAD) >= 30
    assert {*MESSAGES, *NEVER_PRINTED} <= {p.name for p in BAD}


@pytest.mark.parametrize("name", sorted({*MESSAGES, *NEVER_PRINTED}))
def test_bad_file_says_what_is_wrong_and_how_to_fix_it(name: str) -> None:
    path = DATA / "bad" / name
    with pytest.raises(FleetValidationError) as info:
        load_fleet(path)
    texts: dict[str, list[str]] = {}
    for problem in info.value.problems:
        texts.setdefault(problem.path, []).append(f"{problem.problem} - {problem.fix}")
    for field, words in MESSAGES.get(name, {}).items():
        want = [w for w in words if not w.startswith("!")]
        banned = [w[1:] for w in words if w.startswith("!")]
        assert any(all(w in t for w in want) and not any(b in t for b in banned) for t in texts.get(field, [])), (
            f"{name}: no problem at {field} says {words}; got {texts.get(field)}")
    for secret in NEVER_PRINTED.get(name, ()):
        for problem in info.value.problems:
            assert secret not in str(problem), f"{name}: {secret!r} printed in {problem}"


@pytest.mark.parametrize("path", BAD, ids=lambda p: p.name)
def test_bad_file_reports_each_expected_field_on_its_line(path: Path) -> None:
    with pytest.raises(FleetValidationError) as info:
        load_fleet(path)
    got = {(p.path, p.line) for p in info.value.problems}
    for field, line in expectations(path).items():
        assert (field, line) in got, f"{path.name}: want {field} at line {line}, got {sorted(got)}"
    for problem in info.value.problems:
        assert str(problem).startswith(f"{path}:{problem.line}: {problem.path}: ")
        assert " - " in str(problem)


@pytest.mark.parametrize("path", [*GOOD, EXAMPLE], ids=lambda p: p.name)
def test_good_files_validate(path: Path) -> None:
    fleet = load_fleet(path)
    assert fleet.hosts
    for host in fleet.hosts.values():
        assert host.settings["driver"]["branch"] != "auto"
        assert host.settings["driver"]["flavour"] in ("open", "proprietary")


MIG_FLEET = """version: 1
settings:
  os: ubuntu2204
  gpus: {model: %s, count: 8}
  mig:
    layouts:
      a100-40: [{devices: all, mig_devices: {"1g.10gb": 2, "3g.20gb": 1}}]
      a100-80: [{devices: all, mig_devices: {"1g.10gb": 7}}]
      mixed: [{devices: all, mig_devices: {"4g.40gb": 1, "2g.20gb": 1, "1g.10gb": 1}}]
hosts:
  gpu01: {address: 10.0.0.11%s}
  gpu02: {address: 10.0.0.12, settings: {gpus: {model: A100-SXM4-40GB}}}
"""


@pytest.mark.parametrize(("model", "extra"), [("A100-SXM4-80GB", ", settings: {mig: {layout: mixed}}"),
                                              ("H100-SXM5-80GB", ", settings: {mig: {layout: a100-80}}")])
def test_layouts_for_several_models_in_one_fleet_are_fine(model: str, extra: str) -> None:
    """Each defined layout needs to fit one GPU model of the hosts that have it, the used one its host's."""
    assert len(_fleet(MIG_FLEET % (model, extra)).hosts) == 2


def test_a_layout_no_mig_host_could_apply_is_refused() -> None:
    """gpu01 is a T4 (no MIG), so only gpu02's A100-SXM4-40GB could apply the layouts: two of them do not fit it."""
    with pytest.raises(FleetValidationError) as info:
        _fleet(MIG_FLEET % ("T4", ""))
    got = {p.path: p.problem for p in info.value.problems}
    assert set(got) == {"settings.mig.layouts.a100-80", "settings.mig.layouts.mixed"}
    assert "7 x 1g.10gb: at most 4 fit one A100-SXM4-40GB" in got["settings.mig.layouts.a100-80"]


def test_a_used_layout_must_fit_its_host_even_if_it_fits_another() -> None:
    with pytest.raises(FleetValidationError) as info:
        _fleet(MIG_FLEET % ("A100-SXM4-80GB", ", settings: {mig: {layout: a100-40}}"))
    [problem] = info.value.problems
    assert problem.path == "settings.mig.layouts.a100-40[0].mig_devices.3g.20gb" and "host gpu01" in problem.problem


def _fleet(text: str) -> Fleet:
    return validate_loaded(load_text(text, "t.yml"), Path("t.yml"))


BASE = "version: 1\nsettings: {os: ubuntu2204, gpus: {model: %s, count: 8}}\nhosts:\n  h: {address: 10.0.0.1%s}\n"


@pytest.mark.parametrize(
    ("model", "extra", "flavour"),
    [
        ("V100-SXM2-32GB", "", "proprietary"),
        ("B200", "", "open"),
        ("A100-SXM4-80GB", ', settings: {driver: {branch: "535"}}', "open"),
        ("RTX-3090", ', settings: {driver: {branch: "535"}}', "proprietary"),
        ("RTX-3090", "", "open"),
    ],
)
def test_flavour_auto_resolution(model: str, extra: str, flavour: str) -> None:
    host = _fleet(BASE % (model, extra)).hosts["h"]
    assert host.settings["driver"]["flavour"] == flavour
    [reason] = [r.reason for r in host.resolutions if r.field == "driver.flavour"]
    assert reason


def test_auto_branch_respects_os_and_cuda() -> None:
    text = BASE.replace("ubuntu2204", "ubuntu2004") % ("A100-SXM4-80GB", "")
    text = text.replace("count: 8}", "count: 8}, cuda: {version: \"12.4\"}")
    host = _fleet(text).hosts["h"]
    assert host.settings["driver"]["branch"] == "570"  # 580 is not published for 20.04
    assert host.settings["gpus"]["count"] == 8


def test_minor_compat_is_a_note_not_an_error() -> None:
    text = (BASE % ("L4", ', settings: {driver: {branch: "535"}}')).replace(
        "count: 8}", 'count: 8}, cuda: {version: "12.4"}')
    host = _fleet(text).hosts["h"]
    assert any("minor-version compatibility" in n for n in host.notes)


def test_connection_uses_ssh_defaults_and_env_password() -> None:
    fleet = _fleet("version: 1\nssh: {user: ops, port: 2200, become_password: {env: PW}}\n"
                   "settings: {os: debian12, gpus: {model: L40S, count: 4}}\n"
                   "hosts:\n  a: {address: a.example.com}\n  b: {address: b.example.com, port: 22, user: root}\n")
    a, b = fleet.hosts["a"].connection, fleet.hosts["b"].connection
    assert (a.port, a.user, a.become_password_env) == (2200, "ops", "PW")
    assert (b.port, b.user) == (22, "root")


def test_hundred_hosts_validate(tmp_path: Path) -> None:
    """100 hosts in one group validate and each gets the group's settings (the time it takes is measured by
    benchmarks/validate_bench.py, docs/benchmarks.md, not asserted here)."""
    hosts = {f"gpu{i:03d}": {"address": f"10.0.{i // 200}.{i % 200 + 1}", "groups": ["hgx"]} for i in range(100)}
    doc = {"version": 1, "settings": {"os": "ubuntu2204", "cuda": {"version": "12.8"}},
           "groups": {"hgx": {"settings": {"gpus": {"model": "H200", "count": 8, "nvswitch": True}}}},
           "hosts": hosts}
    path = tmp_path / "big.yml"
    path.write_text(yaml.safe_dump(doc))
    fleet = load_fleet(path)
    assert len(fleet.hosts) == 100
    assert {h.settings["gpus"]["count"] for h in fleet.hosts.values()} == {8}


# -- property tests: any input yields a Fleet or FleetValidationError, nothing else ------------------
VALID: dict[str, Any] = yaml.safe_load((DATA / "good" / "mixed_generations.yml").read_text())
scalars = st.one_of(st.none(), st.booleans(), st.integers(-10, 70000), st.floats(allow_nan=False),
                    st.text(max_size=12), st.sampled_from(["auto", "open", "12.4", "580", "all", "H100-PCIe"]))
values = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=8), inner, max_size=3)), max_leaves=8)


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(node, dict):
        for key, value in node.items():
            out += _paths(value, (*prefix, key))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            out += _paths(value, (*prefix, index))
    return out


@st.composite
def mutated(draw: st.DrawFn) -> Any:
    doc = yaml.safe_load(yaml.safe_dump(VALID))
    for _ in range(draw(st.integers(1, 4))):
        paths = [p for p in _paths(doc) if p]
        if not paths or not isinstance(doc, dict):
            break
        path = draw(st.sampled_from(paths))
        parent = doc
        for key in path[:-1]:
            parent = parent[key]
        action = draw(st.sampled_from(["replace", "delete", "add"]))
        if action == "replace":
            parent[path[-1]] = draw(values)
        elif action == "delete" and isinstance(parent, dict):
            del parent[path[-1]]
        elif isinstance(parent, dict):
            parent[draw(st.text(max_size=10))] = draw(values)
    return doc


def _check(text: str | bytes) -> None:
    try:
        validate_loaded(load_text(text, "h.yml"), Path("h.yml"))
    except FleetValidationError as exc:
        assert exc.problems
        for problem in exc.problems:
            assert str(problem).startswith("h.yml:")


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated())
def test_mutations_of_a_valid_file_never_crash(doc: Any) -> None:
    _check(yaml.safe_dump(doc, allow_unicode=True))


@settings(max_examples=100, deadline=None)
@given(st.one_of(values, st.text(max_size=200), st.binary(max_size=200)))
def test_random_documents_never_crash(value: Any) -> None:
    _check(value if isinstance(value, str | bytes) else yaml.safe_dump(value, allow_unicode=True))
