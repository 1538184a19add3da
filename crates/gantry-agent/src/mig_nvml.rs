//! The NVML MIG backend: GPU and compute instances created and destroyed through NVML's raw
//! symbols, which nvml-wrapper 0.13 loads but does not wrap (and whose
//! `possible_placements()` returns an empty list; ../shared/reference/nvml-rust.md §2–3).
//!
//! The one module of the workspace that may use `unsafe`: every call is a raw NVML function
//! taken from nvml-wrapper's loaded symbol table, with a `// SAFETY:` note on what makes it
//! sound. Everything above it — layout rules, the busy check, rollback — is
//! `mig::apply_layout`, the same code the in-memory `FakeBackend` is tested with.
//!
//! Each GPU instance gets one compute instance spanning it (the shared-engine profile of the
//! same slice count), as `nvidia-smi mig -cgi … -C` does. Instances are named by NVML's own
//! profile names ("MIG 1g.10gb" → `1g.10gb`), placed at the start the layout gives; the size
//! of a placement comes from NVML's possible placements, not from our catalog.
//!
//! Not yet run on hardware: no GPU was lent to the sessions that wrote it. What can be
//! checked without one (the error texts, the name parsing, the profile mapping) is tested.

#![allow(unsafe_code)]

use crate::mig::{MigBackend, MigError};
use gantry_types::MigInstanceSpec;
use nvml_wrapper::{Device, Nvml};
use nvml_wrapper_sys::bindings as ffi;
use std::os::raw::c_uint;

/// What an NVML return code means here, in words.
pub fn nvml_text(code: u32) -> String {
    match code {
        ffi::nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT => "invalid argument (no such profile or placement)".into(),
        ffi::nvmlReturn_enum_NVML_ERROR_NOT_SUPPORTED => "not supported on this GPU".into(),
        ffi::nvmlReturn_enum_NVML_ERROR_NO_PERMISSION => "no permission (MIG changes need root)".into(),
        ffi::nvmlReturn_enum_NVML_ERROR_NOT_FOUND => "not found".into(),
        ffi::nvmlReturn_enum_NVML_ERROR_IN_USE => "in use (a process holds the instance)".into(),
        ffi::nvmlReturn_enum_NVML_ERROR_INSUFFICIENT_RESOURCES => {
            "insufficient resources (the placement overlaps an existing instance)".into()
        }
        other => format!("NVML error {other}"),
    }
}

/// Our profile name for NVML's ("MIG 1g.10gb" → "1g.10gb", "MIG 1g.10gb+me" → "1g.10gb+me").
pub fn profile_name(nvml_name: &str) -> String {
    nvml_name.trim().trim_start_matches("MIG").trim().to_string()
}

/// The shared-engine compute-instance profile covering a GPU instance of `slices` slices.
pub fn compute_profile_for(slices: u32) -> Option<u32> {
    Some(match slices {
        1 => ffi::NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE,
        2 => ffi::NVML_COMPUTE_INSTANCE_PROFILE_2_SLICE,
        3 => ffi::NVML_COMPUTE_INSTANCE_PROFILE_3_SLICE,
        4 => ffi::NVML_COMPUTE_INSTANCE_PROFILE_4_SLICE,
        6 => ffi::NVML_COMPUTE_INSTANCE_PROFILE_6_SLICE,
        7 => ffi::NVML_COMPUTE_INSTANCE_PROFILE_7_SLICE,
        8 => ffi::NVML_COMPUTE_INSTANCE_PROFILE_8_SLICE,
        _ => return None,
    })
}

/// A GPU-instance profile the device offers.
#[derive(Clone, Debug)]
struct Profile {
    /// NVML's profile id (what create and list take).
    id: c_uint,
    slices: c_uint,
    /// Most instances of it the GPU holds (the list buffer's size).
    most: c_uint,
    name: String,
}

