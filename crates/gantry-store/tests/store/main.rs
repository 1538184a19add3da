//! The store's tests: the conformance suite against SQLite (a file and in memory), and what
//! only a file can show — appends survive reopening; a newer schema is refused.

use gantry_store::{SqliteStore, Store, conformance};
use gantry_types::{Event, JobState};
use std::path::PathBuf;

mod postgres;
mod postgres_tls;

fn temp_db(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("gantry-store-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir.join("gantry.db")
}

fn file_store(name: &str) -> impl FnMut() -> SqliteStore {
    let mut n = 0;
    let name = name.to_string();
    move || {
        n += 1;
        SqliteStore::open(&temp_db(&format!("{name}-{n}"))).expect("opens")
    }
}

fn memory() -> SqliteStore {
    SqliteStore::open_in_memory().expect("opens")
}

#[test]
fn sqlite_passes_the_conformance_suite() {
    conformance::lifecycle(memory);
    conformance::conflicts_roll_back_the_batch(memory);
    conformance::state_is_derived_from_the_log(memory);
    conformance::tokens(memory);
    conformance::drained_nodes(memory);
    conformance::gpu_modes_replace_per_gpu(memory);
    conformance::reconfiguration_records(memory);
    conformance::usage_ledger(memory);
    conformance::series_points(memory);
    conformance::batches_are_all_or_none(memory);
    conformance::log_retention_keeps_what_a_replay_needs(memory);
    conformance::lifecycle(file_store("lifecycle"));
    conformance::conflicts_roll_back_the_batch(file_store("conflicts"));
    conformance::state_is_derived_from_the_log(file_store("derived"));
    conformance::tokens(file_store("tokens"));
    conformance::drained_nodes(file_store("drained"));
    conformance::gpu_modes_replace_per_gpu(file_store("gpu-modes"));
    conformance::reconfiguration_records(file_store("reconfigurations"));
    conformance::usage_ledger(file_store("usage"));
    conformance::series_points(file_store("series"));
    conformance::batches_are_all_or_none(file_store("batches"));
    conformance::log_retention_keeps_what_a_replay_needs(file_store("retention"));
}

#[test]
fn appends_survive_reopening_and_a_newer_schema_is_refused() {
    let path = temp_db("reopen");
    {
        let mut store = SqliteStore::open(&path).expect("opens");
        let job = conformance::job("a");
        store.append(&[Event::Submitted { id: 1, at_s: 5, job: Box::new(job) }]).expect("submits");
    }
    let store = SqliteStore::open(&path).expect("reopens");
    assert_eq!(store.job(1).expect("reads").expect("kept").state, JobState::Pending);
    assert_eq!(store.next_job_id().expect("next"), 2);
    drop(store);
    // Mark the file as written by a future schema.
    rusqlite::Connection::open(&path).expect("opens").pragma_update(None, "user_version", 99).expect("bumps");
    let err = SqliteStore::open(&path).expect_err("newer schema");
    assert!(err.to_string().contains("written by a newer gantry (schema 99"), "{err}");
    let err = SqliteStore::open(std::path::Path::new("/nonexistent-dir/x/gantry.db")).expect_err("bad path");
    assert!(err.to_string().contains("cannot open /nonexistent-dir/x/gantry.db"), "{err}");
}

/// A store from schema 7 (tokens without a node or an expiry) opens, gains the columns, and
/// keeps its tokens, now unbound and without an end.
#[test]
fn a_schema_7_store_gains_node_bound_tokens() {
    let path = temp_db("schema7");
    {
        let conn = rusqlite::Connection::open(&path).expect("opens");
        conn.execute_batch(
            "CREATE TABLE tokens (name TEXT PRIMARY KEY, role TEXT NOT NULL, queues TEXT NOT NULL,
             hash TEXT NOT NULL UNIQUE, created_at_s INTEGER NOT NULL);
             INSERT INTO tokens VALUES ('rack', 'agent', '[]', 'h1', 3);
             PRAGMA user_version = 7;",
        )
        .expect("an old store");
    }
    let mut store = SqliteStore::open(&path).expect("migrates");
    let old = store.token_by_hash("h1").expect("reads").expect("kept");
    assert_eq!((old.name.as_str(), old.node, old.expires_at_s), ("rack", None, None));
    let bound = gantry_store::TokenRecord {
        name: "rack-n1".into(),
        role: gantry_store::Role::Agent,
        queues: Vec::new(),
        hash: "h2".into(),
        created_at_s: 4,
        node: Some("n1".into()),
        expires_at_s: Some(4 + 86_400),
    };
    store.put_token(&bound).expect("adds");
    drop(store);
    let store = SqliteStore::open(&path).expect("reopens");
    assert_eq!(store.token_by_hash("h2").expect("reads"), Some(bound));
}
