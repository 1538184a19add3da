//! The one conformance suite every [`Store`] backend must pass (the SQLite backend runs it in
//! `tests/`; the PostgreSQL backend will run the same functions). Each check takes a fresh,
//! empty store from `make` and panics with a message naming what broke.

use crate::{Batch, Role, Store, StoreError, TokenRecord, UsageRow};
use gantry_types::{Ending, Event, Job, JobState, TaskStart};

/// The smallest job the store can hold (no tasks), for backend tests.
pub fn job(name: &str) -> Job {
    Job {
        name: name.into(),
        queue: "default".into(),
        priority: 0,
        groups: Vec::new(),
        lifecycle: Default::default(),
        after: Vec::new(),
        control: Default::default(),
        run: Default::default(),
    }
}

fn submitted(id: u64, name: &str) -> Event {
    Event::Submitted { id, at_s: id * 10, job: Box::new(job(name)) }
}

fn started(id: u64, at_s: u64) -> Event {
    let task = TaskStart {
        group: "main".into(),
        replica: 0,
        node: "n1".into(),
        devices: vec!["GPU-0".into()],
        placement: None,
        confinement: Some("cgroup v1 (memory)".into()),
    };
    Event::Started { id, at_s, tasks: vec![task] }
}

fn ended(id: u64, at_s: u64, ending: Ending) -> Event {
    let by = (ending == Ending::Cancelled).then(|| "alice".to_string());
    Event::Ended {
        id,
        at_s,
        ending,
        exit_code: (ending == Ending::Failed).then_some(3),
        used: Vec::new(),
        oom: None,
        by,
        steps: Vec::new(),
    }
}

fn used(node: &str, cpu_ms: u64, peak: u64) -> gantry_types::NodeUse {
    let used = gantry_types::Use {
        memory_peak_bytes: Some(peak),
        cpu_ms: Some(cpu_ms),
        memory_limit_bytes: Some(1 << 30),
        cpu_limit_milli: None,
    };
    gantry_types::NodeUse { node: node.into(), used }
}

/// A job's life: submitted → started → requeued → started → completed; rows follow the log.
pub fn lifecycle<S: Store>(mut make: impl FnMut() -> S) {
    let mut store = make();
    assert_eq!(store.next_job_id().expect("next id"), 1, "an empty store starts at 1");
    store.append(&[submitted(1, "a"), submitted(2, "b")]).expect("submits");
    assert_eq!(store.next_job_id().expect("next id"), 3);
    store.append(&[started(1, 20)]).expect("starts");
    let requeued = Event::Requeued { id: 1, at_s: 25, why: "preempted".into(), used: vec![used("n1", 100, 9)] };
    store.append(&[requeued]).expect("requeues");
    let oom = gantry_types::OomKill {
        group: "main".into(),
        replica: 0,
        node: "n1".into(),
        memory_limit_bytes: Some(1 << 30),
    };
    let step = gantry_types::StepRecord {
        step: 0,
        name: "python3".into(),
        tasks: 4,
        nodes: "n[1-2]".into(),
        start_s: 31,
        end_s: Some(39),
        exit_code: Some(137),
    };
    let end = Event::Ended {
        id: 1,
        at_s: 40,
        ending: Ending::OutOfMemory,
        exit_code: Some(137),
        used: vec![used("n1", 50, 5), used("n2", 7, 1)],
        oom: Some(oom.clone()),
        by: None,
        steps: vec![step.clone()],
    };
    store.append(&[started(1, 30), end]).expect("runs and ends");
    store.append(&[ended(2, 41, Ending::Cancelled)]).expect("cancelled while pending");
    let a = store.job(1).expect("reads").expect("exists");
    assert_eq!((a.state, a.started_at_s, a.ended_at_s, a.requeues), (JobState::Failed, Some(30), Some(40), 1));
    assert_eq!(a.tasks[0].devices, ["GPU-0"]);
    assert_eq!(a.tasks[0].confinement.as_deref(), Some("cgroup v1 (memory)"));
    assert_eq!(a.outcome.ending, Some(Ending::OutOfMemory), "the state says failed; the outcome says how");
    assert_eq!(a.outcome.oom, Some(oom));
    assert_eq!(a.outcome.steps, [step], "its steps are kept with it");
    let n1 = &a.outcome.used[0];
    assert_eq!(
        (n1.node.as_str(), n1.used.cpu_ms, n1.used.memory_peak_bytes),
        ("n1", Some(150), Some(9)),
        "both runs' CPU, the higher peak"
    );
    assert_eq!(a.outcome.used[1].node, "n2");
    assert_eq!((a.name.as_str(), a.queue.as_str()), ("a", "default"));
    let cancelled = store.job(2).expect("reads").expect("exists");
    assert_eq!((cancelled.state, cancelled.outcome.cancelled_by.as_deref()), (JobState::Cancelled, Some("alice")));
    assert_eq!(store.job(3).expect("reads"), None);
    assert_eq!(store.jobs(&[JobState::Failed]).expect("lists").len(), 1);
    assert_eq!(store.jobs(&[]).expect("lists").len(), 2);
    let log = store.events_after(0, 100).expect("log");
    assert_eq!(log.len(), 7);
    assert!(log.windows(2).all(|w| w[0].0 < w[1].0), "sequence numbers increase");
    assert_eq!(store.events_after(log[4].0, 100).expect("log").len(), 2);
}

