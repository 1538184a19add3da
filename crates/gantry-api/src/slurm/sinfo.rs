//! `sinfo`: the fleet's nodes as Slurm lists them — grouped by state with their node list,
//! one line per node (`-N`), the long form (`-l`) and `-o` formats — over the API's nodes.
//! Partitions are the queue file's (`[[partition]]`); where it defines none, one partition,
//! `all`, holds every node.

use super::format::{Piece, pieces, render};
use super::partitions::{Shown, shown};
use super::{SlurmArgError, list, options, refused};
use crate::NodeView;
use crate::partitions::Partitions;

const SUPPORTED: &str = "-N/--Node, -l/--long, -h/--noheader, -o/--format (%N %D %P %t %T %G %c %m %f %a %l %E %C), \
    -t/--states, -n/--nodes, -p/--partition";

/// What `sinfo` was asked to show.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Sinfo {
    pub per_node: bool,
    pub long: bool,
    pub no_header: bool,
    pub format: Option<String>,
    pub states: Vec<String>,
    pub nodes: Vec<String>,
    /// `-p/--partition`: only these partitions.
    pub partitions: Vec<String>,
}

/// Read `sinfo`'s arguments.
pub fn parse_sinfo(args: &[String]) -> Result<Sinfo, SlurmArgError> {
    let flags = ["-N", "--Node", "-l", "--long", "-h", "--noheader", "-Nl", "-lN"];
    let mut s = Sinfo::default();
    for (option, value) in options(args, &flags)? {
        match option.as_str() {
            "-N" | "--Node" => s.per_node = true,
            "-l" | "--long" => s.long = true,
            "-Nl" | "-lN" => (s.per_node, s.long) = (true, true),
            "-h" | "--noheader" => s.no_header = true,
            "-o" | "--format" => s.format = Some(value),
            "-t" | "--states" => s.states.extend(list(&value).iter().map(|v| v.to_lowercase())),
            "-n" | "--nodes" => s.nodes.extend(list(&value)),
            "-p" | "--partition" => s.partitions.extend(list(&value)),
            "" => return Err(SlurmArgError::new(value, "sinfo takes options only").hint(SUPPORTED)),
            other => return Err(refused("sinfo", other, SUPPORTED)),
        }
    }
    if let Some(f) = &s.format {
        check_format(f)?;
    }
    Ok(s)
}

/// A node's state: Slurm's short and long names.
pub fn node_state(n: &NodeView) -> (&'static str, &'static str) {
    let busy = n.gpus.iter().any(|g| g.allocated_milli > 0) || n.cpu_free_milli < n.cpu_milli;
    let full = !n.gpus.is_empty() && n.gpus.iter().all(|g| g.allocated_milli >= 1000);
    match () {
        _ if n.lost || !n.ready => ("down", "down"),
        _ if n.drained && busy => ("drng", "draining"),
        _ if n.drained => ("drain", "drained"),
        _ if full => ("alloc", "allocated"),
        _ if busy => ("mix", "mixed"),
        _ => ("idle", "idle"),
    }
}

/// A node's GPUs as Slurm's GRES: `gpu:h100-sxm5-80gb:8` per model.
pub(crate) fn gres(n: &NodeView) -> String {
    let mut models: Vec<(String, usize)> = Vec::new();
    for g in &n.gpus {
        let model = g.model.to_lowercase();
        match models.iter_mut().find(|(m, _)| *m == model) {
            Some((_, count)) => *count += 1,
            None => models.push((model, 1)),
        }
    }
    if models.is_empty() {
        return "(null)".into();
    }
    models.iter().map(|(m, c)| format!("gpu:{m}:{c}")).collect::<Vec<_>>().join(",")
}

/// A node's Slurm features (`AVAIL_FEATURES`): its labels `slurm.feature/NAME = "true"`, the
/// ones `--constraint` matches and `gantry import slurm` writes from `Features=`; `(null)`
/// without any.
pub(crate) fn features(n: &NodeView) -> String {
    let names: Vec<&str> =
        n.features.iter().filter_map(|label| label.strip_prefix("slurm.feature/")?.strip_suffix("=true")).collect();
    if names.is_empty() { "(null)".into() } else { names.join(",") }
}

