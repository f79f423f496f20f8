"""Worker pinning by UUID, the in-process worker loop over a sqlite queue, OOM backoff and the manifest."""

from __future__ import annotations

import io
import json
import os
import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

pytest.importorskip("torch")
pytest.importorskip("torchvision")
from PIL import Image

from gpuprov.exceptions import ConfigError
from gpuprov.images.manifest import write_manifest
from gpuprov.images.memory import MEM_BUDGET_ENV
from gpuprov.images.queue import open_queue
from gpuprov.images.slots import DEFAULT_PROCS_PER_GPU, DeviceMismatch, Slot, replicate, resolve_slots, self_check
from gpuprov.images.stages import LeaseKeeper, claims
from gpuprov.images.supervisor import SlotState, supervise, worker_env
from gpuprov.images.worker import WorkerConfig, worker_main

BUS_ORDER = [("GPU-d150", "00000000:01:00.0"), ("GPU-0a01", "00000000:07:00.0"), ("GPU-0a02", "00000000:47:00.0")]


class FakeNVML:
    """pynvml stand-in in PCI bus order (nvidia-smi's numbering), as on a host whose CUDA and NVML orders differ."""

    def nvmlInit(self) -> None: ...
    def nvmlShutdown(self) -> None: ...
    def nvmlDeviceGetCount(self) -> int:
        return len(BUS_ORDER)

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        return i

    def nvmlDeviceGetUUID(self, h: int) -> str:
        return BUS_ORDER[h][0]

    def nvmlDeviceGetPciInfo(self, h: int) -> Any:
        return SimpleNamespace(busId=BUS_ORDER[h][1].encode())


def test_slots_pin_by_uuid_in_bus_order() -> None:
    slots = resolve_slots("1,2", nvml=FakeNVML())
    assert [(s.uuid, s.bus_id) for s in slots] == BUS_ORDER[1:]
    env = worker_env(slots[0])
    assert env["CUDA_VISIBLE_DEVICES"] == "GPU-0a01" and env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    assert resolve_slots("GPU-d150", nvml=FakeNVML())[0].name == "gpu0"
    assert len(resolve_slots("all", nvml=FakeNVML())) == 3
    # one GPU named twice, by index or by index and UUID, is one slot
    assert [s.name for s in resolve_slots("0,0,GPU-d150,1", nvml=FakeNVML())] == ["gpu0", "gpu1"]
    with pytest.raises(ConfigError):
        resolve_slots("7", nvml=FakeNVML())
    assert [s.name for s in resolve_slots("cpu", cpu_workers=2)] == ["cpu0", "cpu1"]


def test_procs_per_gpu_keep_the_uuid_pin() -> None:
    gpus = resolve_slots("0,2", nvml=FakeNVML())
    procs = replicate(gpus, 3)
    assert [p.name for p in procs] == ["gpu0.0", "gpu0.1", "gpu0.2", "gpu2.0", "gpu2.1", "gpu2.2"]
    assert [(p.uuid, p.bus_id) for p in procs] == [BUS_ORDER[0]] * 3 + [BUS_ORDER[2]] * 3
    assert {p.share for p in procs} == {3}
    # every process of a GPU is pinned to that GPU's UUID, never to an index
    assert {worker_env(p)["CUDA_VISIBLE_DEVICES"] for p in procs[:3]} == {"GPU-d150"}
    assert replicate(gpus, 1) == gpus
    assert len(replicate(gpus)) == 2 * DEFAULT_PROCS_PER_GPU
    cpu = resolve_slots("cpu", cpu_workers=2)
    assert replicate(cpu, 4) == cpu  # CPU workers are counted by --cpu-workers, not multiplied
    with pytest.raises(ConfigError, match="at least 1"):
        replicate(gpus, 0)


