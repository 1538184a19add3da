//! Bad trace input: a clear error naming file and line in strict mode; skipped and counted, with
//! the reason, in lenient mode. Never a half-read row.

use crate::{NODES, PODS, fixture};
use gantry_sim::alibaba::{self, Mode, Skipped};

const HEADER: &str =
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n";

#[test]
fn malformed_pod_rows_name_file_and_line() {
    let cases: [(&str, &str, &str); 7] = [
        ("not a number", "p,lots,1024,1,500,,LS,Running,0,10,0", "`cpu_milli` is \"lots\""),
        ("negative", "p,1000,-5,1,500,,LS,Running,0,10,0", "`memory_mib` is \"-5\""),
        ("share above 1000", "p,1000,1024,1,1500,,LS,Running,0,10,0", "`gpu_milli` is 1500"),
        ("multi-GPU share", "p,1000,1024,2,500,,LS,Running,0,10,0", "multi-GPU pods take whole GPUs"),
        ("negative time", "p,1000,1024,1,500,,LS,Running,-4,10,0", "times must be non-negative"),
        ("inverted times", "p,1000,1024,1,500,,LS,Running,50,10,0", "before creation_time 50"),
        ("absurd GPUs", "p,1000,1024,100,1000,,LS,Running,0,10,0", "more than any node holds"),
    ];
    for (name, row, needle) in cases {
        let path = fixture(
            &format!("bad-{}.csv", name.replace(' ', "-")),
            &format!("{HEADER}p0,1000,1024,1,500,,LS,Running,0,10,0\n{row}\n"),
        );
        let err = alibaba::read_pods(&path, Mode::Strict, &mut Skipped::default()).expect_err(name).to_string();
        assert!(err.contains(":3: "), "{name}: no line number in {err}");
        assert!(err.contains(needle), "{name}: {err}");
        let mut skipped = Skipped::default();
        let pods = alibaba::read_pods(&path, Mode::Lenient, &mut skipped).expect("lenient keeps the good row");
        assert_eq!((pods.len(), skipped.total), (1, 1), "{name}");
    }
}

#[test]
fn missing_columns_and_empty_traces_are_refused() {
    let path = fixture("no-gpu-column.csv", "name,cpu_milli,memory_mib,gpu_milli\np,1,1,0\n");
    let err = alibaba::read_pods(&path, Mode::Strict, &mut Skipped::default()).expect_err("missing column").to_string();
    assert!(err.contains("missing column `num_gpu`"), "{err}");
    let path = fixture("empty.csv", HEADER);
    let err = alibaba::read_pods(&path, Mode::Lenient, &mut Skipped::default()).expect_err("empty").to_string();
    assert!(err.contains("no rows"), "{err}");
    let err = alibaba::read_pods(std::path::Path::new("/nonexistent/pods.csv"), Mode::Strict, &mut Skipped::default())
        .expect_err("missing file")
        .to_string();
    assert!(err.contains("cannot read /nonexistent/pods.csv"), "{err}");
    let path = fixture("nodes-bad.csv", "sn,cpu_milli,memory_mib,gpu,model\nn,8000,1024,2,\n");
    let err = alibaba::read_nodes(&path, Mode::Strict, &mut Skipped::default())
        .expect_err("GPUs without a model")
        .to_string();
    assert!(err.contains(":2: `model` is empty"), "{err}");
}

#[test]
fn a_pod_larger_than_any_node_is_an_error_or_skipped() {
    let nodes =
        alibaba::read_nodes(&fixture("nodes.csv", NODES), Mode::Strict, &mut Skipped::default()).expect("nodes");
    let huge = format!(
        "{HEADER}ok,1000,1024,1,500,,LS,Running,0,10,0\nhuge,1000,1024,16,1000,,LS,Running,0,10,0\nwrong-model,1000,1024,1,500,A100,LS,Running,0,10,0\n"
    );
    let path = fixture("huge.csv", &huge);
    let pods = alibaba::read_pods(&path, Mode::Strict, &mut Skipped::default()).expect("rows parse");
    let err = alibaba::check_pods_fit(&nodes, pods.clone(), &path, Mode::Strict, &mut Skipped::default())
        .expect_err("huge")
        .to_string();
    assert!(err.contains(":3: pod huge is larger than any node: 16 GPUs (largest node: "), "{err}");
    let wrong_model = alibaba::check_pods_fit(&nodes, pods[2..].to_vec(), &path, Mode::Strict, &mut Skipped::default())
        .expect_err("a model the fleet lacks")
        .to_string();
    assert!(wrong_model.contains(":4: pod wrong-model asks for GPU model A100, which no node"), "{wrong_model}");
    let mut skipped = Skipped::default();
    let kept = alibaba::check_pods_fit(&nodes, pods, &path, Mode::Lenient, &mut skipped).expect("lenient");
    assert_eq!(kept.len(), 1);
    // Counted apart: a model the fleet lacks may be the fleet file's mistake, not the trace's.
    assert_eq!(skipped.by_reason.get(alibaba::SKIPPED_TOO_LARGE), Some(&1));
    assert_eq!(skipped.by_reason.get(alibaba::SKIPPED_NO_MODEL), Some(&1));
}

#[test]
fn the_fixture_itself_reads_cleanly() {
    let mut skipped = Skipped::default();
    let pods = alibaba::read_pods(&fixture("pods.csv", PODS), Mode::Strict, &mut skipped).expect("pods");
    assert_eq!(pods.len(), 7);
    assert_eq!(pods[6].gpu_spec, ["P100", "T4"]);
    assert_eq!(pods[3].gpu_milli, 0);
    assert_eq!(skipped.total, 0);
}
