//! The `tenure` binary refuses bad configuration files and bad usage with the
//! documented exit codes, names the key or rule on stderr, and starts nothing.
//! Pure: runs the built binary only (no etcd, no PostgreSQL).

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

#[path = "support/node_config.rs"]
mod node_config;
use node_config::node_config;

const BIN: &str = env!("CARGO_BIN_EXE_tenure");

/// A valid config whose data_dir is `<dir>/data` (never created by a refusal).
fn good(dir: &Path) -> String {
    node_config(dir, "clitest", "http://127.0.0.1:2379", "")
}

fn run(args: &[&str]) -> Output {
    run_env(args, None)
}

/// Run the binary with a deadline: a refusal is immediate, so 20 s means a hang.
/// Its output is small (well under a pipe buffer), so waiting before reading is safe.
fn run_env(args: &[&str], tenure_log: Option<&str>) -> Output {
    let mut cmd = Command::new(BIN);
    cmd.args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    match tenure_log {
        Some(v) => cmd.env("TENURE_LOG", v),
        None => cmd.env_remove("TENURE_LOG"),
    };
    let mut child = cmd.spawn().expect("spawn tenure binary");
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if child.try_wait().expect("try_wait").is_some() {
            return child.wait_with_output().expect("collect output");
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let o = child.wait_with_output().expect("collect output");
            panic!("tenure {args:?} did not exit within 20 s: {}", stderr(&o));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).to_string()
}

/// No process anywhere mentions `dir` on its command line (nothing was started).
fn nothing_started(dir: &Path) {
    let needle = dir.to_string_lossy().to_string();
    // Give a hypothetical detached child a moment to show up.
    std::thread::sleep(Duration::from_millis(50));
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(pid) = name
            .to_str()
            .filter(|s| s.bytes().all(|c| c.is_ascii_digit()))
        else {
            continue;
        };
        if let Ok(cmd) = std::fs::read(format!("/proc/{pid}/cmdline")) {
            let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
            assert!(
                !cmd.contains(&needle) || cmd.contains("config_cli"),
                "process {pid} was started: {cmd}"
            );
        }
    }
}

struct Case {
    tag: &'static str,
    /// Turns the good text into the bad one.
    edit: fn(String) -> String,
    code: i32,
    /// What stderr must contain.
    names: &'static [&'static str],
}

fn check_case(c: &Case) {
    let dir = tenure::testbed::scratch_dir(c.tag).expect("scratch dir");
    let file = dir.join("tenure.toml");
    std::fs::write(&file, (c.edit)(good(&dir))).expect("write config");
    let f = file.to_str().expect("utf8 path");
    for args in [vec!["run", "--config", f], vec!["check-config", f]] {
        let o = run(&args);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(c.code), "{}: {args:?}: {err}", c.tag);
        for n in c.names {
            assert!(
                err.contains(n),
                "{}: {args:?}: stderr lacks {n:?}: {err}",
                c.tag
            );
        }
        assert!(
            err.contains(f),
            "{}: stderr does not name the file: {err}",
            c.tag
        );
        assert!(o.stdout.is_empty() || args[0] == "check-config");
        assert!(
            !dir.join("data").exists(),
            "{}: data_dir was created",
            c.tag
        );
        assert!(
            !dir.join("pg1-socket").exists(),
            "{}: socket dir was created",
            c.tag
        );
    }
    nothing_started(&dir);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bad_config_files_are_refused() {
    let cases = [
        Case {
            tag: "missing",
            edit: |s| s.replace("loop_wait = 2\n", ""),
            code: 3,
            names: &["timing.loop_wait", "missing"],
        },
        Case {
            tag: "wrongtype",
            edit: |s| s.replace("retry_timeout = 1", "retry_timeout = \"1s\""),
            code: 3,
            names: &[
                "timing.retry_timeout",
                "expected a number of seconds, found a string",
            ],
        },
        Case {
            tag: "s6a",
            edit: |s| {
                s.replace("ttl = 30", "ttl = 10")
                    .replace("loop_wait = 2", "loop_wait = 5")
                    .replace("retry_timeout = 1", "retry_timeout = 3")
            },
            code: 4,
            names: &["S6(a)", "5 + 2 × 3 = 11 > 10"],
        },
        Case {
            tag: "s6d",
            edit: |s| {
                s.replace(
                    "demote_budget = 1",
                    "demote_budget = 1\niteration_budget = 1.5",
                )
            },
            code: 4,
            names: &["S6(d)", "1 + 1.5 = 2.5 > 2"],
        },
        Case {
            tag: "s6required",
            edit: |s| {
                s.replace("ttl = 30", "ttl = 10")
                    .replace("mode = \"off\"", "mode = \"required\"")
            },
            code: 4,
            names: &["S6(b)", "(10 - 2 - 1) / 2 = 3.5"],
        },
        Case {
            tag: "unknown",
            edit: |s| s.replace("[api]", "[api]\nlisten_port = 8008"),
            code: 3,
            names: &["api.listen_port", "unknown key"],
        },
        Case {
            tag: "badport",
            edit: |s| s.replace("http://127.0.0.1:2379", "http://etcd1.example:x"),
            code: 3,
            names: &["etcd.endpoints[0]", "port \"x\" is not a number"],
        },
        Case {
            tag: "syntax",
            edit: |s| s.replace("ttl = 30", "ttl = = 30"),
            code: 3,
            names: &["not valid TOML"],
        },
    ];
    for c in &cases {
        check_case(c);
    }
}

