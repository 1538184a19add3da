//! The PostgreSQL backend, for controllers that must outlive their machine: the same tables
//! as SQLite (the event log, the `jobs` table derived from it in the same transaction, the
//! command log and the side tables), versioned migrations checked at start.
//!
//! [`Store`] is synchronous and the controller calls it from its commit thread and from
//! request handlers on the async runtime, so the connection lives on a thread of its own and
//! every call is handed to it ([`PostgresStore::call`]): the synchronous `postgres` client
//! (tokio-postgres underneath) then never runs inside the controller's runtime.

use crate::{
    Batch, CommandRecord, JobRow, Role, Store, StoreError, TokenRecord, USAGE_BUCKET_S, UsageRow, apply_event,
};
use gantry_types::{Event, JobState, TaskStart};
use postgres::{Client, NoTls, Transaction};
use std::sync::mpsc;

/// Versioned migrations, applied in order inside one transaction under an advisory lock (two
/// controllers starting at once do not both migrate). The numbers continue SQLite's schema
/// versions: 8 is the first PostgreSQL schema and matches SQLite's 8 table for table.
const MIGRATIONS: &[(i64, &str)] = &[
    (
        8,
        "
CREATE TABLE events (
    seq    BIGSERIAL PRIMARY KEY,
    job_id BIGINT NOT NULL,
    kind   TEXT   NOT NULL,
    at_s   BIGINT NOT NULL,
    body   TEXT   NOT NULL
);
CREATE TABLE jobs (
    id             BIGINT PRIMARY KEY,
    name           TEXT   NOT NULL,
    queue          TEXT   NOT NULL,
    state          TEXT   NOT NULL,
    submitted_at_s BIGINT NOT NULL,
    started_at_s   BIGINT,
    ended_at_s     BIGINT,
    exit_code      INTEGER,
    requeues       BIGINT NOT NULL DEFAULT 0,
    job            TEXT   NOT NULL,
    tasks          TEXT   NOT NULL DEFAULT '[]'
);
CREATE INDEX jobs_by_state ON jobs (state, id);
CREATE TABLE tokens (
    name         TEXT   PRIMARY KEY,
    role         TEXT   NOT NULL,
    queues       TEXT   NOT NULL,
    hash         TEXT   NOT NULL UNIQUE,
    created_at_s BIGINT NOT NULL,
    node         TEXT
);
CREATE TABLE drained (node TEXT PRIMARY KEY);
CREATE TABLE gpu_modes (
    node TEXT    NOT NULL,
    gpu  INTEGER NOT NULL,
    mode TEXT    NOT NULL,
    PRIMARY KEY (node, gpu)
);
CREATE TABLE usage (
    hour_s            BIGINT NOT NULL,
    job_id            BIGINT NOT NULL,
    queue             TEXT   NOT NULL,
    \"user\"          TEXT   NOT NULL,
    model             TEXT   NOT NULL,
    allocated_milli_s BIGINT NOT NULL,
    used_milli_s      BIGINT NOT NULL,
    PRIMARY KEY (hour_s, job_id, model)
);
CREATE TABLE series (t_s BIGINT PRIMARY KEY, point TEXT NOT NULL);
CREATE TABLE commands (
    seq  BIGSERIAL PRIMARY KEY,
    at_s BIGINT NOT NULL,
    body TEXT   NOT NULL
);
",
    ),
    (
        // The leader's term (fencing token): every write of a leading store checks it.
        9,
        "
CREATE TABLE gantry_leader (
    term    BIGINT      NOT NULL,
    holder  TEXT        NOT NULL,
    since_s BIGINT      NOT NULL,
    pid     INTEGER     NOT NULL,
    expires TIMESTAMPTZ NOT NULL
);
INSERT INTO gantry_leader (term, holder, since_s, pid, expires) VALUES (0, '', 0, 0, 'epoch');
",
    ),
    (
        // GPU reconfigurations the controller carries out (SQLite's schema 9).
        10,
        "CREATE TABLE reconfigurations (id BIGINT PRIMARY KEY, record TEXT NOT NULL, finished BOOLEAN NOT NULL);
CREATE INDEX reconfigurations_open ON reconfigurations (finished, id);",
    ),
    (
        // How a job ended, what its runs used, an OOM kill (SQLite's schema 10).
        11,
        "ALTER TABLE jobs ADD COLUMN outcome TEXT NOT NULL DEFAULT '{}';",
    ),
    (
        // Tokens that expire (SQLite's schema 11).
        12,
        "ALTER TABLE tokens ADD COLUMN expires_at_s BIGINT;",
    ),
    (
        // Points the command log replays from, for its retention (SQLite's schema 12).
        13,
        "CREATE TABLE opens (seq BIGINT PRIMARY KEY, at_s BIGINT NOT NULL, events_through BIGINT NOT NULL);",
    ),
    (
        // Where the leader answers, for standbys to tell clients (PostgreSQL only).
        14,
        "ALTER TABLE gantry_leader ADD COLUMN url TEXT NOT NULL DEFAULT '';",
    ),
];

/// The schema version this code writes.
pub const POSTGRES_SCHEMA_VERSION: i64 = 14;

