//! Issue 37 §5 with real processes: PostgreSQL restarts under running controllers. Nothing
//! supervises them: the leader steps down when its connection ends and rejoins as a standby
//! on the same address, a standby keeps waiting through the outage, and one of them leads a
//! new term. Jobs that were running are re-adopted, not run again; jobs submitted after run.

use super::*;
use std::time::{Duration, Instant};

/// Wait until `check` holds, or fail with `what` after `within`.
fn wait_for(within: Duration, what: &str, mut check: impl FnMut() -> bool) -> Duration {
    let started = Instant::now();
    while !check() {
        assert!(started.elapsed() < within, "{what} (waited {within:?})");
        std::thread::sleep(Duration::from_millis(100));
    }
    started.elapsed()
}

#[test]
fn controllers_ride_out_a_postgres_restart_without_a_supervisor() {
    let mut pg = gantry_store::test_postgres::TestPostgres::start("pg-restart").expect("a private PostgreSQL");
    let store = pg.create_database("gantry").expect("a database");
    let dir = temp_dir("pg-restart");
    let path = |p: &std::path::Path| p.to_str().expect("utf-8").to_string();
    let fleet = write_fixture(
        &dir,
        "fleet.toml",
        "[[node]]\nname = \"n1\"\ncpu = 32\nmemory = \"256GiB\"\n[node.gpus]\nmodel = \"A100-SXM4-80GB\"\ncount = 2\n",
    );
    let ran = dir.join("ran.log");
    let workload = write_fixture(
        &dir,
        "jobs.toml",
        &format!(
            "[[job]]\nname = \"w\"\ncount = 4\ngpu = {{ count = 1 }}\ncommand = \"echo $GANTRY_JOB_ID >> {}; sleep 3\"\n",
            ran.display()
        ),
    );
    let free = || std::net::TcpListener::bind("127.0.0.1:0").expect("port").local_addr().expect("addr").port();
    let (port_a, port_b) = (free(), free());
    let (url_a, url_b) = (format!("http://127.0.0.1:{port_a}"), format!("http://127.0.0.1:{port_b}"));
    let both = format!("{url_a},{url_b}");
    let serve = |name: &str, port: u16, standby: bool| {
        let (data, fleet) = (path(&dir.join(name)), fleet.clone());
        let listen = format!("127.0.0.1:{port}");
        let mut args = vec!["serve", "--fleet", &fleet, "--data", &data, "--listen", &listen, "--store", &store];
        args.extend(["--insecure-http", "--node-lost-after", "600"]);
        if standby {
            args.push("--standby");
        }
        spawn_until(&args, if standby { "standby: waiting to lead" } else { "gantry controller on" })
    };
    // One controller alone, as a small site runs it.
    let (mut a, a_said) = serve("a", port_a, false);
    let admin = std::fs::read_to_string(dir.join("a").join("admin.token")).expect("admin token").trim().to_string();
    let out =
        gantry(&["token", "create", "rack", "--role", "agent", "--node", "n1", "--server", &url_a, "--token", &admin]);
    std::fs::write(dir.join("n1.token"), stdout(&out).lines().next().expect("secret").trim()).expect("token file");
    let token_file = path(&dir.join("n1.token"));
    let agent_data = path(&dir.join("agent"));
    let agent_args = [
        "agent",
        "--server",
        &both,
        "--token-file",
        &token_file,
        "--inventory",
        &fleet,
        "--node",
        "n1",
        "--data",
        &agent_data,
    ];
    let _agent = spawn(&agent_args).0;
    let count = |state: &str| -> usize {
        let out = gantry(&["queue", "--state", state, "--json", "--server", &both, "--token", &admin]);
        serde_json::from_str::<serde_json::Value>(&stdout(&out)).map_or(0, |v| v.as_array().map_or(0, Vec::len))
    };
    let submit = || {
        let out = gantry(&["submit", &workload, "--server", &both, "--token", &admin]);
        assert!(stdout(&out).contains("submitted 4 job(s)"), "{}", stderr(&out));
    };
    submit();
    wait_for(Duration::from_secs(30), "nothing ran", || count("running") == 2);

    // PostgreSQL restarts under the lone leader, its jobs running.
    pg.restart().expect("PostgreSQL comes back");
    let restarted = Instant::now();
    let mut said = Vec::new();
    let took = wait_for(Duration::from_secs(30), "the lone controller did not lead again", || {
        assert!(a.0.try_wait().expect("waits").is_none(), "the controller exited when PostgreSQL restarted");
        said.extend(a_said.try_iter());
        said.iter().any(|l| l.contains("(leading, term 2) again"))
    });
    eprintln!("the lone controller led again {took:?} after PostgreSQL restarted");
    assert!(said.iter().any(|l| l.contains("stepping down")), "it said why it stepped down: {said:?}");
    assert!(gantry(&["queue", "--server", &url_a, "--token", &admin]).status.success(), "it answers as the leader");

    // A standby joins; PostgreSQL restarts again, with both waiting on it.
    let (mut b, b_said) = serve("b", port_b, true);
    submit();
    wait_for(Duration::from_secs(30), "nothing of the second batch ran", || count("running") >= 1);
    pg.restart().expect("PostgreSQL comes back again");
    let mut said = Vec::new();
    let took = wait_for(Duration::from_secs(30), "no controller led after the second restart", || {
        assert!(a.0.try_wait().expect("waits").is_none(), "controller a exited when PostgreSQL restarted");
        assert!(b.0.try_wait().expect("waits").is_none(), "the standby exited when PostgreSQL restarted");
        said.extend(a_said.try_iter().chain(b_said.try_iter()));
        said.iter().any(|l| l.contains("term 3)"))
    });
    assert!(gantry(&["queue", "--server", &both, "--token", &admin]).status.success(), "the new leader answers");
    eprintln!("a controller led {took:?} after the second restart ({:?} since the first)", restarted.elapsed());
    // Exactly one leads; the other waits as a standby.
    let leading = [&url_a, &url_b]
        .iter()
        .filter(|url| gantry(&["queue", "--server", url, "--token", &admin]).status.success())
        .count();
    assert_eq!(leading, 1, "one controller leads, the other is a standby");

    wait_for(Duration::from_secs(90), "not every job completed", || count("completed") == 8);
    let text = std::fs::read_to_string(&ran).expect("the tasks' own record");
    let mut ids: Vec<u64> = text.lines().map(|l| l.trim().parse().expect("a job id")).collect();
    ids.sort_unstable();
    assert_eq!(ids, (1..=8).collect::<Vec<u64>>(), "every job ran exactly once across both restarts");
}
