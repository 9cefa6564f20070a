//! The packages (issue 11 "Tests"; docs/packaging.md): built by
//! `packaging/build-deb.sh` and `build-rpm.sh` from the binary this test run built
//! (one build profile), checked with lintian, and the `.deb` installed on this
//! machine: every file where docs/packaging.md says, the group, `/usr/bin/tenure
//! --version`, `systemd-analyze verify` silent, then a three-node cluster run by
//! the installed binary with the installed example config (its secrets and
//! host-specific values replaced) and the installed unit's watchdog environment,
//! which fails over; then `dpkg -r` and `dpkg -P` and what each leaves.
//!
//! These tests install into this machine's real `/usr` and `/etc`. A guard purges
//! the package, removes the files the test wrote and the group it created, also
//! when the test fails; a marker file lets the next run clean up after a run that
//! was killed. A `tenure` package or `/etc/tenure` this test did not install is
//! never touched: the test refuses to run.
//!
//! Needs root, dpkg-dev, lintian, rpm, systemd (systemd-analyze), etcd-server,
//! postgresql-15 (the Makefile's DEB_PACKAGES).

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use common::{FAILOVER, settled};

const SRC: &str = env!("CARGO_MANIFEST_DIR");
const BIN: &str = env!("CARGO_BIN_EXE_tenure");
const VERSION: &str = env!("CARGO_PKG_VERSION");
/// Written before `dpkg -i`, removed by the guard: says a `tenure` package
/// installed here is this test's, and whether it created the group.
const MARKER: &str = "/var/tmp/tenure-real-package.installed";
const ETC: &str = "/etc/tenure";
const UNIT: &str = "/usr/lib/systemd/system/tenure.service";
/// The bed's timing (ttl 7, loop 0.5, retry 0.25, margin 0.5): the agent's own W.
const W: Duration = Duration::from_secs(3);

fn output(prog: &str, args: &[&str]) -> Output {
    Command::new(prog)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("spawn {prog}: {e} (is it installed? make deps)"))
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// `prog args`, which must succeed: its stdout.
fn run(prog: &str, args: &[&str]) -> String {
    let o = output(prog, args);
    assert!(
        o.status.success(),
        "{prog} {args:?}: {}\n{}{}",
        o.status,
        text(&o.stdout),
        text(&o.stderr)
    );
    text(&o.stdout)
}

/// `packaging/<script> --test-build BIN VERSION out`: the package it wrote. This
/// run's binary has the `testbed` feature (the tests' dev-dependency turns it on
/// for the whole build), which a package refuses unless told it is a test build
/// (tests/packaging_files.rs checks the refusal; docs/packaging.md what differs).
fn build(script: &str, out: &Path) -> PathBuf {
    let s = format!("{SRC}/packaging/{script}");
    let printed = run(
        &s,
        &["--test-build", BIN, VERSION, &out.display().to_string()],
    );
    let path = PathBuf::from(printed.lines().last().unwrap_or_default().trim());
    assert!(
        path.is_file(),
        "{script} printed {printed:?}, not a package"
    );
    path
}

/// docs/packaging.md's list of installed files: `(path, deb_only)`.
fn documented_files() -> Vec<(String, bool)> {
    let doc = std::fs::read_to_string(format!("{SRC}/docs/packaging.md")).expect("packaging.md");
    let (_, rest) = doc
        .split_once("<!-- package-files:begin -->")
        .expect("package-files:begin");
    let (list, _) = rest
        .split_once("<!-- package-files:end -->")
        .expect("package-files:end");
    let files: Vec<(String, bool)> = list
        .lines()
        .map(str::trim)
        .filter(|l| l.starts_with('/'))
        .map(|l| {
            let mut w = l.split_whitespace();
            let path = w.next().unwrap_or_default().to_string();
            (path, w.next() == Some("deb-only"))
        })
        .collect();
    assert!(files.len() > 10, "docs/packaging.md lists {files:?}");
    files
}

fn set(items: impl IntoIterator<Item = String>) -> BTreeSet<String> {
    items.into_iter().collect()
}

