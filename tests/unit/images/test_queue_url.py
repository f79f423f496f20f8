"""open_queue: URL forms, options and errors."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from gpuprov.exceptions import EXIT_ENVIRONMENT, EXIT_USAGE
from gpuprov.images.queue import QueueMissing, QueueUnavailable, QueueURLError, open_queue
from gpuprov.images.queue.redis import DEFAULT_STREAM, RedisQueue
from gpuprov.images.queue.sqlite import SqliteQueue


def test_sqlite_absolute_and_relative(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    q = open_queue(f"sqlite://{tmp_path}/abs.db?max_attempts=2&lease_s=4")
    assert isinstance(q, SqliteQueue)
    assert (q.path, q.max_attempts, q.lease_s) == (tmp_path / "abs.db", 2, 4.0)
    q.close()
    monkeypatch.chdir(tmp_path)
    q = open_queue("sqlite:rel/../rel.db")
    assert isinstance(q, SqliteQueue)
    q.close()
    assert q.path == Path("rel/../rel.db")


def test_sqlite_file_is_in_wal_mode(tmp_path: Path) -> None:
    open_queue(f"sqlite://{tmp_path}/q.db").close()
    with sqlite3.connect(tmp_path / "q.db") as db:
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


@pytest.mark.parametrize(
    "url",
    [
        "postgres://db/q",
        "sqlite://host/q.db",
        "sqlite:",
        "sqlite:q.db?max_attempts=zero",
        "sqlite:q.db?max_attempts=0",
        "sqlite:q.db?lease_s=-1",
        "sqlite:q.db?lease_s=inf",
        "sqlite:q.db?max_attempts=1e3",
        "sqlite:q.db?colour=blue",
        "redis://127.0.0.1:1/0?stream=",
        "redis://127.0.0.1:1/abc",
        "rediss://127.0.0.1:1/queue?stream=s",
        "redis://127.0.0.1:1/\u00b2",
        "redis://127.0.0.1:1/0?foo=1",
        "redis://[::1/0",
    ],
)
def test_bad_urls_are_usage_errors(url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(QueueURLError) as err:
        open_queue(url)
    assert err.value.exit_code == EXIT_USAGE


def test_unopenable_sqlite_file_is_an_environment_error(tmp_path: Path) -> None:
    with pytest.raises(QueueUnavailable, match=r"folder .*missing-dir does not exist; create it") as err:
        open_queue(f"sqlite://{tmp_path}/missing-dir/q.db")
    assert err.value.exit_code == EXIT_ENVIRONMENT
    (tmp_path / "junk.db").write_bytes(b"not a database" * 100)
    with pytest.raises(QueueMissing, match="is not a gpuprov queue") as missing:  # a path to check, not the machine
        open_queue(f"sqlite://{tmp_path}/junk.db")
    assert missing.value.exit_code == EXIT_USAGE


def test_unreachable_redis_is_an_environment_error() -> None:
    with pytest.raises(QueueUnavailable) as err:
        open_queue("redis://127.0.0.1:1/0")
    assert err.value.exit_code == EXIT_ENVIRONMENT


def test_redis_stream_and_options(redis_url: str) -> None:
    q = open_queue(f"{redis_url}?stream=s1&max_attempts=9&lease_s=2")
    assert isinstance(q, RedisQueue)
    assert (q.stream, q.max_attempts, q.lease_s) == ("s1", 9, 2.0)
    q.close()
    q = open_queue(redis_url)
    assert isinstance(q, RedisQueue)
    assert q.stream == DEFAULT_STREAM
    q.close()


@pytest.mark.parametrize("where", ["missing/path.db", "q.db"])
def test_open_without_create_refuses_a_missing_sqlite_queue(where: str, tmp_path: Path) -> None:
    path = tmp_path / where
    with pytest.raises(QueueMissing, match="no queue at") as err:
        open_queue(f"sqlite:///{path}", create=False)
    assert err.value.exit_code == EXIT_USAGE
    assert not path.exists() and not path.parent.joinpath(path.name + "-wal").exists()
    if path.parent.exists():
        open_queue(f"sqlite:///{path}").close()  # submit's default creates it
        q = open_queue(f"sqlite:///{path}", create=False)
        assert q.stats().total == 0
        q.close()


def test_open_without_create_leaves_a_database_that_is_not_a_queue_untouched(tmp_path: Path) -> None:
    """``images status`` on another application's sqlite file (or an empty file): exit 2, the file unchanged -
    no queue tables, no WAL switch."""
    import sqlite3

    other, empty = tmp_path / "other.db", tmp_path / "empty.db"
    with sqlite3.connect(other) as db:
        db.execute("CREATE TABLE t (x)")
    db.close()
    empty.write_bytes(b"")
    for path in (other, empty):
        before = path.read_bytes()
        with pytest.raises(QueueMissing, match="is not a gpuprov queue") as err:
            open_queue(f"sqlite:///{path}", create=False)
        assert err.value.exit_code == EXIT_USAGE
        assert path.read_bytes() == before and not path.with_name(path.name + "-wal").exists()
        assert not path.with_name(path.name + "-lock").exists()


def test_submit_never_writes_into_a_database_that_is_not_a_queue(tmp_path: Path) -> None:
    """``images submit`` (open with create) on another application's sqlite file or any other non-empty file:
    exit 2, the file unchanged; an empty file or no file becomes a queue."""
    import sqlite3

    other, text, empty = tmp_path / "other.db", tmp_path / "notes.txt", tmp_path / "empty.db"
    with sqlite3.connect(other) as db:
        db.execute("CREATE TABLE t (x)")
    db.close()
    text.write_text("not a database\n")
    empty.write_bytes(b"")
    for path in (other, text):
        before = path.read_bytes()
        with pytest.raises(QueueMissing, match="is not a gpuprov queue") as err:
            open_queue(f"sqlite:///{path}")
        assert err.value.exit_code == EXIT_USAGE
        assert path.read_bytes() == before and not path.with_name(path.name + "-wal").exists()
    for path in (empty, tmp_path / "new.db"):
        queue = open_queue(f"sqlite:///{path}")
        assert queue.submit([{"path": "/data/a.jpg"}]) == 1
        queue.close()
        assert open_queue(f"sqlite:///{path}", create=False).stats().total == 1


def test_sqlite_writers_queue_on_the_lock_file(tmp_path: Path) -> None:
    """A write transaction holds ``<file>-lock`` (flock) from BEGIN to COMMIT; the file has the queue's
    permissions; a file that is not a queue gets none."""
    import fcntl
    import os
    import threading

    path = tmp_path / "q.db"
    path.touch(mode=0o640)
    path.chmod(0o640)
    q = open_queue(f"sqlite://{path}")
    assert isinstance(q, SqliteQueue)
    lock = path.with_name("q.db-lock")
    assert lock.stat().st_mode & 0o777 == 0o640
    other = os.open(lock, os.O_RDWR)  # another open file description, as another process has
    try:
        with q._tx(), pytest.raises(BlockingIOError):
            fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
        fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)  # free once committed
        submitted = threading.Event()

        def submit() -> None:
            q.submit([{"path": "/x.jpg"}])
            submitted.set()

        writer = threading.Thread(target=submit)
        writer.start()
        assert not submitted.wait(0.3), "the writer must wait for the lock another process holds"
        fcntl.flock(other, fcntl.LOCK_UN)
        assert submitted.wait(10)
        writer.join()
    finally:
        os.close(other)
    assert q.stats().pending == 1
    q.close()
    (tmp_path / "junk.db").write_bytes(b"not a database" * 100)
    with pytest.raises(QueueMissing):
        open_queue(f"sqlite://{tmp_path}/junk.db")
    assert not (tmp_path / "junk.db-lock").exists()


def test_sqlite_lock_wait_is_bounded_and_never_leaves_a_lock_held(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A writer that holds the lock for longer than the busy timeout (stopped, hung, or a forked child
    that kept the descriptor) makes the others fail with a reason, not wait forever; an interrupt while
    waiting leaves neither the flock nor the connection's thread lock held."""
    import fcntl
    import os

    from gpuprov.images.queue import _sqlite_lock as sqlite_lock

    path = tmp_path / "q.db"
    q = SqliteQueue(path, busy_timeout_s=0.3)
    other = os.open(tmp_path / "q.db-lock", os.O_RDONLY)
    try:
        fcntl.flock(other, fcntl.LOCK_EX)
        with pytest.raises(QueueUnavailable, match=r"held the queue's write lock for 0.3 s"):
            q.submit([{"path": "/a.jpg"}])
        fcntl.flock(other, fcntl.LOCK_UN)
    finally:
        os.close(other)
    assert q.submit([{"path": "/a.jpg"}]) == 1

    def interrupted(*args: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(sqlite_lock, "flock", interrupted)
    with pytest.raises(KeyboardInterrupt):
        q.submit([{"path": "/b.jpg"}])
    monkeypatch.undo()
    assert q.stats().pending == 1  # the thread lock was released
    assert q.submit([{"path": "/b.jpg"}]) == 1
    q.close()


def test_sqlite_lock_file_follows_links_and_is_closed_with_the_queue(tmp_path: Path) -> None:
    import gc

    real = tmp_path / "real.db"
    SqliteQueue(real).close()
    (tmp_path / "alias.db").symlink_to(real)
    q = SqliteQueue(tmp_path / "alias.db")
    q.close()
    assert sorted(p.name for p in tmp_path.glob("*-lock")) == ["real.db-lock"], "one lock file per queue"
    fds = len(list(Path("/proc/self/fd").iterdir()))
    for _ in range(20):
        SqliteQueue(real)  # never closed: collected
    gc.collect()
    assert len(list(Path("/proc/self/fd").iterdir())) <= fds + 1


def test_sqlite_home_relative(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """sqlite:~/q.db (the shell does not expand a tilde inside a URL) is the file in the home folder."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "home").mkdir()
    q = open_queue("sqlite:~/q.db")
    q.close()
    assert (tmp_path / "home" / "q.db").is_file() and not (tmp_path / "~").exists()


@pytest.mark.parametrize("create", [True, False])
def test_a_sqlite_path_that_is_a_folder_is_named_as_one(create: bool, tmp_path: Path) -> None:
    with pytest.raises(QueueURLError, match=rf"{tmp_path} is a folder; name the queue's file in it") as err:
        open_queue(f"sqlite://{tmp_path}", create=create)
    assert err.value.exit_code == EXIT_USAGE


@pytest.mark.parametrize("path", ["", "/", "/3"])
def test_a_redis_database_by_number_or_none_is_taken(path: str) -> None:
    # past the URL checks, the queue connects: nothing listens on port 1
    with pytest.raises(QueueUnavailable):
        open_queue(f"redis://127.0.0.1:1{path}")


def test_a_unix_socket_url_reaches_redis_py_as_one(tmp_path: Path) -> None:
    # past the URL checks, the queue connects: no server listens on that socket
    with pytest.raises(QueueUnavailable):
        open_queue(f"unix://{tmp_path}/redis.sock?db=2")


def test_a_missing_redis_stream_is_not_created_without_create(redis_url: str) -> None:
    import redis

    with pytest.raises(QueueMissing, match="redis stream typo: no such stream") as err:
        open_queue(f"{redis_url}?stream=typo", create=False)
    assert err.value.exit_code == EXIT_USAGE
    assert not redis.Redis.from_url(redis_url).exists("typo")
    open_queue(f"{redis_url}?stream=made").close()
    open_queue(f"{redis_url}?stream=made", create=False).close()


def test_a_redis_database_out_of_the_servers_range_is_a_usage_error(redis_url: str) -> None:
    base = redis_url.rsplit("/", 1)[0]
    with pytest.raises(QueueURLError, match="database number is out of range") as err:
        open_queue(f"{base}/999")
    assert err.value.exit_code == EXIT_USAGE


def test_sqlite_queue_of_schema_1_is_upgraded_in_place(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    db = sqlite3.connect(path)
    db.executescript(
        "CREATE TABLE meta (name TEXT PRIMARY KEY, value TEXT NOT NULL);"
        "INSERT INTO meta VALUES ('schema', '1');"
        "CREATE TABLE tasks (id TEXT PRIMARY KEY, shard INTEGER NOT NULL UNIQUE, payload TEXT NOT NULL,"
        " state TEXT NOT NULL DEFAULT 'pending', attempts INTEGER NOT NULL DEFAULT 0, worker TEXT,"
        " lease_expires REAL, reason TEXT);"
        "CREATE TABLE results (task_id TEXT PRIMARY KEY REFERENCES tasks (id), row TEXT NOT NULL);"
        "INSERT INTO tasks (id, shard, payload) VALUES ('t0', 0, '{\"path\": \"/img/a.png\"}');"
    )
    db.commit()
    db.close()
    q = SqliteQueue(path)
    try:
        (task,) = q.claim("w", 4, 30)
        assert (task.id, task.payload, task.attempts) == ("t0", {"path": "/img/a.png"}, 1)
    finally:
        q.close()
    assert sqlite3.connect(path).execute("SELECT value FROM meta WHERE name = 'schema'").fetchone() == ("3",)


def test_a_queue_file_without_its_tables_is_damaged_not_a_traceback(tmp_path: Path) -> None:
    """A file whose meta names the current schema but whose tables are gone: QueueUnavailable naming them (exit
    4), for status (create=False) and submit alike."""
    import sqlite3

    from gpuprov.images.queue._sqlite_schema import SCHEMA_VERSION

    path = tmp_path / "q.db"
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE meta (name TEXT PRIMARY KEY, value TEXT NOT NULL)")
        db.execute("INSERT INTO meta VALUES ('schema', ?)", (str(SCHEMA_VERSION),))
    db.close()
    for create in (False, True):
        with pytest.raises(QueueUnavailable, match=r"without its table.*tasks.*the file is damaged") as err:
            open_queue(f"sqlite:///{path}", create=create)
        assert err.value.exit_code == EXIT_ENVIRONMENT