/// The GPU-instance profiles `device` supports.
fn profiles(nvml: &Nvml, device: &Device<'_>) -> Result<Vec<Profile>, MigError> {
    let get = nvml.lib().nvmlDeviceGetGpuInstanceProfileInfoV.as_ref().map_err(nvml_err)?;
    let mut out = Vec::new();
    for index in 0..ffi::NVML_GPU_INSTANCE_PROFILE_COUNT {
        // SAFETY: the struct is plain old data (integers and a char array), so all-zero is a
        // valid value; NVML reads `version` and fills the rest.
        let mut info: ffi::nvmlGpuInstanceProfileInfo_v2_t = unsafe { std::mem::zeroed() };
        info.version = std::mem::size_of::<ffi::nvmlGpuInstanceProfileInfo_v2_t>() as c_uint | (2 << 24);
        // SAFETY: `device.handle()` is a live handle owned by `self.nvml` (borrowed for this
        // call); `info` is a valid, writable struct of the version we announced.
        let rc = unsafe { get(device.handle(), index, &mut info) };
        if rc != ffi::nvmlReturn_enum_NVML_SUCCESS {
            continue; // a profile this GPU does not have
        }
        let bytes: Vec<u8> = info.name.iter().take_while(|&&c| c != 0).map(|&c| c as u8).collect();
        out.push(Profile {
            id: info.id,
            slices: info.sliceCount,
            most: info.instanceCount,
            name: profile_name(&String::from_utf8_lossy(&bytes)),
        });
    }
    Ok(out)
}

/// The GPU instances of one profile, with their placements.
fn gpu_instances(
    nvml: &Nvml,
    device: &Device<'_>,
    profile: &Profile,
) -> Result<Vec<(ffi::nvmlGpuInstance_t, ffi::nvmlGpuInstancePlacement_t)>, MigError> {
    let list = nvml.lib().nvmlDeviceGetGpuInstances.as_ref().map_err(nvml_err)?;
    let info = nvml.lib().nvmlGpuInstanceGetInfo.as_ref().map_err(nvml_err)?;
    let mut handles: Vec<ffi::nvmlGpuInstance_t> = vec![std::ptr::null_mut(); profile.most.max(1) as usize];
    let mut count: c_uint = handles.len() as c_uint;
    // SAFETY: the buffer holds `count` handles, the most NVML says this profile can have;
    // NVML writes at most that many and sets `count` to how many it wrote.
    let rc = unsafe { list(device.handle(), profile.id, handles.as_mut_ptr(), &mut count) };
    if rc != ffi::nvmlReturn_enum_NVML_SUCCESS {
        return Err(MigError::Nvml(format!("listing {} instances: {}", profile.name, nvml_text(rc))));
    }
    handles.truncate(count.min(handles.len() as c_uint) as usize);
    let mut out = Vec::with_capacity(handles.len());
    for gi in handles {
        // SAFETY: all-zero is a valid value of this plain struct (a null device pointer is
        // only read by us, never dereferenced).
        let mut details: ffi::nvmlGpuInstanceInfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: `gi` was just returned by NVML for this device; `details` is writable.
        let rc = unsafe { info(gi, &mut details) };
        if rc != ffi::nvmlReturn_enum_NVML_SUCCESS {
            return Err(MigError::Nvml(format!("reading a {} instance: {}", profile.name, nvml_text(rc))));
        }
        out.push((gi, details.placement));
    }
    Ok(out)
}

/// The MIG instances on `device` now, by profile name and start (for discovery and checks).
pub fn layout_of(nvml: &Nvml, device: &Device<'_>) -> Result<Vec<MigInstanceSpec>, MigError> {
    let mut out = Vec::new();
    for profile in profiles(nvml, device)? {
        for (_, placement) in gpu_instances(nvml, device, &profile)? {
            let start = u8::try_from(placement.start).map_err(nvml_err)?;
            out.push(MigInstanceSpec { profile: profile.name.clone(), start });
        }
    }
    out.sort_by_key(|i| i.start);
    Ok(out)
}

/// The controller names a MIG grant `MIG-<GPU uuid without "GPU-">-<profile>-<start>` (it
/// knows the layout, not the driver's MIG UUIDs). Its parts: (GPU uuid, profile, start).
pub fn parse_grant_name(name: &str) -> Option<(String, String, u8)> {
    let rest = name.strip_prefix("MIG-")?;
    let mut parts = rest.rsplitn(3, '-');
    let start = parts.next()?.parse().ok()?;
    let profile = parts.next()?.to_string();
    let gpu = parts.next()?;
    (!gpu.is_empty() && !profile.is_empty()).then(|| (format!("GPU-{gpu}"), profile, start))
}

