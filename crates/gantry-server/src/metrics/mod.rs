//! `GET /metrics`: the controller's state for Prometheus, encoded by the official
//! `prometheus-client` crate as OpenMetrics and rewritten as the classic text format for
//! scrapers that ask for that (`format.rs`).
//! Names are stable and documented in docs/formats.md (with the DCGM exporter's name where
//! one measures the same thing); labels are bounded by the fleet and the queue file (node,
//! GPU, model, queue, state, reason category, route), never by job or user.

mod format;
pub mod http;
pub mod process;

pub use format::Format;

/// What a scrape adds to the controller's state: the process and its API, and the format
/// asked for.
#[derive(Debug)]
pub struct Scrape<'a> {
    pub process: &'a process::ProcessStats,
    pub http: &'a http::HttpCounts,
    pub format: Format,
}

use prometheus_client::encoding::{EncodeMetric, MetricEncoder};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::{Registry, Unit};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

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
    /// Eligible to started, per start, by queue.
    pub wait_seconds: BTreeMap<String, Histogram>,
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
            wait_seconds: BTreeMap::new(),
            starts: 0,
            stops: 0,
            ended: Default::default(),
            cpu_ms_by_queue: Default::default(),
            heartbeats: (0, 0),
        }
    }
}

impl ServiceStats {
    /// A job of `queue` started `seconds` after it became eligible.
    pub fn observe_wait(&mut self, queue: &str, seconds: f64) {
        match self.wait_seconds.get_mut(queue) {
            Some(h) => h.observe(seconds),
            None => {
                let mut h = Histogram::new(WAIT_BUCKETS);
                h.observe(seconds);
                self.wait_seconds.insert(queue.to_string(), h);
            }
        }
    }
}

/// Labels of one sample, in the order given.
pub type Labels = Vec<(String, String)>;

/// One scrape's metric families, encoded by the `prometheus-client` crate (OpenMetrics text:
/// `# HELP`, `# TYPE`, `# UNIT`, samples, `# EOF`). Callers name families and samples as they
/// appear in the exposition (`…_seconds`, `…_total`); the crate adds those suffixes itself, so
/// they are taken off here. Samples keep the order they were given in (the callers' sorted
/// order), so two scrapes of the same state read the same.
#[derive(Debug, Default)]
pub struct Exposition {
    registry: Registry,
    families: BTreeMap<String, Arc<Mutex<SampleFamily>>>,
}

/// The samples of one gauge or counter family, in order.
#[derive(Debug)]
struct SampleFamily {
    counter: bool,
    samples: Vec<(Labels, f64)>,
}

/// What the registry holds: a handle on a family filled after it is registered.
#[derive(Debug)]
struct FamilyHandle(Arc<Mutex<SampleFamily>>);

impl prometheus_client::metrics::TypedMetric for FamilyHandle {}

impl EncodeMetric for FamilyHandle {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        let family = self.0.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        for (labels, value) in &family.samples {
            if labels.is_empty() {
                write_value(&mut encoder, family.counter, *value)?;
            } else {
                write_value(&mut encoder.encode_family(labels)?, family.counter, *value)?;
            }
        }
        Ok(())
    }

    fn metric_type(&self) -> MetricType {
        let counter = self.0.lock().map(|f| f.counter).unwrap_or(false);
        if counter { MetricType::Counter } else { MetricType::Gauge }
    }
}

fn write_value(encoder: &mut MetricEncoder, counter: bool, value: f64) -> Result<(), std::fmt::Error> {
    if counter {
        encoder.encode_counter::<prometheus_client::encoding::NoLabelSet, f64, f64>(&value, None)
    } else {
        encoder.encode_gauge(&value)
    }
}

/// A family name as the crate registers it: without the unit suffix it appends (and a
/// counter's name without `_total`, which it appends to the sample).
fn base_name<'n>(name: &'n str, unit: &str) -> &'n str {
    let name = name.strip_suffix("_total").unwrap_or(name);
    match unit {
        "seconds" | "bytes" => name.strip_suffix(&format!("_{unit}")[..]).unwrap_or(name),
        _ => name,
    }
}