/// The regular files (and links) in a `.deb`, from `dpkg-deb -c`.
fn deb_files(deb: &Path) -> BTreeSet<String> {
    set(run("dpkg-deb", &["-c", &deb.display().to_string()])
        .lines()
        .filter(|l| !l.starts_with('d'))
        .filter_map(|l| l.split_whitespace().nth(5))
        .map(|p| p.trim_start_matches('.').to_string()))
}

/// The package's maintainer scripts from `dpkg-deb -e`: name -> text.
fn deb_scripts(deb: &Path, dir: &Path) -> BTreeMap<String, String> {
    let ctl = dir.join("control");
    run(
        "dpkg-deb",
        &["-e", &deb.display().to_string(), &ctl.display().to_string()],
    );
    ["preinst", "postinst", "prerm", "postrm"]
        .iter()
        .filter_map(|s| {
            std::fs::read_to_string(ctl.join(s))
                .ok()
                .map(|t| (s.to_string(), t))
        })
        .collect()
}

/// A fragment of packaging/scripts/ as the packages carry it: each line trimmed,
/// comments and blank lines kept out, the sysusers.d entry filled in.
fn fragment(name: &str) -> Vec<String> {
    let sysusers = std::fs::read_to_string(format!("{SRC}/packaging/tenure.sysusers"))
        .expect("tenure.sysusers");
    let entry = sysusers
        .lines()
        .find(|l| !l.trim().is_empty() && !l.trim_start().starts_with('#'))
        .expect("a sysusers.d entry")
        .trim()
        .to_string();
    let t = std::fs::read_to_string(format!("{SRC}/packaging/scripts/{name}")).expect(name);
    code_lines(&t.replace("@SYSUSERS_LINE@", &entry))
}

fn code_lines(t: &str) -> Vec<String> {
    t.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(String::from)
        .collect()
}

/// Whether `lines` holds `frag` as one consecutive run.
fn contains_run(lines: &[String], frag: &[String]) -> bool {
    lines.windows(frag.len()).any(|w| w == frag)
}

/// No script may enable, start, stop or restart the service (a restart on the
/// leader's host is a failover); systemctl only ever reloads.
fn never_touches_the_service(what: &str, script: &str) {
    for l in code_lines(script) {
        for bad in ["deb-systemd-invoke", "invoke-rc.d", "service tenure"] {
            assert!(!l.contains(bad), "{what}: {l}");
        }
        if l.contains("systemctl") {
            assert!(l.contains("daemon-reload"), "{what} runs systemctl: {l}");
        }
    }
}

fn group_exists(g: &str) -> bool {
    output("getent", &["group", g]).status.success()
}

fn package_status() -> Option<String> {
    let o = output("dpkg-query", &["-W", "-f=${Status}", "tenure"]);
    o.status.success().then(|| text(&o.stdout))
}

/// The installed `.deb`, purged (with what the test wrote and the group it made)
/// when dropped.
struct Installed {
    group_created: bool,
}

impl Installed {
    fn install(deb: &Path) -> Installed {
        clean_up_a_killed_run();
        if let Some(st) = package_status().filter(|s| !s.contains("not-installed")) {
            panic!(
                "a tenure package is on this machine ({st}) and this test did not install \
                 it: remove it (dpkg -P tenure) to run the package tests"
            );
        }
        assert!(
            !Path::new(ETC).exists(),
            "{ETC} exists and this test did not make it: move it away to run the package tests"
        );
        let group_created = !group_exists("tenure");
        std::fs::write(MARKER, format!("group_created={group_created}\n")).expect("marker");
        let guard = Installed { group_created };
        run("dpkg", &["-i", &deb.display().to_string()]);
        guard
    }
}

impl Drop for Installed {
    fn drop(&mut self) {
        purge_everything(self.group_created);
    }
}

