//! GPU models and MIG geometry as data.
//!
//! The key decision: the catalog is the reference file `data/gpu-catalog.json` embedded verbatim
//! (sources and `unverified` flags kept), parsed once on first use and checked for
//! self-consistency, instead of tables written in code. Updating a model is a data change with a
//! source, not a code change. The cost: a malformed edit to the file is caught by the
//! consistency tests and at load, not by the compiler.
//!
//! Runtime truth is NVML on the node; the agent should prefer what the driver reports when a GPU
//! is reachable. The engine and the simulator use this catalog.

mod load;
pub mod mig;
pub mod report;

use gantry_types::{Bytes, MilliGpu};
use std::collections::BTreeMap;
use std::sync::OnceLock;

pub use load::CatalogError;
pub use mig::{MigGeometry, MigLayoutError, MigProfile, PlacedInstance};

/// Index of a model in the catalog (dense, stable for one catalog value).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ModelId(pub u16);

/// How a model's GPUs are usually wired to each other on one node; the fleet file's default for
/// `nvlink = "auto"`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NvlinkFabric {
    /// HGX/DGX baseboard: every GPU reaches every other through NVSwitch.
    Switch,
    /// Optional NVLink bridges between pairs of cards.
    Bridge,
    /// No NVLink.
    None,
}

/// One GPU model.
#[derive(Clone, Debug)]
pub struct GpuModel {
    pub id: String,
    pub nvml_names: Vec<String>,
    pub aliases: Vec<String>,
    /// As written in the reference, e.g. `Hopper (GH100)`.
    pub architecture: String,
    pub compute_capability: (u32, u32),
    pub memory: Bytes,
    pub sm_count: Option<u32>,
    pub mig: Option<MigGeometry>,
    pub nvlink: NvlinkFabric,
    pub unverified: bool,
    pub unverified_fields: Vec<String>,
    pub sources: Vec<String>,
}

impl GpuModel {
    /// Lowercase architecture family: `hopper`, `ampere`, `volta`, ...
    pub fn architecture_family(&self) -> String {
        self.architecture.split_whitespace().next().unwrap_or("").to_ascii_lowercase()
    }

    pub fn mig_capable(&self) -> bool {
        self.mig.is_some()
    }

    /// Compute of one MIG instance of `profile` on this model.
    pub fn mig_milli(&self, profile: &MigProfile) -> MilliGpu {
        let geometry = self.mig.as_ref().expect("a MIG profile implies MIG geometry");
        MilliGpu(profile.compute_slices as u32 * 1000 / geometry.compute_slices as u32)
    }

    /// Usable memory of one MIG instance: what NVML reports for the profile (A100-80GB 1g.10gb:
    /// 9.5 GiB, not 10), so a request for 10 GiB goes to an instance that holds it. Falls back
    /// to the memory-slice share of the card for a profile built by hand (tests).
    pub fn mig_memory(&self, profile: &MigProfile) -> Bytes {
        profile.memory_reported.unwrap_or_else(|| {
            let geometry = self.mig.as_ref().expect("a MIG profile implies MIG geometry");
            Bytes(self.memory.0 / geometry.memory_slices as u64 * profile.memory_slices as u64)
        })
    }

    /// The type Slurm's `AutoDetect=nvml` gives an instance of `profile`: compute slices and
    /// the memory NVML reports rounded to whole GiB (`3g.40gb`, but `7g.79gb` for A100-80GB's
    /// 7g.80gb, whose 79.25 GiB rounds down; Slurm's gpu_nvml.c, `_handle_mig`), so Slurm's
    /// configured type is a substring of the detected one (`nvidia_a100_7g.79gb`). Where the
    /// reported memory is only estimated, the profile's own name.
    pub fn slurm_mig_type(&self, profile: &MigProfile) -> String {
        match profile.memory_reported.filter(|_| !profile.memory_estimated) {
            Some(bytes) => {
                let gib = (bytes.0 >> 20) as f64 / 1024.0;
                format!("{}g.{}gb", profile.compute_slices, gib.round() as u64)
            }
            None => profile.name.trim_end_matches("+me").to_string(),
        }
    }

    /// The profile Slurm means by a gres type on this model: the catalog's name (`3g.40gb`) or
    /// `AutoDetect=nvml`'s (`7g.79gb`, with or without its `nvidia_a100_` prefix); a `+me`
    /// profile only by its own name.
    pub fn profile_for_slurm_type(&self, ty: &str) -> Option<&MigProfile> {
        let geometry = self.mig.as_ref()?;
        if let Some(p) = geometry.profile(ty) {
            return Some(p);
        }
        let short = ty.rsplit('_').next().unwrap_or(ty);
        geometry
            .profiles
            .iter()
            .filter(|p| !p.name.ends_with("+me"))
            .find(|p| p.name.eq_ignore_ascii_case(short) || self.slurm_mig_type(p).eq_ignore_ascii_case(short))
    }

    /// Every name this model answers to (id, NVML names, aliases).
    pub fn names(&self) -> impl Iterator<Item = &str> {
        std::iter::once(self.id.as_str())
            .chain(self.nvml_names.iter().map(String::as_str))
            .chain(self.aliases.iter().map(String::as_str))
    }
}

/// All known GPU models, with lookups.
#[derive(Clone, Debug)]
pub struct Catalog {
    models: Vec<GpuModel>,
    /// Normalized name (id, NVML name, alias) → model.
    by_name: BTreeMap<String, ModelId>,
}

