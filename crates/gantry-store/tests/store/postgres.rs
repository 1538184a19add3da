//! The PostgreSQL backend against a private server of its own (initdb in a temporary
//! directory, a loopback port, stopped after): the same conformance suite as SQLite, what
//! survives reconnecting, a newer schema refused, two stores on one database.

use gantry_store::test_postgres::TestPostgres;
use gantry_store::{PostgresStore, Store, conformance};
use gantry_types::{Event, JobState};

/// A fresh database on `server` per call.
fn databases<'a>(server: &'a TestPostgres, name: &'a str) -> impl FnMut() -> PostgresStore + 'a {
    let mut n = 0;
    move || {
        n += 1;
        let url = server.create_database(&format!("{name}_{n}")).expect("creates a database");
        PostgresStore::open(&url).expect("opens")
    }
}

#[test]
fn postgres_passes_the_conformance_suite_and_keeps_what_it_was_given() {
    let server = TestPostgres::start("conformance").expect("a private PostgreSQL");
    conformance::lifecycle(databases(&server, "lifecycle"));
    conformance::conflicts_roll_back_the_batch(databases(&server, "conflicts"));
    conformance::state_is_derived_from_the_log(databases(&server, "derived"));
    conformance::tokens(databases(&server, "tokens"));
    conformance::drained_nodes(databases(&server, "drained"));
    conformance::gpu_modes_replace_per_gpu(databases(&server, "gpu_modes"));
    conformance::reconfiguration_records(databases(&server, "reconfigurations"));
    conformance::usage_ledger(databases(&server, "usage"));
    conformance::series_points(databases(&server, "series"));
    conformance::batches_are_all_or_none(databases(&server, "batches"));
    conformance::log_retention_keeps_what_a_replay_needs(databases(&server, "retention"));

    // What was appended is there for the next connection, and for a second store at once.
    let url = server.create_database("reopen").expect("creates");
    {
        let mut store = PostgresStore::open(&url).expect("opens");
        let job = conformance::job("a");
        store.append(&[Event::Submitted { id: 1, at_s: 5, job: Box::new(job) }]).expect("submits");
    }
    let store = PostgresStore::open(&url).expect("reopens, the schema already there");
    let other = PostgresStore::open(&url).expect("a second store on the same database");
    assert_eq!(store.job(1).expect("reads").expect("kept").state, JobState::Pending);
    assert_eq!(other.next_job_id().expect("next"), 2);
    drop((store, other));

    // A schema from a newer gantry is refused, naming both versions.
    let mut admin = postgres::Client::connect(&url, postgres::NoTls).expect("connects");
    admin.batch_execute("UPDATE gantry_schema SET version = 99").expect("bumps");
    let err = PostgresStore::open(&url).expect_err("newer schema");
    let known = gantry_store::POSTGRES_SCHEMA_VERSION;
    assert!(
        err.to_string().contains(&format!("written by a newer gantry (schema 99, this one knows {known})")),
        "{err}"
    );

    // Bad URLs and unreachable servers are clear errors; passwords never appear in them.
    let err = PostgresStore::open("postgres://u:hunter2@127.0.0.1:1/x").expect_err("nothing listens on port 1");
    let text = err.to_string();
    assert!(text.contains("cannot connect to postgres://u:***@127.0.0.1:1/x") && !text.contains("hunter2"), "{text}");
    let err = PostgresStore::open("postgres://[::1").expect_err("not a URL");
    assert!(err.to_string().contains("not a PostgreSQL URL"), "{err}");

    // Schema 8 (before leader terms, reconfigurations, job outcomes and token expiry) migrates
    // to the newest and keeps its data.
    let url = server.create_database("schema8").expect("creates");
    {
        let mut store = PostgresStore::open(&url).expect("opens");
        store.append(&[Event::Submitted { id: 1, at_s: 5, job: Box::new(conformance::job("old")) }]).expect("submits");
    }
    let mut admin = postgres::Client::connect(&url, postgres::NoTls).expect("connects");
    admin
        .batch_execute(
            "DROP TABLE gantry_leader; DROP TABLE reconfigurations; ALTER TABLE jobs DROP COLUMN outcome;
             ALTER TABLE tokens DROP COLUMN expires_at_s; DROP TABLE opens; UPDATE gantry_schema SET version = 8",
        )
        .expect("back to 8");
    let mut store = PostgresStore::open(&url).expect("migrates");
    assert_eq!(store.lead("a", 100, Some(std::time::Duration::ZERO)).expect("leads"), 1);
    let old = store.job(1).expect("reads").expect("kept");
    assert_eq!((old.name.as_str(), old.outcome.clone()), ("old", Default::default()));
}

