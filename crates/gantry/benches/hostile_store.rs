//! How much a hostile node grows the controller's store (issue 36 §2): a real controller
//! (`gantry serve`, this build, HTTPS on loopback, two nodes) and, for each node, a client
//! holding its agent token that heartbeats as fast as one connection can for a set time —
//! every heartbeat different (junk reports about tasks nobody runs, reports of the other
//! node's tasks, utilization and usage figures that change every time) and as large as the
//! bounds allow. A legitimate job runs on each node meanwhile, so its reports are real too.
//!
//! Reported: heartbeats sent, answered 200 and 429; the store's size (`gantry.db` and its
//! WAL) before and after, and the command log's entries by kind.
//!
//!     cargo bench -p gantry --bench hostile_store -- [--seconds 600] [--reports 2000]

use std::path::Path;
use std::time::{Duration, Instant};

fn main() {
    let (mut seconds, mut reports) = (600u64, 2_000usize);
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let mut value = || args.next().unwrap_or_else(|| panic!("{flag} needs a value"));
        match flag.as_str() {
            "--seconds" => seconds = value().parse().expect("--seconds S"),
            "--reports" => reports = value().parse().expect("--reports N"),
            "--bench" => {}
            other => panic!("unknown flag {other:?} (--seconds S --reports N)"),
        }
    }
    let dir = std::env::temp_dir().join(format!("gantry-hostile-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("a scratch directory");
    let fleet = dir.join("fleet.toml");
    std::fs::write(
        &fleet,
        "[[node]]\nname = \"n\"\ncount = 2\ncpu = 64\nmemory = \"512GiB\"\n[node.gpus]\nmodel = \"H100-SXM5-80GB\"\ncount = 8\n",
    )
    .expect("fleet");
    let data = dir.join("controller");
    let port = std::net::TcpListener::bind("127.0.0.1:0").expect("a port").local_addr().expect("addr").port();
    let log = std::fs::File::create(dir.join("controller.log")).expect("log");
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_gantry"))
        .args(["serve", "--fleet"])
        .arg(&fleet)
        .arg("--data")
        .arg(&data)
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .env("RUST_LOG", "warn")
        .stdout(log.try_clone().expect("log"))
        .stderr(log)
        .spawn()
        .expect("gantry serve starts");
    let started = Instant::now();
    while !data.join("admin.token").exists() || !data.join(gantry_server::tls::CA_CERT).exists() {
        assert!(started.elapsed() < Duration::from_secs(60), "the controller did not start");
        std::thread::sleep(Duration::from_millis(50));
    }
    let admin = std::fs::read_to_string(data.join("admin.token")).expect("admin.token").trim().to_string();
    let tls = gantry_wire::client::Tls { ca: Some(data.join(gantry_server::tls::CA_CERT)), ..Default::default() };
    let client = gantry_wire::client::Client::new(&format!("https://127.0.0.1:{port}"), &tls).expect("a client");
    let call = |token: &str, method: &str, path: &str, body: Option<&str>| loop {
        match client.request(Some(token), method, path, body) {
            Ok(answer) => break answer,
            Err(_) if started.elapsed() < Duration::from_secs(60) => std::thread::sleep(Duration::from_millis(100)),
            Err(e) => panic!("{e}"),
        }
    };
    let size = |when: &str| {
        let bytes = |name: &str| std::fs::metadata(data.join(name)).map_or(0, |m| m.len());
        let (db, wal) = (bytes("gantry.db"), bytes("gantry.db-wal"));
        println!("{when}: gantry.db {db} bytes, WAL {wal} bytes, together {:.2} MiB", (db + wal) as f64 / 1048576.0);
        db + wal
    };
    // Both nodes register, each with its own token; one legitimate job runs on each.
    let mut agents = Vec::new();
    for node in ["n-0", "n-1"] {
        let body = format!(r#"{{"name": "agent-{node}", "role": "agent", "node": "{node}"}}"#);
        let (status, made) = call(&admin, "POST", "/v1/tokens", Some(&body));
        assert_eq!(status, 201, "{made}");
        let token = serde_json::from_str::<serde_json::Value>(&made).expect("json")["secret"]
            .as_str()
            .expect("secret")
            .to_string();
        let gpus: Vec<String> = (0..8)
            .map(|i| format!(r#"{{"index": {i}, "uuid": "GPU-{node}-{i}", "model": "H100-SXM5-80GB"}}"#))
            .collect();
        let reg = format!(
            r#"{{"node": "{node}", "gpus": [{}], "protocol": {}, "instance": "i-{node}"}}"#,
            gpus.join(","),
            gantry_wire::PROTOCOL_VERSION
        );
        let (status, reply) = call(&token, "POST", "/v1/agents/register", Some(&reg));
        assert_eq!(status, 200, "{reply}");
        agents.push((node, token));
    }
    let (status, reply) =
        call(&admin, "POST", "/v1/jobs", Some("[[job]]\nname = \"real\"\ncount = 2\ngpu = { count = 8 }\n"));
    assert_eq!(status, 201, "{reply}");
    // Each node learns its launch, then floods.
    let mut own: Vec<Vec<String>> = vec![Vec::new(), Vec::new()];
    for (i, (node, token)) in agents.iter().enumerate() {
        for _ in 0..50 {
            let body = format!(r#"{{"tasks": [], "wait_ms": 500, "instance": "i-{node}"}}"#);
            let (_, orders) = call(token, "POST", &format!("/v1/agents/{node}/heartbeat"), Some(&body));
            let orders: serde_json::Value = serde_json::from_str(&orders).unwrap_or_default();
            if let Some(launch) = orders["launch"].as_array().filter(|l| !l.is_empty()) {
                own[i] = launch
                    .iter()
                    .map(|l| {
                        format!(
                            r#"{{"job": {}, "group": "{}", "replica": {}, "attempt": {}, "state": "running"}}"#,
                            l["job"],
                            l["group"].as_str().unwrap_or("main"),
                            l["replica"],
                            l["attempt"]
                        )
                    })
                    .collect();
                break;
            }
        }
    }
    let before = size("before the flood");
    let (mut sent, mut ok, mut paced, mut other) = (0u64, 0u64, 0u64, 0u64);
    let flood_started = Instant::now();
    let mut round = 0u64;
    while flood_started.elapsed() < Duration::from_secs(seconds) {
        round += 1;
        for (i, (node, token)) in agents.iter().enumerate() {
            // Its own task, junk about tasks nobody runs, and the other node's task as lost.
            let mut tasks = own[i].clone();
            tasks.extend(own[1 - i].iter().map(|t| t.replace("\"running\"", "\"lost\"")));
            tasks.extend((0..reports as u64).map(|j| {
                format!(
                    r#"{{"job": {}, "group": "main", "replica": 0, "attempt": 0, "state": "exited", "code": 1, "timed_out": false}}"#,
                    1_000_000 + round * 10_000 + j
                )
            }));
            let samples: Vec<String> = (0..8)
                .map(|g| {
                    format!(
                        r#"{{"index": {g}, "utilization_pct": {}, "memory_used_mib": {}, "measured": true}}"#,
                        (round * 7 + g) % 101,
                        round % 80_000
                    )
                })
                .collect();
            let usage = format!(r#"{{"job": 1, "attempt": 0, "used": {{"cpu_ms": {round}}}}}"#);
            let body = format!(
                r#"{{"tasks": [{}], "samples": [{}], "usage": [{usage}], "wait_ms": 0, "instance": "i-{node}"}}"#,
                tasks.join(","),
                samples.join(",")
            );
            sent += 1;
            match client.request(Some(token), "POST", &format!("/v1/agents/{node}/heartbeat"), Some(&body)) {
                Ok((200, _)) => ok += 1,
                Ok((429, _)) => paced += 1,
                _ => other += 1,
            }
        }
    }
    let took = flood_started.elapsed().as_secs_f64();
    println!(
        "flood: {took:.0} s, {sent} heartbeats sent ({:.0}/s), {ok} applied, {paced} answered 429, {other} other",
        sent as f64 / took
    );
    let (_, metrics) = call(&admin, "GET", "/metrics", None);
    for line in metrics.lines().filter(|l| l.starts_with("gantry_heartbeats_total")) {
        println!("{line}");
    }
    std::thread::sleep(Duration::from_secs(2));
    let after = size("after the flood");
    println!("grew by {:.2} MiB in {took:.0} s", (after.saturating_sub(before)) as f64 / 1048576.0);
    let _ = child.kill();
    let _ = child.wait();
    count_entries(&data.join("gantry.db"));
    let _ = std::fs::remove_dir_all(&dir);
}

/// The command log's entries by kind, and their bytes.
fn count_entries(db: &Path) {
    let conn = rusqlite::Connection::open(db).expect("opens");
    let mut stmt = conn
        .prepare("SELECT json_extract(body, '$.command'), COUNT(*), SUM(LENGTH(body)) FROM commands GROUP BY 1 ORDER BY 2 DESC")
        .expect("query");
    let rows =
        stmt.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?, r.get::<_, i64>(2)?))).expect("rows");
    println!("command log by kind (entries, bytes):");
    for row in rows.flatten() {
        println!("  {:<14} {:>8} {:>12}", row.0, row.1, row.2);
    }
}
