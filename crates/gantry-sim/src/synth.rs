//! A seeded synthetic workload: a multi-tenant mix of training gangs, single-node training,
//! evaluation, inference, MPS services and notebooks, written as a native trace (JSON lines)
//! for `gantry sim --trace`. Same fleet, options and seed ⇒ the same bytes.
//!
//! Two things make it useful rather than random: every job it writes can run on the given
//! fleet (a drawn shape the empty fleet cannot hold is drawn again, so no job waits forever
//! by construction), and arrivals are a Poisson process whose rate is set so that the offered
//! GPU load — Σ milli-GPU × duration over the span — is `load` × the fleet's capacity, with
//! each job's milli-GPU measured by placing it on the empty fleet (gantry's own accounting,
//! MIG and shares included).

use gantry_catalog::Catalog;
use gantry_engine::rng::SeededRng;
use gantry_engine::{Engine, EngineConfig};
use gantry_spec::parse_trace_line;
use gantry_types::Fleet;
use serde_json::{Value, json};

/// What to generate.
#[derive(Clone, Debug, PartialEq)]
pub struct SynthConfig {
    pub jobs: u32,
    pub seed: u64,
    /// Tenants `team-0` .. `team-{n-1}`; each job's queue is its tenant.
    pub tenants: u32,
    /// Relative submission rates of the tenants (missing ones weigh 1); empty = equal.
    pub tenant_mix: Vec<u32>,
    /// Offered GPU load as a share of the fleet's capacity (0.9 = 90 %).
    pub load: f64,
    pub mix: Mix,
    /// Spread the arrivals over this many days instead (the load then follows from the mix:
    /// [`generate_with_load`] says what it is).
    pub days: Option<f64>,
}

/// Which job mix to draw from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Mix {
    /// Training gangs, training, evaluation, inference, MPS services, notebooks.
    #[default]
    Default,
    /// Short whole-GPU batch jobs (1, 2 or 4 GPUs, about an hour): many small jobs per GPU
    /// of fleet, so fairness over hours can be measured without gangs blocking the view.
    Batch,
}

impl std::str::FromStr for Mix {
    type Err = String;
    fn from_str(s: &str) -> Result<Mix, String> {
        match s {
            "default" => Ok(Mix::Default),
            "batch" => Ok(Mix::Batch),
            other => Err(format!("unknown mix {other:?} (default, batch)")),
        }
    }
}

impl Default for SynthConfig {
    fn default() -> Self {
        SynthConfig {
            jobs: 1000,
            seed: 42,
            tenants: 4,
            tenant_mix: Vec::new(),
            load: 0.9,
            mix: Mix::Default,
            days: None,
        }
    }
}

/// One kind of job in the mix.
struct Kind {
    name: &'static str,
    weight: u64,
    /// Median duration (s) of a log-normal with this σ.
    median_s: f64,
    sigma: f64,
    /// Utilization drawn uniformly in this range.
    util: (f64, f64),
}

/// The default mix (weights sum to 100).
const KINDS: &[Kind] = &[
    Kind { name: "train-gang", weight: 3, median_s: 4.0 * 3600.0, sigma: 0.8, util: (0.75, 0.95) },
    Kind { name: "train", weight: 14, median_s: 2.0 * 3600.0, sigma: 0.9, util: (0.6, 0.95) },
    Kind { name: "eval", weight: 12, median_s: 20.0 * 60.0, sigma: 0.6, util: (0.5, 0.9) },
    Kind { name: "infer", weight: 31, median_s: 60.0 * 60.0, sigma: 1.0, util: (0.15, 0.6) },
    Kind { name: "svc-mps", weight: 15, median_s: 3.0 * 3600.0, sigma: 0.7, util: (0.3, 0.7) },
    Kind { name: "notebook", weight: 25, median_s: 45.0 * 60.0, sigma: 0.8, util: (0.02, 0.3) },
];

/// The batch mix (weights sum to 100).
const BATCH_KINDS: &[Kind] = &[
    Kind { name: "batch-1", weight: 50, median_s: 3600.0, sigma: 0.5, util: (0.6, 0.95) },
    Kind { name: "batch-2", weight: 30, median_s: 3600.0, sigma: 0.5, util: (0.6, 0.95) },
    Kind { name: "batch-4", weight: 20, median_s: 3600.0, sigma: 0.5, util: (0.6, 0.95) },
];

/// Draws of a shape before giving up on a kind the fleet cannot hold.
const DRAWS_MAX: u32 = 64;

struct Draw<'a>(&'a mut SeededRng);