impl Exposition {
    /// Declare a family: `kind` gauge or counter, `unit` empty, `seconds` or `bytes`.
    pub fn family(&mut self, name: &str, kind: &str, unit: &str, help: &str) {
        let name = name.strip_suffix("_total").unwrap_or(name);
        let family = Arc::new(Mutex::new(SampleFamily { counter: kind == "counter", samples: Vec::new() }));
        self.register(base_name(name, unit), help, unit, FamilyHandle(family.clone()));
        self.families.insert(name.to_string(), family);
    }

    fn register(&mut self, base: &str, help: &str, unit: &str, metric: impl prometheus_client::registry::Metric) {
        let help = help.trim_end_matches('.');
        match unit {
            "seconds" => self.registry.register_with_unit(base, help, Unit::Seconds, metric),
            "bytes" => self.registry.register_with_unit(base, help, Unit::Bytes, metric),
            _ => self.registry.register(base, help, metric),
        }
    }

    /// One sample of a declared family (`name` as exposed: a counter's ends in `_total`).
    pub fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: f64) {
        let labels: Labels = labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        let family = self.families.get(name).or_else(|| name.strip_suffix("_total").and_then(|n| self.families.get(n)));
        match family {
            Some(family) => {
                family.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).samples.push((labels, value))
            }
            None => debug_assert!(false, "sample of an undeclared family {name}"),
        }
    }

    /// A histogram family (unit seconds) from the controller's counts.
    pub fn histogram(&mut self, name: &str, help: &str, h: &Histogram) {
        self.register(base_name(name, "seconds"), help, "seconds", h.clone());
    }

    /// A histogram family (unit seconds) with one histogram per label set.
    pub fn histograms(&mut self, name: &str, help: &str, each: Vec<(Labels, Histogram)>) {
        self.register(base_name(name, "seconds"), help, "seconds", HistogramFamily(each));
    }

    pub fn finish(self, format: Format) -> String {
        let mut text = String::new();
        // Writing to a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut text, &self.registry);
        let text = infinities_spelled(text);
        match format {
            Format::OpenMetrics => text,
            Format::Text004 => format::to_text004(&text),
        }
    }
}

/// The crate writes an infinite sample value as `inf`; both formats spell it `+Inf`.
fn infinities_spelled(text: String) -> String {
    if !text.contains(" inf\n") && !text.contains(" -inf\n") {
        return text;
    }
    let mut out = String::with_capacity(text.len());
    for line in text.lines() {
        let fixed = match line.rsplit_once(' ') {
            Some((series, "inf")) if !line.starts_with('#') => format!("{series} +Inf"),
            Some((series, "-inf")) if !line.starts_with('#') => format!("{series} -Inf"),
            _ => line.to_string(),
        };
        out.push_str(&fixed);
        out.push('\n');
    }
    out
}

/// Histograms of one family, each under its labels.
#[derive(Debug)]
struct HistogramFamily(Vec<(Labels, Histogram)>);

impl prometheus_client::metrics::TypedMetric for HistogramFamily {
    const TYPE: MetricType = MetricType::Histogram;
}

impl EncodeMetric for HistogramFamily {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        for (labels, histogram) in &self.0 {
            histogram.encode(encoder.encode_family(labels)?)?;
        }
        Ok(())
    }

    fn metric_type(&self) -> MetricType {
        MetricType::Histogram
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
        out.family("gantry_limit", "gauge", "", "limit");
        out.sample("gantry_limit", &[], f64::INFINITY);
        let text = out.finish(Format::OpenMetrics);
        assert!(text.contains("# TYPE gantry_x_seconds histogram\n# UNIT gantry_x_seconds seconds\n"), "{text}");
        assert!(text.contains("gantry_x_seconds_bucket{le=\"0.1\"} 1\n"), "{text}");
        assert!(text.contains("gantry_x_seconds_bucket{le=\"1.0\"} 2\n"), "{text}");
        assert!(text.contains("gantry_x_seconds_bucket{le=\"+Inf\"} 3\n"), "{text}");
        assert!(text.contains("gantry_x_seconds_sum 3.55\n"), "{text}");
        assert!(text.contains("gantry_x_seconds_count 3\n"), "{text}");
        assert!(text.contains("gantry_jobs{queue=\"a\\\"b\"} 2.0\n"), "{text}");
        assert!(text.contains("# TYPE gantry_ends counter\ngantry_ends_total{how=\"ok\"} 0.0\n"), "{text}");
        assert!(text.contains("\ngantry_limit +Inf\n"), "{text}");
        assert!(text.ends_with("# EOF\n"));
    }
}
