//! The controller (`gantry serve`): the REST API, the scheduling loop over the engine's
//! `Scheduler`, the store, and either the in-process agent that runs every task as a real
//! process on this machine (`--local`) or remote agents (`gantry agent`, [`agent`]) that
//! register their nodes and heartbeat over HTTP ([`wire`]).
//!
//! One lock around the [`controller::Controller`] (store + scheduler): the API and the loop
//! take it briefly; processes run outside it. The loop wakes on a submit, a cancel, a task's
//! exit, or a tick, runs one cycle, and launches what it decided (or leaves it for the
//! remote agents' next heartbeat, waking those held in a long poll).

pub mod agent;
pub mod api;
pub mod auth;
pub mod client;
pub mod controller;
pub mod idle;
pub mod meter;
pub mod metrics;
pub mod mps;
pub mod runner;
pub mod series;
pub mod ui;
pub mod wire;

use gantry_catalog::Catalog;
use gantry_store::SqliteStore;
use gantry_types::Fleet;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{Notify, mpsc, oneshot};

/// Seconds since the Unix epoch: the controller's clock (the engine only ever gets it as an
/// argument).
pub fn now_s() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// How the controller runs.
#[derive(Clone, Debug)]
pub struct ServeConfig {
    /// Holds `gantry.db` and `jobs/<id>/` (task logs).
    pub data_dir: PathBuf,
    pub listen: SocketAddr,
    pub fleet: Fleet,
    /// How often a cycle runs with nothing else happening.
    pub tick: Duration,
    /// Queue order, backfill, preemption (the engine's scheduler settings).
    pub scheduling: gantry_engine::sched::SchedulerConfig,
    /// Simulate tasks instead of running processes: each lasts this long (benchmarks).
    pub simulate_tasks: Option<Duration>,
    /// The in-process agent runs the tasks, or remote agents do.
    pub agents: controller::Agents,
    /// The fleet is this machine's GPUs as NVML found them: measure their utilization (else
    /// the in-process agent's utilization is simulated).
    pub measure_local_gpus: bool,
    /// Prices and weights for chargeback (`GET /v1/usage`).
    pub billing: meter::Billing,
    /// When a job counts as idle, and what each queue does about it.
    pub idle: idle::IdlePolicy,
}

/// What the API handlers share.
#[derive(Clone, Debug)]
pub struct Shared {
    pub controller: Arc<Mutex<controller::Controller>>,
    /// The in-process agent's runner (`None` with remote agents).
    pub runner: Option<runner::Runner>,
    /// Wakes the scheduling loop.
    pub wake: Arc<Notify>,
    /// Wakes remote agents' held heartbeats: there are new orders.
    pub agents_wake: Arc<Notify>,
    pub data_dir: PathBuf,
}

/// A started controller: where it listens, and how to stop it.
#[derive(Debug)]
pub struct Running {
    pub addr: SocketAddr,
    /// Where the first admin token was written, if this start created it.
    pub admin_token_file: Option<PathBuf>,
    shutdown: Option<oneshot::Sender<()>>,
    server: tokio::task::JoinHandle<std::io::Result<()>>,
    scheduler: tokio::task::JoinHandle<()>,
}

impl Running {
    /// Stop accepting requests, finish those in flight, stop the loop. Running tasks keep
    /// running (they are in their own process groups); the next start re-adopts them.
    pub async fn shutdown(mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        let _ = self.server.await;
        self.scheduler.abort();
    }
}

