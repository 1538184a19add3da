//! `sbatch`'s own command line as Slurm reads it: options first (`--opt=value`, `--opt value`,
//! `-X value`, `-Xvalue`), then the script and its arguments. Options given here override the
//! script's `#SBATCH` lines; `--wrap` stands for a script; `--parsable` asks for the bare id.
//! An option gantry does not carry out is refused by name, never dropped.

use crate::SpecError;
use crate::sbatch::{Request, parse_script, script_command};
use toml::Table;

/// Long options that take a value, and their one-letter forms.
const WITH_VALUE: [(&str, Option<char>); 25] = [
    ("--job-name", Some('J')),
    ("--partition", Some('p')),
    ("--account", Some('A')),
    ("--qos", Some('q')),
    ("--gres", None),
    ("--gpus", Some('G')),
    ("--gpus-per-node", None),
    ("--gpus-per-task", None),
    ("--nodes", Some('N')),
    ("--ntasks", Some('n')),
    ("--ntasks-per-node", None),
    ("--cpus-per-task", Some('c')),
    ("--mem", None),
    ("--mem-per-gpu", None),
    ("--mem-per-cpu", None),
    ("--time", Some('t')),
    ("--nice", None),
    ("--array", Some('a')),
    ("--dependency", Some('d')),
    ("--chdir", Some('D')),
    ("--output", Some('o')),
    ("--error", Some('e')),
    ("--wrap", None),
    ("--export", None),
    ("--constraint", Some('C')),
];

/// Options without a value.
const FLAGS: [&str; 7] = ["--requeue", "--no-requeue", "--hold", "--parsable", "--wait", "--exclusive", "--test-only"];

/// What `sbatch`'s command line says.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct CommandLine {
    /// The options to apply over the script's, in order (`--wrap`, `--parsable` and `--wait`
    /// taken out).
    pub options: Vec<(String, Option<String>)>,
    pub parsable: bool,
    pub wait: bool,
    /// `--test-only`: say when the job would start; submit nothing.
    pub test_only: bool,
    /// `--wrap=COMMAND`: the script is `COMMAND` run by `sh`.
    pub wrap: Option<String>,
    pub script: Option<String>,
    pub script_args: Vec<String>,
    /// Run by `srun` or `salloc` outside a job: the output stays in the job's log (streamed
    /// back to them), no `slurm-%j.out` is written.
    pub attached: bool,
}

fn refused(option: &str) -> SpecError {
    SpecError::new(option, "not supported by gantry's sbatch").hint(
        "supported: --job-name, --partition, --account, --qos, --gres, --gpus, --gpus-per-node, --gpus-per-task, --nodes, \
         --ntasks, --ntasks-per-node, --cpus-per-task, --mem, --mem-per-gpu, --mem-per-cpu, --time, --nice, --array, --dependency, --chdir, \
         --output, --error, --wrap, --export, --constraint, --requeue, --no-requeue, --hold, --exclusive, --parsable, --wait, --test-only",
    )
}

/// The long name of an option as written (`-J`, `--job-name`), and whether it takes a value.
pub(crate) fn known(option: &str) -> Option<(&'static str, bool)> {
    if option == "-H" {
        return Some(("--hold", false));
    }
    if let Some(&flag) = FLAGS.iter().find(|f| **f == option) {
        return Some((flag, false));
    }
    let short = option.strip_prefix('-').filter(|s| s.len() == 1).and_then(|s| s.chars().next());
    WITH_VALUE
        .iter()
        .find(|(long, letter)| *long == option || (short.is_some() && *letter == short))
        .map(|(long, _)| (*long, true))
}

