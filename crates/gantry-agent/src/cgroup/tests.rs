//! The hierarchies against the kernel: cgroup v1 (this machine's controllers) and cgroup v2
//! (its unified mount: tracking, `cgroup.kill`, the BPF device program; memory, CPU and pids
//! where the mount offers them), and what each writes, on a directory that stands in for a
//! mount. The kernel tests need root (CI runs as root); without it they say so and pass.

use super::*;
use std::collections::BTreeMap;
use std::path::PathBuf;

fn root() -> bool {
    nix::unistd::geteuid().is_root()
}

fn mounts() -> Vec<Mount> {
    parse_mountinfo(&std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default())
}

/// A parent cgroup of this test's own (removed after).
fn parent(tag: &str) -> String {
    format!("gantry-test/{tag}-{}", std::process::id())
}

/// A fake GPU device node (major 195) for minor `m` under `dir`, where no NVIDIA driver
/// holds the major.
fn fake_gpu(dir: &Path, m: u32) -> Option<PathBuf> {
    if devices::registered_major("nvidia").is_some() {
        return None;
    }
    std::fs::create_dir_all(dir).ok()?;
    let path = dir.join(format!("nvidia{m}"));
    let _ = std::fs::remove_file(&path);
    let dev = nix::sys::stat::makedev(195, u64::from(m));
    nix::sys::stat::mknod(&path, nix::sys::stat::SFlag::S_IFCHR, nix::sys::stat::Mode::from_bits_truncate(0o666), dev)
        .ok()?;
    Some(path)
}

/// Start `script` the way the runner starts a monitor: a new session, the task's cgroup
/// joined before exec, stdout and stderr to files; returns the child and where its output is.
fn start(join: Vec<std::os::fd::OwnedFd>, script: &str, tag: &str) -> (tokio::process::Child, PathBuf) {
    let out = std::env::temp_dir().join(format!("gantry-cg-{}-{tag}.out", std::process::id()));
    let file = std::fs::File::create(&out).expect("output file");
    let err = file.try_clone().expect("same file");
    // The monitor writes its pid and exit files by these paths (replacing the exit file by
    // a rename): files of the test's own, never a device.
    let file_of = |ext: &str| out.with_extension(ext).display().to_string();
    let env = [
        ("PATH".to_string(), "/usr/sbin:/usr/bin:/sbin:/bin".to_string()),
        ("GANTRY_PID_FILE".to_string(), file_of("pid")),
        ("GANTRY_EXIT_FILE".to_string(), file_of("exit")),
    ];
    let entry = ["sh".to_string(), "-c".to_string(), script.to_string()];
    let child = crate::spawn::monitor_command(&entry, &env, file, err, join).spawn().expect("spawn");
    (child, out)
}

/// Remove what [`start`] left: the output and the monitor's files.
fn clean(out: &Path) {
    for path in [out.to_path_buf(), out.with_extension("pid"), out.with_extension("exit")] {
        let _ = std::fs::remove_file(path);
    }
}

