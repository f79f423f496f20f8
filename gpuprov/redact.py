"""Passwords out of anything gpuprov prints: ``scheme://user:password@host`` becomes ``scheme://user:***@host``.

Kept apart from :mod:`gpuprov.fleet` so that the image workers (:mod:`gpuprov.images`, shipped to GPU hosts
without the fleet schema and its pydantic) redact queue URLs with the same rule.
"""

from __future__ import annotations

import re

#: ``scheme://user:password@`` in any URL a message quotes: the password never reaches the output.
_USERINFO = re.compile(r"(://[^/@\s:'\"]*:)[^/@\s'\"]*@")


def redact_credentials(text: str) -> str:
    """``text`` with the password of every ``scheme://user:password@host`` URL in it replaced by ``***``."""
    return _USERINFO.sub(r"\1***@", text)
