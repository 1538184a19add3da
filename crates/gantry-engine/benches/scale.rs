//! Cost curves of the scheduling cycle (issue 24 §1): one thing varied at a time — nodes,
//! waiting jobs, running jobs — with fair share over a three-level queue tree (4 orgs × 4
//! teams × 4 projects, guarantees at every level), backfill with reservations (depth 8) and
//! preemption planning on. Each point runs in its own process so its resident memory is its
//! own: the fleet is filled with running jobs (to a target, or until it is full; placed on a
//! scratch engine and adopted, so setup costs no cycles), the waiting jobs are submitted, then cycles run one simulated minute apart while about one running job
//! in a thousand ends before each (and preempted jobs die when their grace ends).
//!
//! Reported per point: the first cycle after the submissions, then p50 / p99 / max of the
//! steady cycles, decisions (starts and stops) per second of cycle time, and the process's
//! resident memory (engine, scheduler and the job specs it holds); on stderr, a digest of every
//! decision and where each start was placed, so two builds can be shown to decide the same.
//!
//! Run: `cargo bench -p gantry-engine --bench scale` (every curve; about 25 minutes on a
//! 2-vCPU VM, most of it filling 100,000-node fleets), `-- --help` for the flags, `-- --curve nodes|waiting|running` for one, `-- --quick` for a tenth of every
//! size, `-- --svg DIR` to draw the curves (`cost-nodes.svg`, …), `-- --cycles N` to measure
//! N cycles per point (40), `-- --base-nodes N` to vary waiting and running jobs on N nodes
//! instead of 100,000, `-- --point N,W,R` for one point (R = 0: fill the fleet),
//! `-- --no-preempt` to measure the same cycles without preemption planning (its charts are
//! `cost-<curve>-no-preempt.svg`).

use gantry_catalog::Catalog;
use gantry_engine::sched::{Backfill, Decision, JobId, Order, SchedJob, Scheduler, SchedulerConfig};
use gantry_engine::{AllocId, Engine, EngineConfig, Policy, SearchLimits};
use gantry_types::{GpuRequest, Isolation, Job, Topology, TopologyLevel};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

#[path = "common/measure.rs"]
mod measure;
#[path = "common/mixed_fleet.rs"]
mod mixed_fleet;
use measure::percentile;
#[path = "common/svg.rs"]
mod svg;

/// Leaf queues (projects) of the tree.
const PROJECTS: usize = 64;
/// Steady cycles measured per point (`--cycles N` for another count).
const CYCLES: usize = 40;
/// Seconds between cycles.
const STEP_S: u64 = 60;

/// One point of a curve.
#[derive(Clone, Copy, Debug)]
struct Point {
    nodes: usize,
    waiting: usize,
    /// Running jobs to reach; 0: as many as the fleet holds.
    running: usize,
}

/// What a point measured.
#[derive(Clone, Debug)]
struct Measured {
    point: Point,
    running: usize,
    waiting: usize,
    setup_s: f64,
    first_ms: f64,
    p50_ms: f64,
    p99_ms: f64,
    max_ms: f64,
    decisions_per_s: f64,
    rss_mib: f64,
}

impl Measured {
    const FIELDS: usize = 10;

    fn line(&self) -> String {
        format!(
            "RESULT {} {} {} {:.2} {:.3} {:.3} {:.3} {:.3} {:.0} {:.1}",
            self.point.nodes,
            self.running,
            self.waiting,
            self.setup_s,
            self.first_ms,
            self.p50_ms,
            self.p99_ms,
            self.max_ms,
            self.decisions_per_s,
            self.rss_mib
        )
    }

    fn parse(point: Point, line: &str) -> Option<Measured> {
        let v: Vec<f64> = line.strip_prefix("RESULT ")?.split(' ').map(|f| f.parse().ok()).collect::<Option<_>>()?;
        (v.len() == Self::FIELDS).then(|| Measured {
            point,
            running: v[1] as usize,
            waiting: v[2] as usize,
            setup_s: v[3],
            first_ms: v[4],
            p50_ms: v[5],
            p99_ms: v[6],
            max_ms: v[7],
            decisions_per_s: v[8],
            rss_mib: v[9],
        })
    }
}

