//! The text `gantry plan --evaluate --live` prints: each week's simulator and live-controller
//! figures side by side, then the two mean gains (the JSON is the [`Weeks`] value itself).

use super::mig_week::Weeks;
use gantry_sim::mig_day::DayConfig;
use std::fmt::Write;

/// Each week compared, then the gains' means: live figures first, the simulator's in
/// parentheses.
pub fn weeks_text(config: &DayConfig, all: &Weeks) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{} week(s) of {} days, {} × 8 {}, load {}: the simulator's replay and the live controller (reconfigure = \"auto\"), each against the best static layout\n",
        all.weeks.len(),
        config.days,
        config.nodes,
        config.model,
        config.load
    );
    let _ = writeln!(
        out,
        "  {:>5} {:<22} {:>12} {:>12} {:>9} {:>12} {:>12} {:>9} {:>11} {:>10} {:>10}",
        "SEED",
        "BEST STATIC",
        "SIM STATIC",
        "SIM DYNAMIC",
        "SIM GAIN",
        "LIVE STATIC",
        "LIVE DYNAMIC",
        "LIVE GAIN",
        "RECONF/GPU/D",
        "DRAIN GPU-H",
        "MOVES"
    );
    for w in &all.weeks {
        let _ = writeln!(
            out,
            "  {:>5} {:<22} {:>11.1}% {:>11.1}% {:>+8.1}% {:>11.1}% {:>11.1}% {:>+8.1}% {:>5.2} ({:.2}) {:>4.0} ({:.0}) {:>4} ({})",
            w.seed,
            w.best_static,
            w.sim_static_pct,
            w.sim_dynamic_pct,
            w.sim_gain_pct,
            w.live_static.served_pct,
            w.live_dynamic.served_pct,
            w.live_gain_pct,
            w.live_dynamic.reconfigurations_per_gpu_day,
            w.sim_reconfigurations_per_gpu_day,
            w.live_dynamic.drain_idle_gpu_h,
            w.sim_drain_idle_gpu_h,
            w.live_dynamic.moves,
            w.sim_moves
        );
    }
    let (sim_gain, live_gain) = (all.sim_gain_pct_mean, all.live_gain_pct_mean);
    let _ = writeln!(
        out,
        "\nmean gain over the best static layout: simulator {sim_gain:+.1}%, live controller {live_gain:+.1}% ({:+.1} points); live figures first, the simulator's in parentheses",
        live_gain - sim_gain
    );
    out
}