/// Arbitrary, fixed: the advisory lock migrations hold.
const MIGRATION_LOCK: i64 = 0x6761_6e74_7279; // "gantry"
/// The session advisory lock the leading controller holds as long as its connection lives:
/// PostgreSQL releases it when that connection ends (a process killed, a machine gone once
/// the keepalives below give up), and a standby waiting for it takes over.
pub const LEADER_LOCK: i64 = 0x6761_6e74_7279 + 1;
/// How a connection notices a peer gone silent: TCP keepalives after 5 s idle, every 2 s,
/// 3 misses (about 11 s), on both sides (the server's settings are per session).
const KEEPALIVE_IDLE: std::time::Duration = std::time::Duration::from_secs(5);
const KEEPALIVE_OPTIONS: &str = "-c tcp_keepalives_idle=5 -c tcp_keepalives_interval=2 -c tcp_keepalives_count=3";
/// How long a connection attempt may take (a server that drops packets answers nothing).
const CONNECT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);
/// How often a standby tries the leader lock.
const LEAD_RETRY: std::time::Duration = std::time::Duration::from_millis(200);
/// The leader's lease, on the database's clock: renewed every [`LEASE_RENEW`] while its
/// process runs. A leader whose process is paused (or starved) past it keeps its connection
/// and its lock, so a standby ends that connection (`pg_terminate_backend`) and takes over;
/// the old leader's next write then fails, and its term would fence it anyway.
pub const LEASE: std::time::Duration = std::time::Duration::from_secs(10);
const LEASE_RENEW: std::time::Duration = std::time::Duration::from_secs(2);

type Work = Box<dyn FnOnce(&mut Client) + Send>;

/// PostgreSQL behind the [`Store`] trait.
#[derive(Debug)]
pub struct PostgresStore {
    /// To the connection's thread: work, or `None` to close the connection.
    work: mpsc::Sender<Option<Work>>,
    /// The URL without its password, for messages.
    shown: String,
    /// The term this store leads with (0: not leading, its writes are not fenced).
    term: i64,
    /// When the lease was last known to be held.
    lease: LeaseWatch,
    /// Retention under way (as SQLite's).
    compacting: Option<u64>,
    /// The URL this controller answers on, recorded when it leads.
    advertised: String,
    /// While it waits to lead: where the current leader says it answers.
    leader_seen: LeaderHint,
}

/// Where the leader answers, as a standby last read it from the store (empty: not known).
#[derive(Clone, Debug, Default)]
pub struct LeaderHint(std::sync::Arc<std::sync::Mutex<String>>);

impl LeaderHint {
    /// The leader's URL, when one is known.
    pub fn get(&self) -> Option<String> {
        self.0.lock().ok().map(|url| url.clone()).filter(|url| !url.is_empty())
    }

    fn set(&self, url: &str) {
        if let Ok(mut held) = self.0.lock()
            && *held != url
        {
            url.clone_into(&mut held);
        }
    }
}

/// Margin under [`LEASE`] within which a leader trusts its lease without a renewal: the time
/// a renewal's answer may take, and the two clocks' drift over a lease.
const LEASE_MARGIN: std::time::Duration = std::time::Duration::from_secs(2);

/// Whether this process still holds the leader's lease, as far as it can know without asking:
/// the lease was taken or renewed (the renewal sent at a known instant of this process's
/// monotonic clock) less than [`LEASE`] minus a margin ago. A leader paused past its lease
/// and woken finds it stale before it learns from the store that it was replaced, and must
/// not answer from its memory meanwhile.
///
/// It also says when the lease is *lost* for good: a renewal found the term taken by another
/// controller, or the connection ended (a PostgreSQL restart, a network cut): this leader
/// must step down, and may come back as a standby.
#[derive(Clone, Debug, Default)]
pub struct LeaseWatch {
    renewed: std::sync::Arc<std::sync::Mutex<Option<std::time::Instant>>>,
    lost: std::sync::Arc<std::sync::Mutex<Option<String>>>,
}

impl LeaseWatch {
    /// Still within the lease.
    pub fn fresh(&self) -> bool {
        self.lost().is_none()
            && self.renewed.lock().ok().and_then(|t| *t).is_some_and(|at| at.elapsed() < LEASE - LEASE_MARGIN)
    }

    /// Why the lease cannot be renewed any more, once that is known.
    pub fn lost(&self) -> Option<String> {
        self.lost.lock().ok().and_then(|l| l.clone())
    }

    fn held_since(&self, sent: std::time::Instant) {
        if let Ok(mut t) = self.renewed.lock() {
            *t = Some(sent);
        }
    }

    fn lose(&self, why: String) {
        if let Ok(mut l) = self.lost.lock() {
            l.get_or_insert(why);
        }
    }
}

fn pg(e: postgres::Error) -> StoreError {
    if e.code() == Some(&postgres::error::SqlState::DISK_FULL) {
        return StoreError::Full(e.to_string());
    }
    // The server's own message (a constraint, a syntax error) when it sent one.
    let message = match e.as_db_error() {
        Some(db) => format!("postgres: {}", db.message()),
        None => format!("postgres: {}", described(&e)),
    };
    classified(&e, message)
}

/// `message` as the error `e` is: the store unreachable (a new connection may do), or not.
fn classified(e: &postgres::Error, message: String) -> StoreError {
    if unreachable(e) { StoreError::Unreachable(message) } else { StoreError::Backend(message) }
}

/// Whether `e` is about the connection rather than the statement: no server error at all (a
/// socket refused, reset or closed, a TLS failure), a connection exception (class 08), or the
/// server going down or not yet up (57P01 admin shutdown, 57P02 crash shutdown, 57P03
/// cannot connect now).
/// A TLS failure (a certificate refused) is not: trying again meets the same certificate.
fn unreachable(e: &postgres::Error) -> bool {
    use postgres::error::SqlState;
    match e.code() {
        // No SQLSTATE: the server sent no error; the connection failed.
        None => !tls_failure(e),
        Some(code) => {
            code.code().starts_with("08")
                || [SqlState::ADMIN_SHUTDOWN, SqlState::CRASH_SHUTDOWN, SqlState::CANNOT_CONNECT_NOW].contains(code)
        }
    }
}

