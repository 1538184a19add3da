//! The meter: while jobs run, what each holds (allocation) and what it uses (allocation ×
//! its GPUs' utilization) accumulate per job, GPU model and hour, in integer milli-GPU-seconds,
//! and go to the store's ledger every few seconds and when a job ends. Chargeback
//! ([`Billing`], `GET /v1/usage`, `gantry usage`) reads the ledger.
//!
//! A controller killed between flushes loses at most [`FLUSH_EVERY_S`] of metering; the time
//! it is down is not metered.

use gantry_store::{USAGE_BUCKET_S, UsageRow};
use std::collections::BTreeMap;

/// How often the meter writes to the store.
pub const FLUSH_EVERY_S: u64 = 10;

/// One running job's slice of one GPU, as the meter sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Holding {
    pub job: u64,
    pub queue: String,
    pub user: String,
    pub model: String,
    /// Compute held on that GPU, milli-GPU.
    pub milli: u64,
    /// That GPU's utilization, percent.
    pub utilization_pct: u32,
}

/// Accumulated, not yet written.
#[derive(Debug, Default)]
pub struct Meter {
    last_s: Option<u64>,
    flushed_s: u64,
    pending: BTreeMap<(u64, u64, String), UsageRow>,
}

impl Meter {
    /// When it last recorded (Unix seconds).
    pub fn last_s(&self) -> Option<u64> {
        self.last_s
    }

    /// Account `holdings` for the time since the last call (nothing on the first call).
    pub fn record(&mut self, now: u64, holdings: &[Holding]) {
        let Some(last) = self.last_s.replace(now) else {
            self.flushed_s = now;
            return;
        };
        if now <= last {
            self.last_s = Some(last);
            return;
        }
        // Split at hour boundaries: each hour gets its own row.
        let mut from = last;
        while from < now {
            let hour = from - from % USAGE_BUCKET_S;
            let to = now.min(hour + USAGE_BUCKET_S);
            let seconds = to - from;
            for h in holdings {
                let row = self.pending.entry((hour, h.job, h.model.clone())).or_insert_with(|| UsageRow {
                    hour_s: hour,
                    job: h.job,
                    queue: h.queue.clone(),
                    user: h.user.clone(),
                    model: h.model.clone(),
                    allocated_milli_s: 0,
                    used_milli_s: 0,
                });
                row.allocated_milli_s += h.milli * seconds;
                row.used_milli_s += h.milli * seconds * u64::from(h.utilization_pct.min(100)) / 100;
            }
            from = to;
        }
    }

    /// The rows to write now (all of them with `force`, else only every [`FLUSH_EVERY_S`]).
    pub fn take(&mut self, now: u64, force: bool) -> Vec<UsageRow> {
        if !force && now < self.flushed_s + FLUSH_EVERY_S {
            return Vec::new();
        }
        self.flushed_s = now;
        std::mem::take(&mut self.pending).into_values().collect()
    }

    /// Put rows back after the store refused them (tried again at the next flush).
    pub fn restore(&mut self, rows: Vec<UsageRow>) {
        for row in rows {
            let entry = self.pending.entry((row.hour_s, row.job, row.model.clone())).or_insert_with(|| UsageRow {
                allocated_milli_s: 0,
                used_milli_s: 0,
                ..row.clone()
            });
            entry.allocated_milli_s += row.allocated_milli_s;
            entry.used_milli_s += row.used_milli_s;
        }
    }
}

/// Prices and weights per GPU model (the `[billing]` table of the controller's config file).
#[derive(Clone, Debug, Default, PartialEq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Billing {
    /// Dollars per GPU-hour, by catalog model id (`default` for the others; 0 without it).
    #[serde(default)]
    pub price_per_gpu_hour: BTreeMap<String, f64>,
    /// Billing weight per model (normalized GPU-hours = GPU-hours × weight; default 1).
    #[serde(default)]
    pub weights: BTreeMap<String, f64>,
}

impl Billing {
    fn lookup(table: &BTreeMap<String, f64>, model: &str, otherwise: f64) -> f64 {
        table.get(model).or_else(|| table.get("default")).copied().unwrap_or(otherwise)
    }

    pub fn price(&self, model: &str) -> f64 {
        Billing::lookup(&self.price_per_gpu_hour, model, 0.0)
    }

    pub fn weight(&self, model: &str) -> f64 {
        Billing::lookup(&self.weights, model, 1.0)
    }

    /// Every price and weight must be a finite, non-negative number.
    pub fn check(&self) -> Result<(), crate::error::ServeError> {
        for (table, name) in [(&self.price_per_gpu_hour, "price_per_gpu_hour"), (&self.weights, "weights")] {
            if let Some((model, v)) = table.iter().find(|(_, v)| !v.is_finite() || **v < 0.0) {
                return Err(crate::error::ServeError::Config(format!(
                    "billing.{name}.{model} = {v}: must be a number ≥ 0"
                )));
            }
        }
        Ok(())
    }
}

/// What `usage` groups by.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "kebab-case")]
pub enum UsageBy {
    User,
    Queue,
    Model,
    Job,
}

/// One line of a chargeback report: allocation and measured use side by side, the waste in
/// between, in GPU-hours and money.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize, utoipa::ToSchema)]
pub struct UsageLine {
    /// The user, queue, model or job id the line is for.
    pub key: String,
    pub allocated_gpu_hours: f64,
    pub used_gpu_hours: f64,
    /// used / allocated (0 when nothing was allocated).
    pub utilization: f64,
    /// allocated − used.
    pub waste_gpu_hours: f64,
    /// GPU-hours × each model's billing weight.
    pub normalized_allocated_gpu_hours: f64,
    pub normalized_used_gpu_hours: f64,
    /// Dollars at each model's price: billed by allocation, by use, and the difference.
    pub cost_allocated: f64,
    pub cost_used: f64,
    pub waste_cost: f64,
}

