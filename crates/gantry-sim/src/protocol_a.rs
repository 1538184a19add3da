//! Protocol A — the FGD paper's: pods arrive and never leave; the pod list is inflated to a
//! multiple (1.3) of the fleet's GPU capacity; a pod that does not fit is dropped. At every
//! 1 % of arrived load, record the GPU allocation ratio, the failed pods and fragmentation.
//!
//! Arrival order, as in the authors' simulator: the original pods sorted by name and shuffled
//! with the seed, then copies of randomly drawn originals appended until one more would pass
//! `tune × capacity` (the check adds the copy's per-GPU compute, the total adds all of it — a
//! quirk kept on purpose). Our RNG is SplitMix64, so the seeds give other orders than theirs;
//! `--arrivals` replays an exact order (their `decisions.csv`).

use crate::alibaba::{TraceNode, TracePod};
use crate::trace::{SimFleet, compile_pods, typical_shapes};
use gantry_engine::rng::SeededRng;
use gantry_engine::{CompiledJob, Engine, EngineConfig, EngineError, Policy, SearchLimits};
use serde::Serialize;
use std::collections::BTreeMap;

/// Protocol A's parameters.
#[derive(Clone, Debug, PartialEq)]
pub struct ProtocolA {
    /// Arrived load to reach, as a multiple of GPU capacity (the paper: 1.3).
    pub tune: f64,
    /// Typical task types cover this share of pods (the reference: 95).
    pub typical_pct: u32,
}

impl Default for ProtocolA {
    fn default() -> Self {
        ProtocolA { tune: 1.3, typical_pct: 95 }
    }
}

/// One arrival: which original pod it copies, under which name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Arrival {
    pub pod: usize,
    pub name: String,
}

/// What happened to one arrival.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Decision {
    pub name: String,
    /// Node name, or `None` when the pod did not fit.
    pub node: Option<String>,
    pub gpus: Vec<u32>,
}

/// A point of the allocation curve.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CurvePoint {
    /// Arrived GPU load, % of capacity.
    pub load_pct: u32,
    /// Allocated GPU compute, % of capacity (mean over the arrivals at this load, as the
    /// reference's analysis script computes it).
    pub alloc_pct: f64,
    /// Pods that did not fit so far.
    pub failed: u64,
    /// Expected fragment, % of capacity, at the first arrival reaching this load (`None` where
    /// the curve point was filled from neighbouring arrivals).
    pub frag_pct: Option<f64>,
}

/// The outcome of one run.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RunResult {
    pub policy: String,
    pub seed: u64,
    pub arrivals: usize,
    pub failed: u64,
    pub capacity_milli: u64,
    /// Allocation at the end, % of capacity.
    pub final_alloc_pct: f64,
    pub curve: Vec<CurvePoint>,
    #[serde(skip)]
    pub decisions: Vec<Decision>,
}

impl RunResult {
    /// The curve's value at `load_pct`, if recorded.
    pub fn alloc_at(&self, load_pct: u32) -> Option<f64> {
        self.curve.iter().find(|p| p.load_pct == load_pct).map(|p| p.alloc_pct)
    }
}

/// The arrival order for a seed: shuffled originals, then random copies up to `tune × capacity`.
pub fn inflate(pods: &[TracePod], capacity_milli: u64, tune: f64, seed: u64) -> Vec<Arrival> {
    let mut by_name: Vec<usize> = (0..pods.len()).collect();
    by_name.sort_by(|&a, &b| pods[a].name.cmp(&pods[b].name));
    let mut rng = SeededRng::new(seed);
    let mut order = by_name.clone();
    for i in (1..order.len()).rev() {
        let j = rng.below(i as u64 + 1) as usize;
        order.swap(i, j);
    }
    let mut arrivals: Vec<Arrival> = order.iter().map(|&p| Arrival { pod: p, name: pods[p].name.clone() }).collect();
    let target = tune * capacity_milli as f64;
    let mut total: u64 = pods.iter().map(TracePod::total_gpu_milli).sum();
    if pods.is_empty() {
        return arrivals;
    }
    for i in 0.. {
        let p = by_name[rng.below(by_name.len() as u64) as usize];
        if (total + pods[p].gpu_milli as u64) as f64 > target {
            break;
        }
        total += pods[p].total_gpu_milli();
        arrivals.push(Arrival { pod: p, name: format!("{}-tuned-{i}", pods[p].name) });
    }
    arrivals
}

/// An exact arrival order from names (`openb-pod-0042`, `openb-pod-0042-tuned-7`).
pub fn arrivals_from_names(pods: &[TracePod], names: &[String]) -> Result<Vec<Arrival>, crate::SimError> {
    let index: BTreeMap<&str, usize> = pods.iter().enumerate().map(|(i, p)| (p.name.as_str(), i)).collect();
    names
        .iter()
        .enumerate()
        .map(|(line, name)| {
            let base = name.split("-tuned-").next().unwrap_or(name);
            index
                .get(base)
                .map(|&pod| Arrival { pod, name: name.clone() })
                .ok_or_else(|| format!("arrival {}: pod {base:?} is not in the pod list", line + 1))
        })
        .collect::<Result<Vec<_>, String>>()
        .map_err(crate::SimError::Input)
}

/// Python's `round(x, 0)` (half to even), as the reference's analysis script rounds.
fn round_half_even(x: f64) -> f64 {
    let r = x.round();
    if (x - x.trunc()).abs() == 0.5 { 2.0 * (x / 2.0).round() } else { r }
}

fn round2(x: f64) -> f64 {
    round_half_even(x * 100.0) / 100.0
}

