//! The CLI's side of the live service, in Slurm's habits: `submit`, `queue`, `show`, `why`,
//! `cancel`, `logs`, talking to a controller over its REST API.

use anyhow::{Context, bail};
use clap::Args;
use gantry_api::JobView;
use gantry_api::connection::Connection;
use gantry_api::queries::{CancelQuery, ListQuery, Query};
use gantry_api::text::{self, id_ranges, shown};
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

#[derive(Args, Clone, Default)]
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
    /// $GANTRY_DATA, else $XDG_DATA_HOME/gantry or ~/.local/share/gantry; what `gantry serve --data` was given).
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
    /// The controller these flags name.
    pub fn connection(&self) -> Connection {
        Connection {
            server: self.server.clone(),
            ca: self.ca.clone(),
            token: self.token.clone(),
            data: self.data.clone(),
            insecure_http: self.insecure_http,
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
        Ok(self.connection().call(method, path, body, headers)?)
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
    /// As Slurm's sbatch: options (they override the script's `#SBATCH` lines: --job-name,
    /// --gres=gpu[:type]:N, --gpus, --gpus-per-node, --nodes, --ntasks-per-node, --ntasks,
    /// --cpus-per-task, --mem, --time, --partition, --account, --qos, --nice, --array,
    /// --dependency=afterok:ID, --chdir, --requeue/--no-requeue, --hold, --output/--error with %j %x %a
    /// %u; --wrap=COMMAND instead of a script; --parsable for the bare id; --wait to wait for
    /// the end, exit 1 if it did not complete), then the script and its arguments. It runs with
    /// its `#!` interpreter (default sh), where sbatch was run unless --chdir says otherwise.
    /// An option on the command line gantry does not carry out is refused; in the script, it
    /// is named in a warning and left out.
    #[arg(
        trailing_var_arg = true,
        allow_hyphen_values = true,
        required = true,
        value_name = "[OPTIONS] SCRIPT [ARGS]"
    )]
    pub args: Vec<String>,
    #[command(flatten)]
    pub server: ServerArg,
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

/// A reply read as the API's type `T`.
pub fn typed<T: serde::de::DeserializeOwned>(value: &Value, path: &str) -> anyhow::Result<T> {
    Ok(gantry_api::replies::read_reply(value, path)?)
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
            let options = [
                ("--gpus", args.gpus.as_deref()),
                ("--account", args.queue.as_deref()),
                ("--job-name", args.name.as_deref()),
                ("--time", args.time.as_deref()),
                ("--ntasks", args.ntasks.as_deref()),
            ];
            let job =
                gantry_spec::sbatch::command_job(&options, args.command.clone()).map_err(|e| anyhow::anyhow!(e))?;
            ("the command".to_string(), gantry_spec::sbatch::workload(job))
        }
    };
    send(&args.server, &what, &text, args.wait, Submitted::Gantry)
}

pub fn sbatch(args: SbatchArgs) -> anyhow::Result<ExitCode> {
    let line = gantry_spec::sbatch_cli::parse_command_line(&args.args).map_err(|e| anyhow::anyhow!("sbatch: {e}"))?;
    let script = line.script.as_ref().map(PathBuf::from);
    let text =
        script.as_ref().map(|s| std::fs::read_to_string(s).with_context(|| format!("cannot read {}", s.display())));
    let text = text.transpose()?;
    let what = script.as_ref().map_or_else(|| "--wrap".to_string(), |s| s.display().to_string());
    // Slurm names a job after its script's file name, extension and all.
    let stem = script
        .as_ref()
        .and_then(|s| s.file_name())
        .map_or_else(|| "batch".into(), |n| n.to_string_lossy().into_owned());
    let source = text.as_deref().map(|t| (t, stem.as_str()));
    let submitter = gantry_api::slurm::attached::submitter().map_err(|e| anyhow::anyhow!(e))?;
    let (job, ignored) =
        gantry_spec::sbatch_cli::batch_job(&line, source, &submitter).map_err(|e| anyhow::anyhow!("{what}: {e}"))?;
    for option in &ignored {
        eprintln!("warning: {what}: {option} is not supported by gantry sbatch; left out");
    }
    if line.test_only {
        let text = gantry_spec::sbatch::workload(job);
        let reply = args.server.call("POST", "/v1/jobs/estimate", Some(&text))?;
        let estimate: gantry_api::replies::Estimate = typed(&reply, "/v1/jobs/estimate")?;
        eprint!("{}", gantry_api::slurm::test_only_line(&estimate));
        return Ok(ExitCode::SUCCESS);
    }
    let form = if line.parsable { Submitted::Parsable } else { Submitted::Slurm };
    send(&args.server, &what, &gantry_spec::sbatch::workload(job), line.wait, form)
}

/// How `send` says what was submitted: gantry's line, Slurm's, or the bare id.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Submitted {
    Gantry,
    Slurm,
    Parsable,
}