/// Read `args` (what follows `sbatch`).
pub fn parse_command_line(args: &[String]) -> Result<CommandLine, SpecError> {
    let mut line = CommandLine::default();
    let mut i = 0;
    while i < args.len() && args[i].starts_with('-') && args[i] != "-" {
        let arg = &args[i];
        let (name, inline) = split_option(arg);
        let (long, takes_value) = known(name).ok_or_else(|| refused(name))?;
        let value = option_value(long, takes_value, inline, args, &mut i)?;
        match long {
            "--parsable" => line.parsable = true,
            "--wait" => line.wait = true,
            "--test-only" => line.test_only = true,
            "--wrap" => line.wrap = value,
            _ => line.options.push((long.to_string(), value)),
        }
        i += 1;
    }
    line.script = args.get(i).cloned();
    line.script_args = args.get(i + 1..).unwrap_or_default().to_vec();
    match (&line.script, &line.wrap) {
        (Some(_), Some(_)) => Err(SpecError::new("--wrap", "give a script or --wrap, not both")),
        (None, None) => {
            Err(SpecError::new("", "no batch script").hint("sbatch [OPTIONS] SCRIPT [ARGS…], or --wrap=COMMAND"))
        }
        _ => Ok(line),
    }
}

/// Option `long`'s value: the one in its word (`inline`), else the next word (`i` moves on to
/// it); none for an option that takes none, and an error for one given where it does not fit.
pub(crate) fn option_value(
    long: &str,
    takes_value: bool,
    inline: Option<String>,
    args: &[String],
    i: &mut usize,
) -> Result<Option<String>, SpecError> {
    match (takes_value, inline) {
        (false, None) => Ok(None),
        (false, Some(_)) => Err(SpecError::new(long, "takes no value")),
        (true, Some(v)) => Ok(Some(v)),
        (true, None) => {
            *i += 1;
            Ok(Some(args.get(*i).cloned().ok_or_else(|| SpecError::new(long, "needs a value"))?))
        }
    }
}

/// `--opt=value` → (`--opt`, value); `-Xvalue` → (`-X`, value); else the option alone.
pub(crate) fn split_option(arg: &str) -> (&str, Option<String>) {
    if let Some((name, value)) = arg.split_once('=').filter(|_| arg.starts_with("--")) {
        return (name, Some(value.to_string()));
    }
    if !arg.starts_with("--") && arg.len() > 2 {
        return (&arg[..2], Some(arg[2..].to_string()));
    }
    (arg, None)
}

/// Where and with what a batch job was submitted: the directory (its default working
/// directory) and the shell's variables (what `--export` chooses from).
#[derive(Debug, Default)]
pub struct Submitter {
    pub cwd: String,
    pub env: Vec<(String, String)>,
    /// The host's name (`SLURM_SUBMIT_HOST`), when known.
    pub host: Option<String>,
}

