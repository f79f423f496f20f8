"""Credentials never reach a message: passwords in URLs, whatever characters they hold, and query-string
credentials."""

from __future__ import annotations

import string
from urllib.parse import urlsplit

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from gpuprov import mirrorfetch
from gpuprov.cli.__main__ import main
from gpuprov.exceptions import EnvironmentMissing
from gpuprov.proctree import command_line
from gpuprov.redact import escape_userinfo, redact_argv, redact_credentials, secret_query_names


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
    # a user name holding @: the password is still everything up to the last @
    ("redis://user@corp:s3cret@127.0.0.1:1/0?bogus=1", "redis://user@corp:***@127.0.0.1:1/0?bogus=1"),
    # the URL ends at its closing quote, and where the next URL starts: the text after it is kept
    ('{"url":"redis://u:pw@h/0","owner":"ops@corp"}', '{"url":"redis://u:***@h/0","owner":"ops@corp"}'),
    ("https://a:b@c,https://d:e@f", "https://a:***@c,https://d:***@f"),
    ("'redis://:it's@host' and more", "'redis://:***@host' and more"),
    ("ssh://admin@host:22 mail ops@corp.example", "ssh://admin@host:22 mail ops@corp.example"),
    # credentials in a query string, whatever their spelling
    ("redis://q1:6379/0?password=s3cret&db=1", "redis://q1:6379/0?password=***&db=1"),
    ("https://m/x?token=abc#frag", "https://m/x?token=***#frag"),
    ("redis://q/0?password=ab'TAIL&x=1", "redis://q/0?password=***&x=1"),
    ("redis://q/0?pass%77ord=SECRET", "redis://q/0?pass%77ord=***"),
    ("x?api-key=K1&access-token=K2&client_secret=K3;sslpassword=K4&keyboard=ok&monkey=ok",
     "x?api-key=***&access-token=***&client_secret=***;sslpassword=***&keyboard=ok&monkey=ok"),
    # the signatures and credentials of pre-signed URLs (S3, Azure shared access signatures)
    ("https://b.s3.example/f.run?X-Amz-Credential=AK&X-Amz-Signature=S1&X-Amz-Expires=60",
     "https://b.s3.example/f.run?X-Amz-Credential=***&X-Amz-Signature=***&X-Amz-Expires=60"),
    ("https://a.blob.example/f.run?sv=2024&sig=S2&design=ok", "https://a.blob.example/f.run?sv=2024&sig=***&design=ok"),
    # nothing to hide
    ("ssh://admin@host:22", "ssh://admin@host:22"),
    ("redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/0"),
    ("see https://docs.nvidia.com/datacenter/tesla/", "see https://docs.nvidia.com/datacenter/tesla/"),
])
def test_redacts(text: str, expected: str) -> None:
    assert redact_credentials(text) == expected


def test_secret_query_names_are_those_redacted() -> None:
    url = "https://m/f?channel=stable&access_token=1&X-Goog-Signature=2&sig=3&apikey=4&monkey=5&token="
    assert secret_query_names(url) == ["access_token", "X-Goog-Signature", "sig", "apikey"]
    assert secret_query_names("https://m/f.run") == []


#: What an admin may paste into a password: any printable character but whitespace.
PASSWORD = st.text(alphabet=sorted(set(string.printable) - set(string.whitespace)), min_size=6, max_size=30)


@given(password=PASSWORD, scheme=st.sampled_from(["redis", "rediss", "http", "https"]),
       user=st.sampled_from(["", "app", "app@corp"]))
def test_no_password_survives(password: str, scheme: str, user: str) -> None:
    message = f"queue unreachable: {scheme}://{user}:{password}@10.1.2.3:6379/0: Connection refused"
    assume(password not in message.replace(password, ""))  # not a piece of the rest of the message
    redacted = redact_credentials(message)
    assert password not in redacted
    assert redacted.endswith("@10.1.2.3:6379/0: Connection refused")


@pytest.mark.parametrize(("url", "expected", "host"), [
    ("redis://u:pa/ss@h:6379/0", "redis://u:pa%2Fss@h:6379/0", "h"),
    ("redis://user@corp:p@ss#1?x@h/0", "redis://user%40corp:p%40ss%231%3Fx@h/0", "h"),
    ("https://u:pa%40ss@m/x/", "https://u:pa%40ss@m/x/", "m"),  # already escaped: kept
    ("redis://h:6379/0", "redis://h:6379/0", "h"),
    ("ssh://admin@host:22", "ssh://admin@host:22", "host"),
])
def test_escape_userinfo_lets_parsers_read_the_whole_password(url: str, expected: str, host: str) -> None:
    assert escape_userinfo(url) == expected
    assert urlsplit(expected).hostname == host


def test_a_queue_password_with_url_characters_never_reaches_an_error(capsys: pytest.CaptureFixture[str]) -> None:
    """redis-py and urllib used to split such a password into path, query or port and quote the pieces."""
    for url in ("redis://user:abc/SECRETTAIL@127.0.0.1:1/0", "redis://user:abc?SECRETTAIL@127.0.0.1:1/0",
                "redis://user:abc#SECRETTAIL@127.0.0.1:1/0", "redis://user@corp:SECRETTAIL@127.0.0.1:1/0?bogus=1"):
        code = main(["images", "status", "--queue", url])
        captured = capsys.readouterr()
        assert code != 0 and "SECRETTAIL" not in captured.out + captured.err, (url, captured)
        assert "Traceback" not in captured.err


