//! The CLI's side of the live service, in Slurm's habits: `submit`, `queue`, `show`, `why`,
//! `cancel`, `logs`, talking to a controller over its REST API.

use anyhow::{Context, bail};
use clap::Args;
use gantry_api::JobView;
use serde_json::Value;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

pub const EXAMPLES: &str = "Examples:
  gantry submit examples/demo-workload.toml
  gantry submit job.toml --wait
  gantry submit --gpus 2 --queue research --time 2:00:00 -- python train.py --lr 3e-4
  gantry queue --state pending,running
  gantry why 12
  gantry logs 12
  gantry cancel 12";

#[derive(Args, Clone)]
pub struct ServerArg {
    /// The controller (default: $GANTRY_SERVER, else https://127.0.0.1:8177); several,
    /// comma-separated, for a leader and its standbys (the first that answers is used).
    #[arg(long, value_name = "URL[,URL...]", global = true)]
    server: Option<String>,
    /// The CA file the controller's certificate is verified with (default: $GANTRY_CA, else
    /// the data directory's ca.pem when there is one, else the public web roots).
    #[arg(long, value_name = "FILE", global = true)]
    ca: Option<PathBuf>,
    /// API token (default: $GANTRY_TOKEN, else the local admin token `gantry serve --local`
    /// wrote to its data directory).
    #[arg(long, value_name = "TOKEN", global = true)]
    token: Option<String>,
    /// The controller's data directory, for its admin token when no token is given (default:
    /// $GANTRY_DATA, else ~/.local/share/gantry; what `gantry serve --data` was given).
    #[arg(long, value_name = "DIR", global = true)]
    data: Option<PathBuf>,
    /// Print JSON instead of a table.
    #[arg(long, global = true)]
    pub json: bool,
    /// Allow a plain http:// --server on another machine (a controller run with
    /// --insecure-http): the token crosses the network in the clear. Refused without it.
    #[arg(long, global = true)]
    insecure_http: bool,
}

impl ServerArg {
    fn url(&self) -> String {
        self.server
            .clone()
            .or_else(|| std::env::var("GANTRY_SERVER").ok())
            .unwrap_or_else(|| format!("https://{}", crate::serve_cmd::DEFAULT_LISTEN))
    }

    /// The data directory: --data, $GANTRY_DATA, the default.
    fn data_dir(&self) -> Option<PathBuf> {
        self.data.clone().or_else(|| crate::serve_cmd::default_data_dir().ok())
    }

    /// What the controller's certificate is checked against.
    fn trust(&self) -> gantry_wire::client::Tls {
        let ca = self
            .ca
            .clone()
            .or_else(|| std::env::var_os("GANTRY_CA").map(PathBuf::from))
            .or_else(|| self.data_dir().map(|d| d.join(gantry_server::tls::CA_CERT)).filter(|p| p.exists()));
        gantry_wire::client::Tls { ca, client_cert: None, plain_http_off_loopback: self.insecure_http }
    }

    /// The token to send, and where it came from (for the hint when it is refused).
    fn token(&self) -> (Option<String>, String) {
        if let Some(t) = self.token.clone() {
            return (Some(t), "the token sent came from --token".into());
        }
        if let Ok(t) = std::env::var("GANTRY_TOKEN") {
            return (Some(t), "the token sent came from $GANTRY_TOKEN".into());
        }
        let Some(data) = self.data_dir() else {
            return (None, "no token was sent (no --token, no $GANTRY_TOKEN, no data directory)".into());
        };
        let path = data.join("admin.token");
        match std::fs::read_to_string(&path) {
            Ok(t) => (Some(t.trim().to_string()), format!("the token sent came from {}", path.display())),
            Err(_) => (None, format!("no token was sent (no --token, no $GANTRY_TOKEN, no {})", path.display())),
        }
    }

    /// Call the API; a 4xx/5xx becomes an error with the controller's message (and, for a
    /// refused token, where this one came from and how to give another).
    pub fn call(&self, method: &str, path: &str, body: Option<&str>) -> anyhow::Result<Value> {
        self.call_with(method, path, body, &[])
    }

    /// [`ServerArg::call`], the reply read as the API's type `T` (and the reply as sent, for
    /// `--json`, which prints what the controller said, fields this CLI does not know included).
    pub fn fetch<T: serde::de::DeserializeOwned>(&self, method: &str, path: &str) -> anyhow::Result<(T, Value)> {
        let value = self.call(method, path, None)?;
        Ok((typed(&value, path)?, value))
    }

