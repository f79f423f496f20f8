"""``python -m gpuprov.lab.standin OUT [--preset NAME ...] [--headers-target DIR]``: build a signed repository."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from gpuprov.exceptions import GpuprovError
from gpuprov.lab.standin.catalogue import PRESETS, preset
from gpuprov.lab.standin.repo import build_repository


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gpuprov.lab.standin", description=__doc__)
    parser.add_argument("out", type=Path, help="repository directory to create")
    parser.add_argument("--preset", action="append", choices=PRESETS, required=True)
    parser.add_argument("--headers-target", default=None, help="real headers directory stand-in headers link to")
    args = parser.parse_args(argv)
    specs = [spec for name in args.preset for spec in preset(name, args.headers_target)]
    try:
        repo = build_repository(specs, args.out)
    except GpuprovError as exc:
        print(f"gpuprov.lab.standin: {exc}", file=sys.stderr)
        return exc.exit_code
    print(repo.source_line())
    return 0


if __name__ == "__main__":
    sys.exit(main())