impl Draw<'_> {
    fn unit(&mut self) -> f64 {
        (self.0.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
    fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.0.below(items.len() as u64) as usize]
    }
    /// Standard normal (Box–Muller).
    fn normal(&mut self) -> f64 {
        let u1 = self.unit().max(1e-12);
        let u2 = self.unit();
        (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
    }
}

/// The job table (workload format, as JSON) for one draw of `kind`.
fn shape(kind: &str, name: &str, tenant: &str, d: &mut Draw<'_>) -> Value {
    match kind {
        "train-gang" => json!({
            "name": name, "queue": tenant,
            "task": [{"name": "worker", "replicas": d.pick(&[2, 2, 3, 4]), "cpu": 32, "memory": "256GiB",
                      "gpu": {"count": 8}, "topology": {"within": "rack"}}]
        }),
        "train" => {
            let count = d.pick(&[1, 2, 2, 4, 4, 8]);
            let mut job = json!({"name": name, "queue": tenant, "cpu": 8 * count, "memory": format!("{}GiB", 64 * count),
                                 "gpu": {"count": count}});
            if count > 1 {
                job["topology"] = json!({"within": "nvlink"});
            }
            job
        }
        "eval" => json!({"name": name, "queue": tenant, "cpu": 8, "memory": "64GiB", "gpu": {"count": 1}}),
        "batch-1" | "batch-2" | "batch-4" => {
            let count: u32 = kind[6..].parse().expect("batch-N");
            json!({"name": name, "queue": tenant, "cpu": 4 * count, "memory": format!("{}GiB", 32 * count),
                   "gpu": {"count": count}})
        }
        "infer" => json!({"name": name, "queue": tenant, "cpu": 4, "memory": "32GiB",
                          "gpu": {"memory": d.pick(&["8GiB", "10GiB", "16GiB", "20GiB", "40GiB"])}}),
        "svc-mps" => json!({"name": name, "queue": tenant, "cpu": 2, "memory": "16GiB",
                            "gpu": {"share": d.pick(&[250, 250, 500]), "memory": "8GiB", "mode": "mps"}}),
        _ => json!({"name": name, "queue": tenant, "cpu": 1, "memory": "8GiB",
                    "gpu": {"share": 125, "memory": "4GiB", "mode": "time-slice"}}),
    }
}

/// A tenant drawn by the configured mix.
fn pick_tenant(rng: &mut SeededRng, config: &SynthConfig) -> u32 {
    if config.tenant_mix.is_empty() {
        return rng.below(config.tenants as u64) as u32;
    }
    let weight = |t: u32| config.tenant_mix.get(t as usize).copied().unwrap_or(1) as u64;
    let total: u64 = (0..config.tenants).map(weight).sum();
    let mut draw = rng.below(total.max(1));
    for t in 0..config.tenants {
        if draw < weight(t) {
            return t;
        }
        draw -= weight(t);
    }
    config.tenants - 1
}

/// Generate the trace as JSON lines (one per job, in arrival order, each ending in `\n`).
pub fn generate(fleet: &Fleet, catalog: &'static Catalog, config: &SynthConfig) -> Result<String, crate::SimError> {
    generate_with_load(fleet, catalog, config).map(|(text, _)| text)
}

/// [`generate`], and the GPU load the trace offers on average (its rate × the mix's mean
/// milli-GPU-seconds ÷ the fleet's capacity): `load`, or what `days` makes of it.
pub fn generate_with_load(
    fleet: &Fleet,
    catalog: &'static Catalog,
    config: &SynthConfig,
) -> Result<(String, f64), crate::SimError> {
    validate_config(config)?;
    let mut engine = Engine::new(fleet, catalog, EngineConfig::default()).map_err(|e| e.to_string())?;
    let capacity = engine.state().gpus.len() as f64 * 1000.0;
    if capacity == 0.0 {
        return Err("the fleet has no GPUs".into());
    }
    let mut rng = SeededRng::new(config.seed);
    let drawn = draw_jobs(&mut engine, catalog, config, &mut rng)?;
    // Poisson arrivals at the rate that offers `load` × capacity on average, or that spreads
    // the jobs over `days`.
    let mean_offered = drawn.iter().map(|(_, o)| o).sum::<f64>() / drawn.len() as f64;
    let rate = match config.days {
        Some(days) => f64::from(config.jobs) / (days * 86_400.0),
        None => config.load * capacity / mean_offered.max(1.0),
    }; // jobs per second
    let out = stamp_arrivals(drawn, rate, &mut rng);
    Ok((out, rate * mean_offered / capacity))
}

