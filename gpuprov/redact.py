"""Credentials out of anything gpuprov prints.

* ``scheme://user:password@host`` becomes ``scheme://user:***@host``. The password runs to the last ``@`` of
  the URL, as ``urllib.parse`` and redis-py split the authority, so a password holding ``@``, ``/``, ``:``,
  ``'`` or ``#`` (unescaped, as admins paste them) is hidden whole. Whitespace ends a URL: a password with a
  space cannot be told from the words after it.
* A credential in a query string (``?password=...``, ``&token=...``) becomes ``***``.

Kept apart from :mod:`gpuprov.fleet` so that the image workers (:mod:`gpuprov.images`, shipped to GPU hosts
without the fleet schema and its pydantic) redact queue URLs with the same rule.
"""

from __future__ import annotations

import re

#: ``scheme://user:password@``: the user part has no ``:``, ``@`` or ``/``; the password is everything up to
#: the URL's last ``@`` (the pattern is greedy within one whitespace-free run).
_USERINFO = re.compile(r"(://[^/@\s:'\"]*:)[^\s]*@")

#: Query parameters that carry a credential (``password``, ``passwd``, ``pwd``, ``token``, ``secret``, ...).
_QUERY_SECRET = re.compile(
    r"([?&](?:password|passwd|pwd|pass|token|access_token|secret|api_key|apikey)=)[^&#\s'\"]*", re.IGNORECASE
)


def redact_credentials(text: str) -> str:
    """``text`` with the password of every ``scheme://user:password@host`` URL in it, and every credential
    query parameter, replaced by ``***``."""
    return _QUERY_SECRET.sub(r"\1***", _USERINFO.sub(r"\1***@", text))
