//! Lost nodes, on the state machine with a virtual clock: a silent node's jobs wait again (or
//! end lost), a gang is stopped everywhere and requeued whole, an admin may declare a node
//! lost, `cancel --force` ends a job whose node is unreachable, and a lost node's agent coming
//! back has its old tasks stopped, never adopted.

use super::*;
use crate::auth::Principal;
use crate::wire::{AgentGpu, Heartbeat, Orders, Register, TaskReport, TaskState};
use gantry_types::JobState;

const FLEET: &str = "[[node]]\nname = \"a\"\ncount = 2\ncpu = 64\nmemory = \"512GiB\"\n[node.gpus]\nmodel = \"A100-SXM4-80GB\"\ncount = 4\n";
const LOST_AFTER: u64 = 300;
pub(super) const T0: u64 = 1_000;

pub(super) fn remote() -> Controller {
    let catalog = Catalog::embedded();
    let fleet = gantry_spec::parse_fleet(FLEET, catalog).expect("fleet");
    let agents = Agents::Remote { heartbeat_timeout_s: 30, node_lost_after_s: LOST_AFTER };
    let setup = Setup::new(fleet, &Default::default(), agents, crate::idle::IdlePolicy::default());
    let (mut c, _) = Controller::open(setup, Image::default(), catalog, &Default::default(), T0).expect("opens");
    for node in ["a-0", "a-1"] {
        register(&mut c, node, T0);
    }
    c
}

pub(super) fn register(c: &mut Controller, node: &str, now: u64) {
    let uuids: Vec<(u32, String)> =
        c.uuids.iter().filter(|((n, _), _)| n == node).map(|((_, i), u)| (*i, u.clone())).collect();
    let gpus = uuids
        .into_iter()
        .map(|(index, uuid)| AgentGpu { index, uuid, model: "A100-SXM4-80GB".into(), mig_mode: None, mig: Vec::new() })
        .collect();
    let registration = Register {
        node: node.into(),
        gpus,
        version: String::new(),
        protocol: 1,
        instance: format!("agent-{node}"),
        confinement: None,
    };
    c.apply(now, Command::Register { who: Principal::controller(), registration }).expect("registers");
}

pub(super) fn submit(c: &mut Controller, text: &str, now: u64) -> u64 {
    let jobs = gantry_spec::parse_submission(text, Catalog::embedded(), 10_000).expect("workload");
    match c.apply(now, Command::Submit { who: Principal::controller(), jobs, key: None }).expect("submits").reply {
        Reply::Submitted { ids } => ids[0],
        other => panic!("{other:?}"),
    }
}

/// A heartbeat from `node` reporting `tasks` as running; the orders it gets.
fn beat(c: &mut Controller, node: &str, tasks: &[TaskKey], now: u64) -> Orders {
    let reports = tasks
        .iter()
        .map(|key| TaskReport { key: key.clone(), state: TaskState::Running, stopping: false, steps: Vec::new() })
        .collect();
    let beat = Heartbeat {
        tasks: reports,
        samples: Vec::new(),
        wait_ms: 0,
        instance: format!("agent-{node}"),
        layouts: Vec::new(),
        usage: Vec::new(),
    };
    match c
        .apply(now, Command::Heartbeat { who: Principal::controller(), node: node.into(), beat })
        .expect("beats")
        .reply
    {
        Reply::Orders(orders) => orders,
        other => panic!("{other:?}"),
    }
}

pub(super) fn tick(c: &mut Controller, now: u64) {
    c.apply(now, Command::tick()).expect("ticks");
}

fn state(c: &Controller, id: u64) -> (JobState, u32) {
    let row = &c.jobs[&id];
    (row.state, row.requeues)
}

/// The nodes job `id`'s current run has tasks on.
pub(super) fn nodes_of(c: &Controller, id: u64) -> Vec<String> {
    let mut nodes: Vec<String> = c.running[&id].tasks.values().cloned().collect();
    nodes.dedup();
    nodes
}