def test_claims_hash_the_bytes_in_the_reading_thread(tmp_path: Path) -> None:
    import hashlib

    paths = _images(tmp_path / "in", 3)
    q = open_queue(f"sqlite:///{tmp_path}/q.db")
    q.submit([{"path": str(p)} for p in paths] + [{"path": str(tmp_path / "gone.jpg")}])
    keeper = LeaseKeeper(q, "w", 30.0)
    claimed = next(claims(q, "w", lambda: 10, keeper))
    read = {t.id: data for t, data in claimed.entries}
    assert len(read) == 5
    for t, data in claimed.entries:
        if isinstance(data, OSError):
            assert t.id not in claimed.digests
        else:
            assert claimed.digests[t.id] == hashlib.sha256(Path(t.payload["path"]).read_bytes()).hexdigest()
    assert sum(isinstance(d, OSError) for d in read.values()) == 1
    q.close()


def test_self_check_on_cpu_and_mismatch(monkeypatch: pytest.MonkeyPatch) -> None:
    assert self_check(Slot("cpu0")) == "cpu"
    import torch

    props = SimpleNamespace(uuid="d150", pci_domain_id=0, pci_bus_id=1, pci_device_id=0)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: props)
    assert self_check(Slot("gpu0", "GPU-d150", "00000000:01:00.0")) == "cuda"
    with pytest.raises(DeviceMismatch, match="CUDA opened GPU-d150"):
        self_check(Slot("gpu1", "GPU-0a01", "00000000:07:00.0"))


def _images(folder: Path, n: int) -> list[Path]:
    folder.mkdir()
    paths = []
    for i in range(n):
        p = folder / f"{i:03d}.jpg"
        Image.new("RGB", (40 + i, 30), (i * 10 % 256, 50, 90)).save(p, quality=90)
        paths.append(p)
    bad = folder / "corrupt.jpg"
    bad.write_bytes(paths[0].read_bytes()[:100])
    return [*paths, bad]


def _run(tmp_path: Path, task: str, batch: int) -> tuple[Any, list[dict[str, Any]]]:
    paths = _images(tmp_path / "in", 10)
    url = f"sqlite:///{tmp_path}/q.db"
    q = open_queue(url)
    q.submit({"path": str(p)} for p in paths)
    q.close()
    events: list[dict[str, Any]] = []
    worker_main(WorkerConfig(url, str(tmp_path / "out"), task=task, batch=batch, size=32, lease_s=30), events.append)
    return open_queue(url), events


def test_worker_processes_queue_and_records_corrupt(tmp_path: Path) -> None:
    q, events = _run(tmp_path, "thumbnail", 4)
    stats = q.stats()
    assert (stats.done, stats.failed, stats.open) == (10, 1, 0)
    rows, fails = write_manifest(q, tmp_path / "out")
    assert (rows, fails) == (10, 1)
    lines = [json.loads(x) for x in (tmp_path / "out" / "manifest.jsonl").read_text().splitlines()]
    assert [r["shard"] for r in lines] == list(range(10))
    for r in lines:
        thumb = tmp_path / "out" / r["thumb"]
        assert r["sha256"] in thumb.name and Image.open(io.BytesIO(thumb.read_bytes())).size[0] <= 32
    failure = json.loads((tmp_path / "out" / "failures.jsonl").read_text())
    assert failure["shard"] == 10 and "decode error" in failure["reason"]
    assert failure["path"] == str(tmp_path / "in" / "corrupt.jpg"), "a failure names its file"
    assert events[-1] == {"event": "exit", "done": 10, "failed": 1}
    assert not list((tmp_path / "out").rglob("*.tmp"))
    q.close()


def test_worker_reports_its_start_up_phases_in_order_when_ready(tmp_path: Path) -> None:
    from gpuprov.images.startup import PHASES

    q, events = _run(tmp_path, "stats", 4)
    start = events[0]
    assert start["event"] == "start" and start["device"] == "cpu"
    assert list(start["startup"]) == list(PHASES)
    assert list(start["startup"].values()) == sorted(start["startup"].values())
    assert [e["event"] for e in events].count("start") == 1
    q.close()


