"""Self-extracting shell archives (``.run``) for stand-ins of NVIDIA's runfiles, in the manner of makeself
(https://makeself.io/), which NVIDIA's CUDA and driver runfiles are built with.

:func:`self_extracting_archive` turns a folder and the installer script inside it into one file: a POSIX ``sh``
header, then the folder as a gzip-compressed tar. ``sh FILE.run ARGS`` unpacks the tar into a fresh directory
under ``$TMPDIR`` (``/tmp`` by default), runs ``sh ./<installer> ARGS`` there, removes the directory and exits
with the installer's status. Two of makeself's own options work as there: ``--list`` prints the payload's files
and ``--noexec --target DIR`` only unpacks into ``DIR``. Nothing else is makeself's: no checksums in the header
(gpuprov pins the whole file by sha256), no compression choice, no license prompt.
"""

from __future__ import annotations

import gzip
import io
import tarfile
from pathlib import Path

from gpuprov.exceptions import ConfigError

#: The line after which the payload starts.
PAYLOAD_MARKER = "__GPUPROV_PAYLOAD_BELOW__"

#: The header (format fields: ``label``, ``installer`` and ``marker``).
HEADER = """\
#!/bin/sh
# {label}
# Self-extracting archive built by gpuprov (gpuprov.lab.standin.selfextract): a sh header, then a tar.gz.
set -eu
skip=$(awk '/^{marker}$/ {{ print NR + 1; exit 0 }}' "$0")
payload() {{ tail -n +"$skip" "$0"; }}
case "${{1:-}}" in
  --list)
    payload | tar -tzf -
    exit 0
    ;;
  --noexec)
    [ "${{2:-}}" = --target ] && [ -n "${{3:-}}" ] || {{ echo "usage: $0 --noexec --target DIR" >&2; exit 2; }}
    mkdir -p "$3"
    payload | tar -xzf - -C "$3"
    exit 0
    ;;
esac
work=$(mktemp -d "${{TMPDIR:-/tmp}}/gpuprov-run.XXXXXX")
trap 'rm -rf "$work"' EXIT
payload | tar -xzf - -C "$work"
rc=0
(cd "$work" && sh ./{installer} "$@") || rc=$?
exit "$rc"
{marker}
"""


def self_extracting_archive(folder: Path, installer: str, out: Path, label: str) -> Path:
    """Write ``folder`` (with ``installer``, a ``sh`` script relative to it) as the self-extracting archive
    ``out`` (mode 0755) and return ``out``. Files keep their modes; owners are root (uid 0) and times are 0, so
    the same folder gives the same bytes.

    Raises:
        ConfigError: ``installer`` is not a file inside ``folder``, or ``label`` spans lines.
    """
    if not (folder / installer).is_file() or Path(installer).is_absolute() or ".." in Path(installer).parts:
        raise ConfigError(f"self-extracting archive: installer {installer!r} is not a file inside {folder}")
    if "\n" in label:
        raise ConfigError("self-extracting archive: the label must be one line")
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for path in sorted(folder.rglob("*")):
            info = tar.gettarinfo(str(path), arcname=path.relative_to(folder).as_posix())
            info.uid = info.gid = 0
            info.uname = info.gname = "root"
            info.mtime = 0
            if info.isfile():
                with path.open("rb") as handle:
                    tar.addfile(info, handle)
            else:
                tar.addfile(info)
    header = HEADER.format(label=label, installer=installer, marker=PAYLOAD_MARKER).encode()
    out.write_bytes(header + gzip.compress(buffer.getvalue(), mtime=0))
    out.chmod(0o755)
    return out