/// `e`'s causes, nearest first.
fn causes(e: &postgres::Error) -> impl Iterator<Item = &(dyn std::error::Error + 'static)> {
    std::iter::successors(std::error::Error::source(e), |c| c.source())
}

/// Whether a TLS error (rustls's own) is among `e`'s causes.
fn tls_failure(e: &postgres::Error) -> bool {
    causes(e).any(|c| {
        c.is::<rustls::Error>()
            || c.downcast_ref::<std::io::Error>()
                .and_then(|io| io.get_ref())
                .is_some_and(|inner| inner.is::<rustls::Error>())
    })
}

/// `e` and its causes, as one line ("error performing TLS handshake: invalid peer
/// certificate: …"): the driver's own message names only the step that failed.
fn described(e: &postgres::Error) -> String {
    causes(e).fold(e.to_string(), |text, c| {
        let more = c.to_string();
        if text.contains(&more) { text } else { format!("{text}: {more}") }
    })
}

fn int(v: u64) -> Result<i64, StoreError> {
    i64::try_from(v).map_err(|_| StoreError::Backend(format!("{v} does not fit in a BIGINT")))
}

fn uint(v: i64) -> Result<u64, StoreError> {
    u64::try_from(v).map_err(|_| StoreError::Corrupt(format!("negative value {v}")))
}

fn json<T: serde::Serialize>(value: &T) -> Result<String, StoreError> {
    serde_json::to_string(value).map_err(|e| StoreError::Backend(e.to_string()))
}

/// `postgres://user:secret@host/db` shown as `postgres://user:***@host/db` (and a key=value
/// string's `password=…` as `password=***`).
pub fn redact_url(url: &str) -> String {
    if !url.contains("://") {
        return url
            .split_whitespace()
            .map(|part| if part.starts_with("password=") { "password=***" } else { part })
            .collect::<Vec<_>>()
            .join(" ");
    }
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            let userinfo = &url[scheme + 3..at];
            match userinfo.split_once(':') {
                Some((user, _)) => format!("{}{user}:***{}", &url[..scheme + 3], &url[at..]),
                None => url.to_string(),
            }
        }
        _ => url.to_string(),
    }
}

impl PostgresStore {
    /// Connect to `url` (`postgres://user:password@host:port/database`, or key=value pairs),
    /// migrate an older schema, refuse a newer one.
    pub fn open(url: &str) -> Result<PostgresStore, StoreError> {
        let shown = redact_url(url);
        let (tls, url) = crate::pg_tls::TlsOptions::split(url)?;
        let mut config: postgres::Config =
            url.parse().map_err(|e| StoreError::Backend(format!("not a PostgreSQL URL ({shown}): {e}")))?;
        let connector = tls.connector()?;
        config.ssl_mode(tls.driver_mode()).connect_timeout(CONNECT_TIMEOUT);
        config.keepalives(true).keepalives_idle(KEEPALIVE_IDLE);
        let options = match config.get_options() {
            Some(theirs) => format!("{theirs} {KEEPALIVE_OPTIONS}"),
            None => KEEPALIVE_OPTIONS.to_string(),
        };
        config.options(&options);
        let (work, queue) = mpsc::channel::<Option<Work>>();
        let (ready, opened) = mpsc::channel::<Result<(), StoreError>>();
        let name = shown.clone();
        std::thread::Builder::new()
            .name("gantry-postgres".into())
            .spawn(move || {
                let connected = match connector {
                    Some(tls) => config.connect(tls),
                    None => config.connect(NoTls),
                };
                let mut client = match connected {
                    Ok(client) => client,
                    Err(e) => {
                        let why = format!("cannot connect to {name}: {}", described(&e));
                        let _ = ready.send(Err(classified(&e, why)));
                        return;
                    }
                };
                let migrated = migrate(&mut client);
                let failed = migrated.is_err();
                let _ = ready.send(migrated);
                if failed {
                    return;
                }
                // Until the store is dropped (`None`): the connection, and the leader lock with
                // it, ends then, not when the last sender (the lease thread) lets go.
                // A connection that ended stays ended: the thread stops, and every later call
                // reads as unreachable (the owner opens a new store).
                while let Ok(Some(work)) = queue.recv() {
                    work(&mut client);
                    if client.is_closed() {
                        break;
                    }
                }
            })
            .map_err(|e| StoreError::Backend(format!("cannot start the store thread: {e}")))?;
        opened.recv().map_err(|_| StoreError::Backend("the store thread stopped".into()))??;
        Ok(PostgresStore {
            work,
            shown,
            term: 0,
            lease: LeaseWatch::default(),
            compacting: None,
            advertised: String::new(),
            leader_seen: LeaderHint::default(),
        })
    }

    /// Record `url` as where this controller answers once it leads, and, while it waits,
    /// keep `seen` up to date with where the current leader answers.
    pub fn advertising(mut self, url: &str, seen: LeaderHint) -> PostgresStore {
        self.advertised = url.to_string();
        self.leader_seen = seen;
        self
    }

