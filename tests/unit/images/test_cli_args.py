"""``gpuprov images run``: bad arguments end with exit 2 and one message before any worker starts."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import pytest

from gpuprov.cli.__main__ import main


@pytest.mark.parametrize(("args", "named"), [
    (["--task", "nosuch"], "--task"),
    (["--task", "stats", "--lease", "-1"], "--lease"),
    (["--task", "stats", "--metrics-port", "99999"], "--metrics-port"),
    (["--task", "stats", "--cpu-workers", "0"], "--cpu-workers"),
    (["--task", "stats", "--threads", "0"], "--threads"),
    (["--task", "stats", "--size", "-5"], "--size"),
    (["--task", "stats", "--procs-per-gpu", "0"], "--procs-per-gpu"),
    (["--task", "stats", "--jpeg", "dali"], "--jpeg"),
    (["--task", "stats", "--lease", "nan"], "--lease"),
    (["--task", "stats", "--lease", "0.001"], "--lease"),
    (["--task", "stats", "--keep-warm", "nan"], "--keep-warm"),
    (["--task", "stats", "--keep-warm", "-1"], "--keep-warm"),
    (["--task", "stats", "--keep-warm", "soon"], "--keep-warm"),
    (["--model", "/nonexistent/model.pt"], "--model"),
    (["--task", "stats", "--threads", "many"], "--threads"),
    (["--task", "stats", "--procs-per-gpu", "auto8"], "--procs-per-gpu"),
    (["--task", "stats", "--compile", "max"], "--compile"),
    (["--task", "stats", "--compile", "default"], "--compile default: a built-in --task cannot be compiled"),
])
def test_bad_run_arguments_exit_2(args: list[str], named: str, tmp_path: Path,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    queue = tmp_path / "q.db"
    code = main(["images", "run", "--queue", f"sqlite:///{queue}", "--out", str(tmp_path / "out"), "--gpus", "cpu",
                 *args])
    assert code == 2
    err = capsys.readouterr().err
    assert named in err and "Traceback" not in err
    assert not queue.exists()  # nothing was opened or started


def test_status_of_a_missing_queue_exits_2_and_creates_nothing(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    for queue in (tmp_path / "missing" / "path.db", tmp_path / "q.db"):
        code = main(["images", "status", "--queue", f"sqlite:///{queue}"])
        assert code == 2
        err = capsys.readouterr().err
        assert "no queue at" in err and "Traceback" not in err
        assert not queue.exists() and not queue.parent.joinpath(queue.name + "-wal").exists()


def test_submit_of_a_missing_source_exits_2_before_creating_the_queue(tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    queue = tmp_path / "q.db"
    assert main(["images", "submit", "--queue", f"sqlite:///{queue}", str(tmp_path / "no" / "such")]) == 2
    assert "no such file, folder or matching glob" in capsys.readouterr().err
    assert not queue.exists()


def test_nvimgcodec_without_the_package_exits_2_before_workers_start(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    from gpuprov.images import slots, supervisor

    monkeypatch.setattr(slots, "resolve_slots", lambda gpus, cpu_workers: [slots.Slot("gpu0", "GPU-x", "0:1")])
    monkeypatch.setattr(supervisor, "supervise", lambda *a, **k: pytest.fail("workers started"))
    monkeypatch.setattr("gpuprov.cli.images._installed", lambda module: False)
    code = main(["images", "run", "--queue", f"sqlite:///{tmp_path / 'q.db'}", "--out", str(tmp_path / "out"),
                 "--task", "stats", "--jpeg", "nvimgcodec"])
    assert code == 2
    assert "--jpeg nvimgcodec: nvImageCodec is not installed" in capsys.readouterr().err


def test_run_on_a_missing_queue_exits_2_without_creating_it(tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    queue = tmp_path / "typo.db"
    code = main(["images", "run", "--queue", f"sqlite:///{queue}", "--out", str(tmp_path / "out"), "--gpus", "cpu",
                 "--task", "stats"])
    assert code == 2 and "no queue at" in capsys.readouterr().err
    assert not queue.exists()


@pytest.mark.parametrize(("name", "text", "line"), [
    ("m.jsonl", '{"path": "a.jpg"}\n{"nopath": 1}\n', 2),
    ("m.jsonl", "not json\n", 1),
    ("m.jsonl", '{"path": 5}\n', 1),
    ("m.jsonl", '["a.jpg"]\n', 1),
    ("m.jsonl", "null\n", 1),
])
def test_bad_manifest_lines_exit_2_naming_the_line(name: str, text: str, line: int, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    manifest = tmp_path / name
    manifest.write_text(text)
    queue = tmp_path / "q.db"
    assert main(["images", "submit", str(manifest), "--queue", f"sqlite:///{queue}"]) == 2
    err = capsys.readouterr().err
    assert f"{manifest}:{line}:" in err and "Traceback" not in err
    assert not queue.exists()


def test_binary_manifest_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    manifest = tmp_path / "m.txt"
    manifest.write_bytes(b"\xff\xfe\x00binary")
    assert main(["images", "submit", str(manifest), "--queue", f"sqlite:///{tmp_path}/q.db"]) == 2
    err = capsys.readouterr().err
    assert "UTF-8" in err and "Traceback" not in err


def test_another_task_on_a_queue_with_results_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Results are kept per image: a thumbnail run on a queue that a stats run finished would hand back the
    stats rows as its manifest. It is refused before any worker starts; the same task runs (a no-op)."""
    import json

    from PIL import Image

    folder = tmp_path / "in"
    folder.mkdir()
    for i in range(3):
        Image.new("RGB", (40 + i, 30), (i * 40, 60, 90)).save(folder / f"{i}.jpg")
    url = f"sqlite:///{tmp_path / 'q.db'}"
    assert main(["images", "submit", str(folder), "--queue", url]) == 0
    run = ["images", "run", "--queue", url, "--gpus", "cpu", "--quiet", "--batch", "2"]
    assert main([*run, "--out", str(tmp_path / "a"), "--task", "stats"]) == 0
    rows = [json.loads(x) for x in (tmp_path / "a" / "manifest.jsonl").read_text().splitlines()]
    assert [r["task"] for r in rows] == ["stats"] * 3
    capsys.readouterr()
    assert main([*run, "--out", str(tmp_path / "b"), "--task", "thumbnail"]) == 2
    err = capsys.readouterr().err
    assert "made by task 'stats', this run asks for 'thumbnail'" in err and "new queue" in err
    assert not (tmp_path / "b" / "manifest.jsonl").exists()
    assert main([*run, "--out", str(tmp_path / "c"), "--task", "stats"]) == 0