/// An event that does not fit the job's state is refused, and its whole batch with it.
pub fn conflicts_roll_back_the_batch<S: Store>(mut make: impl FnMut() -> S) {
    let mut store = make();
    store.append(&[submitted(1, "a")]).expect("submits");
    let before = store.events_after(0, 100).expect("log").len();
    let cases: Vec<(&str, Vec<Event>, &str)> = vec![
        (
            "submitted twice",
            vec![submitted(2, "b"), submitted(1, "a")],
            "cannot apply submitted to a job that is pending",
        ),
        ("ended before it ran", vec![submitted(2, "b"), ended(1, 5, Ending::Completed)], "cannot apply ended"),
        ("started twice", vec![started(1, 5), started(1, 6)], "cannot apply started to a job that is running"),
        ("unknown job", vec![started(9, 5)], "job 9: cannot apply started to a job that is unknown"),
    ];
    for (name, events, expected) in cases {
        let err = store.append(&events).expect_err(name);
        assert!(matches!(err, StoreError::Conflict { .. }), "{name}: {err}");
        assert!(err.to_string().contains(expected), "{name}: {err}");
        assert_eq!(store.events_after(0, 100).expect("log").len(), before, "{name}: nothing written");
        assert_eq!(store.job(2).expect("reads"), None, "{name}: no half-applied job");
        assert_eq!(store.job(1).expect("reads").expect("exists").state, JobState::Pending, "{name}");
    }
    store.append(&[started(1, 5), ended(1, 6, Ending::Failed)]).expect("a valid batch still applies");
    let err = store.append(&[ended(1, 7, Ending::Completed)]).expect_err("final states are final");
    assert!(err.to_string().contains("to a job that is failed"), "{err}");
}

/// The state tables can be derived again from the log alone, identically.
pub fn state_is_derived_from_the_log<S: Store>(mut make: impl FnMut() -> S) {
    let mut store = make();
    for id in 1..=20 {
        store.append(&[submitted(id, &format!("j{id}"))]).expect("submits");
        if id % 2 == 0 {
            store.append(&[started(id, 100 + id)]).expect("starts");
        }
        if id % 6 == 0 {
            store.append(&[Event::Held { id, at_s: 150 + id, held: true }]).expect_err("only a waiting job is held");
        }
        if id % 5 == 0 && id % 2 == 1 {
            store.append(&[Event::Held { id, at_s: 150, held: true }]).expect("holds");
            store.append(&[Event::Held { id, at_s: 160, held: id == 15 }]).expect("releases");
        }
        if id % 4 == 0 {
            store
                .append(&[ended(id, 200 + id, if id % 8 == 0 { Ending::Failed } else { Ending::Completed })])
                .expect("ends");
        }
    }
    let before = store.jobs(&[]).expect("lists");
    assert!(
        before[14].job.control.hold && !before[4].job.control.hold,
        "a hold is kept in the job, a release undoes it"
    );
    store.rebuild().expect("rebuilds");
    assert_eq!(store.jobs(&[]).expect("lists"), before);
    // The derivation in memory (the controller's copy) gives the same rows.
    let mut rows: std::collections::BTreeMap<u64, crate::JobRow> = Default::default();
    for (_, event) in store.events_after(0, 1000).expect("log") {
        let row = crate::apply_event(rows.get(&event.job_id()), &event).expect("applies");
        rows.insert(row.id, row);
    }
    assert_eq!(rows.into_values().collect::<Vec<_>>(), before, "memory and backend agree");
}