    /// [`ServerArg::call`] with extra headers.
    fn call_with(
        &self,
        method: &str,
        path: &str,
        body: Option<&str>,
        headers: &[(&str, &str)],
    ) -> anyhow::Result<Value> {
        let (token, source) = self.token();
        let mut client =
            gantry_wire::client::Client::new(&self.url(), &self.trust()).map_err(|e| anyhow::anyhow!(e))?;
        if path.contains("/logs") {
            // The controller waits up to this long for the nodes' agents to send the output.
            client = client.holding(gantry_server::output::OUTPUT_WAIT);
        }
        let (status, text) =
            client.request_with(token.as_deref(), method, path, body, headers).map_err(|e| anyhow::anyhow!(e))?;
        let value: Value = serde_json::from_str(&text).unwrap_or(Value::String(text));
        if status >= 400 {
            let error = serde_json::from_value::<gantry_api::ErrorBody>(value.clone());
            let message = error.map_or_else(|_| value.to_string(), |e| e.error);
            if status == 401 {
                bail!(
                    "{message} (HTTP 401)\n  hint: {source}; point the CLI at the controller's \
                     data directory (--data DIR or $GANTRY_DATA, as given to `gantry serve --data`) or give a \
                     token with --token or $GANTRY_TOKEN"
                );
            }
            bail!("{message} (HTTP {status})");
        }
        Ok(value)
    }
}

#[derive(Args)]
pub struct SubmitArgs {
    /// Workload file (TOML, docs/formats.md): one or more [[job]] tables. Or give a command
    /// after `--` with --gpus and friends.
    #[arg(required_unless_present = "command")]
    file: Option<PathBuf>,
    /// Wait until every submitted job has ended; exit 1 if any did not complete.
    #[arg(long)]
    wait: bool,
    /// With a command: GPUs in all (`--gpus 2`, or `--gpus h100:2` for a model).
    #[arg(long, value_name = "[TYPE:]N", conflicts_with = "file")]
    gpus: Option<String>,
    /// With a command: the queue (default: "default").
    #[arg(long, conflicts_with = "file")]
    queue: Option<String>,
    /// With a command: the job's name (default: the program's name).
    #[arg(long, conflicts_with = "file")]
    name: Option<String>,
    /// With a command: time limit, Slurm style (minutes, HH:MM:SS, D-HH:MM).
    #[arg(long, conflicts_with = "file")]
    time: Option<String>,
    /// With a command: tasks (a gang: all start together or none does).
    #[arg(long, conflicts_with = "file")]
    ntasks: Option<String>,
    /// The command to run, after `--` (run as given, no shell).
    #[arg(last = true, value_name = "COMMAND")]
    command: Vec<String>,
    #[command(flatten)]
    server: ServerArg,
}

#[derive(Args)]
pub struct SbatchArgs {
    /// A batch script with `#SBATCH` lines (--job-name, --gres=gpu[:type]:N, --gpus,
    /// --gpus-per-node, --nodes, --ntasks-per-node, --ntasks, --cpus-per-task, --mem, --time,
    /// --partition, --account, --qos, --nice, --array, --dependency=afterok:ID, --chdir,
    /// --requeue/--no-requeue,
    /// --output/--error with %j %x %a %u); it runs with its `#!` interpreter (default sh), in
    /// the directory sbatch was run from unless --chdir says otherwise. Other options are named
    /// in a warning and left out.
    script: PathBuf,
    /// Wait until the job has ended; exit 1 if it did not complete.
    #[arg(long)]
    wait: bool,
    #[command(flatten)]
    server: ServerArg,
}

#[derive(Args)]
pub struct QueueArgs {
    /// Only jobs in these states (comma-separated: pending, running, completed, failed,
    /// cancelled, lost); default: pending and running.
    #[arg(long, value_name = "STATES")]
    state: Option<String>,
    /// Every job, ended ones included.
    #[arg(long, conflicts_with = "state")]
    all: bool,
    #[command(flatten)]
    server: ServerArg,
}

#[derive(Args)]
pub struct JobArgs {
    /// Job id (as `submit` and `queue` print it).
    id: u64,
    #[command(flatten)]
    server: ServerArg,
}

/// A reply read as the API's type `T`; a reply that is not one says which call gave it.
pub fn typed<T: serde::de::DeserializeOwned>(value: &Value, path: &str) -> anyhow::Result<T> {
    T::deserialize(value).map_err(|e| {
        anyhow::anyhow!("the controller's reply to {path} is not what this gantry reads ({e}): is it another version?")
    })
}

