//! The sharing-mode advisor: for a job's shape — how much of a card it needs, what it is for,
//! how bursty, how isolated, how latency-sensitive, how trusted — which unit to ask for: whole
//! GPUs, a MIG profile, an MPS share or a time-slice. It follows the decision matrix gantry is
//! built on:
//!
//! 1. larger than a card → whole GPUs, on one NVLink domain;
//! 2. training → whole GPUs;
//! 3. development and notebooks → a time-slice;
//! 4. bursty → never a hard MIG slice (a slice caps the burst): a time-slice, or a whole GPU
//!    when it needs half a card or more;
//! 5. production (latency-sensitive or needing hard isolation) inference → a MIG instance;
//! 6. trusted, steady inference → an MPS share;
//! 7. anything else that fits in part of a card → MIG where the model has it, else a share.
//!
//! Isolation bounds every rule: `hard` never gets a shared unit (MPS or time-slice), `soft`
//! never a time-slice; where the rule's unit is not allowed, the next one that is (a whole GPU
//! last).
//!
//! Pure: the catalog answers which MIG profiles a model has.

use gantry_catalog::{Catalog, GpuModel};
use gantry_types::Isolation;

pub use gantry_types::Purpose;

/// A job's shape, as the advisor takes it.
#[derive(Clone, Debug, PartialEq)]
pub struct Shape {
    pub purpose: Purpose,
    /// Compute it needs, in cards (0.25 = a quarter of one; 4 = four).
    pub cards: f64,
    /// GPU memory it needs per card's worth, bytes (`None`: as much as the compute share).
    pub memory: Option<u64>,
    pub bursty: bool,
    pub isolation: Isolation,
    pub latency_sensitive: bool,
    /// Its code is trusted to share an MPS server (no fault isolation between clients).
    pub trusted: bool,
}

impl Shape {
    /// A memory-only request's shape on `model`, from its hint: the memory as a share of the
    /// card (what the engine and the planner ask the advisor for such a request).
    pub fn of_memory_request(
        memory: u64,
        hint: &gantry_types::UnitHint,
        isolation: Isolation,
        model: &GpuModel,
    ) -> Shape {
        Shape {
            purpose: hint.purpose,
            cards: (memory as f64 / model.memory.0.max(1) as f64).clamp(0.001, 1.0),
            memory: Some(memory),
            bursty: hint.bursty,
            isolation,
            latency_sensitive: hint.latency_sensitive,
            trusted: hint.trusted,
        }
    }
}

/// The unit to ask for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Unit {
    Whole { count: u32, nvlink: bool },
    Mig { profile: String },
    Mps { share_milli: u32, memory: u64 },
    TimeSlice { share_milli: u32, memory: u64 },
}

impl Unit {
    /// The GPU mode that hands out this unit.
    pub fn mode(&self) -> crate::state::ModeKind {
        use crate::state::ModeKind;
        match self {
            Unit::Whole { .. } => ModeKind::Whole,
            Unit::Mig { .. } => ModeKind::Mig,
            Unit::Mps { .. } => ModeKind::Mps,
            Unit::TimeSlice { .. } => ModeKind::TimeSlice,
        }
    }

    /// The workload file's `gpu = …` line (and topology) for this unit.
    pub fn spec(&self) -> String {
        match self {
            Unit::Whole { count, nvlink: true } => {
                format!("gpu = {{ count = {count} }}\ntopology = {{ within = \"nvlink\", required = true }}")
            }
            Unit::Whole { count, nvlink: false } => format!("gpu = {{ count = {count} }}"),
            Unit::Mig { profile } => format!("gpu = {{ mig = \"{profile}\" }}"),
            Unit::Mps { share_milli, memory } => {
                format!("gpu = {{ share = {share_milli}, memory = \"{}\", mode = \"mps\" }}", gib(*memory))
            }
            Unit::TimeSlice { share_milli, memory } => {
                format!("gpu = {{ share = {share_milli}, memory = \"{}\", mode = \"time-slice\" }}", gib(*memory))
            }
        }
    }

    pub fn name(&self) -> &'static str {
        match self {
            Unit::Whole { .. } => "whole",
            Unit::Mig { .. } => "mig",
            Unit::Mps { .. } => "mps",
            Unit::TimeSlice { .. } => "time-slice",
        }
    }
}

fn gib(bytes: u64) -> String {
    format!("{}GiB", bytes.div_ceil(1 << 30))
}

/// The advice: the unit, the rule that chose it, and what else was weighed.
#[derive(Clone, Debug, PartialEq)]
pub struct Advice {
    pub unit: Unit,
    pub why: String,
    /// Other units and why not.
    pub not: Vec<(String, String)>,
}

