//! What a run leaves behind besides its summary: the report folder (CSV, one SVG per pod list
//! or trace, an HTML page embedding them), the time replay's per-event CSV, and the JSON that
//! names each result by its trace.

use super::sweep::SweepResult;
use crate::TracePod;
use crate::protocol_b::ReplayResult;
use crate::report;
use std::path::Path;

/// A report folder could not be made or written.
#[derive(Debug, thiserror::Error)]
#[error("cannot write {path}: {error}")]
pub struct WriteError {
    pub path: String,
    pub error: std::io::Error,
}

/// Write `text` to `path`, naming the path when it cannot.
pub fn write(path: &Path, text: impl AsRef<[u8]>) -> Result<(), WriteError> {
    std::fs::write(path, text).map_err(|error| WriteError { path: path.display().to_string(), error })
}

fn create(dir: &Path) -> Result<(), WriteError> {
    std::fs::create_dir_all(dir).map_err(|error| WriteError { path: dir.display().to_string(), error })
}

/// Protocol A's report: `curves.csv`, one SVG per pod list, `report.html`.
pub fn sweep_report(dir: &Path, lists: &[(String, Vec<TracePod>)], sweep: &SweepResult) -> Result<(), WriteError> {
    create(dir)?;
    let grouped: Vec<(String, report::ListResults<'_>)> = lists
        .iter()
        .enumerate()
        .map(|(l, (name, _))| {
            let mut by_policy: report::ListResults<'_> = Default::default();
            for run in sweep.runs.iter().filter(|r| r.list == l) {
                by_policy.entry(run.result.policy.clone()).or_default().push(&run.result);
            }
            (name.clone(), by_policy)
        })
        .collect();
    write(&dir.join("curves.csv"), report::curves_csv(&grouped))?;
    for (name, by_policy) in &grouped {
        write(&dir.join(format!("{name}.svg")), report::allocation_svg(name, by_policy))?;
    }
    write(&dir.join("report.html"), report::html("gantry sim — Protocol A (FGD paper)", &grouped))
}

/// Time replays by trace (or pod list) name.
pub type Traces = [(String, Vec<ReplayResult>)];

/// A time replay's report: `series.csv`, one SVG per trace, `report.html`.
pub fn replay_report(dir: &Path, traces: &Traces) -> Result<(), WriteError> {
    create(dir)?;
    let grouped: Vec<(String, report::ReplayRuns<'_>)> =
        traces.iter().map(|(name, runs)| (name.clone(), runs.iter().collect())).collect();
    write(&dir.join("series.csv"), report::replay_csv(&grouped))?;
    for (name, runs) in &grouped {
        let title = format!("{name}: allocated and used over time");
        write(&dir.join(format!("{name}.svg")), report::replay_svg(&title, runs))?;
    }
    write(&dir.join("report.html"), report::replay_html("gantry sim — time replay", &grouped))
}

/// The header of the per-event CSV (`--decisions-out` on a time replay).
pub const EVENTS_HEADER: &str = "trace,policy,seed,time_s,event,job,queue,milli,preemptor,cause,kill_at_s\n";

/// Every job event of every replay, one CSV row each.
pub fn replay_events_csv(traces: &Traces) -> String {
    let mut out = String::from(EVENTS_HEADER);
    for (name, runs) in traces {
        for r in runs {
            for e in &r.events {
                let opt = |v: Option<String>| v.unwrap_or_default();
                out.push_str(&format!(
                    "{name},{},{},{},{},{},{},{},{},{},{}\n",
                    r.policy,
                    r.seed,
                    e.time_s,
                    e.event,
                    e.job,
                    e.queue,
                    e.milli,
                    opt(e.preemptor.clone()),
                    e.cause.unwrap_or(""),
                    opt(e.kill_at_s.map(|t| t.to_string()))
                ));
            }
        }
    }
    out
}

/// A replay's result named by its trace or pod list (several run in one call).
#[derive(Debug, serde::Serialize)]
pub struct NamedReplay<'a> {
    pub trace: &'a str,
    #[serde(flatten)]
    pub result: &'a ReplayResult,
}

/// Every replay, named, in order: what `gantry sim --json` prints for time replays.
pub fn named_replays(traces: &Traces) -> Vec<NamedReplay<'_>> {
    traces.iter().flat_map(|(name, runs)| runs.iter().map(move |result| NamedReplay { trace: name, result })).collect()
}