    /// Become the leader: hold the leader lock (trying until `wait` has passed; `None`: until
    /// it is free) and take the next term, which every later write checks. Returns the term.
    /// A second controller on the same store waits here (a standby) or is refused.
    pub fn lead(&mut self, holder: &str, now_s: u64, wait: Option<std::time::Duration>) -> Result<u64, StoreError> {
        let holder = holder.to_string();
        let deadline = wait.map(|w| std::time::Instant::now() + w);
        let lease_s = LEASE.as_secs_f64();
        let (advertised, seen) = (self.advertised.clone(), self.leader_seen.clone());
        // Renewed within the last two renewals: its lease still has this long to run.
        let alive_s = (LEASE - 2 * LEASE_RENEW).as_secs_f64();
        let term = self.call(move |c| {
            loop {
                let got: bool = c.query_one("SELECT pg_try_advisory_lock($1)", &[&LEADER_LOCK]).map_err(pg)?.get(0);
                if got {
                    break;
                }
                // Held: by a live leader, or by the connection of one whose lease ran out
                // (paused, starved): end that connection, and the lock is free.
                let row = c
                    .query_one(
                        "SELECT term, holder, pid, expires < clock_timestamp(), url,
                                expires > clock_timestamp() + make_interval(secs => $1)
                         FROM gantry_leader",
                        &[&alive_s],
                    )
                    .map_err(pg)?;
                let (term, holder, pid, expired): (i64, String, i32, bool) =
                    (row.get(0), row.get(1), row.get(2), row.get(3));
                // Named to clients only while it renews: a leader paused for a few seconds
                // is not pointed at, though its lease has not run out yet.
                seen.set(if row.get(5) { row.get(4) } else { "" });
                if expired && pid != 0 {
                    c.execute("SELECT pg_terminate_backend($1)", &[&pid]).map_err(pg)?;
                } else if deadline.is_some_and(|d| std::time::Instant::now() >= d) {
                    return Err(StoreError::Led { term: uint(term)?, holder });
                }
                std::thread::sleep(LEAD_RETRY);
            }
            let row = c
                .query_one(
                    "UPDATE gantry_leader SET term = term + 1, holder = $1, since_s = $2, pid = pg_backend_pid(),
                       expires = clock_timestamp() + make_interval(secs => $3), url = $4 RETURNING term",
                    &[&holder, &int(now_s)?, &lease_s, &advertised],
                )
                .map_err(pg)?;
            Ok(row.get::<_, i64>(0))
        })?;
        self.term = term;
        self.lease.held_since(std::time::Instant::now());
        self.keep_lease(term)?;
        uint(term)
    }

    /// Renew the lease every [`LEASE_RENEW`] on the store's connection, from a thread of its
    /// own (so a busy controller still renews, and a paused process does not). Stops when
    /// the store is dropped or the term is no longer ours.
    fn keep_lease(&self, term: i64) -> Result<(), StoreError> {
        let work = self.work.clone();
        let lease_s = LEASE.as_secs_f64();
        let watch = self.lease.clone();
        let spawned = std::thread::Builder::new().name("gantry-lease".into()).spawn(move || {
            loop {
                std::thread::sleep(LEASE_RENEW);
                let sent = std::time::Instant::now();
                let (answer, answered) = mpsc::channel();
                let renew: Work = Box::new(move |c| {
                    let renewed = c.execute(
                        "UPDATE gantry_leader SET expires = clock_timestamp() + make_interval(secs => $1) WHERE term = $2",
                        &[&lease_s, &term],
                    );
                    let _ = answer.send(match renewed {
                        Ok(1) => Ok(()),
                        Ok(_) => Err("another controller took over the store (its term is newer)".to_string()),
                        Err(e) => Err(pg(e).to_string()),
                    });
                });
                let renewed = work
                    .send(Some(renew))
                    .ok()
                    .and_then(|()| answered.recv().ok())
                    .unwrap_or_else(|| Err("the store's connection ended".to_string()));
                if let Err(why) = renewed {
                    watch.lose(why);
                    return;
                }
                watch.held_since(sent);
            }
        });
        spawned.map(|_| ()).map_err(|e| StoreError::Backend(format!("cannot start the lease thread: {e}")))
    }

    /// Whether this store still holds its lease, for the controller to check before it answers.
    pub fn lease_watch(&self) -> LeaseWatch {
        self.lease.clone()
    }

    /// The term this store leads with (0: it does not lead).
    pub fn term(&self) -> u64 {
        self.term.max(0) as u64
    }

    /// The URL, password hidden.
    pub fn url(&self) -> &str {
        &self.shown
    }

    /// Run `f` on the connection's thread and wait for its answer.
    fn call<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Client) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        let (answer, answered) = mpsc::channel();
        let work: Work = Box::new(move |client| {
            let result = f(client);
            // A broken connection stays broken: the next call says so too.
            let _ = answer.send(result);
        });
        let ended = || StoreError::Unreachable(format!("the connection to {} ended", self.shown));
        self.work.send(Some(work)).map_err(|_| ended())?;
        answered.recv().map_err(|_| ended())?
    }

    /// Run `f` in one transaction, committed if it succeeds (rolled back otherwise). A
    /// leading store first checks that its term is still the store's (fencing: a controller
    /// another has taken over from writes nothing); the row lock it takes makes a new
    /// leader's term wait for this transaction.
    fn transaction<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Transaction<'_>) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        let ours = self.term;
        self.call(move |client| {
            let mut tx = client.transaction().map_err(pg)?;
            if ours > 0 {
                let current: i64 = tx.query_one("SELECT term FROM gantry_leader FOR SHARE", &[]).map_err(pg)?.get(0);
                if current != ours {
                    return Err(StoreError::Fenced { ours: uint(ours)?, current: uint(current)? });
                }
            }
            let value = f(&mut tx)?;
            tx.commit().map_err(pg)?;
            Ok(value)
        })
    }
}

impl Drop for PostgresStore {
    fn drop(&mut self) {
        let _ = self.work.send(None);
    }
}

