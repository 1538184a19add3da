//! The FGD authors' own run (shared/data/.../repro_default_tune1.3_seed42), replayed with its
//! exact arrival and node order: gantry's FGD and best-fit must land within ±0.3 percentage
//! points of it at 130 % load, and FGD must take the same decision almost every time.
//!
//! The data lives in the team's shared folder beside the checkout (CI has it there too);
//! `GANTRY_ALIBABA_TRACE=/path/to/alibaba-gpu-v2023` points elsewhere.

use gantry_engine::Policy;
use gantry_sim::alibaba::{self, Mode, Skipped};
use gantry_sim::protocol_a::{self, ProtocolA};
use std::collections::BTreeMap;
use std::path::PathBuf;

fn data() -> PathBuf {
    let dir = std::env::var_os("GANTRY_ALIBABA_TRACE")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/data/alibaba-gpu-v2023"));
    assert!(
        dir.is_dir(),
        "the Alibaba trace is expected at {} (shared/ beside the checkout); set GANTRY_ALIBABA_TRACE to its folder",
        dir.display()
    );
    dir
}

/// (pod, node) per arrival and node ranks from a reference decisions.csv.
fn decisions(path: &PathBuf) -> (Vec<String>, Vec<Option<String>>, BTreeMap<String, u32>) {
    let mut reader = csv::Reader::from_path(path).expect("reference decisions");
    let (mut pods, mut nodes, mut ranks) = (Vec::new(), Vec::new(), BTreeMap::new());
    for record in reader.records() {
        let r = record.expect("row");
        pods.push(r[1].to_string());
        match r[2].split_once('-') {
            Some((prefix, name)) if r[2] != *"FAILED" => {
                ranks.insert(name.to_string(), prefix.parse().expect("NNNN prefix"));
                nodes.push(Some(name.to_string()));
            }
            _ => nodes.push(None),
        }
    }
    (pods, nodes, ranks)
}

fn replay(policy: Policy, dir: &str) -> (f64, f64) {
    let data = data();
    let nodes =
        alibaba::read_nodes(&data.join("csv/openb_node_list_gpu_node.csv"), Mode::Strict, &mut Skipped::default())
            .expect("nodes");
    let pods = alibaba::read_pods(&data.join("csv/openb_pod_list_default.csv"), Mode::Strict, &mut Skipped::default())
        .expect("pods");
    let (names, reference, ranks) =
        decisions(&data.join(format!("fgd-simulator-reference/repro_default_tune1.3_seed42/{dir}/decisions.csv")));
    let arrivals = protocol_a::arrivals_from_names(&pods, &names).expect("arrivals");
    let order = protocol_a::ranked_node_order(&nodes, &ranks);
    let result = protocol_a::run(&nodes, &pods, &arrivals, &order, policy, 42, &ProtocolA::default()).expect("runs");
    let same = result.decisions.iter().zip(&reference).filter(|(d, r)| d.node == **r).count();
    (result.alloc_at(130).expect("130 % point"), same as f64 / reference.len() as f64 * 100.0)
}

#[test]
fn fgd_reproduces_the_authors_run() {
    let (alloc, agreement) = replay(Policy::Fgd, "06-FGD");
    assert!((alloc - 95.29).abs() <= 0.3, "FGD at 130 %: {alloc} vs 95.29");
    assert!(agreement >= 99.0, "FGD per-decision agreement {agreement:.1}%");
}

#[test]
fn best_fit_reproduces_the_authors_run() {
    let (alloc, _) = replay(Policy::BestFit, "05-BestFit");
    assert!((alloc - 93.13).abs() <= 0.3, "best-fit at 130 %: {alloc} vs 93.13");
}

#[test]
fn default_beats_fgd_on_the_authors_arrival_order() {
    // Deterministic: 96.00 % with both of default's additions to FGD's measure; 95.94 % without
    // the eventual waste, 95.44 % without either (docs/policies.md). FGD: 95.29 %.
    let (alloc, _) = replay(Policy::Default, "06-FGD");
    assert!(alloc >= 95.97, "default at 130 %: {alloc}");
}
