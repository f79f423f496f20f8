"""Durable work queues for the image workers: :func:`open_queue` picks the backend from a URL.

* ``sqlite:///abs/path.db``, ``sqlite:relative/path.db`` or ``sqlite:~/path.db`` (home-relative) -
  one file, the workers of one host (:class:`SqliteQueue`).
* ``redis://[:password@]host:port/db?stream=name`` - a Redis server, workers on many hosts
  (:class:`RedisQueue`); ``rediss://`` for TLS.

Both take ``max_attempts`` (claims before a task is dead-lettered, default 5) and ``lease_s``
(default lease in seconds, default 60) as query options, e.g. ``sqlite:q.db?max_attempts=3&lease_s=30``.
See docs/queues.md.
"""

from __future__ import annotations

import contextlib
import re
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from gpuprov.images.queue.base import (
    DEFAULT_LEASE_S,
    DEFAULT_MAX_ATTEMPTS,
    Queue,
    QueueError,
    QueueLost,
    QueueMissing,
    QueueStats,
    QueueUnavailable,
    QueueURLError,
    Task,
    UnknownTask,
    task_id,
    task_key,
)
from gpuprov.redact import escape_userinfo

__all__ = [
    "Queue",
    "QueueError",
    "QueueLost",
    "QueueMissing",
    "QueueStats",
    "QueueURLError",
    "QueueUnavailable",
    "Task",
    "UnknownTask",
    "open_queue",
    "task_id",
    "task_key",
]


def _is_sqlite_queue(path: Path) -> bool:
    """Whether ``path`` is a sqlite database holding a gpuprov queue (its ``meta`` table names a schema); read
    through a read-only connection, so another application's database or an empty file is not changed."""
    import sqlite3

    try:
        with contextlib.closing(sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)) as db:
            return db.execute("SELECT value FROM meta WHERE name = 'schema'").fetchone() is not None
    except sqlite3.Error:
        return False


def open_queue(url: str, *, create: bool = True) -> Queue:
    """Open the queue at ``url`` (creating it if needed, unless ``create`` is False); see the module
    docstring for the forms.

    Raises :class:`QueueURLError` for an unknown scheme, option or bad value (a sqlite path that is a folder,
    a Redis database that is not a number or out of the server's range),
    :class:`QueueMissing` (exit 2) when ``create`` is False and the queue does not exist: a sqlite queue's file,
    or a Redis stream (``status`` and a one-off ``run`` must not leave an empty queue behind on a mistyped
    name), and :class:`QueueUnavailable` when the store cannot be opened or reached.
    """
    try:
        # a password written unescaped (redis://:pa/ss@host) is read whole, not split into path and port
        parts = urlsplit(escape_userinfo(url))
    except ValueError as exc:  # "redis://[::1/0": an unclosed IPv6 bracket
        raise QueueURLError(f"{url}: not a URL ({exc}); use sqlite:///abs/path.db or redis://host:port/db") from exc
    options = dict(parse_qsl(parts.query, keep_blank_values=True))
    max_attempts = _option(options, "max_attempts", int, DEFAULT_MAX_ATTEMPTS, url)
    lease_s = _option(options, "lease_s", float, DEFAULT_LEASE_S, url)
    if parts.scheme == "sqlite":
        from gpuprov.images.queue.sqlite import SqliteQueue

        if options:
            raise QueueURLError(f"{url}: unknown sqlite queue option(s): {', '.join(sorted(options))}")
        path = parts.path if parts.netloc == "" else ""
        if path.startswith("~"):  # sqlite:~/q.db - the shell left the tilde inside the URL
            path = str(Path(path).expanduser())
        if not path or path == "/":
            raise QueueURLError(f"{url}: expected sqlite:///abs/path.db or sqlite:relative/path.db")
        if Path(path).is_dir():
            raise QueueURLError(f"{url}: {path} is a folder; name the queue's file in it, e.g. "
                                f"sqlite://{Path(path).resolve() / 'queue.db'}")
        if not create and not Path(path).is_file():
            raise QueueMissing(f"{url}: no queue at {path}; `gpuprov images submit` creates it")
        # an existing file that is not a queue (another application's database, any other file) is never written
        # to, also by submit, which creates a queue only where there is no file or an empty one
        existing = Path(path).is_file() and Path(path).stat().st_size > 0
        if (existing or not create) and not _is_sqlite_queue(Path(path)):
            raise QueueMissing(f"{url}: {path} is not a gpuprov queue (left untouched); check the path")
        return SqliteQueue(Path(path), max_attempts=max_attempts, lease_s=lease_s)
    if parts.scheme in ("redis", "rediss", "unix"):
        import redis
        from redis.connection import URL_QUERY_ARGUMENT_PARSERS

        from gpuprov.images.queue.redis import DEFAULT_STREAM, RedisQueue

        # redis-py reads the db from the path and takes anything but digits as db 0 without a word
        if parts.scheme != "unix" and parts.path.strip("/") and not re.fullmatch(r"[0-9]{1,9}", parts.path.strip("/")):
            raise QueueURLError(f"{url}: the path names the Redis database by number (redis://host:6379/0), "
                                f"not {parts.path.strip('/')!r}; the stream's name goes in ?stream=NAME")
        stream = options.pop("stream", DEFAULT_STREAM)
        if not stream:
            raise QueueURLError(f"{url}: stream must not be empty")
        # the connection options redis-py reads from a URL's query; any other would reach its connection class and
        # fail there with a TypeError
        known = set(URL_QUERY_ARGUMENT_PARSERS)
        unknown = sorted(set(options) - known)
        if unknown:
            raise QueueURLError(f"{url}: unknown Redis queue option(s): {', '.join(unknown)}; known: stream, "
                                f"max_attempts, lease_s, {', '.join(sorted(known))}")
        client_url = urlunsplit(parts._replace(query=urlencode(options)))
        if parts.scheme == "unix":  # urlunsplit writes unix:/path, which redis-py does not take
            client_url = client_url.replace("unix:", "unix://", 1)
        try:
            client = redis.Redis.from_url(client_url)
        except ValueError as exc:
            raise QueueURLError(f"{url}: {exc}") from exc
        return RedisQueue(client, stream=stream, max_attempts=max_attempts, lease_s=lease_s, create=create)
    raise QueueURLError(f"{url}: unknown queue scheme {parts.scheme!r}; use sqlite: or redis://")


def _option(options: dict[str, str], name: str, kind: type[int] | type[float], default: float, url: str) -> Any:
    raw = options.pop(name, None)
    if raw is None:
        return default
    try:
        return kind(raw)
    except ValueError as exc:
        raise QueueURLError(f"{url}: {name}={raw!r} is not {'a whole number' if kind is int else 'a number'}") from exc
