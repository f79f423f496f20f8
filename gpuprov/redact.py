"""Credentials out of anything gpuprov prints.

* ``scheme://user:password@host`` becomes ``scheme://user:***@host``. The password runs to the URL's last
  ``@``, so a password holding ``@``, ``/``, ``:``, ``?``, ``#`` or a quote (unescaped, as admins paste them) is
  hidden whole, and a user name holding ``@`` (``user@corp:pw@host``) keeps its password hidden too. A URL
  ends at whitespace, at the quote that opened it (``'redis://u:pw@h'``, ``"url":"..."``) when the text up
  to that quote is a whole ``user:password@`` URL, and where the next ``scheme://`` begins. Whitespace in a
  password cannot be told from the words after it: it ends the URL.
* A credential in a query string (``?password=...``, ``&token=...``, ``;sslpassword=...``, also
  percent-encoded names) becomes ``***``.
* In a command line (:func:`redact_argv`), the value of an option or variable whose name carries a credential
  (``--api-token=...``, ``--password VALUE``, ``HF_TOKEN=...``) becomes ``***``, and the URLs in it as above.

:func:`escape_userinfo` applies the same reading of where a password ends before a URL is parsed, so that
``urllib`` and redis-py see the whole password instead of splitting it into path, query or port (and quoting
the pieces in their errors).

Kept apart from :mod:`gpuprov.fleet` so that the image workers (:mod:`gpuprov.images`, shipped to GPU hosts
without the fleet schema and its pydantic) redact queue URLs with the same rule.
"""

from __future__ import annotations

import re
import shlex
from urllib.parse import quote, unquote

#: Where a URL starts: an optional opening quote and ``scheme://``.
_URL_START = re.compile(r"(['\"]?)\b[A-Za-z][A-Za-z0-9+.-]*://")
_SPACE = re.compile(r"\s")

#: ``?name=value`` / ``&name=value`` / ``;name=value``; the name is decoded before it is judged.
_QUERY_PARAM = re.compile(r"([?&;])([A-Za-z0-9_.%-]+)=([^&;#\s]*)")
#: Parameter names that carry a credential: passwords, tokens, secrets, keys and the signatures and credentials
#: of pre-signed URLs, in any spelling around them (``password``, ``sslpassword``, ``api-key``, ``access_token``,
#: ``client_secret``, Amazon S3's ``X-Amz-Signature`` and ``X-Amz-Credential``, an Azure shared access
#: signature's ``sig``).
_SECRET_NAME = re.compile(r"pass|pwd|token|secret|signature|credential|(?:^|[-_.])(?:key|sig)$|apikey|auth",
                          re.IGNORECASE)


def _userinfo_end(text: str, start: int, quote: str) -> tuple[int, int] | None:
    """For the URL body starting at ``start``: ``(colon, at)``, the indexes of the ``:`` that ends the user
    name and of the ``@`` that ends the password, or None when the URL carries no password."""
    stop = len(text)
    space = _SPACE.search(text, start)
    if space:
        stop = space.start()
    following = _URL_START.search(text, start)
    if following and following.start() < stop:
        stop = following.start()
    runs = [stop]
    closing = text.find(quote, start, stop) if quote else -1
    if closing >= 0:
        runs.insert(0, closing)  # the quoted URL first; the whole run when that is no user:password@ URL
    for end in runs:
        at = text.rfind("@", start, end)
        colon = text.find(":", start, at) if at >= 0 else -1
        if colon >= 0 and "/" not in text[start:colon]:
            return colon, at
    return None


def _redact_userinfo(text: str) -> str:
    out, done, pos = [], 0, 0
    while match := _URL_START.search(text, pos):
        found = _userinfo_end(text, match.end(), match.group(1))
        if found is None:
            pos = match.end()
            continue
        colon, at = found
        out += [text[done:colon + 1], "***"]
        done = pos = at
    out.append(text[done:])
    return "".join(out)


def escape_userinfo(url: str) -> str:
    """``url`` with its user name and password percent-encoded where they hold characters that end a URL's
    authority (``/``, ``?``, ``#``, ``@``, ``:`` in the password): ``redis://u:pa/ss@h/0`` ->
    ``redis://u:pa%2Fss@h/0``. Parts already percent-encoded stay as they are; a URL without ``user:password@``
    is returned unchanged."""
    match = _URL_START.match(url)
    found = _userinfo_end(url, match.end(), match.group(1)) if match else None
    if match is None or found is None:
        return url
    colon, at = found
    user, password = url[match.end():colon], url[colon + 1:at]
    return (url[:match.end()] + quote(unquote(user), safe="") + ":" + quote(unquote(password), safe="")
            + url[at:])


def _redact_query(match: re.Match[str]) -> str:
    separator, name, value = match.groups()
    if value and is_secret_name(name):
        return f"{separator}{name}=***"
    return match.group(0)