#[test]
fn a_silent_nodes_job_waits_again_and_its_old_task_is_stopped_when_the_agent_returns() {
    let mut c = remote();
    let id = submit(&mut c, "[[job]]\nname = \"train\"\ngpu = { count = 4 }\n", T0 + 1);
    tick(&mut c, T0 + 2);
    let node = nodes_of(&c, id)[0].clone();
    let other = if node == "a-0" { "a-1" } else { "a-0" };
    let old = c.tasks_of(id);
    assert_eq!(beat(&mut c, &node, &[], T0 + 3).launch.len(), 1, "the launch reaches its agent");
    beat(&mut c, &node, &old, T0 + 4);
    // The other node keeps heartbeating; this one goes silent. Past the heartbeat timeout it
    // gets no new work but keeps its job; past node_lost_after the job waits again.
    for t in (T0 + 10..T0 + 4 + LOST_AFTER).step_by(20) {
        beat(&mut c, other, &[], t);
        tick(&mut c, t);
    }
    assert_eq!(state(&c, id), (JobState::Running, 0), "silent, not lost yet");
    let lost_at = T0 + 5 + LOST_AFTER;
    beat(&mut c, other, &[], lost_at);
    tick(&mut c, lost_at);
    // Requeued, and started again at once on the node that is alive.
    assert_eq!(state(&c, id), (JobState::Running, 1));
    assert_eq!(nodes_of(&c, id), [other.to_string()]);
    assert!(c.lost_nodes.contains(&node));
    // Metered and indexed on the node it runs on now, not the lost one.
    assert!(!c.on_node.contains_key(&node), "the lost node's run is forgotten");
    assert!(c.on_node[other].contains(&id));
    assert_eq!(c.meter.fleet().jobs, 1);
    // Its agent comes back and still runs the old task: it is stopped, not adopted.
    let orders = beat(&mut c, &node, &old, lost_at + 60);
    assert!(orders.stop.iter().any(|s| s.job == id && s.attempt == 0), "{orders:?}");
    assert!(!c.lost_nodes.contains(&node), "heard from again");
    assert_eq!(state(&c, id), (JobState::Running, 1), "the new run is untouched");
}

#[test]
fn a_job_that_says_no_requeue_ends_lost_and_frees_its_gpus() {
    let mut c = remote();
    let id = submit(&mut c, "[[job]]\nname = \"once\"\nrequeue = false\ngpu = { count = 4 }\n", T0 + 1);
    tick(&mut c, T0 + 2);
    let node = nodes_of(&c, id)[0].clone();
    let other = if node == "a-0" { "a-1" } else { "a-0" };
    let next = submit(&mut c, "[[job]]\nname = \"big\"\ngpu = { count = 4 }\ncount = 2\n", T0 + 3);
    tick(&mut c, T0 + 3);
    let lost_at = T0 + 10 + LOST_AFTER;
    beat(&mut c, other, &[], lost_at);
    tick(&mut c, lost_at);
    assert_eq!(state(&c, id), (JobState::Lost, 0));
    // Its GPUs were freed (the lost node takes no work; the other node has room for one).
    assert!(c.scheduler.allocation_of(id).is_none());
    let _ = next;
}

#[test]
fn a_gang_with_a_task_on_a_lost_node_is_stopped_everywhere_and_requeued_whole() {
    let mut c = remote();
    let gang = "[[job]]\nname = \"gang\"\n[[job.task]]\nname = \"w\"\nreplicas = 2\ngpu = { count = 4 }\n";
    let id = submit(&mut c, gang, T0 + 1);
    tick(&mut c, T0 + 2);
    assert_eq!(nodes_of(&c, id).len(), 2, "one task per node");
    let tasks = c.tasks_of(id);
    let on = |node: &str| -> Vec<TaskKey> {
        tasks.iter().filter(|k| c.running[&id].tasks[&(k.group.clone(), k.replica)] == node).cloned().collect()
    };
    let (on_0, on_1) = (on("a-0"), on("a-1"));
    beat(&mut c, "a-0", &on_0, T0 + 3);
    beat(&mut c, "a-1", &on_1, T0 + 3);
    // a-1 goes silent; an admin says it is lost.
    let who = Principal::controller();
    c.apply(T0 + 50, Command::NodeLost { who, node: "a-1".into() }).expect("declared");
    assert_eq!(state(&c, id), (JobState::Running, 0), "its task on a-0 is being stopped");
    let orders = beat(&mut c, "a-0", &on_0, T0 + 51);
    assert!(orders.stop.iter().any(|s| s.job == id && s.attempt == 0), "{orders:?}");
    // The a-0 task exits: the whole gang waits again (a-1 lost, so it cannot start).
    let exited = TaskReport {
        key: on_0[0].clone(),
        state: TaskState::Exited { code: None, timed_out: false, oom: false },
        stopping: true,
        steps: Vec::new(),
    };
    let beat_exit = Heartbeat {
        tasks: vec![exited],
        samples: Vec::new(),
        wait_ms: 0,
        instance: "agent-a-0".into(),
        layouts: Vec::new(),
        usage: Vec::new(),
    };
    c.apply(T0 + 52, Command::Heartbeat { who: Principal::controller(), node: "a-0".into(), beat: beat_exit })
        .expect("beats");
    tick(&mut c, T0 + 53);
    assert_eq!(state(&c, id), (JobState::Pending, 1), "waits again, whole, while a-1 is lost");
}