/// The reference simulator's node order: nodes sorted by name, then a seeded permutation (it
/// renames nodes `NNNN-name` and scans them in that order; ties go to the first). Ours is
/// SplitMix64-seeded, so the order differs from theirs for the same seed.
pub fn seeded_node_order(nodes: &[TraceNode], seed: u64) -> Vec<usize> {
    let mut order: Vec<usize> = (0..nodes.len()).collect();
    order.sort_by(|&a, &b| nodes[a].name.cmp(&nodes[b].name));
    let mut rng = SeededRng::new(seed ^ 0x6e6f_6465_7321);
    for i in (1..order.len()).rev() {
        let j = rng.below(i as u64 + 1) as usize;
        order.swap(i, j);
    }
    order
}

/// A node order given by rank (e.g. recovered from the reference's `NNNN-` prefixes); nodes
/// without a rank follow, by name.
pub fn ranked_node_order(nodes: &[TraceNode], ranks: &BTreeMap<String, u32>) -> Vec<usize> {
    let mut order: Vec<usize> = (0..nodes.len()).collect();
    order.sort_by(|&a, &b| {
        let key = |i: usize| (ranks.get(&nodes[i].name).copied().unwrap_or(u32::MAX), nodes[i].name.clone());
        key(a).cmp(&key(b))
    });
    order
}

/// Run Protocol A for one policy and arrival order, nodes taken in `node_order`.
pub fn run(
    nodes: &[TraceNode],
    pods: &[TracePod],
    arrivals: &[Arrival],
    node_order: &[usize],
    policy: Policy,
    seed: u64,
    protocol: &ProtocolA,
) -> Result<RunResult, EngineError> {
    let ordered: Vec<TraceNode> = node_order.iter().map(|&i| nodes[i].clone()).collect();
    let nodes = &ordered[..];
    let sim_fleet = SimFleet::from_trace(nodes);
    let capacity = sim_fleet.capacity_milli.max(1);
    // A first engine only to resolve model constraints to device classes for the typical types.
    let probe = Engine::new(&sim_fleet.fleet, sim_fleet.catalog, EngineConfig::default())?;
    let shapes = typical_shapes(&probe, pods, protocol.typical_pct);
    let config = EngineConfig { policy, seed, limits: SearchLimits::exhaustive(), shapes: Some(shapes) };
    let mut engine = Engine::new(&sim_fleet.fleet, sim_fleet.catalog, config)?;
    let jobs = compile_pods(&engine, pods)?;
    let mut decisions = Vec::with_capacity(arrivals.len());
    let mut rows: Vec<(f64, f64, u64)> = Vec::with_capacity(arrivals.len()); // (load %, alloc %, failed)
    let mut frag_at: BTreeMap<u32, f64> = BTreeMap::new();
    let (mut arrived, mut failed) = (0u64, 0u64);
    for arrival in arrivals {
        let pod = &pods[arrival.pod];
        arrived += pod.total_gpu_milli();
        let decision = match place_pod(&mut engine, &jobs[arrival.pod], &arrival.name) {
            Some(decision) => decision,
            None => {
                failed += 1;
                Decision { name: arrival.name.clone(), node: None, gpus: Vec::new() }
            }
        };
        decisions.push(decision);
        let load = round_half_even(arrived as f64 / capacity as f64 * 100.0);
        rows.push((load, round2(engine.state().used_milli() as f64 / capacity as f64 * 100.0), failed));
        if load >= 0.0 && !frag_at.contains_key(&(load as u32)) {
            frag_at.insert(load as u32, engine.fragmentation_milli() / capacity as f64 * 100.0);
        }
    }
    Ok(RunResult {
        policy: policy.name().to_string(),
        seed,
        arrivals: arrivals.len(),
        failed,
        capacity_milli: capacity,
        final_alloc_pct: engine.state().used_milli() as f64 / capacity as f64 * 100.0,
        curve: curve(&rows, &frag_at, protocol.tune),
        decisions,
    })
}

/// Place one pod: where it went, or `None` if it did not fit.
fn place_pod(engine: &mut Engine, job: &CompiledJob, name: &str) -> Option<Decision> {
    let id = engine.place(job).ok()?;
    let task = &engine.allocations()[&id].tasks[0];
    let state = engine.state();
    let gpus = task.grants.iter().map(|g| state.gpus[g.gpu() as usize].index).collect();
    Some(Decision { name: name.to_string(), node: Some(state.info[task.node as usize].name.clone()), gpus })
}

/// The allocation curve at each whole load % up to `tune` × 100, from the rows
/// `(load %, alloc %, failed)` of the arrivals and the fragmentation first seen at each load.
fn curve(rows: &[(f64, f64, u64)], frag_at: &BTreeMap<u32, f64>, tune: f64) -> Vec<CurvePoint> {
    (0..=((tune * 100.0).round() as u32))
        .filter_map(|r| {
            let exact: Vec<&(f64, f64, u64)> = rows.iter().filter(|row| row.0 == r as f64).collect();
            let near: Vec<&(f64, f64, u64)> = if exact.is_empty() {
                rows.iter().filter(|row| (row.0 - r as f64).abs() <= 1.0).collect()
            } else {
                exact
            };
            let last = near.last()?;
            let mean = near.iter().map(|row| row.1).sum::<f64>() / near.len() as f64;
            Some(CurvePoint {
                load_pct: r,
                alloc_pct: round2(mean),
                failed: last.2,
                frag_pct: frag_at.get(&r).copied(),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounding_matches_python() {
        assert_eq!(round_half_even(129.5), 130.0);
        assert_eq!(round_half_even(128.5), 128.0);
        assert_eq!(round_half_even(128.4), 128.0);
        assert_eq!(round2(95.2849), 95.28);
    }
}