/// Why a shape cannot be advised on.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AdviceError {
    #[error("size {0}: give the compute it needs in cards, more than 0 (0.25 = a quarter of one, 4 = four)")]
    BadSize(String),
    #[error("memory {need} GiB per task does not fit on a {model} ({has} GiB)")]
    MemoryTooLarge { need: u64, model: String, has: u64 },
}

/// Compute share in milli-GPU for `cards`, rounded up to a multiple of 10 (MPS thread
/// percentages are whole percents).
fn share_milli(cards: f64) -> u32 {
    ((cards * 1000.0).ceil() as u32).div_ceil(10) * 10
}

/// A soft share (time-slice, or MPS) the job's isolation allows: `None` means only a MIG
/// instance or a whole GPU will do.
fn allowed_share(shape: &Shape, share_milli: u32, memory: u64) -> Option<Unit> {
    match shape.isolation {
        Isolation::None => Some(Unit::TimeSlice { share_milli, memory }),
        Isolation::Soft if shape.trusted => Some(Unit::Mps { share_milli, memory }),
        _ => None,
    }
}

/// The smallest MIG profile of `model` with at least `cards` of compute and `memory` bytes.
fn smallest_profile(model: &GpuModel, cards: f64, memory: u64) -> Option<String> {
    let geometry = model.mig.as_ref()?;
    geometry
        .profiles
        .iter()
        .filter(|p| !p.media_extensions && !p.name.contains('c'))
        .filter(|p| f64::from(model.mig_milli(p).0) >= cards * 1000.0 - 1e-6 && model.mig_memory(p).0 >= memory)
        .min_by_key(|p| (p.compute_slices, p.memory_slices))
        .map(|p| p.name.clone())
}

/// Advise on `shape` for GPUs of `model`.
pub fn advise(shape: &Shape, model: &GpuModel) -> Result<Advice, AdviceError> {
    if !(shape.cards.is_finite() && shape.cards > 0.0) {
        return Err(AdviceError::BadSize(shape.cards.to_string()));
    }
    let card_memory = model.memory.0;
    let memory = shape.memory.unwrap_or_else(|| (card_memory as f64 * shape.cards.min(1.0)).ceil() as u64);
    if memory > card_memory {
        return Err(AdviceError::MemoryTooLarge {
            need: memory.div_ceil(1 << 30),
            model: model.id.clone(),
            has: card_memory >> 30,
        });
    }
    if shape.cards > 1.0 {
        let count = shape.cards.ceil() as u32;
        let why = format!("it needs more than a card ({} cards): whole GPUs, on one NVLink domain", shape.cards);
        return Ok(Advice { unit: whole(count), why, not: Vec::new() });
    }
    let part = Part {
        shape,
        model,
        memory,
        share: share_milli(shape.cards),
        mig: smallest_profile(model, shape.cards, memory),
    };
    Ok(match shape.purpose {
        Purpose::Training => {
            let not = vec![(
                "mig / mps / time-slice".into(),
                "training steps stall on shared SMs and memory bandwidth".into(),
            )];
            Advice { unit: whole(1), why: "training gets whole GPUs".into(), not }
        }
        Purpose::Development => part.for_development(),
        Purpose::Inference | Purpose::Batch if shape.bursty => part.for_bursty(),
        Purpose::Inference | Purpose::Batch => part.for_service_or_batch(),
    })
}

/// `count` whole GPUs, NVLink-close when more than one.
fn whole(count: u32) -> Unit {
    Unit::Whole { count, nvlink: count > 1 }
}

/// A shape of at most one card, with what it could have: its memory, its MPS share, the
/// smallest MIG profile that holds it.
struct Part<'a> {
    shape: &'a Shape,
    model: &'a GpuModel,
    memory: u64,
    share: u32,
    mig: Option<String>,
}

