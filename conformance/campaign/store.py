"""The campaign store: one SQLite file per campaign directory, written only by the driver.

SQLite (stdlib, one file, transactions) because what a campaign needs is exactly that: each
result committed the moment it arrives, so an interrupted campaign (Ctrl-C, a killed driver, a
lost machine) keeps every result it had; a key lookup to resume (a task is done once its
(systems, family, seed) has rows); and `ATTACH` to merge two campaigns in one statement per
table. At tens of results per second, a commit per result costs nothing that shows (the
results are a few hundred bytes; Parquet would buy column scans nobody needs here).

Tables: ``results`` (one row per task and pair of systems), ``regressions`` (one shrunk
workload per pair, family and failure signature, the file's text included so a merge carries
it), ``runs`` (one row per campaign run: when, where, how many workers, throughput inputs).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from conformance.campaign.task import FAILURES, TaskResult
from vtwin.errors import UserError

STORE_NAME = "campaign.sqlite"
FORMAT = "vtwin-campaign/1"
RESULT_COLUMNS = ("systems", "family", "seed", "left", "right", "workload", "draw",
                  "requests", "steps", "seconds", "outcome", "level", "signature", "step",
                  "detail", "host", "pid", "run_id")
SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS results (
    systems TEXT NOT NULL, family TEXT NOT NULL, seed INTEGER NOT NULL,
    left TEXT NOT NULL, right TEXT NOT NULL,
    workload TEXT, draw TEXT, requests INTEGER, steps INTEGER, seconds REAL,
    outcome TEXT NOT NULL, level TEXT, signature TEXT, step INTEGER, detail TEXT,
    host TEXT, pid INTEGER, run_id TEXT,
    PRIMARY KEY (systems, family, seed, left, right));
CREATE TABLE IF NOT EXISTS regressions (
    left TEXT NOT NULL, right TEXT NOT NULL, family TEXT NOT NULL, signature TEXT NOT NULL,
    systems TEXT, seed INTEGER, name TEXT, content TEXT, requests_before INTEGER,
    requests_after INTEGER, runs INTEGER, seconds REAL, detail TEXT, run_id TEXT,
    PRIMARY KEY (left, right, family, signature));
CREATE TABLE IF NOT EXISTS runs (
    run_id TEXT PRIMARY KEY, started TEXT, finished TEXT, systems TEXT, families TEXT,
    address TEXT, workers INTEGER, tasks INTEGER, seconds REAL, startup_seconds REAL,
    status TEXT, code TEXT);
"""


@dataclass(frozen=True, slots=True)
class FailureClass:
    """A failure signature of one pair in one family, with the workload to shrink for it
    (the one with fewest requests)."""

    systems: str
    left: str
    right: str
    family: str
    signature: str
    seed: int


