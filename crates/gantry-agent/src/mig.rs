//! Applying a MIG layout to one GPU, all or nothing: check the target against the catalog's
//! rules, refuse a GPU that is running anything, destroy the instances the target does not
//! keep, create the missing ones (largest first: the driver's own placement depends on
//! creation order), read the result back, and on any failure put the old layout back rather
//! than leave a half-applied one.
//!
//! The driver sits behind [`MigBackend`]. [`FakeBackend`] is an in-memory GPU that enforces
//! the same layout rules and can be told to fail, for tests and dry runs. The NVML backend is
//! `mig_nvml::NvmlMig` (GPU/compute instances through nvml-wrapper's raw bindings, which the
//! safe wrapper lacks).

use gantry_catalog::GpuModel;
use gantry_types::MigInstanceSpec;

/// What went wrong applying a layout.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum MigError {
    #[error("layout refused: {0}")]
    Layout(String),
    #[error("GPU {gpu} is busy ({processes} process(es) running): drain it first; nothing was changed")]
    Busy { gpu: u32, processes: u32 },
    #[error("GPU {gpu} is not in MIG mode (enabling it needs a GPU reset, which gantry never does)")]
    MigModeOff { gpu: u32 },
    #[error("the driver refused {action} of {profile}@{start} on GPU {gpu}: {why}")]
    Driver { gpu: u32, action: &'static str, profile: String, start: u8, why: String },
    #[error("{failure}; rolling back {}", if *restored { "restored the previous layout" } else { "FAILED: the GPU's layout is now unknown, check it by hand" })]
    RolledBack { failure: Box<MigError>, restored: bool },
    #[error("after applying, GPU {gpu} has {found} instead of {wanted}")]
    Mismatch { gpu: u32, found: String, wanted: String },
    #[error("NVML: {0}")]
    Nvml(String),
    #[error("GPU {gpu}: turning MIG mode {} is not done by gantry on this backend (on Ampere it resets the GPU); an administrator does it with nvidia-smi -mig", if *on { "on" } else { "off" })]
    ModeChange { gpu: u32, on: bool },
}

/// The driver, as the applier needs it.
pub trait MigBackend {
    fn mig_enabled(&self, gpu: u32) -> Result<bool, MigError>;
    /// Compute processes running on the GPU (any of its instances).
    fn processes(&self, gpu: u32) -> Result<u32, MigError>;
    fn instances(&self, gpu: u32) -> Result<Vec<MigInstanceSpec>, MigError>;
    fn create(&mut self, gpu: u32, instance: &MigInstanceSpec) -> Result<(), MigError>;
    fn destroy(&mut self, gpu: u32, instance: &MigInstanceSpec) -> Result<(), MigError>;
    /// Turn MIG mode on or off on an idle GPU with no instances. The default refuses: the
    /// NVML backend never does it (on Ampere it resets the GPU); the fake one can.
    fn set_mig_mode(&mut self, gpu: u32, on: bool) -> Result<(), MigError> {
        Err(MigError::ModeChange { gpu, on })
    }
}

/// Give GPU `gpu` the mode `target`, all or nothing: a MIG layout (turning MIG mode on first
/// where the backend can, and off again if the layout fails), or a mode without MIG (its
/// instances destroyed and MIG mode turned off, put back if that fails). MPS and
/// time-slicing are whole GPUs to the hardware. A GPU already as wanted is left alone.
pub fn apply_mode(
    backend: &mut dyn MigBackend,
    gpu: u32,
    model: &GpuModel,
    target: &gantry_types::GpuMode,
) -> Result<(), MigError> {
    let enabled = backend.mig_enabled(gpu)?;
    match target {
        gantry_types::GpuMode::Mig { instances } => {
            if !enabled {
                let geometry =
                    model.mig.as_ref().ok_or_else(|| MigError::Layout(format!("{} has no MIG", model.id)))?;
                geometry.validate_layout(&model.id, instances).map_err(|e| MigError::Layout(e.to_string()))?;
                let processes = backend.processes(gpu)?;
                if processes > 0 {
                    return Err(MigError::Busy { gpu, processes });
                }
                backend.set_mig_mode(gpu, true)?;
            }
            apply_layout(backend, gpu, model, instances).map(|_| ()).inspect_err(|_| {
                if !enabled {
                    let _ = backend.set_mig_mode(gpu, false);
                }
            })
        }
        _ if !enabled => Ok(()),
        _ => {
            let before = backend.instances(gpu)?;
            apply_layout(backend, gpu, model, &[])?;
            backend.set_mig_mode(gpu, false).inspect_err(|_| {
                let _ = apply_layout(backend, gpu, model, &before);
            })
        }
    }
}

