//! A step host: on each node of a batch allocation but the first, it reports to the batch
//! host (the hub), then runs the tasks `srun` sends it until the hub goes away — then it
//! stops what still runs and ends, which ends the job's task on this node.

use super::auth::{answer, challenge, check};
use super::exec;
use super::wire::{Challenge, News, Report, Signed, TaskOrder, Welcome, receive, send};
use super::{REPORT_WITHIN_S, StepError, hub_ports};
use std::collections::BTreeSet;
use std::io::BufReader;
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The process groups of the tasks this host runs.
type Running = Arc<Mutex<BTreeSet<i32>>>;

/// Serve node `node_index` of `job`'s allocation; `hub` is the first node as this node
/// reaches it. Returns only with an error: when the hub goes away the process exits 0.
pub fn serve(key: &str, job: u64, node_index: u32, hub: &str) -> Result<(), StepError> {
    let listener = TcpListener::bind("0.0.0.0:0").map_err(StepError::io("cannot listen for steps"))?;
    let port = listener.local_addr().map_err(StepError::io("cannot read the step port"))?.port();
    let hub_link = report(key, job, node_index, port, hub)?;
    let running: Running = Arc::default();
    let watched = running.clone();
    std::thread::spawn(move || {
        // The hub never writes again: the end of the connection is the end of the batch.
        let mut sink = [0u8; 64];
        while std::io::Read::read(&mut &hub_link, &mut sink).is_ok_and(|n| n > 0) {}
        stop_all(&watched);
        std::process::exit(0);
    });
    let devices = exec::node_devices();
    let launcher = exec::launcher().ok_or_else(|| StepError::Refused("cannot find the gantry binary".into()))?;
    let unproven = Arc::default();
    for conn in listener.incoming().flatten() {
        let Some(guard) = super::Unproven::admit(&unproven) else { continue };
        let (key, devices, running, launcher) = (key.to_string(), devices.clone(), running.clone(), launcher.clone());
        std::thread::spawn(move || {
            if let Err(e) = run_order(conn, &key, &devices, &running, Some(&launcher), guard) {
                eprintln!("gantry step host: {e}");
            }
        });
    }
    Err(StepError::Refused("the step listener closed".into()))
}

/// Reach the hub on one of its ports, prove this host belongs to the run and check that the
/// hub does; retried until [`REPORT_WITHIN_S`] (the batch host may start after this one).
fn report(key: &str, job: u64, node_index: u32, port: u16, hub: &str) -> Result<TcpStream, StepError> {
    let deadline = Instant::now() + Duration::from_secs(REPORT_WITHIN_S);
    loop {
        for hub_port in hub_ports(job) {
            if let Some(link) = try_report(key, node_index, port, (hub, hub_port)) {
                return Ok(link);
            }
        }
        if Instant::now() > deadline {
            return Err(StepError::Refused(format!(
                "no batch host of job {job} answered at {hub} (ports {:?}) within {REPORT_WITHIN_S} s",
                hub_ports(job)
            )));
        }
        std::thread::sleep(Duration::from_millis(300));
    }
}

fn try_report(key: &str, node_index: u32, port: u16, hub: (&str, u16)) -> Option<TcpStream> {
    use std::net::ToSocketAddrs;
    let addr = hub.to_socket_addrs().ok()?.next()?;
    let link = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
    link.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    let mut reader = BufReader::new(link.try_clone().ok()?);
    let theirs: Challenge = receive(&mut reader).ok()??;
    let mine = challenge().ok()?;
    let report = Report {
        node_index,
        port,
        answer: answer(key, "host", &theirs.challenge, &format!("{node_index}:{port}")),
        challenge: mine.clone(),
    };
    send(&mut &link, &report).ok()?;
    match receive::<Welcome>(&mut reader).ok()?? {
        Welcome::Answer(a) if check(key, "hub", &mine, "", &a) => {
            link.set_read_timeout(None).ok()?;
            Some(link)
        }
        _ => None,
    }
}