#[test]
fn only_an_admin_declares_a_node_lost_and_unknown_nodes_are_refused() {
    let mut c = remote();
    let member =
        Principal { name: "m".into(), role: gantry_store::Role::Member, queues: vec!["default".into()], node: None };
    let refused = c.apply(T0 + 1, Command::NodeLost { who: member, node: "a-0".into() }).expect_err("member");
    assert!(matches!(refused, ControlError::Forbidden(_)), "{refused}");
    let unknown = c.apply(T0 + 1, Command::NodeLost { who: Principal::controller(), node: "zz".into() });
    assert!(matches!(unknown, Err(ControlError::UnknownNode(_))));
    let first = c.apply(T0 + 2, Command::NodeLost { who: Principal::controller(), node: "a-0".into() }).expect("lost");
    let again = c.apply(T0 + 3, Command::NodeLost { who: Principal::controller(), node: "a-0".into() }).expect("again");
    assert_eq!((first.reply, again.reply), (Reply::Lost { changed: true }, Reply::Lost { changed: false }));
}

#[test]
fn cancel_force_ends_a_job_whose_node_is_unreachable() {
    let mut c = remote();
    let id = submit(&mut c, "[[job]]\nname = \"stuck\"\ngpu = { count = 4 }\n", T0 + 1);
    tick(&mut c, T0 + 2);
    let node = nodes_of(&c, id)[0].clone();
    let tasks = c.tasks_of(id);
    beat(&mut c, &node, &tasks, T0 + 3);
    // Reachable still (no tick has found it silent): a forced cancel waits for its agent too.
    let who = Principal::controller();
    let early = c.apply(T0 + 20, Command::Cancel { who: who.clone(), job: id, force: true }).expect("cancel");
    assert_eq!(early.reply, Reply::Cancelled { stopping: true });
    // Silent past the heartbeat timeout as a tick finds it, not yet lost: a plain cancel
    // waits for the agent.
    tick(&mut c, T0 + 99);
    c.apply(T0 + 100, Command::Cancel { who: who.clone(), job: id, force: false }).expect("cancel");
    assert_eq!(state(&c, id).0, JobState::Running, "stopping, waiting for an agent that is silent");
    let forced = c.apply(T0 + 101, Command::Cancel { who, job: id, force: true }).expect("force");
    assert_eq!(state(&c, id).0, JobState::Cancelled);
    assert_eq!(forced.reply, Reply::Cancelled { stopping: false }, "ended, not stopping");
}

#[test]
fn cancel_force_leaves_tasks_on_reachable_nodes_to_their_agent() {
    let mut c = remote();
    let id = submit(&mut c, "[[job]]\nname = \"live\"\ngpu = { count = 4 }\n", T0 + 1);
    tick(&mut c, T0 + 2);
    let node = nodes_of(&c, id)[0].clone();
    let tasks = c.tasks_of(id);
    beat(&mut c, &node, &tasks, T0 + 3);
    c.apply(T0 + 4, Command::Cancel { who: Principal::controller(), job: id, force: true }).expect("force");
    assert_eq!(state(&c, id).0, JobState::Running, "its agent is alive: it stops the task and reports");
}