/// A batch (the group commit's unit) is written all or none, commands, events and side tables
/// together; the command log keeps order and times.
pub fn batches_are_all_or_none<S: Store>(mut make: impl FnMut() -> S) {
    let mut store = make();
    let token = ops_token();
    let usage = usage_row();
    commit_a_full_batch(&mut store, &token, &usage);
    bad_batches_write_nothing(&mut store, &token, &usage);
    // Several commands' batches in one commit, in order: a token revoked and made again.
    let revoke =
        Batch { tokens_revoked: vec!["ops".into()], drained: vec![("n1".into(), false)], ..Default::default() };
    let again = Batch { tokens_added: vec![TokenRecord { hash: "h3".into(), ..token }], ..Default::default() };
    store.commit(&[revoke, again]).expect("commits");
    assert_eq!(store.tokens().expect("reads").iter().map(|t| t.hash.as_str()).collect::<Vec<_>>(), ["h3"]);
    assert_eq!(store.drained().expect("reads"), Vec::<String>::new());
}

/// The admin token `ops` (hash `h1`) the batch checks add and revoke.
fn ops_token() -> TokenRecord {
    TokenRecord {
        name: "ops".into(),
        role: Role::Admin,
        queues: Vec::new(),
        hash: "h1".into(),
        created_at_s: 1,
        node: None,
        expires_at_s: Some(86_401),
    }
}

/// One hour's usage of job 1, the row the batch checks write.
fn usage_row() -> UsageRow {
    UsageRow {
        hour_s: 3600,
        job: 1,
        queue: "q".into(),
        user: "u".into(),
        model: "L4".into(),
        allocated_milli_s: 10,
        used_milli_s: 5,
    }
}

/// A batch with something in every part is committed, and each part reads back.
fn commit_a_full_batch<S: Store>(store: &mut S, token: &TokenRecord, usage: &UsageRow) {
    let good = Batch {
        commands: vec![(10, "{\"a\":1}".into()), (11, "{\"b\":2}".into())],
        events: vec![submitted(1, "a"), started(1, 11)],
        tokens_added: vec![token.clone()],
        tokens_revoked: Vec::new(),
        drained: vec![("n1".into(), true)],
        gpu_modes: vec![("n1".into(), 0, "whole".into())],
        reconfigurations: vec![(1, "{}".into(), false)],
        usage: vec![usage.clone()],
        series: vec![(300, "{}".into(), 0)],
        ..Default::default()
    };
    assert!(!good.is_empty() && Batch::default().is_empty());
    store.commit(std::slice::from_ref(&good)).expect("commits");
    let log = store.commands_after(0, 10).expect("reads");
    assert_eq!(
        log.iter().map(|c| (c.at_s, c.body.as_str())).collect::<Vec<_>>(),
        [(10, "{\"a\":1}"), (11, "{\"b\":2}")]
    );
    assert!(log[0].seq < log[1].seq);
    assert_eq!(store.commands_after(log[0].seq, 10).expect("reads").len(), 1);
    assert_eq!(store.job(1).expect("reads").expect("exists").state, JobState::Running);
    assert_eq!(store.token_by_hash("h1").expect("reads"), Some(token.clone()));
    assert_eq!(store.drained().expect("reads"), ["n1"]);
}