/// The queue tree: orgs, teams, projects; each level guaranteed half its share of the H100s.
fn queues(nodes: usize) -> gantry_types::QueueTree {
    let h100 = (nodes * mixed_fleet::GPUS_PER_NODE / 2) as f64;
    let mut text = String::from("[fair_share]\nhalf_life = \"1d\"\nstarvation = \"3d\"\n");
    let quota = |share: f64| {
        format!("quota = [{{ flavor = \"H100-SXM5-80GB\", guaranteed = {:.1} }}]\n", (h100 * share * 0.5).floor())
    };
    for o in 0..4 {
        text += &format!("[[queue]]\nname = \"org{o}\"\nweight = {}\n{}", 1 + o, quota(0.25));
        for t in 0..4 {
            text += &format!("[[queue]]\nname = \"org{o}-team{t}\"\nparent = \"org{o}\"\n{}", quota(0.25 * 0.25));
            for p in 0..4 {
                text += &format!(
                    "[[queue]]\nname = \"org{o}-team{t}-p{p}\"\nparent = \"org{o}-team{t}\"\nweight = {}\n{}",
                    1 + p,
                    quota(0.25 * 0.25 * 0.25)
                );
            }
        }
    }
    gantry_spec::parse_queues(&text, Catalog::embedded()).expect("the bench's queue tree is valid")
}

/// The `k`-th job of the bench: the placement bench's single-task mix, a 64-GPU gang now and
/// then; spread over the projects and a thousand users, with time limits (reservations plan
/// from them), a few at high priority, a third preemptible.
fn job(k: usize, mix: &[Job], small: bool) -> Job {
    let mut job = if k.is_multiple_of(97) && !small {
        let rack = Topology { within: TopologyLevel::Rack, required: false };
        mixed_fleet::job("gang-64", 8, GpuRequest::Whole { count: 8 }, Isolation::Hard, rack)
    } else if small {
        // Filling to many running jobs: whole single GPUs and shares, which fit many per node.
        mix[[0, 7, 8, 5][k % 4]].clone()
    } else {
        mix[k % mix.len()].clone()
    };
    let (o, t, p) = (k % 4, (k / 4) % 4, (k / 16) % 4);
    job.queue = format!("org{o}-team{t}-p{p}");
    job.control.user = Some(format!("u{}", k % 1000));
    job.control.time_limit_s = Some(600 + (k as u64 * 37) % 7200);
    job.priority = if k.is_multiple_of(50) { 10 } else { 0 };
    job.lifecycle.preemptible = k.is_multiple_of(3);
    job
}

fn rss_mib() -> f64 {
    measure::rss_bytes().unwrap_or(0) as f64 / (1 << 20) as f64
}

/// An engine on the bench's fleet of `nodes` nodes.
fn engine(nodes: usize) -> Engine {
    let config = EngineConfig { policy: Policy::Default, seed: 1, limits: SearchLimits::default(), shapes: None };
    Engine::new(&mixed_fleet::fleet(nodes), Catalog::embedded(), config).expect("the bench fleet is valid")
}

/// The state a point's cycles run on.
struct Bench {
    scheduler: Scheduler,
    mix: Vec<Job>,
    next_id: JobId,
    now: u64,
    /// Running allocations, oldest first.
    running: BTreeMap<AllocId, JobId>,
    /// Stopped for a preemptor: killed at this time.
    dying: BTreeMap<AllocId, u64>,
    decisions: u64,
    /// A hash of every decision and where each start was placed: equal digests across two
    /// builds say a speed-up left the decisions as they were.
    digest: u64,
    started: Instant,
}

