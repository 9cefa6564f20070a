//! `tenure ctl` from the outside: the help lists the commands and exit codes,
//! usage errors exit 2, a bad file 3, an unreachable etcd 1 naming the endpoints,
//! each with the reason on stderr. Pure: no etcd runs (the endpoint is a closed
//! port on loopback), so nothing can be sent anywhere.

use std::path::Path;
use std::process::{Command, Output, Stdio};

#[path = "support/node_config.rs"]
mod node_config;
use node_config::node_config;

const BIN: &str = env!("CARGO_BIN_EXE_tenure");

fn run(args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .expect("run tenure")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A valid node file whose etcd is a closed loopback port.
fn config(dir: &Path, api_extra: &str) -> std::path::PathBuf {
    let extra = if api_extra.is_empty() {
        String::new()
    } else {
        format!("{api_extra}\n")
    };
    let text = node_config(dir, "ctltest", "http://127.0.0.1:9", &extra);
    let p = dir.join("tenure.toml");
    std::fs::write(&p, text).expect("write config");
    p
}

fn scratch(tag: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("tenure-ctl-cli-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&d).expect("scratch dir");
    d
}

#[test]
fn help_lists_commands_and_exit_codes() {
    let o = run(&["ctl", "--help"]);
    assert_eq!(o.status.code(), Some(0));
    let h = String::from_utf8_lossy(&o.stdout);
    for cmd in [
        "list",
        "topology",
        "history",
        "show-config",
        "version",
        "switchover",
        "failover",
        "pause",
        "resume",
        "restart",
        "reload",
        "reinit",
        "edit-config",
    ] {
        assert!(
            h.contains(&format!("\n  {cmd}")),
            "{cmd} missing from:\n{h}"
        );
    }
    assert!(
        h.contains("Exit codes:") && h.contains("6 credentials rejected"),
        "{h}"
    );
    assert!(
        h.contains("patronictl remove") && h.contains("tenure confirm-epoch"),
        "{h}"
    );
    // The top-level help names ctl; the other commands still parse as before.
    let top = run(&["--help"]);
    assert!(String::from_utf8_lossy(&top.stdout).contains("tenure ctl"));
    assert_eq!(run(&["frobnicate"]).status.code(), Some(2));
}

#[test]
fn usage_and_file_errors_have_their_codes() {
    let o = run(&["ctl", "frob"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("unknown command \"frob\""),
        "{}",
        stderr(&o)
    );
    let o = run(&["ctl", "list", "--force"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("--force does not apply to list"));
    let o = run(&["ctl", "--config", "/nonexistent/tenure.toml", "list"]);
    assert_eq!(o.status.code(), Some(3));
    assert!(
        stderr(&o).contains("/nonexistent/tenure.toml"),
        "{}",
        stderr(&o)
    );
    // Half the credentials is a file error, before anything is read.
    let d = scratch("half");
    let p = config(&d, "username = \"admin\"");
    let o = run(&["ctl", "--config", p.to_str().expect("utf8"), "list"]);
    let _ = std::fs::remove_dir_all(&d);
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("api.password") && stderr(&o).contains("both or neither"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn unreachable_etcd_is_named() {
    let d = scratch("etcd");
    let p = config(&d, "");
    let o = run(&[
        "ctl",
        "--config",
        p.to_str().expect("utf8"),
        "list",
        "--json",
    ]);
    let _ = std::fs::remove_dir_all(&d);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("etcd unreachable (http://127.0.0.1:9)"),
        "{}",
        stderr(&o)
    );
    assert!(
        o.stdout.is_empty(),
        "nothing on stdout for scripts to misread"
    );
}

/// A reader that went away before ctl wrote (`tenure ctl list | head -0`, a
/// pager quit early): exit 0 and nothing on stderr, not `print!`'s panic on the
/// broken pipe (exit 101).
#[test]
fn a_reader_that_went_away_ends_ctl_quietly() {
    // The agent binary's one-shot commands too (`tenure check-config | head`).
    let example = concat!(env!("CARGO_MANIFEST_DIR"), "/packaging/tenure.example.toml");
    for args in [
        &["ctl", "--help"][..],
        &["--help"],
        &["--version"],
        &["check-config", example],
    ] {
        let (read_end, write_end) = nix::unistd::pipe().expect("pipe");
        drop(read_end);
        let o = Command::new(BIN)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::from(write_end))
            .stderr(Stdio::piped())
            .output()
            .expect("run tenure");
        assert_eq!(o.status.code(), Some(0), "{args:?}: {}", stderr(&o));
        assert_eq!(stderr(&o), "", "{args:?}");
    }
}