def test_worker_halves_batch_under_memory_budget(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(MEM_BUDGET_ENV, str(2 * 3 * 32 * 32 * 4 * 64))  # room for 2 images of 32x32
    q, events = _run(tmp_path, "stats", 8)
    assert q.stats().done == 10
    assert [e["batch"] for e in events if e["event"] == "progress"][-1] == 2
    q.close()


def test_model_task_torchscript(tmp_path: Path) -> None:
    import torch

    from gpuprov.images.tasks import make_task, synthetic_items

    net = torch.nn.Sequential(torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(3, 7)).eval()
    torch.jit.save(torch.jit.trace(net, torch.randn(1, 3, 16, 16)), str(tmp_path / "m.pt"))
    task = make_task(None, tmp_path / "m.pt", tmp_path, "cpu", size=16)
    rows = task.process(synthetic_items(3, "cpu", 20, 30))
    assert len(rows) == 3 and len(rows[0]["top5"]) == 5
    with pytest.raises(ConfigError):
        make_task("stats", tmp_path / "m.pt", tmp_path, "cpu")


def test_model_task_is_frozen_with_batchnorm_folded_and_keeps_its_outputs(tmp_path: Path) -> None:
    """optimize_for_inference folds each BatchNorm into its convolution; the logits stay the same."""
    import torch

    from gpuprov.images.tasks import ModelTask

    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4), torch.nn.ReLU(),
                              torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(4, 6))  # fmt: skip
    net[1].running_mean.uniform_(-1, 1)
    net[1].running_var.uniform_(0.5, 2)
    torch.jit.save(torch.jit.trace(net.eval(), torch.randn(1, 3, 16, 16)), str(tmp_path / "m.pt"))
    frozen = ModelTask(tmp_path / "m.pt", "cpu", size=16)
    loaded = ModelTask(tmp_path / "m.pt", "cpu", size=16, optimize=False)
    x = torch.rand(5, 3, 16, 16).contiguous(memory_format=torch.channels_last)
    assert "batch_norm" not in str(frozen.module.graph) and "batch_norm" in str(loaded.module.inlined_graph)
    assert torch.allclose(frozen.forward(x), loaded.forward(x), atol=1e-5)


def test_model_task_runs_unfrozen_when_freezing_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    from gpuprov.images import tasks

    net = torch.nn.Sequential(torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(3, 7)).eval()
    torch.jit.save(torch.jit.trace(net, torch.randn(1, 3, 16, 16)), str(tmp_path / "m.pt"))

    def refuse(module: Any) -> Any:
        raise RuntimeError("cannot freeze")

    monkeypatch.setattr(torch.jit, "optimize_for_inference", refuse)
    task = tasks.ModelTask(tmp_path / "m.pt", "cpu", size=16)
    assert task.forward(torch.rand(2, 3, 16, 16)).shape == (2, 7)


def test_short_batches_run_padded_to_few_sizes(tmp_path: Path) -> None:
    """A job's last short batch is padded (cuDNN autotunes each new size); rows stay one per input."""
    import torch

    from gpuprov.images.tasks import ModelTask, synthetic_items

    net = torch.nn.Sequential(torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(3, 7)).eval()
    torch.jit.save(torch.jit.trace(net, torch.randn(1, 3, 16, 16)), str(tmp_path / "m.pt"))
    task = ModelTask(tmp_path / "m.pt", "cpu", size=16)
    assert task.padded_size(37) == 37  # no full batch known: as given
    task.set_full_batch(1000)
    sizes = {task.padded_size(n) for n in range(1, 1001)}
    assert sizes == {1, 2, 4, 8, 16, 32, 64, 128, 256, 384, 512, 640, 768, 896, 1000}
    assert task.padded_size(5) == 8 and task.padded_size(129) == 256 and task.padded_size(999) == 1000
    seen: list[int] = []
    module = task.module
    task.module = lambda batch: seen.append(int(batch.shape[0])) or module(batch)
    assert len(task.process(synthetic_items(5, "cpu", 20, 30))) == 5 and seen == [8]


def test_supervise_stops_following_workers_when_asked(tmp_path: Path) -> None:
    """A service's supervisor (follow) returns once ``stop`` is set, with every worker process ended."""
    import threading

    url = f"sqlite:///{tmp_path}/q.db"
    open_queue(url).close()
    started = threading.Event()
    stop = threading.Event()
    cfg = WorkerConfig(url, str(tmp_path / "out"), "stats", follow=True, poll_s=0.05)
    result: list[Any] = []
    sup = threading.Thread(
        target=lambda: result.append(
            supervise(cfg, [Slot("cpu0")], lambda st, ev: ev.get("event") == "start" and started.set(), stop=stop)
        )
    )
    sup.start()
    assert started.wait(120), "the worker never reported ready"
    stop.set()
    sup.join(60)
    assert not sup.is_alive()
    (states,) = result
    assert all(st.finished and st.proc is not None and st.proc.poll() is not None for st in states)


