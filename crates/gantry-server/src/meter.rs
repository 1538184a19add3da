//! The meter: while jobs run, what each holds (allocation) and what it uses (allocation ×
//! its GPUs' utilization) accumulate per job, GPU model and hour, in integer milli-GPU-seconds,
//! and go to the store's ledger every few seconds and when a job ends. Chargeback
//! ([`Billing`], `GET /v1/usage`, `gantry usage`) reads the ledger.
//!
//! Metering is by change: a job's rates are set when it starts and again when its GPUs'
//! utilization changes, and its time is integrated only then, at its end and at each flush.
//! Nothing here runs per job per tick, so a month of a large fleet in simulated time costs
//! what its starts, ends and flushes cost. The fleet's and each queue's totals are kept in
//! step for the series and the metrics.
//!
//! A controller killed between flushes loses at most its flush period of metering
//! ([`FLUSH_EVERY_S`] in the live service); the time it is down is not metered.

use gantry_store::{USAGE_BUCKET_S, UsageRow};
use std::collections::BTreeMap;

pub use gantry_api::usage::{UsageBy, UsageLine};

/// How often the live service's meter writes to the store.
pub const FLUSH_EVERY_S: u64 = 10;

/// One running job's slice of one GPU, as the meter sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Line {
    pub model: String,
    /// Compute held on that GPU, milli-GPU.
    pub milli: u64,
    /// That GPU's utilization (or the job's share of it), percent.
    pub utilization_pct: u32,
}

impl Line {
    /// Use per second, in milli-GPU × percent (exact integers; / 100 when integrated).
    pub fn used_rate(&self) -> u64 {
        self.milli * u64::from(self.utilization_pct.min(100))
    }
}

/// A running job's rates and since when they were integrated.
#[derive(Debug)]
struct Open {
    since: u64,
    queue: String,
    user: String,
    lines: Vec<Line>,
}

/// Allocation and use held now, in milli-GPU and milli-GPU × percent.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Held {
    pub allocated_milli: u64,
    pub used_milli_pct: u64,
    /// Running jobs counted here.
    pub jobs: u64,
}

impl Held {
    /// (allocated, used) in GPUs.
    pub fn gpus(&self) -> (f64, f64) {
        (self.allocated_milli as f64 / 1000.0, self.used_milli_pct as f64 / 100_000.0)
    }

    fn add(&mut self, lines: &[Line]) {
        self.allocated_milli += lines.iter().map(|l| l.milli).sum::<u64>();
        self.used_milli_pct += lines.iter().map(Line::used_rate).sum::<u64>();
        self.jobs += 1;
    }

    fn remove(&mut self, lines: &[Line]) {
        self.allocated_milli -= lines.iter().map(|l| l.milli).sum::<u64>();
        self.used_milli_pct -= lines.iter().map(Line::used_rate).sum::<u64>();
        self.jobs -= 1;
    }
}

/// Running jobs' rates and what is accumulated, not yet written.
#[derive(Debug)]
pub struct Meter {
    flush_every_s: u64,
    flushed_s: Option<u64>,
    open: BTreeMap<u64, Open>,
    /// By (job, hour, model): a job's rows are one range.
    pending: BTreeMap<(u64, u64, String), UsageRow>,
    fleet: Held,
    queues: BTreeMap<String, Held>,
}

impl Default for Meter {
    fn default() -> Meter {
        Meter::new(FLUSH_EVERY_S)
    }
}

impl Meter {
    /// A meter that writes every `flush_every_s` (at least 1).
    pub fn new(flush_every_s: u64) -> Meter {
        Meter {
            flush_every_s: flush_every_s.max(1),
            flushed_s: None,
            open: BTreeMap::new(),
            pending: BTreeMap::new(),
            fleet: Held::default(),
            queues: BTreeMap::new(),
        }
    }

    /// `job` runs from `now` with these rates (or its rates change now).
    pub fn set(&mut self, now: u64, job: u64, queue: &str, user: &str, lines: Vec<Line>) {
        if self.open.get(&job).is_some_and(|o| o.lines == lines && o.queue == queue) {
            return;
        }
        self.stop(now, job);
        self.fleet.add(&lines);
        self.queues.entry(queue.to_string()).or_default().add(&lines);
        self.open.insert(job, Open { since: now, queue: queue.to_string(), user: user.to_string(), lines });
    }

    /// `job` stopped holding GPUs at `now`: its rows, complete, to write now.
    pub fn end(&mut self, now: u64, job: u64) -> Vec<UsageRow> {
        self.stop(now, job);
        let keys: Vec<(u64, u64, String)> = self
            .pending
            .range((job, 0, String::new())..)
            .take_while(|(k, _)| k.0 == job)
            .map(|(k, _)| k.clone())
            .collect();
        keys.into_iter().filter_map(|k| self.pending.remove(&k)).collect()
    }

