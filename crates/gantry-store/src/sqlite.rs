//! The embedded backend: one SQLite file in the data directory, WAL journal, `synchronous =
//! FULL` (an append that returned survives a power cut), the event log and the `jobs` table
//! in one transaction per append.

use crate::{Batch, CommandRecord, JobRow, Role, Store, StoreError, TokenRecord, UsageRow, transition};
use gantry_types::{Event, JobState, TaskStart};
use rusqlite::{Connection, OptionalExtension, Transaction, params};
use std::path::Path;

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS events (
    seq    INTEGER PRIMARY KEY AUTOINCREMENT,
    job_id INTEGER NOT NULL,
    kind   TEXT    NOT NULL,
    at_s   INTEGER NOT NULL,
    body   TEXT    NOT NULL
);
CREATE TABLE IF NOT EXISTS jobs (
    id             INTEGER PRIMARY KEY,
    name           TEXT    NOT NULL,
    queue          TEXT    NOT NULL,
    state          TEXT    NOT NULL,
    submitted_at_s INTEGER NOT NULL,
    started_at_s   INTEGER,
    ended_at_s     INTEGER,
    exit_code      INTEGER,
    requeues       INTEGER NOT NULL DEFAULT 0,
    job            TEXT    NOT NULL,
    tasks          TEXT    NOT NULL DEFAULT '[]',
    outcome        TEXT    NOT NULL DEFAULT '{}'
);
CREATE INDEX IF NOT EXISTS jobs_by_state ON jobs (state, id);
CREATE TABLE IF NOT EXISTS tokens (
    name         TEXT    PRIMARY KEY,
    role         TEXT    NOT NULL,
    queues       TEXT    NOT NULL,
    hash         TEXT    NOT NULL UNIQUE,
    created_at_s INTEGER NOT NULL,
    node         TEXT,
    expires_at_s INTEGER
);
CREATE TABLE IF NOT EXISTS drained (
    node TEXT PRIMARY KEY
);
CREATE TABLE IF NOT EXISTS gpu_modes (
    node TEXT    NOT NULL,
    gpu  INTEGER NOT NULL,
    mode TEXT    NOT NULL,
    PRIMARY KEY (node, gpu)
);
CREATE TABLE IF NOT EXISTS reconfigurations (
    id       INTEGER PRIMARY KEY,
    record   TEXT    NOT NULL,
    finished INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS reconfigurations_open ON reconfigurations (finished, id);
CREATE TABLE IF NOT EXISTS usage (
    hour_s            INTEGER NOT NULL,
    job_id            INTEGER NOT NULL,
    queue             TEXT    NOT NULL,
    user              TEXT    NOT NULL,
    model             TEXT    NOT NULL,
    allocated_milli_s INTEGER NOT NULL,
    used_milli_s      INTEGER NOT NULL,
    PRIMARY KEY (hour_s, job_id, model)
);
CREATE TABLE IF NOT EXISTS series (
    t_s   INTEGER PRIMARY KEY,
    point TEXT    NOT NULL
);
CREATE TABLE IF NOT EXISTS commands (
    seq  INTEGER PRIMARY KEY AUTOINCREMENT,
    at_s INTEGER NOT NULL,
    body TEXT    NOT NULL
);
CREATE TABLE IF NOT EXISTS opens (
    seq            INTEGER PRIMARY KEY,
    at_s           INTEGER NOT NULL,
    events_through INTEGER NOT NULL
);
";

/// What the write-ahead log is cut back to after it was checkpointed (bytes): 64 MiB.
const WAL_KEPT_BYTES: i64 = 64 << 20;

/// The schema this code writes (`PRAGMA user_version`). 2 added `tokens`, 3 `drained`, 4
/// `usage`, 5 `series`, 6 `gpu_modes`, 7 `commands` (the command log), 8 `tokens.node` (agent
/// tokens bound to one node), 9 `reconfigurations` (GPU reconfigurations the controller
/// carries out), 10 `jobs.outcome` (how a job ended, what its runs used, an OOM kill), 11
/// `tokens.expires_at_s` (tokens that expire), 12 `opens` (points the log replays from, for
/// its retention); an older store gets the new tables and columns when opened.
const SCHEMA_VERSION: i64 = 12;

/// SQLite behind the [`Store`] trait.
#[derive(Debug)]
pub struct SqliteStore {
    conn: Connection,
    /// Retention under way: the log before the newest `open` at or before this time goes, a
    /// chunk per commit ([`crate::COMPACT_CHUNK`]).
    compacting: Option<u64>,
}

fn int(v: u64) -> Result<i64, StoreError> {
    i64::try_from(v).map_err(|_| StoreError::Backend(format!("{v} does not fit in a SQLite integer")))
}

fn uint(v: i64) -> Result<u64, StoreError> {
    u64::try_from(v).map_err(|_| StoreError::Corrupt(format!("negative value {v}")))
}

fn state_of(text: &str) -> Result<JobState, StoreError> {
    serde_json::from_value(serde_json::Value::String(text.to_string()))
        .map_err(|_| StoreError::Corrupt(format!("unknown job state {text:?}")))
}

impl SqliteStore {
    /// Open (creating if needed) the store at `path`.
    pub fn open(path: &Path) -> Result<SqliteStore, StoreError> {
        let conn =
            Connection::open(path).map_err(|e| StoreError::Backend(format!("cannot open {}: {e}", path.display())))?;
        Self::init(conn)
    }

    /// A store that lives in memory only (tests, dry runs).
    pub fn open_in_memory() -> Result<SqliteStore, StoreError> {
        Self::init(Connection::open_in_memory()?)
    }

    fn init(conn: Connection) -> Result<SqliteStore, StoreError> {
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "synchronous", "FULL")?;
        // A large transaction (retention deleting a day of log) leaves the WAL as large as it
        // was; the next checkpoint of the WAL cuts it back to this.
        conn.pragma_update(None, "journal_size_limit", WAL_KEPT_BYTES)?;
        conn.busy_timeout(std::time::Duration::from_secs(5))?;
        let version: i64 = conn.pragma_query_value(None, "user_version", |r| r.get(0))?;
        if version > SCHEMA_VERSION {
            return Err(StoreError::Corrupt(format!(
                "the store was written by a newer gantry (schema {version}, this one knows {SCHEMA_VERSION})"
            )));
        }
        conn.execute_batch(SCHEMA)?;
        let has_node: i64 =
            conn.query_row("SELECT COUNT(*) FROM pragma_table_info('tokens') WHERE name = 'node'", [], |r| r.get(0))?;
        if has_node == 0 {
            conn.execute_batch("ALTER TABLE tokens ADD COLUMN node TEXT")?;
        }
        let has_expiry: i64 =
            conn.query_row("SELECT COUNT(*) FROM pragma_table_info('tokens') WHERE name = 'expires_at_s'", [], |r| {
                r.get(0)
            })?;
        if has_expiry == 0 {
            conn.execute_batch("ALTER TABLE tokens ADD COLUMN expires_at_s INTEGER")?;
        }
        let has_outcome: i64 =
            conn.query_row("SELECT COUNT(*) FROM pragma_table_info('jobs') WHERE name = 'outcome'", [], |r| r.get(0))?;
        if has_outcome == 0 {
            conn.execute_batch("ALTER TABLE jobs ADD COLUMN outcome TEXT NOT NULL DEFAULT '{}'")?;
        }
        conn.pragma_update(None, "user_version", SCHEMA_VERSION)?;
        Ok(SqliteStore { conn, compacting: None })
    }

    /// Apply one event to the state table inside `tx`.
    fn apply(tx: &Transaction<'_>, event: &Event) -> Result<(), StoreError> {
        let id = int(event.job_id())?;
        let current: Option<String> =
            tx.query_row("SELECT state FROM jobs WHERE id = ?1", params![id], |r| r.get(0)).optional()?;
        let current = current.as_deref().map(state_of).transpose()?;
        let next = transition(current, event)?.name();
        match event {
            Event::Submitted { at_s, job, .. } => {
                let body = serde_json::to_string(job).map_err(|e| StoreError::Backend(e.to_string()))?;
                tx.execute(
                    "INSERT INTO jobs (id, name, queue, state, submitted_at_s, job) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                    params![id, job.name, job.queue, next, int(*at_s)?, body],
                )?;
            }
            Event::Started { at_s, tasks, .. } => {
                let tasks = serde_json::to_string(tasks).map_err(|e| StoreError::Backend(e.to_string()))?;
                tx.execute(
                    "UPDATE jobs SET state = ?2, started_at_s = ?3, tasks = ?4 WHERE id = ?1",
                    params![id, next, int(*at_s)?, tasks],
                )?;
            }
            Event::Ended { at_s, exit_code, .. } => {
                let outcome = Self::outcome_after(tx, id, event)?;
                tx.execute(
                    "UPDATE jobs SET state = ?2, ended_at_s = ?3, exit_code = ?4, outcome = ?5 WHERE id = ?1",
                    params![id, next, int(*at_s)?, exit_code, outcome],
                )?;
            }
            Event::Requeued { .. } => {
                let outcome = Self::outcome_after(tx, id, event)?;
                tx.execute(
                    "UPDATE jobs SET state = ?2, requeues = requeues + 1, outcome = ?3 WHERE id = ?1",
                    params![id, next, outcome],
                )?;
            }
            Event::Held { held, .. } => {
                // The hold lives in the job's control fields (what a restart admits it with).
                let body: String = tx.query_row("SELECT job FROM jobs WHERE id = ?1", params![id], |r| r.get(0))?;
                let mut job: gantry_types::Job =
                    serde_json::from_str(&body).map_err(|e| StoreError::Corrupt(format!("job {id}: spec: {e}")))?;
                job.control.hold = *held;
                let body = serde_json::to_string(&job).map_err(|e| StoreError::Backend(e.to_string()))?;
                tx.execute("UPDATE jobs SET job = ?2 WHERE id = ?1", params![id, body])?;
            }
        }
        Ok(())
    }

    /// The `outcome` column of job `id` after `event`, as JSON.
    fn outcome_after(tx: &Transaction<'_>, id: i64, event: &Event) -> Result<String, StoreError> {
        let text: String = tx.query_row("SELECT outcome FROM jobs WHERE id = ?1", params![id], |r| r.get(0))?;
        let current: crate::Outcome =
            serde_json::from_str(&text).map_err(|e| StoreError::Corrupt(format!("job {id}: outcome: {e}")))?;
        serde_json::to_string(&current.after(event)).map_err(|e| StoreError::Backend(e.to_string()))
    }

    fn row(r: &rusqlite::Row<'_>) -> rusqlite::Result<Raw> {
        Ok(Raw {
            id: r.get(0)?,
            name: r.get(1)?,
            queue: r.get(2)?,
            state: r.get(3)?,
            submitted: r.get(4)?,
            started: r.get(5)?,
            ended: r.get(6)?,
            exit_code: r.get(7)?,
            requeues: r.get(8)?,
            job: r.get(9)?,
            tasks: r.get(10)?,
            outcome: r.get(11)?,
        })
    }

    fn decode(raw: Raw) -> Result<JobRow, StoreError> {
        let id = raw.id;
        let corrupt = |what: &str, e: serde_json::Error| StoreError::Corrupt(format!("job {id}: {what}: {e}"));
        Ok(JobRow {
            id: uint(id)?,
            name: raw.name,
            queue: raw.queue,
            state: state_of(&raw.state)?,
            submitted_at_s: uint(raw.submitted)?,
            started_at_s: raw.started.map(uint).transpose()?,
            ended_at_s: raw.ended.map(uint).transpose()?,
            exit_code: raw.exit_code,
            requeues: u32::try_from(raw.requeues).map_err(|_| StoreError::Corrupt(format!("job {id}: requeues")))?,
            job: serde_json::from_str(&raw.job).map_err(|e| corrupt("spec", e))?,
            tasks: serde_json::from_str::<Vec<TaskStart>>(&raw.tasks).map_err(|e| corrupt("tasks", e))?,
            outcome: serde_json::from_str(&raw.outcome).map_err(|e| corrupt("outcome", e))?,
        })
    }
}

