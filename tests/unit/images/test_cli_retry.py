"""``gpuprov images retry`` and the exit code of a run that leaves dead tasks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from PIL import Image

from gpuprov.cli.__main__ import main
from gpuprov.images.queue import QueueStats, open_queue


def _queue_with_one_failed_one_dead(tmp_path: Path) -> tuple[str, list[Path]]:
    """Two real images queued through the CLI; one failed, one dead (max_attempts=1 and a retried failure)."""
    folder = tmp_path / "in"
    folder.mkdir()
    paths = []
    for i in range(2):
        paths.append(folder / f"{i}.png")
        Image.new("RGB", (32, 24), (i * 90, 40, 70)).save(paths[-1])
    url = f"sqlite:///{tmp_path / 'q.db'}"
    assert main(["images", "submit", str(folder), "--queue", url]) == 0
    queue = open_queue(url + "?max_attempts=1")
    try:
        failed, dead = queue.claim("w", 2, 30)
        queue.fail("w", failed.id, "corrupt PNG header", retry=False)
        queue.fail("w", dead.id, "worker killed", retry=True)
        assert queue.stats() == QueueStats(pending=0, leased=0, done=0, failed=1, dead=1)
    finally:
        queue.close()
    return url, paths


def _stats(url: str) -> QueueStats:
    queue = open_queue(url, create=False)
    try:
        return queue.stats()
    finally:
        queue.close()


def test_retry_dead_then_failed_by_path(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url, paths = _queue_with_one_failed_one_dead(tmp_path)
    assert main(["images", "retry", "--queue", url, "--dead"]) == 0
    assert "1 task(s) queued again (dead)" in capsys.readouterr().out
    assert _stats(url) == QueueStats(pending=1, leased=0, done=0, failed=1, dead=0)
    assert main(["images", "retry", "--queue", url, str(paths[0])]) == 0  # by path, as submitted
    assert _stats(url) == QueueStats(pending=2, leased=0, done=0, failed=0, dead=0)


def test_retry_by_a_relative_path_of_a_file_since_removed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    url, paths = _queue_with_one_failed_one_dead(tmp_path)
    monkeypatch.chdir(tmp_path)
    paths[1].unlink()  # the dead one: moved away, its task still named by the path submit resolved
    assert main(["images", "retry", "--queue", url, "in/1.png"]) == 0
    assert "1 task(s) queued again" in capsys.readouterr().out
    assert main(["images", "retry", "--queue", url, "--dead", "in/0.png"]) == 0  # 0.png is failed, not dead
    captured = capsys.readouterr()
    assert "0 task(s) queued again" in captured.out and "1 of the tasks named are not dead" in captured.err
    assert _stats(url) == QueueStats(pending=1, leased=0, done=0, failed=1, dead=0)


@pytest.mark.parametrize(
    ("args", "said"),
    [
        ([], "say what to retry"),
        (["/no/such/image.png"], "no task for /no/such/image.png"),
        (["  "], "an empty KEY"),
    ],
)
def test_retry_usage_errors_exit_2_and_move_nothing(args: list[str], said: str, tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    url, _ = _queue_with_one_failed_one_dead(tmp_path)
    capsys.readouterr()
    assert main(["images", "retry", "--queue", url, *args]) == 2
    err = capsys.readouterr().err
    assert said in err and "Traceback" not in err, err
    assert _stats(url) == QueueStats(pending=0, leased=0, done=0, failed=1, dead=1)


def test_retry_on_a_missing_queue_exits_2_and_creates_nothing(tmp_path: Path) -> None:
    assert main(["images", "retry", "--queue", f"sqlite:///{tmp_path / 'q.db'}", "--dead"]) == 2
    assert not (tmp_path / "q.db").exists()


def test_a_run_that_leaves_dead_tasks_exits_1_naming_retry(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url, _ = _queue_with_one_failed_one_dead(tmp_path)
    assert main(["images", "retry", "--queue", url, "--failed"]) == 0  # the image is good: it is done this time
    capsys.readouterr()
    run = ["images", "run", "--queue", url, "--gpus", "cpu", "--quiet", "--task", "stats", "--out", str(tmp_path / "o")]
    assert main(run) == 1
    captured = capsys.readouterr()
    assert "1 rows in" in captured.out and "0 failed, 1 dead" in captured.out
    assert f"gpuprov images retry --queue {url} --dead" in captured.err
    assert [json.loads(x)["state"] for x in (tmp_path / "o" / "failures.jsonl").read_text().splitlines()] == ["dead"]
    assert main(["images", "retry", "--queue", url, "--dead"]) == 0
    assert main(run) == 0
    assert "2 rows in" in capsys.readouterr().out