/// The GPU's MIG mode and instances as the backend has them now.
pub fn read_back(backend: &dyn MigBackend, gpu: u32) -> Result<(bool, Vec<MigInstanceSpec>), MigError> {
    let enabled = backend.mig_enabled(gpu)?;
    let mut instances = if enabled { backend.instances(gpu)? } else { Vec::new() };
    instances.sort_by_key(|i| i.start);
    Ok((enabled, instances))
}

/// What an apply changed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Applied {
    pub destroyed: Vec<MigInstanceSpec>,
    pub created: Vec<MigInstanceSpec>,
}

fn text(layout: &[MigInstanceSpec]) -> String {
    let mut items: Vec<String> = layout.iter().map(|i| format!("{}@{}", i.profile, i.start)).collect();
    items.sort();
    format!("[{}]", items.join(", "))
}

fn same(a: &[MigInstanceSpec], b: &[MigInstanceSpec]) -> bool {
    text(a) == text(b)
}

/// Compute slices of a profile, for creation order.
fn size(model: &GpuModel, profile: &str) -> u8 {
    model.mig.as_ref().and_then(|g| g.profile(profile)).map_or(0, |p| p.compute_slices)
}

/// A layout as written on a command line: `1g.10gb@0,2g.20gb@2` (profile@start, comma
/// separated); `none` or an empty string for no instances. Legality is `apply_layout`'s check.
pub fn parse_layout(text: &str) -> Result<Vec<MigInstanceSpec>, MigError> {
    let text = text.trim();
    if text.is_empty() || text == "none" {
        return Ok(Vec::new());
    }
    if text.len() > 1024 {
        return Err(MigError::Layout(format!(
            "layout is {} characters long; a GPU has at most 8 instances",
            text.len()
        )));
    }
    text.split(',')
        .map(|item| {
            let item = item.trim();
            let (profile, start) = item.split_once('@').ok_or_else(|| {
                MigError::Layout(format!("{item:?}: write each instance as PROFILE@START, e.g. 1g.10gb@0"))
            })?;
            let start: u8 = start.parse().map_err(|_| {
                MigError::Layout(format!("{item:?}: the start {start:?} is not a slice number (0 to 7)"))
            })?;
            if profile.is_empty() {
                return Err(MigError::Layout(format!("{item:?}: no profile before @")));
            }
            Ok(MigInstanceSpec { profile: profile.to_string(), start })
        })
        .collect()
}

/// What applying `target` to GPU `gpu` would do, the GPU left as it is: the checks a real
/// apply makes first (MIG mode on, no process), then the change on an in-memory copy.
pub fn dry_run(
    backend: &dyn MigBackend,
    gpu: u32,
    model: &GpuModel,
    target: &[MigInstanceSpec],
) -> Result<Applied, MigError> {
    if !backend.mig_enabled(gpu)? {
        return Err(MigError::MigModeOff { gpu });
    }
    let processes = backend.processes(gpu)?;
    if processes > 0 {
        return Err(MigError::Busy { gpu, processes });
    }
    let mut copy = FakeBackend::new(model.clone(), backend.instances(gpu)?);
    apply_layout(&mut copy, gpu, model, target)
}

