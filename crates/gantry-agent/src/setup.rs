//! What `gantry agent` settles before its loop starts, apart from its flags: the node it
//! serves and that node's GPUs (an inventory file's, else NVML's), where the controller's
//! layout orders go, its token, its link to the controllers, and the banner it starts with.
//! The binary only parses the flags and prints.

use crate::discover::Discovery;
use crate::error::SetupError;
use crate::layouts::MigHandle;
use crate::node::{AgentConfig, Devices, HttpLink};
use gantry_types::{Fleet, GpuMode, Node};
use gantry_wire::AgentGpu;
use gantry_wire::client::{Client, ClientError, Tls};
use std::path::Path;
use std::time::Duration;

/// How long the controller holds a heartbeat when it has nothing to order: the client waits
/// that long more for an answer to begin before it tries the next controller.
pub const HELD_FOR: Duration = Duration::from_secs(5);

/// The node an agent serves and its GPUs, with what discovery had to leave out.
#[derive(Debug)]
pub struct Inventory {
    pub node: String,
    pub gpus: Vec<AgentGpu>,
    /// One line per GPU or fact NVML left out (none from an inventory file).
    pub notes: Vec<String>,
}

impl Inventory {
    fn of(node: Node, notes: Vec<String>) -> Inventory {
        let gpus = node.gpus.iter().map(AgentGpu::of_fleet).collect();
        Inventory { node: node.name, gpus, notes }
    }
}

/// The node `node` of the inventory file `file` (read as `fleet`); without a name, its only
/// node.
pub fn from_inventory(file: &Path, fleet: &Fleet, node: Option<&str>) -> Result<Inventory, SetupError> {
    let known = || fleet.nodes.iter().map(|n| n.name.clone()).collect();
    let found = match node {
        Some(name) => fleet.nodes.iter().find(|n| n.name == name).ok_or_else(|| SetupError::NoSuchNode {
            file: file.to_path_buf(),
            node: name.to_string(),
            known: known(),
        })?,
        None if fleet.nodes.len() == 1 => &fleet.nodes[0],
        None => return Err(SetupError::WhichNode { file: file.to_path_buf(), known: known() }),
    };
    Ok(Inventory::of(found.clone(), Vec::new()))
}

/// This machine's GPUs through NVML, as the node called `node`.
pub fn from_nvml(node: &str, catalog: &gantry_catalog::Catalog) -> Result<Inventory, SetupError> {
    let Discovery { node, notes } = crate::discover::discover(node, catalog).map_err(SetupError::NoGpus)?;
    Ok(Inventory::of(node, notes))
}

/// Where layout orders go: simulated hardware in `data_dir` (`fake_mig`, starting from
/// `gpus`' modes), else none for fake devices (an inventory file's GPUs), else NVML when
/// there is a driver.
pub fn mig_backend(
    fake_mig: bool,
    devices: Devices,
    data_dir: &Path,
    gpus: &[AgentGpu],
) -> Result<Option<MigHandle>, SetupError> {
    if fake_mig {
        crate::runner::private_dir(data_dir)
            .map_err(|source| SetupError::DataDir { dir: data_dir.to_path_buf(), source })?;
        let modes: Vec<(u32, String, GpuMode)> =
            gpus.iter().map(|g| (g.index, g.model.clone(), g.mode().unwrap_or(GpuMode::Whole))).collect();
        let backend =
            crate::mig::FileBackend::open(&data_dir.join("fake-mig.json"), &modes).map_err(SetupError::FakeMig)?;
        return Ok(Some(MigHandle::new(backend)));
    }
    if devices == Devices::Fake {
        return Ok(None);
    }
    Ok(crate::mig_nvml::NvmlMig::new().ok().map(MigHandle::new))
}

/// The agent's secret: from `token_file`, else `$GANTRY_TOKEN`; refused when one was given
/// on the command line (`on_command_line`).
pub fn agent_secret(on_command_line: bool, token_file: Option<&Path>) -> Result<String, SetupError> {
    if on_command_line {
        return Err(SetupError::TokenOnCommandLine);
    }
    let secret = match token_file {
        Some(file) => std::fs::read_to_string(file)
            .map_err(|source| SetupError::TokenFile { file: file.to_path_buf(), source })?,
        None => std::env::var("GANTRY_TOKEN").map_err(SetupError::NoToken)?,
    };
    let secret = secret.trim().to_string();
    if secret.is_empty() {
        return Err(SetupError::EmptyToken);
    }
    Ok(secret)
}

/// The agent's link to its controllers at `server`: the HTTP client trusting `trust`, waiting
/// [`HELD_FOR`] more for held heartbeats, with the agent's `token`.
pub fn http_link(server: &str, trust: &Tls, token: String) -> Result<HttpLink, ClientError> {
    let client = Client::new(server, trust)?;
    Ok(HttpLink { client: client.holding(HELD_FOR), token })
}