/// The job a batch submission makes: the script's `#SBATCH` lines (`script` is its text and
/// `name` its file's stem; `None` with `--wrap`), the command line's options over them, run
/// where it was submitted from (`cwd`) unless `--chdir` says otherwise. With the options the
/// script's lines name that gantry does not carry out (each worth a warning).
pub fn batch_job(
    line: &CommandLine,
    script: Option<(&str, &str)>,
    submitter: &Submitter,
) -> Result<(Table, Vec<String>), SpecError> {
    let cwd = submitter.cwd.as_str();
    let wrapped;
    let (text, name) = match (script, &line.wrap) {
        (Some((text, name)), _) => (text, name),
        (None, Some(command)) => {
            wrapped = format!("#!/bin/sh\n{command}\n");
            (wrapped.as_str(), if line.attached { "interactive" } else { "wrap" })
        }
        (None, None) => return Err(SpecError::new("", "no batch script")),
    };
    let mut request: Request = parse_script(text)?;
    for (option, value) in &line.options {
        request.apply(option, value.as_deref()).map_err(|e| SpecError { field: option.clone(), ..e })?;
    }
    // A relative --chdir is from where sbatch ran, as in Slurm.
    request.chdir = match request.chdir.take() {
        None => Some(cwd.to_string()),
        Some(dir) if dir.starts_with('/') => Some(dir),
        Some(dir) => Some(format!("{}/{dir}", cwd.trim_end_matches('/'))),
    };
    request.submit_dir = Some(cwd.to_string());
    request.submit_host = submitter.host.clone();
    // Slurm's default output file, in the working directory: slurm-ID.out (an array's
    // elements slurm-ARRAY_INDEX.out), stderr with it.
    if !line.attached && request.output.is_none() && request.error.is_none() {
        let pattern = if request.array.is_some() { "slurm-%A_%a.out" } else { "slurm-%j.out" };
        request.output = Some(pattern.to_string());
    }
    // The script sees itself as `slurm_script` ($0), its arguments after.
    let mut command = script_command(text);
    command.push("slurm_script".to_string());
    command.extend(line.script_args.iter().cloned());
    let mut job = request.batch_job(name, command)?;
    let env = crate::sbatch_export::exported(request.export.as_deref(), &submitter.env)
        .map_err(|m| SpecError::new("--export", m))?;
    if !env.is_empty() {
        let table: Table = env.into_iter().map(|(k, v)| (k, toml::Value::String(v))).collect();
        job.insert("env".into(), toml::Value::Table(table));
    }
    Ok((job, std::mem::take(&mut request.ignored)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    fn at(cwd: &str) -> Submitter {
        Submitter {
            cwd: cwd.into(),
            env: vec![("CONDA_PREFIX".into(), "/opt/conda".into())],
            host: Some("login-1".into()),
        }
    }

    #[test]
    fn options_come_before_the_script_in_every_spelling() {
        let line = parse_command_line(&args(&["--gres=gpu:2", "-J", "x", "-t10", "--parsable", "run.sh", "--lr", "3"]))
            .expect("valid");
        assert_eq!(
            line.options,
            vec![
                ("--gres".into(), Some("gpu:2".into())),
                ("--job-name".into(), Some("x".into())),
                ("--time".into(), Some("10".into()))
            ]
        );
        assert!(line.parsable && !line.wait);
        assert_eq!((line.script.as_deref(), line.script_args.clone()), (Some("run.sh"), args(&["--lr", "3"])));
    }

    #[test]
    fn what_gantry_does_not_do_is_refused_by_name() {
        let err = parse_command_line(&args(&["--mail-type=END", "run.sh"])).expect_err("refused");
        assert_eq!(err.field, "--mail-type");
        assert!(err.to_string().contains("not supported"), "{err}");
        assert!(parse_command_line(&args(&["-J"])).is_err(), "a value is missing");
        assert!(parse_command_line(&args(&["--parsable"])).is_err(), "no script");
        assert!(parse_command_line(&args(&["--wrap=x", "run.sh"])).is_err(), "both");
    }

    #[test]
    fn the_command_line_overrides_the_script() {
        let script = "#!/bin/bash\n#SBATCH --job-name=from-script\n#SBATCH --time=5\necho hi\n";
        let line = parse_command_line(&args(&["--job-name=from-cli", "train.sh", "a b"])).expect("valid");
        let (job, ignored) = batch_job(&line, Some((script, "train")), &at("/work")).expect("a job");
        assert_eq!(job["name"].as_str(), Some("from-cli"));
        assert_eq!(job["time_limit"].as_integer(), Some(300));
        assert!(ignored.is_empty());
        let command: Vec<&str> = job["command"].as_array().expect("argv").iter().filter_map(|v| v.as_str()).collect();
        // Every slot runs gantry's batch wrapper; the script is its `$@`.
        assert_eq!((command[0], command[1], command[3]), ("sh", "-c", "gantry-sbatch"));
        assert!(command[2].contains("slurm-batch --nodes 1 --tasks 1 --tasks-per-node 1"), "{}", command[2]);
        assert_eq!(command[4..], ["/bin/bash", "-c", script, "slurm_script", "a b"]);
        assert!(command[2].contains("exec >'slurm-'\"$SLURM_JOB_ID\"'.out'"), "Slurm's default output: {}", command[2]);
        let task = &job["task"].as_array().expect("tasks")[0];
        assert_eq!((task["name"].as_str(), task["replicas"].as_integer()), (Some("batch"), Some(1)));
        assert_eq!(
            job["env"]["CONDA_PREFIX"].as_str(),
            Some("/opt/conda"),
            "the submitter's variables, as --export=ALL"
        );
        let wrapped = parse_command_line(&args(&["-H", "--wrap", "nvidia-smi -L"])).expect("valid");
        let (job, _) = batch_job(&wrapped, None, &at("/work")).expect("a job");
        assert_eq!((job["name"].as_str(), job["hold"].as_bool()), (Some("wrap"), Some(true)));
    }

    #[test]
    fn a_batch_job_is_one_slot_per_node_holding_that_nodes_share() {
        let script =
            "#!/bin/sh\n#SBATCH --nodes=2 --ntasks-per-node=4 --gpus-per-task=2 -c 3 --mem=10G\nsrun hostname\n";
        let line = parse_command_line(&args(&["x.sh"])).expect("valid");
        let (job, _) = batch_job(&line, Some((script, "x")), &at("/w")).expect("a job");
        let task = &job["task"].as_array().expect("tasks")[0];
        assert_eq!(task["replicas"].as_integer(), Some(2), "one slot per node");
        assert_eq!(task["distinct_nodes"].as_bool(), Some(true), "each on a node of its own");
        assert_eq!(task["gpu"]["count"].as_integer(), Some(8), "2 GPUs for each of 4 tasks");
        assert_eq!((task["cpu"].as_integer(), task["memory"].as_str()), (Some(12), Some("10GiB")), "--mem is per node");
        let command = job["command"].as_array().expect("argv")[2].as_str().expect("wrapper");
        assert!(
            command
                .contains("--nodes 2 --tasks 8 --tasks-per-node 4 --tasks-asked --cpus-per-task 3 --gpus-per-task 2"),
            "{command}"
        );
        let argv: Vec<String> =
            job["command"].as_array().expect("argv").iter().filter_map(|v| v.as_str()).map(str::to_string).collect();
        assert_eq!(crate::sbatch::allocation_tasks(&argv), Some(8), "read back for scontrol's NumTasks");
        assert_eq!(crate::sbatch::allocation_tasks(&["sh".into(), "-c".into(), "x --tasks 3".into()]), None);
        for (bad, says) in [
            ("#SBATCH --nodes=3 --ntasks=2\n", "fewer than --nodes"),
            ("#SBATCH --gres=gpu:1 --gpus-per-task=1\n", "give one of"),
            ("#SBATCH --nodes=2 --gpus=3\n", "does not divide among 2 nodes"),
            ("#SBATCH --mem=1G --mem-per-cpu=1G\n", "not both"),
            ("#SBATCH --mem-per-gpu=1G\n", "needs GPUs"),
        ] {
            let e = batch_job(&line, Some((bad, "x")), &at("/w")).expect_err(bad).to_string();
            assert!(e.contains(says), "{bad}: {e}");
        }
        for set in [
            "'SLURM_SUBMIT_DIR=/w'",
            "'SLURM_SUBMIT_HOST=login-1'",
            "'SLURM_MEM_PER_NODE=10240'",
            "'SLURM_NTASKS_PER_NODE=4'",
        ] {
            assert!(command.contains(&format!("--set {set}")), "{set}: {command}");
        }
    }

    #[test]
    fn memory_constraints_and_the_directory_read_as_slurm_means_them() {
        let one = |options: &[&str]| {
            let line = parse_command_line(&args(&[options, &["x.sh"]].concat())).expect("valid");
            batch_job(&line, Some(("#!/bin/sh\n", "x")), &at("/w")).map(|(job, _)| job)
        };
        let job = one(&["--mem-per-gpu=20G", "--gres=gpu:4"]).expect("a job");
        assert_eq!(job["task"][0]["memory"].as_str(), Some("81920MiB"), "20 GiB for each of 4 GPUs");
        let job = one(&["--mem-per-cpu=2G", "-n", "3"]).expect("a job");
        assert_eq!(job["task"][0]["memory"].as_str(), Some("6144MiB"), "2 GiB for each of 3 CPUs");
        let job = one(&["--chdir=sub dir", "--export=NONE"]).expect("a job");
        assert_eq!(job["workdir"].as_str(), Some("/w/sub dir"), "a relative --chdir is from where sbatch ran");
        assert!(job.get("env").is_none(), "--export=NONE");
        let job = one(&["-C", "a100&ib"]).expect("a job");
        let selector = &job["task"][0]["node_selector"];
        assert_eq!(
            (selector["slurm.feature/a100"].as_str(), selector["slurm.feature/ib"].as_str()),
            (Some("true"), Some("true"))
        );
        for bad in ["a100|h100", "[rack1*2]", "a&", "x y"] {
            let e = one(&["-C", bad]).expect_err(bad).to_string();
            assert!(e.contains("joined by &"), "{bad}: {e}");
        }
    }
}
