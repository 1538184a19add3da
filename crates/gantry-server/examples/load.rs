//! The live-service benchmark (issue 5 §7, issue 18 §8): sustained submissions per second over
//! HTTP with 10,000 jobs queued, and submit → running latency for jobs that can start, on a
//! simulated 1,000-GPU fleet (tasks simulated: no processes) — once with one commit per
//! command and once with group commit, in the same run.
//!
//! Fleet: 124 nodes × 8 H100 and one node × 8 A100. The A100 node is filled first, then 942
//! H100s; the 10,000 queued jobs each ask for 8 A100s (they wait behind the first); each probe
//! asks for one of the 50 free H100s in its own queue, so it is at the head of its queue and
//! measures how fast a cycle decides with the big queue behind.
//!
//! Each client thread submits over one kept-alive connection.
//!
//!     cargo run --release -p gantry-server --example load [-- QUEUED CLIENTS PROBES]

use gantry_server::{ServeConfig, start};
use gantry_wire::client::request;
use std::time::{Duration, Instant};

const FLEET: &str = "[[node]]\nname = \"h100\"\ncount = 124\ncpu = 192\nmemory = \"2TiB\"\n[node.gpus]\nmodel = \"H100-SXM5-80GB\"\ncount = 8\n\
[[node]]\nname = \"a100\"\ncpu = 192\nmemory = \"2TiB\"\n[node.gpus]\nmodel = \"A100-SXM4-80GB\"\ncount = 8\n";

/// One client's connection, kept open between requests (HTTP/1.1 keep-alive), as a load
/// generator or an SDK would: the CLI's client opens one per request.
struct KeepAlive {
    stream: std::io::BufReader<std::net::TcpStream>,
    host: String,
    token: String,
}

impl KeepAlive {
    fn open(url: &str, token: &str) -> KeepAlive {
        let host = url.trim_start_matches("http://").to_string();
        let stream = std::net::TcpStream::connect(&host).expect("connects");
        stream.set_nodelay(true).expect("nodelay");
        KeepAlive { stream: std::io::BufReader::new(stream), host, token: token.to_string() }
    }