/// The MIG device at `start` on the GPU `gpu_uuid`, with its GPU instance's id, if NVML
/// knows one.
fn mig_at<'n>(nvml: &'n Nvml, gpu_uuid: &str, start: u8) -> Option<(Device<'n>, c_uint)> {
    let parent = nvml.device_by_uuid(gpu_uuid).ok()?;
    let gi_id_of = nvml.lib().nvmlDeviceGetGpuInstanceId.as_ref().ok()?;
    let gi_by_id = nvml.lib().nvmlDeviceGetGpuInstanceById.as_ref().ok()?;
    let gi_info = nvml.lib().nvmlGpuInstanceGetInfo.as_ref().ok()?;
    for i in 0..parent.mig_device_count().ok()? {
        let Ok(mig) = parent.mig_device_by_index(i) else { continue };
        let mut id: c_uint = 0;
        // SAFETY: `mig` is a live MIG device handle NVML just returned; `id` is writable.
        if unsafe { gi_id_of(mig.handle(), &mut id) } != ffi::nvmlReturn_enum_NVML_SUCCESS {
            continue;
        }
        let mut gi: ffi::nvmlGpuInstance_t = std::ptr::null_mut();
        // SAFETY: `parent` is a live device handle; `gi` is a writable out-pointer.
        if unsafe { gi_by_id(parent.handle(), id, &mut gi) } != ffi::nvmlReturn_enum_NVML_SUCCESS {
            continue;
        }
        // SAFETY: all-zero is a valid value of this plain struct; NVML fills it.
        let mut info: ffi::nvmlGpuInstanceInfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: `gi` was just returned for this device; `info` is writable.
        if unsafe { gi_info(gi, &mut info) } == ffi::nvmlReturn_enum_NVML_SUCCESS
            && info.placement.start == c_uint::from(start)
        {
            return Some((mig, id));
        }
    }
    None
}

/// The driver's UUID of the MIG device at `start` on the GPU `gpu_uuid` (what
/// `CUDA_VISIBLE_DEVICES` needs), if NVML knows one.
pub fn mig_device_uuid(nvml: &Nvml, gpu_uuid: &str, start: u8) -> Option<String> {
    mig_at(nvml, gpu_uuid, start)?.0.uuid().ok()
}

/// The process's NVML, loaded once on first use (`None`: no driver here).
fn nvml() -> Option<&'static Nvml> {
    static NVML: std::sync::OnceLock<Option<Nvml>> = std::sync::OnceLock::new();
    NVML.get_or_init(|| Nvml::init().ok()).as_ref()
}

/// The (GPU instance id, compute instance id) of the MIG instance at `start` on the GPU
/// `gpu_uuid`, which name its `nvidia-caps` capabilities (`gpu<minor>/gi<id>/ci<id>/access`);
/// `None` without a driver or such an instance.
pub fn instance_ids(gpu_uuid: &str, start: u8) -> Option<(u32, u32)> {
    let nvml = nvml()?;
    let ci_id_of = nvml.lib().nvmlDeviceGetComputeInstanceId.as_ref().ok()?;
    let (mig, gi_id) = mig_at(nvml, gpu_uuid, start)?;
    let mut ci_id: c_uint = 0;
    // SAFETY: `mig` is a live MIG device handle NVML just returned; `ci_id` is writable.
    let found = unsafe { ci_id_of(mig.handle(), &mut ci_id) } == ffi::nvmlReturn_enum_NVML_SUCCESS;
    found.then_some((gi_id, ci_id))
}

/// Each GPU's minor number (`/dev/nvidia<minor>`), by UUID, where NVML is loaded.
pub fn minor_numbers() -> Option<std::collections::BTreeMap<String, u32>> {
    let nvml = nvml()?;
    let mut minors = std::collections::BTreeMap::new();
    for i in 0..nvml.device_count().ok()? {
        let Ok(device) = nvml.device_by_index(i) else { continue };
        if let (Ok(uuid), Ok(minor)) = (device.uuid(), device.minor_number()) {
            minors.insert(uuid, minor);
        }
    }
    Some(minors)
}

/// `CUDA_VISIBLE_DEVICES` entries with the controller's MIG grant names replaced by the
/// driver's MIG UUIDs where NVML is loaded and knows them; anything else is kept as it is (a
/// simulated fleet's names, a machine without a driver).
pub fn resolve_devices(devices: &[String]) -> Vec<String> {
    if !devices.iter().any(|d| d.starts_with("MIG-")) {
        return devices.to_vec();
    }
    let Some(nvml) = nvml() else { return devices.to_vec() };
    devices
        .iter()
        .map(|d| {
            parse_grant_name(d)
                .and_then(|(gpu, _, start)| mig_device_uuid(nvml, &gpu, start))
                .unwrap_or_else(|| d.clone())
        })
        .collect()
}

