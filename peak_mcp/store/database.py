"""Sessions, versions and apply runs in SQLite (WAL). Every record is committed before a tool returns."""

from __future__ import annotations

import json
import sqlite3
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from peak_mcp.core.errors import NotFound
from peak_mcp.store.lease import LEASE_S, Process
from peak_mcp.store.records import ApplyRunRow, SessionRow, VersionRow

INTERRUPTED = ("the server stopped while this version was being evaluated (it was killed, crashed or stopped "
               "renewing its lease); the version was never finished. Submit the source again.")

SCHEMA = """
CREATE TABLE IF NOT EXISTS sessions (
    id TEXT PRIMARY KEY,
    problem TEXT NOT NULL, backend TEXT NOT NULL, dtype TEXT NOT NULL, sizes TEXT NOT NULL,
    device TEXT NOT NULL, device_index INTEGER NOT NULL,
    head INTEGER, baseline TEXT, created_at REAL NOT NULL, label TEXT
);
CREATE TABLE IF NOT EXISTS versions (
    session_id TEXT NOT NULL REFERENCES sessions(id),
    number INTEGER NOT NULL,
    parent INTEGER,
    origin TEXT NOT NULL,              -- naive | submit | apply
    transformation TEXT,
    apply_id TEXT, attempt INTEGER,
    source TEXT NOT NULL,
    status TEXT NOT NULL,              -- see VersionReport.status
    failure TEXT,                      -- short failure kind for statistics
    message TEXT,
    compile TEXT, validation TEXT, timing TEXT,
    created_at REAL NOT NULL,
    PRIMARY KEY (session_id, number)
);
CREATE TABLE IF NOT EXISTS apply_runs (
    id TEXT PRIMARY KEY,
    session_id TEXT NOT NULL REFERENCES sessions(id),
    transformation TEXT NOT NULL, base_version INTEGER NOT NULL, instructions TEXT,
    max_attempts INTEGER NOT NULL, attempts INTEGER NOT NULL DEFAULT 0,
    state TEXT NOT NULL,               -- open | succeeded | exhausted
    result_version INTEGER, created_at REAL NOT NULL
);
"""
# Columns added after the first schema, in order; PRAGMA user_version counts how many are applied, so a data
# dir written by an older release opens and gains them (as NULL) on first use.
MIGRATIONS = (
    "ALTER TABLE versions ADD COLUMN generality TEXT",  # {passed, sizes_checked, failures}
    "ALTER TABLE sessions ADD COLUMN constraints TEXT",  # ["M % 128 == 0", ...]
    "ALTER TABLE sessions ADD COLUMN device_info TEXT",  # the described device (arch, family, peaks, limits)
    "ALTER TABLE versions ADD COLUMN tuning TEXT",  # the last tune report: every configuration tried, the best
    # One lease per live server (see lease.py); a version's owner is the lease of the server that recorded it, and
    # its `pending` state lasts only as long as that lease. Versions from before this have no owner.
    "CREATE TABLE servers (id TEXT PRIMARY KEY, pid INTEGER NOT NULL, host TEXT NOT NULL, started TEXT NOT NULL, "
    "created_at REAL NOT NULL, heartbeat REAL NOT NULL)",
    "ALTER TABLE versions ADD COLUMN owner TEXT",
    "CREATE INDEX versions_pending ON versions(owner) WHERE status = 'pending'",
    "ALTER TABLE apply_runs ADD COLUMN resolved TEXT",  # the catalog text the run gives the LLM, fixed when it begins
    "ALTER TABLE sessions ADD COLUMN problem_sha256 TEXT",  # a problem file's bytes when the session started
    "ALTER TABLE versions ADD COLUMN timeline TEXT",  # where a submission's seconds went, by phase (loop/timeline.py)
    "ALTER TABLE versions ADD COLUMN retimed TEXT",  # a re-timing beside a child (records.Retimed)
)
_JSON_FIELDS = {"sizes", "baseline", "compile", "validation", "timing", "generality", "constraints", "device_info",
                "tuning", "timeline", "retimed"}


def _decode(row: sqlite3.Row | None) -> dict[str, Any] | None:
    if row is None:
        return None
    out = dict(row)
    for key in _JSON_FIELDS & out.keys():
        if out[key] is not None:
            out[key] = json.loads(out[key])
    return out