impl Part<'_> {
    /// Development shares a card (a time-slice where isolation allows); else a MIG instance;
    /// else a whole GPU.
    fn for_development(&self) -> Advice {
        let mut not = vec![("whole".into(), "a notebook leaves a card idle most of the time".into())];
        if let Some(unit) = allowed_share(self.shape, self.share, self.memory) {
            not.push(("mig".into(), "a hard slice idles between a notebook's bursts".into()));
            return Advice {
                unit,
                why: "development and notebooks share a card (a time-slice where isolation allows): each gets it all when the others are idle".into(),
                not,
            };
        }
        if let Some(profile) = self.mig.clone() {
            return Advice {
                unit: Unit::Mig { profile },
                why: "development, but its isolation rules out a shared card: a MIG instance".into(),
                not,
            };
        }
        Advice { unit: whole(1), why: "development needing isolation, no fitting MIG profile: a whole GPU".into(), not }
    }

    /// Bursty work never gets a hard MIG slice: a whole GPU from half a card on, else a shared
    /// card where isolation allows.
    fn for_bursty(&self) -> Advice {
        let not =
            vec![("mig".into(), "a bursty job is never given a hard MIG slice: the slice caps every burst".into())];
        if self.shape.cards >= 0.5 {
            return Advice {
                unit: whole(1),
                why: "bursty and needing half a card or more: a whole GPU absorbs the bursts".into(),
                not,
            };
        }
        match allowed_share(self.shape, self.share, self.memory) {
            Some(unit) => Advice {
                unit,
                why: "bursty: a shared card lets the bursts use all of it while the others are idle".into(),
                not,
            },
            None => Advice {
                unit: whole(1),
                why: "bursty and needing hard isolation: a whole GPU (never a MIG slice)".into(),
                not,
            },
        }
    }

    /// Steady inference or batch work: production inference on a MIG instance, trusted work
    /// under MPS, batch of half a card or more on a whole GPU, the rest on a MIG instance or a
    /// shared card.
    fn for_service_or_batch(&self) -> Advice {
        let (shape, model) = (self.shape, self.model);
        let mut not = Vec::new();
        let production = shape.latency_sensitive || shape.isolation == Isolation::Hard;
        if shape.purpose == Purpose::Inference && production {
            if let Some(profile) = self.mig.clone() {
                not.push((
                    "mps".into(),
                    "no fault isolation and shared memory bandwidth: latency varies with neighbours".into(),
                ));
                return Advice {
                    unit: Unit::Mig { profile },
                    why: "production inference gets a MIG instance: its own SMs, memory and L2, steady latency".into(),
                    not,
                };
            }
            not.push(("mig".into(), format!("{} has no MIG profile this size", model.id)));
            if shape.isolation == Isolation::Hard {
                let why = "hard isolation without a fitting MIG profile: a whole GPU".into();
                return Advice { unit: whole(1), why, not };
            }
        }
        if shape.trusted && shape.isolation != Isolation::Hard {
            not.push(("mig".into(), "a fixed slice rounds the share up to the next profile".into()));
            return Advice {
                unit: Unit::Mps { share_milli: self.share, memory: self.memory },
                why: "trusted, steady work shares a card under MPS: an SM share and a memory limit, no slice rounding"
                    .into(),
                not,
            };
        }
        if shape.cards >= 0.5 && shape.purpose == Purpose::Batch {
            return Advice { unit: whole(1), why: "batch work of half a card or more: a whole GPU".into(), not };
        }
        self.mig_or_shared(not)
    }

    /// Part of a card with no stronger reason: a MIG instance isolates it; without a fitting
    /// profile, a shared card where isolation allows, else a whole GPU.
    fn mig_or_shared(&self, mut not: Vec<(String, String)>) -> Advice {
        let model = self.model;
        if let Some(profile) = self.mig.clone() {
            not.push(("mps".into(), "untrusted code should not share an MPS server (no fault isolation)".into()));
            return Advice {
                unit: Unit::Mig { profile },
                why: "part of a card, not trusted to share MPS: a MIG instance isolates it".into(),
                not,
            };
        }
        match allowed_share(self.shape, self.share, self.memory) {
            Some(unit) => Advice {
                unit,
                why: format!("part of a card on a {} (no fitting MIG profile): a shared card", model.id),
                not,
            },
            None => Advice {
                unit: whole(1),
                why: format!(
                    "part of a card on a {} (no fitting MIG profile), needing isolation: a whole GPU",
                    model.id
                ),
                not,
            },
        }
    }
}