fn purge_everything(group_created: bool) {
    let _ = output("dpkg", &["-P", "tenure"]);
    // Only files this test writes: the user's config and the test's copies.
    for f in ["tenure.toml", "tenure.example.toml.dpkg-old"] {
        let _ = std::fs::remove_file(Path::new(ETC).join(f));
    }
    let _ = std::fs::remove_dir(ETC);
    if group_created {
        let _ = output("groupdel", &["tenure"]);
    }
    let _ = std::fs::remove_file(MARKER);
}

/// A run killed before its guard dropped left the package installed: the marker
/// says so, and whether that run created the group.
fn clean_up_a_killed_run() {
    if let Ok(m) = std::fs::read_to_string(MARKER) {
        eprintln!("cleaning up after a killed run of this test ({MARKER})");
        purge_everything(m.contains("group_created=true"));
    }
}

/// The installed example with the bed's values in place of its secrets and its
/// host-specific ones (addresses, directories, timing, the watchdog): every key
/// the bed's config sets replaces the example's or is added to its table; the
/// example's own `connect_address`/`connect_url` (its made-up 10.0.0.21) go, so
/// they default to the bed's listen addresses; everything else is the example's.
fn example_with_bed_values(example: &str, bed: &str) -> String {
    fn key_of(line: &str) -> Option<&str> {
        let l = line.trim_start();
        if l.starts_with('#') || l.starts_with('[') {
            return None;
        }
        l.split_once('=').map(|(k, _)| k.trim())
    }
    fn header(line: &str) -> Option<String> {
        let l = line.trim();
        (l.starts_with('[') && l.ends_with(']')).then(|| l[1..l.len() - 1].trim().to_string())
    }
    // The bed's `key = value` lines, by table.
    let mut bed_keys: Vec<(String, String, String)> = Vec::new();
    let mut table = String::new();
    for line in bed.lines() {
        if let Some(h) = header(line) {
            table = h;
        } else if let Some(k) = key_of(line) {
            bed_keys.push((table.clone(), k.to_string(), line.to_string()));
        }
    }
    let dropped = [("postgresql", "connect_address"), ("api", "connect_url")];
    let mut used = vec![false; bed_keys.len()];
    let mut out = String::new();
    let mut table = String::new();
    let mut seen_tables = BTreeSet::new();
    let flush = |table: &str, used: &mut Vec<bool>, out: &mut String| {
        for (i, (t, _, line)) in bed_keys.iter().enumerate() {
            if t == table && !used[i] {
                out.push_str(line);
                out.push('\n');
                used[i] = true;
            }
        }
    };
    for line in example.lines() {
        if let Some(h) = header(line) {
            flush(&table, &mut used, &mut out);
            table = h;
            seen_tables.insert(table.clone());
        } else if let Some(k) = key_of(line) {
            if let Some(i) = bed_keys
                .iter()
                .position(|(t, bk, _)| *t == table && bk == k)
            {
                out.push_str(&bed_keys[i].2);
                out.push('\n');
                used[i] = true;
                continue;
            }
            if dropped.contains(&(table.as_str(), k)) {
                out.push_str(&format!("# (the test's bed: default) {line}\n"));
                continue;
            }
        }
        out.push_str(line);
        out.push('\n');
    }
    flush(&table, &mut used, &mut out);
    // Tables the example does not have (none today) come last, whole.
    let missing: BTreeSet<String> = bed_keys
        .iter()
        .filter(|(t, _, _)| !seen_tables.contains(t) && !t.is_empty())
        .map(|(t, _, _)| t.clone())
        .collect();
    for t in missing {
        out.push_str(&format!("\n[{t}]\n"));
        flush(&t, &mut used, &mut out);
    }
    out
}