    /// Integrate `job` up to `now` and forget its rates.
    fn stop(&mut self, now: u64, job: u64) {
        let Some(mut open) = self.open.remove(&job) else { return };
        integrate(&mut self.pending, job, &mut open, now);
        self.fleet.remove(&open.lines);
        if let Some(q) = self.queues.get_mut(&open.queue) {
            q.remove(&open.lines);
            if q.jobs == 0 {
                self.queues.remove(&open.queue);
            }
        }
    }

    /// The rows to write now: every running job's time so far, when a flush period has
    /// passed since the last (or with `force`); else none.
    pub fn take(&mut self, now: u64, force: bool) -> Vec<UsageRow> {
        let due = self.flushed_s.is_none_or(|last| now >= last + self.flush_every_s);
        if !force && !due {
            return Vec::new();
        }
        self.flushed_s = Some(now);
        for (&job, open) in self.open.iter_mut() {
            integrate(&mut self.pending, job, open, now);
        }
        std::mem::take(&mut self.pending).into_values().collect()
    }

    /// Put rows back after the store refused them (tried again at the next flush).
    pub fn restore(&mut self, rows: Vec<UsageRow>) {
        for row in rows {
            let entry = self.pending.entry((row.job, row.hour_s, row.model.clone())).or_insert_with(|| UsageRow {
                allocated_milli_s: 0,
                used_milli_s: 0,
                ..row.clone()
            });
            entry.allocated_milli_s += row.allocated_milli_s;
            entry.used_milli_s += row.used_milli_s;
        }
    }

    /// What the fleet holds now.
    pub fn fleet(&self) -> Held {
        self.fleet
    }

    /// What each queue with running jobs holds now.
    pub fn queues(&self) -> &BTreeMap<String, Held> {
        &self.queues
    }

    /// `job`'s rates now, if it runs.
    pub fn lines(&self, job: u64) -> Option<&[Line]> {
        self.open.get(&job).map(|o| o.lines.as_slice())
    }
}