/// One `jobs` row as SQLite returns it.
struct Raw {
    id: i64,
    name: String,
    queue: String,
    state: String,
    submitted: i64,
    started: Option<i64>,
    ended: Option<i64>,
    exit_code: Option<i32>,
    requeues: i64,
    job: String,
    tasks: String,
    outcome: String,
}

const COLUMNS: &str =
    "id, name, queue, state, submitted_at_s, started_at_s, ended_at_s, exit_code, requeues, job, tasks, outcome";

impl Store for SqliteStore {
    fn append(&mut self, events: &[Event]) -> Result<u64, StoreError> {
        let tx = self.conn.transaction()?;
        let last = append_events(&tx, events)?;
        tx.commit()?;
        Ok(last)
    }

    fn commit(&mut self, batches: &[Batch]) -> Result<(), StoreError> {
        let asked = batches.iter().filter_map(|b| b.compact_before_s).max();
        let compacting = asked.max(self.compacting);
        let tx = self.conn.transaction()?;
        for batch in batches {
            write_batch(&tx, batch)?;
        }
        let done = match compacting {
            Some(before_s) => compact_chunk(&tx, before_s)?,
            None => true,
        };
        tx.commit()?;
        self.compacting = if done { None } else { compacting };
        Ok(())
    }

    fn commands_after(&self, seq: u64, limit: usize) -> Result<Vec<CommandRecord>, StoreError> {
        let mut stmt =
            self.conn.prepare_cached("SELECT seq, at_s, body FROM commands WHERE seq > ?1 ORDER BY seq LIMIT ?2")?;
        let raw: Vec<(i64, i64, String)> = stmt
            .query_map(params![int(seq)?, int(limit as u64)?], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?
            .collect::<Result<_, _>>()?;
        raw.into_iter().map(|(seq, at, body)| Ok(CommandRecord { seq: uint(seq)?, at_s: uint(at)?, body })).collect()
    }

    fn events_after(&self, seq: u64, limit: usize) -> Result<Vec<(u64, Event)>, StoreError> {
        let mut stmt = self.conn.prepare_cached("SELECT seq, body FROM events WHERE seq > ?1 ORDER BY seq LIMIT ?2")?;
        let rows = stmt
            .query_map(params![int(seq)?, int(limit as u64)?], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?)))?;
        rows.map(|r| {
            let (seq, body) = r?;
            let event = serde_json::from_str(&body).map_err(|e| StoreError::Corrupt(format!("event {seq}: {e}")))?;
            Ok((uint(seq)?, event))
        })
        .collect()
    }

    fn job(&self, id: u64) -> Result<Option<JobRow>, StoreError> {
        let mut stmt = self.conn.prepare_cached(&format!("SELECT {COLUMNS} FROM jobs WHERE id = ?1"))?;
        stmt.query_row(params![int(id)?], Self::row).optional()?.map(Self::decode).transpose()
    }

    fn jobs(&self, states: &[JobState]) -> Result<Vec<JobRow>, StoreError> {
        let mut stmt = self.conn.prepare_cached(&format!("SELECT {COLUMNS} FROM jobs ORDER BY id"))?;
        let rows = stmt.query_map([], Self::row)?;
        let mut out = Vec::new();
        for raw in rows {
            let row = Self::decode(raw?)?;
            if states.is_empty() || states.contains(&row.state) {
                out.push(row);
            }
        }
        Ok(out)
    }

    fn next_job_id(&self) -> Result<u64, StoreError> {
        let max: Option<i64> = self.conn.query_row("SELECT MAX(id) FROM jobs", [], |r| r.get(0))?;
        Ok(max.map(uint).transpose()?.map_or(1, |m| m + 1))
    }

    fn put_token(&mut self, token: &TokenRecord) -> Result<(), StoreError> {
        put_token(&self.conn, token)
    }

    fn token_by_hash(&self, hash: &str) -> Result<Option<TokenRecord>, StoreError> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT name, role, queues, hash, created_at_s, node, expires_at_s FROM tokens WHERE hash = ?1",
        )?;
        stmt.query_row(params![hash], token_row).optional()?.map(decode_token).transpose()
    }

    fn tokens(&self) -> Result<Vec<TokenRecord>, StoreError> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT name, role, queues, hash, created_at_s, node, expires_at_s FROM tokens ORDER BY name",
        )?;
        let rows = stmt.query_map([], token_row)?;
        rows.map(|r| decode_token(r?)).collect()
    }

    fn revoke_token(&mut self, name: &str) -> Result<bool, StoreError> {
        Ok(self.conn.execute("DELETE FROM tokens WHERE name = ?1", params![name])? > 0)
    }

    fn set_drained(&mut self, node: &str, drained: bool) -> Result<(), StoreError> {
        set_drained(&self.conn, node, drained)
    }

    fn drained(&self) -> Result<Vec<String>, StoreError> {
        let mut stmt = self.conn.prepare_cached("SELECT node FROM drained ORDER BY node")?;
        let rows = stmt.query_map([], |r| r.get::<_, String>(0))?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    fn set_gpu_mode(&mut self, node: &str, gpu: u32, mode: &str) -> Result<(), StoreError> {
        set_gpu_mode(&self.conn, node, gpu, mode)
    }

    fn gpu_modes(&self) -> Result<Vec<(String, u32, String)>, StoreError> {
        let mut stmt = self.conn.prepare_cached("SELECT node, gpu, mode FROM gpu_modes ORDER BY node, gpu")?;
        let rows = stmt.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, u32>(1)?, r.get::<_, String>(2)?)))?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    fn reconfigurations(&self, finished: usize) -> Result<Vec<(u64, String)>, StoreError> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT id, record FROM reconfigurations WHERE finished = 0 OR id IN \
             (SELECT id FROM reconfigurations WHERE finished = 1 ORDER BY id DESC LIMIT ?1) ORDER BY id",
        )?;
        let limit = i64::try_from(finished).unwrap_or(i64::MAX);
        let rows = stmt.query_map(params![limit], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?)))?;
        rows.map(|r| {
            let (id, record) = r?;
            Ok((uint(id)?, record))
        })
        .collect()
    }

    fn add_usage(&mut self, rows: &[UsageRow]) -> Result<(), StoreError> {
        let tx = self.conn.transaction()?;
        add_usage(&tx, rows)?;
        tx.commit()?;
        Ok(())
    }

    fn usage(&self, from_s: u64, to_s: u64) -> Result<Vec<UsageRow>, StoreError> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT hour_s, job_id, queue, user, model, allocated_milli_s, used_milli_s FROM usage
             WHERE hour_s >= ?1 AND hour_s < ?2 ORDER BY hour_s, job_id, model",
        )?;
        let raw: Vec<(i64, i64, String, String, String, i64, i64)> = stmt
            .query_map(params![int(from_s)?, int(to_s.max(from_s))?], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?, r.get(5)?, r.get(6)?))
            })?
            .collect::<Result<_, _>>()?;
        raw.into_iter()
            .map(|(hour, job, queue, user, model, allocated, used)| {
                Ok(UsageRow {
                    hour_s: uint(hour)?,
                    job: uint(job)?,
                    queue,
                    user,
                    model,
                    allocated_milli_s: uint(allocated)?,
                    used_milli_s: uint(used)?,
                })
            })
            .collect()
    }

    fn put_series_point(&mut self, t_s: u64, point: &str, keep_from_s: u64) -> Result<(), StoreError> {
        let tx = self.conn.transaction()?;
        put_series_point(&tx, t_s, point, keep_from_s)?;
        tx.commit()?;
        Ok(())
    }

    fn opens(&self) -> Result<Vec<crate::OpenRecord>, StoreError> {
        let mut stmt = self.conn.prepare_cached("SELECT seq, at_s, events_through FROM opens ORDER BY seq")?;
        let raw: Vec<(i64, i64, i64)> =
            stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?.collect::<Result<_, _>>()?;
        raw.into_iter()
            .map(|(seq, at, through)| {
                Ok(crate::OpenRecord { seq: uint(seq)?, at_s: uint(at)?, events_through: uint(through)? })
            })
            .collect()
    }

    fn series_points(&self, from_s: u64) -> Result<Vec<(u64, String)>, StoreError> {
        let mut stmt = self.conn.prepare_cached("SELECT t_s, point FROM series WHERE t_s >= ?1 ORDER BY t_s")?;
        let raw: Vec<(i64, String)> =
            stmt.query_map(params![int(from_s)?], |r| Ok((r.get(0)?, r.get(1)?)))?.collect::<Result<_, _>>()?;
        raw.into_iter().map(|(t, p)| Ok((uint(t)?, p))).collect()
    }

    fn rebuild(&mut self) -> Result<(), StoreError> {
        let tx = self.conn.transaction()?;
        tx.execute("DELETE FROM jobs", [])?;
        {
            let mut stmt = tx.prepare("SELECT seq, body FROM events ORDER BY seq")?;
            let rows: Vec<(i64, String)> =
                stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?.collect::<Result<_, _>>()?;
            for (seq, body) in rows {
                let event: Event =
                    serde_json::from_str(&body).map_err(|e| StoreError::Corrupt(format!("event {seq}: {e}")))?;
                Self::apply(&tx, &event)?;
            }
        }
        tx.commit()?;
        Ok(())
    }
}

