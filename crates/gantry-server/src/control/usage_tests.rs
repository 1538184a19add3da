//! Metering by change on the state machine: a remote node's new samples re-meter its jobs
//! from that moment, the ledger gets exactly the integral of allocation and use, a job's own
//! rows are written when it ends, and the idle watch follows the same changes.

use super::lost_tests::{T0, nodes_of, remote, submit, tick};
use super::*;
use crate::auth::Principal;
use crate::wire::{GpuSample, Heartbeat, TaskReport, TaskState};

/// A heartbeat from `node` reporting `tasks` running and every GPU at `pct`; the usage rows
/// the command commits.
fn beat_at(c: &mut Controller, node: &str, tasks: &[TaskKey], pct: u32, now: u64) -> Vec<gantry_store::UsageRow> {
    let samples = (0..4)
        .map(|index| GpuSample { index, utilization_pct: pct, memory_used_mib: 0, measured: true, jobs: Vec::new() })
        .collect();
    let tasks = tasks
        .iter()
        .map(|key| TaskReport { key: key.clone(), state: TaskState::Running, stopping: false, steps: Vec::new() })
        .collect();
    let beat = Heartbeat {
        tasks,
        samples,
        wait_ms: 0,
        instance: format!("agent-{node}"),
        layouts: Vec::new(),
        usage: Vec::new(),
    };
    c.apply(now, Command::Heartbeat { who: Principal::controller(), node: node.into(), beat })
        .expect("beats")
        .commit
        .usage
}

/// Whether a heartbeat like [`beat_at`]'s stayed out of the command log.
fn unlogged(c: &mut Controller, node: &str, tasks: &[TaskKey], pct: u32, now: u64) -> bool {
    let samples = (0..4)
        .map(|index| GpuSample { index, utilization_pct: pct, memory_used_mib: 0, measured: true, jobs: Vec::new() })
        .collect();
    let tasks = tasks
        .iter()
        .map(|key| TaskReport { key: key.clone(), state: TaskState::Running, stopping: false, steps: Vec::new() })
        .collect();
    let beat = Heartbeat { tasks, samples, instance: format!("agent-{node}"), ..Default::default() };
    let effects =
        c.apply(now, Command::Heartbeat { who: Principal::controller(), node: node.into(), beat }).expect("beats");
    effects.unlogged && effects.commit.commands.is_empty()
}

#[test]
fn samples_re_meter_their_nodes_jobs_and_the_ledger_is_the_exact_integral() {
    let mut c = remote();
    c.idle = crate::idle::IdleWatch::new(crate::idle::IdlePolicy { after_minutes: 0, ..Default::default() });
    let id = submit(&mut c, "[[job]]\nname = \"train\"\ngpu = { count = 4 }\n", T0 + 1);
    tick(&mut c, T0 + 2);
    let node = nodes_of(&c, id)[0].clone();
    let tasks = c.tasks_of(id);
    let mut rows = Vec::new();
    // No samples yet: metered at 0 %, so idle at once (after_minutes = 0).
    rows.extend(c.apply(T0 + 3, Command::tick()).expect("ticks").commit.usage);
    assert!(c.idle.is_flagged(id), "idle from its start");
    rows.extend(beat_at(&mut c, &node, &tasks, 100, T0 + 10));
    assert!(!c.idle.is_flagged(id), "busy again");
    assert_eq!(c.meter.fleet().gpus(), (4.0, 4.0));
    // Within a minute of the last samples taken in, new figures are shown, not metered: the
    // heartbeat changes nothing and is not logged.
    assert!(unlogged(&mut c, &node, &tasks, 50, T0 + 20), "news of utilization only, within a minute");
    assert_eq!(c.meter.fleet().gpus(), (4.0, 4.0), "still metered at 100 %");
    assert_eq!(c.shown_sample(&node, 0, None).map(|s| s.utilization_pct), Some(50), "shown as it is");
    rows.extend(beat_at(&mut c, &node, &tasks, 50, T0 + 70));
    rows.extend(beat_at(&mut c, &node, &tasks, 50, T0 + 75));
    for task in &tasks {
        let exited = Command::TaskExited { task: task.clone(), code: Some(0), timed_out: false, lost: false };
        rows.extend(c.apply(T0 + 80, exited).expect("exits").commit.usage);
    }
    assert_eq!(c.meter.fleet(), crate::meter::Held::default(), "nothing held once it ended");
    assert!(c.meter.queues().is_empty());
    let (allocated, used): (u64, u64) =
        rows.iter().filter(|r| r.job == id).fold((0, 0), |(a, u), r| (a + r.allocated_milli_s, u + r.used_milli_s));
    // 78 s × 4 GPUs held; used: 8 s at 0 %, 60 s at 100 %, 10 s at 50 %.
    assert_eq!(allocated, 4000 * 78);
    assert_eq!(used, 4000 * 60 + 2000 * 10);
    // Nothing is left to write for it.
    assert!(c.meter.take(T0 + 81, true).iter().all(|r| r.job != id));
    assert!(c.on_node.is_empty(), "the node index forgets ended jobs");
}
