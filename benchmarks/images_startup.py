#!/usr/bin/env python3
"""Benchmark: an image worker's start-up phases in isolation, to see which of them a job can avoid paying.

Each measurement runs in fresh Python processes (this process never imports torch), so the page cache is the
only thing one measurement leaves to the next (run the command twice to see a warm machine):

* ``imports``: wall seconds of ``import torch``, and of ``import torch, torchvision``, in one process, then of
  ``--procs`` processes importing both at once (what the workers of one GPU do today); with
  ``python -X importtime`` the cumulative seconds of ``torchvision`` and of the ``torch._dynamo`` it pulls in.
* ``spawn`` against ``fork``: wall seconds until ``--procs`` workers have a CUDA context and the model loaded and
  frozen (``gpuprov.images.tasks.ModelTask``): each a new interpreter that imports torch itself, or each forked
  from one process that imported torch and torchvision once and never touched CUDA (a fork server).
* ``cudnn``: one process, the frozen model at ``--batch`` (fp16, channels_last, random input): the first
  forward's seconds (cuDNN's autotuning when ``torch.backends.cudnn.benchmark`` is on) and the steady images/s,
  with autotuning on and off.

    python benchmarks/images_startup.py --model rn50.pt --procs 8 --batch 1024 --json startup.json
    python benchmarks/images_startup.py --make-model resnet50 --work /tmp/st --json startup.json

Not a test: nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

READY = """
import os, sys, time
from pathlib import Path
from gpuprov.images.tasks import ModelTask
t = ModelTask(Path(sys.argv[1]), sys.argv[2])
print(time.time(), flush=True)
"""

FORK_SERVER = """
import os, sys, time
import torch, torchvision
from pathlib import Path
from gpuprov.images.tasks import ModelTask
imported = time.time()
pids = []
for _ in range(int(sys.argv[3])):
    pid = os.fork()
    if pid == 0:
        ModelTask(Path(sys.argv[1]), sys.argv[2])
        print(time.time(), flush=True)
        os._exit(0)
    pids.append(pid)
for pid in pids:
    os.waitpid(pid, 0)
print("imported", imported, flush=True)
"""

CUDNN = """
import json, sys, time
from pathlib import Path
import torch
from gpuprov.images.tasks import ModelTask
task = ModelTask(Path(sys.argv[1]), sys.argv[2])
torch.backends.cudnn.benchmark = sys.argv[4] == "on"
batch = int(sys.argv[3])
x = torch.randn(batch, 3, 224, 224, device=sys.argv[2], dtype=torch.float16 if task.half else torch.float32)
x = x.contiguous(memory_format=torch.channels_last)
sync = torch.cuda.synchronize if sys.argv[2] != "cpu" else (lambda: None)
t0 = time.perf_counter(); task.forward(x); sync(); first = time.perf_counter() - t0
task.forward(x); sync()
n = 20 if sys.argv[2] != "cpu" else 2
t0 = time.perf_counter()
for _ in range(n):
    task.forward(x)
sync()
print(json.dumps({"first_s": first, "img_s": n * batch / (time.perf_counter() - t0)}))
"""


def env() -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p))


def at_once(argvs: list[list[str]]) -> tuple[float, list[str]]:
    """Start every command at once; ``(wall seconds until the last exits, their stdouts)``."""
    t0 = time.time()
    procs = [subprocess.Popen(a, stdout=subprocess.PIPE, text=True, env=env()) for a in argvs]
    outs = [p.communicate()[0] for p in procs]
    if any(p.returncode for p in procs):
        raise SystemExit(f"a process failed: {[p.returncode for p in procs]}")
    return time.time() - t0, outs


def imports(procs: int) -> dict[str, Any]:
    py = sys.executable
    res: dict[str, Any] = {
        "torch_s": at_once([[py, "-c", "import torch"]])[0],
        "torch_torchvision_s": at_once([[py, "-c", "import torch, torchvision"]])[0],
        f"torch_torchvision_{procs}_at_once_s": at_once([[py, "-c", "import torch, torchvision"]] * procs)[0],
    }
    proc = subprocess.run([py, "-X", "importtime", "-c", "import torch, torchvision"], capture_output=True,
                          text=True, env=env(), check=True)  # fmt: skip
    cumulative: dict[str, float] = {}
    for line in proc.stderr.splitlines():  # "import time: self | cumulative | name"
        parts = line.split("|")
        if len(parts) == 3 and parts[1].strip().isdigit():
            name = parts[2].strip()
            if name in ("torch", "torchvision", "torch._dynamo"):
                cumulative.setdefault(f"importtime_{name}_s", int(parts[1]) / 1e6)
    return {**res, **cumulative}


def spawn_fork(model: Path, device: str, procs: int) -> dict[str, Any]:
    py = sys.executable
    t0 = time.time()
    _, outs = at_once([[py, "-c", READY, str(model), device]] * procs)
    spawn = max(float(o.split()[-1]) for o in outs) - t0
    t0 = time.time()
    _, outs = at_once([[py, "-c", FORK_SERVER, str(model), device, str(procs)]])
    lines = outs[0].split()
    imported = float(lines[lines.index("imported") + 1])
    ready = [float(x) for x in lines[: lines.index("imported")]]
    return {"spawn_ready_s": spawn, "fork_imported_s": imported - t0, "fork_ready_s": max(ready) - t0}


def cudnn(model: Path, device: str, batch: int) -> dict[str, Any]:
    res: dict[str, Any] = {}
    for mode in ("on", "off"):
        _, outs = at_once([[sys.executable, "-c", CUDNN, str(model), device, str(batch), mode]])
        res[f"benchmark_{mode}"] = json.loads(outs[0].strip().splitlines()[-1])
    return res


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", type=Path, help="a TorchScript model file")
    ap.add_argument("--make-model", choices=["resnet50"], help="write a random-weights TorchScript ResNet-50")
    ap.add_argument("--work", type=Path, default=Path("/tmp/gpuprov-images-startup"))
    ap.add_argument("--device", default="cuda", help="cuda (the first visible GPU) or cpu")
    ap.add_argument("--procs", type=int, default=8)
    ap.add_argument("--batch", type=int, default=1024)
    ap.add_argument("--parts", nargs="+", default=["imports", "spawn_fork", "cudnn"],
                    choices=["imports", "spawn_fork", "cudnn"])  # fmt: skip
    ap.add_argument("--json", type=Path, dest="json_path")
    args = ap.parse_args(argv)
    if (args.model is None) == (args.make_model is None):
        ap.error("give --model FILE or --make-model resnet50")
    model = args.model
    if model is None:
        args.work.mkdir(parents=True, exist_ok=True)
        code = (f"import sys, pathlib; sys.path.insert(0, {str(ROOT / 'benchmarks')!r}); import images_bench; "
                f"images_bench.resnet50_file(pathlib.Path({str(args.work)!r}))")
        subprocess.run([sys.executable, "-c", code], check=True, env=env())
        model = args.work / "resnet50.pt"
    report: dict[str, Any] = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "procs": args.procs,
                              "batch": args.batch, "device": args.device, "model": str(model)}
    for part in args.parts:
        if part == "imports":
            report["imports"] = imports(args.procs)
        elif part == "spawn_fork":
            report["spawn_fork"] = spawn_fork(model, args.device, args.procs)
        else:
            report["cudnn"] = cudnn(model, args.device, args.batch)
        print(json.dumps({part: report[part]}), flush=True)
    if args.json_path:
        args.json_path.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
