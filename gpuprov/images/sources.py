"""The images a ``gpuprov images submit`` names: files, folders (searched recursively), globs and manifests."""

from __future__ import annotations

import glob
import json
from collections.abc import Iterator
from pathlib import Path

from gpuprov.exceptions import ConfigError

IMAGE_SUFFIXES = frozenset(
    {".jpg", ".jpeg", ".png", ".webp", ".gif", ".bmp", ".tif", ".tiff", ".avif", ".heic", ".dcm"}
)
MANIFEST_SUFFIXES = (".txt", ".jsonl")

def expand_sources(sources: tuple[str, ...]) -> Iterator[Path]:
    """Every image path named by ``sources``, absolute, in the order given (folders sorted).

    Raises :class:`ConfigError` (exit 2) for a source that names no image: missing, a device, pipe or socket
    (``/dev/zero``), a folder without image files, a glob matching no file, a manifest without entries.
    """
    for src in sources:
        if not src.strip():  # an unset shell variable: Path("") would be the current folder
            raise ConfigError("an empty source names no image; give files, folders, globs or manifests")
        named = False
        try:
            images = list(_source(src))
        except PermissionError as exc:
            raise ConfigError(
                f"{src}: cannot read {exc.filename or src} (permission denied); give a source this user can read"
            ) from exc
        for image in images:
            named = True
            yield image
        if not named:
            raise ConfigError(
                f"{src}: {_why_empty(Path(src))}; name image files ({', '.join(sorted(IMAGE_SUFFIXES))}),"
                " folders holding them, globs or manifests (.txt, .jsonl)"
            )


def _source(src: str) -> Iterator[Path]:
    path = Path(src)
    if path.is_dir():
        yield from sorted(p.resolve() for p in path.rglob("*") if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES)
    elif path.is_file() and path.suffix.lower() in MANIFEST_SUFFIXES:
        yield from _manifest(path)
    elif path.is_file():
        yield path.resolve()
    elif not path.exists():
        matches = sorted(glob.glob(src, recursive=True))  # noqa: PTH207 - absolute patterns too
        if not matches:
            raise ConfigError(f"{src}: no such file, folder or matching glob")
        yield from (Path(m).resolve() for m in matches if Path(m).is_file())


def _why_empty(path: Path) -> str:
    if path.is_dir():
        return "the folder holds no image file"
    if path.is_file():
        return "the manifest lists no image"
    if path.exists():
        return "not a regular file (a device, pipe or socket)"
    return "the glob matches no file"


def _manifest(path: Path) -> Iterator[Path]:
    """The image paths of a manifest: one path per line (``.txt``), or one JSON object with a ``path``
    string per line (``.jsonl``); relative paths are relative to the manifest. Raises
    :class:`ConfigError` naming the file and line of anything else."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read the manifest as UTF-8 text ({exc})") from None
    for number, raw in enumerate(lines, start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        entry: object = line
        if path.suffix.lower() == ".jsonl":
            try:
                record = json.loads(line)
            except ValueError as exc:
                raise ConfigError(f"{path}:{number}: not JSON ({exc}); write one object per line") from None
            entry = record.get("path") if isinstance(record, dict) else None
        if not isinstance(entry, str) or not entry:
            raise ConfigError(f'{path}:{number}: expected {{"path": "<image file>"}} with a non-empty string path')
        yield (path.parent / entry).resolve()