/// One field of a node in a partition (`%X` without its width).
fn field(p: &Shown, n: &NodeView, key: char) -> String {
    let cpus = n.cpu_milli / 1000;
    let used = n.cpu_milli.saturating_sub(n.cpu_free_milli).div_ceil(1000);
    match key {
        'N' | 'n' => n.name.clone(),
        'D' => "1".into(),
        'P' => p.marked(),
        't' => node_state(n).0.into(),
        'T' => node_state(n).1.into(),
        'G' => gres(n),
        'c' => cpus.to_string(),
        'm' => (n.memory_bytes >> 20).to_string(),
        'f' => features(n),
        'a' => "up".into(),
        'l' => p.time_limit("infinite"),
        'E' => match node_state(n).0 {
            "down" => "Not responding".into(),
            "drain" | "drng" => "drained by an admin".into(),
            _ => "none".into(),
        },
        'C' => format!("{used}/{}/0/{cpus}", cpus - used),
        _ => String::new(),
    }
}

fn check_format(format: &str) -> Result<(), SlurmArgError> {
    for p in pieces(format) {
        if let Piece::Field { key, .. } = p
            && !"NnDPtTGcmfalEC".contains(key)
        {
            return Err(
                SlurmArgError::new("--format", format!("%{key}: not a field gantry's sinfo knows")).hint(SUPPORTED)
            );
        }
    }
    Ok(())
}

/// Column headers Slurm prints for each field.
fn header(key: char) -> &'static str {
    match key {
        'N' | 'n' => "NODELIST",
        'D' => "NODES",
        'P' => "PARTITION",
        't' | 'T' => "STATE",
        'G' => "GRES",
        'c' => "CPUS",
        'm' => "MEMORY",
        'f' => "AVAIL_FEATURES",
        'a' => "AVAIL",
        'l' => "TIMELIMIT",
        'E' => "REASON",
        _ => "CPUS(A/I/O/T)",
    }
}

