"""The compiled model step (gpuprov.images.compiled): the choice of ``--compile``, the caches, the build lock, and
a model that runs eager when its compile fails. No real ``torch.compile`` here (minutes on a CPU): it is replaced by
a stand-in; the real compile is measured on a GPU (benchmarks/images_e2e.py --compile)."""

from __future__ import annotations

import fcntl
import logging
import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from gpuprov.exceptions import ConfigError
from gpuprov.images.compiled import build_lock, check_compile_option, compile_mode, configure_caches

CACHE_VARS = ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR", "TORCHINDUCTOR_FX_GRAPH_CACHE",
              "TORCHINDUCTOR_AUTOGRAD_CACHE")  # fmt: skip
TORCH = SimpleNamespace(compile=lambda *a, **k: None, __version__="2.14.1")


@pytest.mark.parametrize(
    ("requested", "device", "exported", "mode", "reason"),
    [
        ("auto", "cuda", True, "default", "auto on a GPU"),
        ("auto", "cpu", True, None, "a CPU run"),
        ("auto", "cuda", False, None, "not an exported .pt2 model"),
        ("off", "cuda", True, None, "--compile off"),
        ("default", "cuda", True, "default", "--compile default"),
        ("reduce-overhead", "cuda", True, "reduce-overhead", "--compile reduce-overhead"),
        ("default", "cpu", True, "default", "--compile default"),  # asked for by name: a CPU too
    ],
)
def test_compile_mode_by_option_device_and_model(
    requested: str, device: str, exported: bool, mode: str | None, reason: str
) -> None:
    choice = compile_mode(requested, device, exported, TORCH)
    assert (choice.mode, choice.requested, choice.reason) == (mode, requested, reason)


def test_a_torch_without_compile_runs_eager() -> None:
    choice = compile_mode("auto", "cuda", True, SimpleNamespace(__version__="1.13.1"))
    assert (choice.mode, choice.reason) == (None, "torch 1.13.1 has no torch.compile")


@pytest.mark.parametrize("model", [Path("m.pt"), Path("m.onnx"), None])
def test_a_named_mode_for_a_model_compile_cannot_take_is_a_usage_error(model: Path | None) -> None:
    with pytest.raises(ConfigError, match=r"--compile reduce-overhead: .* cannot be compiled; .*torch\.export"):
        check_compile_option("reduce-overhead", model)
    check_compile_option("auto", model)
    check_compile_option("off", model)
    check_compile_option("default", Path("m.pt2"))
    with pytest.raises(ConfigError, match="--compile fast: expected one of auto, off, default, reduce-overhead"):
        check_compile_option("fast", Path("m.pt2"))


def test_configure_caches_puts_every_cache_under_the_root_and_keeps_what_is_set(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in CACHE_VARS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("TRITON_CACHE_DIR", "/srv/triton")
    root = configure_caches(tmp_path / "cache")
    assert root.is_dir() and (root.stat().st_mode & 0o777) == 0o700
    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == str(root / "inductor")
    assert os.environ["TRITON_CACHE_DIR"] == "/srv/triton"  # the operator's setting wins
    assert os.environ["TORCHINDUCTOR_FX_GRAPH_CACHE"] == os.environ["TORCHINDUCTOR_AUTOGRAD_CACHE"] == "1"


def test_cache_root_follows_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from gpuprov.images.compiled import CACHE_ENV, cache_root

    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "g"))
    assert cache_root() == tmp_path / "g"
    monkeypatch.delenv(CACHE_ENV)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_root() == tmp_path / "xdg" / "gpuprov"


def test_the_build_lock_excludes_other_builders_until_released(tmp_path: Path) -> None:
    other = os.open(tmp_path / "compile.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        # another process (another open of the file) must wait
        with build_lock(tmp_path), pytest.raises(BlockingIOError):
            fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
        fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)  # released
    finally:
        os.close(other)


torch = pytest.importorskip("torch")


