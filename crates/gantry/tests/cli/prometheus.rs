//! `/metrics` as Prometheus's own tools read it: `promtool check metrics` (Debian's
//! `prometheus` package; `tools/install-test-deps.sh`) lints the classic text format a
//! controller with jobs, queues and quotas serves, and a real Prometheus server scrapes it —
//! asking for OpenMetrics first, as it does — and answers queries over what it stored,
//! including series that are 0.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// A Prometheus server, stopped when dropped.
struct Prometheus(std::process::Child);

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn tool(name: &str) -> String {
    let found = ["/usr/bin", "/usr/local/bin", "/bin"]
        .iter()
        .map(|dir| format!("{dir}/{name}"))
        .find(|path| std::path::Path::new(path).exists());
    found.unwrap_or_else(|| {
        panic!("{name} is not installed: run tools/install-test-deps.sh (Debian's prometheus package)")
    })
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("address").port()
}

#[test]
fn promtool_and_a_real_prometheus_read_the_metrics() {
    let data = std::env::temp_dir().join(format!("gantry-prometheus-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&data);
    std::fs::create_dir_all(&data).expect("data dir");
    let queues = data.join("queues.toml");
    std::fs::write(
        &queues,
        "[[queue]]\nname = \"research\"\nquota = [{ flavor = \"H100-SXM5-80GB\", guaranteed = 8, limit = 12 }]\n\
         [[queue]]\nname = \"prod\"\nquota = [{ flavor = \"H100-SXM5-80GB\", guaranteed = 4 }]\n",
    )
    .expect("queue file");
    let d = data.to_str().expect("utf-8");
    let (_serve, url) = super::serve_with_args(&data, &["--queues", queues.to_str().expect("utf-8")]);
    let token = std::fs::read_to_string(data.join("admin.token")).expect("admin token").trim().to_string();
    // Work in both queues: a whole H100 node each, and a third job research's limit (12)
    // keeps waiting, then held.
    for queue in ["research", "prod", "research"] {
        let out = super::gantry(&[
            "submit", "--server", &url, "--data", d, "--token", &token, "--queue", queue, "--gpus", "h100:8", "--",
            "sleep", "60",
        ]);
        assert!(out.status.success(), "{}", super::stderr(&out));
    }
    let out = super::gantry(&["hold", "--server", &url, "--data", d, "--token", &token, "3"]);
    assert!(out.status.success(), "{}", super::stderr(&out));
    let client = gantry_wire::client::Client::new(&url, &Default::default()).expect("client");
    let (status, text) = client.request(Some(&token), "GET", "/metrics", None).expect("scrape");
    assert_eq!(status, 200, "{text}");
    for wanted in [
        "gantry_queue_quota_guaranteed_gpus{queue=\"research\",flavor=\"H100-SXM5-80GB\"} 8",
        "gantry_queue_quota_limit_gpus{queue=\"prod\",flavor=\"H100-SXM5-80GB\"} +Inf",
        "gantry_pending_jobs{queue=\"research\",reason=\"held\"} 1",
        "gantry_queue_quota_used_gpus{queue=\"research\",flavor=\"H100-SXM5-80GB\"} 8",
    ] {
        assert!(text.contains(wanted), "missing {wanted:?} in\n{text}");
    }
    // promtool's linter: no parse error, no lint problem (exit 3), nothing said.
    let mut lint = Command::new(tool("promtool"))
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool runs");
    std::io::Write::write_all(&mut lint.stdin.take().expect("stdin"), text.as_bytes()).expect("to promtool");
    let lint = lint.wait_with_output().expect("promtool ends");
    let said = format!("{}{}", String::from_utf8_lossy(&lint.stdout), String::from_utf8_lossy(&lint.stderr));
    assert!(lint.status.success() && said.trim().is_empty(), "promtool check metrics: {said}\n{text}");

    // A real Prometheus, scraping every second with the token.
    let token_file = data.join("scrape.token");
    std::fs::write(&token_file, &token).expect("token file");
    let target = url.trim_start_matches("http://");
    let config = data.join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: gantry\n    authorization:\n      \
             credentials_file: {}\n    static_configs:\n      - targets: ['{target}']\n",
            token_file.display()
        ),
    )
    .expect("prometheus.yml");
    let port = free_port();
    let _prometheus = Prometheus(
        Command::new(tool("prometheus"))
            .arg(format!("--config.file={}", config.display()))
            .arg(format!("--storage.tsdb.path={}", data.join("tsdb").display()))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("prometheus starts"),
    );
    let api =
        gantry_wire::client::Client::new(&format!("http://127.0.0.1:{port}"), &Default::default()).expect("client");
    let query = |q: &str| -> serde_json::Value {
        let path = format!("/api/v1/query?query={}", percent_encoded(q));
        match api.request(None, "GET", &path, None) {
            Ok((200, body)) => serde_json::from_str(&body).unwrap_or_default(),
            _ => serde_json::Value::Null,
        }
    };
    let value = |answer: &serde_json::Value| answer["data"]["result"][0]["value"][1].as_str().map(str::to_string);
    let deadline = Instant::now() + Duration::from_secs(60);
    // `up` is 1 only if the scrape parsed: Prometheus asked for OpenMetrics and read it.
    while value(&query("up{job=\"gantry\"}")).as_deref() != Some("1") {
        assert!(Instant::now() < deadline, "Prometheus never scraped gantry: {}", query("up"));
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(value(&query("sum(gantry_jobs{state=\"running\"})")).as_deref(), Some("2"));
    assert_eq!(
        value(&query("sum(gantry_pending_jobs{reason=\"quota\"})")).as_deref(),
        Some("0"),
        "zero series are there"
    );
    assert_eq!(value(&query("gantry_queue_quota_guaranteed_gpus{queue=\"prod\"}")).as_deref(), Some("4"));
    let scraped = query("sum by (code) (gantry_http_requests_total{route=\"/metrics\"})");
    assert!(value(&scraped).is_some(), "the scrapes count themselves: {scraped}");
    // Every query of the Grafana dashboard in examples/ is PromQL this Prometheus takes, and
    // every series it names is one the controller serves.
    let dashboard: serde_json::Value =
        serde_json::from_str(include_str!("../../../../examples/grafana-dashboard.json")).expect("dashboard JSON");
    let exprs: Vec<&str> = dashboard["panels"]
        .as_array()
        .expect("panels")
        .iter()
        .flat_map(|p| p["targets"].as_array().into_iter().flatten())
        .map(|t| t["expr"].as_str().expect("expr"))
        .collect();
    assert!(exprs.len() > 20, "{exprs:?}");
    for expr in exprs {
        let concrete =
            expr.replace("$__rate_interval", "1m").replace("$queue", ".*").replace("$node", ".*").replace("$job", ".*");
        let answer = query(&concrete);
        assert_eq!(answer["status"], "success", "{concrete}: {answer}");
        for name in series_names(expr) {
            assert!(text.contains(&format!("# TYPE {name} ")), "the dashboard's {name} is not served");
        }
    }
    let _ = std::fs::remove_dir_all(&data);
}

/// The gantry and process series a PromQL expression names (a histogram's by its family).
fn series_names(expr: &str) -> Vec<String> {
    let mut names = Vec::new();
    for (at, _) in expr.match_indices(['g', 'p']) {
        let rest = &expr[at..];
        let preceded = expr[..at].chars().last().is_some_and(|c| c.is_ascii_alphanumeric() || c == '_');
        if preceded || !(rest.starts_with("gantry_") || rest.starts_with("process_")) {
            continue;
        }
        let name: String = rest.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
        names.push(name.trim_end_matches("_bucket").to_string());
    }
    names
}

/// `text` as a URL query value.
fn percent_encoded(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}