/// Stored text as the terminal may show it: an unprintable character (an escape sequence, a
/// bidirectional override — the controller refuses them in names, but a store may predate
/// that) is written as `\u{…}`, never sent raw.
pub fn shown(s: &str) -> String {
    if s.chars().all(gantry_spec::printable) {
        return s.to_string();
    }
    s.chars().map(|c| if gantry_spec::printable(c) { c.to_string() } else { c.escape_unicode().to_string() }).collect()
}

/// A task's output as the terminal may show it: lines and tabs as they are, any other
/// unprintable character (an escape sequence a job printed) written as `\u{…}`.
pub fn shown_log(s: &str) -> String {
    s.split_inclusive('\n')
        .map(|line| {
            let (body, end) = line.strip_suffix('\n').map_or((line, ""), |b| (b, "\n"));
            let body: String = body.split('\t').map(shown).collect::<Vec<_>>().join("\t");
            body + end
        })
        .collect()
}

/// Seconds since the Unix epoch as `2026-11-21 19:41:26 UTC` (days to civil date: Howard
/// Hinnant's algorithm), `-` when absent.
fn utc(t: Option<u64>) -> String {
    let Some(t) = t else { return "-".into() };
    let (days, secs) = ((t / 86_400) as i64, t % 86_400);
    let (year, month, day) = gantry_types::time::civil_from_days(days);
    format!("{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02} UTC", secs / 3600, secs / 60 % 60, secs % 60)
}

fn reason_text(pending: &gantry_types::PendingJob) -> String {
    shown(&pending.reason.to_string())
}

pub fn submit(args: SubmitArgs) -> anyhow::Result<ExitCode> {
    let (what, text) = match &args.file {
        Some(file) => {
            if !args.command.is_empty() {
                bail!("give a workload file or a command after --, not both");
            }
            let text = std::fs::read_to_string(file).with_context(|| format!("cannot read {}", file.display()))?;
            (file.display().to_string(), text)
        }
        None => {
            let mut request = gantry_spec::sbatch::Request::default();
            for (option, value) in [
                ("--gpus", &args.gpus),
                ("--account", &args.queue),
                ("--job-name", &args.name),
                ("--time", &args.time),
                ("--ntasks", &args.ntasks),
            ] {
                if let Some(v) = value {
                    request.apply(option, Some(v)).map_err(|e| anyhow::anyhow!(e))?;
                }
            }
            let program = std::path::Path::new(&args.command[0])
                .file_name()
                .map_or_else(|| "job".to_string(), |n| n.to_string_lossy().into_owned());
            let job = request.job(&program, args.command.clone()).map_err(|e| anyhow::anyhow!(e))?;
            ("the command".to_string(), gantry_spec::sbatch::workload(job))
        }
    };
    send(&args.server, &what, &text, args.wait)
}

pub fn sbatch(args: SbatchArgs) -> anyhow::Result<ExitCode> {
    let text =
        std::fs::read_to_string(&args.script).with_context(|| format!("cannot read {}", args.script.display()))?;
    let mut request =
        gantry_spec::sbatch::parse_script(&text).map_err(|e| anyhow::anyhow!("{}: {e}", args.script.display()))?;
    for option in &request.ignored {
        eprintln!("warning: {}: {option} is not supported by gantry sbatch; left out", args.script.display());
    }
    if request.chdir.is_none() {
        // Slurm's default: the script runs where it was submitted from.
        let here = std::env::current_dir().context("the current directory (the job's working directory)")?;
        request.chdir = Some(here.display().to_string());
    }
    let interpreter = text
        .lines()
        .next()
        .and_then(|l| l.strip_prefix("#!"))
        .map(|l| l.trim().to_string())
        .filter(|l| !l.is_empty())
        .unwrap_or_else(|| "sh".into());
    let mut command: Vec<String> = interpreter.split_whitespace().map(str::to_string).collect();
    command.extend(["-c".to_string(), text.clone()]);
    let name = args.script.file_stem().map_or_else(|| "batch".to_string(), |n| n.to_string_lossy().into_owned());
    let job = request.job(&name, command).map_err(|e| anyhow::anyhow!("{}: {e}", args.script.display()))?;
    send(&args.server, &args.script.display().to_string(), &gantry_spec::sbatch::workload(job), args.wait)
}

/// Ids as a short list: runs of three or more consecutive ids as `first-last` (an array of
/// 4,096 jobs reads `1-4096`, not four thousand numbers).
fn id_ranges(ids: &[u64]) -> String {
    let mut parts = Vec::new();
    let mut i = 0;
    while i < ids.len() {
        let mut j = i;
        while j + 1 < ids.len() && ids[j + 1] == ids[j] + 1 {
            j += 1;
        }
        if j - i >= 2 {
            parts.push(format!("{}-{}", ids[i], ids[j]));
        } else {
            parts.extend(ids[i..=j].iter().map(u64::to_string));
        }
        i = j + 1;
    }
    parts.join(" ")
}

