//! `serve --local`: one node agent per fleet node, run in this process — the same agent as
//! `gantry agent` (`gantry_agent::node`), speaking the same messages to the same two functions (`agent_service.rs`) the HTTP handlers call,
//! only without the network in between ([`InProcess`] is its link). The controller sees remote
//! agents; the recovery after a restart is the agents' own (their claims on disk), so there is
//! one way tasks run, whether the agents are on other machines or here.

use crate::api::status::status_of;
use crate::auth::Principal;
use crate::{Shared, wire};
use gantry_agent::node::{AgentConfig, Answer, Link};
use gantry_store::Role;
use gantry_types::Fleet;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::oneshot;

/// How long an in-process agent's heartbeat may be held with nothing to order.
const WAIT: Duration = Duration::from_secs(5);

pub use crate::task_logs::node_dir;

/// The controller, in the same process.
#[derive(Clone, Debug)]
pub struct InProcess {
    shared: Shared,
    who: Principal,
}

fn answer<T: serde::Serialize>(result: Result<T, crate::error::ControlError>) -> (u16, String) {
    match result {
        Ok(value) => (200, serde_json::to_string(&value).unwrap_or_default()),
        Err(e) => (status_of(&e).as_u16(), serde_json::json!({ "error": e.to_string() }).to_string()),
    }
}

impl Link for InProcess {
    fn post(&self, path: String, body: String) -> Answer {
        let (shared, who) = (self.shared.clone(), self.who.clone());
        Box::pin(async move {
            if path == "/v1/agents/register" {
                return Ok(answer(crate::agent_service::register(&shared, who, &body).await));
            }
            match path.strip_prefix("/v1/agents/").and_then(|p| p.strip_suffix("/heartbeat")) {
                Some(node) => Ok(answer(crate::agent_service::heartbeat(&shared, who, node.to_string(), &body).await)),
                None => Ok((404, format!("{{\"error\": \"no route {path}\"}}"))),
            }
        })
    }
}

/// The in-process agents, and how to stop them (their tasks keep running).
#[derive(Debug, Default)]
pub struct Agents {
    stops: Vec<oneshot::Sender<()>>,
    loops: Vec<tokio::task::JoinHandle<()>>,
    /// How each node confines its tasks, as its agent found it (for the banner).
    pub confinement: Vec<(String, wire::Confinement)>,
}

/// How the in-process agents confine their tasks (`serve --local --confinement …`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LocalConfinement {
    pub choice: gantry_agent::cgroup::Choice,
    pub defaults: gantry_agent::runner::Defaults,
}

impl Agents {
    pub async fn stop(self) {
        for stop in self.stops {
            let _ = stop.send(());
        }
        for handle in self.loops {
            let _ = handle.await;
        }
    }
}

/// Start one agent per node of `fleet`. `simulate`: tasks last this long instead of running;
/// `measure`: the GPUs are this machine's, sampled with NVML, and reconfigured through NVML;
/// otherwise each node's MIG hardware is simulated in `fake-mig.json` in its directory,
/// starting from the modes the controller has recorded, and its GPUs are fake device nodes
/// there (confined as real ones are).
pub fn start(
    shared: &Shared,
    fleet: &Fleet,
    simulate: Option<Duration>,
    measure: bool,
    confine: LocalConfinement,
) -> Agents {
    let mut agents = Agents::default();
    let recorded = shared.controller.lock().expect("not poisoned").scheduler().engine().fleet_now();
    for node in &fleet.nodes {
        // Each in-process agent holds its node's credential, as a remote one does.
        let who = Principal {
            name: format!("local-agent-{}", node.name),
            role: Role::Agent,
            queues: Vec::new(),
            node: Some(node.name.clone()),
        };
        let link: Arc<dyn Link> = Arc::new(InProcess { shared: shared.clone(), who });
        let gpus = node
            .gpus
            .iter()
            .map(|g| wire::AgentGpu {
                index: g.index,
                uuid: g.uuid.clone(),
                model: g.model.clone(),
                // Not reported: the controller's own record of each GPU's mode stands.
                mig_mode: None,
                mig: Vec::new(),
            })
            .collect();
        let mig = mig_backend(shared, &recorded, &node.name, measure);
        let mut config = AgentConfig {
            mig,
            link: link.clone(),
            node: node.name.clone(),
            gpus,
            data_dir: node_dir(&shared.data_dir, &node.name),
            wait: WAIT,
            retry: Duration::from_secs(1),
            simulate,
            measure_gpus: measure,
            confine: confine.choice,
            confinement: None,
            defaults: confine.defaults,
            devices: if measure { gantry_agent::node::Devices::Driver } else { gantry_agent::node::Devices::Fake },
        };
        // Found now, so that the banner can say it (the agent would find the same).
        let found =
            gantry_agent::node::prepare_data_dir(&mut config).and_then(|()| gantry_agent::node::confinement(&config));
        if let Ok(found) = found {
            agents.confinement.push((node.name.clone(), found.report()));
            config.confinement = Some(found);
        }
        let (stop, stopped) = oneshot::channel();
        let name = node.name.clone();
        agents.stops.push(stop);
        agents.loops.push(tokio::spawn(async move {
            if let Err(e) = gantry_agent::node::run(config, stopped).await {
                tracing::error!(node = %name, error = %e, "the in-process agent stopped");
            }
        }));
    }
    agents
}

/// The MIG backend of an in-process agent: NVML for this machine's GPUs, else simulated
/// hardware kept in the node's directory.
fn mig_backend(
    shared: &Shared,
    recorded: &Fleet,
    node: &str,
    measure: bool,
) -> Option<gantry_agent::layouts::MigHandle> {
    use gantry_agent::layouts::MigHandle;
    if measure {
        return gantry_agent::mig_nvml::NvmlMig::new().ok().map(MigHandle::new);
    }
    let gpus: Vec<(u32, String, gantry_types::GpuMode)> = recorded
        .nodes
        .iter()
        .find(|n| n.name == node)
        .map(|n| n.gpus.iter().map(|g| (g.index, g.model.clone(), g.mode.clone())).collect())
        .unwrap_or_default();
    let dir = node_dir(&shared.data_dir, node);
    let opened = gantry_agent::runner::private_dir(&dir).map_err(|e| e.to_string()).and_then(|()| {
        gantry_agent::mig::FileBackend::open(&dir.join("fake-mig.json"), &gpus).map_err(|e| e.to_string())
    });
    match opened {
        Ok(backend) => Some(MigHandle::new(backend)),
        Err(why) => {
            tracing::error!(node, why, "no simulated MIG backend: this node cannot be reconfigured");
            None
        }
    }
}