    /// POST `body` to `path`; the status code.
    fn post(&mut self, path: &str, body: &str) -> u16 {
        use std::io::{BufRead, Read, Write};
        let head = format!(
            "POST {path} HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n\r\n",
            self.host,
            self.token,
            body.len()
        );
        let conn = self.stream.get_mut();
        conn.write_all(head.as_bytes()).and_then(|_| conn.write_all(body.as_bytes())).expect("sends");
        let mut status = 0;
        let mut length = 0usize;
        let mut line = String::new();
        loop {
            line.clear();
            self.stream.read_line(&mut line).expect("reads");
            let l = line.trim_end();
            if l.is_empty() {
                break;
            }
            if l.starts_with("HTTP/1.1 ") {
                status = l[9..12].parse().expect("status");
            } else if let Some(v) = l.to_ascii_lowercase().strip_prefix("content-length:") {
                length = v.trim().parse().expect("length");
            }
        }
        let mut payload = vec![0; length];
        self.stream.read_exact(&mut payload).expect("reads the body");
        status
    }
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn main() {
    let args: Vec<usize> = std::env::args().skip(1).map(|a| a.parse().expect("numbers")).collect();
    let queued = args.first().copied().unwrap_or(10_000);
    let clients = args.get(1).copied().unwrap_or(8);
    let probes = args.get(2).copied().unwrap_or(50);
    for group_commit in [false, true] {
        println!("== {}", if group_commit { "group commit" } else { "one commit per command" });
        run(queued, clients, probes, group_commit);
    }
}

fn run(queued: usize, clients: usize, probes: usize, group_commit: bool) {
    let catalog = gantry_catalog::Catalog::embedded();
    let fleet = gantry_spec::parse_fleet(FLEET, catalog).expect("fleet");
    let data = std::env::temp_dir().join(format!("gantry-load-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&data);
    let tree = gantry_types::QueueTree::flat(["fill", "bulk", "probe"], 86_400, 30 * 86_400);
    let scheduling = gantry_engine::sched::SchedulerConfig {
        order: gantry_engine::sched::Order::FairShare(tree),
        ..Default::default()
    };
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime");
    let config = ServeConfig {
        reconfigure: Default::default(),
        confinement: Default::default(),
        log: Default::default(),
        advertise: None,
        data_dir: data.clone(),
        listen: "127.0.0.1:0".parse().expect("addr"),
        fleet,
        tick: Duration::from_secs(1),
        scheduling,
        simulate_tasks: Some(Duration::from_secs(24 * 3600)),
        agents: gantry_server::control::Agents::Local,
        measure_local_gpus: false,
        billing: Default::default(),
        idle: Default::default(),
        // The benchmark keeps tens of thousands of jobs waiting on purpose.
        admission: gantry_server::admission::AdmissionLimits {
            pending_per_user: 1_000_000,
            pending_per_queue: 1_000_000,
            ..Default::default()
        },
        group_commit,
        tls: None,
        insecure_http: false,
        store: Default::default(),
        accounts: gantry_server::users::Accounts::for_this_process(Default::default()).expect("accounts"),
    };
    let running = rt.block_on(start(config)).expect("starts");
    let url = format!("http://{}", running.addr);
    let token = std::fs::read_to_string(data.join("admin.token")).expect("token").trim().to_string();
    let call = |method: &str, path: &str, body: Option<&str>| {
        let (status, text) = request(&url, Some(&token), method, path, body).expect("reaches");
        assert!(status < 300, "{method} {path}: {status} {text}");
        text
    };
    let running_count = || {
        let text = call("GET", "/v1/jobs?state=running", None);
        serde_json::from_str::<serde_json::Value>(&text).expect("json").as_array().map_or(0, Vec::len)
    };
    // Fill: the A100 node, then 942 H100s.
    call(
        "POST",
        "/v1/jobs",
        Some("[[job]]\nname = \"a100-fill\"\nqueue = \"fill\"\ngpu = { count = 8 }\nmodel = \"A100*\"\n"),
    );
    call(
        "POST",
        "/v1/jobs",
        Some("[[job]]\nname = \"fill\"\nqueue = \"fill\"\ncount = 942\ngpu = { count = 1 }\nmodel = \"H100*\"\n"),
    );
    while running_count() < 943 {
        std::thread::sleep(Duration::from_millis(50));
    }
    // Running once started; launched once each node's agent has claimed its tasks (on disk,
    // synced) and reported them with a sample: wait for that too, so the fill does not overlap
    // the measurement.
    let sampled_busy = || {
        let nodes: serde_json::Value = serde_json::from_str(&call("GET", "/v1/nodes", None)).expect("json");
        nodes
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|n| n["gpus"].as_array().into_iter().flatten())
            .filter(|g| g["utilization_pct"].as_u64().unwrap_or(0) > 0)
            .count()
    };
    let waited = Instant::now();
    while sampled_busy() < 950 && waited.elapsed() < Duration::from_secs(120) {
        std::thread::sleep(Duration::from_millis(200));
    }
    eprintln!("fleet filled: 950 of 1,000 GPUs busy");
    // Queue: `queued` single-job submissions from `clients` threads.
    let started = Instant::now();
    std::thread::scope(|scope| {
        for c in 0..clients {
            let (url, token) = (&url, &token);
            scope.spawn(move || {
                let mut client = KeepAlive::open(url, token);
                for i in (c..queued).step_by(clients) {
                    let body = format!(
                        "[[job]]\nname = \"bulk-{i}\"\nqueue = \"bulk\"\ngpu = {{ count = 8 }}\nmodel = \"A100*\"\n"
                    );
                    assert_eq!(client.post("/v1/jobs", &body), 201, "submission {i}");
                }
            });
        }
    });
    let secs = started.elapsed().as_secs_f64();
    println!("submissions: {queued} in {secs:.2} s with {clients} clients = {:.0}/s", queued as f64 / secs);
    // Probes: submit → running, one at a time, polled every millisecond.
    let mut latencies = Vec::new();
    for p in 0..probes {
        let t0 = Instant::now();
        let body =
            format!("[[job]]\nname = \"probe-{p}\"\nqueue = \"probe\"\ngpu = {{ count = 1 }}\nmodel = \"H100*\"\n");
        let reply: serde_json::Value = serde_json::from_str(&call("POST", "/v1/jobs", Some(&body))).expect("json");
        let id = reply["ids"][0].as_u64().expect("id");
        loop {
            let job: serde_json::Value =
                serde_json::from_str(&call("GET", &format!("/v1/jobs/{id}"), None)).expect("json");
            if job["state"] == "running" {
                break;
            }
            assert!(t0.elapsed() < Duration::from_secs(30), "probe {p} never started: {}", job["pending"]);
            std::thread::sleep(Duration::from_millis(1));
        }
        latencies.push(t0.elapsed().as_secs_f64() * 1000.0);
    }
    latencies.sort_by(f64::total_cmp);
    println!(
        "submit → running with {queued} queued: p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms ({probes} probes)",
        percentile(&latencies, 0.5),
        percentile(&latencies, 0.99),
        latencies[latencies.len() - 1]
    );
    let metrics = call("GET", "/metrics", None);
    let read = |name: &str| -> f64 {
        metrics
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0.0)
    };
    let (sum, count) = (read("gantry_scheduling_cycle_seconds_sum"), read("gantry_scheduling_cycle_seconds_count"));
    println!("cycles: {count} taking {:.2} ms on average", 1000.0 * sum / count.max(1.0));
    let (commits, batches) = running.commit_stats();
    println!(
        "commits: {commits} transactions for {batches} commands ({:.1} per commit)",
        batches as f64 / commits.max(1) as f64
    );
    rt.block_on(running.shutdown());
    let _ = std::fs::remove_dir_all(&data);
}
