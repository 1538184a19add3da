//! `scancel` as Slurm users type it: job ids, ranges (`12-15`) and array elements (`45_3`,
//! `45_[1-3]`; an array's job id alone is the whole array), or every job of `-u USER`,
//! `-p PARTITION`, `-t STATE`, `-n NAME` (those together with ids narrow them).

use super::ids::{JobRef, job_refs};
use super::{SlurmArgError, list, options, refused};
use crate::JobView;

const SUPPORTED: &str =
    "job ids, ranges and array elements; -u/--user, --me, -p/--partition, -t/--state, -n/--name, -Q/--quiet";

/// What `scancel` was asked to cancel.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Scancel {
    pub jobs: Vec<JobRef>,
    pub users: Vec<String>,
    pub partitions: Vec<String>,
    pub states: Vec<String>,
    pub names: Vec<String>,
    pub quiet: bool,
}

/// Read `scancel`'s arguments; `me` is the user `--me` stands for.
pub fn parse_scancel(args: &[String], me: &str) -> Result<Scancel, SlurmArgError> {
    let mut c = Scancel::default();
    for (option, value) in options(args, &["-Q", "--quiet", "--me"])? {
        match option.as_str() {
            "" => c.jobs.extend(job_refs("job id", &value)?),
            "-u" | "--user" => c.users.extend(list(&value)),
            "--me" => c.users.push(me.to_string()),
            "-p" | "--partition" => c.partitions.extend(list(&value)),
            "-t" | "--state" => c.states.extend(list(&value).iter().map(|s| s.to_lowercase())),
            "-n" | "--name" | "--jobname" => c.names.extend(list(&value)),
            "-Q" | "--quiet" => c.quiet = true,
            "-s" | "--signal" => {
                return Err(SlurmArgError::new(
                    option,
                    "gantry cannot send a job's tasks a signal of your choosing yet",
                )
                .hint("scancel without --signal stops the job: SIGTERM, then SIGKILL after its grace period"));
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
            && (self.partitions.is_empty() || self.partitions.contains(&job.row.queue))
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
        let e = parse_scancel(&args(&["--signal=USR1", "3"]), "me").expect_err("no signals");
        assert!(e.to_string().contains("cannot send") && e.to_string().contains("hint:"), "{e}");
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
