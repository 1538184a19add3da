//! What `gantry plan --evaluate` reports of the MIG day/night scenario: one evaluated week
//! (the best static layout beside the online planner), or several seeds' weeks with the
//! spread of the gain — as text for a terminal or as JSON, from the same figures.

use super::{DayConfig, DayResult, Evaluation, evaluate};
use crate::SimError;
use serde_json::{Value, json};
use std::fmt::Write;

/// Weeks of `config` with seeds `config.seed`, `config.seed + 1`, … (`seeds` of them),
/// evaluated on as many threads as there are cores. `progress(done, total)` is called as
/// replays finish: `done` the replays just finished, `total` those of all the weeks.
pub fn evaluate_weeks(
    config: &DayConfig,
    seeds: u32,
    progress: &(dyn Fn(usize, usize) + Sync),
) -> Result<(Vec<DayConfig>, Vec<Evaluation>), SimError> {
    let configs: Vec<DayConfig> =
        (0..u64::from(seeds)).map(|i| DayConfig { seed: config.seed.wrapping_add(i), ..config.clone() }).collect();
    // Each week replays the same number of layouts: the total is known after the first.
    let weeks = crate::experiment::parallel::map(&configs, |config| {
        let mut last = 0;
        evaluate(config, gantry_catalog::Catalog::embedded(), |done, total| {
            progress(done - last, total * configs.len());
            last = done;
        })
    });
    let weeks = weeks.into_iter().collect::<Result<_, _>>()?;
    Ok((configs, weeks))
}

/// One layout's figures as JSON.
pub fn result_json(r: &DayResult) -> Value {
    json!({
        "layout": r.label,
        "jobs": r.jobs,
        "started": r.started,
        "abandoned": r.abandoned,
        "demanded_gpu_h": r.demanded_gpu_h,
        "served_gpu_h": r.served_gpu_h,
        "served_pct": r.served_pct,
        "inference_served_pct": r.inference_served_pct,
        "training_served_pct": r.training_served_pct,
        "mean_wait_s": r.mean_wait_s,
        "p95_wait_s": r.p95_wait_s,
        "allocated_pct": r.allocated_pct,
        "reconfigurations": r.reconfigurations,
        "reconfigurations_per_gpu_day": r.reconfigurations_per_gpu_day,
        "drain_unused_gpu_h": r.drain_idle_gpu_h,
        "moves": r.moves,
        "moves_per_gpu_day": r.moves_per_gpu_day,
        "restart_gpu_h": r.restart_gpu_h,
    })
}

/// The scenario's settings as JSON.
pub fn config_json(config: &DayConfig) -> Value {
    json!({
        "nodes": config.nodes, "gpus_per_node": config.gpus_per_node, "model": config.model,
        "days": config.days, "seed": config.seed, "load": config.load,
        "period_s": config.period_s, "reconfigure_s": config.reconfigure_s, "window_s": config.window_s,
        "cooldown_s": config.online.cooldown_s, "drain_horizon_s": config.online.drain_horizon_s,
        "move_work": config.online.move_work, "restart_s": config.restart_s,
    })
}

/// The gains' mean, standard deviation, minimum and maximum.
fn spread(weeks: &[Evaluation]) -> (f64, f64, f64, f64) {
    let gains: Vec<f64> = weeks.iter().map(|w| w.gain_pct).collect();
    let n = gains.len() as f64;
    let mean = gains.iter().sum::<f64>() / n;
    let sd = (gains.iter().map(|g| (g - mean).powi(2)).sum::<f64>() / (n - 1.0).max(1.0)).sqrt();
    let min = gains.iter().copied().fold(f64::INFINITY, f64::min);
    let max = gains.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    (mean, sd, min, max)
}

/// Several weeks as JSON: each one's best static layout, the planner and the gain, then the
/// gains' spread.
pub fn weeks_json(config: &DayConfig, configs: &[DayConfig], weeks: &[Evaluation]) -> Value {
    let (mean, sd, min, max) = spread(weeks);
    json!({
        "config": config_json(config),
        "weeks": configs.iter().zip(weeks).map(|(c, w)| json!({
            "seed": c.seed,
            "best_static": result_json(&w.statics[w.best_static]),
            "dynamic": result_json(&w.dynamic),
            "gain_pct": w.gain_pct,
        })).collect::<Vec<_>>(),
        "gain_pct": { "mean": mean, "sd": sd, "min": min, "max": max },
    })
}