impl Bench {
    fn new(nodes: usize, preempt: bool) -> Bench {
        let config = SchedulerConfig {
            order: Order::FairShare(queues(nodes)),
            backfill: Backfill::Reserve,
            reserve_depth: 8,
            preempt,
            keep_unsatisfiable: false,
        };
        Bench {
            scheduler: Scheduler::new(engine(nodes), config),
            mix: mixed_fleet::single_task_mix(),
            next_id: 1,
            now: 1_000_000,
            running: BTreeMap::new(),
            dying: BTreeMap::new(),
            decisions: 0,
            digest: 0,
            started: Instant::now(),
        }
    }

    /// Submit `count` waiting jobs of the bench's mix.
    fn submit(&mut self, count: usize) {
        for _ in 0..count {
            let id = self.next_id;
            self.next_id += 1;
            let spec = job(id as usize, &self.mix, false);
            let compiled = self.scheduler.engine().compile(&spec).expect("the bench's jobs compile");
            self.scheduler.submit(id, SchedJob::of(&spec, compiled, Vec::new()), self.now).expect("submits");
        }
    }

    /// One cycle: its decisions applied; how long it took.
    fn cycle(&mut self) -> Duration {
        let started = Instant::now();
        let decisions = self.scheduler.cycle(self.now);
        let took = started.elapsed();
        self.decisions += decisions.len() as u64;
        for d in decisions {
            self.digest = digest_of(self.digest, &d, &self.scheduler);
            match d {
                Decision::Start { job, alloc, .. } => {
                    self.running.insert(alloc, job);
                }
                Decision::Stop { alloc, kill_at, .. } => {
                    self.dying.insert(alloc, kill_at);
                }
            }
        }
        took
    }

    /// Time passes: preempted jobs whose grace ended die, about one running job in a
    /// thousand ends.
    fn advance(&mut self) {
        self.now += STEP_S;
        let due: Vec<AllocId> = self.dying.iter().filter(|(_, t)| **t <= self.now).map(|(a, _)| *a).collect();
        for alloc in due {
            self.dying.remove(&alloc);
            self.running.remove(&alloc);
            self.scheduler.killed(alloc, self.now);
        }
        let ends = (self.running.len() / 1000).max(5);
        let stride = (self.running.len() / ends).max(1);
        let chosen: Vec<AllocId> =
            self.running.keys().step_by(stride).filter(|a| !self.dying.contains_key(a)).take(ends).copied().collect();
        for alloc in chosen {
            self.running.remove(&alloc);
            self.scheduler.ended(alloc, true, self.now);
        }
    }

    /// Fill the fleet with running jobs: placed on a scratch engine of the same fleet and
    /// adopted by the scheduler on those placements (as a restarted controller re-adopts), so
    /// setup does not cost the cycles being measured. Until `target` jobs run (0: until
    /// placements keep failing, the fleet full).
    fn fill(&mut self, target: usize, nodes: usize) {
        let small = target > 0;
        let mut scratch = engine(nodes);
        let mut refused_in_a_row = 0;
        while (target == 0 || self.running.len() < target) && refused_in_a_row < 1000 {
            let id = self.next_id;
            self.next_id += 1;
            let spec = job(id as usize, &self.mix, small);
            let compiled = scratch.compile(&spec).expect("the bench's jobs compile");
            let Ok(at) = scratch.place(&compiled) else {
                refused_in_a_row += 1;
                continue;
            };
            refused_in_a_row = 0;
            let placement = scratch.placement(at, &compiled).expect("just placed");
            let sched = SchedJob::of(&spec, compiled, Vec::new());
            let alloc = self.scheduler.adopt(id, sched, &placement, self.now, self.now).expect("adopts its placement");
            self.running.insert(alloc, id);
            if self.running.len().is_multiple_of(100_000) {
                eprintln!(
                    "  fill: {} running, {:.0} MiB after {:.1} s",
                    self.running.len(),
                    rss_mib(),
                    self.started.elapsed().as_secs_f64()
                );
            }
        }
    }
}

