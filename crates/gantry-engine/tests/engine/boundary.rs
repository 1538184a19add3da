//! DESIGN rule 1 as a check: the engine decides and never does, so its dependency tree holds
//! no async runtime, database, HTTP stack or NVML binding. Runs `cargo tree` on the real
//! lockfile; a dependency added by mistake fails the suite here, not in review.

use std::process::Command;

/// Crate names (or prefixes) the engine must never depend on, normal or build dependencies.
const FORBIDDEN: &[&str] = &[
    "tokio",
    "async-std",
    "smol",
    "futures",
    "mio", // async runtimes
    "rusqlite",
    "sqlx",
    "postgres",
    "tokio-postgres",
    "redb",
    "sled",
    "diesel", // databases
    "hyper",
    "axum",
    "reqwest",
    "tonic",
    "http",
    "tower",
    "ureq", // HTTP and RPC
    "nvml-wrapper",
    "nvml-wrapper-sys",
    "libloading", // NVML
];

#[test]
fn the_engine_pulls_no_runtime_database_http_or_nvml_dependency() {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args(["tree", "-p", "gantry-engine", "-e", "normal,build", "--prefix", "none", "--format", "{p}"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo tree runs");
    assert!(out.status.success(), "cargo tree failed: {}", String::from_utf8_lossy(&out.stderr));
    let tree = String::from_utf8_lossy(&out.stdout);
    let names: Vec<&str> = tree.lines().filter_map(|l| l.split_whitespace().next()).collect();
    assert!(names.contains(&"gantry-engine"), "unexpected cargo tree output:\n{tree}");
    let offending: Vec<&str> = names.iter().copied().filter(|n| FORBIDDEN.contains(n)).collect();
    assert!(offending.is_empty(), "gantry-engine must stay pure, but depends on {offending:?}:\n{tree}");
}
