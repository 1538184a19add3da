//! A running cluster's node listing as slurm.conf `NodeName` lines, for `gantry import slurm`
//! when only the commands are at hand: `scontrol show node` (one record per node, with `-o`
//! or across indented lines) and `sinfo -N -o "%N %c %m %G %f"` (any of those columns, by
//! their header; a node listed once per partition read once). What they lack is said in a note: neither lists partitions (no queue file
//! comes of them), and `sinfo` says nothing of a node it was not asked to print.

/// `text` as slurm.conf lines and the notes on what it lacks, if it is one of the listings;
/// `None` for anything else (read as slurm.conf).
pub fn as_slurm_conf(text: &str) -> Option<(String, Vec<String>)> {
    let first = text.lines().map(str::trim).find(|l| !l.is_empty())?;
    if first.starts_with("NodeName=") && text.contains("CPUTot=") {
        return Some(scontrol(text));
    }
    if first.split_whitespace().next() == Some("NODELIST") {
        return sinfo(text);
    }
    None
}

/// The fields gantry reads, as scontrol names them, and slurm.conf's names for them.
const SCONTROL: [(&str, &str); 5] = [
    ("NodeName", "NodeName"),
    ("CPUTot", "CPUs"),
    ("RealMemory", "RealMemory"),
    ("Gres", "Gres"),
    ("AvailableFeatures", "Features"),
];

fn scontrol(text: &str) -> (String, Vec<String>) {
    // A record: a `NodeName=` line and the indented lines under it.
    let mut records: Vec<String> = Vec::new();
    for line in text.lines() {
        match records.last_mut() {
            Some(record) if line.starts_with(char::is_whitespace) => {
                record.push(' ');
                record.push_str(line.trim());
            }
            _ if line.trim().is_empty() => {}
            _ => records.push(line.trim().to_string()),
        }
    }
    let mut conf = String::new();
    for record in records {
        let fields: Vec<(&str, &str)> = record.split_whitespace().filter_map(|w| w.split_once('=')).collect();
        let line: Vec<String> = SCONTROL
            .iter()
            .filter_map(|(theirs, ours)| {
                let value = fields.iter().find(|(k, _)| k == theirs).map(|(_, v)| *v)?;
                (value != "(null)" && !value.is_empty()).then(|| format!("{ours}={value}"))
            })
            .collect();
        conf.push_str(&line.join(" "));
        conf.push('\n');
    }
    let notes = vec![
        "read as `scontrol show node` output: it lists no partitions, so no queues come of it (import slurm.conf for those)"
            .to_string(),
    ];
    (conf, notes)
}

/// sinfo's header names and slurm.conf's names for them.
const SINFO: [(&str, &str); 5] = [
    ("NODELIST", "NodeName"),
    ("CPUS", "CPUs"),
    ("MEMORY", "RealMemory"),
    ("GRES", "Gres"),
    ("AVAIL_FEATURES", "Features"),
];

fn sinfo(text: &str) -> Option<(String, Vec<String>)> {
    let mut lines = text.lines().filter(|l| !l.trim().is_empty());
    let header: Vec<&str> = lines.next()?.split_whitespace().collect();
    let column = |name: &str| header.iter().position(|h| *h == name);
    column("NODELIST")?;
    let mut conf = String::new();
    let mut seen = std::collections::BTreeSet::new();
    for line in lines {
        let cells: Vec<&str> = line.split_whitespace().collect();
        // `sinfo -N` lists a node once for each partition it is in: once is enough.
        if !seen.insert(cells.first().copied().unwrap_or_default().to_string()) {
            continue;
        }
        let fields: Vec<String> = SINFO
            .iter()
            .filter_map(|(theirs, ours)| {
                let value = cells.get(column(theirs)?)?;
                (*value != "(null)").then(|| format!("{ours}={value}"))
            })
            .collect();
        conf.push_str(&fields.join(" "));
        conf.push('\n');
    }
    let missing: Vec<&str> =
        SINFO[1..].iter().filter(|(theirs, _)| column(theirs).is_none()).map(|(t, _)| *t).collect();
    let mut notes = vec![
        "read as `sinfo` output: it lists no partitions, so no queues come of it (import slurm.conf for those)"
            .to_string(),
    ];
    if !missing.is_empty() {
        notes.push(format!(
            "sinfo output without {}: use `sinfo -N -o \"%N %c %m %G %f\"` for every column gantry reads",
            missing.join(", ")
        ));
    }
    Some((conf, notes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scontrol_records_one_line_or_indented_become_node_lines() {
        let one_line = "NodeName=gpu01 Arch=x86_64 CoresPerSocket=32 CPUAlloc=0 CPUTot=128 CPULoad=0.10 \
            AvailableFeatures=a100,ib ActiveFeatures=a100,ib Gres=gpu:a100:8(S:0-1) NodeAddr=gpu01 \
            RealMemory=1024000 AllocMem=0 State=IDLE Partitions=gpu\n\
            NodeName=cpu01 Arch=x86_64 CPUTot=64 AvailableFeatures=(null) Gres=(null) RealMemory=256000 State=IDLE\n";
        let (conf, notes) = as_slurm_conf(one_line).expect("scontrol");
        assert_eq!(
            conf,
            "NodeName=gpu01 CPUs=128 RealMemory=1024000 Gres=gpu:a100:8(S:0-1) Features=a100,ib\nNodeName=cpu01 CPUs=64 RealMemory=256000\n"
        );
        assert!(notes[0].contains("no partitions"));
        let indented = "NodeName=gpu01 Arch=x86_64 CoresPerSocket=32\n   CPUAlloc=0 CPUTot=128 CPULoad=0.10\n   \
            AvailableFeatures=a100\n   Gres=gpu:a100:8\n   RealMemory=1024000 AllocMem=0\n\nNodeName=gpu02 Arch=x86_64\n   CPUTot=128 RealMemory=1024000\n";
        let (conf, _) = as_slurm_conf(indented).expect("scontrol");
        assert_eq!(
            conf,
            "NodeName=gpu01 CPUs=128 RealMemory=1024000 Gres=gpu:a100:8 Features=a100\nNodeName=gpu02 CPUs=128 RealMemory=1024000\n"
        );
    }

    #[test]
    fn sinfo_columns_are_read_by_their_header_and_missing_ones_named() {
        let text = "NODELIST   CPUS MEMORY GRES          AVAIL_FEATURES\ngpu[01-02]  128 1024000 gpu:a100:8 a100,ib\ncpu01 64 256000 (null) (null)\ncpu01 64 256000 (null) (null)\n";
        let (conf, notes) = as_slurm_conf(text).expect("sinfo");
        assert_eq!(
            conf,
            "NodeName=gpu[01-02] CPUs=128 RealMemory=1024000 Gres=gpu:a100:8 Features=a100,ib\nNodeName=cpu01 CPUs=64 RealMemory=256000\n"
        );
        assert_eq!(notes.len(), 1);
        let (_, notes) = as_slurm_conf("NODELIST CPUS\nn1 8\n").expect("sinfo");
        assert!(notes[1].contains("without MEMORY, GRES, AVAIL_FEATURES"), "{notes:?}");
        assert_eq!(as_slurm_conf("NodeName=n1 CPUs=8 RealMemory=1000\n"), None, "slurm.conf stays slurm.conf");
        assert_eq!(as_slurm_conf(""), None);
    }
}
