//! `GET /metrics`, the service itself: which build answers (`gantry_build_info`), the
//! standard `process_*` series, and the API's requests by route, method and code with their
//! answer times.

use crate::metrics::http::HttpCounts;
use crate::metrics::{Exposition, Labels, Scrape};

pub fn service(out: &mut Exposition, scrape: &Scrape) {
    build_info(out);
    process(out, scrape.process);
    http(out, scrape.http);
}

fn build_info(out: &mut Exposition) {
    out.family("gantry_build_info", "gauge", "", "Always 1: the version of gantry that answers, as a label.");
    out.sample("gantry_build_info", &[("version", env!("CARGO_PKG_VERSION"))], 1.0);
}

fn process(out: &mut Exposition, stats: &crate::metrics::process::ProcessStats) {
    for (name, kind, help, value) in stats.series() {
        let unit = if name.contains("_seconds") && kind == "counter" {
            "seconds"
        } else if name.ends_with("_bytes") {
            "bytes"
        } else {
            ""
        };
        out.family(name, kind, unit, help);
        out.sample(name, &[], value);
    }
}

fn http(out: &mut Exposition, counts: &HttpCounts) {
    out.family(
        "gantry_http_requests_total",
        "counter",
        "",
        "API requests answered since the controller started, by route template, method and status code.",
    );
    for (route, r) in &counts.routes {
        for ((method, code), count) in &r.requests {
            let code = code.to_string();
            let labels = [("route", route.as_str()), ("method", method), ("code", &code)];
            out.sample("gantry_http_requests_total", &labels, *count as f64);
        }
    }
    let each: Vec<(Labels, _)> = counts
        .routes
        .iter()
        .map(|(route, r)| (vec![("route".to_string(), route.clone())], r.durations.clone()))
        .collect();
    out.histograms(
        "gantry_http_request_duration_seconds",
        "Time the API took to answer a request, by route template.",
        each,
    );
}
