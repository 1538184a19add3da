//! `gantry usage`: chargeback from the controller's accounting ledger — allocation and
//! measured use side by side, the waste between them, in GPU-hours and money — and the CPU
//! time and memory peak the nodes' cgroups measured of the same jobs.

use crate::jobs_cmd::ServerArg;
use anyhow::bail;
use clap::Args;
use gantry_api::UsageLine;
use serde_json::Value;
use std::process::ExitCode;

pub const EXAMPLES: &str = "Examples:
  gantry usage                               # the last 30 days, by queue
  gantry usage --from -7d --by user          # the last week, by user
  gantry usage --from 2026-11-01 --to 2026-12-01 --by model --csv > november.csv
  gantry usage --by job --json";

#[derive(Args)]
pub struct UsageArgs {
    #[command(flatten)]
    server: ServerArg,
    /// Start: YYYY-MM-DD (UTC), YYYY-MM-DDTHH:MM, Unix seconds, or -N[mhd] before now.
    /// Default: 30 days ago. Rounded down to the hour.
    #[arg(long, allow_hyphen_values = true)]
    from: Option<String>,
    /// End, in the same forms, or `now` (the default). Rounded up to the hour.
    #[arg(long, allow_hyphen_values = true)]
    to: Option<String>,
    /// Group by user, queue, model or job.
    #[arg(long, default_value = "queue", value_parser = ["user", "queue", "model", "job"])]
    by: String,
    /// Print CSV instead of a table.
    #[arg(long, conflicts_with = "json")]
    csv: bool,
}

/// A time as the flags take it, in Unix seconds.
fn parse_time(text: &str, now: u64) -> Result<u64, String> {
    let bad = || {
        format!("time {text:?}: use YYYY-MM-DD, YYYY-MM-DDTHH:MM (UTC), Unix seconds, now, or -N followed by m, h or d")
    };
    let text = text.trim();
    if text == "now" {
        return Ok(now);
    }
    if let Some(ago) = text.strip_prefix('-') {
        let (n, unit) = ago.split_at(ago.len().saturating_sub(1));
        let n: u64 = n.parse().map_err(|_| bad())?;
        let seconds = match unit {
            "m" => 60,
            "h" => 3600,
            "d" => 86_400,
            _ => return Err(bad()),
        };
        return n.checked_mul(seconds).map(|s| now.saturating_sub(s)).ok_or_else(bad);
    }
    if text.bytes().all(|b| b.is_ascii_digit()) {
        return text.parse().map_err(|_| bad());
    }
    let (date, clock) = text.split_once('T').unwrap_or((text, "00:00"));
    let parts: Vec<&str> = date.split('-').collect();
    let [y, m, d] = parts[..] else { return Err(bad()) };
    let (y, m, d): (i64, u32, u32) =
        (y.parse().map_err(|_| bad())?, m.parse().map_err(|_| bad())?, d.parse().map_err(|_| bad())?);
    let (hh, mm) = clock.split_once(':').ok_or_else(bad)?;
    let (hh, mm): (i64, i64) = (hh.parse().map_err(|_| bad())?, mm.parse().map_err(|_| bad())?);
    if !(1970..=9999).contains(&y) || !(1..=12).contains(&m) || !(1..=31).contains(&d) || hh > 23 || mm > 59 {
        return Err(bad());
    }
    let seconds = gantry_types::time::days_from_civil(y, m, d) * 86_400 + hh * 3600 + mm * 60;
    u64::try_from(seconds).map_err(|_| bad())
}

pub fn run(args: UsageArgs) -> anyhow::Result<ExitCode> {
    let now = gantry_server::now_s();
    let from =
        args.from.as_deref().map(|t| parse_time(t, now)).transpose().map_err(|e| anyhow::anyhow!("--from: {e}"))?;
    let to = args.to.as_deref().map(|t| parse_time(t, now)).transpose().map_err(|e| anyhow::anyhow!("--to: {e}"))?;
    if let (Some(f), Some(t)) = (from, to)
        && f > t
    {
        bail!("--from is after --to");
    }
    let mut path = format!("/v1/usage?by={}", args.by);
    if let Some(f) = from {
        path += &format!("&from={f}");
    }
    if let Some(t) = to {
        path += &format!("&to={t}");
    }
    let (lines, sent): (Vec<UsageLine>, Value) = args.server.fetch("GET", &path)?;
    if args.server.json {
        println!("{}", serde_json::to_string_pretty(&sent)?);
    } else if args.csv {
        print_csv(&args.by, &lines);
    } else {
        print_table(&args.by, &lines);
    }
    Ok(ExitCode::SUCCESS)
}

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

fn print_csv(by: &str, lines: &[UsageLine]) {
    let names: Vec<&str> = CSV_COLUMNS.iter().map(|(name, _)| *name).collect();
    println!("{by},{},memory_peak_bytes", names.join(","));
    for l in lines {
        let key = &l.key;
        let key = if key.contains([',', '"']) { format!("\"{}\"", key.replace('"', "\"\"")) } else { key.clone() };
        let values: Vec<String> = CSV_COLUMNS.iter().map(|(_, value)| format!("{:.6}", value(l))).collect();
        let peak = l.memory_peak_bytes.map_or_else(String::new, |b| b.to_string());
        println!("{key},{},{peak}", values.join(","));
    }
}

fn print_table(by: &str, lines: &[UsageLine]) {
    println!(
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
        print_row(&crate::jobs_cmd::shown(&l.key), &row, util, &peak(l.memory_peak_bytes));
    }
    let util = if totals[0] > 0.0 { totals[1] / totals[0] * 100.0 } else { 0.0 };
    print_row("TOTAL", &totals, util, &peak(highest));
}

/// One line of the table: allocated, used, waste, cost allocated, cost used, CPU-hours.
fn print_row(key: &str, row: &[f64; 6], util: f64, peak: &str) {
    println!(
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_parse_in_every_documented_form() {
        let now = 1_795_000_000;
        assert_eq!(parse_time("2026-11-01", now), Ok(1_793_491_200));
        assert_eq!(parse_time("2026-11-01T06:30", now), Ok(1_793_491_200 + 6 * 3600 + 1800));
        assert_eq!(parse_time("1970-01-01", now), Ok(0));
        assert_eq!(parse_time("-2h", now), Ok(now - 7200));
        assert_eq!(parse_time("-7d", now), Ok(now - 7 * 86_400));
        assert_eq!(parse_time("now", now), Ok(now));
        assert_eq!(parse_time("12345", now), Ok(12_345));
        for bad in ["yesterday", "2026-13-01", "2026-11", "-5y", "-h", "2026-11-01T25:00", "-99999999999999999d"] {
            assert!(parse_time(bad, now).is_err(), "{bad}");
        }
    }
}
