"""What ``gpuprov images run`` reports of a run: each worker's start-up line, the summary and ``--json``."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

pytest.importorskip("torch")
from PIL import Image

from gpuprov.cli.__main__ import main
from gpuprov.images.stages import STAGE_KEYS
from gpuprov.images.startup import PHASES


def _queue(tmp_path: Path, count: int) -> str:
    folder = tmp_path / "in"
    folder.mkdir()
    for i in range(count):
        Image.new("RGB", (40 + i, 30), (i * 60, 90, 30)).save(folder / f"{i}.png")
    url = f"sqlite:///{tmp_path / 'q.db'}"
    assert main(["images", "submit", str(folder), "--queue", url]) == 0
    return url


def test_run_prints_each_workers_start_up_and_writes_the_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = _queue(tmp_path, 3)
    capsys.readouterr()
    report_path = tmp_path / "run.json"
    run = ["images", "run", "--queue", url, "--gpus", "cpu", "--task", "stats", "--out", str(tmp_path / "o"),
           "--json", str(report_path)]  # fmt: skip
    assert main(run) == 0
    captured = capsys.readouterr()
    (line,) = [x for x in captured.err.splitlines() if "cpu0: worker on cpu batch 32; ready in" in x]
    assert all(re.search(rf"\b{phase} [0-9]+\.[0-9]\b", line) for phase in PHASES), line
    cpus = len(os.sched_getaffinity(0))
    threads = max(1, min(4, cpus))  # the rule's CPU mode: clamp(cpus // cpu_workers, 1, 4)
    (settings_line,) = [x for x in captured.err.splitlines() if " settings: " in x]
    assert settings_line.endswith(f"settings: {threads} decode threads (auto), batch auto, compile auto; {cpus} CPUs, "
                                  "no GPU"), settings_line  # fmt: skip
    assert "3 rows in" in captured.out and "first result after" in captured.out
    report = json.loads(report_path.read_text())
    assert (report["rows"], report["failed"], report["dead"], report["images"]) == (3, 0, 0, 3)
    (worker,) = report["workers"]
    assert (worker["slot"], worker["device"], worker["done"], worker["compile"]) == ("cpu0", "cpu", 3, None)
    assert report["settings"] == {"procs_per_gpu": 1, "threads": threads, "batch": "auto", "compile": "auto",
                                  "chosen": {"procs_per_gpu": "auto", "threads": "auto"}, "cpus": cpus, "gpus": 0,
                                  "gpus_on_cpus": 0, "gpu_memory_bytes": None,
                                  "cudnn_autotune": False, "mps": "off (no GPU)"}  # fmt: skip
    assert list(worker["startup_s"]) == list(PHASES) and all(s >= 0 for s in worker["startup_s"].values())
    # the worker was spawned after the run began, reported ready, then sent its first result
    assert worker["spawned_s"] >= 0
    assert worker["spawned_s"] + worker["ready_s"] <= worker["first_result_s"] + 0.002  # rounded to 1 ms each
    assert report["first_result_s"] == worker["first_result_s"] <= report["last_result_s"] <= report["wall_s"]
    # the first batch's way through the stages: every stage timed, the decode and the task took time
    assert list(worker["first_batch_s"]) == list(STAGE_KEYS), worker["first_batch_s"]
    assert worker["first_batch_s"]["decode_s"] > 0 and worker["first_batch_s"]["task_s"] > 0
    # the end, in order: the workers exited (after the last result), the MPS daemon (none here) was stopped, the
    # manifest written, all before the report
    ending = report["ending_s"]
    assert set(ending) == {"workers_exited", "mps_stopped", "manifest_written"}, ending
    assert list(ending.values()) == sorted(ending.values()), "in the order they came"
    # the manifest is written once every worker has committed, while their processes may still be ending
    assert report["last_result_s"] <= ending["manifest_written"] <= report["wall_s"]
    assert report["last_result_s"] <= ending["workers_exited"] <= ending["mps_stopped"] <= report["wall_s"]


@pytest.mark.parametrize("where", ["folder", "missing-parent", "proc"])
def test_a_json_path_that_cannot_be_written_exits_2_before_any_worker(
    where: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = _queue(tmp_path, 1)
    capsys.readouterr()
    # /proc: a folder whose permission bits say root may write, where no file can be made
    path = {"folder": tmp_path, "missing-parent": tmp_path / "no" / "run.json", "proc": Path("/proc/run.json")}[where]
    run = ["images", "run", "--queue", url, "--gpus", "cpu", "--task", "stats", "--out", str(tmp_path / "o"),
           "--json", str(path)]  # fmt: skip
    assert main(run) == 2
    err = capsys.readouterr().err
    assert f"--json {path}:" in err and "Traceback" not in err, err
    assert not (tmp_path / "o").exists(), "nothing ran: the output folder was not even made"


@pytest.mark.parametrize(("value", "follow", "expected"), [("", False, False), ("", True, True), ("1", False, True),
                                                           ("0", True, False), (" 1 ", False, True)])  # fmt: skip
def test_cudnn_autotune_follows_the_variable_else_whether_the_run_is_a_service(
    value: str, follow: bool, expected: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gpuprov.images.tasks import CUDNN_AUTOTUNE_ENV, cudnn_autotune

    monkeypatch.setenv(CUDNN_AUTOTUNE_ENV, value)
    assert cudnn_autotune(follow) is expected


@pytest.mark.parametrize("value", ["true", "yes", "01", "\u0661", "\uff11", "1 0", "-1"])  # int() takes some
def test_cudnn_autotune_takes_only_the_ascii_digits_0_and_1(value: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from gpuprov.exceptions import ConfigError
    from gpuprov.images.tasks import CUDNN_AUTOTUNE_ENV, cudnn_autotune

    monkeypatch.setenv(CUDNN_AUTOTUNE_ENV, value)
    with pytest.raises(ConfigError, match=f"{CUDNN_AUTOTUNE_ENV}=.*use 1 .* or 0"):
        cudnn_autotune(True)


def test_a_bad_cudnn_autotune_value_exits_2_naming_it_before_any_worker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from gpuprov.images.tasks import CUDNN_AUTOTUNE_ENV

    url = _queue(tmp_path, 1)
    capsys.readouterr()
    monkeypatch.setenv(CUDNN_AUTOTUNE_ENV, "yes")
    run = ["images", "run", "--queue", url, "--gpus", "cpu", "--task", "stats", "--out", str(tmp_path / "o")]
    assert main(run) == 2
    err = capsys.readouterr().err
    assert f"{CUDNN_AUTOTUNE_ENV}='yes'" in err and "Traceback" not in err, err
    assert not (tmp_path / "o" / "manifest.jsonl").exists()


def test_json_reports_no_cudnn_autotuning_for_a_run_without_gpus(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from gpuprov.images.tasks import CUDNN_AUTOTUNE_ENV

    url = _queue(tmp_path, 1)
    monkeypatch.setenv(CUDNN_AUTOTUNE_ENV, "1")  # asked for, but CPU workers never reach cuDNN
    report_path = tmp_path / "run.json"
    run = ["images", "run", "--queue", url, "--gpus", "cpu", "--task", "stats", "--out", str(tmp_path / "o"),
           "--json", str(report_path)]  # fmt: skip
    assert main(run) == 0
    assert json.loads(report_path.read_text())["settings"]["cudnn_autotune"] is False