/// MIG through NVML.
pub struct NvmlMig {
    nvml: Nvml,
}

impl std::fmt::Debug for NvmlMig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("NvmlMig")
    }
}

/// A driver refusal of `action` on `instance`, with NVML's reason.
fn driver_error<'a>(
    gpu: u32,
    action: &'static str,
    instance: &'a MigInstanceSpec,
) -> impl Fn(String) -> MigError + Copy + 'a {
    move |why| MigError::Driver { gpu, action, profile: instance.profile.clone(), start: instance.start, why }
}

fn nvml_err(e: impl std::fmt::Display) -> MigError {
    MigError::Nvml(e.to_string())
}

impl NvmlMig {
    /// Load NVML; a machine without the driver says so.
    pub fn new() -> Result<NvmlMig, MigError> {
        Nvml::init()
            .map(|nvml| NvmlMig { nvml })
            .map_err(|e| MigError::Nvml(format!("NVML is not available here ({e})")))
    }

    /// GPUs NVML sees.
    pub fn gpu_count(&self) -> Result<u32, MigError> {
        self.nvml.device_count().map_err(nvml_err)
    }

    /// A GPU's product name (what the catalog looks up).
    pub fn product(&self, gpu: u32) -> Result<String, MigError> {
        self.device(gpu)?.name().map_err(|e| MigError::Nvml(format!("GPU {gpu}: {e}")))
    }

    fn device(&self, gpu: u32) -> Result<Device<'_>, MigError> {
        self.nvml.device_by_index(gpu).map_err(|e| MigError::Nvml(format!("GPU {gpu}: {e}")))
    }

    fn profiles(&self, device: &Device<'_>) -> Result<Vec<Profile>, MigError> {
        profiles(&self.nvml, device)
    }

    fn gpu_instances(
        &self,
        device: &Device<'_>,
        profile: &Profile,
    ) -> Result<Vec<(ffi::nvmlGpuInstance_t, ffi::nvmlGpuInstancePlacement_t)>, MigError> {
        gpu_instances(&self.nvml, device, profile)
    }

    /// GPU `gpu` and its NVML profile called `name`.
    fn device_profile(&self, gpu: u32, name: &str) -> Result<(Device<'_>, Profile), MigError> {
        let device = self.device(gpu)?;
        let profiles = self.profiles(&device)?;
        let profile = profiles.iter().find(|p| p.name == name).cloned().ok_or_else(|| {
            let known: Vec<&str> = profiles.iter().map(|p| p.name.as_str()).collect();
            MigError::Nvml(format!("GPU {gpu} has no MIG profile {name} (NVML lists: {})", known.join(", ")))
        })?;
        Ok((device, profile))
    }

    /// NVML's placement of `profile` that starts at `start` (its size is NVML's to say).
    fn placement(
        &self,
        device: &Device<'_>,
        profile: &Profile,
        start: u8,
    ) -> Result<Option<ffi::nvmlGpuInstancePlacement_t>, MigError> {
        let get = self.nvml.lib().nvmlDeviceGetGpuInstancePossiblePlacements_v2.as_ref().map_err(nvml_err)?;
        let mut placements = vec![ffi::nvmlGpuInstancePlacement_t { start: 0, size: 0 }; 16];
        let mut count: c_uint = placements.len() as c_uint;
        // SAFETY: the buffer holds `count` placements (16: more than any GPU's slice count);
        // NVML writes at most that many and sets `count`.
        let rc = unsafe { get(device.handle(), profile.id, placements.as_mut_ptr(), &mut count) };
        if rc != ffi::nvmlReturn_enum_NVML_SUCCESS {
            return Err(MigError::Nvml(format!("placements of {}: {}", profile.name, nvml_text(rc))));
        }
        placements.truncate(count.min(16) as usize);
        Ok(placements.into_iter().find(|p| p.start == c_uint::from(start)))
    }

    /// Destroy every compute instance of a GPU instance.
    fn destroy_compute_instances(&self, gi: ffi::nvmlGpuInstance_t) -> Result<(), String> {
        let lib = self.nvml.lib();
        let info = lib.nvmlGpuInstanceGetComputeInstanceProfileInfo.as_ref().map_err(|e| e.to_string())?;
        let list = lib.nvmlGpuInstanceGetComputeInstances.as_ref().map_err(|e| e.to_string())?;
        let destroy = lib.nvmlComputeInstanceDestroy.as_ref().map_err(|e| e.to_string())?;
        for profile in 0..ffi::NVML_COMPUTE_INSTANCE_PROFILE_COUNT {
            // SAFETY: plain struct, all-zero is valid; NVML fills it.
            let mut p: ffi::nvmlComputeInstanceProfileInfo_t = unsafe { std::mem::zeroed() };
            // SAFETY: `gi` is a live GPU-instance handle; `p` is writable.
            let rc = unsafe { info(gi, profile, ffi::NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED, &mut p) };
            if rc != ffi::nvmlReturn_enum_NVML_SUCCESS {
                continue;
            }
            let mut handles: Vec<ffi::nvmlComputeInstance_t> =
                vec![std::ptr::null_mut(); p.instanceCount.max(1) as usize];
            let mut count = handles.len() as c_uint;
            // SAFETY: the buffer holds `count` handles, the most this profile can have.
            let rc = unsafe { list(gi, p.id, handles.as_mut_ptr(), &mut count) };
            if rc != ffi::nvmlReturn_enum_NVML_SUCCESS {
                return Err(nvml_text(rc));
            }
            for ci in handles.into_iter().take(count as usize) {
                // SAFETY: `ci` was just listed by NVML for this GPU instance.
                let rc = unsafe { destroy(ci) };
                if rc != ffi::nvmlReturn_enum_NVML_SUCCESS {
                    return Err(format!("compute instance: {}", nvml_text(rc)));
                }
            }
        }
        Ok(())
    }
}

