"""Benchmark: decode + resize 224 + ResNet-50 end to end, three ways, on the same images.

(a) ``naive``: the seeds' loop - PIL open per image, torchvision transforms, batch 1, one process.
(b) ``dataloader``: a plain torch DataLoader (workers, pinned memory, prefetch) with CPU decode.
(c) ``gpuprov``: ``gpuprov images`` workers (one per GPU, nvJPEG batch decode, sqlite queue) on 1
    GPU and, where there are two, on 2 GPUs.

ResNet-50 has random weights (``torchvision.models.resnet50(weights=None)``, no download), fp16 and
channels_last on a GPU (fp32 on CPU). Images are repeated under distinct queue keys to reach
``--images``. Prints images/s per mode and the ratios; ``--json`` writes them.

    python benchmarks/images_bench.py --data DIR --images 2000 [--modes naive,dataloader,gpuprov1,gpuprov2]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import torch
import torchvision
from torchvision.transforms import v2

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
HALF = DEVICE == "cuda"


def resnet50() -> Any:
    model = torchvision.models.resnet50(weights=None).eval().to(DEVICE, memory_format=torch.channels_last)
    return model.half() if HALF else model


def _sync() -> None:
    if DEVICE == "cuda":
        torch.cuda.synchronize()


def naive(paths: list[Path], n: int, model: Any = None) -> float:
    """Images/s of the seeds' loop over ``n`` images (``paths`` repeated); ``model``: ``resnet50()`` if None."""
    from PIL import Image

    model = resnet50() if model is None else model
    tf = v2.Compose(
        [
            v2.PILToTensor(),
            v2.Resize(256, antialias=True),
            v2.CenterCrop(224),
            v2.ToDtype(torch.float32, scale=True),
            v2.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225]),
        ]
    )
    t0 = time.perf_counter()
    with torch.inference_mode():
        for i in range(n):
            with Image.open(paths[i % len(paths)]) as im:
                x = tf(im.convert("RGB")).unsqueeze(0).to(DEVICE, memory_format=torch.channels_last)
            out = model(x.half() if HALF else x)
            out.argmax().item()
    _sync()
    return n / (time.perf_counter() - t0)


class _Files(torch.utils.data.Dataset[Any]):
    def __init__(self, paths: list[Path], n: int) -> None:
        self.paths, self.n = paths, n
        self.tf = v2.Compose([v2.Resize(256, antialias=True), v2.CenterCrop(224)])

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> Any:
        data = torchvision.io.read_file(str(self.paths[i % len(self.paths)]))
        img = torchvision.io.decode_image(data, mode=torchvision.io.ImageReadMode.RGB)
        return self.tf(img)


def dataloader(paths: list[Path], n: int, workers: int, batch: int, model: Any = None) -> float:
    """Images/s of a plain DataLoader over ``n`` images (``paths`` repeated); ``model``: ``resnet50()`` if None."""
    model = resnet50() if model is None else model
    mean = torch.tensor([0.485, 0.456, 0.406], device=DEVICE).view(1, 3, 1, 1) * 255
    std = torch.tensor([0.229, 0.224, 0.225], device=DEVICE).view(1, 3, 1, 1) * 255
    loader = torch.utils.data.DataLoader(
        _Files(paths, n),
        batch_size=batch,
        num_workers=workers,
        pin_memory=DEVICE == "cuda",
        prefetch_factor=4 if workers else None,
    )
    t0 = time.perf_counter()
    with torch.inference_mode():
        for cpu_batch in loader:
            x = cpu_batch.to(DEVICE, non_blocking=True).float().sub_(mean).div_(std)
            x = x.contiguous(memory_format=torch.channels_last)
            model(x.half() if HALF else x).argmax(1).cpu()
    _sync()
    return n / (time.perf_counter() - t0)