def test_an_out_folder_that_cannot_be_created_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    queue = tmp_path / "q.db"
    blocker = tmp_path / "file"
    blocker.write_text("a file where the folder's parent should be")
    code = main(["images", "run", "--queue", f"sqlite:///{queue}", "--out", str(blocker / "out"), "--gpus", "cpu",
                 "--task", "stats"])
    assert code == 2
    err = capsys.readouterr().err
    assert f"--out {blocker / 'out'}: cannot create the folder" in err and "Traceback" not in err, err
    assert not queue.exists()


def test_a_metrics_port_in_use_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("prometheus_client")
    queue = tmp_path / "q.db"
    with socket.socket() as taken:
        taken.bind(("", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code = main(["images", "run", "--queue", f"sqlite:///{queue}", "--out", str(tmp_path / "out"), "--gpus",
                     "cpu", "--task", "stats", "--metrics-port", str(port)])
    assert code == 2
    err = capsys.readouterr().err
    assert f"--metrics-port {port}: cannot listen there" in err and "Traceback" not in err, err
    assert not queue.exists()


@pytest.mark.parametrize(("make", "why"), [
    (lambda d: Path("/dev/zero"), "not a regular file"),
    (lambda d: (d / "empty").mkdir() or d / "empty", "the folder holds no image file"),
    (lambda d: (d / "m.txt").write_text("# only a comment\n") and d / "m.txt", "the manifest lists no image"),
    (lambda d: (d / "sub").mkdir() or Path(str(d / "s*")), "the glob matches no file"),
])
def test_a_source_that_names_no_image_exits_2_before_creating_the_queue(
        make: Any, why: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = make(tmp_path)
    queue = tmp_path / "q.db"
    assert main(["images", "submit", "--queue", f"sqlite:///{queue}", str(source)]) == 2
    err = capsys.readouterr().err
    assert f"{source}: {why}" in err and "Traceback" not in err, err
    assert not queue.exists()


@pytest.mark.parametrize("batch", ["\u00b2", "99999999999999999999", "65537", "0", "-1"])
def test_a_batch_that_is_no_plain_number_in_range_exits_2(batch: str, tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    queue = tmp_path / "q.db"
    code = main(["images", "run", "--queue", f"sqlite:///{queue}", "--out", str(tmp_path / "out"), "--gpus", "cpu",
                 "--task", "stats", "--batch", batch])
    assert code == 2
    err = capsys.readouterr().err
    assert "--batch" in err and "Traceback" not in err, err


def test_empty_source_and_out_exit_2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    """An unset shell variable ("$SRC", "$OUT") must not mean the current folder."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "here.png").write_bytes(b"an image file by its name")
    queue = tmp_path / "q.db"
    assert main(["images", "submit", "--queue", f"sqlite:///{queue}", ""]) == 2
    assert "an empty source names no image" in capsys.readouterr().err
    assert main(["images", "run", "--queue", f"sqlite:///{queue}", "--out", "", "--gpus", "cpu",
                 "--task", "stats"]) == 2
    assert "--out is empty" in capsys.readouterr().err
    assert not queue.exists()


def test_unreadable_sources_and_unwritable_out_exit_2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """What a folder of mode 000 and a read-only --out give a user who is not root (root reads and writes through
    file modes, so the OS's refusal is stood in for here)."""
    import tempfile

    locked = tmp_path / "locked"
    real_is_dir = Path.is_dir

    def is_dir(path: Path) -> bool:
        if path.parent == locked:
            raise PermissionError(13, "Permission denied", str(path))
        return real_is_dir(path)

    monkeypatch.setattr(Path, "is_dir", is_dir)
    queue = tmp_path / "q.db"
    assert main(["images", "submit", "--queue", f"sqlite:///{queue}", str(locked / "a.png")]) == 2
    assert f"cannot read {locked / 'a.png'} (permission denied)" in capsys.readouterr().err

    def read_only(*args: Any, **kwargs: Any) -> Any:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(tempfile, "TemporaryFile", read_only)
    assert main(["images", "run", "--queue", f"sqlite:///{queue}", "--out", str(tmp_path / "out"), "--gpus", "cpu",
                 "--task", "stats"]) == 2
    assert f"--out {tmp_path / 'out'}: cannot write there (Permission denied)" in capsys.readouterr().err
    assert not queue.exists()


def test_a_folder_submit_takes_dicom_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The workers decode DICOM (.dcm): a folder of scans is queued like a folder of photos."""
    (tmp_path / "scans").mkdir()
    (tmp_path / "scans" / "ct-001.dcm").write_bytes(b"\0" * 128 + b"DICM")
    (tmp_path / "scans" / "notes.txt").write_text("not an image")
    assert main(["images", "submit", str(tmp_path / "scans"), "--queue", f"sqlite:///{tmp_path / 'q.db'}"]) == 0
    assert "1 new of 1 images queued" in capsys.readouterr().out