/// `digest` extended by one decision and, for a start, the grants it was placed on.
fn digest_of(digest: u64, decision: &Decision, scheduler: &Scheduler) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    digest.hash(&mut h);
    format!("{decision:?}").hash(&mut h);
    if let Decision::Start { alloc, .. } = decision {
        format!("{:?}", scheduler.engine().allocations()[alloc].tasks).hash(&mut h);
    }
    h.finish()
}

/// Measure one point (in this process).
fn measure(point: Point, cycles: usize, preempt: bool) -> Measured {
    let setup = Instant::now();
    let mut bench = Bench::new(point.nodes, preempt);
    bench.fill(point.running, point.nodes);
    bench.submit(point.waiting);
    let setup_s = setup.elapsed().as_secs_f64();
    bench.advance();
    let first = bench.cycle();
    bench.decisions = 0;
    let mut times = Vec::with_capacity(cycles);
    for _ in 0..cycles.max(1) {
        bench.advance();
        times.push(bench.cycle());
    }
    eprintln!("  decisions digest: {:016x}", bench.digest);
    let total: Duration = times.iter().sum();
    times.sort_unstable();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    Measured {
        point,
        running: bench.running.len(),
        waiting: bench.scheduler.queued(),
        setup_s,
        first_ms: ms(first),
        p50_ms: ms(percentile(&times, 0.5)),
        p99_ms: ms(percentile(&times, 0.99)),
        max_ms: ms(times[times.len() - 1]),
        decisions_per_s: bench.decisions as f64 / total.as_secs_f64(),
        rss_mib: rss_mib(),
    }
}

/// Measure `point` in a child process of this benchmark.
fn measure_apart(point: Point, cycles: usize, preempt: bool) -> Measured {
    let exe = std::env::current_exe().expect("the benchmark's own path");
    let arg = format!("{},{},{}", point.nodes, point.waiting, point.running);
    let out = std::process::Command::new(exe)
        .args(["--point", &arg, "--cycles", &cycles.to_string()])
        .args(if preempt { None } else { Some("--no-preempt") })
        .stderr(std::process::Stdio::inherit())
        .output()
        .expect("runs a point");
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines().find_map(|l| Measured::parse(point, l)).unwrap_or_else(|| panic!("point {arg} failed: {text}"))
}

/// The curves: nodes varied at 100,000 waiting jobs; waiting and running jobs varied on
/// `base` nodes (100,000 unless `--base-nodes` says otherwise).
fn curves(quick: bool, base: usize) -> Vec<(&'static str, Vec<Point>)> {
    let s = |n: usize| if quick { n / 10 } else { n };
    let p = |nodes, waiting, running| Point { nodes: s(nodes), waiting: s(waiting), running: s(running) };
    vec![
        ("nodes", vec![p(1_000, 100_000, 0), p(10_000, 100_000, 0), p(100_000, 100_000, 0)]),
        ("waiting", vec![p(base, 1_000, 0), p(base, 100_000, 0), p(base, 1_000_000, 0)]),
        ("running", vec![p(base, 100_000, 5_000), p(base, 100_000, 50_000), p(base, 100_000, 500_000)]),
    ]
}

fn header() {
    println!(
        "{:>8} {:>8} {:>8} {:>8} {:>10} {:>9} {:>9} {:>9} {:>12} {:>9}",
        "nodes", "running", "waiting", "setup s", "first ms", "p50 ms", "p99 ms", "max ms", "decisions/s", "RSS MiB"
    );
}

fn row(m: &Measured) {
    println!(
        "{:>8} {:>8} {:>8} {:>8.1} {:>10.2} {:>9.2} {:>9.2} {:>9.2} {:>12.0} {:>9.0}",
        m.point.nodes,
        m.running,
        m.waiting,
        m.setup_s,
        m.first_ms,
        m.p50_ms,
        m.p99_ms,
        m.max_ms,
        m.decisions_per_s,
        m.rss_mib
    );
}