impl MigBackend for NvmlMig {
    fn mig_enabled(&self, gpu: u32) -> Result<bool, MigError> {
        let mode = self.device(gpu)?.mig_mode().map_err(|e| MigError::Nvml(format!("GPU {gpu}: MIG mode: {e}")))?;
        Ok(mode.current == ffi::NVML_DEVICE_MIG_ENABLE)
    }

    fn processes(&self, gpu: u32) -> Result<u32, MigError> {
        let device = self.device(gpu)?;
        let compute = device.running_compute_processes().map_err(|e| MigError::Nvml(format!("GPU {gpu}: {e}")))?;
        Ok(compute.len() as u32)
    }

    fn instances(&self, gpu: u32) -> Result<Vec<MigInstanceSpec>, MigError> {
        layout_of(&self.nvml, &self.device(gpu)?)
    }

    fn create(&mut self, gpu: u32, instance: &MigInstanceSpec) -> Result<(), MigError> {
        let driver = driver_error(gpu, "creation", instance);
        let (device, profile) = self.device_profile(gpu, &instance.profile)?;
        let profile = &profile;
        let placement = self
            .placement(&device, profile, instance.start)?
            .ok_or_else(|| driver(format!("NVML has no placement of it at {}", instance.start)))?;
        let ci_profile = compute_profile_for(profile.slices)
            .ok_or_else(|| driver(format!("no compute-instance profile of {} slices", profile.slices)))?;
        let lib = self.nvml.lib();
        let create_gi = lib.nvmlDeviceCreateGpuInstanceWithPlacement.as_ref().map_err(nvml_err)?;
        let ci_info = lib.nvmlGpuInstanceGetComputeInstanceProfileInfo.as_ref().map_err(nvml_err)?;
        let create_ci = lib.nvmlGpuInstanceCreateComputeInstance.as_ref().map_err(nvml_err)?;
        let destroy_gi = lib.nvmlGpuInstanceDestroy.as_ref().map_err(nvml_err)?;
        let mut gi: ffi::nvmlGpuInstance_t = std::ptr::null_mut();
        // SAFETY: live device handle; `placement` is a valid struct NVML only reads; `gi` is a
        // writable out-pointer.
        let rc = unsafe { create_gi(device.handle(), profile.id, &placement, &mut gi) };
        if rc != ffi::nvmlReturn_enum_NVML_SUCCESS {
            return Err(driver(nvml_text(rc)));
        }
        // One compute instance over the whole GPU instance.
        // SAFETY: plain struct, all-zero is valid; NVML fills it.
        let mut p: ffi::nvmlComputeInstanceProfileInfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: `gi` was just created; `p` is writable.
        let mut rc = unsafe { ci_info(gi, ci_profile, ffi::NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED, &mut p) };
        if rc == ffi::nvmlReturn_enum_NVML_SUCCESS {
            let mut ci: ffi::nvmlComputeInstance_t = std::ptr::null_mut();
            // SAFETY: `gi` is live; `ci` is a writable out-pointer.
            rc = unsafe { create_ci(gi, p.id, &mut ci) };
        }
        if rc != ffi::nvmlReturn_enum_NVML_SUCCESS {
            // Leave no GPU instance without its compute instance behind.
            // SAFETY: `gi` was created above and has no compute instance.
            let undo = unsafe { destroy_gi(gi) };
            let undone = if undo == ffi::nvmlReturn_enum_NVML_SUCCESS { "" } else { " (and destroying it failed)" };
            return Err(driver(format!("compute instance: {}{undone}", nvml_text(rc))));
        }
        Ok(())
    }

