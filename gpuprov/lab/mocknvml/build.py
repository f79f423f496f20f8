"""Compile the mock ``libnvidia-ml.so.1`` from ``src/*.c`` with the system C compiler."""

from __future__ import annotations

import logging
import os
import shlex
import shutil
import subprocess
import tempfile
from pathlib import Path

from gpuprov.exceptions import EnvironmentMissing

log = logging.getLogger(__name__)

SRC_DIR = Path(__file__).parent / "src"
LIBRARY_NAME = "libnvidia-ml.so.1"
CFLAGS = ("-shared", "-fPIC", "-O2", "-Wall", "-Wextra", "-Werror", "-fvisibility=hidden")
#: Extra flags for the AddressSanitizer/UBSan variant used by the memory-safety test.
SANITIZE_FLAGS = ("-g", "-fno-omit-frame-pointer", "-fsanitize=address,undefined")


def sources() -> list[Path]:
    """Return the C sources the library is built from, sorted."""
    return sorted(SRC_DIR.glob("*.c"))


def compiler() -> str:
    """Return the C compiler: ``$CC`` or ``cc``; raise EnvironmentMissing when there is none."""
    name = os.environ.get("CC", "cc")
    path = shutil.which(shlex.split(name)[0]) if name else None
    if path is None:
        raise EnvironmentMissing(f"no C compiler ({name!r}) on PATH; install gcc to build the mock NVML")
    return name


def build_library(out_dir: Path, *, sanitize: bool = False) -> Path:
    """Compile the mock NVML into ``out_dir/libnvidia-ml.so.1`` (soname ``libnvidia-ml.so.1``).

    ``sanitize=True`` builds with AddressSanitizer and UBSan (the process loading it then needs
    libasan preloaded). Returns the library path; raises EnvironmentMissing when no compiler is
    found and :class:`subprocess.CalledProcessError` with the compiler output when it fails.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / LIBRARY_NAME
    flags = [*CFLAGS, *(SANITIZE_FLAGS if sanitize else ())]
    with tempfile.NamedTemporaryFile(dir=out_dir, prefix=".libnvidia-ml.", delete=False) as tmp:
        tmp_path = Path(tmp.name)
    cmd = [
        *shlex.split(compiler()),
        *flags,
        f"-Wl,-soname,{LIBRARY_NAME}",
        "-o",
        str(tmp_path),
        *(str(s) for s in sources()),
        "-lpthread",
    ]
    log.debug("building mock NVML: %s", shlex.join(cmd))
    try:
        subprocess.run(cmd, check=True, capture_output=True, text=True)
    except subprocess.CalledProcessError:
        tmp_path.unlink(missing_ok=True)
        raise
    tmp_path.chmod(0o755)
    tmp_path.replace(target)
    return target
