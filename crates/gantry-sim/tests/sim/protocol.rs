//! Protocol A on a small fixture: the arrival stream, determinism and the recorded curve.

use crate::{NODES, PODS, fixture};
use gantry_engine::Policy;
use gantry_sim::alibaba::{self, Mode, Skipped};
use gantry_sim::protocol_a::{self, ProtocolA};

fn trace() -> (Vec<gantry_sim::TraceNode>, Vec<gantry_sim::TracePod>) {
    let nodes =
        alibaba::read_nodes(&fixture("p-nodes.csv", NODES), Mode::Strict, &mut Skipped::default()).expect("nodes");
    let pods = alibaba::read_pods(&fixture("p-pods.csv", PODS), Mode::Strict, &mut Skipped::default()).expect("pods");
    (nodes, pods)
}

#[test]
fn inflation_reaches_the_target_and_stops_before_passing_it() {
    let (nodes, pods) = trace();
    let capacity: u64 = nodes.iter().map(|n| n.gpus as u64 * 1000).sum();
    let arrivals = protocol_a::inflate(&pods, capacity, 1.3, 7);
    assert!(arrivals.len() > pods.len(), "copies were added");
    let originals: Vec<usize> = arrivals[..pods.len()].iter().map(|a| a.pod).collect();
    let mut sorted = originals.clone();
    sorted.sort();
    assert_eq!(sorted, (0..pods.len()).collect::<Vec<_>>(), "every original arrives once, first");
    let total: u64 = arrivals.iter().map(|a| pods[a.pod].total_gpu_milli()).sum();
    assert!(total as f64 <= 1.3 * capacity as f64, "{total} over target");
    assert!(arrivals[pods.len()..].iter().all(|a| a.name.contains("-tuned-")));
    assert_eq!(arrivals, protocol_a::inflate(&pods, capacity, 1.3, 7), "same seed, same stream");
    assert_ne!(arrivals, protocol_a::inflate(&pods, capacity, 1.3, 8), "another seed, another stream");
}

#[test]
fn every_policy_runs_deterministically_and_accounts_for_every_pod() {
    let (nodes, pods) = trace();
    let capacity: u64 = nodes.iter().map(|n| n.gpus as u64 * 1000).sum();
    let arrivals = protocol_a::inflate(&pods, capacity, 1.3, 3);
    let order = protocol_a::seeded_node_order(&nodes, 3);
    for policy in Policy::ALL {
        let a = protocol_a::run(&nodes, &pods, &arrivals, &order, policy, 3, &ProtocolA::default()).expect("runs");
        let b = protocol_a::run(&nodes, &pods, &arrivals, &order, policy, 3, &ProtocolA::default()).expect("runs");
        assert_eq!(a, b, "{policy}: same inputs and seed, same result");
        assert_eq!(a.decisions.len(), arrivals.len());
        let placed = a.decisions.iter().filter(|d| d.node.is_some()).count() as u64;
        assert_eq!(placed + a.failed, arrivals.len() as u64, "{policy}");
        assert!(a.final_alloc_pct <= 100.0 && a.final_alloc_pct > 0.0, "{policy}: {}", a.final_alloc_pct);
        let loads: Vec<u32> = a.curve.iter().map(|p| p.load_pct).collect();
        assert!(loads.windows(2).all(|w| w[0] < w[1]), "{policy}: curve points in load order");
    }
}

#[test]
fn replayed_arrivals_must_name_known_pods() {
    let (_, pods) = trace();
    let ok = protocol_a::arrivals_from_names(&pods, &["pod-3".into(), "pod-3-tuned-9".into()]).expect("known");
    assert_eq!((ok[0].pod, ok[1].pod), (3, 3));
    let err = protocol_a::arrivals_from_names(&pods, &["pod-3".into(), "ghost-tuned-1".into()]).expect_err("unknown");
    assert!(err.to_string().contains("arrival 2: pod \"ghost\""), "{err}");
}

#[test]
fn reports_have_a_line_per_policy_and_embed_every_chart() {
    let (nodes, pods) = trace();
    let capacity: u64 = nodes.iter().map(|n| n.gpus as u64 * 1000).sum();
    let arrivals = protocol_a::inflate(&pods, capacity, 1.3, 1);
    let order = protocol_a::seeded_node_order(&nodes, 1);
    let runs: Vec<_> = [Policy::Fgd, Policy::BestFit]
        .iter()
        .map(|&p| protocol_a::run(&nodes, &pods, &arrivals, &order, p, 1, &ProtocolA::default()).expect("runs"))
        .collect();
    let mut by_policy = gantry_sim::report::ListResults::new();
    for r in &runs {
        by_policy.entry(r.policy.clone()).or_default().push(r);
    }
    let lists = vec![("fixture <list>".to_string(), by_policy)];
    let svg = gantry_sim::report::allocation_svg(&lists[0].0, &lists[0].1);
    assert_eq!(svg.matches("<polyline").count(), 2, "one line per policy");
    assert!(svg.contains("fixture &lt;list&gt;"), "titles are escaped");
    let html = gantry_sim::report::html("report", &lists);
    assert!(html.starts_with("<!doctype html>") && html.contains("<svg") && html.contains("best-fit"));
    let csv = gantry_sim::report::curves_csv(&lists);
    assert!(csv.starts_with("pod_list,policy,seed,load_pct,alloc_pct,failed,frag_pct\n"));
    assert_eq!(csv.lines().count(), 1 + runs.iter().map(|r| r.curve.len()).sum::<usize>());
}