    fn destroy(&mut self, gpu: u32, instance: &MigInstanceSpec) -> Result<(), MigError> {
        let driver = driver_error(gpu, "destruction", instance);
        let (device, profile) = self.device_profile(gpu, &instance.profile)?;
        let profile = &profile;
        let (gi, _) = self
            .gpu_instances(&device, profile)?
            .into_iter()
            .find(|(_, p)| p.start == c_uint::from(instance.start))
            .ok_or_else(|| driver("no such instance".into()))?;
        self.destroy_compute_instances(gi).map_err(driver)?;
        let destroy_gi = self.nvml.lib().nvmlGpuInstanceDestroy.as_ref().map_err(nvml_err)?;
        // SAFETY: `gi` was just listed by NVML and its compute instances are gone.
        let rc = unsafe { destroy_gi(gi) };
        if rc != ffi::nvmlReturn_enum_NVML_SUCCESS {
            return Err(driver(nvml_text(rc)));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nvml_profile_names_become_ours() {
        assert_eq!(profile_name("MIG 1g.10gb"), "1g.10gb");
        assert_eq!(profile_name("MIG 1g.10gb+me"), "1g.10gb+me");
        assert_eq!(profile_name(" MIG 7g.80gb "), "7g.80gb");
        assert_eq!(profile_name("3g.40gb"), "3g.40gb");
    }

    #[test]
    fn every_slice_count_a_profile_has_maps_to_a_compute_profile() {
        for slices in [1, 2, 3, 4, 6, 7, 8] {
            assert!(compute_profile_for(slices).is_some(), "{slices}");
        }
        assert_eq!(compute_profile_for(5), None);
        assert_eq!(compute_profile_for(7), Some(ffi::NVML_COMPUTE_INSTANCE_PROFILE_7_SLICE));
    }

    #[test]
    fn driver_codes_read_as_words() {
        assert!(nvml_text(ffi::nvmlReturn_enum_NVML_ERROR_IN_USE).contains("in use"));
        assert!(nvml_text(ffi::nvmlReturn_enum_NVML_ERROR_INSUFFICIENT_RESOURCES).contains("overlaps"));
        assert!(nvml_text(ffi::nvmlReturn_enum_NVML_ERROR_NO_PERMISSION).contains("root"));
        assert_eq!(nvml_text(999), "NVML error 999");
    }

    #[test]
    fn the_controllers_mig_grant_names_parse_back() {
        assert_eq!(
            parse_grant_name("MIG-1b2c3d4e-0000-1111-2222-333344445555-1g.10gb-3"),
            Some(("GPU-1b2c3d4e-0000-1111-2222-333344445555".into(), "1g.10gb".into(), 3))
        );
        assert_eq!(parse_grant_name("MIG-a-3g.40gb-4"), Some(("GPU-a".into(), "3g.40gb".into(), 4)));
        for bad in ["GPU-1234", "MIG-", "MIG-x-y", "MIG--1g.10gb-3", "MIG-a-1g.10gb-x", "MIG-a--3"] {
            assert_eq!(parse_grant_name(bad), None, "{bad}");
        }
        // Without a driver (CI), names are kept as they are.
        let names = vec!["GPU-a".to_string(), "MIG-a-1g.10gb-3".to_string()];
        if Nvml::init().is_err() {
            assert_eq!(resolve_devices(&names), names);
        }
    }

    #[test]
    fn without_a_driver_the_backend_says_so() {
        // On machines with a driver this loads; on CI (no GPU) it must fail plainly.
        if let Err(e) = NvmlMig::new() {
            assert!(e.to_string().contains("NVML is not available here"), "{e}");
        }
    }
}
