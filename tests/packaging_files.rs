//! The files the packages ship agree with each other (issue 11; docs/packaging.md):
//! the template unit is the plain unit but for its Description= and ExecStart=,
//! the group the units and the udev rule name is the one sysusers.d creates, and
//! the man page covers every subcommand `tenure --help` lists. Pure: reads the
//! source tree and runs the built binary. The installed packages are checked by
//! tests/real_package.rs.

use std::process::Command;

const SRC: &str = env!("CARGO_MANIFEST_DIR");

fn read(rel: &str) -> String {
    std::fs::read_to_string(format!("{SRC}/{rel}")).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// The unit from its `[Unit]` line on, without comments and blank lines.
fn settings(unit: &str) -> Vec<String> {
    let from = unit.find("[Unit]").expect("[Unit]");
    unit[from..]
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#') && !l.starts_with(';'))
        .map(String::from)
        .collect()
}

#[test]
fn the_template_unit_is_the_unit_but_for_its_instance() {
    let plain = settings(&read("systemd/tenure.service"));
    let template = settings(&read("systemd/tenure@.service"));
    assert_eq!(plain.len(), template.len(), "{plain:#?}\n{template:#?}");
    let mut differ = Vec::new();
    for (a, b) in plain.iter().zip(&template) {
        if a != b {
            differ.push((a.as_str(), b.as_str()));
        }
    }
    assert_eq!(
        differ,
        vec![
            (
                "Description=tenure PostgreSQL failover agent",
                "Description=tenure PostgreSQL failover agent (cluster %i)"
            ),
            (
                "ExecStart=/usr/bin/tenure run --config /etc/tenure/tenure.toml",
                "ExecStart=/usr/bin/tenure run --config /etc/tenure/%i.toml"
            ),
        ]
    );
    // The fence settings both rely on (DESIGN §5).
    for s in [
        "Type=notify",
        "NotifyAccess=main",
        "WatchdogSignal=SIGKILL",
        "KillMode=control-group",
        "SupplementaryGroups=tenure",
    ] {
        assert!(plain.iter().any(|l| l == s), "{s} missing");
    }
    assert!(plain.iter().any(|l| l.starts_with("WatchdogSec=")));
}

#[test]
fn the_units_and_the_udev_rule_name_the_group_sysusers_creates() {
    let sysusers = read("packaging/tenure.sysusers");
    let entries: Vec<Vec<&str>> = sysusers
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(entries.len(), 1, "{entries:?}");
    assert_eq!(&entries[0][..2], ["g", "tenure"], "a group named tenure");
    let rules = read("udev/60-tenure-watchdog.rules");
    let groups: Vec<&str> = rules
        .lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .filter_map(|l| l.split("GROUP=\"").nth(1))
        .filter_map(|g| g.split('"').next())
        .collect();
    assert!(!groups.is_empty(), "the rule sets a group");
    assert!(groups.iter().all(|g| *g == "tenure"), "{groups:?}");
    for unit in ["systemd/tenure.service", "systemd/tenure@.service"] {
        assert!(
            settings(&read(unit))
                .iter()
                .any(|l| l == "SupplementaryGroups=tenure"),
            "{unit}"
        );
    }
}

#[test]
fn the_man_page_covers_every_subcommand() {
    let help = Command::new(env!("CARGO_BIN_EXE_tenure"))
        .arg("--help")
        .output()
        .expect("tenure --help");
    let help = String::from_utf8_lossy(&help.stdout);
    let man = read("docs/tenure.8");
    let subcommands: Vec<&str> = help
        .lines()
        .filter_map(|l| l.trim().strip_prefix("tenure "))
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert!(subcommands.len() >= 5, "{subcommands:?}");
    for s in subcommands {
        // roff escapes the dashes of flags: \-\-version.
        let in_man = s.replace('-', "\\-");
        assert!(
            man.contains(s) || man.contains(&in_man),
            "tenure(8) does not mention {s}"
        );
    }
    assert!(man.starts_with(".\\\"") || man.starts_with(".TH"), "roff");
    assert!(man.contains(".TH TENURE 8"), "section 8");
}
