//! Reconfiguration on the state machine with a virtual clock and the agent's real layout code
//! (`gantry_agent::layouts`) over simulated MIG hardware kept on disk: a waiting MIG job gets
//! its GPU carved; a drain past its deadline is abandoned; a refusing backend is not retried
//! in a loop; an agent killed mid-application and a controller killed between order and
//! result both end with the GPU as the hardware has it; restartable replicas are moved, and
//! the move is history, not a failure.

use super::{Phase, ReconfigureMode, ReconfigurePolicy};
use crate::auth::Principal;
use crate::control::*;
use crate::wire::{AgentGpu, Heartbeat, Orders, Register, TaskReport, TaskState};
use gantry_agent::layouts::{Layouts, MigHandle};
use gantry_agent::mig::FileBackend;
use gantry_store::{SqliteStore, Store};
use gantry_types::{Event, GpuMode, JobState};

const T0: u64 = 1_000_000;

fn fleet_text(gpus: u32, mode: &str) -> String {
    format!(
        "[[node]]\nname = \"n\"\ncpu = 64\nmemory = \"512GiB\"\n[node.gpus]\nmodel = \"A100-SXM4-80GB\"\ncount = {gpus}\n{mode}"
    )
}

/// A node's agent as the tests run it: the real layout code over simulated hardware in a
/// private directory; tasks are only reported (running until told to exit or stop).
struct Agent {
    node: String,
    gpus: Vec<AgentGpu>,
    layouts: Layouts,
    backend: MigHandle,
    running: BTreeMap<TaskKey, Vec<String>>,
    exited: BTreeSet<TaskKey>,
    /// The job events its heartbeats caused (exits, requeues).
    events: Vec<Event>,
}

/// A private directory, removed at the end of the test.
struct Scratch(std::path::PathBuf);

