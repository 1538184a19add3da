//! `gantry serve --local --demo`: the bundled demo workload (examples/demo-workload.toml), how
//! long each of its steps sleeps (`--demo-step`), and its submission through the API once the
//! controller is up, as a user would submit it. The binary only parses the flag and prints.

use gantry_wire::client::{Client, ClientError, Tls};
use std::path::{Path, PathBuf};

/// The bundled demo workload: 25 jobs whose steps sleep `STEP_S` seconds each.
pub const WORKLOAD: &str = gantry_spec::DEMO_WORKLOAD;

/// A `--demo-step` that is not a number of seconds from 0 to 3600.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?}: seconds from 0 to 3600 (0.05 runs the demo in seconds)")]
pub struct StepOutOfRange(pub String);

/// Why the demo workload was not submitted.
#[derive(Debug, thiserror::Error)]
pub enum DemoError {
    /// The controller could not be reached, or answered nothing.
    #[error("{0}")]
    Client(ClientError),
    /// Listing the jobs already there failed.
    #[error("listing jobs: HTTP {status}: {body}")]
    Listing { status: u16, body: String },
    /// The controller refused the workload.
    #[error("HTTP {status}: {body}")]
    Refused { status: u16, body: String },
    /// The controller's answer to the submission did not read.
    #[error("{0}")]
    Reply(serde_json::Error),
    /// The submission's thread stopped before it answered.
    #[error("{0}")]
    Stopped(tokio::task::JoinError),
}

/// `--demo-step`: seconds from 0 to 3600.
pub fn parse_step(text: &str) -> Result<f64, StepOutOfRange> {
    match text.parse::<f64>() {
        Ok(s) if (0.0..=3600.0).contains(&s) => Ok(s),
        _ => Err(StepOutOfRange(text.to_string())),
    }
}

/// The demo workload with each step sleeping `step` seconds (its `STEP_S`; default 10).
pub fn workload(step: Option<f64>) -> String {
    match step {
        Some(step) => WORKLOAD.replace("STEP_S = \"10\"", &format!("STEP_S = \"{step}\"")),
        None => WORKLOAD.to_string(),
    }
}

/// Submit the demo workload (steps of `step` seconds) to the controller at `url`, trusting
/// `ca`, with the admin token in `data_dir`: the lines to show the operator.
pub async fn submit_bundled(
    data_dir: &Path,
    url: String,
    ca: Option<PathBuf>,
    step: Option<f64>,
) -> Result<String, DemoError> {
    let token = std::fs::read_to_string(data_dir.join("admin.token")).ok().map(|t| t.trim().to_string());
    let trust = Tls { ca, ..Default::default() };
    let workload = workload(step);
    tokio::task::spawn_blocking(move || submit(&url, &trust, token.as_deref(), &workload))
        .await
        .map_err(DemoError::Stopped)?
}

/// Submit `workload` unless the store already has jobs: what was done, in lines to show.
pub fn submit(url: &str, trust: &Tls, token: Option<&str>, workload: &str) -> Result<String, DemoError> {
    let client = Client::new(url, trust).map_err(DemoError::Client)?;
    let (status, listed) = client.request(token, "GET", "/v1/jobs", None).map_err(DemoError::Client)?;
    if status != 200 {
        return Err(DemoError::Listing { status, body: listed });
    }
    if listed.trim() != "[]" {
        return Ok("  demo: the store has jobs already, none submitted (`gantry queue` lists them)".into());
    }
    let (status, reply) = client.request(token, "POST", "/v1/jobs", Some(workload)).map_err(DemoError::Client)?;
    if status != 201 {
        return Err(DemoError::Refused { status, body: reply });
    }
    let ids = serde_json::from_str::<gantry_api::Submitted>(&reply).map_err(DemoError::Reply)?.ids;
    let (first, last) = (ids.first().copied().unwrap_or(0), ids.last().copied().unwrap_or(0));
    Ok(format!(
        "  demo: submitted the {} jobs of examples/demo-workload.toml as jobs {first}-{last}; they run for minutes.\n  \
         try: gantry queue; gantry why {last} (it waits for H100s); gantry logs {first}; gantry nodes; the dashboard",
        ids.len()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every demo job runs at least a minute by default (long enough to see it queue, wait
    /// with a reason and run), and `--demo-step` scales every one of them.
    #[test]
    fn the_demo_runs_for_minutes_unless_told_otherwise() {
        let catalog = gantry_catalog::Catalog::embedded();
        let seconds = |text: &str| -> Vec<f64> {
            let jobs = gantry_spec::parse_workload(text, catalog).expect("the demo parses");
            jobs.iter()
                .map(|job| {
                    let env: std::collections::BTreeMap<_, _> = job.run.env.iter().cloned().collect();
                    let number = |k: &str| env.get(k).and_then(|v| v.parse::<f64>().ok()).expect("STEPS and STEP_S");
                    number("STEPS") * number("STEP_S")
                })
                .collect()
        };
        let default = seconds(&workload(None));
        assert_eq!(default.len(), 25);
        assert!(default.iter().all(|&s| s >= 60.0), "{default:?}");
        assert!(seconds(&workload(Some(0.05))).iter().all(|&s| s <= 2.0));
        assert!(parse_step("-1").is_err() && parse_step("x").is_err() && parse_step("0.5").is_ok());
        assert_eq!(
            parse_step("-1").expect_err("negative").to_string(),
            "\"-1\": seconds from 0 to 3600 (0.05 runs the demo in seconds)"
        );
    }
}