/// Wait (up to `limit_ms`) for `done`.
async fn eventually(limit_ms: u64, mut done: impl FnMut() -> bool) -> bool {
    for _ in 0..limit_ms / 10 {
        if done() {
            return true;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    done()
}

#[test]
fn mountinfo_is_read_for_cgroup_mounts() {
    let text = "30 25 0:26 / /sys/fs/cgroup/memory rw,nosuid - cgroup cgroup rw,memory\n\
                31 25 0:27 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct\n\
                35 25 0:30 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw,nsdelegate\n";
    let mounts = parse_mountinfo(text);
    assert_eq!(mounts.len(), 3);
    let v1 = v1::V1::from_mounts(&mounts).expect("v1 controllers");
    assert_eq!(v1.controllers(), ["memory", "cpu", "cpuacct"]);
    assert_eq!(v1.missing(), ["pids", "devices", "freezer"]);
    assert_eq!(mounts[2].fstype, "cgroup2");
}

/// What each hierarchy writes for a run's limits, on plain directories standing in for mounts.
#[test]
fn limits_are_written_as_each_hierarchy_spells_them() {
    let base = std::env::temp_dir().join(format!("gantry-cg-files-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    let limits = Limits { memory_bytes: Some(512 << 20), cpu_milli: Some(1500), pids: 64 };
    // v1: the files exist in a real mount; here they are made first.
    let mut mounts = BTreeMap::new();
    for c in v1::WANTED {
        let dir = base.join("v1").join(c).join("run");
        std::fs::create_dir_all(&dir).expect("dir");
        for f in [
            "memory.limit_in_bytes",
            "memory.memsw.limit_in_bytes",
            "cpu.cfs_period_us",
            "cpu.cfs_quota_us",
            "pids.max",
        ] {
            std::fs::write(dir.join(f), "").expect("file");
        }
        mounts.insert(c, base.join("v1").join(c));
    }
    let v1 = v1::V1::with_mounts(mounts);
    v1.limit("run", &limits).expect("v1 limits");
    let read = |p: &str| std::fs::read_to_string(base.join(p)).expect(p);
    assert_eq!(read("v1/memory/run/memory.limit_in_bytes"), "536870912");
    assert_eq!(read("v1/memory/run/memory.memsw.limit_in_bytes"), "536870912", "swap off");
    assert_eq!(read("v1/cpu/run/cpu.cfs_quota_us"), "150000");
    assert_eq!(read("v1/cpu/run/cpu.cfs_period_us"), "100000");
    assert_eq!(read("v1/pids/run/pids.max"), "64");
    // v2: one tree whose root offers the controllers.
    let root = base.join("v2");
    std::fs::create_dir_all(root.join("run")).expect("dir");
    std::fs::write(root.join("cgroup.controllers"), "cpuset cpu io memory pids").expect("controllers");
    for f in [
        "cgroup.subtree_control",
        "run/cgroup.subtree_control",
        "run/memory.max",
        "run/memory.swap.max",
        "run/cpu.max",
        "run/pids.max",
    ] {
        std::fs::write(root.join(f), "").expect("file");
    }
    let v2 = v2::V2::at(&root);
    v2.limit("run", &limits).expect("v2 limits");
    assert_eq!(read("v2/run/memory.max"), "536870912");
    assert_eq!(read("v2/run/memory.swap.max"), "0");
    assert_eq!(read("v2/run/cpu.max"), "150000 100000");
    assert_eq!(read("v2/run/pids.max"), "64");
    assert_eq!(read("v2/run/cgroup.subtree_control"), "+memory +cpu +pids", "the tasks get the controllers too");
    assert_eq!(cpu_quota_us(1), 1000, "the kernel's smallest quota");
    let _ = std::fs::remove_dir_all(&base);
}

/// The hierarchy this machine offers for `version`, confined under a parent of the test's.
fn confined(version: Version, tag: &str, rules: devices::DeviceRules) -> Option<Arc<Cgroups>> {
    if !root() {
        eprintln!("skipped: cgroups need root (CI runs as root)");
        return None;
    }
    let mounts = mounts();
    let hierarchy: Box<dyn Hierarchy> = match version {
        Version::V1 => Box::new(v1::V1::from_mounts(&mounts)?),
        Version::V2 => Box::new(v2::V2::at(&mounts.iter().find(|m| m.fstype == "cgroup2")?.point)),
    };
    let parent = parent(tag);
    match Confinement::from_hierarchy(hierarchy, &parent, rules) {
        Confinement::Cgroups(c) => Some(c),
        Confinement::Unconfined(why) => panic!("{why}"),
    }
}

/// Every process a task starts stays in its cgroup, however it detaches; killing the cgroup
/// leaves none; the empty cgroups are removed.
async fn tracking_and_kill(version: Version) {
    let Some(cg) = confined(version, "track", devices::DeviceRules::fake(&[])) else { return };
    cg.set_run(7, 0, &Limits { pids: 64, ..Limits::default() }).expect("run");
    let task = cg.add_task(7, 0, 0, &[]).expect("task");
    let script = "setsid sleep 300 & (sleep 301 &) ; nohup sleep 302 >/dev/null 2>&1 & echo started; sleep 303";
    let (mut child, out) = start(task.join, script, &format!("track-{version:?}"));
    assert!(eventually(5000, || cg.task_procs(7, 0, 0).len() >= 5).await, "{:?}", cg.task_procs(7, 0, 0));
    assert!(eventually(5000, || std::fs::read_to_string(&out).unwrap_or_default().contains("started")).await);
    // The escapees are still its: their own session, but the task's cgroup.
    let leaders = || {
        cg.task_procs(7, 0, 0)
            .into_iter()
            .filter(|&p| {
                nix::unistd::getsid(Some(nix::unistd::Pid::from_raw(p))).ok() == Some(nix::unistd::Pid::from_raw(p))
            })
            .count()
    };
    assert!(eventually(5000, || leaders() >= 2).await, "the monitor and the setsid sleep each lead a session");
    cg.kill_task(7, 0, 0);
    let _ = child.wait().await;
    assert!(eventually(5000, || !cg.task_populated(7, 0, 0)).await, "left: {:?}", cg.task_procs(7, 0, 0));
    assert!(cg.remove_run(7, 0), "an empty run's cgroups go");
    assert!(cg.runs().is_empty());
    cg.remove_parent_if_empty();
    clean(&out);
}

#[tokio::test]
async fn v1_tracks_every_process_and_kills_them_all() {
    tracking_and_kill(Version::V1).await;
}

#[tokio::test]
async fn v2_tracks_every_process_and_kills_them_all() {
    tracking_and_kill(Version::V2).await;
}

/// A task opens its own (fake) GPU — no driver answers, ENXIO — and is refused every other
/// (EPERM); devices that are not GPUs stay open to it.
async fn only_granted_devices(version: Version) {
    let dev = std::env::temp_dir().join(format!("gantry-cg-dev-{}-{version:?}", std::process::id()));
    let (Some(gpu0), Some(gpu1)) = (fake_gpu(&dev, 0), fake_gpu(&dev, 1)) else {
        eprintln!("skipped: the NVIDIA driver holds major 195 here, or mknod is not allowed");
        return;
    };
    let rules = devices::DeviceRules::fake(&[(0, "GPU-zero".into()), (1, "GPU-one".into())]);
    let Some(cg) = confined(version, "dev", rules) else { return };
    cg.set_run(8, 0, &Limits { pids: 64, ..Limits::default() }).expect("run");
    let task = cg.add_task(8, 0, 0, &["GPU-zero".to_string()]).expect("task");
    let script = format!(
        "for d in {} {} /dev/null; do (exec 3<\"$d\" && echo \"$d: opened\"); done",
        gpu0.display(),
        gpu1.display()
    );
    let (mut child, out) = start(task.join, &script, &format!("dev-{version:?}"));
    let _ = child.wait().await;
    let text = std::fs::read_to_string(&out).unwrap_or_default();
    assert!(text.contains("No such device or address"), "its own GPU passes the cgroup (no driver answers): {text}");
    assert!(text.contains("Operation not permitted"), "another GPU is refused by the cgroup: {text}");
    assert!(text.contains("/dev/null: opened"), "{text}");
    assert_eq!(text.matches("Operation not permitted").count(), 1, "{text}");
    assert!(eventually(5000, || !cg.task_populated(8, 0, 0)).await);
    assert!(cg.remove_run(8, 0));
    cg.remove_parent_if_empty();
    let _ = std::fs::remove_dir_all(dev);
    clean(&out);
}

#[tokio::test]
async fn v1_denies_gpus_not_granted() {
    only_granted_devices(Version::V1).await;
}

#[tokio::test]
async fn v2_denies_gpus_not_granted_with_its_device_program() {
    only_granted_devices(Version::V2).await;
}

/// A run over its memory is ended by the OOM killer, counted; a fork bomb stops at the
/// process limit. Where the hierarchy lacks the controller (v2 on this hybrid host), the test
/// says so.
async fn limits_hold(version: Version) {
    let Some(cg) = confined(version, "limits", devices::DeviceRules::fake(&[])) else { return };
    let report = Confinement::Cgroups(cg.clone()).report();
    if report.missing.iter().any(|c| c == "memory" || c == "pids") {
        eprintln!("skipped: {report} lacks the memory or pids controller here");
        cg.remove_parent_if_empty();
        return;
    }
    cg.set_run(9, 0, &Limits { memory_bytes: Some(64 << 20), cpu_milli: Some(500), pids: 24 }).expect("run");
    let task = cg.add_task(9, 0, 0, &[]).expect("task");
    let (mut child, out) =
        start(task.join, "dd if=/dev/zero of=/dev/null bs=128M count=1; echo dd=$?", &format!("oom-{version:?}"));
    let _ = child.wait().await;
    let text = std::fs::read_to_string(&out).unwrap_or_default();
    assert!(text.contains("dd=137"), "dd is killed: {text}");
    assert!(cg.task_oom_kills(9, 0, 0) >= 1, "the OOM kill is counted");
    let task = cg.add_task(9, 0, 1, &[]).expect("task");
    // Each fork past the limit fails ("Cannot fork"): the shell gives up, its children stay
    // at most the limit.
    let bomb = "i=0; while [ $i -lt 60 ]; do sleep 30 & i=$((i+1)); done; sleep 30";
    let (mut child, out2) = start(task.join, bomb, &format!("pids-{version:?}"));
    let mut most = 0;
    let refused = eventually(5000, || {
        most = most.max(cg.task_procs(9, 0, 1).len());
        std::fs::read_to_string(&out2).unwrap_or_default().to_lowercase().contains("fork")
    })
    .await;
    assert!(refused, "forks past the limit are refused: {}", std::fs::read_to_string(&out2).unwrap_or_default());
    assert!(most <= 24, "at most the run's process limit: {most}");
    let used = cg.run_usage(9, 0);
    assert!(used.memory_peak_bytes.is_some_and(|p| p <= 64 << 20), "{used:?}");
    cg.kill_task(9, 0, 1);
    let _ = child.wait().await;
    assert!(eventually(5000, || !cg.task_populated(9, 0, 1)).await);
    assert!(cg.remove_run(9, 0));
    cg.remove_parent_if_empty();
    clean(&out);
    clean(&out2);
}

#[tokio::test]
async fn v1_holds_a_run_to_its_memory_and_processes() {
    limits_hold(Version::V1).await;
}

#[tokio::test]
async fn v2_holds_a_run_to_its_memory_and_processes_where_the_host_offers_them() {
    limits_hold(Version::V2).await;
}
