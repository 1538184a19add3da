//! Job steps on their way to the controller. `srun` writes each step's record into the
//! `steps/N` file it numbers the step with (at its start, and again at its end); when the
//! script has ended, the batch host reads them back and writes one marked line per step to
//! the task's own log (the agent's file, not the script's output); when that task exits, the
//! agent reads the marked lines from the end of its log and reports them with the exit. The
//! records are the job's own statement: bounded (`gantry_types::STEPS_MAX`, and the log's last
//! [`RECORDS_BYTES_MAX`]) and only ever kept with that job.

use gantry_types::{STEPS_MAX, StepRecord};
use std::path::Path;

/// What marks a step record in a task's log.
pub const RECORD_MARK: &str = "gantry-step ";

/// How much of the end of a task's log is searched for records.
pub const RECORDS_BYTES_MAX: u64 = 128 * 1024;

/// Write `record` to the step's file under the step directory.
pub fn write(dir: &Path, record: &StepRecord) {
    let json = serde_json::to_string(record).unwrap_or_default();
    let _ = std::fs::write(dir.join("steps").join(record.step.to_string()), json);
}

/// The step records under the step directory, by step number (at most `STEPS_MAX`; a file
/// that is not one is skipped).
pub fn read_all(dir: &Path) -> Vec<StepRecord> {
    let mut out = Vec::new();
    for step in 0..STEPS_MAX as u32 {
        let Ok(text) = std::fs::read_to_string(dir.join("steps").join(step.to_string())) else { break };
        if let Ok(record) = serde_json::from_str::<StepRecord>(&text) {
            out.push(record);
        }
    }
    out
}

/// The log lines that carry `records`.
pub fn lines(records: &[StepRecord]) -> String {
    records.iter().filter_map(|r| serde_json::to_string(r).ok()).map(|j| format!("{RECORD_MARK}{j}\n")).collect()
}

/// The step records in `log` (a task log's end): each marked line that reads as a sane one,
/// the last record of each step number kept, in step order.
pub fn parse(log: &str) -> Vec<StepRecord> {
    let mut by_step = std::collections::BTreeMap::new();
    for line in log.lines() {
        let Some(json) = line.strip_prefix(RECORD_MARK) else { continue };
        if let Ok(record) = serde_json::from_str::<StepRecord>(json)
            .map_err(|_| ())
            .and_then(|r: StepRecord| if r.is_sane() { Ok(r) } else { Err(()) })
            && (by_step.len() < STEPS_MAX || by_step.contains_key(&record.step))
        {
            by_step.insert(record.step, record);
        }
    }
    by_step.into_values().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(step: u32) -> StepRecord {
        StepRecord {
            step,
            name: "python3".into(),
            tasks: 4,
            nodes: "n[1-2]".into(),
            start_s: 10,
            end_s: Some(20),
            exit_code: Some(0),
        }
    }

    #[test]
    fn records_round_trip_through_the_log_and_junk_is_skipped() {
        let log = format!(
            "some output\n{}{RECORD_MARK}not json\n{RECORD_MARK}{{\"step\":9,\"name\":\"{}\",\"tasks\":1,\"nodes\":\"n\",\"start_s\":1}}\n",
            lines(&[record(1), record(0)]),
            "x".repeat(500)
        );
        assert_eq!(parse(&log), [record(0), record(1)]);
        let mut backwards = record(2);
        backwards.end_s = Some(1);
        assert!(parse(&lines(&[backwards])).is_empty(), "an end before its start is not kept");
    }

    #[test]
    fn srun_files_are_read_back_in_step_order() {
        let dir = std::env::temp_dir().join(format!("gantry-records-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("steps")).expect("dir");
        write(&dir, &record(0));
        write(&dir, &record(1));
        assert_eq!(read_all(&dir), [record(0), record(1)]);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