type RawToken = (String, String, String, String, i64, Option<String>, Option<i64>);

fn token_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<RawToken> {
    Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?, r.get(5)?, r.get(6)?))
}

fn decode_token((name, role, queues, hash, created, node, expires): RawToken) -> Result<TokenRecord, StoreError> {
    let role: Role = serde_json::from_value(serde_json::Value::String(role.clone()))
        .map_err(|_| StoreError::Corrupt(format!("token {name:?}: unknown role {role:?}")))?;
    let queues: Vec<String> =
        serde_json::from_str(&queues).map_err(|e| StoreError::Corrupt(format!("token {name:?}: queues: {e}")))?;
    let expires_at_s = expires.map(uint).transpose()?;
    Ok(TokenRecord { name, role, queues, hash, created_at_s: uint(created)?, node, expires_at_s })
}

/// Append `events` to the log and apply each to the `jobs` table; the last one's sequence
/// number (0 for none).
fn append_events(tx: &Transaction<'_>, events: &[Event]) -> Result<u64, StoreError> {
    let mut last = 0;
    for event in events {
        SqliteStore::apply(tx, event)?;
        let body = serde_json::to_string(event).map_err(|e| StoreError::Backend(e.to_string()))?;
        let at = event.at_s();
        tx.prepare_cached("INSERT INTO events (job_id, kind, at_s, body) VALUES (?1, ?2, ?3, ?4)")?
            .execute(params![int(event.job_id())?, event.kind(), int(at)?, body])?;
        last = uint(tx.last_insert_rowid())?;
    }
    Ok(last)
}