/// sinfo's listing of `nodes` in their partitions (a node in two is listed in each).
pub fn sinfo_table(nodes: &[NodeView], partitions: &Partitions, s: &Sinfo) -> String {
    let format = match (&s.format, s.per_node, s.long) {
        (Some(f), _, _) => f.clone(),
        (None, true, true) => "%10N %.6D %9P %11T %.4c %.8m %20f %14G %E".into(),
        (None, true, false) => "%10N %.6D %9P %6t".into(),
        (None, false, true) => "%9P %.5a %.10l %.6D %.11T %14G %N".into(),
        (None, false, false) => "%9P %.5a %.10l %.6D %.6t %N".into(),
    };
    let pieces = pieces(&format);
    let wanted = |n: &&NodeView| {
        let (short, long) = node_state(n);
        (s.states.is_empty() || s.states.iter().any(|w| w == short || w == long))
            && (s.nodes.is_empty() || s.nodes.contains(&n.name))
    };
    let shown = shown(nodes, partitions);
    // Nodes of a partition whose shown fields (other than the list and count) match share a line.
    let mut groups: Vec<(String, &Shown, Vec<&NodeView>)> = Vec::new();
    for p in shown.iter().filter(|p| s.partitions.is_empty() || s.partitions.contains(&p.view.name)) {
        for n in p.nodes.iter().copied().filter(wanted) {
            let key = if s.per_node {
                format!("{}\n{}", p.view.name, n.name)
            } else {
                render(&pieces, |k| if "NnD".contains(k) { String::new() } else { field(p, n, k) })
            };
            match groups.iter_mut().find(|(k, _, _)| *k == key) {
                Some((_, _, members)) => members.push(n),
                None => groups.push((key, p, vec![n])),
            }
        }
    }
    let mut out = String::new();
    if !s.no_header {
        out += &render(&pieces, |k| header(k).to_string());
    }
    for (_, p, members) in groups {
        let names: Vec<String> = members.iter().map(|n| n.name.clone()).collect();
        out += &render(&pieces, |k| match k {
            'N' => gantry_types::text::hostlist(&names),
            'D' => members.len().to_string(),
            _ => field(p, members[0], k),
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str, allocated: &[u32]) -> NodeView {
        let gpus: Vec<serde_json::Value> = allocated
            .iter()
            .enumerate()
            .map(|(i, &a)| {
                serde_json::json!({"index": i, "uuid": format!("GPU-{i}"), "model": "L4-24GB", "mode": "whole",
                    "allocated_milli": a, "utilization_pct": null, "measured": false, "jobs": []})
            })
            .collect();
        serde_json::from_value(serde_json::json!({
            "name": name, "drained": false, "ready": true, "heartbeat_age_s": null, "agent_version": null,
            "cpu_milli": 16000, "cpu_free_milli": 16000, "memory_bytes": 68_719_476_736u64, "memory_free_bytes": 0,
            "gpus": gpus
        }))
        .expect("a node")
    }

    #[test]
    fn nodes_group_by_state_and_list_one_per_line_with_n() {
        let nodes = [
            node("gpu-01", &[0, 0]),
            node("gpu-02", &[0, 0]),
            node("gpu-03", &[1000, 0]),
            node("gpu-04", &[1000, 1000]),
        ];
        let none = Partitions::default();
        let text = sinfo_table(&nodes, &none, &parse_sinfo(&[]).expect("no options"));
        assert_eq!(
            text,
            "PARTITION AVAIL  TIMELIMIT  NODES  STATE NODELIST\nall*         up   infinite      2   idle gpu-[01-02]\n\
             all*         up   infinite      1    mix gpu-03\nall*         up   infinite      1  alloc gpu-04\n"
        );
        let args = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let text = sinfo_table(&nodes, &none, &parse_sinfo(&args(&["-N", "-h", "-t", "idle"])).expect("ok"));
        assert_eq!(text, "gpu-01          1 all*      idle\ngpu-02          1 all*      idle\n");
        let text = sinfo_table(&nodes[..1], &none, &parse_sinfo(&args(&["-o", "%N %G %c %m"])).expect("ok"));
        assert_eq!(text, "NODELIST GRES CPUS MEMORY\ngpu-01 gpu:l4-24gb:2 16 65536\n");
        assert!(parse_sinfo(&args(&["-o", "%Z"])).is_err());
        let mut labelled = node("gpu-05", &[0]);
        labelled.features = vec!["slurm.feature/a100=true".into(), "pool=train".into(), "slurm.feature/ib=true".into()];
        let text = sinfo_table(&[labelled], &none, &parse_sinfo(&args(&["-h", "-o", "%f"])).expect("ok"));
        assert_eq!(text, "a100,ib\n", "Slurm's feature names, not gantry's other labels");
        assert!(parse_sinfo(&args(&["--Format=nodelist"])).expect_err("refused").to_string().contains("not supported"));
    }

    #[test]
    fn partitions_list_their_own_nodes_and_limits_a_node_in_two_shows_in_each() {
        use crate::partitions::PartitionView;
        let nodes = [node("gpu-01", &[0]), node("gpu-02", &[1000]), node("cpu-01", &[])];
        let part = |name: &str, default: bool, members: &[&str], max_time_s: Option<u64>| PartitionView {
            name: name.into(),
            default,
            nodes: members.iter().map(|m| m.to_string()).collect(),
            node_selector: Default::default(),
            queue: None,
            max_time_s,
            default_time_s: None,
            max_nodes: None,
        };
        let partitions = Partitions {
            partitions: vec![
                part("gpu", true, &["gpu-01", "gpu-02"], Some(2 * 86_400)),
                part("debug", false, &["gpu-01", "cpu-01"], Some(1800)),
            ],
            qos: Vec::new(),
        };
        let text = sinfo_table(&nodes, &partitions, &parse_sinfo(&[]).expect("no options"));
        assert_eq!(
            text,
            "PARTITION AVAIL  TIMELIMIT  NODES  STATE NODELIST\n\
             gpu*         up 2-00:00:00      1   idle gpu-01\n\
             gpu*         up 2-00:00:00      1  alloc gpu-02\n\
             debug        up      30:00      2   idle gpu-01,cpu-01\n"
        );
        let args = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let text = sinfo_table(&nodes, &partitions, &parse_sinfo(&args(&["-p", "debug", "-N", "-h"])).expect("ok"));
        assert_eq!(text, "gpu-01          1 debug     idle\ncpu-01          1 debug     idle\n");
        let text = sinfo_table(&nodes, &partitions, &parse_sinfo(&args(&["-p", "nope", "-h"])).expect("ok"));
        assert_eq!(text, "", "an unknown partition lists nothing, as Slurm's sinfo does");
    }
}
