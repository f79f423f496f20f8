"""Cut the benchmark's image set from the real photographs that :mod:`tests.photos` fetches.

Writes ``--count`` JPEGs (default 400) into ``OUT``: random crops of the large real photos
(``forensics-samples-files`` phone pictures and ``mate-backgrounds`` photos), each scaled so its long
side is 256-500 px with an aspect ratio between 3:4 and 4:3 (ImageNet-like sizes), JPEG quality 90,
4:2:0; every 10th file is progressive (it goes to the CPU decode path, as in real data). The seed is
fixed, so the same packages give the same files. Needs Pillow (a torchvision dependency).

    python benchmarks/make_benchdata.py .benchdata [--count 400] [--seed 0]
"""

from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def make(out: Path, count: int = 400, seed: int = 0) -> list[Path]:
    """Write ``count`` crops into ``out``; returns their paths (``img-0000.jpg`` ...)."""
    from PIL import Image, ImageOps

    from tests.photos import real_images

    rng = random.Random(seed)
    photos = []
    for path in real_images().large + real_images().jpeg:
        with Image.open(path) as im:
            if min(im.size) >= 1000:
                photos.append(ImageOps.exif_transpose(im.convert("RGB")))
    if not photos:
        raise SystemExit("no photo of at least 1000 px was fetched")
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for i in range(count):
        photo = photos[i % len(photos)]
        aspect = rng.uniform(0.75, 4 / 3)
        cw = rng.randint(min(photo.size) // 3, min(photo.size))
        ch = min(photo.size[1], max(16, round(cw / aspect)))
        left, top = rng.randint(0, photo.size[0] - cw), rng.randint(0, photo.size[1] - ch)
        long_side = rng.randint(256, 500)
        scale = long_side / max(cw, ch)
        crop = photo.crop((left, top, left + cw, top + ch)).resize(
            (max(1, round(cw * scale)), max(1, round(ch * scale))), Image.Resampling.BILINEAR
        )
        dest = out / f"img-{i:04d}.jpg"
        crop.save(dest, "JPEG", quality=90, subsampling=2, progressive=(i % 10 == 9))
        written.append(dest)
    return written


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--count", type=int, default=400)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    files = make(args.out, args.count, args.seed)
    size = sum(f.stat().st_size for f in files)
    print(f"{len(files)} JPEGs, {size / 1e6:.1f} MB in {args.out}")


if __name__ == "__main__":
    main()