@pytest.fixture(scope="module")
def exported_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny classifier saved with torch.export (batch dimension dynamic), as a user exports one."""
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(),
                              torch.nn.Linear(4, 6)).eval()  # fmt: skip
    batch = torch.export.Dim("batch", min=1, max=4096)
    program = torch.export.export(net, (torch.randn(2, 3, 32, 32),), dynamic_shapes=({0: batch},))
    path = tmp_path_factory.mktemp("model") / "tiny.pt2"
    torch.export.save(program, str(path))
    return path


def _model_task(path: Path, compile: str) -> Any:
    from gpuprov.images.tasks import ModelTask

    return ModelTask(path, "cpu", size=32, compile=compile)


def test_an_exported_model_runs_compiled_at_the_full_batch_and_eager_at_other_sizes(
    exported_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gpuprov.images.compiled import CACHE_ENV

    monkeypatch.setenv(CACHE_ENV, str(tmp_path))
    calls: list[tuple[int, ...]] = []

    def fake_compile(module: Any, mode: str, dynamic: bool) -> Any:
        assert (mode, dynamic) == ("default", False)
        return lambda x: calls.append(tuple(x.shape)) or module(x)

    monkeypatch.setattr(torch, "compile", fake_compile)
    task = _model_task(exported_model, "default")
    assert task.compile_choice.mode == "default"
    task.build_compiled(4)
    assert task.compiled is not None and calls == [(4, 3, 32, 32)]  # built and run once, on zeros of the batch
    task.set_full_batch(4)
    full = torch.rand(4, 3, 32, 32)
    task.forward(full)
    task.forward(full[:3])  # a short batch, padded to 4: the compiled shape
    task.forward(torch.rand(8, 3, 32, 32))  # a size it was not built for: eager
    assert calls == [(4, 3, 32, 32)] * 3


def test_a_compile_that_fails_logs_one_line_and_the_model_runs_eager(
    exported_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from gpuprov.images.compiled import CACHE_ENV
    from gpuprov.images.worker import compile_report

    monkeypatch.setenv(CACHE_ENV, str(tmp_path))

    def broken_compile(module: Any, mode: str, dynamic: bool) -> Any:
        def run(x: Any) -> Any:
            raise RuntimeError("no working C++ compiler found\nmore detail")

        return run

    monkeypatch.setattr(torch, "compile", broken_compile)
    task = _model_task(exported_model, "reduce-overhead")
    eager = task.forward(torch.rand(2, 3, 32, 32) * 0)
    with caplog.at_level(logging.WARNING, logger="gpuprov.images.compiled"):
        task.build_compiled(2)
    assert task.compiled is None
    assert [r.getMessage() for r in caplog.records] == [
        "torch.compile (mode reduce-overhead) failed, running the model uncompiled: "
        "RuntimeError: no working C++ compiler found"
    ]
    assert compile_report(task) == {"mode": None, "requested": "reduce-overhead",
                                    "reason": "failed: RuntimeError: no working C++ compiler found"}  # fmt: skip
    assert torch.equal(task.forward(torch.rand(2, 3, 32, 32) * 0), eager)


def test_auto_on_a_cpu_loads_the_exported_model_and_does_not_compile(
    exported_model: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(torch, "compile", lambda *a, **k: pytest.fail("compiled on a CPU under --compile auto"))
    task = _model_task(exported_model, "auto")
    task.build_compiled(4)
    assert (task.compiled, task.compile_choice.reason) == (None, "a CPU run")
    assert tuple(task.forward(torch.rand(3, 3, 32, 32)).shape) == (3, 6)


def test_warm_builds_the_compiled_step_as_a_worker_would(
    exported_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from gpuprov.cli.__main__ import main
    from gpuprov.images.compiled import CACHE_ENV

    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    for name in CACHE_VARS:
        monkeypatch.delenv(name, raising=False)
    built: list[tuple[int, ...]] = []

    def fake_compile(module: Any, mode: str, dynamic: bool) -> Any:
        return lambda x: built.append(tuple(x.shape)) or module(x)

    monkeypatch.setattr(torch, "compile", fake_compile)
    record = tmp_path / "warm.done"
    code = main(["images", "warm", "--model", str(exported_model), "--gpus", "cpu", "--size", "32", "--batch", "4",
                 "--compile", "default", "--record", str(record)])  # fmt: skip
    assert code == 0
    out = capsys.readouterr().out
    assert "cpu0: tiny.pt2 on cpu batch 4, compile default; ready in" in out, out
    assert record.read_text() == out
    assert built == [(4, 3, 32, 32)]
    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == str(tmp_path / "cache" / "inductor")


def test_warm_autotunes_as_the_follow_services_it_builds_for(
    exported_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The batch probe's record is kept per autotune choice: warm must choose as the services do, or they probe."""
    from gpuprov.cli.__main__ import main
    from gpuprov.images import tasks, worker
    from gpuprov.images.compiled import CACHE_ENV
    from gpuprov.images.tasks import CUDNN_AUTOTUNE_ENV

    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    for name in (*CACHE_VARS, CUDNN_AUTOTUNE_ENV):
        monkeypatch.delenv(name, raising=False)
    made: list[Any] = []

    def make_task(*args: Any, **kwargs: Any) -> Any:
        made.append(tasks.make_task(*args, **kwargs))
        return made[-1]

    monkeypatch.setattr(worker, "make_task", make_task)
    args = ["images", "warm", "--model", str(exported_model), "--gpus", "cpu", "--size", "32", "--batch", "4",
            "--compile", "off"]  # fmt: skip
    assert main(args) == 0
    monkeypatch.setenv(CUDNN_AUTOTUNE_ENV, "0")
    assert main(args) == 0
    assert [task.autotune for task in made] == [True, False]
    assert made[0].probe_key != made[1].probe_key


def test_warm_refuses_a_named_mode_for_torchscript(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from gpuprov.cli.__main__ import main

    model = tmp_path / "m.pt"
    model.write_bytes(b"not read")
    assert main(["images", "warm", "--model", str(model), "--gpus", "cpu", "--compile", "default"]) == 2
    err = capsys.readouterr().err
    assert "--compile default: --model" in err and "Traceback" not in err


def test_after_a_first_build_the_lock_lets_the_others_load_side_by_side(tmp_path: Path) -> None:
    other = os.open(tmp_path / "compile.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        with pytest.raises(RuntimeError), build_lock(tmp_path, "k1"):
            raise RuntimeError("the first build failed")
        assert not (tmp_path / "built-k1").exists()  # a failed build marks nothing: the next one queues again
        with build_lock(tmp_path, "k1"), pytest.raises(BlockingIOError):
            fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
        assert (tmp_path / "built-k1").exists()
        with build_lock(tmp_path, "k1"):  # built before: the lock is not held while it loads from the cache
            fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
            fcntl.flock(other, fcntl.LOCK_UN)
        with build_lock(tmp_path, "k2"), pytest.raises(BlockingIOError):  # another model or shape: queues
            fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
    finally:
        os.close(other)