/// The start-up banner: where the agent serves, as whom its tasks run, and
/// `confinement_line`, how it confines them. Lines, without a final line break.
pub fn banner(config: &AgentConfig, server: &str, confinement_line: &str) -> String {
    use crate::account::{Identity, setpriv_installed};
    let accounts = match Identity::of_this_process() {
        Identity::Root if !setpriv_installed() => {
            "warning: setpriv (util-linux) is not installed: tasks of accounts other than root cannot start".to_string()
        }
        Identity::Root => "  tasks run as their job's Unix account on this node".to_string(),
        Identity::User(me) => {
            format!("  not root: only tasks of Unix account {:?} run here (others are refused)", me.unwrap_or_default())
        }
    };
    format!(
        "gantry agent for node {} ({} GPUs) → {server}, data in {}; stop: Ctrl-C (tasks keep running)\n{accounts}\n{confinement_line}",
        config.node,
        config.gpus.len(),
        config.data_dir.display()
    )
}

/// The start-up banner's line for how a node (or `nodes`, several in one process) confines
/// its tasks.
pub fn confinement_line(confinement: &gantry_wire::Confinement, nodes: &[String]) -> String {
    let on = if nodes.len() > 1 { format!(" ({} nodes)", nodes.len()) } else { String::new() };
    match confinement.kind {
        gantry_wire::ConfinementKind::Unconfined => {
            format!(
                "  confinement: UNCONFINED{on} — {}; tasks are not held to their memory, CPU or GPUs",
                confinement.note
            )
        }
        _ => {
            // Several nodes: each has its own parent cgroup, `<node>-<instance>`.
            let under = match confinement.note.rsplit_once('/') {
                Some((parent, _)) if nodes.len() > 1 => format!("{parent}/<node>-<instance>"),
                _ => confinement.note.clone(),
            };
            format!("  confinement: {confinement}{on}, cgroups under {under}")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gantry_types::{Bytes, Gpu, MigInstanceSpec, MilliCpu};

    fn node(name: &str, modes: &[GpuMode]) -> Node {
        let gpus = modes
            .iter()
            .enumerate()
            .map(|(i, mode)| Gpu {
                index: i as u32,
                model: "A100-80GB".into(),
                uuid: format!("GPU-{name}-{i}"),
                numa: 0,
                pcie_switch: 0,
                nvlink_domain: None,
                mode: mode.clone(),
            })
            .collect();
        Node {
            name: name.into(),
            cpu: MilliCpu(8000),
            memory: Bytes(1 << 36),
            gpus,
            labels: Default::default(),
            taints: Vec::new(),
            rack: None,
            block: None,
        }
    }

    fn scratch(tag: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("gantry-setup-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("a scratch directory");
        dir
    }

    #[test]
    fn an_inventory_gives_the_named_node_or_its_only_one() {
        let mig = GpuMode::Mig { instances: vec![MigInstanceSpec { profile: "3g.40gb".into(), start: 0 }] };
        let two = Fleet { nodes: vec![node("a", &[GpuMode::Whole]), node("b", &[GpuMode::Whole, mig])] };
        let file = Path::new("fleet.toml");
        let b = from_inventory(file, &two, Some("b")).expect("b is there");
        assert_eq!((b.node.as_str(), b.gpus.len(), b.notes.len()), ("b", 2, 0));
        assert_eq!((b.gpus[0].mig_mode, b.gpus[1].mig_mode), (Some(false), Some(true)));
        assert_eq!(b.gpus[1].mig.len(), 1);
        let one = Fleet { nodes: vec![node("a", &[GpuMode::Whole])] };
        assert_eq!(from_inventory(file, &one, None).expect("its only node").node, "a");
    }

    #[test]
    fn an_inventory_says_which_nodes_it_has() {
        let two = Fleet { nodes: vec![node("a", &[]), node("b", &[])] };
        let file = Path::new("fleet.toml");
        let unknown = from_inventory(file, &two, Some("c")).expect_err("no node c");
        assert_eq!(unknown.to_string(), r#"fleet.toml: no node "c" (it has: a, b)"#);
        let which = from_inventory(file, &two, None).expect_err("two nodes");
        assert_eq!(which.to_string(), "fleet.toml has 2 nodes: pick one with --node (a, b)");
    }

    #[test]
    fn the_token_comes_from_a_file_trimmed_never_from_the_command_line() {
        let dir = scratch("token");
        let file = dir.join("agent.token");
        std::fs::write(&file, "s3cret\n").expect("written");
        assert_eq!(agent_secret(false, Some(&file)).expect("read"), "s3cret");
        assert!(matches!(agent_secret(true, Some(&file)), Err(SetupError::TokenOnCommandLine)));
        std::fs::write(&file, " \n").expect("written");
        assert_eq!(agent_secret(false, Some(&file)).expect_err("empty").to_string(), "the agent token is empty");
        let missing = dir.join("missing.token");
        let unread = agent_secret(false, Some(&missing)).expect_err("missing");
        assert_eq!(unread.to_string(), format!("cannot read {}", missing.display()));
        assert!(std::error::Error::source(&unread).is_some());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn fake_devices_take_no_layout_orders_unless_simulated() {
        let dir = scratch("mig");
        let gpus = Inventory::of(node("a", &[GpuMode::Whole]), Vec::new()).gpus;
        assert!(mig_backend(false, Devices::Fake, &dir, &gpus).expect("none").is_none());
        assert!(mig_backend(true, Devices::Fake, &dir, &gpus).expect("simulated").is_some());
        assert!(dir.join("fake-mig.json").exists());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
