# Copyright: gpuprov contributors
# Apache-2.0
"""All-reduce bus bandwidth across this host's GPUs through torch.distributed (NCCL), one process per GPU.

Shipped to the host by the verify role and run with a Python that has torch. Prints exactly one JSON object
on stdout and exits 0 whenever it could say something (torch missing, no CUDA, fewer than two GPUs are
reported as ``available: false`` with a ``reason``); a crash of a worker gives a non-zero exit.

Bandwidths follow nccl-tests' definitions (github.com/NVIDIA/nccl-tests, doc/PERFORMANCE.md):
``algbw = size / time`` and, for all-reduce, ``busbw = algbw * 2 * (n - 1) / n``, in GB/s (1e9 bytes/s).
``time`` is the mean over the timed iterations of the slowest rank (max over ranks).

Output keys: available, reason, world_size, size_bytes, dtype, iterations, warmup, time_s, algbw_gbps,
busbw_gbps, correct, torch_version, cuda_version, nccl_version, gpus (names), env (NCCL_* variables seen).

Runs on Python 3.8+.
"""

import argparse
import json
import os
import socket
import sys
import tempfile
import time


def _free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _worker(rank, world, port, args, out_path):
    import torch
    import torch.distributed as dist

    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", init_method="tcp://127.0.0.1:%d" % port, rank=rank, world_size=world)
    try:
        numel = args.size_bytes // 4
        buf = torch.full((numel,), float(rank + 1), dtype=torch.float32, device="cuda")
        dist.all_reduce(buf)
        torch.cuda.synchronize()
        expected = world * (world + 1) / 2.0
        correct = bool(torch.all(buf == expected).item())
        buf.zero_()
        for _ in range(args.warmup):
            dist.all_reduce(buf)
        torch.cuda.synchronize()
        dist.barrier()
        start = time.perf_counter()
        for _ in range(args.iters):
            dist.all_reduce(buf)
        torch.cuda.synchronize()
        elapsed = torch.tensor([(time.perf_counter() - start) / args.iters], dtype=torch.float64, device="cuda")
        flags = torch.tensor([1 if correct else 0], dtype=torch.int32, device="cuda")
        dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)
        dist.all_reduce(flags, op=dist.ReduceOp.MIN)
        if rank == 0:
            seconds = float(elapsed.item())
            algbw = args.size_bytes / seconds / 1e9
            nccl = None
            try:
                nccl = ".".join(str(v) for v in torch.cuda.nccl.version())
            except Exception:
                nccl = None
            with open(out_path, "w") as handle:
                json.dump({
                    "available": True, "reason": None, "world_size": world, "size_bytes": args.size_bytes,
                    "dtype": "float32", "iterations": args.iters, "warmup": args.warmup, "time_s": seconds,
                    "algbw_gbps": round(algbw, 2), "busbw_gbps": round(algbw * 2 * (world - 1) / world, 2),
                    "correct": bool(flags.item()), "torch_version": torch.__version__,
                    "cuda_version": torch.version.cuda, "nccl_version": nccl,
                    "gpus": [torch.cuda.get_device_name(i) for i in range(world)],
                    "env": {k: v for k, v in sorted(os.environ.items()) if k.startswith("NCCL_")},
                }, handle)
    finally:
        dist.destroy_process_group()


def _unavailable(reason, **extra):
    result = {"available": False, "reason": reason}
    result.update(extra)
    print(json.dumps(result))
    return 0


def main(argv=None):
    """Measure and print the JSON result; see the module docstring."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-bytes", type=int, default=1 << 30, help="bytes per all-reduce (float32)")
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--max-gpus", type=int, default=0, help="use at most this many GPUs (0: all)")
    args = parser.parse_args(argv)
    try:
        import torch
        import torch.distributed as dist
        import torch.multiprocessing as mp
    except ImportError as exc:
        return _unavailable("torch is not importable by %s: %s" % (sys.executable, exc))
    if not torch.cuda.is_available():
        return _unavailable("torch %s sees no CUDA device" % torch.__version__, torch_version=torch.__version__)
    world = torch.cuda.device_count()
    if args.max_gpus:
        world = min(world, args.max_gpus)
    if world < 2:
        return _unavailable("%d GPU visible to torch: an all-reduce needs at least 2" % world,
                            torch_version=torch.__version__, world_size=world)
    if not dist.is_nccl_available():
        return _unavailable("torch %s was built without NCCL" % torch.__version__, torch_version=torch.__version__)
    with tempfile.TemporaryDirectory(prefix="gpuprov-nccl-") as tmp:
        out_path = os.path.join(tmp, "result.json")
        mp.spawn(_worker, args=(world, _free_port(), args, out_path), nprocs=world, join=True)
        with open(out_path) as handle:
            print(json.dumps(json.load(handle)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