class Store:
    """The open store of one campaign directory (see the module docstring)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            self.db = sqlite3.connect(path, isolation_level=None)
            self.db.execute("PRAGMA journal_mode=WAL")
            self.db.executescript(SCHEMA)
            found = self.db.execute("SELECT value FROM meta WHERE key='format'").fetchone()
        except sqlite3.DatabaseError as err:
            raise UserError(f"{path}: not a campaign store ({err})") from None
        if found is None:
            self.db.execute("INSERT INTO meta VALUES ('format', ?)", (FORMAT,))
        elif found[0] != FORMAT:
            raise UserError(f"{path}: a campaign store of format {found[0]!r}, this vtwin "
                            f"reads {FORMAT!r}")

    @staticmethod
    def of(directory: Path) -> Store:
        return Store(directory / STORE_NAME)

    def close(self) -> None:
        self.db.close()

    def done(self, systems: str) -> set[tuple[str, int]]:
        """The (family, seed) keys with results for this list of systems."""
        rows = self.db.execute("SELECT DISTINCT family, seed FROM results WHERE systems = ?",
                               (systems,))
        return {(family, int(seed)) for family, seed in rows}

    def add_result(self, result: TaskResult, run_id: str) -> None:
        """All pairs of one task in one transaction: a task is either in or out."""
        task = result.task
        rows = [(task.systems_key, task.family, task.seed, c.left, c.right, result.workload,
                 result.draw, result.requests, result.steps, result.seconds, c.outcome,
                 c.level, c.signature, c.step, c.detail, result.host, result.pid, run_id)
                for c in result.comparisons]
        marks = ", ".join("?" * len(RESULT_COLUMNS))
        with self.db:
            self.db.execute("BEGIN")
            self.db.executemany(
                f"INSERT OR REPLACE INTO results ({', '.join(RESULT_COLUMNS)}) VALUES ({marks})",
                rows)

    def unshrunk(self, systems: str) -> list[FailureClass]:
        """Failure classes of this list of systems without a regression yet (crashes are not
        shrunk: every attempt would kill a worker)."""
        shrinkable = tuple(f for f in FAILURES if f != "crashed")
        marks = ", ".join("?" * len(shrinkable))
        rows = self.db.execute(
            f"""SELECT r.left, r.right, r.family, r.signature, r.seed FROM results r
                WHERE r.systems = ? AND r.outcome IN ({marks}) AND NOT EXISTS (
                    SELECT 1 FROM regressions g WHERE g.left = r.left AND g.right = r.right
                    AND g.family = r.family AND g.signature = r.signature)
                ORDER BY r.left, r.right, r.family, r.signature, r.requests, r.seed""",
            (systems, *shrinkable))
        classes: dict[tuple[str, str, str, str], FailureClass] = {}
        for left, right, family, signature, seed in rows:
            classes.setdefault((left, right, family, signature),
                               FailureClass(systems, left, right, family, signature, seed))
        return list(classes.values())

    def shrunk(self) -> set[tuple[str, str, str, str]]:
        """(left, right, family, signature) of every failure class shrunk (or tried)."""
        rows = self.db.execute("SELECT left, right, family, signature FROM regressions")
        return {(a, b, c, d) for a, b, c, d in rows}

    def add_regression(self, failure: FailureClass, name: str | None, content: str | None,
                       sizes: tuple[int, int], runs: int, seconds: float, detail: str,
                       run_id: str) -> None:
        """A shrink's outcome (`content` None: it failed; the class is not retried)."""
        with self.db:
            self.db.execute("BEGIN")
            self.db.execute(
                "INSERT OR REPLACE INTO regressions VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (failure.left, failure.right, failure.family, failure.signature,
                 failure.systems, failure.seed, name, content, sizes[0], sizes[1], runs,
                 seconds, detail, run_id))

    def start_run(self, run_id: str, started: str, systems: str, families: str,
                  address: str | None, code: str) -> None:
        """A run begins. `code` is the harness digest (`worker.code_digest`): a key's workload
        is what that code generates, so runs of other code say so in the report."""
        with self.db:
            self.db.execute("BEGIN")
            self.db.execute("INSERT OR REPLACE INTO runs (run_id, started, systems, families, "
                            "address, status, code) VALUES (?,?,?,?,?,?,?)",
                            (run_id, started, systems, families, address, "running", code))

    def finish_run(self, run_id: str, **fields: Any) -> None:
        names = sorted(fields)
        with self.db:
            self.db.execute("BEGIN")
            self.db.execute(f"UPDATE runs SET {', '.join(f'{n} = ?' for n in names)} "
                            "WHERE run_id = ?", (*(fields[n] for n in names), run_id))

    def rows(self, query: str, *args: Any) -> Iterator[dict[str, Any]]:
        cursor = self.db.execute(query, args)
        names = [d[0] for d in cursor.description]
        for row in cursor:
            yield dict(zip(names, row, strict=True))


def merge(sources: list[Path], target: Path) -> dict[str, int]:
    """Every row of `sources` (campaign directories) into `target`'s store; a key already
    there is kept. Returns counts: rows added per table and `conflicts` (keys present in two
    sources with another outcome or signature: the same workload judged differently, which
    means other code or a nondeterminism worth a look)."""
    for source in sources:
        if not (source / STORE_NAME).is_file():
            raise UserError(f"{source}: no campaign store ({STORE_NAME}) there")
    store = Store.of(target)
    counts = {"results": 0, "regressions": 0, "runs": 0, "conflicts": 0}
    try:
        for source in sources:
            store.db.execute("ATTACH DATABASE ? AS src", (str(source / STORE_NAME),))
            try:
                counts["conflicts"] += store.db.execute(
                    """SELECT COUNT(*) FROM src.results s JOIN results r USING
                       (systems, family, seed, left, right)
                       WHERE s.outcome != r.outcome OR s.signature != r.signature""",
                ).fetchone()[0]
                for table in ("results", "regressions", "runs"):
                    before = store.db.total_changes
                    store.db.execute(f"INSERT OR IGNORE INTO {table} SELECT * FROM src.{table}")
                    counts[table] += store.db.total_changes - before
            finally:
                store.db.execute("DETACH DATABASE src")
    finally:
        store.close()
    return counts