class Sampler:
    """Samples GPU SM and NVJPG (hardware JPEG engine) utilisation through NVML and host CPU use through
    psutil, every 0.5 s while a mode runs; each is None where its library or counter is missing."""

    def __init__(self) -> None:
        self.samples: list[dict[str, float]] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        try:
            import psutil
        except ImportError:
            psutil = None
        try:
            import pynvml

            pynvml.nvmlInit()
            handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
        except Exception:
            pynvml, handles = None, []
        if psutil:
            psutil.cpu_percent()
        while not self.stop.wait(0.5):
            row: dict[str, float] = {}
            if psutil:
                row["cpu_pct"] = psutil.cpu_percent()
            for i, h in enumerate(handles):
                row[f"sm{i}"] = pynvml.nvmlDeviceGetUtilizationRates(h).gpu
                with contextlib.suppress(Exception):
                    row[f"jpg{i}"] = pynvml.nvmlDeviceGetJpgUtilization(h)[0]
            self.samples.append(row)

    def __enter__(self) -> Sampler:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()

    def summary(self) -> dict[str, float]:
        """Mean and max of each series over the busy middle (samples with any SM use)."""
        busy = [r for r in self.samples if any(v > 0 for k, v in r.items() if k.startswith("sm"))] or self.samples
        keys = sorted({k for r in busy for k in r})
        out: dict[str, float] = {}
        for k in keys:
            vals = [r[k] for r in busy if k in r]
            out[k + "_mean"], out[k + "_max"] = round(sum(vals) / len(vals), 1), max(vals)
        return out


def gpuprov(paths: list[Path], n: int, gpus: str, work: Path, batch: str, threads: int, procs: int = 1,
            jpeg: str = "torchvision", warm: bool = False) -> dict[str, Any]:  # fmt: skip
    """One run of ``gpuprov images`` workers over ``n`` images; rates in images/s.

    Cold (default): the tasks are queued first, then the workers start; ``end_to_end`` = n / wall
    time including process start, imports, model load and the batch probe. ``warm``: the workers
    start as services do (``follow``) on an empty queue; once every one has reported ready, the
    images are submitted and ``job`` = n / the time from submit to the last result committed - what a
    job gets from provisioned workers (the image_workers role's services).
    """
    from gpuprov.images.queue import open_queue
    from gpuprov.images.slots import resolve_slots
    from gpuprov.images.supervisor import SlotState, supervise
    from gpuprov.images.worker import WorkerConfig

    if warm:
        return _warm(paths, n, gpus, work, batch, threads, procs, jpeg)

    model_file = resnet50_file(work)
    url = f"sqlite:///{work}/q-{gpus.replace(',', '_')}-p{procs}-{jpeg}.db"
    q = open_queue(url)
    q.submit({"path": str(paths[i % len(paths)]), "key": f"{i}"} for i in range(n))
    q.close()
    slots = resolve_slots(gpus, cpu_workers=1)
    events: list[tuple[float, str, int]] = []
    last: dict[str, dict[str, Any]] = {}

    def on_event(st: SlotState, event: dict[str, Any]) -> None:
        if event.get("event") == "start":
            last[st.slot.name + ":start"] = event
        if event.get("event") == "progress":
            last[st.slot.name] = event
            events.append((float(event["t"]), st.slot.name, st.total_done))

    cfg = WorkerConfig(url, str(work / f"out-{gpus}-p{procs}-{jpeg}"), None, str(model_file),
                       None if batch == "auto" else int(batch), 224, 120.0, threads, jpeg=jpeg)  # fmt: skip
    t0 = time.perf_counter()
    with Sampler() as sampler:
        supervise(cfg, slots, on_event, procs_per_gpu=procs)
    wall = time.perf_counter() - t0
    # steady state: all workers busy - from the moment every worker has finished its first batch to the
    # moment the first worker finishes its last; images done = the sum over workers of their latest count
    first: dict[str, float] = {}
    final: dict[str, float] = {}
    for t, slot, _ in events:
        first.setdefault(slot, t)
        final[slot] = t
    t_start, t_end = max(first.values()), min(final.values())
    if t_end <= t_start:  # too few batches per worker for a window where all are busy
        t_end = max(final.values())

    def done_at(when: float) -> int:
        latest: dict[str, int] = {}
        for t, slot, done in events:
            if t <= when:
                latest[slot] = done
        return sum(latest.values())

    steady = (done_at(t_end) - done_at(t_start)) / (t_end - t_start) if t_end > t_start else float("nan")
    return {"end_to_end": n / wall, "steady": steady, "wall_s": wall, "slots": len(slots), "procs_per_gpu": procs,
            "jpeg": jpeg, "util": sampler.summary(), "workers": last}  # fmt: skip


