//! `scancel` as Slurm users type it: job ids, ranges (`12-15`) and array elements (`45_3`,
//! `45_[1-3]`; an array's job id alone is the whole array), or every job of `-u USER`,
//! `-p PARTITION`, `-t STATE`, `-n NAME` (those together with ids narrow them).

use super::ids::{JobRef, job_refs};
use super::{SlurmArgError, list, options, refused};
use crate::JobView;

const SUPPORTED: &str = "job ids, ranges and array elements; -u/--user, --me, -p/--partition, -t/--state, -n/--name, \
     -Q/--quiet, -s/--signal (to the job's steps), -f/--full (with the batch script)";

/// What `scancel` was asked to cancel.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Scancel {
    pub jobs: Vec<JobRef>,
    pub users: Vec<String>,
    pub partitions: Vec<String>,
    pub states: Vec<String>,
    pub names: Vec<String>,
    pub quiet: bool,
    /// `-s/--signal`: send this signal (its number) instead of cancelling.
    pub signal: Option<i32>,
    /// `-f/--full`: the signal goes to the batch script too, not only the steps.
    pub full: bool,
}

/// Read `scancel`'s arguments; `me` is the user `--me` stands for.
pub fn parse_scancel(args: &[String], me: &str) -> Result<Scancel, SlurmArgError> {
    let mut c = Scancel::default();
    for (option, value) in options(args, &["-Q", "--quiet", "--me", "-f", "--full", "-b", "--batch"])? {
        match option.as_str() {
            "" => c.jobs.extend(job_refs("job id", &value)?),
            "-u" | "--user" => c.users.extend(list(&value)),
            "--me" => c.users.push(me.to_string()),
            "-p" | "--partition" => c.partitions.extend(list(&value)),
            "-t" | "--state" => c.states.extend(list(&value).iter().map(|s| s.to_lowercase())),
            "-n" | "--name" | "--jobname" => c.names.extend(list(&value)),
            "-Q" | "--quiet" => c.quiet = true,
            "-s" | "--signal" => {
                let names: Vec<&str> = gantry_wire::USER_SIGNALS.iter().map(|(n, _)| *n).collect();
                c.signal = Some(gantry_wire::user_signal(&value).ok_or_else(|| {
                    SlurmArgError::new(option, format!("{value}: Invalid job signal"))
                        .hint(format!("one of {}", names.join(" ")))
                })?);
            }
            "-f" | "--full" => c.full = true,
            "-b" | "--batch" => {
                return Err(SlurmArgError::new(option, "a signal to the batch script alone is not supported")
                    .hint("--full signals the batch script and the steps; without it, only the steps"));
            }
            other => return Err(refused("scancel", other, SUPPORTED)),
        }
    }
    if c.jobs.is_empty() && c.users.is_empty() && c.partitions.is_empty() && c.states.is_empty() && c.names.is_empty() {
        return Err(
            SlurmArgError::new("", "no job id given").hint("scancel ID [ID...], or -u USER, -p PARTITION, -t STATE")
        );
    }
    Ok(c)
}

impl Scancel {
    /// Whether `job` is one to cancel (a job still pending or running).
    pub fn wants(&self, job: &JobView) -> bool {
        let (_, state) = super::state(job);
        let user = job.row.job.control.user.as_deref().unwrap_or_default();
        let name = super::ids::slurm_name(job);
        !job.row.state.is_final()
            && (self.jobs.is_empty() || self.jobs.iter().any(|r| r.names(job)))
            && (self.users.is_empty() || self.users.iter().any(|u| u == user))
            && (self.partitions.is_empty() || self.partitions.iter().any(|p| p == job.row.partition()))
            && (self.states.is_empty()
                || self
                    .states
                    .iter()
                    .any(|s| s == state || (s == "pd" && state == "pending") || (s == "r" && state == "running")))
            && (self.names.is_empty() || self.names.contains(&name))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn scancel_takes_ids_ranges_arrays_and_filters_and_nothing_it_would_ignore() {
        let c = parse_scancel(&args(&["3", "5-6,9", "45_[1-2]"]), "me").expect("ids");
        assert_eq!(c.jobs.len(), 6);
        let c = parse_scancel(&args(&["-u", "alice", "--me", "-t", "PENDING"]), "bob").expect("filters");
        assert_eq!(
            (c.users.clone(), c.states.clone()),
            (vec!["alice".to_string(), "bob".into()], vec!["pending".to_string()])
        );
        let c = parse_scancel(&args(&["--signal=USR1", "3"]), "me").expect("a signal");
        assert_eq!((c.signal, c.full), (Some(10), false));
        let c = parse_scancel(&args(&["-s", "SIGTERM", "-f", "3"]), "me").expect("a signal");
        assert_eq!((c.signal, c.full), (Some(15), true));
        assert_eq!(parse_scancel(&args(&["-s", "2", "3"]), "me").expect("by number").signal, Some(2));
        let e = parse_scancel(&args(&["-s", "SEGV", "3"]), "me").expect_err("not a user's signal");
        assert!(e.to_string().contains("SEGV: Invalid job signal") && e.to_string().contains("USR1"), "{e}");
        assert!(parse_scancel(&args(&["-b", "-s", "USR1", "3"]), "me").is_err());
        assert!(parse_scancel(&args(&[]), "me").is_err());
        assert!(
            parse_scancel(&args(&["--interactive", "3"]), "me")
                .expect_err("refused")
                .to_string()
                .contains("not supported")
        );
        let err = parse_scancel(&args(&["x"]), "me").expect_err("not an id");
        assert!(err.to_string().starts_with("job id: \"x\" is not a job id"), "{err}");
    }
}