fn put_token(conn: &Connection, token: &TokenRecord) -> Result<(), StoreError> {
    let role = serde_json::to_value(token.role).map_err(|e| StoreError::Backend(e.to_string()))?;
    let queues = serde_json::to_string(&token.queues).map_err(|e| StoreError::Backend(e.to_string()))?;
    let inserted = conn.execute(
        "INSERT OR IGNORE INTO tokens (name, role, queues, hash, created_at_s, node, expires_at_s)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
        params![
            token.name,
            role.as_str(),
            queues,
            token.hash,
            int(token.created_at_s)?,
            token.node,
            token.expires_at_s.map(int).transpose()?
        ],
    )?;
    if inserted == 0 {
        return Err(StoreError::TokenExists(token.name.clone()));
    }
    Ok(())
}

fn set_drained(conn: &Connection, node: &str, drained: bool) -> Result<(), StoreError> {
    if drained {
        conn.execute("INSERT OR IGNORE INTO drained (node) VALUES (?1)", params![node])?;
    } else {
        conn.execute("DELETE FROM drained WHERE node = ?1", params![node])?;
    }
    Ok(())
}

fn set_gpu_mode(conn: &Connection, node: &str, gpu: u32, mode: &str) -> Result<(), StoreError> {
    conn.execute(
        "INSERT INTO gpu_modes (node, gpu, mode) VALUES (?1, ?2, ?3) \
         ON CONFLICT (node, gpu) DO UPDATE SET mode = excluded.mode",
        params![node, gpu, mode],
    )?;
    Ok(())
}

