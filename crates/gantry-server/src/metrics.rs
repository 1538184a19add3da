//! `GET /metrics`: the controller's state in the OpenMetrics text format, for Prometheus,
//! encoded by the official `prometheus-client` crate.
//! Names are stable and documented in docs/formats.md (with the DCGM exporter's name where
//! one measures the same thing); labels are bounded by the fleet and the queue file (node,
//! GPU index, model, queue, state), never by job or user.

use prometheus_client::encoding::{EncodeMetric, MetricEncoder};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::{Registry, Unit};
use std::collections::BTreeMap;
use std::sync::atomic::AtomicU64;

/// A histogram with fixed buckets (upper bounds, seconds).
#[derive(Clone, Debug)]
pub struct Histogram {
    bounds: &'static [f64],
    counts: Vec<u64>,
    sum: f64,
    count: u64,
}

impl Histogram {
    pub fn new(bounds: &'static [f64]) -> Histogram {
        Histogram { bounds, counts: vec![0; bounds.len()], sum: 0.0, count: 0 }
    }

    pub fn observe(&mut self, value: f64) {
        for (bound, count) in self.bounds.iter().zip(&mut self.counts) {
            if value <= *bound {
                *count += 1;
            }
        }
        self.sum += value;
        self.count += 1;
    }
}

/// Scheduling cycles: 100 µs to 10 s.
pub const CYCLE_BUCKETS: &[f64] = &[0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0];
/// Waiting before a start: a second to a week.
pub const WAIT_BUCKETS: &[f64] = &[1.0, 10.0, 60.0, 300.0, 900.0, 3600.0, 4.0 * 3600.0, 86_400.0, 7.0 * 86_400.0];

/// What the controller counts as it goes.
#[derive(Clone, Debug)]
pub struct ServiceStats {
    pub cycle_seconds: Histogram,
    pub wait_seconds: Histogram,
    pub starts: u64,
    pub stops: u64,
    pub ended: std::collections::BTreeMap<&'static str, u64>,
    /// CPU time the nodes measured of each queue's ended runs since the controller started,
    /// milliseconds (the running runs' is added when the metric is read).
    pub cpu_ms_by_queue: std::collections::BTreeMap<String, u64>,
    /// Agents' heartbeats applied since the controller started: (logged, not logged because
    /// they changed nothing).
    pub heartbeats: (u64, u64),
}

impl Default for ServiceStats {
    fn default() -> Self {
        ServiceStats {
            cycle_seconds: Histogram::new(CYCLE_BUCKETS),
            wait_seconds: Histogram::new(WAIT_BUCKETS),
            starts: 0,
            stops: 0,
            ended: Default::default(),
            cpu_ms_by_queue: Default::default(),
            heartbeats: (0, 0),
        }
    }
}

/// Labels of one sample, in the order given.
type Labels = Vec<(String, String)>;
type GaugeFamily = Family<Labels, Gauge<f64, AtomicU64>>;
type CounterFamily = Family<Labels, Counter<f64, AtomicU64>>;

/// One scrape's metric families, encoded by the `prometheus-client` crate (OpenMetrics text:
/// `# HELP`, `# TYPE`, `# UNIT`, samples, `# EOF`). Callers name families and samples as they
/// appear in the exposition (`…_seconds`, `…_total`); the crate adds those suffixes itself, so
/// they are taken off here.
#[derive(Debug, Default)]
pub struct Exposition {
    registry: Registry,
    gauges: BTreeMap<String, GaugeFamily>,
    counters: BTreeMap<String, CounterFamily>,
}

/// A family name as the crate registers it: without the unit suffix it appends.
fn base_name<'n>(name: &'n str, unit: &str) -> &'n str {
    match unit {
        "seconds" => name.strip_suffix("_seconds").unwrap_or(name),
        _ => name,
    }
}

