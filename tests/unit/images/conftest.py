"""Queue fixtures (``queue_url`` gives a fresh, empty queue URL per test on each backend), ``bomb_png``, and
torch._dynamo imported before Ansible can break it."""

from __future__ import annotations

import importlib.util
import struct
import sys
import uuid
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from gpuprov.images.queue import Queue, open_queue
from tests.unit.images.forkserver_support import runtime, stub_server

__all__ = ["bomb_png", "make_url", "queue_url", "runtime", "stub_server"]


def _import_dynamo() -> None:
    """Import torch._dynamo (torchvision, torch.export and torch.compile import it) before this folder's test modules,
    with the builtin ``sys.intern``: it refuses to import where ansible-core has replaced ``sys.intern``, which a
    test module of another folder, collected earlier in the same process, may have done by importing Ansible.
    gpuprov's workers and ``gpuprov images`` never import Ansible."""
    if importlib.util.find_spec("torch") is None:
        return
    patched = sys.intern
    sys.intern = getattr(patched, "unpatched_implementation", patched)
    try:
        importlib.import_module("torch._dynamo")
    finally:
        sys.intern = patched


_import_dynamo()

BACKENDS = ("sqlite", "redis")


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    """The queue backend under test."""
    return str(request.param)


@pytest.fixture
def make_url(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> Callable[[str], str]:
    """Returns ``f(query)``: the URL of this test's queue (same store on every call) with a query string."""
    name = f"test-{uuid.uuid4().hex[:12]}"
    if backend == "redis":
        base = f"{request.getfixturevalue('redis_url')}?stream={name}"
    else:
        base = f"sqlite://{tmp_path / name}.db"

    def url(query: str = "") -> str:
        if not query:
            return base
        return f"{base}{'&' if '?' in base else '?'}{query}"

    return url


@pytest.fixture
def queue_url(make_url: Callable[[str], str]) -> str:
    """A fresh queue URL with the default options."""
    return make_url("")


@pytest.fixture
def queue(make_url: Callable[[str], str]) -> Iterator[Queue]:
    """A fresh queue with max_attempts=3."""
    q = open_queue(make_url("max_attempts=3"))
    yield q
    q.close()


def _png_chunk(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))


@pytest.fixture
def bomb_png() -> Callable[[int, int], bytes]:
    """Makes a PNG that declares ``width`` x ``height`` RGB pixels in a few hundred bytes: its IDAT holds
    a few rows of zeros (a decoder allocates the whole image before it finds out)."""

    def make(width: int, height: int) -> bytes:
        header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
        rows = zlib.compress(b"\x00" * (1 + 3 * width) * 4, 9)
        return (b"\x89PNG\r\n\x1a\n" + _png_chunk(b"IHDR", header) + _png_chunk(b"IDAT", rows)
                + _png_chunk(b"IEND", b""))  # fmt: skip

    return make
