//! `GET /metrics`: the controller's state in the OpenMetrics text format, for Prometheus.
//! Names are stable and documented in docs/formats.md (with the DCGM exporter's name where
//! one measures the same thing); labels are bounded by the fleet and the queue file (node,
//! GPU index, model, queue, state), never by job or user.

use std::fmt::Write;

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
}

impl Default for ServiceStats {
    fn default() -> Self {
        ServiceStats {
            cycle_seconds: Histogram::new(CYCLE_BUCKETS),
            wait_seconds: Histogram::new(WAIT_BUCKETS),
            starts: 0,
            stops: 0,
            ended: Default::default(),
        }
    }
}

/// Label values are quoted; `\`, `"` and line breaks escaped.
fn label(value: &str) -> String {
    value.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

/// Writes metric families in order: `# TYPE`, `# HELP`, then samples.
#[derive(Debug, Default)]
pub struct Exposition {
    text: String,
}

impl Exposition {
    pub fn family(&mut self, name: &str, kind: &str, unit: &str, help: &str) {
        let _ = writeln!(self.text, "# TYPE {name} {kind}");
        if !unit.is_empty() {
            let _ = writeln!(self.text, "# UNIT {name} {unit}");
        }
        let _ = writeln!(self.text, "# HELP {name} {help}");
    }

    pub fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: f64) {
        self.text += name;
        if !labels.is_empty() {
            let pairs: Vec<String> = labels.iter().map(|(k, v)| format!("{k}=\"{}\"", label(v))).collect();
            let _ = write!(self.text, "{{{}}}", pairs.join(","));
        }
        let _ = writeln!(self.text, " {}", number(value));
    }

    pub fn histogram(&mut self, name: &str, help: &str, h: &Histogram) {
        self.family(name, "histogram", "seconds", help);
        for (bound, count) in h.bounds.iter().zip(&h.counts) {
            self.sample(&format!("{name}_bucket"), &[("le", &number(*bound))], *count as f64);
        }
        self.sample(&format!("{name}_bucket"), &[("le", "+Inf")], h.count as f64);
        self.sample(&format!("{name}_sum"), &[], h.sum);
        self.sample(&format!("{name}_count"), &[], h.count as f64);
    }

    pub fn finish(mut self) -> String {
        self.text += "# EOF\n";
        self.text
    }
}

/// Integers without a fraction, others as Rust prints them (shortest round trip).
fn number(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e15 { format!("{}", v as i64) } else { format!("{v}") }
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
        let text = out.finish();
        assert!(text.contains("gantry_x_seconds_bucket{le=\"0.1\"} 1\n"), "{text}");
        assert!(text.contains("gantry_x_seconds_bucket{le=\"1\"} 2\n"), "{text}");
        assert!(text.contains("gantry_x_seconds_bucket{le=\"+Inf\"} 3\n"), "{text}");
        assert!(text.contains("gantry_x_seconds_sum 3.55\n"), "{text}");
        assert!(text.contains("gantry_jobs{queue=\"a\\\"b\"} 2\n"), "{text}");
        assert!(text.ends_with("# EOF\n"));
    }
}
