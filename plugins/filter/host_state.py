# Copyright: gpuprov contributors
# Apache-2.0
"""Filters that decide, on the controller, whether a file task would act, from one ``gpuprov.gpu.host_state`` read
(its ``paths`` and ``files``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ansible.errors import AnsibleFilterError


def file_differs(state: Any, path: Any, content: Any, mode: Any = "0644", uid: Any = 0, gid: Any = 0) -> bool:
    """``state | gpuprov.gpu.file_differs(path, content, mode, uid, gid)`` -> whether writing ``content`` to
    ``path`` with permission bits ``mode`` (four octal digits) and owner ``uid``:``gid`` would change the file:
    it is missing, not a regular file, unreadable, or its text, mode or owner differ. ``state`` is a
    ``host_state`` result that read ``path`` (``read``) and ``lstat``-ed it (``paths``).

    Raises:
        AnsibleFilterError: ``state`` did not read ``path`` into both ``paths`` and ``files``.
    """
    paths = state.get("paths") if isinstance(state, Mapping) else None
    files = state.get("files") if isinstance(state, Mapping) else None
    if not isinstance(paths, Mapping) or not isinstance(files, Mapping) or path not in paths or path not in files:
        raise AnsibleFilterError(f"file_differs: the state must be a host_state result with {path!r} in both "
                                 "'paths' and 'read'")
    info = paths[path]
    if not info.get("isreg") or files[path] is None:
        return True
    return (files[path] != str(content) or info.get("mode") != str(mode).rjust(4, "0")
            or info.get("uid") != int(uid) or info.get("gid") != int(gid))


class FilterModule:
    """file_differs (gpuprov.gpu.file_differs in a play)."""

    def filters(self) -> dict[str, Any]:
        return {"file_differs": file_differs}
