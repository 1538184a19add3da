//! The accounting ledger's lines as `gantry usage` prints them: a table with a total, or CSV.

use super::{put, shown};
use crate::UsageLine;

/// A CSV column: its name and a line's value in it.
type Column = (&'static str, fn(&UsageLine) -> f64);

/// The CSV columns, in order (the memory peak, an integer, follows them).
const CSV_COLUMNS: [Column; 10] = [
    ("allocated_gpu_hours", |l| l.allocated_gpu_hours),
    ("used_gpu_hours", |l| l.used_gpu_hours),
    ("utilization", |l| l.utilization),
    ("waste_gpu_hours", |l| l.waste_gpu_hours),
    ("normalized_allocated_gpu_hours", |l| l.normalized_allocated_gpu_hours),
    ("normalized_used_gpu_hours", |l| l.normalized_used_gpu_hours),
    ("cost_allocated", |l| l.cost_allocated),
    ("cost_used", |l| l.cost_used),
    ("waste_cost", |l| l.waste_cost),
    ("cpu_hours", |l| l.cpu_hours),
];

/// The lines as CSV, grouped `by` (the first column's name).
pub fn usage_csv(by: &str, lines: &[UsageLine]) -> String {
    let mut out = String::new();
    let names: Vec<&str> = CSV_COLUMNS.iter().map(|(name, _)| *name).collect();
    put!(out, "{by},{},memory_peak_bytes", names.join(","));
    for l in lines {
        let key = &l.key;
        let key = if key.contains([',', '"']) { format!("\"{}\"", key.replace('"', "\"\"")) } else { key.clone() };
        let values: Vec<String> = CSV_COLUMNS.iter().map(|(_, value)| format!("{:.6}", value(l))).collect();
        let peak = l.memory_peak_bytes.map_or_else(String::new, |b| b.to_string());
        put!(out, "{key},{},{peak}", values.join(","));
    }
    out
}

/// The lines as a table grouped `by`, with a total row.
pub fn usage_table(by: &str, lines: &[UsageLine]) -> String {
    let mut out = String::new();
    put!(
        out,
        "{:<20} {:>12} {:>12} {:>6} {:>12} {:>12} {:>12} {:>12} {:>10} {:>10}",
        by.to_uppercase(),
        "ALLOC GPU-h",
        "USED GPU-h",
        "UTIL",
        "WASTE GPU-h",
        "COST ALLOC",
        "COST USED",
        "WASTE $",
        "CPU-h",
        "PEAK MEM"
    );
    let peak = |b: Option<u64>| b.map_or_else(|| "-".to_string(), |b| gantry_types::Bytes(b).to_string());
    let mut totals = [0.0; 6];
    let mut highest: Option<u64> = None;
    for l in lines {
        let row =
            [l.allocated_gpu_hours, l.used_gpu_hours, l.waste_gpu_hours, l.cost_allocated, l.cost_used, l.cpu_hours];
        for (t, v) in totals.iter_mut().zip(row) {
            *t += v;
        }
        highest = highest.max(l.memory_peak_bytes);
        let util = l.utilization * 100.0;
        row_line(&mut out, &shown(&l.key), &row, util, &peak(l.memory_peak_bytes));
    }
    let util = if totals[0] > 0.0 { totals[1] / totals[0] * 100.0 } else { 0.0 };
    row_line(&mut out, "TOTAL", &totals, util, &peak(highest));
    out
}

/// One line of the table: allocated, used, waste, cost allocated, cost used, CPU-hours.
fn row_line(out: &mut String, key: &str, row: &[f64; 6], util: f64, peak: &str) {
    put!(
        out,
        "{key:<20} {:>12.3} {:>12.3} {util:>5.0}% {:>12.3} {:>12.2} {:>12.2} {:>12.2} {:>10.3} {peak:>10}",
        row[0],
        row[1],
        row[2],
        row[3],
        row[4],
        row[3] - row[4],
        row[5],
    );
}