/// Submit a workload text, print the ids, optionally wait for the jobs to end.
fn send(server: &ServerArg, what: &str, text: &str, wait: bool) -> anyhow::Result<ExitCode> {
    // One key per submission: if a controller takes it and dies before answering, the same
    // request sent to the next one (a standby that took over) is not doubled.
    let key = submission_key()?;
    let reply = server
        .call_with("POST", "/v1/jobs", Some(text), &[("Idempotency-Key", &key)])
        .with_context(|| what.to_string())?;
    let ids = typed::<gantry_api::Submitted>(&reply, "/v1/jobs")?.ids;
    if server.json {
        println!("{reply}");
    } else {
        println!("submitted {} job(s): {}", ids.len(), id_ranges(&ids));
    }
    if !wait {
        return Ok(ExitCode::SUCCESS);
    }
    let started = Instant::now();
    let mut all_completed = true;
    for id in ids {
        loop {
            let (job, _): (JobView, Value) = server.fetch("GET", &format!("/v1/jobs/{id}"))?;
            let (state, name) = (job.row.state, shown(&job.row.name));
            if state.is_final() {
                eprintln!("job {id} {name}: {} after {:.0} s", state.name(), started.elapsed().as_secs_f64());
                all_completed &= state == gantry_types::JobState::Completed;
                break;
            }
            std::thread::sleep(Duration::from_millis(250));
        }
    }
    Ok(if all_completed { ExitCode::SUCCESS } else { ExitCode::from(1) })
}

