# Copyright: gpuprov contributors
# Apache-2.0
"""The credentials a URL can carry, and the URL as logs and reports show it: the one copy of the rule.

A URL carries a credential in its user information (``https://user:password@host/``, or a token alone as the
user, ``https://TOKEN@host/``) or in its query: an API token or key, or the signature of a pre-signed download
(Amazon S3's ``X-Amz-Signature`` and ``X-Amz-Credential``, Google Cloud Storage's ``X-Goog-Signature``, an Azure
shared access signature's ``sig``). The fleet file takes such a URL only as ``{env: NAME}`` (gpuprov/fleet/types.py),
and the roles show it through the ``url_shown`` filter (plugins/filter/urls.py).
"""

from __future__ import annotations

import re
from urllib.parse import parse_qsl, urlsplit, urlunsplit

#: Query parameter names that carry a credential (matched case-insensitively): ``token``, ``key``, ``sig``,
#: ``signature``, ``secret``, ``password``, ``auth``, ``credential``, each alone, after ``-``, ``_`` or ``.``
#: (``access_token``, ``api_key``) or after api, access, auth, private, secret or session (``apikey``), and the
#: pre-signed URL parameters of S3 (``X-Amz-*``) and Google Cloud Storage (``X-Goog-*``).
CREDENTIAL_PARAM = re.compile(
    r"(^|[-_.]|api|access|auth|private|secret|session)(token|key|sig|signature|secret|passw(or)?d|pwd|auth"
    r"|credentials?)$|^x-(amz|goog)-",
    re.IGNORECASE,
)

#: What stands in for a hidden credential.
HIDDEN = "***"


def credential_params(url: str) -> list[str]:
    """Names of the query parameters of ``url`` that carry a credential (:data:`CREDENTIAL_PARAM`), in order.

    Raises:
        ValueError: ``url`` cannot be parsed (``urllib.parse.urlsplit``).
    """
    query = urlsplit(url).query
    return [name for name, _value in parse_qsl(query, keep_blank_values=True) if CREDENTIAL_PARAM.search(name)]


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
