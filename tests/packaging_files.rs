//! The files the packages ship agree with each other (issue 11; docs/packaging.md):
//! the template unit is the plain unit but for its Description= and ExecStart=,
//! the group the units and the udev rule name is the one sysusers.d creates, the
//! man page covers every subcommand `tenure --help` lists, and the test bed stays
//! out of what the packages ship (the `testbed` feature). Pure: reads the
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

/// packaging/testbed-markers.txt: `(source file, string)`.
fn test_bed_markers() -> Vec<(String, String)> {
    let markers: Vec<(String, String)> = read("packaging/testbed-markers.txt")
        .lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| {
            let (file, s) = l
                .split_once('\t')
                .unwrap_or_else(|| panic!("no tab: {l:?}"));
            (file.to_string(), s.to_string())
        })
        .collect();
    assert!(markers.len() >= 4, "{markers:?}");
    markers
}

/// `packaging/check-no-testbed.sh BINARY`: its exit code and stderr.
fn check_no_testbed(binary: &str) -> (Option<i32>, String) {
    let o = Command::new(format!("{SRC}/packaging/check-no-testbed.sh"))
        .arg(binary)
        .output()
        .expect("run check-no-testbed.sh");
    (
        o.status.code(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// Issue 11: the test bed's test-only parts are a feature nothing but the tests,
/// examples and benches turn on, so `cargo build` (and `make build`, `make demo`,
/// `make deb`, `make rpm`) builds the binary without them.
#[test]
fn the_test_bed_is_a_feature_only_tests_turn_on() {
    let manifest: toml::Value = toml::from_str(&read("Cargo.toml")).expect("Cargo.toml");
    let features = manifest["features"].as_table().expect("[features]");
    assert!(features.contains_key("testbed"), "{features:?}");
    let default: Vec<&str> = features
        .get("default")
        .and_then(|d| d.as_array())
        .map(|a| a.iter().filter_map(|v| v.as_str()).collect())
        .unwrap_or_default();
    assert!(
        !default.iter().any(|f| f.contains("testbed")),
        "a default feature would put the test bed back into the shipped binary: {default:?}"
    );
    // Turned on for tests, examples and benches by the dev-dependency on itself.
    let me = &manifest["dev-dependencies"]["tenure"];
    assert_eq!(me["path"].as_str(), Some("."), "{me:?}");
    assert!(
        me["features"]
            .as_array()
            .is_some_and(|f| f.iter().any(|v| v.as_str() == Some("testbed"))),
        "{me:?}"
    );
    // Nothing is skipped without the feature: a test cannot compile to nothing.
    for kind in ["bin", "test", "example", "bench"] {
        for t in manifest
            .get(kind)
            .and_then(|t| t.as_array())
            .into_iter()
            .flatten()
        {
            assert!(t.get("required-features").is_none(), "[[{kind}]] {t:?}");
        }
    }
}

/// The markers `make deb`/`make rpm` look for are still what the test bed's parts
/// compile in: each one is in its source file and in the binary this run built,
/// which has the feature (a dev-dependency turns it on for the whole test build),
/// and the check finds every one of them there. A binary without the test bed
/// passes it.
#[test]
fn the_test_bed_markers_are_found_where_the_test_bed_is() {
    let bin = env!("CARGO_BIN_EXE_tenure");
    let (code, said) = check_no_testbed(bin);
    assert_eq!(code, Some(1), "the test build carries the test bed: {said}");
    for (file, s) in test_bed_markers() {
        assert!(read(&file).contains(&s), "{s:?} is not in {file} any more");
        assert!(
            said.contains(&format!("\"{s}\"")),
            "{s:?} not found in {bin}: {said}"
        );
    }
    let (code, said) = check_no_testbed("/bin/true");
    assert_eq!(code, Some(0), "{said}");
}

/// A package is never built from a binary with the test bed unless the caller says
/// it is a test build (tests/real_package.rs does): `make deb` and `make rpm` would
/// refuse a release binary the test bed came back into.
#[test]
fn a_package_refuses_a_binary_with_the_test_bed() {
    let bin = env!("CARGO_BIN_EXE_tenure");
    let out = std::env::temp_dir().join(format!("tenure-pkg-refuse-{}", std::process::id()));
    for script in ["build-deb.sh", "build-rpm.sh"] {
        let o = Command::new(format!("{SRC}/packaging/{script}"))
            .args([bin, env!("CARGO_PKG_VERSION"), &out.display().to_string()])
            .output()
            .expect("run the packaging script");
        let said = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success(), "{script} packaged the test build");
        assert!(said.contains("refusing to package"), "{script}: {said}");
        assert!(!out.exists(), "{script} wrote {}", out.display());
    }
}
