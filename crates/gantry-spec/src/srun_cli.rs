//! `srun` and `salloc` run outside a batch job, as the batch job that does what they do: it
//! makes the allocation their options ask for and runs, once on its first node, `srun
//! COMMAND` (a job step over the whole allocation, as Slurm's `srun` outside a job does) or,
//! for `salloc`, COMMAND itself (its own `srun` calls then start steps). The output is not
//! written to `slurm-%j.out`: the caller streams it back from the job's log.
//!
//! Options split three ways: the step's (`-n`, `-N`, `--ntasks-per-node`, `--gpus-per-task`,
//! `-c`) shape both the allocation and the step; `srun`'s own (`-l`, `-u`) go to the step
//! only; the rest are `sbatch`'s, checked as `sbatch` checks them. What makes no sense here
//! (`--array`, `--output`, `--pty`, …) is refused by name.

use crate::SpecError;
use crate::sbatch::quoted;
use crate::sbatch_cli::{CommandLine, known, option_value, split_option};

/// Options of the step that also size the allocation.
const STEP_OPTIONS: [&str; 5] = ["--ntasks", "--nodes", "--ntasks-per-node", "--gpus-per-task", "--cpus-per-task"];

/// `sbatch` options with no meaning for a command whose output streams back.
const NOT_HERE: [&str; 7] = ["--array", "--wrap", "--parsable", "--wait", "--output", "--error", "--hold"];

/// What `srun ARGS` (`salloc` when `salloc`) outside a job submits: a command line for
/// `sbatch_cli::batch_job` (`attached`, its script in `wrap`).
pub fn attached_line(salloc: bool, args: &[String]) -> Result<CommandLine, SpecError> {
    let program = if salloc { "salloc" } else { "srun" };
    let mut line = CommandLine { attached: true, ..CommandLine::default() };
    let mut step: Vec<String> = Vec::new();
    let mut i = 0;
    while i < args.len() && args[i].starts_with('-') && args[i] != "-" {
        let arg = &args[i];
        if arg == "--" {
            i += 1;
            break;
        }
        let (name, inline) = split_option(arg);
        if matches!(name, "-l" | "--label" | "-u" | "--unbuffered") && !salloc {
            step.push(name.to_string());
            i += 1;
            continue;
        }
        if name == "--pty" {
            return Err(SpecError::new("--pty", format!("gantry's {program} forwards no terminal"))
                .hint("run the command without --pty: its output streams back here; or submit it with sbatch"));
        }
        let (long, takes_value) = known(name).ok_or_else(|| refused(program, name))?;
        if NOT_HERE.contains(&long) {
            return Err(refused(program, long));
        }
        let value = option_value(long, takes_value, inline, args, &mut i)?;
        if STEP_OPTIONS.contains(&long) && !salloc {
            step.push(format!("{long}={}", value.clone().unwrap_or_default()));
        }
        line.options.push((long.to_string(), value));
        i += 1;
    }
    let command = &args[i.min(args.len())..];
    let Some(first) = command.first() else {
        return Err(SpecError::new("", format!("no command to run ({program} [OPTIONS] COMMAND [ARGS…])")).hint(
            if salloc {
                "gantry's salloc runs a command in the allocation (a shell would need a terminal gantry does not forward)"
            } else {
                "srun [OPTIONS] COMMAND [ARGS…]"
            },
        ));
    };
    // As Slurm names it: after the program run.
    let name = first.rsplit('/').next().unwrap_or(first).to_string();
    line.options.insert(0, ("--job-name".to_string(), Some(name)));
    let words: Vec<String> = command.iter().map(|w| quoted(w)).collect();
    line.wrap = Some(if salloc {
        words.join(" ")
    } else {
        let step: Vec<String> = step.iter().map(|w| quoted(w)).collect();
        format!("exec srun {} -- {}", step.join(" "), words.join(" ")).replace("srun  --", "srun --")
    });
    Ok(line)
}

fn refused(program: &str, option: &str) -> SpecError {
    SpecError::new(option, format!("not supported by gantry's {program} outside a batch job")).hint(
        "the allocation takes sbatch's options (--gres, --gpus, --mem, --time, --partition, --constraint, …) and the \
         step's (-n, -N, --ntasks-per-node, --gpus-per-task, -c, -l); not --array, --output, --error, --hold, --pty",
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sbatch_cli::{Submitter, batch_job};

    fn args(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn srun_makes_an_allocation_and_runs_one_step_over_it() {
        let line = attached_line(
            false,
            &args(&["-N2", "--ntasks-per-node=2", "--gres=gpu:1", "-l", "python3", "-c", "print('it''s')"]),
        )
        .expect("valid");
        assert_eq!(
            line.wrap.as_deref(),
            Some("exec srun '--nodes=2' '--ntasks-per-node=2' '-l' -- 'python3' '-c' 'print('\\''it'\\'''\\''s'\\'')'")
        );
        assert_eq!(line.options[0], ("--job-name".into(), Some("python3".into())));
        assert!(line.options.contains(&("--gres".into(), Some("gpu:1".into()))));
        let submitter = Submitter { cwd: "/home/a".into(), ..Submitter::default() };
        let (job, ignored) = batch_job(&line, None, &submitter).expect("a job");
        assert!(ignored.is_empty());
        assert_eq!(job["name"].as_str(), Some("python3"));
        let run = job["command"].to_string();
        assert!(run.contains("exec srun"), "{run}");
        assert!(!run.contains("slurm-%j.out"), "the output streams back, no file: {run}");
    }

    #[test]
    fn salloc_runs_its_command_once_in_the_allocation() {
        let line = attached_line(true, &args(&["-n4", "-t", "10", "bash", "train.sh"])).expect("valid");
        assert_eq!(line.wrap.as_deref(), Some("'bash' 'train.sh'"));
        assert!(line.options.contains(&("--ntasks".into(), Some("4".into()))));
        assert_eq!(line.options[0].1.as_deref(), Some("bash"));
    }

    #[test]
    fn what_has_no_meaning_here_is_refused_by_name() {
        for (salloc, bad) in [
            (false, &["--pty", "bash"][..]),
            (false, &["--array=1-3", "x"]),
            (false, &["-o", "out.txt", "x"]),
            (false, &["--frobnicate", "x"]),
            (true, &["-l", "x"]),
            (true, &[][..]),
            (false, &["-n", "2"]),
        ] {
            let err = attached_line(salloc, &args(bad)).expect_err("refused");
            assert!(!err.message.is_empty(), "{bad:?}");
        }
        let err = attached_line(false, &args(&["--pty", "bash"])).expect_err("refused");
        assert!(err.message.contains("no terminal"), "{err}");
    }
}
