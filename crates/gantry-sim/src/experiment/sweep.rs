//! A Protocol A sweep: one run per (pod list, policy, seed), spread over the machine's cores,
//! and what is made of the runs together — the mean allocation at 130 % per list and policy,
//! the agreement with a reference run's decisions, the markdown table and the decisions CSV.

use super::parallel;
use crate::protocol_a::{self, Arrival, ProtocolA, RunResult};
use crate::{SimError, TraceNode, TracePod};
use gantry_engine::Policy;
use std::collections::BTreeMap;

/// What to run.
#[derive(Debug)]
pub struct Sweep<'a> {
    pub nodes: &'a [TraceNode],
    /// Each pod list with its name (the file's stem).
    pub lists: &'a [(String, Vec<TracePod>)],
    pub policies: &'a [Policy],
    pub first_seed: u64,
    pub seeds: u32,
    /// A reference run's arrival order and node order, replayed instead of a drawn one.
    pub fixed: Option<(Vec<Arrival>, Vec<usize>)>,
    /// Keep every run's decisions (a 1,400-run sweep would otherwise hold 15 million of them,
    /// over 1 GiB, so they are kept only for a comparison or a decisions file).
    pub keep_decisions: bool,
}

/// One run's result, its pod list (an index into [`Sweep::lists`]) and its seconds.
#[derive(Debug)]
pub struct SweepRun {
    pub list: usize,
    pub seed: u64,
    pub result: RunResult,
    pub secs: f64,
}

/// Every run of a sweep, in the order they were asked for, and how it ran.
#[derive(Debug)]
pub struct SweepResult {
    pub runs: Vec<SweepRun>,
    pub wall_s: f64,
    pub threads: usize,
}

impl Sweep<'_> {
    /// (pod list, policy, seed) of every run, lists outermost.
    pub fn jobs(&self) -> Vec<(usize, Policy, u64)> {
        let (first, seeds) = (self.first_seed, u64::from(self.seeds));
        (0..self.lists.len())
            .flat_map(|l| self.policies.iter().flat_map(move |&p| (first..first + seeds).map(move |s| (l, p, s))))
            .collect()
    }

    /// Run every job; `done` is called as each finishes (a progress bar).
    pub fn run(&self, done: impl Fn() + Sync) -> Result<SweepResult, SimError> {
        let jobs = self.jobs();
        let capacity: u64 = self.nodes.iter().map(|n| u64::from(n.gpus) * 1000).sum();
        let protocol = ProtocolA::default();
        let run_one = |&(list, policy, seed): &(usize, Policy, u64)| -> Result<SweepRun, SimError> {
            let started = std::time::Instant::now();
            let pods = &self.lists[list].1;
            let (arrivals, order) = match &self.fixed {
                Some((a, o)) => (a.clone(), o.clone()),
                None => (
                    protocol_a::inflate(pods, capacity, protocol.tune, seed),
                    protocol_a::seeded_node_order(self.nodes, seed),
                ),
            };
            let mut result = protocol_a::run(self.nodes, pods, &arrivals, &order, policy, seed, &protocol)?;
            if !self.keep_decisions {
                result.decisions = Vec::new();
            }
            done();
            Ok(SweepRun { list, seed, result, secs: started.elapsed().as_secs_f64() })
        };
        let started = std::time::Instant::now();
        let runs = parallel::map(&jobs, run_one).into_iter().collect::<Result<Vec<_>, _>>()?;
        Ok(SweepResult { runs, wall_s: started.elapsed().as_secs_f64(), threads: parallel::threads(jobs.len()) })
    }
}

impl SweepResult {
    /// Mean allocation at 130 % of `policy`'s runs on pod list `list`.
    pub fn mean_at_130(&self, list: usize, policy: Policy) -> f64 {
        let values: Vec<f64> = self
            .runs
            .iter()
            .filter(|r| r.list == list && r.result.policy == policy.name())
            .filter_map(|r| r.result.alloc_at(130))
            .collect();
        values.iter().sum::<f64>() / values.len().max(1) as f64
    }

    /// Every decision of every run: `seq,pod_list,policy,pod,node,gpu_index`.
    pub fn decisions_csv(&self, lists: &[(String, Vec<TracePod>)]) -> String {
        let mut out = String::from("seq,pod_list,policy,pod,node,gpu_index\n");
        for run in &self.runs {
            let r = &run.result;
            for (seq, d) in r.decisions.iter().enumerate() {
                let gpus: Vec<String> = d.gpus.iter().map(u32::to_string).collect();
                let node = d.node.as_deref().unwrap_or("FAILED");
                out += &format!("{seq},{},{},{},{node},{}\n", lists[run.list].0, r.policy, d.name, gpus.join("-"));
            }
        }
        out
    }

    /// The mean allocation table in markdown, the authors' means in parentheses.
    pub fn markdown(&self, sweep: &Sweep<'_>, authors: Option<&BTreeMap<(String, String), f64>>) -> String {
        let mut md = format!(
            "Mean GPU allocation at 130 % arrived load, {} seed(s) from {} each, Protocol A (FGD paper). \
             In parentheses: the FGD authors' published 10-seed mean, where they have one. \
             {} runs in {:.0} s on {} threads.\n\n| pod list |",
            sweep.seeds,
            sweep.first_seed,
            self.runs.len(),
            self.wall_s,
            self.threads
        );
        for policy in sweep.policies {
            md += &format!(" {} |", policy.name());
        }
        md += "\n|---|";
        md += &"---:|".repeat(sweep.policies.len());
        md += "\n";
        for (l, (name, _)) in sweep.lists.iter().enumerate() {
            md += &format!("| {name} |");
            for &policy in sweep.policies {
                let theirs = authors.and_then(|a| a.get(&(name.clone(), policy.name().to_string())));
                let theirs = theirs.map(|t| format!(" ({t:.2})")).unwrap_or_default();
                md += &format!(" {:.2}{theirs} |", self.mean_at_130(l, policy));
            }
            md += "\n";
        }
        md
    }

    /// Each result with its pod list's name, as `gantry sim --json` prints them.
    pub fn named<'a>(&'a self, lists: &'a [(String, Vec<TracePod>)]) -> Vec<NamedRun<'a>> {
        self.runs.iter().map(|r| NamedRun { pods: lists[r.list].0.as_str(), result: &r.result }).collect()
    }
}

/// A run's result named by its pod list (several lists run in one call).
#[derive(Debug, serde::Serialize)]
pub struct NamedRun<'a> {
    pub pods: &'a str,
    #[serde(flatten)]
    pub result: &'a RunResult,
}

/// The share of `decisions` (in %) that chose the node a reference run chose.
pub fn agreement(decisions: &[protocol_a::Decision], reference: &[(String, Option<String>)]) -> f64 {
    let same = decisions.iter().zip(reference).filter(|(d, (_, node))| d.node == *node).count();
    same as f64 / decisions.len().max(1) as f64 * 100.0
}