fn add_usage(conn: &Connection, rows: &[UsageRow]) -> Result<(), StoreError> {
    let mut stmt = conn.prepare_cached(
        "INSERT INTO usage (hour_s, job_id, queue, user, model, allocated_milli_s, used_milli_s)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
         ON CONFLICT (hour_s, job_id, model) DO UPDATE SET
           allocated_milli_s = allocated_milli_s + excluded.allocated_milli_s,
           used_milli_s = used_milli_s + excluded.used_milli_s",
    )?;
    for r in rows {
        if r.hour_s % crate::USAGE_BUCKET_S != 0 {
            return Err(StoreError::Backend(format!("usage hour {} is not on an hour", r.hour_s)));
        }
        stmt.execute(params![
            int(r.hour_s)?,
            int(r.job)?,
            r.queue,
            r.user,
            r.model,
            int(r.allocated_milli_s)?,
            int(r.used_milli_s)?
        ])?;
    }
    Ok(())
}

fn put_series_point(conn: &Connection, t_s: u64, point: &str, keep_from_s: u64) -> Result<(), StoreError> {
    conn.execute("INSERT OR REPLACE INTO series (t_s, point) VALUES (?1, ?2)", params![int(t_s)?, point])?;
    conn.execute("DELETE FROM series WHERE t_s < ?1", params![int(keep_from_s)?])?;
    Ok(())
}

