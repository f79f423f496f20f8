"""benchmarks/images_e2e.py on a CPU at CI size: it makes distinct files, runs the real ``gpuprov images`` commands
as processes and reports the run, its start-up and the baselines; and its JPEG comment keeps the pixels."""

from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")
pytest.importorskip("torchvision")
from PIL import Image

from gpuprov.images.stages import STAGE_KEYS
from gpuprov.images.startup import PHASES

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "benchmarks" / "images_e2e.py"


@pytest.fixture(scope="module")
def e2e() -> Any:
    sys.path.insert(0, str(BENCH.parent))
    try:
        import images_e2e
    finally:
        sys.path.remove(str(BENCH.parent))
    return images_e2e


def _jpegs(folder: Path, count: int) -> list[Path]:
    folder.mkdir()
    paths = []
    for i in range(count):
        paths.append(folder / f"{i}.jpg")
        Image.new("RGB", (48 + 8 * i, 40), (40 * i, 120, 200)).save(paths[-1], "JPEG", quality=90,
                                                                    progressive=i == 2)  # fmt: skip
    return paths


def test_copies_differ_in_bytes_and_decode_to_the_same_pixels(
    e2e: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sources = _jpegs(tmp_path / "src", 3)
    monkeypatch.setattr(e2e, "FILES_PER_FOLDER", 3)  # three folders, written by three threads
    copies = e2e.distinct_jpegs(sources, 7, tmp_path / "out")
    assert [p.relative_to(tmp_path / "out").as_posix() for p in copies] == [
        f"d{i // 3:03d}/{i:07d}.jpg" for i in range(7)
    ]
    assert sorted(p.relative_to(tmp_path / "out").as_posix() for p in (tmp_path / "out").rglob("*.jpg")) == [
        p.relative_to(tmp_path / "out").as_posix() for p in copies
    ]
    assert len({hashlib.sha256(p.read_bytes()).hexdigest() for p in copies}) == 7
    for i, copy in enumerate(copies):
        with Image.open(sources[i % 3]) as want, Image.open(io.BytesIO(copy.read_bytes())) as got:
            assert got.tobytes() == want.tobytes()
            assert got.info.get("comment") == f"gpuprov-e2e copy {i}".encode()
    assert copies[0].read_bytes()[2:4] == b"\xff\xe0", "the JFIF APP0 segment stays first"
    with pytest.raises(ValueError, match="not a JPEG"):
        e2e.with_comment(b"\x89PNG\r\n", b"x")


def test_a_cpu_run_reports_rates_start_up_and_baselines(tmp_path: Path) -> None:
    import torch

    _jpegs(tmp_path / "data", 4)
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3, stride=8), torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(),
                              torch.nn.Linear(4, 10)).eval()  # fmt: skip
    torch.jit.save(torch.jit.trace(net, torch.randn(1, 3, 224, 224)), str(tmp_path / "tiny.pt"))
    out = tmp_path / "e2e.json"
    proc = subprocess.run(
        [sys.executable, str(BENCH), "--data", str(tmp_path / "data"), "--images", "64", "--model",
         str(tmp_path / "tiny.pt"), "--gpus", "cpu", "--naive-images", "8", "--workers", "0", "--work", str(tmp_path),
         "--compile", "off", "--json", str(out)],
        capture_output=True, text=True, check=False, timeout=300, cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    res = json.loads(out.read_text())
    assert (res["images"], res["run"]["rows"], res["run"]["images"], res["distinct_sha256"]) == (64, 64, 64, 64)
    assert res["end_to_end"] > 0 and res["wall_s"] > res["startup"]["last_ready_s"]
    (worker,) = res["run"]["workers"]
    assert worker["device"] == "cpu" and list(worker["startup_s"]) == list(PHASES)
    assert (res["compile"], res["model_format"], res["settings"]["compile"]) == ("off", "torchscript", "off")
    assert res["compiled"] == {"off (--compile off)": 1} and res["settings"]["procs_per_gpu"] == 1
    assert list(res["startup"]["phases_s"]) == list(PHASES)
    assert res["startup"]["forked"] == 0 and "0 forked by the fork server" in proc.stdout  # the tests keep none warm
    ending = res["startup"]["ending_s"]
    assert set(ending) == {"workers_exited", "mps_stopped", "manifest_written"}, ending
    assert list(ending.values()) == sorted(ending.values()) and "workers exited" in proc.stdout
    assert list(res["startup"]["first_batch_s"]) == list(STAGE_KEYS) and "first batch, seconds per stage" in proc.stdout
    assert not any(key.startswith(("sm", "jpg")) for key in res["util"]), "no GPU: nothing sampled from NVML"
    assert set(res["baselines"]) == {"naive", "dataloader"} and all(v > 0 for v in res["baselines"].values())
    assert {"end_to_end/naive", "end_to_end/dataloader"} <= set(res["ratios"])
    assert "GPU utilisation: not sampled" in proc.stdout and "end to end" in proc.stdout
    assert [p.name for p in tmp_path.iterdir() if p.is_dir()] == ["data"], "the work folder was removed"


def test_spread_takes_every_stage_any_worker_names_and_skips_workers_without_them(e2e: Any) -> None:
    workers = [{"first_batch_s": {"decode_s": 2.0}}, {"first_batch_s": {"claim_s": 0.1, "decode_s": 4.0}},
               {"first_batch_s": None}, {}]  # fmt: skip  (the last two: reports from before the field)
    assert e2e._spread(workers, "first_batch_s") == {"decode_s": {"median": 3.0, "max": 4.0},
                                                     "claim_s": {"median": 0.1, "max": 0.1}}  # fmt: skip
    assert e2e._spread(workers, "first_batch_s", ["claim_s", "read_s"]) == {"claim_s": {"median": 0.1, "max": 0.1}}
    assert e2e._spread([], "first_batch_s") == {}


def test_the_gpuprov_commands_get_the_environment_from_before_torch_was_imported(tmp_path: Path) -> None:
    """Importing torchvision sets TORCHINDUCTOR_CACHE_DIR; a run launched with it would key another fork server and
    compile cache than a user's shell does."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TORCHINDUCTOR")}
    code = "import json, images_e2e; print(json.dumps(images_e2e.LAUNCH_ENV))"
    proc = subprocess.run([sys.executable, "-c", code], cwd=BENCH.parent, env=env, capture_output=True, text=True,
                          check=False, timeout=120)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout) == env


@pytest.mark.parametrize("bad", [["--workers", "-1"], ["--baselines", "bogus"], ["--baselines", ""],
                                 ["--naive-images", "-1"], ["--batch", "0"], ["--batch", "abc"], ["--threads", "0"],
                                 ["--procs-per-gpu", "0"], ["--json", "/proc/e2e.json"], ["--json", "."],
                                 ["--compile", "max"], ["--export"]])
def test_bad_arguments_stop_before_any_work(e2e: Any, bad: list[str], tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    """Each is a usage error (exit 2) at parse time, before files are made or the model built; an unwritable --json
    would otherwise lose the results at the end."""
    model = tmp_path / "m.pt"
    model.write_bytes(b"")
    _jpegs(tmp_path / "data", 1)
    with pytest.raises(SystemExit) as stop:
        e2e.parse_args(["--model", str(model), "--data", str(tmp_path / "data"), *bad])
    assert stop.value.code == 2
    assert bad[0] in capsys.readouterr().err


def test_both_baselines_means_naive_and_dataloader(e2e: Any, tmp_path: Path) -> None:
    model = tmp_path / "m.pt"
    model.write_bytes(b"")
    _jpegs(tmp_path / "data", 1)
    args = e2e.parse_args(["--model", str(model), "--data", str(tmp_path / "data"), "--baselines", "both"])
    assert args.baselines == "naive,dataloader"
