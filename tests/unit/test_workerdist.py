"""The worker distribution (gpuprov.workerdist): a valid, reproducible wheel whose modules need nothing of the
controller, whose ``gpuprov`` command runs with only its declared requirements importable, and which
``gpuprov apply`` builds and hands to the image_workers role when the fleet enables the workers."""

from __future__ import annotations

import ast
import base64
import hashlib
import importlib
import importlib.metadata
import io
import re
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest
import tomllib
import yaml
from rich.console import Console

import gpuprov
from gpuprov import engine, workerdist
from gpuprov.engine import ApplyOptions

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data"
CONTROLLER_ONLY = {"ansible", "ansible_runner", "ansible_collections", "pydantic", "rich", "docker", "yaml",
                   "jinja2", "debian", "psutil"}  # fmt: skip


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return workerdist.build_worker_wheel(tmp_path_factory.mktemp("worker"))


def _metadata(wheel: Path) -> list[tuple[str, str]]:
    with zipfile.ZipFile(wheel) as zf:
        text = zf.read(f"gpuprov_worker-{gpuprov.__version__}.dist-info/METADATA").decode()
    return [tuple(line.split(": ", 1)) for line in text.splitlines() if ": " in line]  # type: ignore[misc]


def _name(requirement: str) -> str:
    return re.sub(r"[-_.]+", "-", re.match(r"[A-Za-z0-9._-]+", requirement).group(0)).lower()  # type: ignore[union-attr]


def test_wheel_record_lists_every_file_with_its_hash(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as zf:
        assert zf.testzip() is None
        names = set(zf.namelist())
        record = zf.read(f"gpuprov_worker-{gpuprov.__version__}.dist-info/RECORD").decode().splitlines()
        rows = [line.rsplit(",", 2) for line in record]
        assert {r[0] for r in rows} == names
        for path, digest, size in rows:
            if path.endswith("RECORD"):
                assert (digest, size) == ("", "")
                continue
            data = zf.read(path)
            expected = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            assert digest == f"sha256={expected}" and int(size) == len(data), path
    assert wheel.name == f"gpuprov_worker-{gpuprov.__version__}-py3-none-any.whl"


def test_wheel_is_reproducible(wheel: Path, tmp_path: Path) -> None:
    assert workerdist.build_worker_wheel(tmp_path).read_bytes() == wheel.read_bytes()


def _compact(requirement: str) -> str:
    """A requirement without spaces, parentheses or double quotes, to compare two spellings of one."""
    name = _name(requirement)
    rest = requirement.split("#", maxsplit=1)[0][len(re.match(r"[A-Za-z0-9._-]+", requirement).group(0)):]  # type: ignore[union-attr]
    return name + re.sub(r"[\s()]", "", rest).replace('"', "'")


def test_requirements_are_the_images_extra_and_the_runtime_needs_with_gpuprovs_pins(wheel: Path) -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    needs = {workerdist._normalise(n) for n in workerdist.RUNTIME_NEEDS}
    expected = {_compact(r) for r in project["optional-dependencies"]["images"]}
    expected |= {_compact(r) for r in project["dependencies"] if _name(r) in needs}
    requires = [v for k, v in _metadata(wheel) if k == "Requires-Dist"]
    assert {_compact(r) for r in requires} == expected
    assert ("Name", "gpuprov-worker") in _metadata(wheel)


def test_worker_modules_import_nothing_of_the_controller(wheel: Path) -> None:
    """Every ``gpuprov.*`` import in the wheel resolves inside the wheel; every other import is the standard
    library or a module of a declared requirement (torchvision's own numpy and Pillow included)."""
    with zipfile.ZipFile(wheel) as zf:
        sources = {n: zf.read(n).decode() for n in zf.namelist() if n.endswith(".py")}
    modules = {n[:-3].replace("/", ".").removesuffix(".__init__") for n in sources}
    declared = {_name(v) for k, v in _metadata(wheel) if k == "Requires-Dist"} | {"numpy", "pillow"}
    by_module = importlib.metadata.packages_distributions()
    for name, text in sources.items():
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                targets = [node.module]
            else:
                continue
            for target in targets:
                top = target.split(".")[0]
                if top == "gpuprov":
                    assert target in modules or target.rsplit(".", 1)[0] in modules, f"{name}: {target}"
                elif top not in sys.stdlib_module_names and top != "__future__":
                    assert top not in CONTROLLER_ONLY, f"{name} imports {target}"
                    dists = {_name(d) for d in by_module.get(top, [])}
                    assert dists & declared, f"{name} imports {target} ({dists}), not a requirement of the worker"


def test_worker_command_runs_with_only_its_requirements(wheel: Path, tmp_path: Path) -> None:
    """The wheel's ``gpuprov`` command, with the standard library, click and redis on sys.path and nothing
    else (``python -S``), lists the images group alone and reaches the queue code."""
    with zipfile.ZipFile(wheel) as zf:
        zf.extractall(tmp_path / "site")
    for module in ("click", "redis"):
        origin = Path(str(importlib.import_module(module).__file__)).parent
        (tmp_path / "site" / module).symlink_to(origin)
    script = ("import sys; sys.path.insert(0, sys.argv[1]); from gpuprov.cli.__main__ import main; "
              "sys.exit(main(sys.argv[2:]))")  # fmt: skip

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-S", "-c", script, str(tmp_path / "site"), *args],
                              capture_output=True, text=True, timeout=60, check=False)  # fmt: skip

    listing = run("--help").stdout.split("Commands:")[1]
    assert [line.split()[0] for line in listing.splitlines() if line.strip()] == ["images"]
    missing = run("images", "status", "--queue", f"sqlite://{tmp_path}/none.db")
    assert missing.returncode == 2 and "no queue at" in missing.stderr, missing.stderr
    absent = run("validate", "x.yml")  # the controller's commands are not in the worker
    assert absent.returncode == 2 and "No such command 'validate'" in absent.stderr, absent.stderr