/// Sum ledger rows into report lines, by `by`, in key order (a job's key is its id).
pub fn report(rows: &[UsageRow], by: UsageBy, billing: &Billing) -> Vec<UsageLine> {
    let mut lines: BTreeMap<(String, u64), UsageLine> = BTreeMap::new();
    for r in rows {
        let key = match by {
            UsageBy::User if r.user.is_empty() => "(none)".to_string(),
            UsageBy::User => r.user.clone(),
            UsageBy::Queue => r.queue.clone(),
            UsageBy::Model => r.model.clone(),
            UsageBy::Job => r.job.to_string(),
        };
        // Jobs sort by number, the others by name.
        let order = if by == UsageBy::Job { r.job } else { 0 };
        let line =
            lines.entry((if by == UsageBy::Job { String::new() } else { key.clone() }, order)).or_insert_with(|| {
                UsageLine {
                    key,
                    allocated_gpu_hours: 0.0,
                    used_gpu_hours: 0.0,
                    utilization: 0.0,
                    waste_gpu_hours: 0.0,
                    normalized_allocated_gpu_hours: 0.0,
                    normalized_used_gpu_hours: 0.0,
                    cost_allocated: 0.0,
                    cost_used: 0.0,
                    waste_cost: 0.0,
                }
            });
        let allocated = r.allocated_milli_s as f64 / 1000.0 / 3600.0;
        let used = r.used_milli_s as f64 / 1000.0 / 3600.0;
        let (price, weight) = (billing.price(&r.model), billing.weight(&r.model));
        line.allocated_gpu_hours += allocated;
        line.used_gpu_hours += used;
        line.normalized_allocated_gpu_hours += allocated * weight;
        line.normalized_used_gpu_hours += used * weight;
        line.cost_allocated += allocated * price;
        line.cost_used += used * price;
    }
    lines
        .into_values()
        .map(|mut l| {
            l.waste_gpu_hours = l.allocated_gpu_hours - l.used_gpu_hours;
            l.waste_cost = l.cost_allocated - l.cost_used;
            l.utilization = if l.allocated_gpu_hours > 0.0 { l.used_gpu_hours / l.allocated_gpu_hours } else { 0.0 };
            l
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn holding(job: u64, model: &str, milli: u64, pct: u32) -> Holding {
        Holding { job, queue: "q".into(), user: "ada".into(), model: model.into(), milli, utilization_pct: pct }
    }

    #[test]
    fn time_is_split_at_hours_and_use_follows_utilization() {
        let mut meter = Meter::default();
        meter.record(3590, &[holding(1, "L4", 1000, 50)]);
        meter.record(3610, &[holding(1, "L4", 1000, 50), holding(2, "L4", 250, 100)]);
        let rows = meter.take(3610, true);
        let got: Vec<(u64, u64, u64, u64)> =
            rows.iter().map(|r| (r.hour_s, r.job, r.allocated_milli_s, r.used_milli_s)).collect();
        assert_eq!(
            got,
            vec![(0, 1, 10_000, 5_000), (0, 2, 2_500, 2_500), (3600, 1, 10_000, 5_000), (3600, 2, 2_500, 2_500)]
        );
        assert!(meter.take(3700, true).is_empty());
    }

    #[test]
    fn flushes_wait_for_their_period_unless_forced() {
        let mut meter = Meter::default();
        meter.record(100, &[]);
        meter.record(105, &[holding(1, "L4", 1000, 0)]);
        assert!(meter.take(105, false).is_empty());
        let rows = meter.take(110, false);
        assert_eq!(rows.len(), 1);
        meter.restore(rows.clone());
        meter.restore(rows);
        assert_eq!(meter.take(111, true)[0].allocated_milli_s, 10_000, "restored rows add up");
    }

    #[test]
    fn reports_bill_by_allocation_and_by_use() {
        let billing = Billing {
            price_per_gpu_hour: [("H100-SXM5-80GB".to_string(), 4.0), ("default".to_string(), 1.0)].into(),
            weights: [("H100-SXM5-80GB".to_string(), 3.0)].into(),
        };
        let row = |job, user: &str, model: &str, allocated, used| UsageRow {
            hour_s: 0,
            job,
            queue: "q".into(),
            user: user.into(),
            model: model.into(),
            allocated_milli_s: allocated,
            used_milli_s: used,
        };
        let rows = [
            row(1, "ada", "H100-SXM5-80GB", 3_600_000, 900_000),
            row(2, "bob", "L4", 7_200_000, 7_200_000),
            row(10, "", "L4", 3_600_000, 0),
        ];
        let by_user = report(&rows, UsageBy::User, &billing);
        assert_eq!(by_user.iter().map(|l| l.key.as_str()).collect::<Vec<_>>(), ["(none)", "ada", "bob"]);
        let ada = &by_user[1];
        assert_eq!((ada.allocated_gpu_hours, ada.used_gpu_hours, ada.waste_gpu_hours), (1.0, 0.25, 0.75));
        assert_eq!(
            (ada.normalized_allocated_gpu_hours, ada.cost_allocated, ada.cost_used, ada.waste_cost),
            (3.0, 4.0, 1.0, 3.0)
        );
        assert_eq!(by_user[2].cost_allocated, 2.0, "default price");
        let by_job = report(&rows, UsageBy::Job, &billing);
        assert_eq!(by_job.iter().map(|l| l.key.as_str()).collect::<Vec<_>>(), ["1", "2", "10"], "jobs by number");
        assert!(Billing { weights: [("x".into(), -1.0)].into(), ..Billing::default() }.check().is_err());
    }
}
