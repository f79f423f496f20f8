"""Benchmark: an image job run the way a user runs it - ``gpuprov images submit``, then ``gpuprov images run``.

1. Writes ``--images`` distinct JPEG files made from the JPEGs in ``--data`` (``benchmarks/make_benchdata.py``
   cuts that set): copy ``i`` of a source file carries a JPEG comment segment (COM) naming ``i`` after its
   APPn segments, so it decodes to the same pixels while no two files have the same bytes or sha256 (as in a
   real image set, where the workers read, hash and write every file).
2. ``gpuprov images submit WORK/images --queue sqlite:///WORK/q-*.db``, as a process; timed apart.
3. ``gpuprov images run --queue ... --out ... --model M --gpus G [--procs-per-gpu P] [--compile C] --json ...``,
   as a process
   (the installed ``gpuprov`` command beside this Python, else ``python -m gpuprov``), while NVML SM and NVJPG
   utilisation (where a GPU is) and host CPU use are sampled (``images_bench.Sampler``).
4. The seeds' naive loop and a plain torch DataLoader (``images_bench.naive`` and ``images_bench.dataloader``)
   on the same files with the same model file, for the ratios (``--baselines none`` leaves them out).

Prints and, with ``--json``, writes: end to end images/s (images / the run's wall clock, process start to
exit; the submit excluded), steady images/s (from the run's first result to its last, from the run's
``--json`` report), the start-up breakdown (the command's own start, then each worker's phases, see
``gpuprov.images.startup``: median and slowest over the workers), the first result, the tail (last result
to exit: the workers drain their queues and exit, the manifest is written), utilisation, the baselines and
the ratios.

    python benchmarks/images_e2e.py --data .benchdata --images 200000 --make-model resnet50 --gpus all \\
        --procs-per-gpu 8 --json e2e.json
    python benchmarks/images_e2e.py --data .benchdata --images 200000 --make-model resnet50 --export \\
        --compile default --json e2e-compiled.json      # the compiled path (an exported .pt2 model)
    python benchmarks/images_e2e.py --data DIR --images 64 --model tiny.pt --gpus cpu --naive-images 16  # CPU
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

LAUNCH_ENV = dict(os.environ)
"""The environment the ``gpuprov`` commands are launched with: this process's before torch and torchvision are
imported (importing torchvision sets ``TORCHINDUCTOR_CACHE_DIR``, which would give the run another fork server and
another compile cache than a user's shell gives it)."""

import images_bench  # noqa: E402
import torch  # noqa: E402
import torchvision  # noqa: E402

JPEG_SOI = b"\xff\xd8"
JPEG_COM = b"\xff\xfe"
FILES_PER_FOLDER = 10_000
"""Files per subfolder of ``WORK/images`` (a few hundred thousand files in one folder slow every listing)."""


def with_comment(data: bytes, text: bytes) -> bytes:
    """``data`` (a JPEG file) with a COM segment holding ``text`` after its APPn segments (JFIF and Exif stay
    first, as their specifications want). Raises ``ValueError`` for bytes that are not a JPEG file."""
    if not data.startswith(JPEG_SOI):
        raise ValueError("not a JPEG file (no SOI marker)")
    pos = 2
    while pos + 4 <= len(data) and data[pos] == 0xFF and 0xE0 <= data[pos + 1] <= 0xEF:
        pos += 2 + int.from_bytes(data[pos + 2 : pos + 4], "big")
    if len(text) > 65533:
        raise ValueError("a JPEG comment holds at most 65,533 bytes")
    return data[:pos] + JPEG_COM + (len(text) + 2).to_bytes(2, "big") + text + data[pos:]


def distinct_jpegs(sources: list[Path], n: int, dest: Path) -> list[Path]:
    """Write ``n`` files under ``dest`` (``dNNN/NNNNNNN.jpg``, :data:`FILES_PER_FOLDER` to a folder, a thread per
    folder): copy ``i`` is ``sources[i % len(sources)]`` with the comment ``gpuprov-e2e copy i``
    (:func:`with_comment`). Returns their paths."""
    blobs = [p.read_bytes() for p in sources]
    paths = [dest / f"d{i // FILES_PER_FOLDER:03d}" / f"{i:07d}.jpg" for i in range(n)]

    def write_folder(first: int) -> None:
        paths[first].parent.mkdir(parents=True, exist_ok=True)
        for i in range(first, min(n, first + FILES_PER_FOLDER)):
            paths[i].write_bytes(with_comment(blobs[i % len(blobs)], f"gpuprov-e2e copy {i}".encode()))

    with concurrent.futures.ThreadPoolExecutor(min(8, os.cpu_count() or 1)) as pool:
        list(pool.map(write_folder, range(0, n, FILES_PER_FOLDER)))
    return paths


def gpuprov_command() -> list[str]:
    """The ``gpuprov`` command a user of this Python runs: its console script, else ``python -m gpuprov``."""
    script = Path(sys.executable).with_name("gpuprov")
    return [str(script)] if script.is_file() else [sys.executable, "-m", "gpuprov"]


def run_args(args: argparse.Namespace, url: str, out: Path, model: Path, report: Path) -> list[str]:
    """``gpuprov images run`` with this benchmark's options."""
    argv = [*gpuprov_command(), "images", "run", "--queue", url, "--out", str(out), "--model", str(model),
            "--gpus", args.gpus, "--cpu-workers", str(args.cpu_workers), "--batch", args.batch,
            "--json", str(report)]  # fmt: skip
    if args.procs_per_gpu is not None:
        argv += ["--procs-per-gpu", str(args.procs_per_gpu)]
    if args.threads is not None:
        argv += ["--threads", str(args.threads)]
    if args.compile is not None:
        argv += ["--compile", args.compile]
    if args.jpeg is not None:
        argv += ["--jpeg", args.jpeg]
    return argv


def startup_breakdown(run: dict[str, Any], launched: float, wall: float) -> dict[str, Any]:
    """The start-up of a run from its ``--json`` report, in seconds: ``cli`` (from launching the command to its
    run starting: interpreter, imports, the options), each worker phase's median and max over the workers,
    when the first and the last worker were ready, the first and last result, the tail (last result to
    exit) and the steps of the run's end (``ending_s``: workers exited, MPS stopped, manifest written), all but the
    phases counted from ``launched`` (``time.monotonic()`` just before the launch)."""
    cli = run["monotonic_start"] - launched
    workers = [w for w in run["workers"] if w["ready_s"] is not None]
    phases = _spread(workers, "startup_s", run["phases"])
    ready = [cli + w["spawned_s"] + w["ready_s"] for w in workers]

    def after_launch(key: str) -> float | None:
        return None if run[key] is None else round(cli + run[key], 3)

    last = after_launch("last_result_s")
    lasts = [cli + w["last_result_s"] for w in run["workers"] if w.get("last_result_s") is not None]
    ending = {step: None if at is None else round(cli + at, 3) for step, at in run.get("ending_s", {}).items()}
    return {
        "forked": sum(1 for w in run["workers"] if w.get("forked")),
        "cli_s": round(cli, 3),
        "phases_s": phases,
        "first_ready_s": round(min(ready), 3) if ready else None,
        "last_ready_s": round(max(ready), 3) if ready else None,
        "first_result_s": after_launch("first_result_s"),
        "first_batch_s": _spread(run["workers"], "first_batch_s"),
        "last_result_s": last,
        "first_worker_done_s": round(min(lasts), 3) if lasts else None,  # the first worker's last result
        "tail_s": None if last is None else round(wall - last, 3),
        "ending_s": ending,
    }


def _spread(workers: list[dict[str, Any]], key: str, order: list[str] | None = None) -> dict[str, dict[str, float]]:
    """Median and max over ``workers`` of each entry of their ``key`` dicts (phase or stage -> seconds), in
    ``order`` (default: as the workers name them, first seen first); an entry no worker has is left out, as is a
    worker without the dict (an older report)."""
    dicts = [d for w in workers if isinstance(d := w.get(key), dict)]
    names = order if order is not None else list(dict.fromkeys(name for d in dicts for name in d))
    return {
        name: {"median": round(statistics.median(vals), 3), "max": round(max(vals), 3)}
        for name in names
        if (vals := [d[name] for d in dicts if name in d])
    }


def compiled_workers(run: dict[str, Any]) -> dict[str, int]:
    """How many workers of a run's report ran their model compiled in each mode or uncompiled and why:
    ``{"default": 8}``, ``{"off (a CPU run)": 1}``; ``{}`` for a built-in task."""
    counts: dict[str, int] = {}
    for worker in run["workers"]:
        choice = worker.get("compile")
        if choice:
            key = choice["mode"] or f"off ({choice['reason']})"
            counts[key] = counts.get(key, 0) + 1
    return counts


def print_breakdown(s: dict[str, Any], workers: int) -> None:
    print(f"start-up, seconds after `gpuprov images run` was launched ({workers} worker(s), {s['forked']} forked by "
          "the fork server a run before left):")  # fmt: skip
    print(f"  command's own start (interpreter, imports, options, queue)  {s['cli_s']:7.2f}")
    for phase, v in s["phases_s"].items():
        print(f"  worker {phase:<8} median {v['median']:7.2f}  max {v['max']:7.2f}")
    print(f"  first worker ready {s['first_ready_s']}, last ready {s['last_ready_s']}")
    print(f"  first result {s['first_result_s']}, last result {s['last_result_s']} (a worker's earliest last result "
          f"{s.get('first_worker_done_s')}), tail to exit {s['tail_s']}")  # fmt: skip
    if s.get("first_batch_s"):
        print("  first batch, seconds per stage (median / max; the stages overlap): " + ", ".join(
            f"{stage.removesuffix('_s')} {v['median']:.2f}/{v['max']:.2f}" for stage, v in s["first_batch_s"].items()))
    if s["ending_s"]:
        print("  then " + ", ".join(f"{step.replace('_', ' ')} {at}" for step, at in s["ending_s"].items()))


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo``), else what :mod:`platform` knows."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def host() -> dict[str, Any]:
    """What ran the benchmark: GPU (or ``cpu``), CPU model and cores, library versions, load average (1 min) now."""
    gpu = images_bench.DEVICE == "cuda"
    return {
        "date": time.strftime("%Y-%m-%d %H:%M %Z"),
        "device": torch.cuda.get_device_name(0) if gpu else "cpu",
        "gpus": torch.cuda.device_count() if gpu else 0,
        "cpu": cpu_model(),
        "cpus": os.cpu_count(),
        "torch": torch.__version__,
        "torchvision": torchvision.__version__,
        "loadavg_1m": round(os.getloadavg()[0], 2),
    }