/// Apply `target` to GPU `gpu` of `model` (see the module doc).
pub fn apply_layout(
    backend: &mut dyn MigBackend,
    gpu: u32,
    model: &GpuModel,
    target: &[MigInstanceSpec],
) -> Result<Applied, MigError> {
    let geometry = model.mig.as_ref().ok_or_else(|| MigError::Layout(format!("{} has no MIG", model.id)))?;
    geometry.validate_layout(&model.id, target).map_err(|e| MigError::Layout(e.to_string()))?;
    if !backend.mig_enabled(gpu)? {
        return Err(MigError::MigModeOff { gpu });
    }
    let processes = backend.processes(gpu)?;
    if processes > 0 {
        return Err(MigError::Busy { gpu, processes });
    }
    let before = backend.instances(gpu)?;
    let destroy: Vec<MigInstanceSpec> = before.iter().filter(|i| !target.contains(i)).cloned().collect();
    let mut create: Vec<MigInstanceSpec> = target.iter().filter(|i| !before.contains(i)).cloned().collect();
    create.sort_by_key(|i| (std::cmp::Reverse(size(model, &i.profile)), i.start));
    let mut applied = Applied::default();
    let result = (|| {
        for i in &destroy {
            backend.destroy(gpu, i)?;
            applied.destroyed.push(i.clone());
        }
        for i in &create {
            backend.create(gpu, i)?;
            applied.created.push(i.clone());
        }
        let now = backend.instances(gpu)?;
        if !same(&now, target) {
            return Err(MigError::Mismatch { gpu, found: text(&now), wanted: text(target) });
        }
        Ok(())
    })();
    match result {
        Ok(()) => Ok(applied),
        Err(failure) => {
            // Undo in reverse: drop what was created, recreate what was destroyed.
            let mut restored = true;
            for i in applied.created.iter().rev() {
                restored &= backend.destroy(gpu, i).is_ok();
            }
            let mut back = applied.destroyed.clone();
            back.sort_by_key(|i| (std::cmp::Reverse(size(model, &i.profile)), i.start));
            for i in &back {
                restored &= backend.create(gpu, i).is_ok();
            }
            restored &= backend.instances(gpu).is_ok_and(|now| same(&now, &before));
            Err(MigError::RolledBack { failure: Box::new(failure), restored })
        }
    }
}

/// An in-memory MIG GPU: enforces the catalog's layout rules on every create, and fails on
/// request.
#[derive(Clone, Debug)]
pub struct FakeBackend {
    pub model: GpuModel,
    pub mig_enabled: bool,
    pub processes: u32,
    pub layout: Vec<MigInstanceSpec>,
    /// Fail the n-th create from now (1 = the next one).
    pub fail_create_at: Option<u32>,
}

impl FakeBackend {
    pub fn new(model: GpuModel, layout: Vec<MigInstanceSpec>) -> FakeBackend {
        FakeBackend { model, mig_enabled: true, processes: 0, layout, fail_create_at: None }
    }
}

impl MigBackend for FakeBackend {
    fn mig_enabled(&self, _gpu: u32) -> Result<bool, MigError> {
        Ok(self.mig_enabled)
    }

    fn processes(&self, _gpu: u32) -> Result<u32, MigError> {
        Ok(self.processes)
    }

    fn instances(&self, _gpu: u32) -> Result<Vec<MigInstanceSpec>, MigError> {
        Ok(self.layout.clone())
    }

    fn create(&mut self, gpu: u32, instance: &MigInstanceSpec) -> Result<(), MigError> {
        if let Some(n) = self.fail_create_at.as_mut() {
            *n -= 1;
            if *n == 0 {
                self.fail_create_at = None;
                return Err(driver_error(gpu, "create", instance, "injected failure"));
            }
        }
        create_in(&mut self.layout, &self.model, gpu, instance)
    }

    fn destroy(&mut self, gpu: u32, instance: &MigInstanceSpec) -> Result<(), MigError> {
        destroy_in(&mut self.layout, gpu, instance)
    }
}

fn driver_error(gpu: u32, action: &'static str, instance: &MigInstanceSpec, why: &str) -> MigError {
    MigError::Driver { gpu, action, profile: instance.profile.clone(), start: instance.start, why: why.to_string() }
}

/// A simulated driver's create: the instance is added if the catalog's rules allow it.
fn create_in(
    layout: &mut Vec<MigInstanceSpec>,
    model: &GpuModel,
    gpu: u32,
    instance: &MigInstanceSpec,
) -> Result<(), MigError> {
    let geometry = model.mig.as_ref().ok_or_else(|| driver_error(gpu, "create", instance, "no MIG"))?;
    let mut next = layout.clone();
    next.push(instance.clone());
    geometry
        .validate_layout(&model.id, &next)
        .map_err(|e| driver_error(gpu, "create", instance, &format!("insufficient resources ({e})")))?;
    *layout = next;
    Ok(())
}

/// A simulated driver's destroy: the instance must exist.
fn destroy_in(layout: &mut Vec<MigInstanceSpec>, gpu: u32, instance: &MigInstanceSpec) -> Result<(), MigError> {
    let before = layout.len();
    layout.retain(|i| i != instance);
    if layout.len() == before {
        return Err(driver_error(gpu, "destroy", instance, "no such instance"));
    }
    Ok(())
}

