"""The sqlite queue's tables, and the upgrade of a queue file written by an earlier gpuprov.

Schema 3 (this one) keeps what changes per claim apart from what does not, so a claim or a completion of a
batch rewrites few database pages:

* ``inputs`` (shard INTEGER PRIMARY KEY, id UNIQUE, payload): written once, at submit.
* ``tasks`` (shard INTEGER PRIMARY KEY, state, attempts, lease, reason): a few bytes per task, so a batch's
  rows share a few pages. ``state`` is one of :data:`gpuprov.images.queue.base.STATES` or, internally,
  ``new`` (never claimed, counted as pending: from the ``cursor`` in ``meta`` on, every task is new but one
  completed before anyone claimed it) or ``expired`` (its lease expired and was freed; waiting to be claimed
  alone, counted as leased).
* ``leases`` (lease INTEGER PRIMARY KEY, worker, expires, solo): one row per claimed batch; a leased task's
  ``lease`` points at it (``state = 'leased'`` exactly when ``lease`` is set). ``solo`` is 1 for a claim that
  returned one task.
* ``results`` (shard INTEGER PRIMARY KEY, row): the primary key is what makes a row unique per task.

Partial indexes cover only the few rows a claim looks for (``pending``, ``expired``, ``failed``/``dead``, leased
tasks by lease), so the bulk of tasks, new or done, is in no index but the primary key and ``inputs.id``.

Schema 1 (no ``tasks.solo``) and 2 (one ``tasks`` table, a lease per task, results keyed by task id) are
upgraded in place when a queue is opened, in the opening transaction; their in-flight leases are kept (one
lease row per holder, expiry and solo flag). A file of a later schema is refused.
"""

from __future__ import annotations

import re
import sqlite3

SCHEMA_VERSION = 3
"""``meta.schema`` of the files this gpuprov writes (the version the module docstring describes)."""

_META = "CREATE TABLE meta (name TEXT PRIMARY KEY, value TEXT NOT NULL)"
_TABLES = """
CREATE TABLE inputs (
    shard INTEGER PRIMARY KEY,
    id TEXT NOT NULL UNIQUE,
    payload TEXT NOT NULL
);
CREATE TABLE leases (
    lease INTEGER PRIMARY KEY,
    worker TEXT NOT NULL,
    expires REAL NOT NULL,
    solo INTEGER NOT NULL
);
CREATE TABLE tasks (
    shard INTEGER PRIMARY KEY,
    state TEXT NOT NULL DEFAULT 'new',
    attempts INTEGER NOT NULL DEFAULT 0,
    lease INTEGER CHECK ((lease IS NOT NULL) = (state = 'leased')),
    reason TEXT
);
CREATE INDEX tasks_pending ON tasks (shard) WHERE state = 'pending';
CREATE INDEX tasks_expired ON tasks (shard) WHERE state = 'expired';
CREATE INDEX tasks_failed ON tasks (shard) WHERE state IN ('failed', 'dead');
CREATE INDEX tasks_lease ON tasks (lease) WHERE lease IS NOT NULL;
CREATE TABLE results (shard INTEGER PRIMARY KEY, row TEXT NOT NULL)
"""

_FROM_2 = """
DROP INDEX IF EXISTS tasks_state_shard;
DROP INDEX IF EXISTS tasks_state_lease;
ALTER TABLE tasks RENAME TO tasks_2;
ALTER TABLE results RENAME TO results_2;
{tables};
INSERT INTO inputs (shard, id, payload) SELECT shard, id, payload FROM tasks_2;
INSERT INTO leases (worker, expires, solo)
    SELECT DISTINCT worker, lease_expires, solo FROM tasks_2 WHERE state = 'leased';
INSERT INTO meta (name, value) SELECT 'cursor', CAST(COALESCE(MAX(shard) + 1, 0) AS TEXT) FROM tasks_2
    WHERE state != 'pending' OR attempts > 0;
INSERT INTO tasks (shard, state, attempts, lease, reason)
    SELECT o.shard,
           CASE WHEN o.state = 'pending' AND o.shard >= (SELECT CAST(value AS INTEGER) FROM meta WHERE name = 'cursor')
                THEN 'new' ELSE o.state END,
           o.attempts,
           (SELECT l.lease FROM leases l
             WHERE o.state = 'leased' AND l.worker = o.worker AND l.expires = o.lease_expires AND l.solo = o.solo),
           o.reason
    FROM tasks_2 o;
INSERT INTO results (shard, row) SELECT t.shard, r.row FROM results_2 r JOIN tasks_2 t ON t.id = r.task_id;
DROP TABLE results_2;
DROP TABLE tasks_2
"""


def _run(db: sqlite3.Connection, script: str) -> None:
    for statement in script.split(";"):
        if statement.strip():
            db.execute(statement)


def prepare(db: sqlite3.Connection) -> None:
    """Create the tables in an empty file or upgrade those of an earlier schema, inside the caller's open write
    transaction. Raises :class:`ValueError` naming the schema of a file this gpuprov cannot read (a later one).
    The ``meta`` values the tables need (``cursor``) are set here too."""
    if db.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'meta'").fetchone() is None:
        _run(db, f"{_META};{_TABLES}")
        db.executemany("INSERT INTO meta VALUES (?, ?)", [("schema", str(SCHEMA_VERSION)), ("cursor", "0")])
        return
    row = db.execute("SELECT value FROM meta WHERE name = 'schema'").fetchone()
    version = row[0] if row else "none"
    if version == str(SCHEMA_VERSION):
        have = {name for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        missing = sorted(set(re.findall(r"CREATE TABLE (\w+)", _TABLES)) - have)
        if missing:
            raise ValueError(f"queue schema {version} without its table(s) {', '.join(missing)}: the file is damaged "
                             "(restore it from a copy, or submit the images to a new queue file)")
        return
    if version not in ("1", "2"):
        raise ValueError(
            f"queue schema {version}, this gpuprov reads schemas 1 to {SCHEMA_VERSION} (a queue made by a later "
            "gpuprov: use that version, or submit the images to a new queue file)"
        )
    if version == "1":  # a queue of gpuprov before schema 2: its tasks were never claimed alone
        db.execute("ALTER TABLE tasks ADD COLUMN solo INTEGER NOT NULL DEFAULT 0")
    _run(db, _FROM_2.format(tables=_TABLES))
    db.execute("UPDATE meta SET value = ? WHERE name = 'schema'", (str(SCHEMA_VERSION),))
