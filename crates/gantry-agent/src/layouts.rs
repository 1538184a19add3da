//! The agent's side of reconfiguration (protocol 2): carry out the controller's layout
//! orders through the node's MIG backend, each once and all or nothing, on a GPU none of the
//! agent's tasks uses, and report every outcome — with the GPU as the hardware has it
//! afterwards — until the controller has recorded it. The backend is NVML on a real node, or
//! [`crate::mig::FileBackend`] (simulated hardware kept on disk) on a node without a driver.

use crate::mig::{MigBackend, MigError, apply_mode, read_back};
use gantry_wire::{AgentGpu, AgentMigInstance, LayoutOrder, LayoutReport};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// A node's MIG backend, shared by the agent's loop.
#[derive(Clone)]
pub struct MigHandle(pub Arc<Mutex<Box<dyn MigBackend + Send>>>);

impl std::fmt::Debug for MigHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MigHandle")
    }
}

impl MigHandle {
    pub fn new(backend: impl MigBackend + Send + 'static) -> MigHandle {
        MigHandle(Arc::new(Mutex::new(Box::new(backend))))
    }
}

/// Layout orders carried out, and their outcomes not yet recorded by the controller.
#[derive(Debug, Default)]
pub struct Layouts {
    backend: Option<MigHandle>,
    reports: BTreeMap<u64, LayoutReport>,
}

impl Layouts {
    pub fn new(backend: Option<MigHandle>) -> Layouts {
        Layouts { backend, reports: BTreeMap::new() }
    }

    /// The outcomes to report in the next heartbeat.
    pub fn reports(&self) -> Vec<LayoutReport> {
        self.reports.values().cloned().collect()
    }

    /// The controller recorded these outcomes.
    pub fn forget(&mut self, ids: &[u64]) {
        for id in ids {
            self.reports.remove(id);
        }
    }

    /// Set `gpus`' MIG state to what the hardware has (before registering: the controller
    /// takes the layout an idle GPU really has).
    pub fn refresh(&self, gpus: &mut [AgentGpu]) {
        let Some(backend) = &self.backend else { return };
        let backend = backend.0.lock().unwrap_or_else(|p| p.into_inner());
        for gpu in gpus {
            match read_back(backend.as_ref(), gpu.index) {
                Ok((enabled, instances)) => set_state(gpu, enabled, &instances),
                Err(e) => tracing::warn!(gpu = gpu.index, error = %e, "cannot read the GPU's MIG state"),
            }
        }
    }

    /// Carry out `order` on `gpu` unless done already (an order repeated before its outcome
    /// was recorded). `busy`: tasks of this agent use the GPU — refused, nothing touched.
    pub fn apply(&mut self, order: &LayoutOrder, gpu: &mut AgentGpu, busy: bool) {
        if self.reports.contains_key(&order.id) {
            return;
        }
        let refused = match (&self.backend, busy) {
            (_, true) => Some(format!("GPU {} is in use by tasks on this node: nothing was changed", order.gpu)),
            (None, false) => self.without_backend(order, gpu),
            (Some(backend), false) => {
                let mut backend = backend.0.lock().unwrap_or_else(|p| p.into_inner());
                let outcome =
                    model_of(gpu).and_then(|model| apply_mode(backend.as_mut(), order.gpu, model, &order.mode));
                match read_back(backend.as_ref(), order.gpu) {
                    Ok((enabled, instances)) => set_state(gpu, enabled, &instances),
                    Err(e) => tracing::error!(gpu = order.gpu, error = %e, "cannot read the GPU back after a change"),
                }
                outcome.err().map(|e| e.to_string())
            }
        };
        match &refused {
            None => tracing::info!(id = order.id, gpu = order.gpu, mode = %order.mode.text(), "GPU reconfigured"),
            Some(why) => {
                tracing::warn!(id = order.id, gpu = order.gpu, mode = %order.mode.text(), why, "reconfiguration refused")
            }
        }
        let report = LayoutReport {
            id: order.id,
            gpu: order.gpu,
            refused,
            mig_mode: gpu.mig_mode.unwrap_or(false),
            mig: gpu.mig.clone(),
        };
        self.reports.insert(order.id, report);
    }

    /// No backend: only a change between modes without MIG (bookkeeping) can be made.
    fn without_backend(&self, order: &LayoutOrder, gpu: &AgentGpu) -> Option<String> {
        let mig_now = gpu.mig_mode.unwrap_or(false);
        match (&order.mode, mig_now) {
            (gantry_types::GpuMode::Mig { .. }, _) | (_, true) => {
                Some("this agent has no MIG backend (no NVML here: start it with --fake-mig to simulate one)".into())
            }
            _ => None,
        }
    }
}

fn model_of(gpu: &AgentGpu) -> Result<&'static gantry_catalog::GpuModel, MigError> {
    let catalog = gantry_catalog::Catalog::embedded();
    catalog
        .lookup(&gpu.model)
        .map(|id| catalog.model(id))
        .ok_or_else(|| MigError::Layout(format!("{} is not in the catalog", gpu.model)))
}

/// Record what the hardware has, with each instance's driver id where NVML is loaded.
fn set_state(gpu: &mut AgentGpu, enabled: bool, instances: &[gantry_types::MigInstanceSpec]) {
    gpu.mig_mode = Some(enabled);
    gpu.mig = instances
        .iter()
        .map(|i| AgentMigInstance {
            profile: i.profile.clone(),
            start: i.start,
            gpu_instance_id: crate::mig_nvml::instance_ids(&gpu.uuid, i.start).map(|(gi, _)| gi),
        })
        .collect();
    gpu.mig.sort();
}