impl Exposition {
    /// Declare a family: `kind` gauge or counter, `unit` empty or `seconds`.
    pub fn family(&mut self, name: &str, kind: &str, unit: &str, help: &str) {
        let base = base_name(name, unit);
        match kind {
            "counter" => {
                let family = CounterFamily::default();
                self.register(base, help, unit, family.clone());
                self.counters.insert(name.to_string(), family);
            }
            _ => {
                let family = GaugeFamily::default();
                self.register(base, help, unit, family.clone());
                self.gauges.insert(name.to_string(), family);
            }
        }
    }

    fn register(&mut self, base: &str, help: &str, unit: &str, metric: impl prometheus_client::registry::Metric) {
        let help = help.trim_end_matches('.');
        match unit {
            "seconds" => self.registry.register_with_unit(base, help, Unit::Seconds, metric),
            _ => self.registry.register(base, help, metric),
        }
    }

    /// One sample of a declared family (`name` as exposed: a counter's ends in `_total`).
    pub fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: f64) {
        let labels: Labels = labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        if let Some(family) = self.gauges.get(name) {
            family.get_or_create(&labels).set(value);
        } else if let Some(family) = name.strip_suffix("_total").and_then(|n| self.counters.get(n)) {
            family.get_or_create(&labels).inc_by(value);
        } else {
            debug_assert!(false, "sample of an undeclared family {name}");
        }
    }

    /// A histogram family (unit seconds) from the controller's counts.
    pub fn histogram(&mut self, name: &str, help: &str, h: &Histogram) {
        self.register(base_name(name, "seconds"), help, "seconds", h.clone());
    }

    pub fn finish(self) -> String {
        let mut text = String::new();
        // Writing to a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut text, &self.registry);
        text
    }
}

impl prometheus_client::metrics::TypedMetric for Histogram {
    const TYPE: MetricType = MetricType::Histogram;
}

impl EncodeMetric for Histogram {
    /// The crate wants each bucket's own count (it sums them) and the `+Inf` bucket last.
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        let mut buckets = Vec::with_capacity(self.bounds.len() + 1);
        let mut below = 0;
        for (bound, cumulative) in self.bounds.iter().zip(&self.counts) {
            buckets.push((*bound, cumulative - below));
            below = *cumulative;
        }
        buckets.push((f64::INFINITY, self.count - below));
        encoder.encode_histogram::<prometheus_client::encoding::NoLabelSet>(self.sum, self.count, &buckets, None)
    }

    fn metric_type(&self) -> MetricType {
        MetricType::Histogram
    }
}

/// The content type Prometheus negotiates for OpenMetrics.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histograms_are_cumulative_and_the_text_ends_with_eof() {
        let mut h = Histogram::new(&[0.1, 1.0]);
        h.observe(0.05);
        h.observe(0.5);
        h.observe(3.0);
        let mut out = Exposition::default();
        out.histogram("gantry_x_seconds", "x", &h);
        out.family("gantry_jobs", "gauge", "", "jobs");
        out.sample("gantry_jobs", &[("queue", "a\"b")], 2.0);
        out.family("gantry_ends", "counter", "", "ends");
        out.sample("gantry_ends_total", &[("how", "ok")], 0.0);
        let text = out.finish();
        assert!(text.contains("# TYPE gantry_x_seconds histogram\n# UNIT gantry_x_seconds seconds\n"), "{text}");
        assert!(text.contains("gantry_x_seconds_bucket{le=\"0.1\"} 1\n"), "{text}");
        assert!(text.contains("gantry_x_seconds_bucket{le=\"1.0\"} 2\n"), "{text}");
        assert!(text.contains("gantry_x_seconds_bucket{le=\"+Inf\"} 3\n"), "{text}");
        assert!(text.contains("gantry_x_seconds_sum 3.55\n"), "{text}");
        assert!(text.contains("gantry_x_seconds_count 3\n"), "{text}");
        assert!(text.contains("gantry_jobs{queue=\"a\\\"b\"} 2.0\n"), "{text}");
        assert!(text.contains("# TYPE gantry_ends counter\ngantry_ends_total{how=\"ok\"} 0.0\n"), "{text}");
        assert!(text.ends_with("# EOF\n"));
    }
}