def is_secret_name(name: str) -> bool:
    """Whether a parameter or variable called ``name`` (percent-encoded or not) holds a credential: a password,
    token, secret, key, signature or credential, in any spelling around it (``ansible_become_password``,
    ``api_token``, ``X-Amz-Signature``)."""
    return bool(_SECRET_NAME.search(unquote(name)))


def secret_query_names(url: str) -> list[str]:
    """Names of the query parameters of ``url`` that carry a credential (with a value), in order, as written."""
    query = url.split("?", 1)[1] if "?" in url else ""
    return [name for _sep, name, value in _QUERY_PARAM.findall("?" + query)
            if value and is_secret_name(name)]


def redact_credentials(text: str) -> str:
    """``text`` with the password of every ``scheme://user:password@host`` URL in it, and every credential
    query parameter, replaced by ``***``."""
    return _QUERY_PARAM.sub(_redact_query, _redact_userinfo(text))


#: ``--name=value`` / ``-name=value`` / ``NAME=value`` in one argument.
_ARG_ASSIGN = re.compile(r"^(-{0,2})([A-Za-z_][A-Za-z0-9_.-]*)=(.+)$", re.DOTALL)
#: Option and variable names whose value is where a credential is kept, not the credential (``--password-file``,
#: ``--token-path``, Docker's ``POSTGRES_PASSWORD_FILE`` convention), or that turn one off (``--no-password``): the
#: value is shown, an admin needs the path.
_NOT_A_SECRET_VALUE = re.compile(r"[-_.](?:file|path|dir)$|^no-", re.IGNORECASE)
#: An HTTP header in one argument (``Authorization: Bearer ...``, ``X-Api-Key: ...``): name, separator, value.
_HEADER = re.compile(r"^([A-Za-z][A-Za-z0-9_-]*)(:\s*)(\S.*)$", re.DOTALL)
#: A JSON string member (``"password": "..."``): name, what lies between, the value's quoted text.
_JSON_MEMBER = re.compile(r'"([^"\\]*)"(\s*:\s*)"((?:[^"\\]|\\.)*)"')


def _redact_json_member(match: re.Match[str]) -> str:
    name, between, value = match.groups()
    return f'"{name}"{between}"***"' if value and is_secret_name(name) else match.group(0)


def _holds_secret(name: str) -> bool:
    """Whether the value of option or variable ``name`` (without its dashes) is a credential."""
    return is_secret_name(name) and not _NOT_A_SECRET_VALUE.search(name)


def _redact_arg(arg: str) -> str:
    """One argument with its credentials hidden (:func:`redact_argv`), apart from a value in the next one."""
    assign = _ARG_ASSIGN.match(arg)
    if assign and _holds_secret(assign.group(2)):
        # the value runs to the argument's end: a value with spaces cannot be told from a shell's words after it
        return f"{assign.group(1)}{assign.group(2)}=***"
    header = _HEADER.match(arg)
    if header and is_secret_name(header.group(1)):
        return f"{header.group(1)}{header.group(2)}***"
    arg = _JSON_MEMBER.sub(_redact_json_member, arg)
    if _SPACE.search(arg.strip()):
        # a command line in one argument (``sh -c "..."``, ``bash -lc``): its own words, read as one
        try:
            words = shlex.split(arg)
        except ValueError:  # unbalanced quotes: the words as whitespace parts them
            words = arg.split()
        redacted = redact_argv(words)
        if redacted != words:  # else the argument is shown as written, quotes and all
            return " ".join(redacted)
    return redact_credentials(arg)


def redact_argv(args: list[str]) -> list[str]:
    """``args`` (a process's command line) with credentials replaced by ``***``: the value of ``--name=value``,
    ``NAME=value`` and of the argument after a ``--name`` whose name carries a credential (:func:`is_secret_name`:
    ``--password``, ``--api-key``, ``--hf-token``), an HTTP header's value (``Authorization: Bearer ...``), a JSON
    string member's (``"password": "..."``), and URL passwords and credential query parameters
    (:func:`redact_credentials`). An argument holding whitespace (``sh -c "HF_TOKEN=... python run.py"``) is read
    as a command line of its own: where its words hide a credential, they are shown redacted and joined by single
    spaces. Another
    process's command line is shown by ``gpuprov doctor`` and ``upgrade`` (the processes holding a GPU), and an
    admin's jobs pass tokens on it.

    Short options are left as they are: ``-p`` is a password to ``mysql`` and a port to ``ssh``. The value of an
    option or variable naming a file, path or folder (``--password-file``, ``POSTGRES_PASSWORD_FILE``) or turning a
    credential off (``--no-password``) is shown: it is where the secret is kept, which an admin needs to read."""
    out: list[str] = []
    secret_next = False
    for arg in args:
        if secret_next and not arg.startswith("-"):
            out.append("***")
            secret_next = False
            continue
        secret_next = arg.startswith("--") and "=" not in arg and _holds_secret(arg[2:])
        out.append(_redact_arg(arg))
    return out