/// A good batch committed together with a bad one is not written either.
fn bad_batches_write_nothing<S: Store>(store: &mut S, token: &TokenRecord, usage: &UsageRow) {
    let good_again = || Batch { series: vec![(600, "{}".into(), 0)], ..Default::default() };
    let bad_cases: Vec<(&str, Batch)> = vec![
        ("a conflicting event", Batch { events: vec![submitted(2, "b"), started(9, 1)], ..Default::default() }),
        (
            "a token name taken",
            Batch { tokens_added: vec![TokenRecord { hash: "h2".into(), ..token.clone() }], ..Default::default() },
        ),
        (
            "a ledger row off the hour",
            Batch { usage: vec![UsageRow { hour_s: 3601, ..usage.clone() }], ..Default::default() },
        ),
    ];
    for (name, mut bad) in bad_cases {
        bad.commands.push((99, "{}".into()));
        bad.drained.push(("n2".into(), true));
        bad.tokens_revoked.push("ops".into());
        bad.reconfigurations.push((2, "{}".into(), false));
        store.commit(&[good_again(), bad]).expect_err(name);
        assert_eq!(store.reconfigurations(10).expect("reads").len(), 1, "{name}: no reconfiguration record");
        assert_eq!(store.commands_after(0, 10).expect("reads").len(), 2, "{name}: no command logged");
        assert_eq!(store.job(2).expect("reads"), None, "{name}: no event");
        assert_eq!(store.drained().expect("reads"), ["n1"], "{name}: no side table");
        assert!(store.token_by_hash("h1").expect("reads").is_some(), "{name}: no revocation");
        assert_eq!(store.series_points(0).expect("reads").len(), 1, "{name}: the good batch beside it neither");
    }
}

/// Points to replay from: each `open` entry is one, with the last event before it; retention
/// deletes the command log before the newest point at or before its time, and nothing else.
pub fn log_retention_keeps_what_a_replay_needs<S: Store>(mut make: impl FnMut() -> S) {
    let mut store = make();
    let open = |at: u64, events: Vec<Event>| Batch {
        commands: vec![(at, format!("{{\"command\":\"open\",\"at\":{at}}}")), (at, "{\"after\":1}".into())],
        events,
        opened: true,
        ..Default::default()
    };
    let plain = |at: u64| Batch { commands: vec![(at, "{\"c\":1}".into())], ..Default::default() };
    store.commit(&[open(10, vec![submitted(1, "a")])]).expect("commits");
    store.commit(&[Batch { events: vec![started(1, 20)], ..plain(20) }]).expect("commits");
    store.commit(&[plain(30), open(100, vec![submitted(2, "b")])]).expect("commits");
    let opens = store.opens().expect("reads");
    assert_eq!(opens.len(), 2, "{opens:?}");
    assert_eq!((opens[0].at_s, opens[0].events_through), (10, 0), "nothing before the first");
    assert_eq!((opens[1].at_s, opens[1].events_through), (100, 2), "the events before it, not its own");
    let log = store.commands_after(0, 100).expect("reads");
    assert_eq!(log.len(), 6);
    assert_eq!(log.iter().find(|c| c.at_s == 100).map(|c| c.seq), Some(opens[1].seq), "the open entry's own seq");
    // Nothing at or before 5: nothing deleted.
    store.commit(&[Batch { compact_before_s: Some(5), ..plain(150) }]).expect("commits");
    assert_eq!(store.commands_after(0, 100).expect("reads").len(), 7);
    // Keep what replaying from 120 needs: from the open at 100 on.
    store.commit(&[Batch { compact_before_s: Some(120), ..plain(200) }]).expect("commits");
    let kept = store.commands_after(0, 100).expect("reads");
    assert_eq!(kept.first().map(|c| c.seq), Some(opens[1].seq), "{kept:?}");
    assert_eq!(kept.len(), 4);
    assert_eq!(store.opens().expect("reads"), vec![opens[1].clone()]);
    assert_eq!(store.events_after(0, 100).expect("reads").len(), 3, "events stay");
    assert_eq!(store.jobs(&[]).expect("reads").len(), 2, "jobs stay");
    // A retention with nothing older to cut: the same.
    store.commit(&[Batch { compact_before_s: Some(120), ..plain(300) }]).expect("commits");
    assert_eq!(store.commands_after(0, 100).expect("reads").first().map(|c| c.seq), Some(opens[1].seq));
    // A long log goes a chunk per commit, oldest first; the open records before the kept
    // one go with the last chunk.
    let many = crate::COMPACT_CHUNK as usize + 500;
    let bulk = Batch { commands: (0..many).map(|_| (400, "{\"c\":2}".to_string())).collect(), ..Default::default() };
    store.commit(&[bulk]).expect("commits");
    store.commit(&[open(500, Vec::new())]).expect("commits");
    let newest = store.opens().expect("reads").last().cloned().expect("an open");
    store.commit(&[Batch { compact_before_s: Some(600), ..plain(600) }]).expect("commits");
    let first = store.commands_after(0, 1).expect("reads")[0].seq;
    assert!(first > opens[1].seq && first < newest.seq, "a chunk went, not all: first kept {first}");
    assert_eq!(store.opens().expect("reads").len(), 2, "the older open is kept until its entries are gone");
    store.commit(&[plain(700)]).expect("commits");
    assert_eq!(store.commands_after(0, 1).expect("reads")[0].seq, newest.seq, "the next commit finished it");
    assert_eq!(store.opens().expect("reads"), vec![newest]);
}

