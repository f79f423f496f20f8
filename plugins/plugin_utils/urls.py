# Copyright: gpuprov contributors
# Apache-2.0
"""A URL as the roles' messages show it (the ``url_shown`` filter, plugins/filter/urls.py).

A URL carries a credential in its user information (``https://user:password@host/``, or a token alone as the
user, ``https://TOKEN@host/``) or in its query (an API token, the signature of a pre-signed download). The fleet
file takes such a URL only as ``{env: NAME}`` (gpuprov/fleet/types.py, by gpuprov/redact.py's names); a role
cannot tell a credential from its name alone, so it hides the user information and every query value.
"""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit

#: What stands in for a hidden credential.
HIDDEN = "***"


def url_shown(url: str) -> str:
    """``url`` with its user information and every query value replaced by :data:`HIDDEN`
    (``https://u:p@host/f.run?token=abc`` -> ``https://***@host/f.run?token=***``); a URL that cannot be parsed
    is not shown at all (:data:`HIDDEN`)."""
    try:
        parts = urlsplit(url)
        netloc = parts.netloc
        if "@" in netloc:
            netloc = HIDDEN + "@" + netloc.rsplit("@", 1)[1]
        # name=value shows the name; a piece without "=" may be a bare token and is hidden whole
        query = "&".join(piece.split("=", 1)[0] + "=" + HIDDEN if "=" in piece else HIDDEN
                         for piece in parts.query.split("&") if piece)
        return urlunsplit((parts.scheme, netloc, parts.path, query, ""))
    except ValueError:
        return HIDDEN