/// Simulated MIG hardware for a node without a driver (`gantry agent --fake-mig`, the demo's
/// in-process agents): every GPU's MIG mode and instances, kept in a file written after each
/// change, so that — like real hardware — a layout half-applied when the agent was killed is
/// still there when it restarts. Layout rules are the catalog's, checked on every create.
#[derive(Debug)]
pub struct FileBackend {
    path: std::path::PathBuf,
    gpus: std::collections::BTreeMap<u32, FakeGpu>,
    /// Fail every create from now on (a driver that refuses), for tests.
    pub refuse_creates: bool,
}

#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
struct FakeGpu {
    model: String,
    mig_enabled: bool,
    layout: Vec<MigInstanceSpec>,
}

impl FileBackend {
    /// Open the simulated hardware at `path`; a GPU it does not hold yet starts in `gpus`'
    /// (index, model, mode) — the inventory's.
    pub fn open(
        path: &std::path::Path,
        gpus: &[(u32, String, gantry_types::GpuMode)],
    ) -> Result<FileBackend, MigError> {
        let mut held: std::collections::BTreeMap<u32, FakeGpu> = match std::fs::read_to_string(path) {
            Ok(text) => serde_json::from_str(&text)
                .map_err(|e| MigError::Nvml(format!("{}: not a simulated GPU state ({e})", path.display())))?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Default::default(),
            Err(e) => return Err(MigError::Nvml(format!("{}: {e}", path.display()))),
        };
        for (index, model, mode) in gpus {
            held.entry(*index).or_insert_with(|| FakeGpu {
                model: model.clone(),
                mig_enabled: matches!(mode, gantry_types::GpuMode::Mig { .. }),
                layout: match mode {
                    gantry_types::GpuMode::Mig { instances } => instances.clone(),
                    _ => Vec::new(),
                },
            });
        }
        let backend = FileBackend { path: path.to_path_buf(), gpus: held, refuse_creates: false };
        backend.save()?;
        Ok(backend)
    }

    fn save(&self) -> Result<(), MigError> {
        let text = serde_json::to_string_pretty(&self.gpus).map_err(|e| MigError::Nvml(e.to_string()))?;
        let tmp = self.path.with_extension("tmp");
        std::fs::write(&tmp, text)
            .and_then(|()| std::fs::rename(&tmp, &self.path))
            .map_err(|e| MigError::Nvml(format!("{}: {e}", self.path.display())))
    }

    fn gpu(&self, gpu: u32) -> Result<&FakeGpu, MigError> {
        self.gpus.get(&gpu).ok_or_else(|| MigError::Nvml(format!("no GPU {gpu}")))
    }

    fn change(&mut self, gpu: u32, f: impl FnOnce(&mut FakeGpu) -> Result<(), MigError>) -> Result<(), MigError> {
        let g = self.gpus.get_mut(&gpu).ok_or_else(|| MigError::Nvml(format!("no GPU {gpu}")))?;
        f(g)?;
        self.save()
    }
}

impl MigBackend for FileBackend {
    fn mig_enabled(&self, gpu: u32) -> Result<bool, MigError> {
        Ok(self.gpu(gpu)?.mig_enabled)
    }

    fn processes(&self, _gpu: u32) -> Result<u32, MigError> {
        // Nothing really runs on simulated hardware: the agent checks its own tasks.
        Ok(0)
    }

    fn instances(&self, gpu: u32) -> Result<Vec<MigInstanceSpec>, MigError> {
        Ok(self.gpu(gpu)?.layout.clone())
    }

    fn create(&mut self, gpu: u32, instance: &MigInstanceSpec) -> Result<(), MigError> {
        let refuse = self.refuse_creates;
        self.change(gpu, |g| {
            if refuse {
                return Err(driver_error(gpu, "create", instance, "refused (simulated driver)"));
            }
            let catalog = gantry_catalog::Catalog::embedded();
            let model = catalog
                .lookup(&g.model)
                .map(|id| catalog.model(id))
                .ok_or_else(|| driver_error(gpu, "create", instance, "unknown model"))?;
            create_in(&mut g.layout, model, gpu, instance)
        })
    }

    fn destroy(&mut self, gpu: u32, instance: &MigInstanceSpec) -> Result<(), MigError> {
        self.change(gpu, |g| destroy_in(&mut g.layout, gpu, instance))
    }