impl std::ops::Deref for Scratch {
    type Target = std::path::Path;
    fn deref(&self) -> &std::path::Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn scratch(name: &str) -> Scratch {
    let dir = std::env::temp_dir().join(format!("gantry-reconfig-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch dir");
    Scratch(dir)
}

impl Agent {
    /// Start (or restart: the hardware file stays) the agent of `node` as `c` has it.
    fn start(c: &Controller, node: &str, dir: &std::path::Path) -> Agent {
        let fleet = c.scheduler.engine().fleet_now();
        let n = fleet.nodes.iter().find(|n| n.name == node).expect("node");
        let modes: Vec<(u32, String, GpuMode)> =
            n.gpus.iter().map(|g| (g.index, g.model.clone(), g.mode.clone())).collect();
        let backend = MigHandle::new(FileBackend::open(&dir.join("fake-mig.json"), &modes).expect("hardware"));
        let mut gpus: Vec<AgentGpu> = n
            .gpus
            .iter()
            .map(|g| {
                let uuid = c.uuids[&(node.to_string(), g.index)].clone();
                AgentGpu { index: g.index, uuid, model: g.model.clone(), mig_mode: None, mig: Vec::new() }
            })
            .collect();
        let layouts = Layouts::new(Some(backend.clone()));
        layouts.refresh(&mut gpus);
        Agent {
            node: node.into(),
            gpus,
            layouts,
            backend,
            running: BTreeMap::new(),
            exited: BTreeSet::new(),
            events: Vec::new(),
        }
    }

    fn register(&self, c: &mut Controller, now: u64) -> Result<Effects, crate::error::ControlError> {
        let registration = Register {
            node: self.node.clone(),
            gpus: self.gpus.clone(),
            version: String::new(),
            protocol: crate::wire::PROTOCOL_VERSION,
            instance: format!("agent-{}", self.node),
            confinement: None,
        };
        c.apply(now, Command::Register { who: Principal::controller(), registration })
    }

    /// One heartbeat: report, then carry out the orders as the real agent does.
    fn beat(&mut self, c: &mut Controller, now: u64) -> Orders {
        let mut tasks: Vec<TaskReport> = self
            .running
            .keys()
            .map(|key| TaskReport { key: key.clone(), state: TaskState::Running, stopping: false, steps: Vec::new() })
            .collect();
        tasks.extend(self.exited.iter().map(|key| TaskReport {
            key: key.clone(),
            state: TaskState::Exited { code: Some(0), timed_out: false, oom: false },
            stopping: false,
            steps: Vec::new(),
        }));
        let beat = Heartbeat {
            tasks,
            samples: Vec::new(),
            wait_ms: 0,
            instance: format!("agent-{}", self.node),
            layouts: self.layouts.reports(),
            usage: Vec::new(),
        };
        let effects = c
            .apply(now, Command::Heartbeat { who: Principal::controller(), node: self.node.clone(), beat })
            .expect("beats");
        self.events.extend(effects.commit.events);
        let Reply::Orders(orders) = effects.reply else { panic!("orders") };
        for key in &orders.forget {
            self.exited.remove(key);
        }
        for stop in &orders.stop {
            let keys: Vec<TaskKey> =
                self.running.keys().filter(|k| k.job == stop.job && k.attempt == stop.attempt).cloned().collect();
            for key in keys {
                self.running.remove(&key);
                self.exited.insert(key);
            }
        }
        for launch in &orders.launch {
            self.running.entry(launch.key()).or_insert_with(|| launch.devices.clone());
        }
        self.layouts.forget(&orders.forget_layouts);
        for order in &orders.layouts {
            let position = self.gpus.iter().position(|g| g.index == order.gpu).expect("gpu");
            let short = self.gpus[position].uuid.trim_start_matches("GPU-").to_string();
            let busy = self.running.values().flatten().any(|d| d.contains(&short));
            self.layouts.apply(order, &mut self.gpus[position], busy);
        }
        orders
    }
}

fn policy() -> ReconfigurePolicy {
    ReconfigurePolicy { mode: ReconfigureMode::Auto, period_s: 60, window_s: 0, ..ReconfigurePolicy::default() }
}

fn open_with(fleet: &str, policy: ReconfigurePolicy, image: Image) -> Controller {
    let catalog = Catalog::embedded();
    let fleet = gantry_spec::parse_fleet(fleet, catalog).expect("fleet");
    let agents = Agents::Remote { heartbeat_timeout_s: 30, node_lost_after_s: 300 };
    let mut setup = Setup::new(fleet, &Default::default(), agents, crate::idle::IdlePolicy::default());
    setup.reconfigure = policy;
    Controller::open(setup, image, catalog, &Default::default(), T0).expect("opens").0
}

fn submit(c: &mut Controller, text: &str, now: u64) -> Vec<u64> {
    let jobs = gantry_spec::parse_submission(text, Catalog::embedded(), 10_000).expect("workload");
    match c.apply(now, Command::Submit { who: Principal::controller(), jobs, key: None }).expect("submits").reply {
        Reply::Submitted { ids } => ids,
        other => panic!("{other:?}"),
    }
}

fn tick(c: &mut Controller, now: u64) {
    c.apply(now, Command::tick()).expect("ticks");
}

/// Tick and heartbeat every `step` seconds from `from` to `to`.
fn run(c: &mut Controller, agent: &mut Agent, from: u64, to: u64, step: u64) {
    let mut t = from;
    while t <= to {
        tick(c, t);
        agent.beat(c, t);
        t += step;
    }
}

fn mode(c: &Controller, gpu: u32) -> GpuMode {
    c.mode_now("n", gpu).expect("gpu")
}

fn cordoned(c: &Controller) -> usize {
    c.scheduler.engine().state().gpus.iter().filter(|g| g.cordoned).count()
}

#[test]
fn a_waiting_mig_job_gets_an_idle_gpu_carved_and_starts_on_it() {
    let dir = scratch("carve");
    let mut c = open_with(&fleet_text(2, ""), policy(), Image::default());
    let mut agent = Agent::start(&c, "n", &dir);
    agent.register(&mut c, T0).expect("registers");
    let ids = submit(&mut c, "[[job]]\nname = \"infer\"\ngpu = { mig = \"1g.10gb\" }\ntime_limit = \"1h\"\n", T0);
    tick(&mut c, T0);
    // The change is under way and the job says what it waits for.
    let r = c.reconfigs.active.values().next().expect("a change under way").clone();
    assert_eq!(r.phase, Phase::Ordered, "an idle GPU is ordered at once: {r:?}");
    assert_eq!(r.serves, ids, "{}", r.reason);
    let view = crate::views::jobs::job(&c, &Principal::controller(), ids[0], T0).expect("view");
    let wait = view.layout.expect("a layout wait");
    assert!(
        wait.message.contains(&format!("waiting for GPU {} on node n to be reconfigured", r.gpu)),
        "{}",
        wait.message
    );
    assert_eq!(wait.reconfiguration, Some(r.id));
    assert!(wait.expected_s.is_some_and(|t| t > T0));
    // The agent applies it on the next heartbeat and reports on the one after.
    let orders = agent.beat(&mut c, T0 + 1);
    assert_eq!(orders.layouts.len(), 1);
    agent.beat(&mut c, T0 + 2);
    assert!(c.reconfigs.active.is_empty());
    assert_eq!(c.reconfigs.recent.back().expect("finished").phase, Phase::Applied);
    assert!(matches!(mode(&c, r.gpu), GpuMode::Mig { ref instances } if instances.len() == 7), "a full layout");
    assert_eq!(cordoned(&c), 0);
    let hardware = agent.backend.0.lock().expect("lock").instances(r.gpu).expect("reads");
    assert_eq!(hardware.len(), 7, "the hardware has what the controller records");
    tick(&mut c, T0 + 3);
    assert_eq!(c.jobs[&ids[0]].state, JobState::Running);
    assert!(c.reconfigs.recent.iter().all(|r| r.phase == Phase::Applied), "one change, no more");
}

#[test]
fn a_busy_gpu_drains_and_a_drain_past_its_deadline_is_abandoned() {
    let dir = scratch("deadline");
    let p = ReconfigurePolicy { drain_horizon_s: 600, drain_deadline_s: 900, max_cordoned: 1, ..policy() };
    let seven = "mig = { \"1g.10gb\" = 7 }\n";
    let mut c = open_with(&fleet_text(1, seven), p, Image::default());
    let mut agent = Agent::start(&c, "n", &dir);
    agent.register(&mut c, T0).expect("registers");
    // A job on one of its instances says it ends within 10 minutes, but runs on and on.
    let busy = submit(&mut c, "[[job]]\nname = \"small\"\ngpu = { mig = \"1g.10gb\" }\ntime_limit = \"9m\"\n", T0);
    tick(&mut c, T0);
    agent.beat(&mut c, T0);
    assert_eq!(c.jobs[&busy[0]].state, JobState::Running);
    // A 3g.40gb job waits: the GPU must be laid out again, once the small job is off it.
    let big = submit(&mut c, "[[job]]\nname = \"big\"\ngpu = { mig = \"3g.40gb\" }\ntime_limit = \"1h\"\n", T0 + 1);
    tick(&mut c, T0 + 61);
    assert_eq!(c.reconfigs.active.len(), 1, "{:?}", c.reconfigs.recent);
    assert_eq!(cordoned(&c), 1);
    let r = c.reconfigs.active.values().next().expect("drain").clone();
    assert_eq!(r.phase, Phase::Draining);
    assert_eq!(r.serves, big);
    assert!(r.busy_until_s.is_some_and(|t| t <= T0 + 600), "{r:?}");
    let view = crate::views::jobs::job(&c, &Principal::controller(), big[0], T0 + 61).expect("view");
    assert!(view.layout.expect("waits for the layout").message.contains("its work is ending"));
    // The work does not end: the drain is abandoned at its deadline and the GPU uncordoned.
    run(&mut c, &mut agent, T0 + 62, T0 + 61 + 960, 60);
    let abandoned = c.reconfigs.recent.iter().find(|x| x.id == r.id).expect("finished");
    assert_eq!(abandoned.phase, Phase::Abandoned);
    assert!(abandoned.outcome.as_deref().is_some_and(|w| w.contains("had not ended")), "{abandoned:?}");
    assert_eq!(c.jobs[&busy[0]].state, JobState::Running, "nothing changed under the running job");
    // And it is not drained again at once for the same change (hysteresis).
    run(&mut c, &mut agent, T0 + 1100, T0 + 1100 + 1200, 60);
    assert!(c.reconfigs.active.is_empty(), "{:?}", c.reconfigs.active);
    assert!(matches!(mode(&c, 0), GpuMode::Mig { ref instances } if instances.len() == 7));
}

#[test]
fn a_refusing_backend_rolls_back_uncordons_and_is_not_retried_in_a_loop() {
    let dir = scratch("refuse");
    let mut c = open_with(&fleet_text(2, ""), policy(), Image::default());
    let mut agent = Agent::start(&c, "n", &dir);
    // This driver refuses every create.
    let mut backend = FileBackend::open(&dir.join("fake-mig.json"), &[]).expect("hardware");
    backend.refuse_creates = true;
    agent.backend = MigHandle::new(backend);
    agent.layouts = Layouts::new(Some(agent.backend.clone()));
    agent.register(&mut c, T0).expect("registers");
    let ids = submit(&mut c, "[[job]]\nname = \"infer\"\ngpu = { mig = \"1g.10gb\" }\ntime_limit = \"1h\"\n", T0);
    run(&mut c, &mut agent, T0, T0 + 86_000, 60);
    let refused: Vec<_> = c.reconfigs.recent.iter().filter(|r| r.phase == Phase::Refused).collect();
    assert!(!refused.is_empty());
    assert!(refused.len() <= 2, "each GPU is tried once within the backoff, not in a loop: {}", refused.len());
    assert!(refused[0].outcome.as_deref().is_some_and(|w| w.contains("refused")), "{:?}", refused[0]);
    assert_eq!(cordoned(&c), 0, "uncordoned");
    for gpu in 0..2 {
        assert_eq!(mode(&c, gpu), GpuMode::Whole, "rolled back: the GPU is as it was");
        assert_eq!(agent.backend.0.lock().expect("lock").instances(gpu).expect("reads"), Vec::new());
    }
    assert_eq!(c.jobs[&ids[0]].state, JobState::Pending);
}

#[test]
fn an_agent_killed_mid_application_comes_back_with_what_the_hardware_has_and_finishes_it() {
    let dir = scratch("agent-killed");
    let mig = "mig = [\"7g.80gb@0\"]\n";
    let mut c = open_with(&fleet_text(1, mig), policy(), Image::default());
    let agent = Agent::start(&c, "n", &dir);
    agent.register(&mut c, T0).expect("registers");
    submit(&mut c, "[[job]]\nname = \"infer\"\ncount = 3\ngpu = { mig = \"2g.20gb\" }\ntime_limit = \"1h\"\n", T0);
    tick(&mut c, T0);
    let r = c.reconfigs.active.values().next().expect("under way").clone();
    assert_eq!(r.phase, Phase::Ordered);
    // The agent got the order and was killed halfway: the 7g is gone, one 2g created.
    {
        let mut hw = agent.backend.0.lock().expect("lock");
        hw.destroy(0, &gantry_types::MigInstanceSpec { profile: "7g.80gb".into(), start: 0 }).expect("destroys");
        hw.create(0, &gantry_types::MigInstanceSpec { profile: "2g.20gb".into(), start: 0 }).expect("creates");
    }
    drop(agent);
    let mut agent = Agent::start(&c, "n", &dir);
    // Its registration reports the half-applied layout: the idle, cordoned GPU takes it, and
    // the order is given again.
    agent.register(&mut c, T0 + 30).expect("registers again");
    assert_eq!(
        mode(&c, 0),
        GpuMode::Mig { instances: vec![gantry_types::MigInstanceSpec { profile: "2g.20gb".into(), start: 0 }] }
    );
    assert_eq!(cordoned(&c), 1, "still cordoned: the change is not done");
    agent.beat(&mut c, T0 + 31);
    agent.beat(&mut c, T0 + 32);
    assert_eq!(c.reconfigs.recent.back().expect("done").phase, Phase::Applied);
    assert!(same_mode(&mode(&c, 0), &r.to), "{:?}", mode(&c, 0));
    let hardware = agent.backend.0.lock().expect("lock").instances(0).expect("reads");
    assert!(same_mode(&GpuMode::Mig { instances: hardware }, &r.to));
    assert_eq!(cordoned(&c), 0);
}

fn same_mode(a: &GpuMode, b: &GpuMode) -> bool {
    let key = |m: &GpuMode| {
        AgentGpu { index: 0, uuid: String::new(), model: String::new(), mig_mode: None, mig: Vec::new() }.with_mode(m)
    };
    key(a) == key(b)
}

#[test]
fn a_controller_killed_between_order_and_result_resumes_from_the_store() {
    let dir = scratch("controller-killed");
    let fleet = fleet_text(2, "");
    let mut store = SqliteStore::open_in_memory().expect("store");
    let catalog = Catalog::embedded();
    let agents = Agents::Remote { heartbeat_timeout_s: 30, node_lost_after_s: 300 };
    let mut setup = Setup::new(
        gantry_spec::parse_fleet(&fleet, catalog).expect("fleet"),
        &Default::default(),
        agents,
        crate::idle::IdlePolicy::default(),
    );
    setup.reconfigure = policy();
    let (mut c, batch) =
        Controller::open(setup.clone(), Image::default(), catalog, &Default::default(), T0).expect("opens");
    store.commit(&[batch]).expect("commits");
    let mut agent = Agent::start(&c, "n", &dir);
    let commit = |effects: Effects, store: &mut SqliteStore| store.commit(&[effects.commit]).expect("commits");
    commit(agent.register(&mut c, T0).expect("registers"), &mut store);
    let jobs = gantry_spec::parse_submission(
        "[[job]]\nname = \"infer\"\ngpu = { mig = \"1g.10gb\" }\ntime_limit = \"1h\"\n",
        catalog,
        10,
    )
    .expect("job");
    commit(
        c.apply(T0, Command::Submit { who: Principal::controller(), jobs, key: None }).expect("submits"),
        &mut store,
    );
    commit(c.apply(T0, Command::tick()).expect("ticks"), &mut store);
    // The agent takes the order and applies it; the controller dies before hearing back.
    agent.beat(&mut c, T0 + 1);
    assert_eq!(agent.layouts.reports().len(), 1);
    drop(c);
    let image = Image::read(&store, 0).expect("reads");
    let (mut c, batch) = Controller::open(setup, image, catalog, &Default::default(), T0 + 60).expect("reopens");
    store.commit(&[batch]).expect("commits");
    assert_eq!(c.reconfigs.active.len(), 1, "the order is under way again");
    assert_eq!(cordoned(&c), 1, "and its GPU cordoned");
    // The agent registers again (the new controller does not know it) and reports.
    commit(agent.register(&mut c, T0 + 61).expect("registers"), &mut store);
    agent.beat(&mut c, T0 + 62);
    assert!(c.reconfigs.active.is_empty());
    assert_eq!(c.reconfigs.recent.back().expect("done").phase, Phase::Applied);
    assert_eq!(cordoned(&c), 0);
    tick(&mut c, T0 + 63);
    assert_eq!(c.jobs.values().filter(|r| r.state == JobState::Running).count(), 1);
}

#[test]
fn restartable_replicas_move_to_empty_a_gpu_for_whole_gpu_work_and_the_move_is_history() {
    let dir = scratch("moves");
    let seven =
        "[[node.gpu]]\nindex = 0\nmig = { \"1g.10gb\" = 7 }\n[[node.gpu]]\nindex = 1\nmig = { \"1g.10gb\" = 7 }\n";
    let mut c = open_with(&fleet_text(3, seven), policy(), Image::default());
    let mut agent = Agent::start(&c, "n", &dir);
    agent.register(&mut c, T0).expect("registers");
    // The whole GPU is held by a job that never says when it ends.
    let hog = submit(&mut c, "[[job]]\nname = \"hog\"\ngpu = { count = 1 }\n", T0);
    tick(&mut c, T0);
    assert_eq!(c.jobs[&hog[0]].state, JobState::Running);
    // Restartable replicas, without a time limit (no drain would ever end): 7 fill GPU 0,
    // the 8th goes to GPU 1; then 3 on GPU 0 end, so GPU 0 has room for GPU 1's one.
    let replicas =
        submit(&mut c, "[[job]]\nname = \"serve\"\ncount = 8\nrestartable = true\ngpu = { mig = \"1g.10gb\" }\n", T0);
    tick(&mut c, T0);
    agent.beat(&mut c, T0);
    assert!(replicas.iter().all(|id| c.jobs[id].state == JobState::Running));
    let on_gpu = |c: &Controller, id: u64| c.running[&id].grants[0].gpu;
    let lone: Vec<u64> = replicas.iter().copied().filter(|&id| on_gpu(&c, id) != on_gpu(&c, replicas[0])).collect();
    assert_eq!(lone.len(), 1, "packed: 7 and 1");
    let ending: Vec<u64> = replicas.iter().copied().filter(|id| !lone.contains(id)).take(3).collect();
    for &id in &ending {
        c.apply(T0 + 1, Command::Cancel { who: Principal::controller(), job: id, force: false }).expect("cancels");
    }
    agent.beat(&mut c, T0 + 1);
    agent.beat(&mut c, T0 + 2);
    assert!(ending.iter().all(|id| c.jobs[id].state == JobState::Cancelled));
    let train = submit(&mut c, "[[job]]\nname = \"train\"\ngpu = { count = 1 }\ntime_limit = \"1h\"\n", T0 + 1);
    run(&mut c, &mut agent, T0 + 60, T0 + 600, 30);
    assert_eq!(c.jobs[&train[0]].state, JobState::Running, "{:?}", c.reconfigs.recent);
    let moved: Vec<u64> = replicas.iter().copied().filter(|id| c.jobs[id].requeues > 0).collect();
    assert_eq!(moved, lone, "the lone replica moved, the others stayed");
    assert_eq!(c.jobs[&lone[0]].state, JobState::Running, "and runs again elsewhere");
    assert_eq!(c.reconfigs.totals.moves, 1);
    // Its history says it moved; it did not fail.
    let of_lone: Vec<&Event> = agent.events.iter().filter(|e| e.job_id() == lone[0]).collect();
    assert!(
        of_lone.iter().any(|e| matches!(e, Event::Requeued { why, .. } if why.starts_with("moved: GPU"))),
        "{of_lone:?}"
    );
    assert!(!of_lone.iter().any(|e| matches!(e, Event::Ended { .. })), "{of_lone:?}");
    let applied = c.reconfigs.recent.iter().find(|r| r.phase == Phase::Applied).expect("applied");
    assert_eq!(applied.to, GpuMode::Whole);
    assert_eq!(applied.moved, lone);
}

#[test]
fn lying_or_confused_agents_change_nothing_they_were_not_asked() {
    let dir = scratch("hostile");
    let mut c = open_with(&fleet_text(2, ""), policy(), Image::default());
    let mut agent = Agent::start(&c, "n", &dir);
    agent.register(&mut c, T0).expect("registers");
    let report = |id, gpu, mig: &[(&str, u8)]| crate::wire::LayoutReport {
        id,
        gpu,
        refused: None,
        mig_mode: !mig.is_empty(),
        mig: mig
            .iter()
            .map(|(p, s)| crate::wire::AgentMigInstance { profile: (*p).into(), start: *s, gpu_instance_id: None })
            .collect(),
    };
    let beat = |c: &mut Controller, layouts: Vec<crate::wire::LayoutReport>, now| {
        let beat = Heartbeat {
            tasks: Vec::new(),
            samples: Vec::new(),
            wait_ms: 0,
            instance: "agent-n".into(),
            layouts,
            usage: Vec::new(),
        };
        c.apply(now, Command::Heartbeat { who: Principal::controller(), node: "n".into(), beat })
    };
    // Reports for orders never given: nothing changes, and they are forgotten.
    let bogus = vec![report(99, 0, &[("7g.80gb", 0)]), report(1, 7, &[]), report(u64::MAX, 1, &[("1g.10gb", 0)])];
    let effects = beat(&mut c, bogus, T0 + 1).expect("answered");
    let Reply::Orders(orders) = effects.reply else { panic!("orders") };
    assert_eq!(orders.forget_layouts.len(), 3);
    assert!(effects.commit.gpu_modes.is_empty() && effects.commit.reconfigurations.is_empty());
    assert_eq!((mode(&c, 0), mode(&c, 1)), (GpuMode::Whole, GpuMode::Whole));
    // A real order, answered with a layout the catalog forbids: ignored, the order stands.
    submit(&mut c, "[[job]]\nname = \"m\"\ngpu = { mig = \"1g.10gb\" }\n", T0 + 2);
    tick(&mut c, T0 + 2);
    let r = c.reconfigs.active.values().next().expect("ordered").clone();
    let overlapping = report(r.id, r.gpu, &[("4g.40gb", 0), ("4g.40gb", 0)]);
    beat(&mut c, vec![overlapping], T0 + 3).expect("answered");
    assert_eq!(c.reconfigs.active.get(&("n".to_string(), r.gpu)).map(|x| x.phase), Some(Phase::Ordered));
    assert_eq!(mode(&c, r.gpu), GpuMode::Whole);
    // Another node's agent cannot answer for this node (its token serves its own node).
    let other = Principal {
        name: "agent-m".into(),
        role: gantry_store::Role::Agent,
        queues: Vec::new(),
        node: Some("m".into()),
    };
    let beat = Heartbeat {
        tasks: Vec::new(),
        samples: Vec::new(),
        wait_ms: 0,
        instance: "agent-n".into(),
        layouts: vec![report(r.id, r.gpu, &[])],
        usage: Vec::new(),
    };
    assert!(c.apply(T0 + 4, Command::Heartbeat { who: other, node: "n".into(), beat }).is_err());
    assert_eq!(c.reconfigs.active.len(), 1);
    // The real agent finishes it.
    agent.beat(&mut c, T0 + 5);
    agent.beat(&mut c, T0 + 6);
    assert_eq!(c.reconfigs.recent.back().expect("done").phase, Phase::Applied);
}

/// The forecast's arrivals are kept for a window only, whatever the mode: under `advise` (the
/// default) nothing else ever prunes them, and a controller that runs for months must not
/// keep every submission it ever saw.
#[test]
fn arrivals_are_forgotten_after_the_window_under_advice_too() {
    let advise = ReconfigurePolicy { mode: ReconfigureMode::Advise, ..ReconfigurePolicy::default() };
    let mut c = open_with(&fleet_text(2, ""), advise.clone(), Image::default());
    let dir = scratch("advise-window");
    let agent = Agent::start(&c, "n", &dir);
    agent.register(&mut c, T0).expect("registers");
    for k in 0..50 {
        submit(&mut c, "[[job]]\nname = \"j\"\ngpu = { count = 1 }\ntime_limit = \"1m\"\n", T0 + k);
        tick(&mut c, T0 + k);
    }
    assert!(!c.reconfigs.arrivals.is_empty(), "the forecast reads them");
    tick(&mut c, T0 + 50 + advise.window_s.max(advise.period_s) + 1);
    assert!(c.reconfigs.arrivals.is_empty(), "{} arrivals kept past the window", c.reconfigs.arrivals.len());
}
