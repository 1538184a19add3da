//! The scenario of the MIG day: a fleet of one MIG-capable model, the job shapes, seeded
//! arrivals whose mix shifts over the day, and the static layouts the planner is compared with.

use super::DayConfig;
use gantry_catalog::Catalog;
use gantry_engine::rng::SeededRng;
use gantry_types::{Fleet, GpuMode, Job, MigInstanceSpec};
use std::collections::BTreeMap;

/// Inference deployments: (MIG profile, share of arrivals).
pub(super) const INFERENCE_MIX: [(&str, u64); 3] = [("1g.10gb", 50), ("2g.20gb", 30), ("3g.40gb", 20)];
/// Training jobs: (whole GPUs, share of arrivals).
const TRAINING_MIX: [(u32, u64); 4] = [(1, 30), (2, 30), (4, 25), (8, 15)];
const INFERENCE_MEAN_S: f64 = 5400.0;
const TRAINING_MEAN_S: f64 = 10800.0;
const INFERENCE_PATIENCE_S: u64 = 600;
const TRAINING_PATIENCE_S: u64 = 7200;
/// The other kind's rate, as a fraction of its peak, outside its phase.
const OFF_PHASE: f64 = 0.15;

/// One arrival of the scenario.
#[derive(Clone, Debug)]
pub struct DayJob {
    pub arrival_s: u64,
    pub duration_s: u64,
    pub patience_s: u64,
    /// Compute it holds, milli-GPU (a MIG instance: its slices' share of the card).
    pub milli: u64,
    /// Index into the shapes ([`Scenario::shapes`]).
    pub shape: usize,
}

/// The fleet, the job shapes and the arrivals.
#[derive(Clone, Debug)]
pub struct Scenario {
    pub fleet: Fleet,
    pub shapes: Vec<Job>,
    pub jobs: Vec<DayJob>,
    pub end_s: u64,
}