/// Issue 37 §2: after a restart (or a failover), a node with running work whose agent never
/// speaks to the new controller is watched from the open, and lost past `node_lost_after`
/// like any other; one whose agent comes back in time is not.
#[test]
fn a_node_that_never_comes_back_after_a_restart_is_lost() {
    for comes_back in [false, true] {
        let mut c = remote();
        let id = submit(&mut c, "[[job]]\nname = \"train\"\ngpu = { count = 4 }\n", T0 + 1);
        tick(&mut c, T0 + 2);
        let node = nodes_of(&c, id)[0].clone();
        let other = if node == "a-0" { "a-1" } else { "a-0" };
        let old = c.tasks_of(id);
        beat(&mut c, &node, &[], T0 + 3);
        beat(&mut c, &node, &old, T0 + 4);
        // The controller restarts from what the store holds; only the other node's agent
        // registers with it.
        let opened = T0 + 100;
        let image = Image { jobs: c.jobs.values().cloned().collect(), ..Image::default() };
        let (mut c, _) =
            Controller::open(c.setup.clone(), image, Catalog::embedded(), &Default::default(), opened).expect("opens");
        register(&mut c, other, opened + 1);
        if comes_back {
            register(&mut c, &node, opened + 2);
        }
        for t in (opened + 10..opened + LOST_AFTER).step_by(20) {
            beat(&mut c, other, &[], t);
            if comes_back {
                beat(&mut c, &node, &old, t);
            }
            tick(&mut c, t);
        }
        assert_eq!(state(&c, id), (JobState::Running, 0), "not lost before node_lost_after");
        let after = opened + LOST_AFTER + 1;
        beat(&mut c, other, &[], after);
        if comes_back {
            beat(&mut c, &node, &old, after);
        }
        tick(&mut c, after);
        if comes_back {
            assert_eq!(state(&c, id), (JobState::Running, 0), "its agent came back: it runs on");
            assert!(!c.lost_nodes.contains(&node));
        } else {
            assert!(c.lost_nodes.contains(&node), "silent since the open, past node_lost_after");
            assert_eq!(state(&c, id), (JobState::Running, 1), "requeued and started on the live node");
            assert_eq!(nodes_of(&c, id), [other.to_string()]);
        }
    }
}

/// Issue 37 §3: a lost node comes back with its task alive (one that ignores SIGTERM), and the
/// requeued attempt can only go back there: the node is told to stop the old attempt, and the
/// new one is not launched until the node reports the old one gone.
#[test]
fn a_requeued_attempt_waits_until_the_old_one_is_gone_from_its_node() {
    let mut c = remote();
    let id = submit(&mut c, "[[job]]\nname = \"train\"\ngpu = { count = 4 }\n", T0 + 1);
    let filler = submit(&mut c, "[[job]]\nname = \"fill\"\ngpu = { count = 4 }\n", T0 + 1);
    tick(&mut c, T0 + 2);
    let node = nodes_of(&c, id)[0].clone();
    let other = nodes_of(&c, filler)[0].clone();
    assert_ne!(node, other, "each job has a node of its own");
    let (old, fill) = (c.tasks_of(id), c.tasks_of(filler));
    beat(&mut c, &node, &[], T0 + 3);
    beat(&mut c, &node, &old, T0 + 4);
    beat(&mut c, &other, &[], T0 + 3);
    // `node` goes silent and is lost; the job waits (the other node is full).
    let mut t = T0 + 10;
    while t <= T0 + 30 + LOST_AFTER {
        beat(&mut c, &other, &fill, t);
        tick(&mut c, t);
        t += 20;
    }
    assert!(c.lost_nodes.contains(&node));
    assert_eq!(state(&c, id), (JobState::Pending, 1), "requeued, waiting for room");
    // It comes back still running attempt 0, which ignores the stop for a while.
    let orders = beat(&mut c, &node, &old, t);
    assert!(orders.stop.iter().any(|s| s.job == id && s.attempt == 0), "{orders:?}");
    tick(&mut c, t + 1);
    assert_eq!(state(&c, id), (JobState::Running, 1), "placed again on the node that came back");
    let stopping: Vec<TaskReport> = old
        .iter()
        .map(|key| TaskReport { key: key.clone(), state: TaskState::Running, stopping: true, steps: Vec::new() })
        .collect();
    for s in 2..40 {
        let beat = Heartbeat { tasks: stopping.clone(), instance: format!("agent-{node}"), ..Default::default() };
        let effects = c
            .apply(t + s, Command::Heartbeat { who: Principal::controller(), node: node.clone(), beat })
            .expect("beats");
        let Reply::Orders(orders) = effects.reply else { panic!("orders") };
        assert!(orders.launch.is_empty(), "no launch while attempt 0 is alive there: {orders:?}");
    }
    // Gone: the new attempt is launched.
    let gone: Vec<TaskReport> = old
        .iter()
        .map(|key| TaskReport {
            key: key.clone(),
            state: TaskState::Exited { code: None, timed_out: false, oom: false },
            stopping: false,
            steps: Vec::new(),
        })
        .collect();
    let beat = Heartbeat { tasks: gone, instance: format!("agent-{node}"), ..Default::default() };
    let effects =
        c.apply(t + 41, Command::Heartbeat { who: Principal::controller(), node: node.clone(), beat }).expect("beats");
    let Reply::Orders(orders) = effects.reply else { panic!("orders") };
    assert!(orders.launch.iter().any(|l| l.job == id && l.attempt == 1), "{orders:?}");
}
