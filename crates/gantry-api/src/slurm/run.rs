//! One Slurm command line answered against a controller: what it prints and its exit code
//! (the binary prints them). `sbatch` is not here (it submits through the CLI's own path).

use super::ids::JobRef;
use super::scontrol::Scontrol;
use super::{SlurmArgError, sacct, scancel, scontrol, sinfo, squeue};
use crate::connection::{CallError, Connection};
use crate::{JobView, NodeView};

/// The names answered here.
pub const NAMES: [&str; 5] = ["squeue", "scancel", "sacct", "sinfo", "scontrol"];

/// What a command printed and how it ended.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Reply {
    pub out: String,
    pub err: String,
    pub code: u8,
}

#[derive(Debug, thiserror::Error)]
enum Failed {
    #[error(transparent)]
    Args(#[from] SlurmArgError),
    #[error(transparent)]
    Call(#[from] CallError),
    #[error("the controller's {0} reply is not what this client reads: {1}")]
    Reply(&'static str, serde_json::Error),
}

/// Answer `name args` (`None`: not one of [`NAMES`]); `me` is the invoking user, `now` Unix
/// seconds.
pub fn run(name: &str, args: &[String], conn: &Connection, me: &str, now: u64) -> Option<Reply> {
    let result = match name {
        "squeue" => squeue(args, conn, me, now),
        "scancel" => scancel(args, conn, me),
        "sacct" => sacct(args, conn, me, now),
        "sinfo" => sinfo(args, conn),
        "scontrol" => scontrol(args, conn, now),
        _ => return None,
    };
    Some(result.unwrap_or_else(|e| Reply { err: format!("{name}: error: {e}\n"), code: 1, ..Reply::default() }))
}

fn jobs(conn: &Connection) -> Result<Vec<JobView>, Failed> {
    serde_json::from_value(conn.call("GET", "/v1/jobs", None, &[])?).map_err(|e| Failed::Reply("jobs", e))
}

fn nodes(conn: &Connection) -> Result<Vec<NodeView>, Failed> {
    serde_json::from_value(conn.call("GET", "/v1/nodes", None, &[])?).map_err(|e| Failed::Reply("nodes", e))
}

/// Who ran the command, as Slurm's tools take it (`squeue --me`, `sacct`'s own jobs): `USER`,
/// else `LOGNAME`, else the name of the process's user id (a root shell or cron often has
/// neither variable; Slurm asks the uid).
pub fn invoking_user() -> String {
    ["USER", "LOGNAME"]
        .iter()
        .find_map(|v| std::env::var(v).ok().filter(|u| !u.is_empty()))
        .or_else(|| nix::unistd::User::from_uid(nix::unistd::getuid()).ok().flatten().map(|u| u.name))
        .unwrap_or_default()
}

fn partitions(conn: &Connection) -> Result<crate::partitions::Partitions, Failed> {
    serde_json::from_value(conn.call("GET", "/v1/partitions", None, &[])?).map_err(|e| Failed::Reply("partitions", e))
}

fn printed(out: String) -> Reply {
    Reply { out, ..Reply::default() }
}

fn squeue(args: &[String], conn: &Connection, me: &str, now: u64) -> Result<Reply, Failed> {
    let q = squeue::parse_squeue(args, me)?;
    Ok(printed(squeue::squeue_table(&jobs(conn)?, &q, now)))
}

fn sacct(args: &[String], conn: &Connection, me: &str, now: u64) -> Result<Reply, Failed> {
    let s = sacct::parse_sacct(args, now)?;
    Ok(printed(sacct::sacct_table(&jobs(conn)?, &s, me, now)))
}

fn sinfo(args: &[String], conn: &Connection) -> Result<Reply, Failed> {
    let s = sinfo::parse_sinfo(args)?;
    Ok(printed(sinfo::sinfo_table(&nodes(conn)?, &partitions(conn)?, &s)))
}

/// Cancel each job named; like Slurm's, quiet when all went, an error line for each that did
/// not (none with `-Q`).
fn scancel(args: &[String], conn: &Connection, me: &str) -> Result<Reply, Failed> {
    let c = scancel::parse_scancel(args, me)?;
    let all = jobs(conn)?;
    let mut targets: Vec<(u64, String)> =
        all.iter().filter(|j| c.wants(j)).map(|j| (j.row.id, super::ids::slurm_id(j))).collect();
    // An id naming no job that can still be cancelled goes to the controller, which says why.
    for r in &c.jobs {
        if let JobRef::Job(id) = *r
            && !targets.iter().any(|(t, _)| all.iter().any(|j| j.row.id == *t && r.names(j)))
        {
            targets.push((id, id.to_string()));
        }
    }
    let mut reply = Reply::default();
    for (id, shown) in targets {
        let result = match c.signal {
            None => conn.call("DELETE", &format!("/v1/jobs/{id}"), None, &[]),
            Some(number) => {
                let body = serde_json::json!({ "signal": number.to_string(), "all": c.full }).to_string();
                conn.call("POST", &format!("/v1/jobs/{id}/signal"), Some(&body), &[])
            }
        };
        if let Err(e) = result {
            if !c.quiet {
                reply.err += &format!("scancel: error: Kill job error on job id {shown}: {e}\n");
            }
            reply.code = 1;
        }
    }
    Ok(reply)
}

fn scontrol(args: &[String], conn: &Connection, now: u64) -> Result<Reply, Failed> {
    let mut reply = Reply::default();
    match scontrol::parse_scontrol(args)? {
        Scontrol::Hostnames(list) => {
            let list = list
                .or_else(|| std::env::var("SLURM_JOB_NODELIST").ok())
                .ok_or_else(|| SlurmArgError::new("show hostnames", "no host list given and no $SLURM_JOB_NODELIST"))?;
            reply.out = scontrol::expand(&list)?.iter().map(|n| format!("{n}\n")).collect();
        }
        Scontrol::Hostlist(names) => {
            reply.out = format!("{}\n", gantry_types::text::hostlist(&scontrol::expand(&names)?))
        }
        Scontrol::ShowJobs { jobs: refs, one_line } => {
            let all = jobs(conn)?;
            let shown: Vec<&JobView> =
                all.iter().filter(|j| refs.is_empty() || refs.iter().any(|r| r.names(j))).collect();
            if shown.is_empty() && !refs.is_empty() {
                return Err(SlurmArgError::new("show job", "Invalid job id specified").into());
            }
            reply.out = shown.iter().map(|j| scontrol::show_job(j, now, one_line)).collect();
        }
        Scontrol::ShowNodes { names, one_line } => {
            let all = nodes(conn)?;
            let shown: Vec<&NodeView> = all.iter().filter(|n| names.is_empty() || names.contains(&n.name)).collect();
            if let Some(missing) = names.iter().find(|n| !all.iter().any(|a| &a.name == *n)) {
                return Err(SlurmArgError::new(missing.clone(), "Node not found").into());
            }
            let partitions = partitions(conn)?;
            reply.out = shown.iter().map(|n| scontrol::show_node(n, &partitions, one_line)).collect();
        }
        Scontrol::ShowPartition(name) => {
            reply.out = scontrol::show_partition(&nodes(conn)?, &partitions(conn)?, name.as_deref())?
        }
        Scontrol::Hold(refs) => act_on_jobs(conn, &refs, "hold", &mut reply)?,
        Scontrol::Release(refs) => act_on_jobs(conn, &refs, "release", &mut reply)?,
        Scontrol::Requeue(refs) => act_on_jobs(conn, &refs, "requeue", &mut reply)?,
    }
    Ok(reply)
}

/// `POST /v1/jobs/{id}/WHAT` (hold, release, requeue) for each job named: an error line for each
/// that fails.
fn act_on_jobs(conn: &Connection, refs: &[JobRef], what: &str, reply: &mut Reply) -> Result<(), Failed> {
    for target in scontrol::resolve(refs, &jobs(conn)?) {
        let result = match &target {
            Ok(id) => {
                conn.call("POST", &format!("/v1/jobs/{id}/{what}"), None, &[]).map(|_| ()).map_err(|e| e.to_string())
            }
            Err(named) => Err(format!("no such job: {named}")),
        };
        if let Err(e) = result {
            reply.err += &format!("scontrol: error: {what}: {e}\n");
            reply.code = 1;
        }
    }
    Ok(())
}