fn exp_draw(rng: &mut SeededRng, mean: f64) -> f64 {
    let u = (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
    -(1.0 - u).ln() * mean
}

fn pick<T: Copy>(rng: &mut SeededRng, mix: &[(T, u64)]) -> T {
    let total: u64 = mix.iter().map(|m| m.1).sum();
    let mut r = rng.below(total);
    for &(v, w) in mix {
        if r < w {
            return v;
        }
        r -= w;
    }
    mix[mix.len() - 1].0
}

/// Build the fleet, the shapes and the seeded arrivals.
pub fn scenario(config: &DayConfig, catalog: &'static Catalog) -> Result<Scenario, crate::SimError> {
    if config.nodes == 0 || config.gpus_per_node == 0 || config.days == 0 {
        return Err("nodes, GPUs per node and days must be at least 1".into());
    }
    if !(0.05..=2.0).contains(&config.load) {
        return Err(format!("load {} is outside 0.05..=2", config.load).into());
    }
    let id = catalog.lookup(&config.model).ok_or_else(|| format!("unknown GPU model {:?}", config.model))?;
    let model = catalog.model(id);
    let geometry = model.mig.as_ref().ok_or_else(|| format!("{} does not support MIG", model.id))?;
    let fleet = day_fleet(config, model, catalog)?;
    let (shapes, inference_milli) = day_shapes(config, model, geometry, catalog)?;
    let training: Vec<(u32, u64)> = TRAINING_MIX.iter().copied().filter(|&(c, _)| c <= config.gpus_per_node).collect();
    let end_s = u64::from(config.days) * 86_400;
    let jobs = arrivals(config, &inference_milli, &training, end_s);
    Ok(Scenario { fleet, shapes, jobs, end_s })
}

/// The fleet: `config.nodes` nodes of `config.gpus_per_node` GPUs of `model`.
fn day_fleet(
    config: &DayConfig,
    model: &gantry_catalog::GpuModel,
    catalog: &'static Catalog,
) -> Result<Fleet, crate::SimError> {
    let fleet_toml = format!(
        "[[node]]\nname = \"node\"\ncount = {}\ncpu = 256\nmemory = \"2TiB\"\n[node.gpus]\nmodel = \"{}\"\ncount = {}\n",
        config.nodes, model.id, config.gpus_per_node
    );
    gantry_spec::parse_fleet(&fleet_toml, catalog).map_err(|e| e.to_string().into())
}

/// The job shapes (the inference profiles, then the training sizes a node can hold), and
/// each inference profile's milli-GPU.
fn day_shapes(
    config: &DayConfig,
    model: &gantry_catalog::GpuModel,
    geometry: &gantry_catalog::MigGeometry,
    catalog: &'static Catalog,
) -> Result<(Vec<Job>, Vec<u64>), crate::SimError> {
    let mut shapes_toml = String::new();
    let mut inference_milli = Vec::new();
    for (profile, _) in INFERENCE_MIX {
        let p = geometry.profile(profile).ok_or_else(|| format!("{} has no MIG profile {profile}", model.id))?;
        inference_milli.push(u64::from(model.mig_milli(p).0));
        shapes_toml.push_str(&format!(
            "[[job]]\nname = \"infer-{profile}\"\ncpu = 4\nmemory = \"16GiB\"\ngpu = {{ mig = \"{profile}\" }}\n\n"
        ));
    }
    for (count, _) in TRAINING_MIX {
        if count > config.gpus_per_node {
            continue;
        }
        shapes_toml.push_str(&format!(
            "[[job]]\nname = \"train-{count}\"\ncpu = {}\nmemory = \"{}GiB\"\ngpu = {{ count = {count} }}\n\n",
            16 * count,
            128 * count
        ));
    }
    let shapes = gantry_spec::parse_workload(&shapes_toml, catalog).map_err(|e| e.to_string())?;
    Ok((shapes, inference_milli))
}

/// A mix's weights by index.
fn indexed_weights<T>(mix: &[(T, u64)]) -> Vec<(usize, u64)> {
    mix.iter().enumerate().map(|(i, m)| (i, m.1)).collect()
}

/// Peak arrival rates per second (inference, training), so each phase's main kind asks for
/// `load` of the fleet.
fn peak_rates(config: &DayConfig, inference_milli: &[u64], training: &[(u32, u64)]) -> (f64, f64) {
    let gpus = f64::from(config.nodes * config.gpus_per_node);
    let total_w = |mix: &[(usize, u64)]| mix.iter().map(|m| m.1).sum::<u64>() as f64;
    let inference_w = indexed_weights(&INFERENCE_MIX);
    let mean_inference_gpu =
        inference_w.iter().map(|&(i, w)| inference_milli[i] as f64 / 1000.0 * w as f64).sum::<f64>()
            / total_w(&inference_w);
    let training_w = indexed_weights(training);
    let mean_training_gpu = training.iter().map(|&(c, w)| f64::from(c) * w as f64).sum::<f64>() / total_w(&training_w);
    let inference_peak = config.load * gpus / (mean_inference_gpu * INFERENCE_MEAN_S);
    let training_peak = config.load * gpus / (mean_training_gpu * TRAINING_MEAN_S);
    (inference_peak, training_peak)
}

/// The seeded arrivals until `end_s`, sorted by arrival.
fn arrivals(config: &DayConfig, inference_milli: &[u64], training: &[(u32, u64)], end_s: u64) -> Vec<DayJob> {
    let (inference_peak, training_peak) = peak_rates(config, inference_milli, training);
    let inference_w = indexed_weights(&INFERENCE_MIX);
    let training_w = indexed_weights(training);
    let is_day = |t: f64| (8.0 * 3600.0..20.0 * 3600.0).contains(&(t % 86_400.0));

    let mut rng = SeededRng::new(config.seed);
    let mut jobs = Vec::new();
    // Arrivals by thinning: candidates at the peak rate, kept with the rate of their hour.
    for (kind, peak) in [(0usize, inference_peak), (1, training_peak)] {
        let mut t = 0.0;
        loop {
            t += exp_draw(&mut rng, 1.0 / peak);
            if t >= end_s as f64 {
                break;
            }
            let in_phase = is_day(t) == (kind == 0);
            let keep = if in_phase { 1.0 } else { OFF_PHASE };
            if (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64 >= keep {
                continue;
            }
            let job = if kind == 0 {
                inference_job(&mut rng, t, &inference_w, inference_milli)
            } else {
                training_job(&mut rng, t, &training_w, training)
            };
            jobs.push(job);
        }
    }
    jobs.sort_by_key(|j| (j.arrival_s, j.shape, j.duration_s));
    jobs
}

/// An inference deployment arriving at `t`: its profile, then its duration.
fn inference_job(rng: &mut SeededRng, t: f64, inference_w: &[(usize, u64)], inference_milli: &[u64]) -> DayJob {
    let shape = pick(rng, inference_w);
    DayJob {
        arrival_s: t as u64,
        duration_s: exp_draw(rng, INFERENCE_MEAN_S).clamp(600.0, 6.0 * 3600.0) as u64,
        patience_s: INFERENCE_PATIENCE_S,
        milli: inference_milli[shape],
        shape,
    }
}

/// A training job arriving at `t`: its size, then its duration.
fn training_job(rng: &mut SeededRng, t: f64, training_w: &[(usize, u64)], training: &[(u32, u64)]) -> DayJob {
    let i = pick(rng, training_w);
    DayJob {
        arrival_s: t as u64,
        duration_s: exp_draw(rng, TRAINING_MEAN_S).clamp(1800.0, 8.0 * 3600.0) as u64,
        patience_s: TRAINING_PATIENCE_S,
        milli: u64::from(training[i].0) * 1000,
        shape: INFERENCE_MIX.len() + i,
    }
}

/// Standard layouts of a MIG model, by name, for the static candidates.
fn standard_layouts(model: &gantry_catalog::GpuModel) -> Vec<(String, Vec<MigInstanceSpec>)> {
    let wanted: [(&str, &[(&str, u8)]); 5] = [
        (
            "7x1g",
            &[
                ("1g.10gb", 0),
                ("1g.10gb", 1),
                ("1g.10gb", 2),
                ("1g.10gb", 3),
                ("1g.10gb", 4),
                ("1g.10gb", 5),
                ("1g.10gb", 6),
            ],
        ),
        ("3x2g+1g", &[("2g.20gb", 0), ("2g.20gb", 2), ("2g.20gb", 4), ("1g.10gb", 6)]),
        ("2x3g", &[("3g.40gb", 0), ("3g.40gb", 4)]),
        ("3g+2x2g", &[("2g.20gb", 0), ("2g.20gb", 2), ("3g.40gb", 4)]),
        ("3g+2g+2x1g", &[("2g.20gb", 0), ("1g.10gb", 2), ("1g.10gb", 3), ("3g.40gb", 4)]),
    ];
    let Some(geometry) = model.mig.as_ref() else { return Vec::new() };
    wanted
        .iter()
        .filter_map(|(name, list)| {
            let layout: Vec<MigInstanceSpec> =
                list.iter().map(|&(p, start)| MigInstanceSpec { profile: p.into(), start }).collect();
            geometry.validate_layout(&model.id, &layout).ok().map(|_| (name.to_string(), layout))
        })
        .collect()
}

/// The static layouts tried: the first k GPUs (k in steps of half a node) in each standard
/// layout, and the offline planner's layout for the scenario's mean concurrent demand.
pub fn static_candidates(s: &Scenario, catalog: &'static Catalog) -> Result<Vec<(String, Fleet)>, crate::SimError> {
    let model = catalog.model(catalog.lookup(&s.fleet.nodes[0].gpus[0].model).ok_or("unknown model")?);
    let per_node = s.fleet.nodes[0].gpus.len();
    let total = s.fleet.nodes.len() * per_node;
    let step = (per_node / 2).max(1);
    let mut out = vec![("all whole".to_string(), s.fleet.clone())];
    for (name, layout) in standard_layouts(model) {
        for k in (step..=total).step_by(step) {
            let mut fleet = s.fleet.clone();
            for gpu in fleet.nodes.iter_mut().flat_map(|n| n.gpus.iter_mut()).take(k) {
                gpu.mode = GpuMode::Mig { instances: layout.clone() };
            }
            out.push((format!("{k} GPUs {name}"), fleet));
        }
    }
    // The offline plan for the mean demand: each shape × its mean concurrency.
    let span = s.end_s.max(1) as f64;
    let mut mean: BTreeMap<usize, f64> = BTreeMap::new();
    for j in &s.jobs {
        *mean.entry(j.shape).or_default() += j.duration_s as f64 / span;
    }
    let mut demand = Vec::new();
    for (shape, concurrency) in mean {
        for i in 0..concurrency.round() as usize {
            let mut job = s.shapes[shape].clone();
            job.name = format!("{}-{i}", job.name);
            demand.push(job);
        }
    }
    let planned = gantry_engine::plan::plan(&s.fleet, &demand, catalog).map_err(|e| e.to_string())?;
    out.push(("offline plan of the mean mix".to_string(), planned.fleet));
    Ok(out)
}