/// The whole `.deb` route on this machine, from build to purge.
#[test]
fn real_package_deb_installs_runs_a_failover_and_purges() {
    let work = tenure::testbed::scratch_dir("pkg-deb").expect("scratch dir");
    let deb = build("build-deb.sh", &work);

    // lintian: no error, and every warning is one docs/packaging.md justifies.
    let lint = output("lintian", &[&deb.display().to_string()]);
    let said = text(&lint.stdout);
    println!("lintian:\n{said}");
    let doc = std::fs::read_to_string(format!("{SRC}/docs/packaging.md")).expect("doc");
    for l in said.lines() {
        assert!(!l.starts_with("E:"), "lintian error: {l}\n{said}");
        if l.starts_with("W:") {
            let tag = l.split_whitespace().nth(2).unwrap_or(l);
            assert!(
                doc.contains(&format!("`{tag}`")),
                "lintian warning {tag} is not justified in docs/packaging.md"
            );
        }
    }
    assert!(
        lint.status.success(),
        "lintian: {}{}",
        lint.status,
        text(&lint.stderr)
    );

    // The scripts never start, stop or restart tenure; the group is created by
    // the shared fragment.
    let scripts = deb_scripts(&deb, &work);
    for (name, s) in &scripts {
        never_touches_the_service(name, s);
    }
    let postinst = code_lines(scripts.get("postinst").expect("a postinst"));
    assert!(
        contains_run(&postinst, &fragment("group.sh")),
        "{postinst:?}"
    );

    let installed = Installed::install(&deb);

    // Every documented file, and only those, where the docs say.
    let documented = set(documented_files().into_iter().map(|(p, _)| p));
    let listed = set(run("dpkg", &["-L", "tenure"])
        .lines()
        .filter(|p| !Path::new(p).is_dir())
        .map(String::from));
    assert_eq!(listed, documented, "dpkg -L against docs/packaging.md");
    for f in &documented {
        assert!(Path::new(f).is_file(), "{f} missing after dpkg -i");
    }
    assert!(group_exists("tenure"), "dpkg -i created no tenure group");
    let etc = std::fs::metadata(ETC).expect("/etc/tenure");
    let tenure_gid = run("getent", &["group", "tenure"])
        .split(':')
        .nth(2)
        .and_then(|g| g.trim().parse::<u32>().ok())
        .expect("tenure gid");
    assert_eq!(
        (etc.permissions().mode() & 0o7777, etc.uid(), etc.gid()),
        (0o750, 0, tenure_gid),
        "/etc/tenure is root:tenure 0750"
    );

    // The installed binary is the one built, and says which revision.
    let built = run(BIN, &["--version"]);
    assert_eq!(run("/usr/bin/tenure", &["--version"]), built);
    assert!(
        built.starts_with(&format!("tenure {VERSION} (git ")),
        "{built}"
    );

    // systemd-analyze verify prints nothing on the installed units, and the
    // users and groups they name exist.
    let unit_text = std::fs::read_to_string(UNIT).expect("installed unit");
    for unit in [UNIT, "tenure@main.service"] {
        let v = output("systemd-analyze", &["verify", "--man=no", unit]);
        let said = format!("{}{}", text(&v.stdout), text(&v.stderr));
        assert!(
            v.status.success() && said.trim().is_empty(),
            "systemd-analyze verify {unit}: {}: {said}",
            v.status
        );
    }
    for l in unit_text.lines() {
        let (kind, names) = match l.split_once('=') {
            Some(("User", v)) => ("passwd", v),
            Some(("Group" | "SupplementaryGroups", v)) => ("group", v),
            _ => continue,
        };
        for n in names.split_whitespace() {
            assert!(
                output("getent", &[kind, n]).status.success(),
                "{l}: no {kind} entry for {n}"
            );
        }
    }

    // The installed example is valid as shipped.
    let example_path = format!("{ETC}/tenure.example.toml");
    run("/usr/bin/tenure", &["check-config", &example_path]);
    let example = std::fs::read_to_string(&example_path).expect("example");
    assert!(
        example.contains("change-me"),
        "the example's placeholder secrets"
    );

    // The installed binary, the installed example (secrets and host values
    // replaced) and the installed unit's watchdog environment: a cluster that
    // fails over.
    {
        let mut opts = common::options("pkg", "failover");
        opts.binary = "/usr/bin/tenure".into();
        opts.start_agents = false;
        opts.watchdog = vec![common::unit_environment(&unit_text); 3];
        let mut c = common::start(opts);
        for i in 0..c.node_count() {
            let path = c.config_path(i).to_path_buf();
            let bed = std::fs::read_to_string(&path).expect("bed config");
            let merged = example_with_bed_values(&example, &bed);
            // A placeholder in a comment is no secret left (the example's optional
            // `[api] password` is commented out); a key set to one is.
            assert!(
                !merged
                    .lines()
                    .filter(|l| !l.trim_start().starts_with('#'))
                    .any(|l| l.contains("change-me")),
                "a secret left:\n{merged}"
            );
            std::fs::write(&path, &merged).expect("write config");
            run(
                "/usr/bin/tenure",
                &["check-config", &path.display().to_string()],
            );
            if i == 0 {
                // The user's own config, for the removal checks below.
                std::fs::write(format!("{ETC}/tenure.toml"), &merged).expect("user config");
            }
        }
        for i in 0..c.node_count() {
            c.start_agent(i).expect("start agent");
        }
        let p = settled(&mut c);
        common::check_unit_notify(&c, W);
        let mut probe = common::probe_on(&c, p);
        let crash = c.host_crash(p).expect("host crash");
        let np = c
            .wait_new_primary(p, FAILOVER)
            .unwrap_or_else(|| panic!("no new primary{}", c.logs_tail(40)));
        tenure::testbed::wait_for(Duration::from_secs(10), Duration::from_millis(20), || {
            probe.first_ack_after(np, crash)
        })
        .unwrap_or_else(|| panic!("no write on {}{}", c.name(np), c.logs_tail(30)));
        probe.stop(Duration::from_secs(2));
        probe.check_no_overlap(p, np, crash).unwrap();
        common::only_primary(&c, np);
        println!(
            "/usr/bin/tenure with the installed example: {} crashed, {} took over",
            c.name(p),
            c.name(np)
        );
    }

    // An upgrade (the same package again) keeps an edited example and the user's
    // config as they are.
    let edited = format!("{example}\n# edited by the operator\n");
    std::fs::write(&example_path, &edited).expect("edit example");
    let user_cfg = std::fs::read_to_string(format!("{ETC}/tenure.toml")).expect("user config");
    run("dpkg", &["-i", &deb.display().to_string()]);
    assert_eq!(std::fs::read_to_string(&example_path).ok(), Some(edited));
    assert_eq!(
        std::fs::read_to_string(format!("{ETC}/tenure.toml")).ok(),
        Some(user_cfg.clone())
    );

    // dpkg -r: everything but the conffile goes; the user's config stays.
    run("dpkg", &["-r", "tenure"]);
    assert!(
        package_status().is_some_and(|s| s.contains("config-files")),
        "{:?}",
        package_status()
    );
    for f in &documented {
        assert_eq!(
            Path::new(f).exists(),
            *f == example_path,
            "{f} after dpkg -r"
        );
    }
    assert_eq!(
        std::fs::read_to_string(format!("{ETC}/tenure.toml")).ok(),
        Some(user_cfg.clone()),
        "dpkg -r kept the user's config"
    );

    // dpkg -P: the conffile and the statoverride go; the user's config and the
    // group stay (docs/packaging.md).
    run("dpkg", &["-P", "tenure"]);
    assert!(
        !Path::new(&example_path).exists(),
        "dpkg -P removes the example"
    );
    assert_eq!(
        std::fs::read_to_string(format!("{ETC}/tenure.toml")).ok(),
        Some(user_cfg),
        "dpkg -P keeps the user's config"
    );
    let overrides = run("dpkg-statoverride", &["--list"]);
    assert!(!overrides.contains(ETC), "statoverride left: {overrides}");
    assert!(
        group_exists("tenure"),
        "the group stays after a purge (documented)"
    );

    drop(installed);
    assert!(!Path::new(ETC).exists(), "the guard cleaned {ETC}");
    let _ = std::fs::remove_dir_all(&work);
}