/// Bring the schema to [`POSTGRES_SCHEMA_VERSION`], or refuse a newer one.
fn migrate(client: &mut Client) -> Result<(), StoreError> {
    let mut tx = client.transaction().map_err(pg)?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK]).map_err(pg)?;
    let exists: bool = tx.query_one("SELECT to_regclass('gantry_schema') IS NOT NULL", &[]).map_err(pg)?.get(0);
    if !exists {
        tx.batch_execute("CREATE TABLE gantry_schema (version BIGINT NOT NULL)").map_err(pg)?;
    }
    let version: Option<i64> =
        tx.query_opt("SELECT version FROM gantry_schema", &[]).map_err(pg)?.map(|row| row.get(0));
    let version = version.unwrap_or(0);
    if version > POSTGRES_SCHEMA_VERSION {
        return Err(StoreError::Corrupt(format!(
            "the store was written by a newer gantry (schema {version}, this one knows {POSTGRES_SCHEMA_VERSION})"
        )));
    }
    for (to, sql) in MIGRATIONS.iter().filter(|(to, _)| *to > version) {
        tx.batch_execute(sql).map_err(|e| StoreError::Backend(format!("migration to schema {to}: {}", pg(e))))?;
    }
    tx.execute("DELETE FROM gantry_schema", &[]).map_err(pg)?;
    tx.execute("INSERT INTO gantry_schema (version) VALUES ($1)", &[&POSTGRES_SCHEMA_VERSION]).map_err(pg)?;
    tx.commit().map_err(pg)
}

const COLUMNS: &str =
    "id, name, queue, state, submitted_at_s, started_at_s, ended_at_s, exit_code, requeues, job, tasks, outcome";

fn state_of(text: &str) -> Result<JobState, StoreError> {
    serde_json::from_value(serde_json::Value::String(text.to_string()))
        .map_err(|_| StoreError::Corrupt(format!("unknown job state {text:?}")))
}

fn decode_job(row: &postgres::Row) -> Result<JobRow, StoreError> {
    let id: i64 = row.get(0);
    let corrupt = |what: &str, e: serde_json::Error| StoreError::Corrupt(format!("job {id}: {what}: {e}"));
    Ok(JobRow {
        id: uint(id)?,
        name: row.get(1),
        queue: row.get(2),
        state: state_of(row.get(3))?,
        submitted_at_s: uint(row.get(4))?,
        started_at_s: row.get::<_, Option<i64>>(5).map(uint).transpose()?,
        ended_at_s: row.get::<_, Option<i64>>(6).map(uint).transpose()?,
        exit_code: row.get(7),
        requeues: u32::try_from(row.get::<_, i64>(8))
            .map_err(|_| StoreError::Corrupt(format!("job {id}: requeues")))?,
        job: serde_json::from_str(row.get(9)).map_err(|e| corrupt("spec", e))?,
        tasks: serde_json::from_str::<Vec<TaskStart>>(row.get(10)).map_err(|e| corrupt("tasks", e))?,
        outcome: serde_json::from_str(row.get(11)).map_err(|e| corrupt("outcome", e))?,
    })
}

fn decode_token(row: &postgres::Row) -> Result<TokenRecord, StoreError> {
    let name: String = row.get(0);
    let role: String = row.get(1);
    let role: Role = serde_json::from_value(serde_json::Value::String(role.clone()))
        .map_err(|_| StoreError::Corrupt(format!("token {name:?}: unknown role {role:?}")))?;
    let queues: Vec<String> =
        serde_json::from_str(row.get(2)).map_err(|e| StoreError::Corrupt(format!("token {name:?}: queues: {e}")))?;
    let expires: Option<i64> = row.get(6);
    Ok(TokenRecord {
        name,
        role,
        queues,
        hash: row.get(3),
        created_at_s: uint(row.get(4))?,
        node: row.get(5),
        expires_at_s: expires.map(uint).transpose()?,
    })
}

/// The `jobs` row of `id` inside `tx`.
fn job_in(tx: &mut Transaction<'_>, id: u64) -> Result<Option<JobRow>, StoreError> {
    let row = tx.query_opt(&format!("SELECT {COLUMNS} FROM jobs WHERE id = $1"), &[&int(id)?]).map_err(pg)?;
    row.as_ref().map(decode_job).transpose()
}

/// Apply one event to the `jobs` table (the shared derivation, [`apply_event`]).
fn apply(tx: &mut Transaction<'_>, event: &Event) -> Result<(), StoreError> {
    let current = job_in(tx, event.job_id())?;
    let row = apply_event(current.as_ref(), event)?;
    let requeues = i64::from(row.requeues);
    tx.execute(
        "INSERT INTO jobs (id, name, queue, state, submitted_at_s, started_at_s, ended_at_s, exit_code, requeues, job, tasks, outcome)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)
         ON CONFLICT (id) DO UPDATE SET state = excluded.state, started_at_s = excluded.started_at_s,
           ended_at_s = excluded.ended_at_s, exit_code = excluded.exit_code, requeues = excluded.requeues,
           job = excluded.job, tasks = excluded.tasks, outcome = excluded.outcome",
        &[
            &int(row.id)?,
            &row.name,
            &row.queue,
            &row.state.name(),
            &int(row.submitted_at_s)?,
            &row.started_at_s.map(int).transpose()?,
            &row.ended_at_s.map(int).transpose()?,
            &row.exit_code,
            &requeues,
            &json(&row.job)?,
            &json(&row.tasks)?,
            &json(&row.outcome)?,
        ],
    )
    .map_err(pg)?;
    Ok(())
}

/// Append `events` and apply each; the last one's sequence number (0 for none).
fn append_events(tx: &mut Transaction<'_>, events: &[Event]) -> Result<u64, StoreError> {
    let mut last = 0;
    for event in events {
        apply(tx, event)?;
        let row = tx
            .query_one(
                "INSERT INTO events (job_id, kind, at_s, body) VALUES ($1, $2, $3, $4) RETURNING seq",
                &[&int(event.job_id())?, &event.kind(), &int(event.at_s())?, &json(event)?],
            )
            .map_err(pg)?;
        last = uint(row.get(0))?;
    }
    Ok(last)
}