def test_decode_out_of_memory_splits_the_batch_and_fails_only_what_cannot_fit() -> None:
    """A decode that runs out of memory is retried in halves; an image too big on its own is a DecodeError."""
    from gpuprov.images.decode import Decoded, DecodeError, decode_split

    class Tight:
        """Device memory for 3 images at a time; the GPU decoder's buffers for b"big" never fit, but its pixels
        do (decoded on the CPU); b"huge" fits neither way."""

        def __init__(self) -> None:
            self.calls: list[tuple[int, bool]] = []

        def decode(self, blobs: list[bytes], *, gpu_decode: bool = True) -> list[Decoded]:
            self.calls.append((len(blobs), gpu_decode))
            if len(blobs) > 3 or b"huge" in blobs or (gpu_decode and b"big" in blobs):
                raise RuntimeError("CUDA out of memory. Tried to allocate 36.00 GiB")
            return [Decoded(blob, 255.0) for blob in blobs]

    decoder = Tight()
    blobs = [b"a", b"b", b"c", b"huge", b"d", b"big", b"f", b"g"]
    out = decode_split(decoder, blobs)  # type: ignore[arg-type]
    assert [o.pixels if isinstance(o, Decoded) else "error" for o in out] == [
        b"a", b"b", b"c", "error", b"d", b"big", b"f", b"g"]  # fmt: skip
    assert isinstance(out[3], DecodeError) and "out of device memory" in str(out[3])
    assert decoder.calls[0] == (8, True) and max(n for n, _ in decoder.calls[1:]) <= 4
    assert [n for n, gpu in decoder.calls if not gpu] == [1, 1]  # only "huge" and "big" went to the CPU, alone

    class Broken:
        def decode(self, blobs: list[bytes]) -> list[Decoded]:
            raise RuntimeError("nvjpeg: invalid handle")

    with pytest.raises(RuntimeError, match="invalid handle"):
        decode_split(Broken(), blobs)  # type: ignore[arg-type]


def test_an_nvjpeg_batch_out_of_memory_is_split_not_decoded_on_the_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """nvJPEG's batch running out of device memory is raised (decode_split halves the batch, the warm-up logs it),
    not taken for a bad JPEG in the batch, which decodes every image of the batch on the CPU instead."""
    import torch
    import torchvision

    from gpuprov.images.decode import Decoded, Decoder, decode_split, warm_jpeg

    sizes: list[int] = []

    def decode_jpeg(raws: list[Any], **_: Any) -> list[Any]:
        sizes.append(len(raws))
        if len(raws) > 2:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return [torch.zeros(3, 8, 8, dtype=torch.uint8) for _ in raws]

    monkeypatch.setattr(torchvision.io, "decode_jpeg", decode_jpeg)
    decoder = Decoder("cuda", threads=1)  # the device is named only: the stand-in above decodes
    cpu: list[bytes] = []
    monkeypatch.setattr("gpuprov.images.decode._decode_cpu_pinned", lambda blob, _pin: cpu.append(blob))
    try:
        blobs = [warm_jpeg(16)] * 4
        with pytest.raises(torch.OutOfMemoryError):
            decoder.decode(blobs)
        out = decode_split(decoder, blobs)
        assert all(isinstance(o, Decoded) for o in out) and sizes == [4, 4, 2, 2]
        decoder.warm(4)  # logged, not raised
        assert sizes[-1] == 4 and cpu == []  # nothing went to the CPU decoder
        # a PNG beside the JPEGs waits for the CPU pool (its one thread busy): the out-of-memory cancels it, so
        # each halving does not decode it again
        release = threading.Event()
        decoder.pool.submit(release.wait, 30)
        with pytest.raises(torch.OutOfMemoryError):
            decoder.decode([b"\x89PNG\r\n\x1a\n", *blobs])
        release.set()
        decoder.pool.submit(lambda: None).result(timeout=30)  # the pool has run what it still held
        assert cpu == []
    finally:
        decoder.close()