/// One connection from `srun`: check its order, run the task (through `launcher`), stream its
/// news back.
fn run_order(
    conn: TcpStream,
    key: &str,
    devices: &[String],
    running: &Running,
    launcher: Option<&std::path::Path>,
    unproven: super::Unproven,
) -> Result<(), StepError> {
    let mine = challenge().map_err(StepError::io("cannot make a challenge"))?;
    send(&mut &conn, &Challenge { challenge: mine.clone() })?;
    conn.set_read_timeout(Some(Duration::from_secs(10))).map_err(StepError::io("step connection"))?;
    let Some(signed) = receive::<Signed>(&mut BufReader::new(&conn))? else { return Ok(()) };
    if !check(key, "order", &mine, &signed.order, &signed.answer) {
        send(&mut &conn, &News::Refused("the order does not carry this run's step key".into()))?;
        return Ok(());
    }
    drop(unproven);
    let order: TaskOrder =
        serde_json::from_str(&signed.order).map_err(|e| StepError::Refused(format!("a malformed task order: {e}")))?;
    let (tx, rx) = std::sync::mpsc::channel();
    let started = running.clone();
    let task = std::thread::spawn({
        let (devices, launcher) = (devices.to_vec(), launcher.map(std::path::Path::to_path_buf));
        move || {
            let mut pgid = 0;
            exec::run_with(launcher.as_deref(), &order, &devices, &tx, |p| {
                pgid = p;
                started.lock().expect("not poisoned").insert(p);
            });
            pgid
        }
    });
    for news in rx {
        send(&mut &conn, &news)?;
    }
    let pgid = task.join().unwrap_or(0);
    running.lock().expect("not poisoned").remove(&pgid);
    Ok(())
}

/// Stop every task still running: SIGTERM to each process group, SIGKILL a moment later.
fn stop_all(running: &Running) {
    use nix::sys::signal::{Signal, killpg};
    use nix::unistd::Pid;
    let groups: Vec<i32> = running.lock().expect("not poisoned").iter().copied().collect();
    for &g in &groups {
        let _ = killpg(Pid::from_raw(g), Signal::SIGTERM);
    }
    if !groups.is_empty() {
        std::thread::sleep(Duration::from_secs(2));
        for &g in &groups {
            let _ = killpg(Pid::from_raw(g), Signal::SIGKILL);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Send `order` signed under `key` to a step host of the run whose key is "right".
    fn order_with(key: &str, order: &TaskOrder) -> Vec<News> {
        let listener = TcpListener::bind("127.0.0.1:0").expect("listen");
        let addr = listener.local_addr().expect("addr");
        let host = std::thread::spawn(move || {
            let (conn, _) = listener.accept().expect("accept");
            run_order(
                conn,
                "right",
                &[],
                &Running::default(),
                None,
                super::super::Unproven::admit(&Arc::default()).expect("room"),
            )
        });
        let conn = TcpStream::connect(addr).expect("connect");
        let mut reader = BufReader::new(conn.try_clone().expect("clone"));
        let c: Challenge = receive(&mut reader).expect("read").expect("a challenge");
        let text = serde_json::to_string(order).expect("json");
        send(&mut &conn, &Signed { answer: answer(key, "order", &c.challenge, &text), order: text }).expect("sent");
        let mut news = Vec::new();
        while let Ok(Some(n)) = receive::<News>(&mut reader) {
            news.push(n);
        }
        host.join().expect("host thread").expect("served");
        news
    }

    #[test]
    fn a_step_host_runs_only_orders_signed_with_its_runs_key() {
        let dir = std::env::temp_dir().join(format!("gantry-step-host-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("dir");
        let marker = dir.join("ran");
        let order = TaskOrder { argv: vec!["touch".into(), marker.display().to_string()], ..Default::default() };
        let refused = order_with("wrong", &order);
        assert!(matches!(refused.as_slice(), [News::Refused(m)] if m.contains("step key")), "{refused:?}");
        assert!(!marker.exists(), "nothing ran");
        assert_eq!(order_with("right", &order), vec![News::Exit(0)]);
        assert!(marker.exists());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