fn put_token(tx: &mut Transaction<'_>, token: &TokenRecord) -> Result<(), StoreError> {
    let role = serde_json::to_value(token.role).map_err(|e| StoreError::Backend(e.to_string()))?;
    let inserted = tx
        .execute(
            "INSERT INTO tokens (name, role, queues, hash, created_at_s, node, expires_at_s)
             VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT DO NOTHING",
            &[
                &token.name,
                &role.as_str(),
                &json(&token.queues)?,
                &token.hash,
                &int(token.created_at_s)?,
                &token.node,
                &token.expires_at_s.map(int).transpose()?,
            ],
        )
        .map_err(pg)?;
    if inserted == 0 {
        return Err(StoreError::TokenExists(token.name.clone()));
    }
    Ok(())
}

fn set_drained(tx: &mut Transaction<'_>, node: &str, drained: bool) -> Result<(), StoreError> {
    let sql = if drained {
        "INSERT INTO drained (node) VALUES ($1) ON CONFLICT DO NOTHING"
    } else {
        "DELETE FROM drained WHERE node = $1"
    };
    tx.execute(sql, &[&node]).map_err(pg)?;
    Ok(())
}

fn set_gpu_mode(tx: &mut Transaction<'_>, node: &str, gpu: u32, mode: &str) -> Result<(), StoreError> {
    let gpu = i32::try_from(gpu).map_err(|_| StoreError::Backend(format!("GPU index {gpu}")))?;
    tx.execute(
        "INSERT INTO gpu_modes (node, gpu, mode) VALUES ($1, $2, $3)
         ON CONFLICT (node, gpu) DO UPDATE SET mode = excluded.mode",
        &[&node, &gpu, &mode],
    )
    .map_err(pg)?;
    Ok(())
}

fn add_usage(tx: &mut Transaction<'_>, rows: &[UsageRow]) -> Result<(), StoreError> {
    for r in rows {
        if r.hour_s % USAGE_BUCKET_S != 0 {
            return Err(StoreError::Backend(format!("usage hour {} is not on an hour", r.hour_s)));
        }
        tx.execute(
            "INSERT INTO usage (hour_s, job_id, queue, \"user\", model, allocated_milli_s, used_milli_s)
             VALUES ($1, $2, $3, $4, $5, $6, $7)
             ON CONFLICT (hour_s, job_id, model) DO UPDATE SET
               allocated_milli_s = usage.allocated_milli_s + excluded.allocated_milli_s,
               used_milli_s = usage.used_milli_s + excluded.used_milli_s",
            &[
                &int(r.hour_s)?,
                &int(r.job)?,
                &r.queue,
                &r.user,
                &r.model,
                &int(r.allocated_milli_s)?,
                &int(r.used_milli_s)?,
            ],
        )
        .map_err(pg)?;
    }
    Ok(())
}

fn put_series_point(tx: &mut Transaction<'_>, t_s: u64, point: &str, keep_from_s: u64) -> Result<(), StoreError> {
    tx.execute(
        "INSERT INTO series (t_s, point) VALUES ($1, $2) ON CONFLICT (t_s) DO UPDATE SET point = excluded.point",
        &[&int(t_s)?, &point],
    )
    .map_err(pg)?;
    tx.execute("DELETE FROM series WHERE t_s < $1", &[&int(keep_from_s)?]).map_err(pg)?;
    Ok(())
}

/// Everything of one batch, inside the caller's transaction.
fn write_batch(tx: &mut Transaction<'_>, batch: &Batch) -> Result<(), StoreError> {
    for (i, (at_s, body)) in batch.commands.iter().enumerate() {
        let row = tx
            .query_one("INSERT INTO commands (at_s, body) VALUES ($1, $2) RETURNING seq", &[&int(*at_s)?, body])
            .map_err(pg)?;
        if i == 0 && batch.opened {
            let seq: i64 = row.get(0);
            let through: i64 = tx.query_one("SELECT COALESCE(MAX(seq), 0) FROM events", &[]).map_err(pg)?.get(0);
            tx.execute(
                "INSERT INTO opens (seq, at_s, events_through) VALUES ($1, $2, $3)",
                &[&seq, &int(*at_s)?, &through],
            )
            .map_err(pg)?;
        }
    }
    append_events(tx, &batch.events)?;
    for token in &batch.tokens_added {
        put_token(tx, token)?;
    }
    for name in &batch.tokens_revoked {
        tx.execute("DELETE FROM tokens WHERE name = $1", &[name]).map_err(pg)?;
    }
    for (node, drained) in &batch.drained {
        set_drained(tx, node, *drained)?;
    }
    for (node, gpu, mode) in &batch.gpu_modes {
        set_gpu_mode(tx, node, *gpu, mode)?;
    }
    for (id, record, finished) in &batch.reconfigurations {
        tx.execute(
            "INSERT INTO reconfigurations (id, record, finished) VALUES ($1, $2, $3)
             ON CONFLICT (id) DO UPDATE SET record = excluded.record, finished = excluded.finished",
            &[&int(*id)?, record, finished],
        )
        .map_err(pg)?;
    }
    add_usage(tx, &batch.usage)?;
    for (t_s, point, keep_from_s) in &batch.series {
        put_series_point(tx, *t_s, point, *keep_from_s)?;
    }
    Ok(())
}