def test_a_mirror_password_with_url_characters_is_read_whole() -> None:
    plain, user, password = mirrorfetch._without_userinfo("http://u:pa/TAIL#x@127.0.0.1:1/cuda/")
    assert (plain, user, password) == ("http://127.0.0.1:1/cuda/", "u", "pa/TAIL#x")
    with pytest.raises(EnvironmentMissing) as raised:
        mirrorfetch.fetch_index("http://u:pa/TAIL@127.0.0.1:1/cuda/")
    assert "TAIL" not in raised.value.message and "u:***@127.0.0.1:1" in raised.value.message


@pytest.mark.parametrize(("args", "expected"), [
    (["python", "train.py", "--api-token=abc123", "--epochs", "3"],
     ["python", "train.py", "--api-token=***", "--epochs", "3"]),
    (["job", "--password", "hunter2", "--out", "/data"], ["job", "--password", "***", "--out", "/data"]),
    (["job", "--token", "--verbose"], ["job", "--token", "--verbose"]),  # a flag after it is not its value
    (["env", "HF_TOKEN=hf_x", "AWS_SECRET_ACCESS_KEY=k", "PATH=/usr/bin", "run"],
     ["env", "HF_TOKEN=***", "AWS_SECRET_ACCESS_KEY=***", "PATH=/usr/bin", "run"]),
    (["worker", "--queue", "redis://u:pw@h:6379/0", "--keep-going"],
     ["worker", "--queue", "redis://u:***@h:6379/0", "--keep-going"]),
    (["fetch", "https://h/f?sig=abc&x=1"], ["fetch", "https://h/f?sig=***&x=1"]),
    (["python", "-m", "http.server", "8000"], ["python", "-m", "http.server", "8000"]),
])  # fmt: skip
def test_redact_argv_hides_option_and_variable_values_that_carry_credentials(
    args: list[str], expected: list[str]
) -> None:
    assert redact_argv(args) == expected


@pytest.mark.parametrize(("args", "expected"), [
    (["sh", "-c", "python run.py --token tok1"], ["sh", "-c", "python run.py --token ***"]),
    (["sh", "-c", "cd /x && HF_TOKEN=tok1 python run.py"], ["sh", "-c", "cd /x && HF_TOKEN=*** python run.py"]),
    (["sh", "-c", "AWS_SESSION_TOKEN=tok1 python run.py"], ["sh", "-c", "AWS_SESSION_TOKEN=***"]),
    (["bash", "-lc", "echo 'unbalanced --password tok1"], ["bash", "-lc", "echo 'unbalanced --password ***"]),
    (["curl", "--header", "Authorization: Bearer tok1"], ["curl", "--header", "Authorization: ***"]),
    (["curl", "-H", "X-Api-Key: tok1", "https://h"], ["curl", "-H", "X-Api-Key: ***", "https://h"]),
    (["sh", "-c", 'curl -H "Authorization: Basic tok1" https://h'], ["sh", "-c", "curl -H Authorization: *** https://h"]),
    (["app", '{"password": "tok1", "user": "bob"}'], ["app", '{"password": "***", "user": "bob"}']),
    (["app", '{"api_key":"tok1\\"tail"}'], ["app", '{"api_key":"***"}']),
])  # fmt: skip
def test_redact_argv_reads_a_command_line_header_or_json_inside_one_argument(
    args: list[str], expected: list[str]
) -> None:
    assert redact_argv(args) == expected
    assert "tok1" not in " ".join(redact_argv(args))


@pytest.mark.parametrize("args", [
    ["python", "-c", 'print("a b")'],  # no credential: shown as written, quotes kept
    ["curl", "-H", "Content-Type: application/json", "--key-file", "/etc/app/key.pem"],  # a path is no secret
    ["ssh", "-p", "2222", "host"],  # short options are not read: -p is a port here, a password to mysql
    ["app", "--token="],  # nothing to hide
    # where the secret is kept, not the secret: the path is shown
    ["db", "--password-file", "/run/secrets/db", "--token-path=/run/t", "POSTGRES_PASSWORD_FILE=/run/secrets/pg"],
    ["psql", "--no-password", "postgres"],  # a flag that turns a password off: the next word is no value of it
])  # fmt: skip
def test_redact_argv_leaves_what_an_admin_needs_to_read(args: list[str]) -> None:
    assert redact_argv(args) == args


def test_command_line_redacts_before_it_cuts_to_200_characters() -> None:
    class Proc:
        def cmdline(self) -> list[str]:
            return ["job", "x" * 180, "--password", "SECRETHEAD" + "t" * 30]

    shown = command_line(Proc())  # type: ignore[arg-type]
    assert len(shown) <= 200 and "SECRET" not in shown and "--password" in shown
