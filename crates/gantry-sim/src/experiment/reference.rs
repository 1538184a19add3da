//! The FGD reference simulator's own files, read so a run can be compared with it: its
//! `decisions.csv` (the arrival order it drew, the node it chose for each pod, the node ranks
//! its names carry) and the authors' published curves (mean allocation at 130 % per workload
//! and policy).

use crate::alibaba::TraceError;
use std::collections::BTreeMap;
use std::path::Path;

/// A CSV file's reader and a column finder that names the file and the column it lacks.
struct Table {
    file: String,
    reader: csv::Reader<std::fs::File>,
    headers: csv::StringRecord,
}

impl Table {
    fn open(path: &Path) -> Result<Table, TraceError> {
        let file = path.display().to_string();
        let io = |error| TraceError::Io { file: file.clone(), error };
        let mut reader = csv::Reader::from_reader(std::fs::File::open(path).map_err(io)?);
        let headers = reader.headers().map_err(|e| bad_row(&file, 1, &e))?.clone();
        Ok(Table { file, reader, headers })
    }

    fn column(&self, name: &str) -> Result<usize, TraceError> {
        self.headers.iter().position(|h| h == name).ok_or_else(|| TraceError::MissingColumn {
            file: self.file.clone(),
            column: name.to_string(),
            found: self.headers.iter().collect::<Vec<_>>().join(","),
        })
    }

    /// Every row, numbered as a text editor numbers lines (the header is line 1).
    fn rows(&mut self) -> impl Iterator<Item = Result<(u64, csv::StringRecord), TraceError>> + '_ {
        let file = self.file.clone();
        self.reader.records().enumerate().map(move |(i, r)| {
            let line = i as u64 + 2;
            r.map(|r| (line, r)).map_err(|e| bad_row(&file, line, &e))
        })
    }
}

fn bad_row(file: &str, line: u64, error: &csv::Error) -> TraceError {
    TraceError::BadRow { file: file.to_string(), line, problem: error.to_string() }
}

/// Mean allocation at 130 % per (workload, policy) from the authors' curves; their policy
/// directory names (01-Random, ...) mapped to ours. Rows of other policies, or without a
/// number, are left out.
pub fn read_authors(path: &Path) -> Result<BTreeMap<(String, String), f64>, TraceError> {
    let mut table = Table::open(path)?;
    let (w, p, v) = (table.column("workload")?, table.column("sc_policy")?, table.column("130")?);
    let mut sums: BTreeMap<(String, String), (f64, u32)> = BTreeMap::new();
    for row in table.rows() {
        let (_, r) = row?;
        let Some(policy) = r.get(p).and_then(|p| p.split_once('-')).and_then(|(_, n)| our_policy(n)) else { continue };
        let Ok(value) = r.get(v).unwrap_or("").parse::<f64>() else { continue };
        let entry = sums.entry((r.get(w).unwrap_or("").to_string(), policy.to_string())).or_default();
        entry.0 += value;
        entry.1 += 1;
    }
    Ok(sums.into_iter().map(|(k, (sum, n))| (k, sum / f64::from(n))).collect())
}

/// Our name for the reference simulator's policy directory name.
fn our_policy(theirs: &str) -> Option<&'static str> {
    Some(match theirs {
        "Random" => "random",
        "DotProd" => "dot-product",
        "GpuClustering" => "gpu-clustering",
        "GpuPacking" => "gpu-packing",
        "BestFit" => "best-fit",
        "FGD" => "fgd",
        _ => return None,
    })
}

/// Node ranks from a reference decisions.csv's `NNNN-name` node column (none without one).
pub fn read_node_ranks(path: &Path) -> Result<BTreeMap<String, u32>, TraceError> {
    let mut table = Table::open(path)?;
    let Ok(col) = table.column("node") else { return Ok(BTreeMap::new()) };
    let mut ranks = BTreeMap::new();
    for row in table.rows() {
        let (_, record) = row?;
        if let Some((prefix, name)) = record.get(col).and_then(|n| n.split_once('-'))
            && let Ok(rank) = prefix.parse::<u32>()
        {
            ranks.insert(name.to_string(), rank);
        }
    }
    Ok(ranks)
}

/// (pod, node) pairs of a decisions.csv; node `None` when FAILED. Node names lose the
/// reference simulator's `NNNN-` prefix.
pub fn read_decisions(path: &Path) -> Result<Vec<(String, Option<String>)>, TraceError> {
    let mut table = Table::open(path)?;
    let (pod_col, node_col) = (table.column("pod")?, table.column("node").ok());
    let mut out = Vec::new();
    for row in table.rows() {
        let (_, record) = row?;
        let pod = record.get(pod_col).unwrap_or("").to_string();
        let node = node_col.and_then(|c| record.get(c)).filter(|n| !n.is_empty() && *n != "FAILED");
        out.push((pod, node.map(unranked)));
    }
    Ok(out)
}

/// A node name without the reference simulator's four-digit rank prefix.
fn unranked(node: &str) -> String {
    match node.split_once('-') {
        Some((prefix, rest)) if prefix.len() == 4 && prefix.chars().all(|c| c.is_ascii_digit()) => rest.to_string(),
        _ => node.to_string(),
    }
}

/// `--arrivals FILE`: a reference run's arrival order of `pods` and its node ranks, to replay
/// instead of a drawn order.
pub fn fixed_order(
    path: &Path,
    nodes: &[crate::TraceNode],
    pods: &[crate::TracePod],
) -> Result<(Vec<crate::Arrival>, Vec<usize>), crate::SimError> {
    use crate::protocol_a;
    let names: Vec<String> = read_decisions(path)?.into_iter().map(|(p, _)| p).collect();
    let arrivals = protocol_a::arrivals_from_names(pods, &names)
        .map_err(|e| crate::SimError::Input(format!("{}: {e}", path.display())))?;
    Ok((arrivals, protocol_a::ranked_node_order(nodes, &read_node_ranks(path)?)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(name: &str, text: &str) -> std::path::PathBuf {
        let path = std::env::temp_dir().join(format!("gantry-reference-{}-{name}", std::process::id()));
        std::fs::write(&path, text).expect("temp file");
        path
    }

    #[test]
    fn decisions_lose_the_rank_prefix_and_failed_pods_have_no_node() {
        let path = write("decisions.csv", "pod,node\np1,0007-n3\np2,FAILED\np3,big-node\n");
        let decisions = read_decisions(&path).expect("reads");
        let nodes: Vec<Option<&str>> = decisions.iter().map(|(_, n)| n.as_deref()).collect();
        assert_eq!(nodes, [Some("n3"), None, Some("big-node")]);
        assert_eq!(read_node_ranks(&path).expect("reads").get("n3"), Some(&7));
        std::fs::remove_file(path).ok();
    }

    #[test]
    fn a_missing_column_is_named_with_the_columns_found() {
        let path = write("authors.csv", "workload,policy\nx,01-FGD\n");
        let err = read_authors(&path).expect_err("no sc_policy");
        assert!(err.to_string().contains("missing column `sc_policy` (columns: workload,policy)"), "{err}");
        std::fs::remove_file(path).ok();
    }

    #[test]
    fn authors_curves_are_averaged_per_workload_and_policy() {
        let path =
            write("curves.csv", "workload,sc_policy,130\nw,01-FGD,90\nw,02-FGD,92\nw,03-Other,1\nw,04-BestFit,x\n");
        let means = read_authors(&path).expect("reads");
        assert_eq!(means.len(), 1);
        assert!((means[&("w".to_string(), "fgd".to_string())] - 91.0).abs() < 1e-9);
        std::fs::remove_file(path).ok();
    }
}