/// One chunk of retention (as SQLite's `compact_chunk`). Whether it is done.
fn compact_chunk(tx: &mut Transaction<'_>, before_s: u64) -> Result<bool, StoreError> {
    let keep: Option<i64> =
        tx.query_one("SELECT MAX(seq) FROM opens WHERE at_s <= $1", &[&int(before_s)?]).map_err(pg)?.get(0);
    let Some(keep) = keep else { return Ok(true) };
    let deleted = tx
        .execute(
            "DELETE FROM commands WHERE seq IN (SELECT seq FROM commands WHERE seq < $1 ORDER BY seq LIMIT $2)",
            &[&keep, &crate::COMPACT_CHUNK],
        )
        .map_err(pg)?;
    if (deleted as i64) < crate::COMPACT_CHUNK {
        tx.execute("DELETE FROM opens WHERE seq < $1", &[&keep]).map_err(pg)?;
        return Ok(true);
    }
    Ok(false)
}

impl Store for PostgresStore {
    fn append(&mut self, events: &[Event]) -> Result<u64, StoreError> {
        let events = events.to_vec();
        self.transaction(move |tx| append_events(tx, &events))
    }

    fn commit(&mut self, batches: &[Batch]) -> Result<(), StoreError> {
        let asked = batches.iter().filter_map(|b| b.compact_before_s).max();
        let compacting = asked.max(self.compacting);
        let batches = batches.to_vec();
        let done = self.transaction(move |tx| {
            batches.iter().try_for_each(|b| write_batch(tx, b))?;
            match compacting {
                Some(before_s) => compact_chunk(tx, before_s),
                None => Ok(true),
            }
        })?;
        self.compacting = if done { None } else { compacting };
        Ok(())
    }

    fn commands_after(&self, seq: u64, limit: usize) -> Result<Vec<CommandRecord>, StoreError> {
        self.call(move |c| {
            let rows = c
                .query(
                    "SELECT seq, at_s, body FROM commands WHERE seq > $1 ORDER BY seq LIMIT $2",
                    &[&int(seq)?, &int(limit as u64)?],
                )
                .map_err(pg)?;
            rows.iter()
                .map(|r| Ok(CommandRecord { seq: uint(r.get(0))?, at_s: uint(r.get(1))?, body: r.get(2) }))
                .collect()
        })
    }

    fn events_after(&self, seq: u64, limit: usize) -> Result<Vec<(u64, Event)>, StoreError> {
        self.call(move |c| {
            let rows = c
                .query(
                    "SELECT seq, body FROM events WHERE seq > $1 ORDER BY seq LIMIT $2",
                    &[&int(seq)?, &int(limit as u64)?],
                )
                .map_err(pg)?;
            rows.iter()
                .map(|r| {
                    let seq: i64 = r.get(0);
                    let event =
                        serde_json::from_str(r.get(1)).map_err(|e| StoreError::Corrupt(format!("event {seq}: {e}")))?;
                    Ok((uint(seq)?, event))
                })
                .collect()
        })
    }

    fn job(&self, id: u64) -> Result<Option<JobRow>, StoreError> {
        self.call(move |c| {
            let row = c.query_opt(&format!("SELECT {COLUMNS} FROM jobs WHERE id = $1"), &[&int(id)?]).map_err(pg)?;
            row.as_ref().map(decode_job).transpose()
        })
    }

    fn jobs(&self, states: &[JobState]) -> Result<Vec<JobRow>, StoreError> {
        let names: Vec<String> = states.iter().map(|s| s.name().to_string()).collect();
        self.call(move |c| {
            let rows = if names.is_empty() {
                c.query(&format!("SELECT {COLUMNS} FROM jobs ORDER BY id"), &[])
            } else {
                c.query(&format!("SELECT {COLUMNS} FROM jobs WHERE state = ANY($1) ORDER BY id"), &[&names])
            }
            .map_err(pg)?;
            rows.iter().map(decode_job).collect()
        })
    }

    fn next_job_id(&self) -> Result<u64, StoreError> {
        self.call(|c| {
            let max: Option<i64> = c.query_one("SELECT MAX(id) FROM jobs", &[]).map_err(pg)?.get(0);
            Ok(max.map(uint).transpose()?.map_or(1, |m| m + 1))
        })
    }

    fn rebuild(&mut self) -> Result<(), StoreError> {
        self.transaction(|tx| {
            tx.execute("DELETE FROM jobs", &[]).map_err(pg)?;
            let rows = tx.query("SELECT seq, body FROM events ORDER BY seq", &[]).map_err(pg)?;
            for row in rows {
                let seq: i64 = row.get(0);
                let event: Event =
                    serde_json::from_str(row.get(1)).map_err(|e| StoreError::Corrupt(format!("event {seq}: {e}")))?;
                apply(tx, &event)?;
            }
            Ok(())
        })
    }

    fn put_token(&mut self, token: &TokenRecord) -> Result<(), StoreError> {
        let token = token.clone();
        self.transaction(move |tx| put_token(tx, &token))
    }

    fn token_by_hash(&self, hash: &str) -> Result<Option<TokenRecord>, StoreError> {
        let hash = hash.to_string();
        self.call(move |c| {
            let row = c
                .query_opt(
                    "SELECT name, role, queues, hash, created_at_s, node, expires_at_s FROM tokens WHERE hash = $1",
                    &[&hash],
                )
                .map_err(pg)?;
            row.as_ref().map(decode_token).transpose()
        })
    }

    fn tokens(&self) -> Result<Vec<TokenRecord>, StoreError> {
        self.call(|c| {
            let rows = c
                .query(
                    "SELECT name, role, queues, hash, created_at_s, node, expires_at_s FROM tokens ORDER BY name",
                    &[],
                )
                .map_err(pg)?;
            rows.iter().map(decode_token).collect()
        })
    }