class Store:
    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self._db.row_factory = sqlite3.Row
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.execute("PRAGMA foreign_keys=ON")
        self._db.executescript(SCHEMA)
        self._migrate()
        self.server_id: str | None = None  # this server's lease, once it joins; None for a bare store

    def close(self) -> None:
        self._db.close()

    def _migrate(self) -> None:
        with self._lock:
            applied = self._db.execute("PRAGMA user_version").fetchone()[0]
            for number, statement in enumerate(MIGRATIONS[applied:], start=applied + 1):
                self._db.execute("BEGIN IMMEDIATE")
                try:
                    # Read again under the write lock: a server starting beside this one may have applied it.
                    if self._db.execute("PRAGMA user_version").fetchone()[0] >= number:
                        self._db.execute("COMMIT")
                        continue
                    self._db.execute(statement)
                    self._db.execute(f"PRAGMA user_version = {number}")
                    self._db.execute("COMMIT")
                except BaseException:
                    self._db.execute("ROLLBACK")
                    raise

    def _write(self, sql: str, params: tuple[Any, ...]) -> None:
        self._transaction([(sql, params)])

    def _transaction(self, statements: list[tuple[str, tuple[Any, ...]]]) -> int:
        """Run the statements in one write transaction; returns the rows the last one changed."""
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                changed = 0
                for sql, params in statements:
                    changed = self._db.execute(sql, params).rowcount
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
        return changed

    # --- leases (lease.py) -----------------------------------------------------------------------------------
    def join(self) -> str:
        """Take a lease for this server: the versions it records from now on are its own."""
        self.server_id = uuid.uuid4().hex[:12]
        self._insert_lease()
        return self.server_id

    def _insert_lease(self) -> None:
        me, now = Process.this(), time.time()
        self._write("INSERT OR REPLACE INTO servers (id, pid, host, started, created_at, heartbeat) "
                    "VALUES (?, ?, ?, ?, ?, ?)", (self.server_id, me.pid, me.host, me.started, now, now))

    def renew(self) -> None:
        """The heartbeat. A lease taken over meanwhile (this server stalled past LEASE_S: a suspended host) is taken
        again; its pending versions were already marked interrupted, and what it records later overwrites that."""
        if self.server_id is None:
            return
        with self._lock:
            renewed = self._db.execute("UPDATE servers SET heartbeat = ? WHERE id = ?",
                                       (time.time(), self.server_id)).rowcount
        if not renewed:
            self._insert_lease()

    def reclaim(self, message: str = INTERRUPTED) -> int:
        """Take over the pending versions of servers that are gone or whose lease lapsed: they become errors
        (`interrupted`). Returns how many."""
        with self._lock:
            leases = self._db.execute("SELECT id, pid, host, started, heartbeat FROM servers WHERE id IS NOT ?",
                                      (self.server_id,)).fetchall()
            orphaned = self._db.execute(
                "SELECT 1 FROM versions WHERE status = 'pending' AND owner IS NOT NULL AND owner IS NOT ? "
                "AND owner NOT IN (SELECT id FROM servers) LIMIT 1", (self.server_id,)).fetchone()
        lapsed = time.time() - LEASE_S
        dead = [lease for lease in leases if lease["heartbeat"] < lapsed
                or Process(lease["pid"], lease["host"], lease["started"]).gone()]
        if not dead and not orphaned:
            return 0
        # A lease renewed since it was read (its heartbeat moved) is alive after all and stays.
        statements: list[tuple[str, tuple[Any, ...]]] = [
            ("DELETE FROM servers WHERE id = ? AND heartbeat = ?", (lease["id"], lease["heartbeat"]))
            for lease in dead]
        statements.append(("UPDATE versions SET status = 'error', failure = 'interrupted', message = ? "
                           "WHERE status = 'pending' AND owner IS NOT NULL AND owner IS NOT ? "
                           "AND owner NOT IN (SELECT id FROM servers)", (message, self.server_id)))
        return self._transaction(statements)

    def leave(self, message: str = INTERRUPTED) -> None:
        """Give the lease up as the server stops; whatever it still has pending will never finish."""
        if self.server_id is None:
            return
        self._transaction([
            ("UPDATE versions SET status = 'error', failure = 'interrupted', message = ? "
             "WHERE status = 'pending' AND owner = ?", (message, self.server_id)),
            ("DELETE FROM servers WHERE id = ?", (self.server_id,))])
        self.server_id = None

    # --- sessions --------------------------------------------------------------------------------------------
    def create_session(self, *, problem: str, backend: str, dtype: str, sizes: dict[str, int], device: str,
                       device_index: int, label: str | None, constraints: list[str] | None = None,
                       device_info: dict[str, Any] | None = None, problem_sha256: str | None = None) -> str:
        session_id = uuid.uuid4().hex[:12]
        self._write("INSERT INTO sessions (id, problem, backend, dtype, sizes, device, device_index, created_at, label,"
                    " constraints, device_info, problem_sha256) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (session_id, problem, backend, dtype, json.dumps(sizes), device, device_index, time.time(), label,
                     json.dumps(constraints or []), json.dumps(device_info) if device_info else None,
                     problem_sha256))
        return session_id

    def session(self, session_id: str) -> SessionRow:
        with self._lock:
            row = self._db.execute("SELECT * FROM sessions WHERE id = ?", (session_id,)).fetchone()
        if row is None:
            raise NotFound(f"unknown session {session_id!r}", "call list_sessions to see the sessions, or "
                                                              "start_session to begin one.")
        return SessionRow.model_validate(_decode(row))

    def sessions(self) -> list[SessionRow]:
        with self._lock:
            rows = self._db.execute("SELECT * FROM sessions ORDER BY created_at").fetchall()
        return [SessionRow.model_validate(_decode(r)) for r in rows]

    def set_head(self, session_id: str, number: int) -> None:
        self._write("UPDATE sessions SET head = ? WHERE id = ?", (number, session_id))

    def set_baseline(self, session_id: str, baseline: dict[str, Any]) -> None:
        self._write("UPDATE sessions SET baseline = ? WHERE id = ?", (json.dumps(baseline), session_id))

    # --- versions --------------------------------------------------------------------------------------------
    def add_version(self, session_id: str, **fields: Any) -> int:
        """Insert with the next version number (allocated inside the write lock)."""
        for key in _JSON_FIELDS & fields.keys():
            if fields[key] is not None:
                fields[key] = json.dumps(fields[key])
        fields.setdefault("owner", self.server_id)
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                number = self._db.execute("SELECT COALESCE(MAX(number) + 1, 0) FROM versions WHERE session_id = ?",
                                          (session_id,)).fetchone()[0]
                columns = ["session_id", "number", "created_at", *fields]
                marks = ", ".join("?" * len(columns))
                self._db.execute(f"INSERT INTO versions ({', '.join(columns)}) VALUES ({marks})",
                                 (session_id, number, time.time(), *fields.values()))
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
        return number

    def update_version(self, session_id: str, number: int, **fields: Any) -> None:
        for key in _JSON_FIELDS & fields.keys():
            if fields[key] is not None:
                fields[key] = json.dumps(fields[key])
        assignments = ", ".join(f"{k} = ?" for k in fields)
        self._write(f"UPDATE versions SET {assignments} WHERE session_id = ? AND number = ?",
                    (*fields.values(), session_id, number))

    def version(self, session_id: str, number: int) -> VersionRow:
        rows = self._read_versions("SELECT * FROM versions WHERE session_id = ? AND number = ?", (session_id, number))
        if not rows:
            count = len(self.versions(session_id))
            raise NotFound(f"session {session_id} has no version {number}",
                           f"versions are numbered 0..{count - 1}; call history to see them." if count else
                           "it has no versions yet: submit a kernel without a parent, and it becomes version 0.")
        return rows[0]

    def versions(self, session_id: str) -> list[VersionRow]:
        return self._read_versions("SELECT * FROM versions WHERE session_id = ? ORDER BY number", (session_id,))

    def _read_versions(self, sql: str, params: tuple[Any, ...]) -> list[VersionRow]:
        """Rows as stored; a version pending under another server's lease is first checked for a takeover, so that
        nobody reads `pending` from a server that is gone, even between heartbeats."""
        def fetch() -> list[VersionRow]:
            with self._lock:
                return [VersionRow.model_validate(_decode(r)) for r in self._db.execute(sql, params).fetchall()]

        rows = fetch()
        if any(r.status == "pending" and r.owner not in (None, self.server_id) for r in rows) and self.reclaim():
            rows = fetch()
        return rows

    def interrupt_pending(self, message: str = INTERRUPTED) -> int:
        """Every version left `pending` becomes an error (for a server that starts alone: whoever wrote them stopped
        mid-evaluation, leases or not); returns how many."""
        with self._lock:
            cursor = self._db.execute("UPDATE versions SET status = 'error', failure = 'interrupted', message = ? "
                                      "WHERE status = 'pending'", (message,))
        return cursor.rowcount

    def all_versions(self) -> list[VersionRow]:
        return self._read_versions("SELECT * FROM versions ORDER BY session_id, number", ())

    # --- apply runs ------------------------------------------------------------------------------------------
    def create_apply_run(self, *, session_id: str, transformation: str, base_version: int,
                         instructions: str | None, max_attempts: int, resolved: str | None = None) -> str:
        run_id = uuid.uuid4().hex[:12]
        self._write("INSERT INTO apply_runs (id, session_id, transformation, base_version, instructions, "
                    "max_attempts, state, created_at, resolved) VALUES (?, ?, ?, ?, ?, ?, 'open', ?, ?)",
                    (run_id, session_id, transformation, base_version, instructions, max_attempts, time.time(),
                     resolved))
        return run_id

    def apply_run(self, run_id: str) -> ApplyRunRow:
        with self._lock:
            row = self._db.execute("SELECT * FROM apply_runs WHERE id = ?", (run_id,)).fetchone()
        if row is None:
            raise NotFound(f"unknown apply run {run_id!r}", "start a new one with apply_transformation.")
        return ApplyRunRow.model_validate(dict(row))

    def apply_runs(self, session_id: str | None = None, state: str | None = None) -> list[ApplyRunRow]:
        """Apply runs, oldest first, optionally of one session and in one state."""
        where, params = [], []
        for column, value in (("session_id", session_id), ("state", state)):
            if value is not None:
                where.append(f"{column} = ?")
                params.append(value)
        sql = "SELECT * FROM apply_runs" + (" WHERE " + " AND ".join(where) if where else "") + " ORDER BY created_at"
        with self._lock:
            rows = self._db.execute(sql, params).fetchall()
        return [ApplyRunRow.model_validate(dict(r)) for r in rows]

    def update_apply_run(self, run_id: str, **fields: Any) -> None:
        assignments = ", ".join(f"{k} = ?" for k in fields)
        self._write(f"UPDATE apply_runs SET {assignments} WHERE id = ?", (*fields.values(), run_id))
