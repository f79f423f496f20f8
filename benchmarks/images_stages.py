"""Where one worker's time goes: each stage of a batch, host time and device time, on one device.

Stages, as a worker runs them on a batch of ``--batch`` images read from ``--data``: ``decode``
(:class:`gpuprov.images.decode.Decoder`), ``resize`` (:func:`crop_resize_batch`), ``normalise``,
``fused`` (the one-kernel crop+resize+normalise of :mod:`gpuprov.images.fused`, where it can run),
``model`` (ResNet-50 TorchScript, random weights, fp16 channels_last on CUDA; ``--variants`` runs it as
loaded and frozen for inference) and ``top5`` (softmax, topk and the copy to the host). For each stage:
host ms = the time Python takes to issue it (no synchronisation), device ms = CUDA events around it;
medians of ``--repeats`` batches after ``--warmup``. ``pipeline`` then runs whole batches back to back
with one synchronisation at the end: one process's images/s with nothing else in its way. On a GPU,
:func:`accuracy` compares the fused kernel and the roi_align path with a float32 reference on the CPU.

    python benchmarks/images_stages.py --data .benchdata --batch 1024 --json stages.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch
import torchvision

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from images_bench import resnet50_file  # this folder is sys.path[0] when the script runs

from gpuprov.images import fused
from gpuprov.images.decode import Decoder
from gpuprov.images.tasks import ModelTask
from gpuprov.images.transforms import crop_resize_batch, normalise

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def _one_batch(blobs: list[bytes], task: ModelTask, decoder: Decoder) -> list[tuple[str, float, Any, Any]]:
    """Run one batch stage by stage: (stage, host seconds, start event, end event) per stage."""
    cuda = DEVICE == "cuda"
    marks: list[tuple[str, float, Any, Any]] = []
    state: dict[str, Any] = {}

    def top5(logits: Any) -> Any:
        scores, classes = torch.softmax(logits.float(), dim=1).topk(5)
        return classes.cpu().tolist(), scores.cpu().tolist()

    steps = (
        ("decode", lambda: decoder.decode(blobs)),
        ("resize", lambda: crop_resize_batch(state["decode"], task.size)),
        ("normalise", lambda: normalise(state["resize"], half=task.half)),
        ("fused", lambda: fused.crop_resize_normalise(state["decode"], task.size, half=task.half)
         if fused.available(DEVICE) else state["normalise"]),
        ("model", lambda: task.forward(state["fused"])),
        ("top5", lambda: top5(state["model"])),
    )
    for name, fn in steps:
        start = torch.cuda.Event(enable_timing=True) if cuda else None
        end = torch.cuda.Event(enable_timing=True) if cuda else None
        if start is not None:
            start.record()
        t0 = time.perf_counter()
        state[name] = fn()
        marks.append((name, time.perf_counter() - t0, start, end))
        if end is not None:
            end.record()
    if cuda:
        torch.cuda.synchronize()
    return marks


def stages(blobs: list[bytes], task: ModelTask, decoder: Decoder, repeats: int, warmup: int) -> dict[str, Any]:
    """Median host and device milliseconds per stage over ``repeats`` batches (after ``warmup``)."""
    host: dict[str, list[float]] = {}
    dev: dict[str, list[float]] = {}
    for r in range(warmup + repeats):
        marks = _one_batch(blobs, task, decoder)
        if r < warmup:
            continue
        for name, host_s, start, end in marks:
            host.setdefault(name, []).append(host_s * 1e3)
            if start is not None:
                dev.setdefault(name, []).append(start.elapsed_time(end))
    out: dict[str, Any] = {}
    for name, values in host.items():
        out[name] = {"host_ms": round(statistics.median(values), 2)}
        if name in dev:
            out[name]["device_ms"] = round(statistics.median(dev[name]), 2)
    return out


def accuracy(decoded: list[Any], size: int) -> dict[str, float]:
    """Largest absolute difference (normalised units) of the fused kernel (float32 output) and of the
    fp16 roi_align path on the GPU to the reference computed in float32 on the CPU."""
    from gpuprov.images.decode import Decoded

    on_cpu = [Decoded(d.pixels.cpu(), d.max_value) for d in decoded]
    ref = normalise(crop_resize_batch(on_cpu, size), half=False)
    kernel = fused.crop_resize_normalise(decoded, size, half=False).cpu()
    roi_fp16 = normalise(crop_resize_batch(decoded, size), half=False).cpu()
    return {
        "fused_max_abs": round((kernel - ref).abs().max().item(), 6),
        "fused_mean_abs": round((kernel - ref).abs().mean().item(), 6),
        "roi_align_fp16_max_abs": round((roi_fp16 - ref).abs().max().item(), 6),
        "roi_align_fp16_mean_abs": round((roi_fp16 - ref).abs().mean().item(), 6),
    }


def pipeline(blobs: list[bytes], task: ModelTask, decoder: Decoder, batches: int) -> float:
    """Images/s of ``batches`` whole batches back to back in this process (one sync at the end)."""
    rows = 0
    if DEVICE == "cuda":
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(batches):
        decoded = decoder.decode(blobs)
        logits = task.forward(fused.resize_normalise(decoded, task.size, half=task.half)).float()
        classes = torch.softmax(logits, dim=1).topk(5)[1].cpu()
        rows += len(classes)
    return rows / (time.perf_counter() - t0)


def _decode_loop(paths: list[str], batch: int, seconds: float, threads: int, barrier: Any, out: Any) -> None:
    blobs = [Path(paths[i % len(paths)]).read_bytes() for i in range(batch)]
    decoder = Decoder(DEVICE, threads)
    for _ in range(2):
        decoder.decode(blobs)
    barrier.wait()
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        decoder.decode(blobs)
        n += batch
    if DEVICE == "cuda":
        torch.cuda.synchronize()
    out.put((n, time.perf_counter() - t0))


def decode_rate(paths: list[Path], batch: int, procs: int, seconds: float, threads: int) -> float:
    """Images/s of the JPEG decode alone, summed over ``procs`` processes decoding at the same time."""
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    barrier, out = ctx.Barrier(procs), ctx.Queue()
    workers = [ctx.Process(target=_decode_loop, args=([str(p) for p in paths], batch, seconds, threads, barrier, out))
               for _ in range(procs)]  # fmt: skip
    for w in workers:
        w.start()
    results = [out.get() for _ in workers]
    for w in workers:
        w.join()
    return sum(n / t for n, t in results)


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text}: expected a number >= 1")
    return value


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, required=True)
    ap.add_argument("--batch", type=_positive, default=256)
    ap.add_argument("--repeats", type=_positive, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--threads", type=int, default=8)
    ap.add_argument("--variants", default="loaded,frozen", help="model variants, a comma list (none: skip)")
    ap.add_argument("--decode-procs", default="", help="also time the decode alone in N processes, a comma list")
    ap.add_argument("--seconds", type=float, default=10.0, help="how long each --decode-procs point decodes")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    paths = sorted(p for p in args.data.rglob("*") if p.suffix.lower() in (".jpg", ".jpeg"))
    if not paths:
        ap.error(f"--data {args.data}: no .jpg/.jpeg files there (benchmarks/make_benchdata.py makes a set)")
    procs_list = [p.strip() for p in args.decode_procs.split(",") if p.strip()]
    if any(not p.isdigit() or int(p) < 1 for p in procs_list):
        ap.error(f"--decode-procs {args.decode_procs}: expected a comma list of process counts >= 1")
    blobs = [paths[i % len(paths)].read_bytes() for i in range(args.batch)]
    decoder = Decoder(DEVICE, args.threads)
    res: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "device": torch.cuda.get_device_name(0) if DEVICE == "cuda" else "cpu",
        "torch": torch.__version__, "torchvision": torchvision.__version__, "batch": args.batch,
    }  # fmt: skip
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        variants = [v for v in args.variants.split(",") if v not in ("", "none")]
        model = resnet50_file(Path(tmp)) if variants else Path(tmp)
        for variant in variants:
            task = ModelTask(model, DEVICE, optimize=variant == "frozen")
            st = stages(blobs, task, decoder, args.repeats, args.warmup)
            rate = pipeline(blobs, task, decoder, args.repeats)
            res[variant] = {"stages": st, "pipeline_img_s": round(rate, 1)}
            dev_ms = sum(s.get("device_ms", 0.0) for k, s in st.items() if k not in ("resize", "normalise"))
            print(f"{variant}: {json.dumps(st)}", flush=True)
            print(f"{variant}: device sum {dev_ms:.1f} ms/batch ({args.batch / dev_ms * 1e3 if dev_ms else 0:.0f} img/s"
                  f" if only device time counted); pipeline {rate:.0f} img/s in one process", flush=True)  # fmt: skip
    if DEVICE == "cuda" and fused.available(DEVICE):
        res["accuracy"] = accuracy(decoder.decode(blobs[:128]), 224)
        print(f"against a float32 reference on the CPU (128 images): {json.dumps(res['accuracy'])}", flush=True)
    decoder.close()
    for procs in [int(p) for p in procs_list]:
        rate = decode_rate(paths, args.batch, procs, args.seconds, args.threads)
        res[f"decode_p{procs}_img_s"] = round(rate, 1)
        print(f"decode alone, {procs} process(es) at once: {rate:.0f} img/s in all", flush=True)
    if args.json:
        args.json.write_text(json.dumps(res, indent=2))


if __name__ == "__main__":
    main()