def baselines(args: argparse.Namespace, files: list[Path], model: Path) -> dict[str, float]:
    """images/s of the seeds' naive loop and the plain DataLoader on ``files`` with the run's model file."""
    wanted = {m for m in args.baselines.split(",") if m and m != "none"}
    res: dict[str, float] = {}
    if not wanted:
        return res
    net = images_bench.load_model(model)
    if "naive" in wanted:
        res["naive"] = images_bench.naive(files, args.naive_images or min(len(files), 500), model=net)
    if "dataloader" in wanted:
        batch = 256 if args.batch == "auto" else int(args.batch)
        res["dataloader"] = images_bench.dataloader(files, len(files), args.workers, batch, model=net)
    return res


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--images", type=int, default=1000, help="distinct files to make and process")
    ap.add_argument("--data", type=Path, default=Path(".benchdata"), help="folder of source JPEGs")
    model = ap.add_mutually_exclusive_group(required=True)
    model.add_argument("--model", type=Path, help="TorchScript (.pt) or exported (.pt2) classifier the workers run")
    model.add_argument("--make-model", choices=["resnet50"], help="write a random-weights TorchScript ResNet-50")
    ap.add_argument("--export", action="store_true", help="with --make-model: write it as a torch.export program "
                    "(.pt2), the form --compile compiles")
    ap.add_argument("--compile", choices=["auto", "off", "default", "reduce-overhead"], default=None,
                    help="as `images run --compile` (default: its default, auto)")
    ap.add_argument("--gpus", default="all", help="as `images run --gpus`: all, cpu, 0,1, GPU-uuid")
    ap.add_argument("--procs-per-gpu", type=int, default=None, help="as `images run` (default: its default)")
    ap.add_argument("--cpu-workers", type=int, default=1, help="as `images run` (with --gpus cpu)")
    ap.add_argument("--batch", default="auto", help="as `images run --batch`")
    ap.add_argument("--threads", type=int, default=None, help="as `images run --threads` (default: its default)")
    ap.add_argument("--jpeg", choices=["auto", "torchvision", "nvimgcodec"], default=None,
                    help="as `images run --jpeg` (default: its default, torchvision)")
    ap.add_argument("--baselines", default="naive,dataloader", help="naive, dataloader, both (naive,dataloader) "
                    "or none")
    ap.add_argument("--naive-images", type=int, default=None, help="images of the naive loop (default min(N, 500))")
    ap.add_argument("--workers", type=int, default=min(16, os.cpu_count() or 1), help="DataLoader workers")
    ap.add_argument("--work", type=Path, default=None, help="where the work folder (files, queue, output) goes")
    ap.add_argument("--json", type=Path, default=None, help="write the results here")
    args = ap.parse_args(argv)
    if args.images < 1:
        ap.error("--images: expected at least 1")
    for name in ("procs_per_gpu", "cpu_workers", "threads", "naive_images"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            ap.error(f"--{name.replace('_', '-')}: expected at least 1")
    if args.workers < 0:
        ap.error("--workers: expected 0 (load in the main process) or more")
    if args.batch != "auto" and not (args.batch.isdigit() and int(args.batch) > 0):
        ap.error(f"--batch {args.batch}: expected auto or a number above 0")
    baselines = {m.strip() for m in args.baselines.split(",")}
    if baselines == {"both"}:
        args.baselines = "naive,dataloader"
    elif not baselines <= {"naive", "dataloader"} and baselines != {"none"}:
        ap.error(f"--baselines {args.baselines}: expected naive, dataloader, both (naive,dataloader) or none")
    if args.json is not None:
        from gpuprov.cli.images_report import check_json_path  # importable once images_bench put the repo on the path
        from gpuprov.exceptions import ConfigError

        try:  # checked before the run, not after it: its results would be lost
            check_json_path(args.json)
        except ConfigError as exc:
            ap.error(exc.message)
    if args.model is not None and not args.model.is_file():
        ap.error(f"--model {args.model}: no such file; give a TorchScript file or use --make-model resnet50")
    if args.export and args.make_model is None:
        ap.error("--export: only with --make-model (a --model file is used as it is)")
    if args.work is not None and not args.work.is_dir():
        ap.error(f"--work {args.work}: no such folder; give an existing folder (the work folder is made in it)")
    if not args.data.is_dir():
        ap.error(f"--data {args.data}: no such folder; make it with python benchmarks/make_benchdata.py {args.data}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    sources = sorted(p for p in args.data.rglob("*") if p.suffix.lower() in (".jpg", ".jpeg"))
    if not sources:
        print(f"--data {args.data}: no JPEG file (*.jpg, *.jpeg) in it", file=sys.stderr)
        return 2
    res: dict[str, Any] = {"host": host(), "images": args.images, "source_files": len(sources), "gpus": args.gpus,
                           "procs_per_gpu": args.procs_per_gpu, "batch": args.batch,
                           "compile": args.compile or "auto"}  # fmt: skip
    with tempfile.TemporaryDirectory(dir=args.work) as tmp:
        work = Path(tmp)
        t0 = time.perf_counter()
        files = distinct_jpegs(sources, args.images, work / "images")
        res["make_files_s"] = round(time.perf_counter() - t0, 2)
        model = args.model.resolve() if args.model else images_bench.resnet50_file(work, export=args.export)
        res["model_format"] = "export" if model.suffix == ".pt2" else "torchscript"
        url = f"sqlite:///{work / 'q.db'}"
        t0 = time.perf_counter()
        subprocess.run([*gpuprov_command(), "images", "submit", str(work / "images"), "--queue", url], check=True,
                       env=LAUNCH_ENV)
        res["submit_s"] = round(time.perf_counter() - t0, 2)
        report = work / "run.json"
        argv = run_args(args, url, work / "out", model, report)
        print("$", " ".join(argv), flush=True)
        with images_bench.Sampler() as sampler:
            launched = time.monotonic()
            proc = subprocess.run(argv, check=False, env=LAUNCH_ENV)
            wall = time.monotonic() - launched
        if proc.returncode != 0:
            print(f"gpuprov images run exited with {proc.returncode}", file=sys.stderr)
            return 1
        run = json.loads(report.read_text())
        rows = [json.loads(line) for line in (work / "out" / "manifest.jsonl").read_text().splitlines()]
        res["distinct_sha256"] = len({r["sha256"] for r in rows})
        res["run"] = run
        res["wall_s"] = round(wall, 3)
        res["end_to_end"] = round(run["images"] / wall, 2)
        res["steady"] = run["steady_images_per_s"]
        res["settings"] = run.get("settings")
        res["compiled"] = compiled_workers(run)
        res["startup"] = startup_breakdown(run, launched, wall)
        res["util"] = sampler.summary()
        res["baselines"] = baselines(args, files, model)
    res["host"]["loadavg_1m_after"] = round(os.getloadavg()[0], 2)
    report_results(res)
    if args.json:
        args.json.write_text(json.dumps(res, indent=2) + "\n")
    return 0


def report_results(res: dict[str, Any]) -> None:
    run = res["run"]
    h = res["host"]
    print(f"{h['date']}  {h['device']} x {h['gpus']}  {h['cpus']} x {h['cpu']}  torch {h['torch']}  "
          f"load {h['loadavg_1m']} -> {h['loadavg_1m_after']}")  # fmt: skip
    print(f"{run['images']} images ({res['distinct_sha256']} distinct sha256), {run['failed']} failed; files made in "
          f"{res['make_files_s']} s, submit {res['submit_s']} s (not counted)")  # fmt: skip
    settings = res.get("settings") or {}
    print(f"settings: {settings.get('procs_per_gpu')} procs/GPU, {settings.get('threads')} decode threads, batch "
          f"{settings.get('batch')}, compile {res['compile']} ({res['model_format']} model): "
          + (", ".join(f"{n} worker(s) {mode}" for mode, n in res["compiled"].items()) or "no model")
          + f"; MPS {settings.get('mps')}")  # fmt: skip
    print(f"end to end  {res['end_to_end']:10.1f} img/s  ({res['wall_s']:.1f} s, launch to exit)")
    steady = res["steady"]
    print(f"steady      {steady:10.1f} img/s  (first result to last)" if steady else "steady      n/a (one result)")
    print_breakdown(res["startup"], len(run["workers"]))
    util = res["util"]
    if not any(k.startswith("sm") for k in util):
        print("GPU utilisation: not sampled (no GPU through NVML)")
    print("utilisation:", ", ".join(f"{k} {v}" for k, v in util.items()) or "no samples")
    for name, rate in res["baselines"].items():
        print(f"{name:<11} {rate:10.1f} img/s")
        res.setdefault("ratios", {})[f"end_to_end/{name}"] = round(res["end_to_end"] / rate, 2)
        if steady:
            res["ratios"][f"steady/{name}"] = round(steady / rate, 2)
    for key, ratio in res.get("ratios", {}).items():
        print(f"{key:<24} {ratio:.2f}x")


if __name__ == "__main__":
    sys.exit(main())
