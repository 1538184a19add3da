//! Allocation and utilization over time, bounded and downsampled: a point every 10 s for the
//! last hour (in memory), and 5-minute averages for the last 7 days (also kept in the store,
//! pruned to 7 days, so a restart keeps the week). About 2,400 points whatever the uptime; the
//! hourly usage ledger is the long-term record.

use std::collections::{BTreeMap, VecDeque};

/// Seconds between fine points, and how many are kept (one hour).
pub const FINE_STEP_S: u64 = 10;
pub const FINE_POINTS: usize = 360;
/// Seconds per coarse (averaged) point, and how many are kept (seven days).
pub const COARSE_STEP_S: u64 = 300;
pub const COARSE_POINTS: usize = 2016;

/// The fleet (and each queue) at one time.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize, utoipa::ToSchema)]
pub struct Point {
    /// Unix seconds (for a coarse point, the start of its 5 minutes).
    pub t_s: u64,
    /// GPUs' worth of compute handed out.
    pub allocated_gpus: f64,
    /// GPUs' worth of compute in use (allocation × utilization).
    pub used_gpus: f64,
    /// Jobs waiting.
    pub pending_jobs: f64,
    /// Per queue: (allocated, used) GPUs.
    pub queues: BTreeMap<String, (f64, f64)>,
}

/// Both resolutions.
#[derive(Debug, Default)]
pub struct Series {
    fine: VecDeque<Point>,
    coarse: VecDeque<Point>,
    /// The coarse bucket being averaged: its sum and how many points.
    bucket: Option<(Point, u32)>,
}

impl Series {
    /// Would a point at `t_s` be kept (a fine step has passed since the last)?
    pub fn wants(&self, t_s: u64) -> bool {
        self.fine.back().is_none_or(|last| t_s >= last.t_s + FINE_STEP_S)
    }

    /// Record the state at `now`; kept if a fine step has passed since the last point.
    /// Returns the 5-minute average this point closed, if it closed one (to be stored).
    pub fn record(&mut self, point: Point) -> Option<Point> {
        if self.fine.back().is_some_and(|last| point.t_s < last.t_s + FINE_STEP_S) {
            return None;
        }
        let mut closed = None;
        let start = point.t_s - point.t_s % COARSE_STEP_S;
        match &mut self.bucket {
            Some((sum, n)) if sum.t_s == start => {
                sum.allocated_gpus += point.allocated_gpus;
                sum.used_gpus += point.used_gpus;
                sum.pending_jobs += point.pending_jobs;
                for (queue, (a, u)) in &point.queues {
                    let entry = sum.queues.entry(queue.clone()).or_default();
                    entry.0 += a;
                    entry.1 += u;
                }
                *n += 1;
            }
            _ => {
                if let Some((sum, n)) = self.bucket.take() {
                    let done = average(sum, n);
                    push(&mut self.coarse, done.clone(), COARSE_POINTS);
                    closed = Some(done);
                }
                self.bucket = Some((Point { t_s: start, ..point.clone() }, 1));
            }
        }
        push(&mut self.fine, point, FINE_POINTS);
        closed
    }

    /// Start from stored 5-minute averages (oldest first), as after a restart.
    pub fn restore(&mut self, points: Vec<Point>) {
        for p in points {
            push(&mut self.coarse, p, COARSE_POINTS);
        }
    }

    /// The last hour at 10 s.
    pub fn fine(&self) -> Vec<Point> {
        self.fine.iter().cloned().collect()
    }

    /// The last 7 days at 5 minutes (the bucket in progress included).
    pub fn coarse(&self) -> Vec<Point> {
        let mut points: Vec<Point> = self.coarse.iter().cloned().collect();
        if let Some((sum, n)) = &self.bucket {
            points.push(average(sum.clone(), *n));
        }
        points
    }
}

fn push(ring: &mut VecDeque<Point>, point: Point, cap: usize) {
    if ring.len() == cap {
        ring.pop_front();
    }
    ring.push_back(point);
}

fn average(mut sum: Point, n: u32) -> Point {
    let n = f64::from(n.max(1));
    sum.allocated_gpus /= n;
    sum.used_gpus /= n;
    sum.pending_jobs /= n;
    for v in sum.queues.values_mut() {
        v.0 /= n;
        v.1 /= n;
    }
    sum
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(t_s: u64, allocated: f64) -> Point {
        Point {
            t_s,
            allocated_gpus: allocated,
            used_gpus: allocated / 2.0,
            pending_jobs: 0.0,
            queues: [("q".to_string(), (allocated, allocated / 2.0))].into(),
        }
    }

    #[test]
    fn points_are_thinned_bounded_and_averaged() {
        let mut series = Series::default();
        // Two days, a call every 5 s: half are kept as fine points, the ring keeps an hour.
        for t in (0..2 * 86_400).step_by(5) {
            series.record(at(t, if t % 600 < 300 { 4.0 } else { 2.0 }));
        }
        let fine = series.fine();
        assert_eq!(fine.len(), FINE_POINTS);
        assert!(fine.windows(2).all(|w| w[1].t_s - w[0].t_s == FINE_STEP_S));
        let coarse = series.coarse();
        assert_eq!(coarse.len(), 2 * 86_400 / 300);
        assert_eq!((coarse[0].allocated_gpus, coarse[1].allocated_gpus), (4.0, 2.0));
        assert_eq!(coarse[1].queues["q"], (2.0, 1.0));
        // Past seven days the oldest averages go.
        let mut closed = 0;
        for t in (2 * 86_400..9 * 86_400).step_by(10) {
            closed += usize::from(series.record(at(t, 1.0)).is_some());
        }
        assert_eq!(series.coarse().len(), COARSE_POINTS + 1);
        assert_eq!(closed, 7 * 86_400 / 300, "each closed 5-minute average is handed out once");
        let mut restored = Series::default();
        restored.restore(series.coarse());
        assert_eq!(restored.coarse().len(), COARSE_POINTS);
    }
}