/// Tokens: kept by hash, names unique, revocable.
pub fn tokens<S: Store>(mut make: impl FnMut() -> S) {
    let mut store = make();
    let token = |name: &str, hash: &str, role| TokenRecord {
        name: name.into(),
        role,
        queues: if role == Role::Member { vec!["research".into()] } else { Vec::new() },
        hash: hash.into(),
        created_at_s: 7,
        node: (role == Role::Agent).then(|| "n1".to_string()),
        expires_at_s: (role == Role::Member).then_some(7 + 30 * 86_400),
    };
    store.put_token(&token("root", "aa", Role::Admin)).expect("adds");
    store.put_token(&token("rack", "dd", Role::Agent)).expect("adds");
    assert_eq!(store.token_by_hash("dd").expect("reads").and_then(|t| t.node).as_deref(), Some("n1"), "its node kept");
    assert!(store.revoke_token("rack").expect("revokes"));
    store.put_token(&token("alice", "bb", Role::Member)).expect("adds");
    let err = store.put_token(&token("alice", "cc", Role::ReadOnly)).expect_err("same name");
    assert!(matches!(err, StoreError::TokenExists(_)), "{err}");
    assert_eq!(store.token_by_hash("bb").expect("reads"), Some(token("alice", "bb", Role::Member)));
    assert_eq!(store.token_by_hash("zz").expect("reads"), None);
    assert_eq!(store.tokens().expect("lists").iter().map(|t| t.name.as_str()).collect::<Vec<_>>(), ["alice", "root"]);
    assert!(store.revoke_token("alice").expect("revokes"));
    assert!(!store.revoke_token("alice").expect("revokes"), "gone already");
    assert_eq!(store.token_by_hash("bb").expect("reads"), None);
}

/// Drained nodes: kept, idempotent, undone by resume.
pub fn gpu_modes_replace_per_gpu<S: Store>(mut make: impl FnMut() -> S) {
    let mut store = make();
    assert_eq!(store.gpu_modes().expect("reads"), Vec::<(String, u32, String)>::new());
    store.set_gpu_mode("b", 1, "whole").expect("writes");
    store.set_gpu_mode("a", 3, "mig-1").expect("writes");
    store.set_gpu_mode("a", 3, "mig-2").expect("replaces");
    let modes = store.gpu_modes().expect("reads");
    assert_eq!(modes, [("a".to_string(), 3, "mig-2".to_string()), ("b".to_string(), 1, "whole".to_string())]);
}

