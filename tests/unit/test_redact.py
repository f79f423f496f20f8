"""Credentials never reach a message: passwords in URLs, whatever characters they hold, and query-string
credentials."""

from __future__ import annotations

import string

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from gpuprov.redact import redact_credentials


@pytest.mark.parametrize(("text", "expected"), [
    ("redis://:s3cret@127.0.0.1:6379/0", "redis://:***@127.0.0.1:6379/0"),
    ("https://mirror:pw@repo.example/cuda/", "https://mirror:***@repo.example/cuda/"),
    # an unescaped @, / or ' in the password: redis-py and urllib split at the last @
    ("redis://:p@ss@10.0.0.5:6379/0", "redis://:***@10.0.0.5:6379/0"),
    ("redis://:pa/ss@10.0.0.5:6379/0", "redis://:***@10.0.0.5:6379/0"),
    ("redis://:it's@10.0.0.5:6379", "redis://:***@10.0.0.5:6379"),
    ("redis://:a:b#c?d@10.0.0.5", "redis://:***@10.0.0.5"),
    # quoted, twice in one message, with a user
    ("cannot reach 'redis://app:pw1@q1:6379' nor \"https://u:pw2@m/x\"",
     "cannot reach 'redis://app:***@q1:6379' nor \"https://u:***@m/x\""),
    # credentials in a query string
    ("redis://q1:6379/0?password=s3cret&db=1", "redis://q1:6379/0?password=***&db=1"),
    ("https://m/x?token=abc#frag", "https://m/x?token=***#frag"),
    # nothing to hide
    ("ssh://admin@host:22", "ssh://admin@host:22"),
    ("redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/0"),
    ("see https://docs.nvidia.com/datacenter/tesla/", "see https://docs.nvidia.com/datacenter/tesla/"),
])
def test_redacts(text: str, expected: str) -> None:
    assert redact_credentials(text) == expected


#: What an admin may paste into a password: any printable character but whitespace.
PASSWORD = st.text(alphabet=sorted(set(string.printable) - set(string.whitespace)), min_size=6, max_size=30)


@given(password=PASSWORD, scheme=st.sampled_from(["redis", "rediss", "http", "https"]),
       user=st.sampled_from(["", "app"]))
def test_no_password_survives(password: str, scheme: str, user: str) -> None:
    message = f"queue unreachable: {scheme}://{user}:{password}@10.1.2.3:6379/0: Connection refused"
    assume(password not in message.replace(password, ""))  # not a piece of the rest of the message
    redacted = redact_credentials(message)
    assert password not in redacted
    assert redacted.endswith("@10.1.2.3:6379/0: Connection refused")