def _warm(paths: list[Path], n: int, gpus: str, work: Path, batch: str, threads: int, procs: int,
          jpeg: str) -> dict[str, Any]:  # fmt: skip
    from gpuprov.images.queue import open_queue
    from gpuprov.images.slots import resolve_slots
    from gpuprov.images.supervisor import SlotState, supervise
    from gpuprov.images.worker import WorkerConfig

    model_file = resnet50_file(work)
    url = f"sqlite:///{work}/warm-{gpus.replace(',', '_')}-p{procs}-{jpeg}.db"
    slots = resolve_slots(gpus, cpu_workers=1)
    ready = threading.Semaphore(0)
    stop = threading.Event()
    cfg = WorkerConfig(url, str(work / f"warm-out-{gpus}-p{procs}-{jpeg}"), None, str(model_file),
                       None if batch == "auto" else int(batch), 224, 120.0, threads, follow=True, poll_s=0.05,
                       jpeg=jpeg)  # fmt: skip

    def on_event(st: SlotState, event: dict[str, Any]) -> None:
        if event.get("event") == "start":
            ready.release()

    open_queue(url).close()  # the empty queue the services wait on
    sup = threading.Thread(target=supervise, args=(cfg, slots, on_event), kwargs={"procs_per_gpu": procs, "stop": stop})
    t_start = time.perf_counter()
    sup.start()
    workers = len(slots) * (procs if gpus != "cpu" else 1)
    for _ in range(workers):
        ready.acquire()
    ready_s = time.perf_counter() - t_start
    time.sleep(1.0)  # every worker is polling the empty queue
    q = open_queue(url)
    with Sampler() as sampler:
        t0 = time.perf_counter()
        q.submit({"path": str(paths[i % len(paths)]), "key": f"{i}"} for i in range(n))
        submit_s = time.perf_counter() - t0
        while (st := q.stats()).done + st.failed + st.dead < n:  # every image ended, one way or the other
            time.sleep(0.05)
        job_s = time.perf_counter() - t0
    stop.set()
    sup.join()
    q.close()
    return {"job": n / job_s, "job_s": job_s, "submit_s": submit_s, "ready_s": ready_s, "slots": len(slots),
            "procs_per_gpu": procs, "jpeg": jpeg, "util": sampler.summary()}  # fmt: skip


def load_model(path: Path) -> Any:
    """A TorchScript file, or a ``torch.export`` program (``.pt2``), as the baselines run a model: eval mode, on
    :data:`DEVICE`, fp16 and channels_last on a GPU (not frozen, not compiled: the seeds' loop and the DataLoader
    run it as loaded)."""
    if path.suffix == ".pt2":  # exported in eval mode; an exported program refuses .eval()
        model = torch.export.load(str(path)).module().to(DEVICE).to(memory_format=torch.channels_last)
    else:
        model = torch.jit.load(str(path), map_location=DEVICE).eval().to(memory_format=torch.channels_last)
    return model.half() if HALF else model


