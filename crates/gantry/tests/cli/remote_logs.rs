//! Task output of remote agents, read as a researcher would: `gantry logs` against a controller
//! whose tasks run under two real `gantry agent` processes, each with its own data directory.

use crate::{gantry, spawn, stderr, stdout, temp_dir, write_fixture};

#[test]
fn logs_of_tasks_on_remote_agents_come_through_the_controller() {
    let dir = temp_dir("remote-logs");
    let node = |name: &str| {
        format!(
            "[[node]]\nname = \"{name}\"\ncpu = 8\nmemory = \"32GiB\"\n[node.gpus]\nmodel = \"L4-24GB\"\ncount = 1\n\n"
        )
    };
    let fleet = write_fixture(&dir, "fleet.toml", &(node("n1") + &node("n2")));
    let data = dir.join("controller");
    let data_arg = data.to_str().expect("utf-8").to_string();
    let (_controller, url) =
        spawn(&["serve", "--fleet", &fleet, "--data", &data_arg, "--listen", "127.0.0.1:0", "--agent-timeout", "2"]);
    let admin = std::fs::read_to_string(data.join("admin.token")).expect("admin token").trim().to_string();
    let cli = |args: &[&str]| gantry(&[args, &["--server", &url, "--token", &admin]].concat());
    let agent = |name: &str| {
        let out = cli(&["token", "create", &format!("agent-{name}"), "--role", "agent", "--node", name]);
        let token = write_fixture(&dir, &format!("{name}.token"), stdout(&out).trim());
        let agent_data = dir.join(format!("agent-{name}"));
        let args = ["agent", "--server", &url, "--token-file", &token, "--inventory", &fleet, "--node", name];
        spawn(&[&args[..], &["--data", agent_data.to_str().expect("utf-8")]].concat()).0
    };
    let (_n1, mut n2) = (agent("n1"), agent("n2"));
    // Two tasks, one per node (one GPU each); each prints a line, 300 KB, a line on stderr.
    let job = write_fixture(
        &dir,
        "talk.toml",
        "[[job]]\nname = \"talk\"\n\
         command = \"echo hello from rank $GANTRY_RANK on $GANTRY_NODE; head -c 300000 /dev/zero | tr '\\\\0' x; echo; \
         echo warn $GANTRY_RANK >&2; echo last line $GANTRY_RANK\"\n\
         [[job.task]]\nname = \"w\"\nreplicas = 2\ngpu = { count = 1 }\n",
    );
    let out = cli(&["submit", &job, "--wait"]);
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
    let id = stdout(&out).split_whitespace().last().expect("an id").to_string();
    let all = cli(&["logs", &id]);
    let text = stdout(&all);
    assert!(all.status.success(), "{}", stderr(&all));
    for rank in ["0", "1"] {
        assert!(text.contains(&format!("==> talk w/{rank} (out) <==")), "{text}");
        assert!(text.contains(&format!("last line {rank}")) && text.contains(&format!("warn {rank}")), "{text}");
    }
    // 300 KB is more than one read brings (256 KiB): the start is left out, and said so.
    assert!(text.contains("bytes are left out"), "{}", &text[..text.len().min(2000)]);
    assert!(!text.contains("hello from rank"), "the beginning is beyond the bound");
    assert!(text.len() < 2 * 2 * 262_144 + 4096, "{} bytes for two tasks", text.len());
    // One task, one stream, its last line.
    let one = stdout(&cli(&["logs", &id, "--task", "w/1", "--stream", "out", "--tail", "1"]));
    assert_eq!(one, "==> talk w/1 (out) <==\nlast line 1\n");
    let err = stdout(&cli(&["logs", &id, "--task", "w/0", "--stream", "err"]));
    assert_eq!(err, "==> talk w/0 (err) <==\nwarn 0\n");
    let none = cli(&["logs", &id, "--task", "w/9"]);
    assert!(!none.status.success() && stderr(&none).contains("has no task \"w/9\""), "{}", stderr(&none));
    // The dashboard's job page shows the same output, with the same bound.
    let (status, page) =
        gantry_wire::client::request(&url, Some(&admin), "GET", &format!("/ui/jobs/{id}"), None).expect("the page");
    assert_eq!(status, 200);
    assert!(
        page.contains("w/1 — stdout (last 50 lines)") && page.contains("last line 1"),
        "{}",
        &page[..page.len().min(3000)]
    );
    // -f on a running job: its lines as they come, and it returns when the job ends.
    let slow = write_fixture(
        &dir,
        "slow.toml",
        "[[job]]\nname = \"slow\"\ngpu = { count = 1 }\ncommand = \"echo one; sleep 1.5; echo two; sleep 1; echo three\"\n",
    );
    let out = cli(&["submit", &slow]);
    let slow_id = stdout(&out).split_whitespace().last().expect("an id").to_string();
    let followed = cli(&["logs", &slow_id, "-f"]);
    assert!(followed.status.success(), "{}", stderr(&followed));
    let shown = stdout(&followed);
    assert_eq!(shown, "==> slow main/0 (out) <==\none\ntwo\nthree\n", "{}", &shown[..shown.len().min(500)]);
    // The node goes down: said so, in place of its output; the other node's still comes.
    n2.0.kill().expect("SIGKILL");
    n2.0.wait().expect("reaped");
    std::thread::sleep(std::time::Duration::from_millis(3500));
    let down = stdout(&cli(&["logs", &id, "--stream", "err"]));
    assert!(down.contains("node n2 is down: its agent was last heard"), "{down}");
    assert!(down.contains("(on the node: jobs/"), "{down}");
    let up = if down.contains("==> talk w/0 (err) <==\nwarn 0") { "w/0" } else { "w/1" };
    assert!(down.contains(&format!("==> talk {up} (err) <==\nwarn")), "{down}");
}