    fn set_mig_mode(&mut self, gpu: u32, on: bool) -> Result<(), MigError> {
        self.change(gpu, |g| {
            if !g.layout.is_empty() {
                return Err(MigError::Layout(format!("GPU {gpu} still has instances")));
            }
            g.mig_enabled = on;
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layouts_parse_from_the_command_line_and_bad_ones_say_why() {
        let two = parse_layout("1g.10gb@0, 2g.20gb@2").expect("parses");
        assert_eq!(
            two,
            vec![
                MigInstanceSpec { profile: "1g.10gb".into(), start: 0 },
                MigInstanceSpec { profile: "2g.20gb".into(), start: 2 },
            ]
        );
        assert_eq!(parse_layout("none"), Ok(Vec::new()));
        assert_eq!(parse_layout(""), Ok(Vec::new()));
        for (bad, says) in [
            ("1g.10gb", "PROFILE@START"),
            ("1g.10gb@x", "not a slice number"),
            ("@3", "no profile"),
            ("1g.10gb@300", "not a slice number"),
        ] {
            let err = parse_layout(bad).expect_err(bad);
            assert!(err.to_string().contains(says), "{bad}: {err}");
        }
        assert!(parse_layout(&"1g.10gb@0,".repeat(200)).expect_err("long").to_string().contains("at most 8"));
    }

    fn a100() -> GpuModel {
        let catalog = gantry_catalog::Catalog::embedded();
        catalog.model(catalog.lookup("A100-SXM4-80GB").expect("A100")).clone()
    }

    fn layout(items: &[(&str, u8)]) -> Vec<MigInstanceSpec> {
        items.iter().map(|(p, s)| MigInstanceSpec { profile: (*p).into(), start: *s }).collect()
    }

    #[test]
    fn a_new_layout_replaces_the_old_one_keeping_what_both_share() {
        let mut gpu = FakeBackend::new(a100(), layout(&[("3g.40gb", 0), ("2g.20gb", 4), ("1g.10gb", 6)]));
        let target = layout(&[("3g.40gb", 0), ("1g.10gb", 4), ("1g.10gb", 5), ("1g.10gb", 6)]);
        let applied = apply_layout(&mut gpu, 0, &a100(), &target).expect("applies");
        assert_eq!(applied.destroyed, layout(&[("2g.20gb", 4)]), "3g@0 and 1g@6 are kept");
        assert_eq!(applied.created, layout(&[("1g.10gb", 4), ("1g.10gb", 5)]));
        assert!(same(&gpu.layout, &target));
    }

    #[test]
    fn a_busy_gpu_an_illegal_layout_or_mig_off_change_nothing() {
        let old = layout(&[("7g.80gb", 0)]);
        let mut busy = FakeBackend { processes: 2, ..FakeBackend::new(a100(), old.clone()) };
        let err = apply_layout(&mut busy, 3, &a100(), &layout(&[("1g.10gb", 0)])).expect_err("busy");
        assert_eq!(err, MigError::Busy { gpu: 3, processes: 2 });
        assert_eq!(busy.layout, old);
        let mut gpu = FakeBackend::new(a100(), old.clone());
        let err = apply_layout(&mut gpu, 0, &a100(), &layout(&[("3g.40gb", 0), ("3g.40gb", 2)])).expect_err("overlap");
        assert!(matches!(err, MigError::Layout(_)), "{err}");
        assert_eq!(gpu.layout, old);
        let mut off = FakeBackend { mig_enabled: false, ..FakeBackend::new(a100(), Vec::new()) };
        assert_eq!(apply_layout(&mut off, 1, &a100(), &old), Err(MigError::MigModeOff { gpu: 1 }));
    }

    #[test]
    fn a_failure_halfway_rolls_back_to_the_old_layout() {
        let old = layout(&[("4g.40gb", 0), ("3g.40gb", 4)]);
        let mut gpu = FakeBackend { fail_create_at: Some(3), ..FakeBackend::new(a100(), old.clone()) };
        let target = layout(&[("2g.20gb", 0), ("2g.20gb", 2), ("2g.20gb", 4), ("1g.10gb", 6)]);
        let err = apply_layout(&mut gpu, 0, &a100(), &target).expect_err("injected failure");
        assert!(matches!(&err, MigError::RolledBack { restored: true, .. }), "{err}");
        assert!(err.to_string().contains("restored the previous layout"), "{err}");
        assert!(same(&gpu.layout, &old), "{:?}", gpu.layout);
    }
}
