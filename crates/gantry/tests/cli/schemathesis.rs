//! The OpenAPI document as openapi-spec-validator reads it, and the REST API as the document
//! describes it, checked by schemathesis (PyPI, pinned;
//! `tools/install-test-deps.sh` puts it in a virtual environment of its own) against a live
//! controller: every operation, every check — status codes and content types documented,
//! responses matching their schemas, schema-violating requests refused, no server errors, and
//! its stateful phase (tokens made and revoked, jobs submitted and cancelled). The few
//! operations whose rules a schema cannot state are listed with why in
//! tools/schemathesis/schemathesis.toml.

use std::process::Command;

#[test]
fn schemathesis_finds_nothing_against_a_live_controller() {
    let tools = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tools/schemathesis");
    let venv = Command::new("bash").arg(format!("{tools}/install.sh")).arg("--path").output().expect("install.sh runs");
    let bin = format!("{}/bin/schemathesis", String::from_utf8_lossy(&venv.stdout).trim());
    assert!(
        Command::new(&bin).arg("--version").output().is_ok_and(|o| o.status.success()),
        "schemathesis is not installed at {bin}: run tools/install-test-deps.sh"
    );
    // The document itself, by the OpenAPI project's own validator.
    let document = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/openapi.json");
    let validator = bin.replace("/bin/schemathesis", "/bin/openapi-spec-validator");
    let checked = Command::new(&validator).arg(document).output().expect("openapi-spec-validator runs");
    assert!(
        checked.status.success(),
        "{}{}",
        String::from_utf8_lossy(&checked.stdout),
        String::from_utf8_lossy(&checked.stderr)
    );
    let data = std::env::temp_dir().join(format!("gantry-schemathesis-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&data);
    let (_serve, url) = super::serve(&data);
    let token = std::fs::read_to_string(data.join("admin.token")).expect("admin token").trim().to_string();
    let out = Command::new(&bin)
        .args(["--no-color", "--config-file", &format!("{tools}/schemathesis.toml"), "run"])
        .arg(format!("{url}/openapi.json"))
        .args(["--url", &url, "--header", &format!("Authorization: Bearer {token}")])
        // A fixed seed and budget: the same cases every run, about a minute on CI's two cores.
        .args(["--seed", "20261126", "--max-time", "60", "--workers", "2"])
        .output()
        .expect("schemathesis runs");
    let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "schemathesis found failures:\n{said}");
    assert!(said.contains(" generated, ") && said.contains(" passed"), "cases ran: {said}");
    let _ = std::fs::remove_dir_all(&data);
}
