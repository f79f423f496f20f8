"""Shared libraries compiled from C for stand-in packages: real ELF files with the SONAME asked for.

Tests read the SONAMEs with readelf and load the libraries with ctypes, so each stand-in library exports the
real library's version call (see :mod:`gpuprov.lab.standin.toolkit`).
"""

from __future__ import annotations

import functools
import shutil
import subprocess
import tempfile
from pathlib import Path

from gpuprov.exceptions import ConfigError, EnvironmentMissing


@functools.lru_cache(maxsize=64)
def shared_library(soname: str, source: str) -> bytes:
    """Compile C ``source`` with ``gcc -shared -Wl,-soname`` into a stripped shared library whose DT_SONAME is
    ``soname``; return the ELF bytes (cached per ``soname`` and ``source``).

    Raises:
        EnvironmentMissing: gcc is not installed.
        ConfigError: the compiler failed (its last 2000 characters of stderr in the message).
    """
    gcc = shutil.which("gcc")
    if gcc is None:
        raise EnvironmentMissing("gcc not found: install gcc to build the stand-in CUDA libraries")
    with tempfile.TemporaryDirectory(prefix="gpuprov-standin-so-") as tmp:
        src, out = Path(tmp) / "lib.c", Path(tmp) / soname
        src.write_text(source, encoding="utf-8")
        proc = subprocess.run([gcc, "-shared", "-fPIC", "-O2", "-s", f"-Wl,-soname,{soname}", "-o", str(out),
                               str(src)], capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise ConfigError(f"gcc failed building {soname}: {proc.stderr.strip()[-2000:]}")
        return out.read_bytes()