def test_role_installs_the_worker_of_this_version() -> None:
    defaults = yaml.safe_load((ROOT / "roles" / "image_workers" / "defaults" / "main.yml").read_text())
    assert defaults["image_workers_worker"] == f"{workerdist.DIST_NAME}=={gpuprov.__version__}"
    scenario = (ROOT / "molecule" / "image_workers" / "molecule.yml").read_text()
    assert f"gpuprov_worker-{gpuprov.__version__}-py3-none-any.whl" in scenario


class _Ran(Exception):
    pass


@pytest.mark.parametrize(("fleet", "built"), [("image_workers_cpu.yml", True), ("minimal.yml", False)])
def test_apply_builds_the_worker_wheel_when_the_fleet_enables_workers(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fleet: str, built: bool) -> None:  # fmt: skip
    requests: list[Any] = []

    def run_playbook(request: Any, on_event: Any = None) -> Any:
        requests.append(request)
        raise _Ran

    monkeypatch.setenv("GPUPROV_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setattr(engine, "run_playbook", run_playbook)
    options = ApplyOptions(fleet=DATA / "good" / fleet, roles=["image_workers"], check=True)
    with pytest.raises(_Ran):
        engine.execute(options, Console(file=io.StringIO()))
    wheel = requests[0].extravars.get(engine.WORKER_WHEEL_VAR)
    assert (wheel is not None) == built
    if built:
        assert Path(wheel).is_file() and Path(wheel).parent.parent == requests[0].run_dir
        assert zipfile.ZipFile(wheel).testzip() is None


def test_only_python_sources_of_the_members_go_into_the_wheel(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as zf:
        package = [n for n in zf.namelist() if n.startswith("gpuprov/")]
    assert package and all(n.endswith(".py") or n == "gpuprov/py.typed" for n in package), package


@pytest.mark.parametrize("args", [[], ["a", "b"], ["--help"], [""]])
def test_command_line_usage_errors_exit_2(args: list[str], tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "gpuprov.workerdist", *args], cwd=tmp_path, capture_output=True,
                          text=True, timeout=60, check=False)  # fmt: skip
    assert proc.returncode == 2 and proc.stderr.startswith("usage: python -m gpuprov.workerdist DIR"), proc.stderr
    assert list(tmp_path.iterdir()) == []


def test_a_file_as_the_folder_is_a_clear_error(tmp_path: Path) -> None:
    target = tmp_path / "file"
    target.write_text("x")
    proc = subprocess.run([sys.executable, "-m", "gpuprov.workerdist", str(target)], capture_output=True, text=True,
                          timeout=60, check=False)  # fmt: skip
    assert proc.returncode == 2 and f"{target} is not a folder" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.parametrize("given", ["/nonexistent/w.whl", "relative.whl"])
def test_a_named_wheel_that_is_not_an_absolute_file_stops_before_the_run(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, given: str) -> None:  # fmt: skip
    monkeypatch.chdir(tmp_path)
    (tmp_path / "relative.whl").write_text("x")
    monkeypatch.setenv("GPUPROV_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setattr(engine, "run_playbook", lambda *a, **k: pytest.fail("the run started"))
    options = ApplyOptions(fleet=DATA / "good" / "image_workers_cpu.yml", roles=["image_workers"],
                           extravars=[f"{engine.WORKER_WHEEL_VAR}={given}"])  # fmt: skip
    with pytest.raises(engine.ConfigError, match=f"-e {engine.WORKER_WHEEL_VAR}={given}: not an existing wheel"):
        engine.execute(options, Console(file=io.StringIO()))
    assert list((tmp_path / "state").rglob("*.yml")) == []  # no run record left behind