/// Open the store, recover, bind and start serving.
pub async fn start(config: ServeConfig) -> Result<Running, String> {
    std::fs::create_dir_all(&config.data_dir)
        .map_err(|e| format!("cannot create data directory {}: {e}", config.data_dir.display()))?;
    // Absolute: tasks run in their own working directories and write their pid and exit
    // files by these paths.
    let mut config = config;
    config.data_dir = std::fs::canonicalize(&config.data_dir)
        .map_err(|e| format!("data directory {}: {e}", config.data_dir.display()))?;
    let store = SqliteStore::open(&config.data_dir.join("gantry.db")).map_err(|e| e.to_string())?;
    let mut controller = controller::Controller::open(
        store,
        &config.fleet,
        Catalog::embedded(),
        config.scheduling.clone(),
        &config.data_dir,
        config.agents,
        now_s(),
    )?;
    if config.measure_local_gpus {
        controller.measure_local_gpus();
    }
    config.billing.check()?;
    config.idle.check()?;
    controller.set_idle_policy(config.idle.clone());
    controller.set_billing(config.billing.clone());
    let recovered = controller.take_recovered();
    let admin_token_file = controller.bootstrap_admin(&config.data_dir, now_s())?;
    let (exits_tx, mut exits) = mpsc::channel::<runner::Exit>(1024);
    // Held by the loop too: with remote agents there is no runner, and the channel must not
    // close (a closed channel would end the loop).
    let exits_keep = exits_tx.clone();
    let shared = Shared {
        controller: Arc::new(Mutex::new(controller)),
        runner: match (config.agents, config.simulate_tasks) {
            (controller::Agents::Remote { .. }, _) => None,
            (controller::Agents::Local, None) => Some(runner::Runner::new(config.data_dir.clone(), exits_tx)),
            (controller::Agents::Local, Some(duration)) => {
                Some(runner::Runner::simulated(config.data_dir.clone(), exits_tx, duration))
            }
        },
        wake: Arc::new(Notify::new()),
        agents_wake: Arc::new(Notify::new()),
        data_dir: config.data_dir.clone(),
    };
    if let Some(runner) = &shared.runner {
        for task in recovered {
            let base = runner::task_base(&config.data_dir, task.job, &task.group, task.replica);
            runner.watch(task, base);
        }
    }
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .map_err(|e| format!("cannot listen on {}: {e}", config.listen))?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;

    let loop_shared = shared.clone();
    let tick = config.tick;
    let scheduler = tokio::spawn(async move {
        let _exits_keep = exits_keep;
        loop {
            let mut ended = Vec::new();
            tokio::select! {
                _ = loop_shared.wake.notified() => {}
                exit = exits.recv() => match exit {
                    Some(exit) => ended.push(exit),
                    None => return,
                },
                _ = tokio::time::sleep(tick) => {}
            }
            while let Ok(exit) = exits.try_recv() {
                ended.push(exit);
            }
            let effects = {
                let mut controller = loop_shared.controller.lock().expect("not poisoned");
                for exit in ended {
                    if let Err(e) = controller.task_exited(&exit.key, exit.code, exit.timed_out, exit.lost, now_s()) {
                        tracing::error!(job = exit.key.job, error = %e, "recording a task's exit failed");
                    }
                }
                controller.check_agents(now_s());
                controller.meter(now_s(), false);
                let idle = controller.check_idle(now_s());
                let started = std::time::Instant::now();
                let cycled = controller.cycle(now_s());
                controller.observe_cycle(started.elapsed());
                match cycled {
                    Ok(mut effects) => {
                        effects.stop.extend(idle.stop);
                        effects.agents_have_orders |= idle.agents_have_orders;
                        effects
                    }
                    Err(e) => {
                        tracing::error!(error = %e, "scheduling cycle failed");
                        // Idle reclaims still go out: their jobs are already marked cancelled.
                        idle
                    }
                }
            };
            if effects.agents_have_orders {
                loop_shared.agents_wake.notify_waiters();
            }
            if let Some(runner) = &loop_shared.runner {
                for (job, attempt, grace) in effects.stop {
                    runner.stop(job, attempt, Duration::from_secs(grace));
                }
                for launch in effects.launch {
                    runner.launch(launch);
                }
            }
        }
    });

    let (shutdown_tx, shutdown_rx) = oneshot::channel::<()>();
    let app = api::router(shared);
    let server = tokio::spawn(async move {
        axum::serve(listener, app)
            .with_graceful_shutdown(async {
                let _ = shutdown_rx.await;
            })
            .await
    });
    Ok(Running { addr, admin_token_file, shutdown: Some(shutdown_tx), server, scheduler })
}
