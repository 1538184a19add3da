//! Protocol B (time replay): waiting, departures, delays and tenant shares on a tiny trace.

use crate::fixture;
use gantry_engine::Policy;
use gantry_sim::alibaba::{self, Mode, Skipped};
use gantry_sim::protocol_a::seeded_node_order;
use gantry_sim::protocol_b;

#[test]
fn a_pod_waits_until_capacity_frees_and_shares_follow_gpu_time() {
    let nodes = alibaba::read_nodes(
        &fixture("r-nodes.csv", "sn,cpu_milli,memory_mib,gpu,model\nn,16000,65536,1,T4\n"),
        Mode::Strict,
        &mut Skipped::default(),
    )
    .expect("nodes");
    let pods =
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time
a,4000,8192,1,1000,,LS,Running,0,100,0
b,4000,8192,1,1000,,BE,Running,10,60,10
c,1000,1024,1,250,,BE,Running,200,300,200
";
    let pods = alibaba::read_pods(&fixture("r-pods.csv", pods), Mode::Strict, &mut Skipped::default()).expect("pods");
    let order = seeded_node_order(&nodes, 1);
    let r =
        protocol_b::run(&nodes, &pods, &order, Policy::Fgd, 1, &protocol_b::ReplayOptions::default()).expect("replays");
    assert_eq!((r.started, r.never_started), (3, 0));
    // b arrives at 10 while a holds the only GPU until 100: it waits 90 s; a and c wait 0.
    assert_eq!((r.delay_p50_s, r.delay_p99_s), (0, 90));
    // GPU time: a 100 s, b 50 s, c 0.25 × 100 s: LS 100 / 175, BE 75 / 175.
    let ls = r.tenant_gpu_share_pct["LS"];
    assert!((ls - 100.0 / 175.0 * 100.0).abs() < 1e-9, "{ls}");
    assert!(r.peak_alloc_pct <= 100.0 && r.peak_alloc_pct >= 99.9, "{}", r.peak_alloc_pct);
    assert_eq!(
        r,
        protocol_b::run(&nodes, &pods, &order, Policy::Fgd, 1, &protocol_b::ReplayOptions::default()).expect("replays"),
        "deterministic"
    );
    // Compressing the arrivals by 10 puts c at t = 20, behind b: it waits for a too.
    let squeezed = protocol_b::run(
        &nodes,
        &pods,
        &order,
        Policy::Fgd,
        1,
        &protocol_b::ReplayOptions { compress: 10, ..Default::default() },
    )
    .expect("replays");
    assert!(squeezed.delay_p99_s >= 80, "{squeezed:?}");
}