/// Add `open`'s time since it was last integrated to the `pending` rows, split at hours.
fn integrate(pending: &mut BTreeMap<(u64, u64, String), UsageRow>, job: u64, open: &mut Open, now: u64) {
    let mut from = open.since;
    while from < now {
        let hour = from - from % USAGE_BUCKET_S;
        let to = now.min(hour + USAGE_BUCKET_S);
        let seconds = to - from;
        for line in &open.lines {
            let row = pending.entry((job, hour, line.model.clone())).or_insert_with(|| UsageRow {
                hour_s: hour,
                job,
                queue: open.queue.clone(),
                user: open.user.clone(),
                model: line.model.clone(),
                allocated_milli_s: 0,
                used_milli_s: 0,
            });
            row.allocated_milli_s += line.milli * seconds;
            row.used_milli_s += line.used_rate() * seconds / 100;
        }
        from = to;
    }
    open.since = open.since.max(now);
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

/// The line a ledger row counts under, `by` what the report groups.
pub fn key_of(r: &UsageRow, by: UsageBy) -> String {
    match by {
        UsageBy::User if r.user.is_empty() => "(none)".to_string(),
        UsageBy::User => r.user.clone(),
        UsageBy::Queue => r.queue.clone(),
        UsageBy::Model => r.model.clone(),
        UsageBy::Job => r.job.to_string(),
    }
}

/// Sum ledger rows into report lines, by `by`, in key order (a job's key is its id).
pub fn report(rows: &[UsageRow], by: UsageBy, billing: &Billing) -> Vec<UsageLine> {
    let mut lines: BTreeMap<(String, u64), UsageLine> = BTreeMap::new();
    for r in rows {
        let key = key_of(r, by);
        // Jobs sort by number, the others by name.
        let order = if by == UsageBy::Job { r.job } else { 0 };
        let line = lines
            .entry((if by == UsageBy::Job { String::new() } else { key.clone() }, order))
            .or_insert_with(|| UsageLine::empty(key));
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

    fn line(model: &str, milli: u64, pct: u32) -> Line {
        Line { model: model.into(), milli, utilization_pct: pct }
    }

    fn summary(rows: &[UsageRow]) -> Vec<(u64, u64, u64, u64)> {
        let mut got: Vec<_> = rows.iter().map(|r| (r.hour_s, r.job, r.allocated_milli_s, r.used_milli_s)).collect();
        got.sort();
        got
    }

    #[test]
    fn time_is_split_at_hours_and_use_follows_utilization() {
        let mut meter = Meter::new(FLUSH_EVERY_S);
        meter.set(3590, 1, "q", "ada", vec![line("L4", 1000, 50)]);
        meter.set(3600, 2, "q", "ada", vec![line("L4", 250, 100)]);
        meter.set(3605, 1, "q", "ada", vec![line("L4", 1000, 50)]);
        assert_eq!(meter.fleet().gpus(), (1.25, 0.75));
        let rows = meter.take(3610, true);
        assert_eq!(summary(&rows), vec![(0, 1, 10_000, 5_000), (3600, 1, 10_000, 5_000), (3600, 2, 2_500, 2_500)]);
        assert!(meter.take(3610, true).is_empty(), "nothing new");
    }

    #[test]
    fn a_rate_change_splits_the_time_and_an_end_writes_the_job_alone() {
        let mut meter = Meter::new(3600);
        meter.set(0, 1, "a", "ada", vec![line("L4", 1000, 100), line("L4-b", 500, 0)]);
        meter.set(0, 2, "b", "bob", vec![line("L4", 1000, 20)]);
        assert!(meter.take(0, false).is_empty());
        meter.set(100, 1, "a", "ada", vec![line("L4", 1000, 0), line("L4-b", 500, 0)]);
        assert_eq!(meter.queues().len(), 2);
        let rows = meter.end(200, 1);
        let got: Vec<(String, u64, u64)> =
            rows.iter().map(|r| (r.model.clone(), r.allocated_milli_s, r.used_milli_s)).collect();
        assert_eq!(got, [("L4".into(), 200_000, 100_000), ("L4-b".into(), 100_000, 0)]);
        assert_eq!(meter.queues().keys().collect::<Vec<_>>(), ["b"], "a queue with nothing running is gone");
        assert_eq!(meter.fleet(), Held { allocated_milli: 1000, used_milli_pct: 20_000, jobs: 1 });
        assert!(meter.take(300, false).is_empty(), "job 2 waits for its flush period");
        assert_eq!(summary(&meter.take(3600, false)), [(0, 2, 3_600_000, 720_000)]);
        assert!(meter.end(3600, 1).is_empty(), "an end twice writes nothing");
    }

    #[test]
    fn flushes_wait_for_their_period_unless_forced() {
        let mut meter = Meter::default();
        assert!(meter.take(100, false).is_empty());
        meter.set(100, 1, "q", "ada", vec![line("L4", 1000, 0)]);
        assert!(meter.take(105, false).is_empty());
        let rows = meter.take(110, false);
        assert_eq!(rows.len(), 1);
        meter.restore(rows.clone());
        meter.restore(rows);
        assert_eq!(meter.take(110, true)[0].allocated_milli_s, 20_000, "restored rows add up");
    }

    /// Random starts, rate changes, ends and flushes at random times, over hour boundaries:
    /// the rows metering by change writes add up, per (job, hour, model), to a second-by-second
    /// integration of the same rates.
    #[test]
    fn metering_by_change_is_the_second_by_second_integral_for_random_histories() {
        for seed in 1..=100u64 {
            let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
            let mut rand = |n: u64| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x % n
            };
            let mut meter = Meter::new(1 + rand(4000));
            let mut rates: BTreeMap<u64, Vec<Line>> = BTreeMap::new();
            let mut expected: BTreeMap<(u64, u64, String), (u64, u64)> = BTreeMap::new();
            let mut written: BTreeMap<(u64, u64, String), (u64, u64)> = BTreeMap::new();
            let mut add_rows = |rows: Vec<UsageRow>| {
                for r in rows {
                    let e = written.entry((r.job, r.hour_s, r.model)).or_default();
                    e.0 += r.allocated_milli_s;
                    e.1 += r.used_milli_s;
                }
            };
            let mut now = 3000 + rand(1000);
            for _ in 0..60 {
                let step = rand(600);
                // Second by second, at the rates that held.
                for t in now..now + step {
                    for (&job, lines) in &rates {
                        for l in lines {
                            let e = expected.entry((job, t - t % USAGE_BUCKET_S, l.model.clone())).or_default();
                            e.0 += l.milli;
                            e.1 += l.used_rate();
                        }
                    }
                }
                now += step;
                let job = rand(6);
                match rand(4) {
                    0 | 1 => {
                        let lines: Vec<Line> = (0..1 + rand(3))
                            .map(|i| {
                                line(
                                    ["L4", "A100", "H100"][((job + i) % 3) as usize],
                                    250 * (1 + rand(4)),
                                    rand(101) as u32,
                                )
                            })
                            .collect();
                        meter.set(now, job, "q", "ada", lines.clone());
                        rates.insert(job, lines);
                    }
                    2 => {
                        add_rows(meter.end(now, job));
                        rates.remove(&job);
                    }
                    _ => add_rows(meter.take(now, rand(2) == 0)),
                }
            }
            add_rows(meter.take(now, true));
            for job in 0..6 {
                add_rows(meter.end(now, job));
            }
            // Use is integrated in whole milli-GPU-seconds at each change: at most one lost
            // per integration, never more than the exact figure.
            for ((job, hour, model), (alloc, used)) in &expected {
                let key = (*job, *hour, model.clone());
                let (got_alloc, got_used) = written.get(&key).copied().unwrap_or_default();
                assert_eq!(got_alloc, *alloc, "seed {seed}: allocation of {key:?}");
                let exact = used / 100;
                assert!(
                    got_used <= exact && exact - got_used <= 60,
                    "seed {seed}: use of {key:?}: {got_used} vs {exact}"
                );
            }
            assert!(
                written.iter().all(|(k, v)| expected.contains_key(k) || *v == (0, 0)),
                "seed {seed}: rows for time no rate held"
            );
        }
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