/// Everything of one batch, inside the caller's transaction.
fn write_batch(tx: &Transaction<'_>, batch: &Batch) -> Result<(), StoreError> {
    for (i, (at_s, body)) in batch.commands.iter().enumerate() {
        tx.prepare_cached("INSERT INTO commands (at_s, body) VALUES (?1, ?2)")?.execute(params![int(*at_s)?, body])?;
        if i == 0 && batch.opened {
            let seq = tx.last_insert_rowid();
            let through: i64 = tx.query_row("SELECT COALESCE(MAX(seq), 0) FROM events", [], |r| r.get(0))?;
            tx.execute(
                "INSERT INTO opens (seq, at_s, events_through) VALUES (?1, ?2, ?3)",
                params![seq, int(*at_s)?, through],
            )?;
        }
    }
    append_events(tx, &batch.events)?;
    for token in &batch.tokens_added {
        put_token(tx, token)?;
    }
    for name in &batch.tokens_revoked {
        tx.execute("DELETE FROM tokens WHERE name = ?1", params![name])?;
    }
    for (node, drained) in &batch.drained {
        set_drained(tx, node, *drained)?;
    }
    for (node, gpu, mode) in &batch.gpu_modes {
        set_gpu_mode(tx, node, *gpu, mode)?;
    }
    for (id, record, finished) in &batch.reconfigurations {
        tx.prepare_cached("INSERT OR REPLACE INTO reconfigurations (id, record, finished) VALUES (?1, ?2, ?3)")?
            .execute(params![int(*id)?, record, finished])?;
    }
    add_usage(tx, &batch.usage)?;
    for (t_s, point, keep_from_s) in &batch.series {
        put_series_point(tx, *t_s, point, *keep_from_s)?;
    }
    Ok(())
}

/// One chunk of retention: the oldest entries before the newest `open` at or before
/// `before_s`; the `open` records before it once they are all gone. Whether it is done.
fn compact_chunk(tx: &Transaction<'_>, before_s: u64) -> Result<bool, StoreError> {
    let keep: Option<i64> =
        tx.query_row("SELECT MAX(seq) FROM opens WHERE at_s <= ?1", params![int(before_s)?], |r| r.get(0))?;
    let Some(keep) = keep else { return Ok(true) };
    let deleted = tx.execute(
        "DELETE FROM commands WHERE seq IN (SELECT seq FROM commands WHERE seq < ?1 ORDER BY seq LIMIT ?2)",
        params![keep, crate::COMPACT_CHUNK],
    )?;
    if (deleted as i64) < crate::COMPACT_CHUNK {
        tx.execute("DELETE FROM opens WHERE seq < ?1", params![keep])?;
        return Ok(true);
    }
    Ok(false)
}