/// A fresh idempotency key: 128 random bits, hex.
fn submission_key() -> anyhow::Result<String> {
    use std::io::Read;
    let mut bytes = [0u8; 16];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .context("cannot read /dev/urandom for the submission's idempotency key")?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

pub fn queue(args: QueueArgs) -> anyhow::Result<ExitCode> {
    let filter = if args.all { String::new() } else { args.state.unwrap_or_else(|| "pending,running".into()) };
    let path = if filter.is_empty() { "/v1/jobs".to_string() } else { format!("/v1/jobs?state={filter}") };
    let (jobs, sent): (Vec<JobView>, Value) = args.server.fetch("GET", &path)?;
    if args.server.json {
        println!("{}", serde_json::to_string_pretty(&sent)?);
        return Ok(ExitCode::SUCCESS);
    }
    if jobs.is_empty() {
        println!("no jobs{}", if filter.is_empty() { String::new() } else { format!(" ({filter})") });
        return Ok(ExitCode::SUCCESS);
    }
    println!("{:>6}  {:<24} {:<12} {:<10} {:<20}  REASON", "ID", "NAME", "QUEUE", "STATE", "NODES");
    for job in jobs {
        let row = &job.row;
        let nodes: std::collections::BTreeSet<String> = row.tasks.iter().map(|t| shown(&t.node)).collect();
        let nodes: Vec<String> = nodes.into_iter().collect();
        println!(
            "{:>6}  {:<24} {:<12} {:<10} {:<20}  {}",
            row.id,
            shown(&row.name),
            shown(&row.queue),
            row.state.name(),
            if nodes.is_empty() { "-".into() } else { nodes.join(",") },
            job.pending.as_ref().map(reason_text).unwrap_or_default()
        );
    }
    Ok(ExitCode::SUCCESS)
}

pub fn show(args: JobArgs) -> anyhow::Result<ExitCode> {
    let (job, sent): (JobView, Value) = args.server.fetch("GET", &format!("/v1/jobs/{}", args.id))?;
    if args.server.json {
        println!("{}", serde_json::to_string_pretty(&sent)?);
        return Ok(ExitCode::SUCCESS);
    }
    let row = &job.row;
    let ending = match row.outcome.ending {
        Some(ending) if ending.name() != row.state.name() => format!(" ({})", ending.name()),
        _ => String::new(),
    };
    println!("job {} {} (queue {}): {}{ending}", args.id, shown(&row.name), shown(&row.queue), row.state.name());
    println!("  submitted {}", utc(Some(row.submitted_at_s)));
    println!("  started   {}", utc(row.started_at_s));
    let exit = row.exit_code.map_or_else(|| "-".to_string(), |c| c.to_string());
    println!("  ended     {}  exit code {exit}", utc(row.ended_at_s));
    if let Some(oom) = &row.outcome.oom {
        println!("  why: {}", shown(&oom.reason()));
    }
    if let Some(capped) = &job.priority_capped {
        println!("  {}", shown(capped));
    }
    for task in &row.tasks {
        let devices: Vec<String> = task.devices.iter().map(|d| shown(d)).collect();
        let confined = task.confinement.as_ref().map(|c| format!("  [{}]", shown(c))).unwrap_or_default();
        println!(
            "  task {}/{} on {}: {}{confined}",
            shown(&task.group),
            task.replica,
            shown(&task.node),
            devices.join(",")
        );
    }
    for line in used_lines(&job) {
        println!("  {line}");
    }
    if let Some(pending) = &job.pending {
        println!("  waiting: {}", reason_text(pending));
        if let Some(layout) = &job.layout {
            println!("  {}", layout.message);
        }
        if pending.estimate_s.is_some() {
            println!("  expected start: {}", utc(pending.estimate_s));
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// What a job used on each node, as its cgroups measured it: its ended runs' (`used`) and the
/// run in progress (`running_used`), each with the limits it was held to.
pub fn used_lines(job: &JobView) -> Vec<String> {
    let mut lines = Vec::new();
    for (what, list) in [("used", &job.row.outcome.used), ("using", &job.running_used)] {
        for gantry_types::NodeUse { node, used: u } in list {
            let cpu = u
                .cpu_ms
                .map_or_else(|| "CPU not measured".to_string(), |ms| format!("CPU {:.1} s", ms as f64 / 1000.0));
            let cpu_limit = u.cpu_limit_milli.map_or_else(
                || " (not limited)".to_string(),
                |m| format!(" (limit {} core{})", m as f64 / 1000.0, if m == 1000 { "" } else { "s" }),
            );
            let peak = u.memory_peak_bytes.map_or_else(
                || "peak memory not measured".to_string(),
                |b| format!("peak memory {}", gantry_types::Bytes(b)),
            );
            let limit = u
                .memory_limit_bytes
                .map_or_else(|| " (not limited)".to_string(), |b| format!(" of {}", gantry_types::Bytes(b)));
            lines.push(format!("{what} on {}: {cpu}{cpu_limit}, {peak}{limit}", shown(node)));
        }
    }
    lines
}

pub fn why(args: JobArgs) -> anyhow::Result<ExitCode> {
    let (job, _): (JobView, Value) = args.server.fetch("GET", &format!("/v1/jobs/{}", args.id))?;
    if args.server.json {
        println!("{}", serde_json::to_string_pretty(&job.pending)?);
        return Ok(ExitCode::SUCCESS);
    }
    let state = job.row.state.name();
    let Some(pending) = &job.pending else {
        match &job.row.outcome.oom {
            Some(oom) => println!("job {} is {state} (oom): {}", args.id, shown(&oom.reason())),
            None => println!("job {} is {state}: not waiting", args.id),
        }
        return Ok(ExitCode::SUCCESS);
    };
    let estimate = pending.estimate_s.map(|t| format!(" (expected start {})", utc(Some(t)))).unwrap_or_default();
    println!("job {} waits: {}{estimate}", args.id, reason_text(pending));
    if let Some(layout) = &job.layout {
        println!("  {}", layout.message);
    }
    if let Some(capped) = &job.priority_capped {
        println!("  {}", shown(capped));
    }
    Ok(ExitCode::SUCCESS)
}

#[derive(Args)]
pub struct CancelArgs {
    /// Job id (as `submit` and `queue` print it).
    id: u64,
    /// Tasks on nodes whose agent is unreachable (silent past the timeout, or lost) count as
    /// ended now, instead of waiting for an agent that may never report them.
    #[arg(long)]
    force: bool,
    #[command(flatten)]
    server: ServerArg,
}

pub fn cancel(args: CancelArgs) -> anyhow::Result<ExitCode> {
    let force = if args.force { "?force=true" } else { "" };
    let (reply, sent): (gantry_api::Cancelled, Value) =
        args.server.fetch("DELETE", &format!("/v1/jobs/{}{force}", args.id))?;
    if args.server.json {
        println!("{sent}");
    } else {
        println!("job {}: {}", args.id, shown(&reply.status));
    }
    Ok(ExitCode::SUCCESS)
}

/// `gantry hold` (`held`) and `gantry release`.
pub fn hold(args: JobArgs, held: bool) -> anyhow::Result<ExitCode> {
    let path = format!("/v1/jobs/{}/{}", args.id, if held { "hold" } else { "release" });
    let (reply, sent): (gantry_api::Held, Value) = args.server.fetch("POST", &path)?;
    if args.server.json {
        println!("{sent}");
    } else {
        let state = if held { "held" } else { "released" };
        let already = if reply.changed { "" } else { " (already)" };
        println!("job {}: {state}{already}", args.id);
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stored_text_never_reaches_the_terminal_raw() {
        assert_eq!(shown("train-1 [ok]"), "train-1 [ok]");
        assert_eq!(shown("\u{1b}[2Jowned"), "\\u{1b}[2Jowned");
        assert_eq!(shown("a\u{202e}b\u{7}"), "a\\u{202e}b\\u{7}");
        assert_eq!(shown_log("a\tb\n\u{1b}[31mred\n\nend"), "a\tb\n\\u{1b}[31mred\n\nend");
    }

    #[test]
    fn a_reply_of_another_shape_is_refused_by_its_call() {
        let err = typed::<JobView>(&serde_json::json!([1, 2]), "/v1/jobs/3").expect_err("not a job");
        assert!(err.to_string().contains("reply to /v1/jobs/3 is not what this gantry reads"), "{err}");
        let jobs: Vec<JobView> = typed(&serde_json::json!([]), "/v1/jobs").expect("an empty list");
        assert!(jobs.is_empty());
    }

    #[test]
    fn consecutive_ids_read_as_ranges() {
        assert_eq!(id_ranges(&[]), "");
        assert_eq!(id_ranges(&[1, 2]), "1 2");
        assert_eq!(id_ranges(&[1, 2, 3, 7, 9, 10, 11, 12]), "1-3 7 9-12");
        assert_eq!(id_ranges(&(5..=4100).collect::<Vec<_>>()), "5-4100");
    }

    #[test]
    fn epoch_seconds_read_as_utc_dates() {
        assert_eq!(utc(Some(0u64)), "1970-01-01 00:00:00 UTC");
        assert_eq!(utc(Some(951_782_400u64)), "2000-02-29 00:00:00 UTC");
        assert_eq!(utc(Some(1_795_290_086u64)), "2026-11-21 19:41:26 UTC");
        assert_eq!(utc(None), "-");
    }
}

#[derive(Args)]
pub struct TokenArgs {
    #[command(subcommand)]
    action: TokenAction,
    #[command(flatten)]
    server: ServerArg,
}

#[derive(clap::Subcommand)]
enum TokenAction {
    /// Create a token and print its secret (shown once).
    Create {
        name: String,
        /// admin, member (needs --queue), read-only, or agent (for `gantry agent`).
        #[arg(long, value_parser = ["admin", "member", "read-only", "agent"])]
        role: String,
        /// Queues a member may use, comma-separated.
        #[arg(long, value_delimiter = ',')]
        queue: Vec<String>,
        /// The one node an agent token may register and heartbeat as (required for agents).
        #[arg(long)]
        node: Option<String>,
        /// Stop working after this long: seconds, or a number with s, m, h or d ("30d", "12h";
        /// one minute to ten years). Default: until revoked.
        #[arg(long, value_name = "DURATION", value_parser = token_lifetime)]
        expires: Option<u64>,
    },
    /// List tokens (names, roles, expiry, queues or node; never secrets).
    List,
    /// Revoke a token; it stops working at once.
    Revoke { name: String },
}

/// `--expires`: a token's lifetime in seconds, checked as the controller will.
fn token_lifetime(text: &str) -> Result<u64, String> {
    gantry_spec::duration_seconds("--expires", text, 1).map_err(|e| e.to_string())
}

pub fn token(args: TokenArgs) -> anyhow::Result<ExitCode> {
    match args.action {
        TokenAction::Create { name, role, queue, node, expires } => {
            let role: gantry_api::Role = serde_json::from_value(Value::String(role.clone()))
                .map_err(|_| anyhow::anyhow!("--role {role:?}: admin, member, read-only or agent"))?;
            let new = gantry_api::NewToken { name: name.clone(), role, queues: queue, node, expires_in_s: expires };
            let reply = args.server.call("POST", "/v1/tokens", Some(&serde_json::to_string(&new)?))?;
            if args.server.json {
                println!("{reply}");
            } else {
                println!("{}", shown(&typed::<gantry_api::TokenSecret>(&reply, "/v1/tokens")?.secret));
                eprintln!("token {name:?} created; this is the only time its secret is shown");
            }
        }
        TokenAction::List => {
            let (list, sent): (Vec<gantry_api::TokenRecord>, Value) = args.server.fetch("GET", "/v1/tokens")?;
            if args.server.json {
                println!("{}", serde_json::to_string_pretty(&sent)?);
            } else {
                print_tokens(&list);
            }
        }
        TokenAction::Revoke { name } => {
            args.server.call("DELETE", &format!("/v1/tokens/{name}"), None)?;
            println!("token {name:?} revoked");
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Each token: name, role, expiry, and its queues or node (never a secret or a hash).
fn print_tokens(list: &[gantry_api::TokenRecord]) {
    println!("{:<24} {:<10} {:<27} QUEUES / NODE", "NAME", "ROLE", "EXPIRES");
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    for t in list {
        let mut scope: Vec<String> = t.queues.iter().map(|q| shown(q)).collect();
        scope.extend(t.node.as_deref().map(|n| format!("node {}", shown(n))));
        let expires = match t.expires_at_s {
            None => "never".to_string(),
            Some(at) if at <= now => format!("EXPIRED {}", utc(Some(at))),
            Some(at) => utc(Some(at)),
        };
        let role = kebab(&t.role);
        println!("{:<24} {role:<10} {expires:<27} {}", shown(&t.name), scope.join(","));
    }
}

#[derive(Args)]
pub struct NodesArgs {
    /// Instead: what the online MIG planner would change now for the waiting and running jobs
    /// (carried out by the controller itself under `reconfigure = "auto"`, else advice).
    #[arg(long, conflicts_with = "reconfigurations")]
    plan: bool,
    /// Instead: the GPU reconfigurations the controller has under way and the latest
    /// finished ones (applied, refused, abandoned), with why each was made.
    #[arg(long)]
    reconfigurations: bool,
    #[command(flatten)]
    server: ServerArg,
}

#[derive(Args)]
pub struct NodeArgs {
    /// Node name (as `gantry nodes` prints it).
    node: String,
    #[command(flatten)]
    server: ServerArg,
}

pub fn nodes(args: NodesArgs) -> anyhow::Result<ExitCode> {
    if args.plan {
        return plan_advice(&args);
    }
    if args.reconfigurations {
        return reconfigurations(&args);
    }
    let (nodes, sent): (Vec<gantry_api::NodeView>, Value) = args.server.fetch("GET", "/v1/nodes")?;
    if args.server.json {
        println!("{}", serde_json::to_string_pretty(&sent)?);
        return Ok(ExitCode::SUCCESS);
    }
    for node in &nodes {
        let allocated: u64 = node.gpus.iter().map(|g| u64::from(g.allocated_milli)).sum();
        println!(
            "{}{}  {} GPUs, {:.2} allocated",
            shown(&node.name),
            node_flags(node),
            node.gpus.len(),
            allocated as f64 / 1000.0
        );
        if let Some(confinement) = &node.confinement {
            println!("  confinement: {}", shown(&confinement.to_string()));
        }
        for g in &node.gpus {
            let jobs: Vec<String> = g.jobs.iter().map(u64::to_string).collect();
            let used = match g.utilization_pct {
                Some(pct) => format!("{pct:>3}% used{}", if g.measured { "" } else { " (sim)" }),
                None => String::new(),
            };
            let reconfiguring = g.reconfiguring.as_ref().map(|r| format!("  [{}]", shown(r))).unwrap_or_default();
            println!(
                "  gpu{:<3} {:<16} {:<10} {:>5.2}  {:<14} {}{reconfiguring}",
                g.index,
                shown(&g.model),
                shown(&g.mode),
                f64::from(g.allocated_milli) / 1000.0,
                used,
                if jobs.is_empty() { String::new() } else { format!("jobs {}", jobs.join(",")) }
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// What `gantry nodes` says beside a node's name: drained, lost, not ready, unconfined, lying.
fn node_flags(node: &gantry_api::NodeView) -> String {
    let mut flags = Vec::new();
    if node.drained {
        flags.push("drained".to_string());
    }
    if node.lost {
        flags.push("LOST".to_string());
    }
    if !node.ready {
        flags.push(match node.heartbeat_age_s {
            Some(age) => format!("not ready: agent silent {age} s"),
            None => "not ready: no agent yet".into(),
        });
    }
    if node.confinement.as_ref().is_some_and(|c| c.kind == gantry_wire::ConfinementKind::Unconfined) {
        flags.push("UNCONFINED".into());
    }
    if node.refused_reports > 0 {
        flags.push(format!("WARNING: {} reports about other nodes' tasks refused", node.refused_reports));
    }
    if flags.is_empty() { String::new() } else { format!(" ({})", flags.join(", ")) }
}

/// `gantry drain NODE` / `gantry resume NODE` (admin).
pub fn drain(args: NodeArgs, drained: bool) -> anyhow::Result<ExitCode> {
    let verb = if drained { "drain" } else { "resume" };
    let (reply, _): (gantry_api::Drained, Value) =
        args.server.fetch("POST", &format!("/v1/nodes/{}/{verb}", args.node))?;
    let state = if drained { "drained: nothing new starts there" } else { "resumed" };
    let note = if reply.changed { "" } else { " (already)" };
    println!("node {} {state}{note}", args.node);
    Ok(ExitCode::SUCCESS)
}

/// `gantry node lost NAME`.
#[derive(Args)]
pub struct NodeCommandArgs {
    #[command(subcommand)]
    what: NodeCommand,
}

#[derive(clap::Subcommand)]
enum NodeCommand {
    /// Declare a node lost now (admin): its agent is known dead. Its jobs end at once —
    /// requeued unless they say `requeue = false` — and their GPUs are freed; tasks it still
    /// runs are killed if its agent comes back. (A node silent past --node-lost-after is lost
    /// without this.)
    Lost(NodeArgs),
}

pub fn node(args: NodeCommandArgs) -> anyhow::Result<ExitCode> {
    match args.what {
        NodeCommand::Lost(args) => {
            let (reply, sent): (gantry_api::NodeLost, Value) =
                args.server.fetch("POST", &format!("/v1/nodes/{}/lost", args.node))?;
            if args.server.json {
                println!("{sent}");
            } else {
                let note = if reply.changed { "" } else { " (already)" };
                println!("node {} lost{note}: its jobs ended or wait again", args.node);
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// `gantry nodes --plan`: the online planner's advice, one line per GPU it would change.
fn plan_advice(args: &NodesArgs) -> anyhow::Result<ExitCode> {
    let (plan, sent): (gantry_api::PlanView, Value) = args.server.fetch("GET", "/v1/plan")?;
    if args.server.json {
        println!("{}", serde_json::to_string_pretty(&sent)?);
        return Ok(ExitCode::SUCCESS);
    }
    println!("planned for {} task(s) of the waiting and running jobs", plan.demand_tasks);
    if plan.reconfigure.is_empty() && plan.drain.is_empty() {
        println!("no change to make now");
    }
    for (what, list) in [("reconfigure now (idle)", &plan.reconfigure), ("drain first (busy)", &plan.drain)] {
        for c in list {
            let (node, from, to) = (shown(&c.node), shown(&c.from), shown(&c.to));
            println!("  {what:<24} {node} gpu{}: {from} -> {to}", c.gpu);
        }
    }
    if plan.deferred > 0 {
        println!(
            "  {} more change(s) wait: their GPUs' work ends later, or they changed within the cooldown",
            plan.deferred
        );
    }
    match plan.mode {
        gantry_api::ReconfigureMode::Auto => println!(
            "reconfigure = \"auto\": the controller carries these out itself, within its guards (`gantry nodes --reconfigurations`)"
        ),
        mode => println!(
            "advice only (reconfigure = \"{}\"): `gantry mig apply` on the node, then restart its agent (the controller takes the layout); or run the controller with --reconfigure auto",
            kebab(&mode)
        ),
    }
    Ok(ExitCode::SUCCESS)
}

/// An enum's name as the API writes it (`read-only`, `draining`, `auto`).
fn kebab<T: serde::Serialize>(value: &T) -> String {
    serde_json::to_value(value).ok().and_then(|v| v.as_str().map(str::to_string)).unwrap_or_default()
}

/// `gantry nodes --reconfigurations`: what the controller reconfigures, and why.
fn reconfigurations(args: &NodesArgs) -> anyhow::Result<ExitCode> {
    let (view, sent): (gantry_api::ReconfigurationsView, Value) = args.server.fetch("GET", "/v1/reconfigurations")?;
    if args.server.json {
        println!("{}", serde_json::to_string_pretty(&sent)?);
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "reconfigure = \"{}\": {} applied, {} refused, {} abandoned, {} replica(s) moved, {:.2} GPU-hours unallocated on cordoned GPUs",
        kebab(&view.mode),
        view.applied,
        view.refused,
        view.abandoned,
        view.moves,
        view.cordoned_idle_gpu_hours
    );
    let line = |r: &gantry_api::Reconfiguration| {
        let outcome = r.outcome.as_ref().map(|o| format!(": {}", shown(o))).unwrap_or_default();
        let (id, phase, node, to) = (r.id, kebab(&r.phase), shown(&r.node), r.to.text());
        println!("  #{id:<5} {phase:<10} {node} gpu{}  -> {to}  {}{outcome}", r.gpu, shown(&r.reason));
    };
    let under_way = &view.under_way;
    println!("under way: {}", if under_way.is_empty() { "none".to_string() } else { under_way.len().to_string() });
    under_way.iter().for_each(line);
    if !view.recent.is_empty() {
        println!("latest finished (newest last):");
        view.recent.iter().rev().take(20).rev().for_each(line);
    }
    Ok(ExitCode::SUCCESS)
}