/// The catalog model to advise for: `name` (an id, alias or NVML name), or H100-SXM5-80GB.
pub fn model<'c>(catalog: &'c Catalog, name: Option<&str>) -> Result<&'c GpuModel, crate::EngineError> {
    let name = name.unwrap_or("H100-SXM5-80GB");
    catalog
        .lookup(name)
        .map(|id| catalog.model(id))
        .ok_or_else(|| crate::EngineError::Fleet(format!("unknown GPU model {name:?}: `gantry catalog` lists them")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(purpose: Purpose, cards: f64) -> Shape {
        Shape {
            purpose,
            cards,
            memory: None,
            bursty: false,
            isolation: Isolation::None,
            latency_sensitive: false,
            trusted: false,
        }
    }

    fn unit(s: &Shape, model: &str) -> Unit {
        let catalog = Catalog::embedded();
        advise(s, self::model(catalog, Some(model)).expect("model")).expect("advice").unit
    }

    #[test]
    fn the_decision_matrix_case_by_case() {
        let h100 = "H100-SXM5-80GB";
        let cases: Vec<(&str, Shape, Unit)> = vec![
            (
                "larger than a card: whole GPUs on NVLink",
                shape(Purpose::Inference, 2.5),
                Unit::Whole { count: 3, nvlink: true },
            ),
            ("training: a whole GPU", shape(Purpose::Training, 0.3), Unit::Whole { count: 1, nvlink: false }),
            (
                "a notebook: a time-slice",
                shape(Purpose::Development, 0.125),
                Unit::TimeSlice { share_milli: 130, memory: 10_737_418_240 },
            ),
            (
                "production inference: MIG",
                Shape { latency_sensitive: true, memory: Some(18 << 30), ..shape(Purpose::Inference, 0.25) },
                Unit::Mig { profile: "2g.20gb".into() },
            ),
            (
                "bursty production inference: never MIG",
                Shape { latency_sensitive: true, bursty: true, ..shape(Purpose::Inference, 0.25) },
                Unit::TimeSlice { share_milli: 250, memory: 21_474_836_480 },
            ),
            (
                "a big bursty job: a whole GPU",
                Shape { bursty: true, ..shape(Purpose::Batch, 0.6) },
                Unit::Whole { count: 1, nvlink: false },
            ),
            (
                "trusted steady inference: MPS",
                Shape { trusted: true, memory: Some(5 << 30), ..shape(Purpose::Inference, 0.2) },
                Unit::Mps { share_milli: 200, memory: 5 << 30 },
            ),
            (
                "untrusted steady small work: MIG",
                Shape { memory: Some(9 << 30), ..shape(Purpose::Batch, 0.1) },
                Unit::Mig { profile: "1g.10gb".into() },
            ),
        ];
        for (name, s, want) in cases {
            assert_eq!(unit(&s, h100), want, "{name}");
        }
        // Isolation bounds the rules: a hard-isolated notebook gets a MIG slice, a bursty one a card.
        let hard_dev = Shape { isolation: Isolation::Hard, memory: Some(9 << 30), ..shape(Purpose::Development, 0.1) };
        assert_eq!(unit(&hard_dev, h100), Unit::Mig { profile: "1g.10gb".into() });
        let hard_bursty = Shape { isolation: Isolation::Hard, bursty: true, ..shape(Purpose::Inference, 0.2) };
        assert_eq!(unit(&hard_bursty, h100), Unit::Whole { count: 1, nvlink: false });
        let soft_trusted_bursty =
            Shape { isolation: Isolation::Soft, trusted: true, bursty: true, ..shape(Purpose::Inference, 0.2) };
        assert_eq!(unit(&soft_trusted_bursty, h100).name(), "mps");
        // A model without MIG: production inference that needs hard isolation gets a card.
        let l4 = Shape { isolation: Isolation::Hard, ..shape(Purpose::Inference, 0.25) };
        assert_eq!(unit(&l4, "L4-24GB"), Unit::Whole { count: 1, nvlink: false });
    }

    #[test]
    fn bad_shapes_are_refused() {
        let catalog = Catalog::embedded();
        let h100 = model(catalog, None).expect("default model");
        assert!(matches!(advise(&shape(Purpose::Batch, 0.0), h100), Err(AdviceError::BadSize(_))));
        assert!(matches!(advise(&shape(Purpose::Batch, f64::NAN), h100), Err(AdviceError::BadSize(_))));
        let huge = Shape { memory: Some(200 << 30), ..shape(Purpose::Inference, 0.5) };
        assert!(matches!(advise(&huge, h100), Err(AdviceError::MemoryTooLarge { .. })));
        assert!(model(catalog, Some("Z9000")).is_err());
    }

    #[test]
    fn advice_prints_as_a_workload_line() {
        assert_eq!(Unit::Mig { profile: "1g.10gb".into() }.spec(), "gpu = { mig = \"1g.10gb\" }");
        assert_eq!(
            Unit::Mps { share_milli: 250, memory: 5 << 30 }.spec(),
            "gpu = { share = 250, memory = \"5GiB\", mode = \"mps\" }"
        );
        assert!(Unit::Whole { count: 4, nvlink: true }.spec().contains("within = \"nvlink\""));
    }
}