/// Submit a workload text, print the ids, optionally wait for the jobs to end.
fn send(server: &ServerArg, what: &str, text: &str, wait: bool, form: Submitted) -> anyhow::Result<ExitCode> {
    // One key per submission: if a controller takes it and dies before answering, the same
    // request sent to the next one (a standby that took over) is not doubled.
    let key = gantry_api::replies::idempotency_key()
        .context("cannot read /dev/urandom for the submission's idempotency key")?;
    let reply =
        server.call_with("POST", "/v1/jobs", Some(text), &[("Idempotency-Key", &key)]).with_context(|| match form {
            // Slurm's words, which scripts that wrap sbatch look for.
            Submitted::Slurm | Submitted::Parsable => "Batch job submission failed".to_string(),
            Submitted::Gantry => what.to_string(),
        })?;
    let ids = typed::<gantry_api::Submitted>(&reply, "/v1/jobs")?.ids;
    match form {
        _ if server.json => println!("{reply}"),
        Submitted::Gantry => println!("submitted {} job(s): {}", ids.len(), id_ranges(&ids)),
        // An array's first element stands for the array, as Slurm's array job id does.
        Submitted::Slurm => println!("Submitted batch job {}", ids.first().copied().unwrap_or_default()),
        Submitted::Parsable => println!("{}", ids.first().copied().unwrap_or_default()),
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

pub fn queue(args: QueueArgs) -> anyhow::Result<ExitCode> {
    let filter = if args.all { String::new() } else { args.state.unwrap_or_else(|| "pending,running".into()) };
    let query = ListQuery { state: (!filter.is_empty()).then(|| filter.clone()) };
    let path = format!("/v1/jobs{}", query.to_query());
    let (jobs, sent): (Vec<JobView>, Value) = args.server.fetch("GET", &path)?;
    if args.server.json {
        println!("{}", serde_json::to_string_pretty(&sent)?);
        return Ok(ExitCode::SUCCESS);
    }
    print!("{}", text::jobs::queue_table(&jobs, &filter));
    Ok(ExitCode::SUCCESS)
}

pub fn show(args: JobArgs) -> anyhow::Result<ExitCode> {
    let (job, sent): (JobView, Value) = args.server.fetch("GET", &format!("/v1/jobs/{}", args.id))?;
    if args.server.json {
        println!("{}", serde_json::to_string_pretty(&sent)?);
        return Ok(ExitCode::SUCCESS);
    }
    print!("{}", text::jobs::job_text(args.id, &job));
    Ok(ExitCode::SUCCESS)
}

pub fn why(args: JobArgs) -> anyhow::Result<ExitCode> {
    let (job, _): (JobView, Value) = args.server.fetch("GET", &format!("/v1/jobs/{}", args.id))?;
    if args.server.json {
        println!("{}", serde_json::to_string_pretty(&job.pending)?);
        return Ok(ExitCode::SUCCESS);
    }
    print!("{}", text::jobs::why_text(args.id, &job));
    Ok(ExitCode::SUCCESS)
}

#[derive(Args)]
pub struct CancelArgs {
    /// Job ids (as `submit` and `queue` print them): `12`, `12 15`, `12-15`, `12,14-16`.
    #[arg(required = true, value_name = "ID")]
    ids: Vec<String>,
    /// Tasks on nodes whose agent is unreachable (silent past the timeout, or lost) count as
    /// ended now, instead of waiting for an agent that may never report them.
    #[arg(long)]
    force: bool,
    #[command(flatten)]
    server: ServerArg,
}

/// Cancel each job named; one that cannot be cancelled is said on stderr and the rest go on
/// (exiting with the first failure's code, `gantry_api::exit`).
pub fn cancel(args: CancelArgs) -> anyhow::Result<ExitCode> {
    let query = CancelQuery { force: args.force }.to_query();
    let mut ids = Vec::new();
    for text in &args.ids {
        ids.extend(gantry_api::slurm::ids::job_ids(text).map_err(|e| anyhow::anyhow!("{e}"))?);
    }
    let mut failed = None;
    for id in ids {
        match args.server.fetch::<gantry_api::Cancelled>("DELETE", &format!("/v1/jobs/{id}{query}")) {
            Ok((_, sent)) if args.server.json => println!("{sent}"),
            Ok((reply, _)) => println!("job {id}: {}", shown(&reply.status)),
            Err(e) => {
                eprintln!("error: {e:#}");
                failed = failed.or(Some(gantry_api::exit::code(e.chain())));
            }
        }
    }
    Ok(ExitCode::from(failed.unwrap_or(gantry_api::exit::OK)))
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
                let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
                print!("{}", text::tokens::tokens_table(&list, now));
            }
        }
        TokenAction::Revoke { name } => {
            args.server.call("DELETE", &format!("/v1/tokens/{name}"), None)?;
            println!("token {name:?} revoked");
        }
    }
    Ok(ExitCode::SUCCESS)
}

#[derive(Args)]
pub struct LoginArgs {
    /// The controller's URL (`https://ctl.example:8177`).
    url: String,
    /// A file holding the token to save (else --token, else $GANTRY_TOKEN).
    #[arg(long, value_name = "FILE")]
    token_file: Option<PathBuf>,
    #[command(flatten)]
    server: ServerArg,
}

/// `gantry login URL`: check the controller answers the token, then save URL, CA and token.
pub fn login(args: LoginArgs) -> anyhow::Result<ExitCode> {
    let s = &args.server;
    let saved = gantry_api::connection::login(
        &args.url,
        s.ca.clone(),
        s.token.clone(),
        args.token_file.as_deref(),
        s.insecure_http,
    )?;
    println!(
        "{} answers this token; saved in {} (mode 0600): commands reach it now without flags",
        args.url,
        saved.display()
    );
    Ok(ExitCode::SUCCESS)
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
    print!("{}", text::nodes::nodes_text(&nodes));
    Ok(ExitCode::SUCCESS)
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
    print!("{}", text::nodes::plan_text(&plan));
    Ok(ExitCode::SUCCESS)
}

/// `gantry nodes --reconfigurations`: what the controller reconfigures, and why.
fn reconfigurations(args: &NodesArgs) -> anyhow::Result<ExitCode> {
    let (view, sent): (gantry_api::ReconfigurationsView, Value) = args.server.fetch("GET", "/v1/reconfigurations")?;
    if args.server.json {
        println!("{}", serde_json::to_string_pretty(&sent)?);
        return Ok(ExitCode::SUCCESS);
    }
    print!("{}", text::nodes::reconfigurations_text(&view));
    Ok(ExitCode::SUCCESS)
}