/// The RPM carries the `.deb`'s files at the same paths (docs/packaging.md's list
/// minus the Debian packaging changelog), the example as `%config(noreplace)`,
/// `/etc/tenure` as root:tenure 0750, and its scripts run the same group creation
/// and reloads and never touch the service. Queried, not installed.
#[test]
fn real_package_rpm_matches_the_deb() {
    let work = tenure::testbed::scratch_dir("pkg-rpm").expect("scratch dir");
    let rpm = build("build-rpm.sh", &work);
    let deb = build("build-deb.sh", &work);
    let r = rpm.display().to_string();

    let documented = documented_files();
    let common_files = set(documented
        .iter()
        .filter(|(_, deb_only)| !deb_only)
        .map(|(p, _)| p.clone()));
    let deb_only = set(documented
        .iter()
        .filter(|(_, deb_only)| *deb_only)
        .map(|(p, _)| p.clone()));

    // rpm -qpl lists directories too: keep what is not a directory.
    let modes = run(
        "rpm",
        &["-qp", "--qf", "[%{FILEMODES:perms} %{FILENAMES}\n]", &r],
    );
    let rpm_files = set(modes
        .lines()
        .filter(|l| !l.starts_with('d'))
        .filter_map(|l| l.split_whitespace().nth(1))
        .map(String::from));
    let qpl = set(run("rpm", &["-qpl", &r]).lines().map(String::from));
    assert!(rpm_files.is_subset(&qpl), "{rpm_files:?} in {qpl:?}");
    assert_eq!(
        rpm_files, common_files,
        "rpm files against docs/packaging.md"
    );
    let deb_list = deb_files(&deb);
    assert_eq!(
        deb_list
            .difference(&rpm_files)
            .cloned()
            .collect::<BTreeSet<_>>(),
        deb_only,
        "the .deb has the rpm's files plus its packaging changelog"
    );
    assert!(rpm_files.is_subset(&deb_list));

    let conf = run("rpm", &["-qpc", &r]);
    assert_eq!(conf.trim(), "/etc/tenure/tenure.example.toml");
    let noreplace = run(
        "rpm",
        &["-qp", "--qf", "[%{FILEFLAGS:fflags} %{FILENAMES}\n]", &r],
    );
    assert!(
        noreplace
            .lines()
            .any(|l| l.ends_with(" /etc/tenure/tenure.example.toml") && l.contains('n')),
        "%config(noreplace): {noreplace}"
    );
    let verbose = run("rpm", &["-qplv", &r]);
    let etc = verbose
        .lines()
        .find(|l| l.ends_with(" /etc/tenure"))
        .expect("/etc/tenure in the rpm");
    let f: Vec<&str> = etc.split_whitespace().collect();
    assert_eq!(
        (f[0], f[2], f[3]),
        ("drwxr-x---", "root", "tenure"),
        "{etc}"
    );

    // The same group creation, the same reloads, never the service.
    let scripts = run("rpm", &["-qp", "--scripts", &r]);
    never_touches_the_service("rpm scriptlets", &scripts);
    let pre = scripts
        .split_once("preinstall scriptlet")
        .and_then(|(_, rest)| rest.split("scriptlet").next())
        .expect("a %pre");
    let rpm_pre = code_lines(pre);
    assert!(contains_run(&rpm_pre, &fragment("group.sh")), "{pre}");
    for which in ["postinstall scriptlet", "postuninstall scriptlet"] {
        let part = scripts
            .split_once(which)
            .and_then(|(_, rest)| rest.split("scriptlet (using").next())
            .unwrap_or_else(|| panic!("no {which}: {scripts}"));
        assert!(
            contains_run(&code_lines(part), &fragment("reload.sh")),
            "{which}: {part}"
        );
    }
    let deb_scripts = deb_scripts(&deb, &work);
    let postinst = code_lines(&deb_scripts["postinst"]);
    let postrm = code_lines(&deb_scripts["postrm"]);
    assert!(contains_run(&postinst, &fragment("group.sh")));
    assert!(contains_run(&postinst, &fragment("reload.sh")));
    assert!(contains_run(&postrm, &fragment("reload.sh")));
    let _ = std::fs::remove_dir_all(&work);
}