    fn revoke_token(&mut self, name: &str) -> Result<bool, StoreError> {
        let name = name.to_string();
        self.transaction(move |tx| Ok(tx.execute("DELETE FROM tokens WHERE name = $1", &[&name]).map_err(pg)? > 0))
    }

    fn set_drained(&mut self, node: &str, drained: bool) -> Result<(), StoreError> {
        let node = node.to_string();
        self.transaction(move |tx| set_drained(tx, &node, drained))
    }

    fn drained(&self) -> Result<Vec<String>, StoreError> {
        self.call(|c| {
            let rows = c.query("SELECT node FROM drained ORDER BY node", &[]).map_err(pg)?;
            Ok(rows.iter().map(|r| r.get(0)).collect())
        })
    }

    fn set_gpu_mode(&mut self, node: &str, gpu: u32, mode: &str) -> Result<(), StoreError> {
        let (node, mode) = (node.to_string(), mode.to_string());
        self.transaction(move |tx| set_gpu_mode(tx, &node, gpu, &mode))
    }

    fn gpu_modes(&self) -> Result<Vec<(String, u32, String)>, StoreError> {
        self.call(|c| {
            let rows = c.query("SELECT node, gpu, mode FROM gpu_modes ORDER BY node, gpu", &[]).map_err(pg)?;
            rows.iter()
                .map(|r| {
                    let gpu: i32 = r.get(1);
                    let gpu = u32::try_from(gpu).map_err(|_| StoreError::Corrupt(format!("GPU index {gpu}")))?;
                    Ok((r.get(0), gpu, r.get(2)))
                })
                .collect()
        })
    }

    fn reconfigurations(&self, finished: usize) -> Result<Vec<(u64, String)>, StoreError> {
        let limit = i64::try_from(finished).unwrap_or(i64::MAX);
        self.call(move |c| {
            let rows = c
                .query(
                    "SELECT id, record FROM reconfigurations WHERE NOT finished OR id IN
                     (SELECT id FROM reconfigurations WHERE finished ORDER BY id DESC LIMIT $1) ORDER BY id",
                    &[&limit],
                )
                .map_err(pg)?;
            rows.iter()
                .map(|r| {
                    let id: i64 = r.get(0);
                    let id = u64::try_from(id).map_err(|_| StoreError::Corrupt(format!("reconfiguration id {id}")))?;
                    Ok((id, r.get(1)))
                })
                .collect()
        })
    }

    fn add_usage(&mut self, rows: &[UsageRow]) -> Result<(), StoreError> {
        let rows = rows.to_vec();
        self.transaction(move |tx| add_usage(tx, &rows))
    }

    fn usage(&self, from_s: u64, to_s: u64) -> Result<Vec<UsageRow>, StoreError> {
        self.call(move |c| {
            let rows = c
                .query(
                    "SELECT hour_s, job_id, queue, \"user\", model, allocated_milli_s, used_milli_s FROM usage
                     WHERE hour_s >= $1 AND hour_s < $2 ORDER BY hour_s, job_id, model",
                    &[&int(from_s)?, &int(to_s.max(from_s))?],
                )
                .map_err(pg)?;
            rows.iter()
                .map(|r| {
                    Ok(UsageRow {
                        hour_s: uint(r.get(0))?,
                        job: uint(r.get(1))?,
                        queue: r.get(2),
                        user: r.get(3),
                        model: r.get(4),
                        allocated_milli_s: uint(r.get(5))?,
                        used_milli_s: uint(r.get(6))?,
                    })
                })
                .collect()
        })
    }

    fn put_series_point(&mut self, t_s: u64, point: &str, keep_from_s: u64) -> Result<(), StoreError> {
        let point = point.to_string();
        self.transaction(move |tx| put_series_point(tx, t_s, &point, keep_from_s))
    }

    fn series_points(&self, from_s: u64) -> Result<Vec<(u64, String)>, StoreError> {
        self.call(move |c| {
            let rows =
                c.query("SELECT t_s, point FROM series WHERE t_s >= $1 ORDER BY t_s", &[&int(from_s)?]).map_err(pg)?;
            rows.iter().map(|r| Ok((uint(r.get(0))?, r.get(1)))).collect()
        })
    }

    fn opens(&self) -> Result<Vec<crate::OpenRecord>, StoreError> {
        self.call(move |c| {
            let rows = c.query("SELECT seq, at_s, events_through FROM opens ORDER BY seq", &[]).map_err(pg)?;
            rows.iter()
                .map(|r| {
                    Ok(crate::OpenRecord {
                        seq: uint(r.get(0))?,
                        at_s: uint(r.get(1))?,
                        events_through: uint(r.get(2))?,
                    })
                })
                .collect()
        })
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn passwords_never_reach_messages() {
        assert_eq!(super::redact_url("postgres://gantry:s3cret@db:5432/g"), "postgres://gantry:***@db:5432/g");
        assert_eq!(super::redact_url("postgres://gantry@db/g"), "postgres://gantry@db/g");
        assert_eq!(super::redact_url("host=db user=g"), "host=db user=g");
        assert_eq!(super::redact_url("host=db password=s3cret user=g"), "host=db password=*** user=g");
    }

    #[test]
    fn a_lease_is_trusted_only_within_its_time_less_a_margin() {
        use std::time::{Duration, Instant};
        let watch = super::LeaseWatch::default();
        assert!(!watch.fresh(), "never held");
        watch.held_since(Instant::now());
        assert!(watch.fresh());
        let lapsed = Instant::now().checked_sub(super::LEASE - super::LEASE_MARGIN + Duration::from_millis(1));
        if let Some(lapsed) = lapsed {
            watch.held_since(lapsed);
            assert!(!watch.fresh(), "a renewal older than the lease less the margin is not trusted");
        }
    }
}
