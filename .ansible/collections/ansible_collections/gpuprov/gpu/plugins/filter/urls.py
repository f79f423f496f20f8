# Copyright: gpuprov contributors
# Apache-2.0
"""The ``url_shown`` filter: a URL as messages show it (``plugins/plugin_utils/urls.py`` holds the rule)."""

from __future__ import annotations

from typing import Any

from ansible_collections.gpuprov.gpu.plugins.plugin_utils.urls import url_shown as _url_shown


def url_shown(url: Any) -> str:
    """``cuda_runfile_url | gpuprov.gpu.url_shown`` -> the URL with its user information and query values
    replaced by ``***`` (``https://***@host/f.run?token=***``); a URL that cannot be parsed gives ``***``."""
    return _url_shown(str(url))


class FilterModule:
    """url_shown (gpuprov.gpu.url_shown in a play)."""

    def filters(self) -> dict[str, Any]:
        return {"url_shown": url_shown}