/// One leader per store: a second controller is refused (or waits) while the first holds
/// the lock; the lock goes when its connection does; a deposed leader's writes are fenced.
#[test]
fn one_leader_at_a_time_and_a_deposed_leader_writes_nothing() {
    use std::time::Duration;
    let server = TestPostgres::start("leader").expect("a private PostgreSQL");
    let url = server.create_database("lead").expect("creates");
    let mut first = PostgresStore::open(&url).expect("opens");
    assert_eq!(first.lead("first", 10, Some(Duration::ZERO)).expect("leads"), 1);
    let mut second = PostgresStore::open(&url).expect("opens");
    let err = second.lead("second", 11, Some(Duration::from_millis(300))).expect_err("led already");
    assert!(err.to_string().contains("another controller leads this store (\"first\", term 1)"), "{err}");
    first
        .append(&[Event::Submitted { id: 1, at_s: 12, job: Box::new(conformance::job("a")) }])
        .expect("the leader writes");
    // The first controller's connection ends (its process died): the standby takes over.
    drop(first);
    let started = std::time::Instant::now();
    assert_eq!(second.lead("second", 13, Some(Duration::from_secs(10))).expect("takes over"), 2);
    assert!(started.elapsed() < Duration::from_secs(2), "took {:?}", started.elapsed());
    assert_eq!(second.next_job_id().expect("reads"), 2, "what the first leader wrote is there");
    // A leader whose term has passed (another took over while it was cut off) writes nothing.
    let mut admin = postgres::Client::connect(&url, postgres::NoTls).expect("connects");
    admin.batch_execute("UPDATE gantry_leader SET term = 3, holder = 'third'").expect("a newer term");
    let err = second
        .append(&[Event::Submitted { id: 2, at_s: 14, job: Box::new(conformance::job("b")) }])
        .expect_err("fenced");
    assert!(matches!(err, gantry_store::StoreError::Fenced { ours: 2, current: 3 }), "{err}");
    let err = second.commit(&[gantry_store::Batch { drained: vec![("n1".into(), true)], ..Default::default() }]);
    assert!(matches!(err, Err(gantry_store::StoreError::Fenced { .. })), "{err:?}");
    assert_eq!(second.job(2).expect("reads"), None, "nothing of the fenced writes is there");
    assert!(second.drained().expect("reads").is_empty());
}

/// A leader whose lease ran out while it still holds the lock (its process paused: the
/// connection lives on, nothing renews) is cut off by the standby, which takes over; the
/// paused one's connection is gone when it wakes.
#[test]
fn a_leader_paused_past_its_lease_is_cut_off_and_replaced() {
    use std::time::Duration;
    let server = TestPostgres::start("lease").expect("a private PostgreSQL");
    let url = server.create_database("lease").expect("creates");
    drop(PostgresStore::open(&url).expect("migrates"));
    // A leader as a paused process leaves it: the lock held, the lease in the past.
    let mut paused = postgres::Client::connect(&url, postgres::NoTls).expect("connects");
    paused.execute("SELECT pg_advisory_lock($1)", &[&gantry_store::LEADER_LOCK]).expect("holds the leader lock");
    paused
        .batch_execute(
            "UPDATE gantry_leader SET term = 5, holder = 'paused', pid = pg_backend_pid(),
             expires = clock_timestamp() - interval '1 second'",
        )
        .expect("an expired lease");
    let mut standby = PostgresStore::open(&url).expect("opens");
    let started = std::time::Instant::now();
    assert_eq!(standby.lead("standby", 20, Some(Duration::from_secs(5))).expect("takes over"), 6);
    assert!(started.elapsed() < Duration::from_secs(3), "took {:?}", started.elapsed());
    assert!(paused.batch_execute("SELECT 1").is_err(), "the paused leader's connection was ended");
    // While it leads and renews, a second standby is refused: the lease is live.
    let mut late = PostgresStore::open(&url).expect("opens");
    let err = late.lead("late", 21, Some(Duration::from_millis(500))).expect_err("led");
    assert!(err.to_string().contains("\"standby\", term 6"), "{err}");
}
