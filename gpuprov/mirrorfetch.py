"""Reading a site's apt mirror over HTTP(S): files and the ``Packages`` index of a flat repository, with the
mirror's ``user:password@`` sent as HTTP basic auth to that URL prefix only, and recorded redacted.

Used by :mod:`gpuprov.bundle` for the CUDA repository the roles would install from.
"""

from __future__ import annotations

import gzip
import http.client
import logging
import urllib.error
import urllib.parse
import urllib.request
import zlib

from debian.deb822 import Packages

from gpuprov.exceptions import ConfigError, EnvironmentMissing
from gpuprov.redact import escape_userinfo, redact_credentials

log = logging.getLogger(__name__)

#: Seconds one request may take.
TIMEOUT_S = 60

#: Credentials of the mirrors this process reads, by URL prefix (the URL without ``user:password@``): sent as
#: HTTP basic auth to that prefix only (``add_unredirected_header``: not to a host a redirect points at).
_PASSWORDS = urllib.request.HTTPPasswordMgrWithPriorAuth()
_OPENER = urllib.request.build_opener(urllib.request.HTTPBasicAuthHandler(_PASSWORDS))
#: What a redacted URL carries instead of the password (as :func:`redact_credentials` writes it).
REDACTED = "***"


def _without_userinfo(url: str) -> tuple[str, str | None, str | None]:
    """``https://user:pa%40ss@host/p/`` -> (``https://host/p/``, ``user``, ``pa@ss``); names percent-decoded. A
    password written unescaped (``pa/ss``, ``pa@ss``) is read whole (:func:`escape_userinfo`)."""
    url = escape_userinfo(url)
    parts = urllib.parse.urlsplit(url)
    if "@" not in parts.netloc:
        return url, None, None
    hostport = parts.netloc.rpartition("@")[2]
    plain = urllib.parse.urlunsplit(parts._replace(netloc=hostport))
    user = urllib.parse.unquote(parts.username) if parts.username is not None else None
    password = urllib.parse.unquote(parts.password) if parts.password is not None else None
    return plain, user, password


def register_credentials(url: str) -> str:
    """Remember the ``user:password@`` of ``url`` for every later request under it, and return ``url`` with
    the password replaced by ``***`` (what the manifest stores and messages show). A URL without a password,
    or with ``***`` in its place, is returned as it is.

    Raises:
        ConfigError: ``url`` cannot be parsed (e.g. an unclosed IPv6 bracket); the message shows it redacted.
    """
    try:
        plain, user, password = _without_userinfo(url)
    except ValueError as exc:
        raise ConfigError(f"mirrors.cuda_repo_url {redact_credentials(url)} is not a valid URL ({exc}) - correct it "
                          "(or the environment variable it names)") from None
    if user is None or password is None or password == REDACTED:
        return url
    _PASSWORDS.add_password(None, plain, user, password, is_authenticated=True)
    parts = urllib.parse.urlsplit(plain)
    redacted = urllib.parse.urlunsplit(parts._replace(netloc=f"{urllib.parse.quote(user, safe='')}:{REDACTED}@"
                                                             f"{parts.netloc}"))
    log.debug("mirror: basic auth as %s for %s", user, plain)
    return redacted


def fetch(url: str) -> bytes:
    """The body of ``url`` (bytes). Credentials in it (or registered for it by :func:`register_credentials`)
    go as HTTP basic auth, never in the request line. Raises urllib.error.URLError / OSError."""
    plain = _without_userinfo(register_credentials(url))[0]
    with _OPENER.open(plain, timeout=TIMEOUT_S) as response:
        data: bytes = response.read()
    return data


def fetch_index(url: str) -> list[Packages]:
    """The package paragraphs of the flat repository at ``url`` (``Packages.gz``, else ``Packages``),
    amd64 and all only. Raises EnvironmentMissing when neither can be read."""
    errors = []
    for name, decode in (("Packages.gz", gzip.decompress), ("Packages", lambda b: b)):
        try:
            text = decode(fetch(url + name)).decode("utf-8")
        except (OSError, EOFError, zlib.error, urllib.error.URLError, ValueError, http.client.HTTPException) as exc:
            # EOFError, zlib.error: a truncated or corrupt Packages.gz
            errors.append(redact_credentials(f"{url}{name}: {exc}"))
            continue
        return [p for p in Packages.iter_paragraphs(text.splitlines(keepends=True), use_apt_pkg=False)
                if p.get("Architecture") in ("amd64", "all")]
    raise EnvironmentMissing("cannot read the repository index: " + "; ".join(errors))