#[test]
fn unreadable_file_is_refused() {
    let dir = tenure::testbed::scratch_dir("unreadable").expect("scratch dir");
    let missing = dir.join("nope.toml");
    let f = missing.to_str().expect("utf8");
    for args in [vec!["run", "--config", f], vec!["check-config", f]] {
        let o = run(&args);
        assert_eq!(o.status.code(), Some(3), "{args:?}");
        let err = stderr(&o);
        assert!(err.contains(f) && err.contains("cannot read"), "{err}");
    }
    // A directory is not a file either.
    let o = run(&["check-config", dir.to_str().expect("utf8")]);
    assert_eq!(o.status.code(), Some(3));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn example_file_is_accepted() {
    let example: PathBuf =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("packaging/tenure.example.toml");
    let o = run(&["check-config", example.to_str().expect("utf8")]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(out.contains(": OK"), "{out}");
    assert!(out.contains("4 < W <= 13 "), "{out}");
    assert!(out.contains("T  9 s"), "{out}");
}

#[test]
fn check_config_prints_budget_for_good_file() {
    let dir = tenure::testbed::scratch_dir("goodcfg").expect("scratch dir");
    let file = dir.join("tenure.toml");
    std::fs::write(&file, good(&dir)).expect("write");
    let o = run(&["check-config", file.to_str().expect("utf8")]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("no watchdog"), "{out}");
    assert!(out.contains("FROZEN agent"), "{out}");
    assert!(!out.contains("synchronous_mode"), "{out}");
    assert!(!dir.join("data").exists());
    // Synchronous mode: the extra failover time is said, strict or not.
    let sync = good(&dir).replace(
        "[postgresql]\n",
        "[dynamic]\nsynchronous_mode = true\nsynchronous_mode_strict = true\n[postgresql]\n",
    );
    std::fs::write(&file, sync).expect("write");
    let o = run(&["check-config", file.to_str().expect("utf8")]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("synchronous_mode (strict): a failover takes up to 4 s more"),
        "{out}"
    );
    // A wrong type for it is refused by name.
    let bad = good(&dir).replace(
        "[postgresql]\n",
        "[dynamic]\nsynchronous_mode = \"quorum\"\n[postgresql]\n",
    );
    std::fs::write(&file, bad).expect("write");
    let o = run(&["check-config", file.to_str().expect("utf8")]);
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("dynamic.synchronous_mode"),
        "{}",
        stderr(&o)
    );
    std::fs::write(&file, good(&dir)).expect("write");
    // A bad TENURE_LOG is a usage error, before anything starts.
    let o = run_env(
        &["run", "--config", file.to_str().expect("utf8")],
        Some("loud"),
    );
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("TENURE_LOG"));
    assert!(!dir.join("data").exists());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn usage_errors_exit_2() {
    for (args, names) in [
        (vec![], "no subcommand"),
        (vec!["frobnicate"], "frobnicate"),
        (vec!["--frobnicate"], "--frobnicate"),
        (vec!["run"], "--config"),
        (vec!["run", "--config"], "--config"),
        (vec!["run", "--cfg", "x"], "--cfg"),
        (vec!["check-config"], "check-config"),
        (vec!["check-config", "a", "b"], "\"b\""),
        (vec!["demo", "--kep"], "--kep"),
    ] {
        let o = run(&args);
        assert_eq!(o.status.code(), Some(2), "{args:?}");
        let err = stderr(&o);
        assert!(
            err.contains("usage error") && err.contains(names),
            "{args:?}: {err}"
        );
    }
}

#[test]
fn version_and_help() {
    let o = run(&["--version"]);
    assert_eq!(o.status.code(), Some(0));
    // The revision is git's for this checkout (build.rs), or "unknown" where git
    // cannot tell (a source tarball, no git installed).
    let rev = Command::new("git")
        .args(["rev-parse", "--short", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|| "unknown".into());
    assert_eq!(
        String::from_utf8_lossy(&o.stdout).trim(),
        format!("tenure {} (git {rev})", env!("CARGO_PKG_VERSION"))
    );
    let o = run(&["--help"]);
    assert_eq!(o.status.code(), Some(0));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("check-config") && out.contains("Exit codes"),
        "{out}"
    );
}

/// DESIGN §2 "The guardian": check-config names the fence this node will use and
/// prints `B_g` and `G`; a `guardian_kill_budget` above `demote_budget` is refused.
#[test]
fn check_config_prints_the_guardian() {
    let dir = tenure::testbed::scratch_dir("guardiancfg").expect("scratch dir");
    let file = dir.join("tenure.toml");
    let wd = |section: &str| {
        good(&dir).replace(
            "[watchdog]\nmode = \"off\"\n",
            &format!(
                "[watchdog]\n{section}device = \"{}/no-such-watchdog\"\n",
                dir.display()
            ),
        )
    };
    std::fs::write(&file, wd("mode = \"automatic\"\n")).expect("write");
    let o = run_env_clean(&["check-config", file.to_str().expect("utf8")]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("the guardian process"), "{out}");
    assert!(out.contains("guardian kill budget B_g 0.5 s"), "{out}");
    assert!(
        out.contains("guardian deadline G      s + 25.5 s (= F - B_g)"),
        "{out}"
    );
    // required mode refuses it unless allowed.
    std::fs::write(&file, wd("mode = \"required\"\n")).expect("write");
    let out = String::from_utf8_lossy(
        &run_env_clean(&["check-config", file.to_str().expect("utf8")]).stdout,
    )
    .into_owned();
    assert!(out.contains("refuses leadership without a device"), "{out}");
    std::fs::write(
        &file,
        wd("mode = \"required\"\nguardian = \"allow\"\nguardian_kill_budget = 0.2\n"),
    )
    .expect("write");
    let out = String::from_utf8_lossy(
        &run_env_clean(&["check-config", file.to_str().expect("utf8")]).stdout,
    )
    .into_owned();
    assert!(out.contains("the guardian process"), "{out}");
    assert!(out.contains("s + 25.8 s (= F - B_g)"), "{out}");
    std::fs::write(&file, wd("guardian = \"off\"\n")).expect("write");
    let out = String::from_utf8_lossy(
        &run_env_clean(&["check-config", file.to_str().expect("utf8")]).stdout,
    )
    .into_owned();
    assert!(
        out.contains("none ([watchdog] guardian = \"off\")"),
        "{out}"
    );
    std::fs::write(&file, wd("guardian_kill_budget = 2\n")).expect("write");
    let o = run_env_clean(&["check-config", file.to_str().expect("utf8")]);
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("watchdog.guardian_kill_budget: must be <= timing.demote_budget"),
        "{}",
        stderr(&o)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// `check-config` without systemd's watchdog variables in its environment.
fn run_env_clean(args: &[&str]) -> Output {
    let mut cmd = Command::new(BIN);
    cmd.args(args)
        .env_remove("WATCHDOG_USEC")
        .env_remove("NOTIFY_SOCKET")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd.output().expect("run tenure")
}

/// Issue 12: a config file holding a password and readable by every user is
/// warned about (check-config prints it; `run` logs it at start-up), a 0600 one is not.
#[test]
fn check_config_warns_about_a_world_readable_file_with_a_password() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tenure::testbed::scratch_dir("modecfg").expect("scratch dir");
    let file = dir.join("tenure.toml");
    std::fs::write(&file, good(&dir)).expect("write");
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    let o = run(&["check-config", file.to_str().expect("utf8")]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("readable by every user"), "{out}");
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    let o = run(&["check-config", file.to_str().expect("utf8")]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(!out.contains("readable by every user"), "{out}");
    let _ = std::fs::remove_dir_all(&dir);
}