impl Catalog {
    /// The catalog built into this binary. Panics only if the embedded file is inconsistent,
    /// which the crate's tests rule out.
    pub fn embedded() -> &'static Catalog {
        static CATALOG: OnceLock<Catalog> = OnceLock::new();
        CATALOG.get_or_init(|| {
            Catalog::from_json(load::EMBEDDED_CATALOG, load::EMBEDDED_NVML_NAMES)
                .expect("embedded GPU catalog is self-consistent (checked by tests)")
        })
    }

    /// Parse and check a catalog from the reference JSON and the NVML-name overlay.
    pub fn from_json(catalog_json: &str, nvml_names_json: &str) -> Result<Catalog, CatalogError> {
        load::parse(catalog_json, nvml_names_json)
    }

    pub fn models(&self) -> &[GpuModel] {
        &self.models
    }

    pub fn model(&self, id: ModelId) -> &GpuModel {
        &self.models[id.0 as usize]
    }

    /// Look up by catalog id, NVML product name or alias; case and `NVIDIA `/`Tesla ` prefixes
    /// do not matter.
    pub fn lookup(&self, name: &str) -> Option<ModelId> {
        self.by_name.get(&normalize(name)).copied()
    }

    /// The models a name stands for, as a job's `--gpus NAME:N` reads it: the one model it
    /// names exactly, else every model with a name starting with it (`h100`: the three
    /// H100s), else none.
    pub fn resolve(&self, name: &str) -> Vec<ModelId> {
        if let Some(id) = self.lookup(name) {
            return vec![id];
        }
        let prefix = normalize(name);
        if prefix.is_empty() {
            return Vec::new();
        }
        (0..self.models.len())
            .map(|i| ModelId(i as u16))
            .filter(|&id| self.model(id).names().any(|n| normalize(n).starts_with(&prefix)))
            .collect()
    }

    /// Model ids close to a name that names none (for "did you mean"): those sharing the most
    /// of its letters and digits in order, if that is at least two thirds of them; at most
    /// five.
    pub fn suggest(&self, name: &str) -> Vec<&str> {
        let want: Vec<char> = normalize(name).chars().filter(char::is_ascii_alphanumeric).collect();
        let scored: Vec<(usize, &str)> =
            self.models.iter().map(|m| (shared_in_order(&want, &normalize(&m.id)), m.id.as_str())).collect();
        let best = scored.iter().map(|(score, _)| *score).max().unwrap_or(0);
        if best == 0 || best * 3 < want.len() * 2 {
            return Vec::new();
        }
        scored.into_iter().filter(|(score, _)| *score == best).take(5).map(|(_, id)| id).collect()
    }

    /// Models answering to a glob pattern on any of their names.
    pub fn matching(&self, pattern: &gantry_types::ModelPattern) -> Vec<ModelId> {
        (0..self.models.len())
            .map(|i| ModelId(i as u16))
            .filter(|&id| self.model(id).names().any(|n| pattern.matches(n)))
            .collect()
    }

    /// Does any model in the catalog offer this MIG profile name?
    pub fn any_model_has_profile(&self, profile: &str) -> bool {
        self.models.iter().any(|m| m.mig.as_ref().is_some_and(|g| g.profile(profile).is_some()))
    }

    /// The catalog profile name a Slurm gres type stands for on the first model that has it
    /// (`GpuModel::profile_for_slurm_type`), for accounting rows that do not say the model.
    pub fn profile_for_slurm_type(&self, ty: &str) -> Option<String> {
        self.models.iter().find_map(|m| m.profile_for_slurm_type(ty).map(|p| p.name.clone()))
    }

    /// A copy of this catalog that also knows `names` as generic models: no MIG, no NVLink,
    /// unknown architecture and memory (16 GiB assumed). For traces whose GPU models are
    /// undisclosed (the Alibaba trace's G1/G2/G3) or absent from the catalog: they are
    /// modelled as plain shareable GPUs rather than refused. Names already known are kept as
    /// they are.
    pub fn with_generic_models<'a>(&self, names: impl IntoIterator<Item = &'a str>) -> Catalog {
        let mut catalog = self.clone();
        for name in names {
            if catalog.lookup(name).is_some() {
                continue;
            }
            let id = ModelId(catalog.models.len() as u16);
            catalog.models.push(GpuModel {
                id: name.to_string(),
                nvml_names: Vec::new(),
                aliases: Vec::new(),
                architecture: "generic".into(),
                compute_capability: (0, 0),
                memory: Bytes::gib(16),
                sm_count: None,
                mig: None,
                nvlink: NvlinkFabric::None,
                unverified: true,
                unverified_fields: vec!["generic model: nothing is known of it but its name".into()],
                sources: Vec::new(),
            });
            catalog.by_name.insert(normalize(name), id);
        }
        catalog
    }

    /// Largest memory of any model (for "larger than any GPU" checks).
    pub fn max_memory(&self) -> Bytes {
        self.models.iter().map(|m| m.memory).max().unwrap_or_default()
    }
}

/// Lowercase, `NVIDIA `/`Tesla ` prefix dropped, spaces and underscores as dashes.
/// How many of `want`'s characters appear in `name` in order (a longest common subsequence
/// of a short query: cheap, and good enough to suggest).
fn shared_in_order(want: &[char], name: &str) -> usize {
    let name: Vec<char> = name.chars().collect();
    let mut row = vec![0usize; name.len() + 1];
    for &w in want {
        let mut diagonal = 0;
        for (j, &n) in name.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = if w == n { diagonal + 1 } else { above.max(row[j]) };
            diagonal = above;
        }
    }
    row[name.len()]
}

pub(crate) fn normalize(name: &str) -> String {
    let lower = name.trim().to_ascii_lowercase();
    let stripped = lower.strip_prefix("nvidia ").or_else(|| lower.strip_prefix("tesla ")).unwrap_or(&lower);
    stripped.replace([' ', '_'], "-")
}

#[cfg(test)]
#[allow(clippy::type_complexity)] // table-driven cases spell their row types out
mod tests;
