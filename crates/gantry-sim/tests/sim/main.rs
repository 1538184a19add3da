//! The simulator's tests: one binary, modules by theme.

mod backfill;
mod bad_input;
mod controls;
mod diurnal_weeks;
mod fairness;
mod guarantees;
mod mig_day;
mod native;
mod preemption;
mod protocol;
mod reference;
mod replay;
mod stability;
mod stability_trees;

use std::path::PathBuf;

/// Write `text` to a fresh file under the test temp dir and return its path.
pub fn fixture(name: &str, text: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("sim-fixtures");
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join(name);
    std::fs::write(&path, text).expect("write fixture");
    path
}

/// One node with two whole A100-80GB GPUs: the smallest fleet where jobs wait for each other.
pub const TWO_A100: &str =
    "[[node]]\nname = \"n\"\ncpu = 64\nmemory = \"512GiB\"\n[node.gpus]\nmodel = \"A100-SXM4-80GB\"\ncount = 2\n";

pub const NODES: &str = "sn,cpu_milli,memory_mib,gpu,model
node-a,96000,393216,8,G2
node-b,104000,524288,2,T4
node-c,64000,262144,2,P100
node-d,32000,131072,0,
";

pub const PODS: &str =
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time
pod-0,8000,30517,1,500,,LS,Running,0,100,0
pod-1,4000,16384,1,250,,BE,Running,10,200,10
pod-2,16000,65536,1,1000,,LS,Running,20,300,20
pod-3,12000,32768,0,0,,Burstable,Running,30,400,30
pod-4,32000,131072,4,1000,,LS,Running,40,500,40
pod-5,6000,8192,1,460,T4,LS,Running,50,600,50
pod-6,3000,4096,1,810,P100|T4,BE,Running,60,700,60
";
