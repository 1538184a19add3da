//! The queue file's `[preemption]` table: how often one job may be stopped, how much of its
//! work may be thrown away, how far a promised start may slip, how far back a guarantee
//! holder's usage counts when its idle guarantee is lent, how long a job within its guarantee
//! waits before it may take a borrower wider than its loan, and whether reclaim restores
//! weighted shares (see docs/policies.md, "Preemption"). Every field is optional; left out,
//! each takes gantry's default.

use crate::error::SpecError;
use crate::quantity::{Duration, seconds};
use gantry_types::PreemptionRules;
use serde::Deserialize;

/// Most stops a budget may allow (a larger number means "no budget": say so with this).
pub const BUDGET_STOPS_MAX: i64 = 1000;
/// Largest work-lost budget, in GPU-hours (a year of a 1,000-GPU job).
const BUDGET_GPU_HOURS_MAX: f64 = 1000.0 * 24.0 * 365.0;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct PreemptionEntry {
    budget: Option<i64>,
    budget_gpu_hours: Option<f64>,
    promise_slip_max: Option<Duration>,
    lend_horizon: Option<Duration>,
    fair_share_reclaim: Option<bool>,
    overshoot_after: Option<Duration>,
}

/// The rules the table sets, each field checked, defaults for what it leaves out.
pub(crate) fn rules(entry: Option<PreemptionEntry>) -> Result<PreemptionRules, SpecError> {
    let mut rules = PreemptionRules::default();
    let Some(entry) = entry else { return Ok(rules) };
    if let Some(n) = entry.budget {
        rules.budget_stops = crate::quantity::count(
            "preemption.budget",
            n,
            0,
            BUDGET_STOPS_MAX,
            "times one job may be stopped by preemption (0: never)",
        )?;
    }
    if let Some(h) = entry.budget_gpu_hours {
        if !h.is_finite() || !(0.0..=BUDGET_GPU_HOURS_MAX).contains(&h) {
            return Err(SpecError::new(
                "preemption.budget_gpu_hours",
                format!("{h} is outside 0..={BUDGET_GPU_HOURS_MAX} GPU-hours"),
            )
            .hint("GPU-hours of one job's work preemption may throw away in all, e.g. 24"));
        }
        rules.budget_lost_milli_s = (h * 3600.0 * 1000.0).round() as u64;
    }
    if let Some(d) = &entry.promise_slip_max {
        rules.promise_slip_max_s = seconds("preemption.promise_slip_max", d, 0)?;
    }
    if let Some(d) = &entry.lend_horizon {
        rules.lend_horizon_s = seconds("preemption.lend_horizon", d, 0)?;
    }
    if let Some(d) = &entry.overshoot_after {
        rules.overshoot_after_s = seconds("preemption.overshoot_after", d, 0)?;
    }
    if let Some(on) = entry.fair_share_reclaim {
        rules.fair_share_reclaim = on;
    }
    Ok(rules)
}

#[cfg(test)]
mod tests {
    use crate::parse_queues;
    use gantry_catalog::Catalog;

    fn parse(table: &str) -> Result<gantry_types::PreemptionRules, crate::SpecError> {
        let text = format!("{table}\n[[queue]]\nname = \"a\"\n");
        parse_queues(&text, Catalog::embedded()).map(|t| t.preemption)
    }

    #[test]
    fn every_field_left_out_takes_its_default() {
        assert_eq!(parse("").expect("parses"), gantry_types::PreemptionRules::default());
        assert_eq!(parse("[preemption]").expect("parses"), gantry_types::PreemptionRules::default());
    }

    #[test]
    fn every_field_reads_in_its_unit() {
        let rules = parse(
            "[preemption]\nbudget = 2\nbudget_gpu_hours = 1.5\npromise_slip_max = \"2h\"\nlend_horizon = \"10m\"\nfair_share_reclaim = true\novershoot_after = \"2m\"",
        )
        .expect("parses");
        assert_eq!(rules.budget_stops, 2);
        assert_eq!(rules.budget_lost_milli_s, 5_400_000);
        assert_eq!(rules.promise_slip_max_s, 7200);
        assert_eq!(rules.lend_horizon_s, 600);
        assert!(rules.fair_share_reclaim);
        assert_eq!(rules.overshoot_after_s, 120);
    }

    #[test]
    fn hostile_values_are_refused_naming_the_field() {
        for (table, field) in [
            ("budget = -1", "preemption.budget"),
            ("budget = 1001", "preemption.budget"),
            ("budget_gpu_hours = -0.5", "preemption.budget_gpu_hours"),
            ("budget_gpu_hours = nan", "preemption.budget_gpu_hours"),
            ("budget_gpu_hours = inf", "preemption.budget_gpu_hours"),
            ("budget_gpu_hours = 1e300", "preemption.budget_gpu_hours"),
            ("promise_slip_max = \"-1h\"", "preemption.promise_slip_max"),
            ("promise_slip_max = \"soon\"", "preemption.promise_slip_max"),
            ("lend_horizon = -5", "preemption.lend_horizon"),
            ("overshoot_after = \"-1m\"", "preemption.overshoot_after"),
            ("overshoot_after = \"later\"", "preemption.overshoot_after"),
        ] {
            let e = parse(&format!("[preemption]\n{table}")).expect_err(table);
            assert_eq!(e.field, field, "{table}: {e}");
        }
        let unknown = parse("[preemption]\nbudgets = 3").expect_err("a misspelt field");
        assert!(unknown.to_string().contains("budgets"), "{unknown}");
        assert!(parse("[preemption]\nfair_share_reclaim = \"yes\"").is_err());
    }
}
