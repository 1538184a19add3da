//! `sbatch --export`: which of the submitting shell's variables a batch job starts with. As in
//! Slurm, all of them by default (`ALL`), none (`NONE`), or a list (`FOO,BAR=x`, with `ALL,`
//! first to add to everything) — less what gantry sets itself: a job's place in its run
//! (`SLURM_*`, `RANK`, ...), gantry's own (`GANTRY_*`, which would carry a token), the GPUs it
//! was given, and who it runs as (`USER`, `HOME`, ... come from its account on the node).

/// Variables never taken from the submitter: the node gives them.
const NODE_GIVES: [&str; 13] = [
    "USER",
    "LOGNAME",
    "HOME",
    "SHELL",
    "MAIL",
    "PWD",
    "OLDPWD",
    "SHLVL",
    "_",
    "CUDA_VISIBLE_DEVICES",
    "NVIDIA_VISIBLE_DEVICES",
    "GPU_DEVICE_ORDINAL",
    "TMPDIR",
];

/// Whether the submitter's variable `name` may travel with the job.
fn travels(name: &str) -> bool {
    let identifier = !name.is_empty()
        && !name.starts_with(|c: char| c.is_ascii_digit())
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    identifier
        && !NODE_GIVES.contains(&name)
        && !name.starts_with("GANTRY_")
        && !name.starts_with("CUDA_MPS_")
        && !gantry_types::job::is_run_variable(name)
}

/// The job's variables for `--export=SPEC` (`None`: Slurm's default, `ALL`) from the
/// submitter's `env`; a name given without a value takes the submitter's.
pub fn exported(spec: Option<&str>, env: &[(String, String)]) -> Result<Vec<(String, String)>, String> {
    let spec = spec.unwrap_or("ALL");
    let mut out: Vec<(String, String)> = Vec::new();
    let mut items: Vec<&str> = spec.split(',').map(str::trim).filter(|s| !s.is_empty()).collect();
    match items.first().copied() {
        Some("NONE") if items.len() == 1 => return Ok(out),
        Some("ALL" | "NONE") => {
            if items[0] == "ALL" {
                out.extend(env.iter().filter(|(k, _)| travels(k)).cloned());
            }
            items.remove(0);
        }
        _ => {}
    }
    for item in items {
        let (name, value) = match item.split_once('=') {
            Some((n, v)) => (n, Some(v.to_string())),
            None => (item, None),
        };
        if !travels(name) {
            return Err(format!(
                "--export={spec}: {name:?} cannot be set this way (gantry sets it, or it is not a variable name)"
            ));
        }
        let value = value.or_else(|| env.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone()));
        out.retain(|(k, _)| k != name);
        out.extend(value.map(|v| (name.to_string(), v)));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn the_submitters_variables_travel_as_slurm_exports_them() {
        let shell = env(&[
            ("PATH", "/opt/conda/bin:/usr/bin"),
            ("CONDA_PREFIX", "/opt/conda"),
            ("GANTRY_TOKEN", "gty_secret"),
            ("SLURM_JOB_ID", "7"),
            ("HOME", "/root"),
            ("BASH_FUNC_x%%", "() { :; }"),
            ("RANK", "3"),
        ]);
        let all = exported(None, &shell).expect("default");
        assert_eq!(all, env(&[("PATH", "/opt/conda/bin:/usr/bin"), ("CONDA_PREFIX", "/opt/conda")]), "never a token");
        assert_eq!(exported(Some("NONE"), &shell).expect("none"), Vec::new());
        assert_eq!(
            exported(Some("ALL,FOO=bar,CONDA_PREFIX=/x"), &shell).expect("all and more"),
            env(&[("PATH", "/opt/conda/bin:/usr/bin"), ("FOO", "bar"), ("CONDA_PREFIX", "/x")])
        );
        assert_eq!(
            exported(Some("PATH,FOO=1"), &shell).expect("a list"),
            env(&[("PATH", "/opt/conda/bin:/usr/bin"), ("FOO", "1")])
        );
        assert!(exported(Some("ALL,SLURM_NTASKS=4"), &shell).expect_err("gantry's").contains("SLURM_NTASKS"));
        assert!(exported(Some("GANTRY_TOKEN"), &shell).is_err());
        assert!(exported(Some("1BAD=x"), &shell).is_err());
    }
}