def resnet50_file(work: Path, *, export: bool = False) -> Path:
    """``work/resnet50.pt``: ResNet-50 with random weights traced to TorchScript, or with ``export``
    ``work/resnet50.pt2``: the same exported with ``torch.export`` (batch dimension dynamic, 1 to 4096), the
    form ``gpuprov images run --compile`` compiles. Written once."""
    model_file = work / ("resnet50.pt2" if export else "resnet50.pt")
    if not model_file.exists():
        m = torchvision.models.resnet50(weights=None).eval()
        if export:
            batch = torch.export.Dim("batch", min=1, max=4096)
            program = torch.export.export(m, (torch.randn(2, 3, 224, 224),), dynamic_shapes=({0: batch},))
            torch.export.save(program, str(model_file))
        else:
            torch.jit.save(torch.jit.trace(m, torch.randn(1, 3, 224, 224)), str(model_file))
    return model_file


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", type=Path, required=True)
    ap.add_argument("--images", type=int, default=1000)
    ap.add_argument("--naive-images", type=int, default=None)
    ap.add_argument("--modes", default="naive,dataloader,gpuprov1,gpuprov2")
    ap.add_argument("--workers", type=int, default=min(16, os.cpu_count() or 1))
    ap.add_argument("--batch", default="256")
    ap.add_argument("--threads", type=int, default=8)
    ap.add_argument("--procs", default="1", help="worker processes per GPU, a comma list: one run each")
    ap.add_argument("--jpeg", default="torchvision", help="baseline JPEG decoders, a comma list: one run each")
    ap.add_argument("--warm", action="store_true", help="also time a job on warm (already started) workers")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    paths = sorted(p for p in args.data.rglob("*") if p.suffix.lower() in (".jpg", ".jpeg", ".png"))
    torch.backends.cudnn.benchmark = True
    res: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d"),
        "device": torch.cuda.get_device_name(0) if DEVICE == "cuda" else platform.processor() or "cpu",
        "gpus": torch.cuda.device_count(), "cpus": os.cpu_count(), "torch": torch.__version__,
        "torchvision": torchvision.__version__,
        "files": len(paths), "images": args.images, "batch": args.batch,
    }  # fmt: skip
    modes = args.modes.split(",")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        if "naive" in modes:
            res["naive"] = naive(paths, args.naive_images or min(args.images, 500))
            print(f"naive      {res['naive']:10.1f} img/s", flush=True)
        if "dataloader" in modes:
            bs = 256 if args.batch == "auto" else int(args.batch)
            res["dataloader"] = dataloader(paths, args.images, args.workers, bs)
            print(f"dataloader {res['dataloader']:10.1f} img/s", flush=True)
        variants = [(int(p), j) for j in args.jpeg.split(",") for p in args.procs.split(",")]
        for mode, gpus in (("gpuprov1", "0" if DEVICE == "cuda" else "cpu"), ("gpuprov2", "0,1")):
            if mode in modes and (mode == "gpuprov1" or torch.cuda.device_count() >= 2):
                n = args.images * (2 if mode == "gpuprov2" else 1)
                for procs, jpeg in variants:
                    key = mode if (procs, jpeg) == variants[0] else f"{mode}-p{procs}-{jpeg}"
                    res[key] = r = gpuprov(paths, n, gpus, work, args.batch, args.threads, procs, jpeg)
                    print(f"{key}   {r['steady']:10.1f} img/s steady, {r['end_to_end']:.1f} end to end"
                          f" ({r['wall_s']:.1f} s) util {r['util']}", flush=True)  # fmt: skip
                    if args.warm:
                        res[key + "-warm"] = w = gpuprov(paths, n, gpus, work, args.batch, args.threads, procs, jpeg,
                                                         warm=True)  # fmt: skip
                        print(f"{key}-warm   {w['job']:10.1f} img/s for a job on ready workers ({w['job_s']:.1f} s,"
                              f" submit {w['submit_s']:.1f} s; ready after {w['ready_s']:.1f} s) util {w['util']}",
                              flush=True)  # fmt: skip
                    if args.json:
                        args.json.write_text(json.dumps(res, indent=2))
    if "gpuprov1" in res:
        g1 = res["gpuprov1"]["steady"]
        if "naive" in res:
            print(f"gpuprov1 / naive       {g1 / res['naive']:.1f}x")
        if "dataloader" in res:
            print(f"gpuprov1 / dataloader  {g1 / res['dataloader']:.2f}x")
        if "gpuprov2" in res:
            print(f"gpuprov2 / gpuprov1    {res['gpuprov2']['steady'] / g1:.2f}x")
    if args.json:
        args.json.write_text(json.dumps(res, indent=2))


if __name__ == "__main__":
    main()