/// Several weeks as text: a line per seed, then the gains' mean, deviation and range.
pub fn weeks_text(config: &DayConfig, configs: &[DayConfig], weeks: &[Evaluation]) -> String {
    let (mean, sd, min, max) = spread(weeks);
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{} runs of {} days, {} × 8 {} ({} GPUs), load {}, seeds {}..={}: inference on MIG by day (08-20h), whole-GPU training by night\n",
        configs.len(),
        config.days,
        config.nodes,
        config.model,
        config.nodes * config.gpus_per_node,
        config.load,
        configs[0].seed,
        configs[configs.len() - 1].seed
    );
    let _ = writeln!(
        out,
        "  {:>6} {:<32} {:>14} {:>15} {:>8}",
        "SEED", "BEST STATIC LAYOUT", "SERVED STATIC", "SERVED DYNAMIC", "GAIN"
    );
    for (c, w) in configs.iter().zip(weeks) {
        let best = &w.statics[w.best_static];
        let _ = writeln!(
            out,
            "  {:>6} {:<32} {:>13.1}% {:>14.1}% {:>+7.1}%",
            c.seed, best.label, best.served_pct, w.dynamic.served_pct, w.gain_pct
        );
    }
    let _ = writeln!(
        out,
        "\ndynamic planning serves {mean:+.1}% demand over the best static layout on average \
         (standard deviation {sd:.1} points, range {min:+.1}% to {max:+.1}%)"
    );
    out
}

/// One week as JSON: the settings, the best static layout, the planner, every static layout.
pub fn evaluation_json(config: &DayConfig, result: &Evaluation) -> Value {
    json!({
        "config": config_json(config),
        "best_static": result_json(&result.statics[result.best_static]),
        "dynamic": result_json(&result.dynamic),
        "gain_pct": result.gain_pct,
        "statics": result.statics.iter().map(result_json).collect::<Vec<_>>(),
    })
}

/// One week as text: the best static layout beside the online planner, and the gain.
pub fn evaluation_text(config: &DayConfig, result: &Evaluation) -> String {
    let best = &result.statics[result.best_static];
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{} days, {} × 8 {} ({} GPUs), load {}, seed {}: inference on MIG by day (08-20h), whole-GPU training by night",
        config.days,
        config.nodes,
        config.model,
        config.nodes * config.gpus_per_node,
        config.load,
        config.seed
    );
    let _ = writeln!(out, "{} static layouts replayed; the best and the online planner:\n", result.statics.len());
    let _ = writeln!(
        out,
        "  {:<32} {:>8} {:>10} {:>9} {:>10} {:>9} {:>9} {:>13} {:>11} {:>12}",
        "LAYOUT",
        "SERVED",
        "INFERENCE",
        "TRAINING",
        "MEAN WAIT",
        "P95 WAIT",
        "ALLOC",
        "RECONF/GPU/D",
        "DRAIN GPU-H",
        "MOVES/GPU/D"
    );
    for r in [best, &result.dynamic] {
        let _ = writeln!(
            out,
            "  {:<32} {:>7.1}% {:>9.1}% {:>8.1}% {:>9.0}s {:>8}s {:>8.1}% {:>13.2} {:>11.1} {:>12.2}",
            r.label,
            r.served_pct,
            r.inference_served_pct,
            r.training_served_pct,
            r.mean_wait_s,
            r.p95_wait_s,
            r.allocated_pct,
            r.reconfigurations_per_gpu_day,
            r.drain_idle_gpu_h,
            r.moves_per_gpu_day
        );
    }
    let _ = writeln!(
        out,
        "\ndynamic planning serves {:+.1}% demand over the best static layout ({:.0} vs {:.0} GPU-hours of {:.0} asked)",
        result.gain_pct, result.dynamic.served_gpu_h, best.served_gpu_h, best.demanded_gpu_h
    );
    if result.dynamic.moves > 0 {
        let _ = writeln!(
            out,
            "{} inference instances moved to empty GPUs for waiting training; their restarts cost {:.1} GPU-hours (counted)",
            result.dynamic.moves, result.dynamic.restart_gpu_h
        );
    }
    out
}
