//! Checkpoints and log retention through the real binary, on SQLite and on PostgreSQL: after
//! `gantry checkpoint` with `[log] keep = "0s"`, the log before the checkpoint is gone and
//! `gantry replay` replays what is kept, from the checkpoint, every decision identical. A bad
//! `[log]` table stops `serve` with a clear error.

use super::*;

/// Poll until `count` jobs are completed (or fail the test after 30 s).
fn wait_completed(url: &str, admin: &str, count: usize) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let out = gantry(&["queue", "--state", "completed", "--json", "--server", url, "--token", admin]);
        let done =
            serde_json::from_str::<serde_json::Value>(&stdout(&out)).map_or(0, |v| v.as_array().map_or(0, Vec::len));
        if done >= count {
            return;
        }
        assert!(std::time::Instant::now() < deadline, "{done} of {count} jobs completed: {}", stderr(&out));
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

/// Run two jobs around a checkpoint on a controller with `store` (`None`: SQLite), keeping
/// nothing before the checkpoint; returns the data directory.
fn run_around_a_checkpoint(name: &str, store: Option<&str>) -> PathBuf {
    run_around_a_checkpoint_keeping(name, store, "0s")
}

fn run_around_a_checkpoint_keeping(name: &str, store: Option<&str>, keep: &str) -> PathBuf {
    let dir = temp_dir(name);
    let config = write_fixture(&dir, "gantry.toml", &format!("[log]\ncheckpoint_every = \"1h\"\nkeep = \"{keep}\"\n"));
    let workload = write_fixture(&dir, "job.toml", "[[job]]\nname = \"quick\"\ncommand = \"true\"\n");
    let data = dir.join("data");
    let data_arg = data.to_str().expect("utf-8").to_string();
    let mut args = vec!["serve", "--local", "--listen", "127.0.0.1:0", "--data", &data_arg, "--config", &config];
    if let Some(url) = store {
        args.extend(["--store", url]);
    }
    let (server, url) = spawn(&args);
    let admin = std::fs::read_to_string(data.join("admin.token")).expect("admin token").trim().to_string();
    let submit = || {
        let out = gantry(&["submit", &workload, "--server", &url, "--token", &admin]);
        assert!(out.status.success(), "{}", stderr(&out));
    };
    submit();
    wait_completed(&url, &admin, 1);
    let out = gantry(&["checkpoint", "--server", &url, "--token", &admin]);
    assert!(stdout(&out).contains("checkpoint taken"), "{}{}", stdout(&out), stderr(&out));
    submit();
    wait_completed(&url, &admin, 2);
    drop(server);
    data
}

fn assert_replays_from_the_checkpoint(args: &[&str]) {
    let out = gantry(&[&["replay"], args].concat());
    let text = stdout(&out);
    assert!(out.status.success() && text.contains("every decision replays identically"), "{text}{}", stderr(&out));
    assert!(text.contains("the kept log begins at entry"), "{text}");
}

#[test]
fn a_checkpoint_lets_retention_delete_the_log_and_replay_still_holds_on_sqlite() {
    let data = run_around_a_checkpoint("retention-sqlite", None);
    assert_replays_from_the_checkpoint(&["--data", data.to_str().expect("utf-8")]);
    // A bad [log] table: refused at start, naming it.
    let dir = temp_dir("retention-bad");
    for (text, expected) in [
        ("[log]\nkeep = \"soon\"\n", "log.keep"),
        ("[log]\ncheckpoint_every = \"30d\"\n", "a week"),
        ("[log]\ncheckpoint_every = \"off\"\n", "needs checkpoints"),
        ("[log]\nkeep_days = 7\n", "unknown field"),
    ] {
        let config = write_fixture(&dir, "gantry.toml", text);
        let out = gantry(&["serve", "--local", "--listen", "127.0.0.1:0", "--config", &config]);
        assert_eq!(out.status.code(), Some(2), "{text}");
        assert!(stderr(&out).contains(expected), "{text}: {}", stderr(&out));
    }
}

#[test]
fn a_checkpoint_lets_retention_delete_the_log_and_replay_still_holds_on_postgres() {
    let pg = gantry_store::test_postgres::TestPostgres::start("retention").expect("a private PostgreSQL");
    let store = pg.create_database("gantry").expect("a database");
    run_around_a_checkpoint("retention-pg", Some(&store));
    assert_replays_from_the_checkpoint(&["--store", &store]);
    let out = gantry(&["replay", "--store", "mysql://x"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("a postgres:// URL"), "{}", stderr(&out));
}

/// A retention deletes a chunk per commit: a log can begin with what is left of the history
/// before the checkpoint it keeps. The replay skips that and starts at the checkpoint.
#[test]
fn a_replay_starts_at_the_kept_checkpoint_while_a_deletion_is_under_way() {
    let data = run_around_a_checkpoint_keeping("retention-partial", None, "all");
    let conn = rusqlite::Connection::open(data.join("gantry.db")).expect("opens");
    let checkpoint: i64 = conn.query_row("SELECT MAX(seq) FROM opens", [], |r| r.get(0)).expect("an open");
    assert!(checkpoint > 4, "the checkpoint comes after the first job's entries");
    // As a deletion under way leaves it: the oldest entries gone, two left before the checkpoint.
    conn.execute("DELETE FROM commands WHERE seq < ?1", [checkpoint - 2]).expect("deletes");
    let out = gantry(&["replay", "--data", data.to_str().expect("utf-8"), "--json"]);
    let report: serde_json::Value = serde_json::from_str(&stdout(&out)).expect("json");
    assert!(out.status.success(), "{report}");
    assert_eq!((report["skipped"].as_u64(), report["from_seq"].as_i64()), (Some(2), Some(checkpoint)), "{report}");
    assert!(report["first_difference"].is_null() && report["identical"] == report["compared"], "{report}");
}