/// Reconfiguration records: replaced per id; read back are the unfinished ones and the newest
/// finished, by id.
pub fn reconfiguration_records<S: Store>(mut make: impl FnMut() -> S) {
    let mut store = make();
    assert_eq!(store.reconfigurations(10).expect("reads"), Vec::<(u64, String)>::new());
    let batch = |records: &[(u64, &str, bool)]| Batch {
        reconfigurations: records.iter().map(|(id, r, f)| (*id, (*r).to_string(), *f)).collect(),
        ..Batch::default()
    };
    store
        .commit(&[batch(&[(1, "draining", false), (2, "draining", false), (3, "applied", true), (4, "refused", true)])])
        .expect("writes");
    store.commit(&[batch(&[(1, "applied", true)])]).expect("replaces");
    let text = |rows: Vec<(u64, String)>| rows.into_iter().map(|(id, r)| format!("{id}:{r}")).collect::<Vec<_>>();
    assert_eq!(text(store.reconfigurations(10).expect("reads")), ["1:applied", "2:draining", "3:applied", "4:refused"]);
    assert_eq!(
        text(store.reconfigurations(1).expect("reads")),
        ["2:draining", "4:refused"],
        "the newest finished only"
    );
    assert_eq!(text(store.reconfigurations(0).expect("reads")), ["2:draining"], "an unfinished one always");
}

pub fn drained_nodes<S: Store>(mut make: impl FnMut() -> S) {
    let mut store = make();
    assert_eq!(store.drained().expect("reads"), Vec::<String>::new());
    store.set_drained("b", true).expect("drains");
    store.set_drained("a", true).expect("drains");
    store.set_drained("a", true).expect("again is fine");
    assert_eq!(store.drained().expect("reads"), ["a", "b"]);
    store.set_drained("a", false).expect("resumes");
    store.set_drained("zz", false).expect("resuming an undrained node is fine");
    assert_eq!(store.drained().expect("reads"), ["b"]);
}

/// The accounting ledger: rows of the same hour, job and model add up; a batch with a bad row
/// adds nothing; reads take whole hours in `[from, to)`.
pub fn usage_ledger<S: Store>(mut make: impl FnMut() -> S) {
    use crate::UsageRow;
    let mut store = make();
    let row = |hour_s: u64, job: u64, model: &str, allocated: u64, used: u64| UsageRow {
        hour_s,
        job,
        queue: "research".into(),
        user: "ada".into(),
        model: model.into(),
        allocated_milli_s: allocated,
        used_milli_s: used,
    };
    assert_eq!(store.usage(0, u64::MAX >> 1).expect("reads"), Vec::new());
    store.add_usage(&[row(3600, 1, "H100-SXM5-80GB", 1000, 600), row(7200, 1, "H100-SXM5-80GB", 5, 1)]).expect("adds");
    store.add_usage(&[row(3600, 1, "H100-SXM5-80GB", 2000, 900), row(3600, 2, "L4", 500, 0)]).expect("adds up");
    let bad = store.add_usage(&[row(10_800, 3, "L4", 1, 1), row(10_801, 3, "L4", 1, 1)]);
    assert!(bad.is_err(), "an hour off the hour is refused");
    assert_eq!(
        store.usage(0, 100_000).expect("reads"),
        vec![
            row(3600, 1, "H100-SXM5-80GB", 3000, 1500),
            row(3600, 2, "L4", 500, 0),
            row(7200, 1, "H100-SXM5-80GB", 5, 1)
        ],
        "the refused batch left nothing"
    );
    assert_eq!(store.usage(7200, 7201).expect("reads").len(), 1);
    assert_eq!(store.usage(3601, 7200).expect("reads"), Vec::new());
    assert_eq!(store.usage(9000, 10).expect("reads"), Vec::new(), "an empty range");
}

/// The downsampled series: one point per time (a rewrite replaces it), old points pruned.
pub fn series_points<S: Store>(mut make: impl FnMut() -> S) {
    let mut store = make();
    assert_eq!(store.series_points(0).expect("reads"), Vec::new());
    store.put_series_point(300, "{\"a\":1}", 0).expect("writes");
    store.put_series_point(600, "{\"a\":2}", 0).expect("writes");
    store.put_series_point(600, "{\"a\":3}", 0).expect("replaces");
    assert_eq!(store.series_points(0).expect("reads"), vec![(300, "{\"a\":1}".into()), (600, "{\"a\":3}".into())]);
    store.put_series_point(900, "{}", 600).expect("writes and prunes");
    assert_eq!(store.series_points(0).expect("reads").iter().map(|(t, _)| *t).collect::<Vec<_>>(), [600, 900]);
    assert_eq!(store.series_points(601).expect("reads").len(), 1);
}