/// Reject a configuration whose counts, mix, load or span are out of range.
fn validate_config(config: &SynthConfig) -> Result<(), crate::SimError> {
    if config.jobs == 0 || config.tenants == 0 {
        return Err("--jobs and --tenants must be at least 1".into());
    }
    if config.tenant_mix.len() > config.tenants as usize
        || config.tenant_mix.iter().all(|&w| w == 0) && !config.tenant_mix.is_empty()
    {
        return Err(format!(
            "--tenant-mix gives {} weights for {} tenants (or all zero)",
            config.tenant_mix.len(),
            config.tenants
        )
        .into());
    }
    if !(config.load.is_finite() && config.load > 0.0 && config.load <= 100.0) {
        return Err(format!("--load {} must be in (0, 100]", config.load).into());
    }
    if let Some(days) = config.days
        && !(days.is_finite() && days > 0.0 && days <= 3650.0)
    {
        return Err(format!("--days {days} must be in (0, 3650]").into());
    }
    Ok(())
}

/// The `config.jobs` job lines (without arrival), each with the GPU milli × seconds it
/// offers, skipping kinds the fleet cannot hold.
fn draw_jobs(
    engine: &mut Engine,
    catalog: &'static Catalog,
    config: &SynthConfig,
    rng: &mut SeededRng,
) -> Result<Vec<(Value, f64)>, crate::SimError> {
    let kinds = match config.mix {
        Mix::Default => KINDS,
        Mix::Batch => BATCH_KINDS,
    };
    let total_weight: u64 = kinds.iter().map(|k| k.weight).sum();
    // (job line without arrival, GPU milli × seconds it offers)
    let mut drawn: Vec<(Value, f64)> = Vec::with_capacity(config.jobs as usize);
    let mut unfit: Vec<&str> = Vec::new();
    while drawn.len() < config.jobs as usize {
        let i = drawn.len();
        let kind = pick_kind(rng, kinds, total_weight);
        if unfit.contains(&kind.name) {
            continue;
        }
        match draw_job(engine, catalog, config, rng, kind, i)? {
            Some(p) => drawn.push(p),
            None => unfit.push(kind.name),
        }
        if unfit.len() == kinds.len() {
            return Err("no job of the synthetic mix fits this fleet".into());
        }
    }
    Ok(drawn)
}

/// A kind drawn by weight.
fn pick_kind<'k>(rng: &mut SeededRng, kinds: &'k [Kind], total_weight: u64) -> &'k Kind {
    let mut pick = rng.below(total_weight);
    kinds
        .iter()
        .find(|k| {
            if pick < k.weight {
                return true;
            }
            pick -= k.weight;
            false
        })
        .expect("weights cover the draw")
}

/// Job `i` of `kind` (tenant, duration, utilization, then up to [`DRAWS_MAX`] shapes) with
/// the GPU milli × seconds it offers, or `None` when no shape drawn fits the empty fleet.
fn draw_job(
    engine: &mut Engine,
    catalog: &'static Catalog,
    config: &SynthConfig,
    rng: &mut SeededRng,
    kind: &Kind,
    i: usize,
) -> Result<Option<(Value, f64)>, crate::SimError> {
    let mut d = Draw(rng);
    let tenant = format!("team-{}", pick_tenant(d.0, config));
    let duration = (kind.median_s * (kind.sigma * d.normal()).exp()).round().clamp(60.0, 14.0 * 86_400.0) as u64;
    let utilization = ((kind.util.0 + (kind.util.1 - kind.util.0) * d.unit()) * 100.0).round() / 100.0;
    for _ in 0..DRAWS_MAX {
        let job = shape(kind.name, &format!("{}-{i:06}", kind.name), &tenant, &mut d);
        let line = json!({"arrival_s": 0, "duration_s": duration, "utilization": utilization, "job": job});
        let parsed = parse_trace_line(1, &line.to_string(), catalog).map_err(|e| format!("{}: {e}", kind.name))?;
        let compiled = engine.compile(&parsed[0].job).map_err(|e| e.to_string())?;
        let before = engine.state().used_milli();
        if let Ok(id) = engine.place(&compiled) {
            let milli = engine.state().used_milli() - before;
            engine.release(id).map_err(|e| e.to_string())?;
            return Ok(Some((line, milli as f64 * duration as f64)));
        }
    }
    Ok(None)
}

/// The drawn lines as JSON lines, stamped with Poisson arrivals at `rate` jobs per second.
fn stamp_arrivals(drawn: Vec<(Value, f64)>, rate: f64, rng: &mut SeededRng) -> String {
    let mut t = 0.0f64;
    let mut out = String::new();
    for (mut line, _) in drawn {
        let u = (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
        t += -(1.0 - u).ln() / rate;
        line["arrival_s"] = json!(t.floor() as u64);
        out.push_str(&line.to_string());
        out.push('\n');
    }
    out
}