fn draw(dir: &str, curve: &str, preempt: bool, measured: &[Measured]) {
    let x = |m: &Measured| match curve {
        "nodes" => m.point.nodes as f64,
        "waiting" => m.waiting as f64,
        _ => m.running as f64,
    };
    let x_label = match curve {
        "nodes" => "nodes (× 8 GPUs)",
        "waiting" => "waiting jobs",
        _ => "running jobs",
    };
    let time = svg::Chart {
        title: if preempt { "one scheduling cycle" } else { "one scheduling cycle, preemption planning off" },
        x_label,
        y_label: "ms",
        series: vec![
            svg::Series { name: "p50", color: "#1f77b4", points: measured.iter().map(|m| (x(m), m.p50_ms)).collect() },
            svg::Series { name: "p99", color: "#d62728", points: measured.iter().map(|m| (x(m), m.p99_ms)).collect() },
            svg::Series { name: "first", color: "#999", points: measured.iter().map(|m| (x(m), m.first_ms)).collect() },
        ],
    };
    let memory = svg::Chart {
        title: "resident memory",
        x_label,
        y_label: "MiB",
        series: vec![svg::Series {
            name: "RSS",
            color: "#2ca02c",
            points: measured.iter().map(|m| (x(m), m.rss_mib)).collect(),
        }],
    };
    // cargo runs a bench in its crate's directory: a relative DIR is from crates/gantry-engine.
    std::fs::create_dir_all(dir).unwrap_or_else(|e| panic!("--svg {dir}: {e} (relative to crates/gantry-engine)"));
    let path = format!("{dir}/cost-{curve}{}.svg", if preempt { "" } else { "-no-preempt" });
    std::fs::write(&path, svg::render(&[time, memory])).expect("writes the chart");
    println!("  drawn: {path}");
}

const USAGE: &str = "cost curves of the scheduling cycle (docs/PERFORMANCE.md, issue 24)

usage: cargo bench -p gantry-engine --bench scale -- [flags]
  --curve nodes|waiting|running  one curve (default: all three)
  --point NODES,WAITING,RUNNING  one point in this process (RUNNING 0: fill the fleet)
  --cycles N                     steady cycles measured per point (default 40)
  --base-nodes N                 nodes of the waiting and running curves (default 100000)
  --quick                        a tenth of every size
  --no-preempt                   the same cycles without preemption planning
  --svg DIR                      draw each curve as DIR/cost-<curve>[-no-preempt].svg
                                 (cargo runs benches in crates/gantry-engine: give $PWD/...)";

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.iter().any(|a| a == "--help" || a == "-h") {
        println!("{USAGE}");
        return;
    }
    let value = |flag: &str| args.iter().position(|a| a == flag).and_then(|i| args.get(i + 1)).cloned();
    let cycles = value("--cycles").map_or(CYCLES, |n| n.parse().expect("--cycles N"));
    // Preemption planning off: how much of a cycle it is.
    let preempt = !args.iter().any(|a| a == "--no-preempt");
    if let Some(point) = value("--point") {
        let v: Vec<usize> = point.split(',').map(|n| n.parse().expect("--point NODES,WAITING,RUNNING")).collect();
        let [nodes, waiting, running] = v[..] else { panic!("--point NODES,WAITING,RUNNING") };
        println!("{}", measure(Point { nodes, waiting, running }, cycles, preempt).line());
        return;
    }
    let quick = args.iter().any(|a| a == "--quick");
    let only = value("--curve");
    println!(
        "gantry scheduling-cycle cost curves: fair share ({PROJECTS} projects in 3 levels), backfill with reservations (depth 8), preemption {}; {cycles} cycles per point",
        if preempt { "on" } else { "off" }
    );
    let base = value("--base-nodes").map_or(100_000, |n| n.parse().expect("--base-nodes N"));
    for (curve, points) in curves(quick, base) {
        if only.as_deref().is_some_and(|c| c != curve) {
            continue;
        }
        println!("\ncurve: {curve}");
        header();
        let mut measured = Vec::new();
        for point in points {
            let m = measure_apart(point, cycles, preempt);
            row(&m);
            measured.push(m);
        }
        if let Some(dir) = value("--svg") {
            draw(&dir, curve, preempt, &measured);
        }
    }
}