def test_unreadable_kinds_of_file_fail_alone(tmp_path: Path) -> None:
    """An empty file is a decode error and a FIFO a read error (reading it would block the worker forever)."""
    import os

    from gpuprov.images.decode import DecodeError, Decoder
    from gpuprov.images.stages import _read_image

    (out,) = Decoder("cpu").decode([b""])
    assert isinstance(out, DecodeError) and "empty file" in str(out)
    os.mkfifo(tmp_path / "fifo.jpg")
    with pytest.raises(OSError, match="not a regular file"):
        _read_image(tmp_path / "fifo.jpg")
    (tmp_path / "ok.jpg").write_bytes(b"abc")
    assert _read_image(tmp_path / "ok.jpg") == b"abc"


def _one_image_queue(tmp_path: Path) -> str:
    """The URL of a new sqlite queue under ``tmp_path`` holding one small PNG."""
    url = f"sqlite:///{tmp_path}/q.db"
    q = open_queue(url)
    img = tmp_path / "a.png"
    Image.new("RGB", (12, 10), (10, 20, 30)).save(img)
    q.submit([{"path": str(img)}])
    q.close()
    return url


def test_a_model_that_does_not_return_one_tensor_stops_the_run_with_exit_2(tmp_path: Path) -> None:
    """A model returning a tuple: every worker would fail every batch; the run stops with the reason, exit 2."""
    import torch

    class Pair(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            pooled = x.mean(dim=(2, 3))
            return pooled, pooled

    torch.jit.save(torch.jit.trace(Pair().eval(), torch.randn(1, 3, 8, 8)), str(tmp_path / "pair.pt"))
    url = _one_image_queue(tmp_path)
    cfg = WorkerConfig(url, str(tmp_path / "out"), model=str(tmp_path / "pair.pt"), batch=2, size=8)
    with pytest.raises(ConfigError, match="forward returned tuple"):
        supervise(cfg, [Slot("cpu0")], lambda st, ev: None)


def test_a_worker_missing_a_package_stops_the_run_with_exit_4_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An .onnx model where onnxruntime cannot be imported: every restart would fail the same way, so the first
    worker's exit ends the run with its reason (exit 4), with no restart."""
    from gpuprov.exceptions import EXIT_ENVIRONMENT, EnvironmentMissing

    shadow = tmp_path / "shadow" / "onnxruntime"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError('onnxruntime is not installed here')\n")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(shadow.parent), os.environ.get("PYTHONPATH")])))
    (tmp_path / "m.onnx").write_bytes(b"not read: the import fails first")
    url = _one_image_queue(tmp_path)
    cfg = WorkerConfig(url, str(tmp_path / "out"), model=str(tmp_path / "m.onnx"), batch=2, size=8)
    seen: list[SlotState] = []
    with pytest.raises(EnvironmentMissing, match="ONNX models need onnxruntime") as err:
        supervise(cfg, [Slot("cpu0"), Slot("cpu1")], lambda st, ev: seen.append(st))
    assert err.value.exit_code == EXIT_ENVIRONMENT
    assert all(st.restarts == 0 for st in seen)


def test_gpus_without_a_usable_gpu_name_the_fix(caplog: pytest.LogCaptureFixture) -> None:
    """An explicit --gpus with no NVML or no GPU is an environment error naming --gpus cpu; --gpus all falls
    back to the CPU with a warning (a service on a host whose driver broke would otherwise crawl silently)."""
    from gpuprov.exceptions import EnvironmentMissing

    class NoDriver:
        def nvmlInit(self) -> None:
            raise RuntimeError("NVML Shared Library Not Found")

    class NoGPU(FakeNVML):
        def nvmlDeviceGetCount(self) -> int:
            return 0

    for nvml in (NoDriver(), NoGPU()):
        with pytest.raises(EnvironmentMissing, match=r"--gpus 0: NVML .*--gpus cpu runs on the CPU"):
            resolve_slots("0", nvml=nvml)
        with caplog.at_level("WARNING", logger="gpuprov.images.slots"):
            assert [s.name for s in resolve_slots("all", nvml=nvml)] == ["cpu0"]
        assert "running on the CPU" in caplog.text
        caplog.clear()
