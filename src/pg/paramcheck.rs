//! PostgreSQL's own check of the cluster-wide settings (the `config` key's
//! `postgresql.parameters`) before tenure stores them or writes them where a start
//! reads them: a setting PostgreSQL refuses in a configuration file stops the next
//! start of every member (`FATAL: configuration file ... contains errors`), so none
//! may get into `tenure.params.conf`.
//!
//! Owns: writing the settings as the very text `tenure.params.conf` would hold to a
//! scratch file, running `postgres -C data_directory --config-file=<it>` with no
//! data directory (nothing of this node's is read), so the lexer and the parser a
//! start uses judge them (names, syntax, types, units, ranges, enum values, time
//! zones); reading which settings it refused; and checking that the libraries the
//! `*_preload_libraries` settings name are installed here, which `postgres -C`
//! does not (a missing one stops the next start, or every new connection).
//! Hand-written (a child with a deadline and its stderr) because it runs on the
//! loop's terms: bounded by the caller's deadline, the child killed past it and
//! left for a later reap.
//! Must never: wait past its deadline, read or write a data directory, run anything
//! but `bin_dir`'s `postgres`, or call an output it cannot read a refusal: only a
//! line naming one of the settings is one; anything else is no answer.
//!
//! Not judged here: settings PostgreSQL checks only against the host at a start
//! (`huge_pages = on`, `shared_buffers` beyond the host's memory, a
//! `unix_socket_group` or `log_directory` that is not there) or against each other
//! (`wal_level` against `max_wal_senders`: `config::cluster` refuses the values
//! tenure cannot run with itself).

use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStderr, Command, Stdio};
use std::time::Duration;

use crate::clock;
use crate::core::time::Instant;

/// A setting refused, with PostgreSQL's words (or why its library is missing).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    pub name: String,
    pub value: String,
    pub why: String,
}

/// The most of the child's stderr kept (the rest is read and dropped, so a long
/// message cannot block it).
const MAX_STDERR: usize = 64 << 10;

/// The settings checked, their scratch file, and children killed at their
/// deadline and not reaped yet (reaped without waiting at the next check; the
/// agent's reaper of orphans leaves them alone: [`Checker::owns`]).
pub struct Checker {
    scratch: PathBuf,
    dying: Vec<Child>,
}

impl Checker {
    /// `dir`: a directory of the agent's own (its socket directory) for the
    /// scratch file.
    pub fn new(dir: &Path) -> Checker {
        Checker {
            scratch: dir.join("tenure-paramcheck.conf"),
            dying: Vec::new(),
        }
    }

    /// Whether `pid` is a child of ours not reaped yet.
    pub fn owns(&self, pid: u32) -> bool {
        self.dying.iter().any(|c| c.id() == pid)
    }

    /// Reap killed children that exited since (without waiting).
    pub fn reap(&mut self) {
        self.dying.retain_mut(|c| matches!(c.try_wait(), Ok(None)));
    }

    /// The settings of `params` refused here, each with the reason; the rest are
    /// accepted. `render` is how they are written (`conf::params_conf`). `Err`: no
    /// answer (the program could not run, did not answer by `deadline`, or said
    /// something that names none of the settings): nothing is known, the caller
    /// keeps what it had and asks again later.
    pub fn check(
        &mut self,
        bin_dir: &Path,
        params: &[(String, String)],
        render: impl Fn(&[&(String, String)]) -> String,
        deadline: Instant,
    ) -> Result<Vec<Refusal>, String> {
        let program = bin_dir.join("postgres");
        // Settings that change how PostgreSQL reports (its language, what it
        // logs, where) could hide the refusals of the others: each is judged
        // alone, the rest together.
        let (alone, together): (Vec<_>, Vec<_>) = params
            .iter()
            .partition(|(k, _)| BLINDING.contains(&k.as_str()));
        let mut refused = self.check_group(&program, together, &render, deadline)?;
        for p in alone {
            refused.extend(self.check_group(&program, vec![p], &render, deadline)?);
        }
        // The libraries, for those PostgreSQL accepted.
        let libdir = libdir(bin_dir);
        for (k, v) in params {
            if refused.iter().any(|r| r.name == *k) {
                continue;
            }
            if let Some(why) = library_refusal(libdir.as_deref(), k, v) {
                refused.push(Refusal {
                    name: k.clone(),
                    value: v.clone(),
                    why,
                });
            }
        }
        Ok(refused)
    }

    /// [`Checker::check`] of one group: PostgreSQL reports every unknown name and
    /// stops, then (with none left) every bad value, so a few runs, each taking
    /// out what it refused. An answer that names none of them: each alone, to
    /// find it.
    fn check_group(
        &mut self,
        program: &Path,
        mut left: Vec<&(String, String)>,
        render: &impl Fn(&[&(String, String)]) -> String,
        deadline: Instant,
    ) -> Result<Vec<Refusal>, String> {
        let mut refused = Vec::new();
        while !left.is_empty() {
            let Some(text) = self.run(program, &render(&left), deadline)? else {
                break;
            };
            let mut found = false;
            for (name, why) in named_refusals(&text) {
                if let Some(i) = left.iter().position(|(k, _)| k.eq_ignore_ascii_case(&name)) {
                    let (k, v) = left.remove(i);
                    refused.push(Refusal {
                        name: k.clone(),
                        value: v.clone(),
                        why,
                    });
                    found = true;
                }
            }
            if found {
                continue;
            }
            if left.len() == 1 {
                return Err(format!(
                    "{} -C: {}",
                    program.display(),
                    fatal_line(&text).unwrap_or_else(|| "failed, saying nothing".into())
                ));
            }
            let group = std::mem::take(&mut left);
            for p in &group {
                refused.extend(self.check_group(program, vec![*p], render, deadline)?);
            }
            // What passed alone must pass together too: a failure that names none
            // of them and that no one alone explains is no answer, not an accept.
            let survivors: Vec<&(String, String)> = group
                .into_iter()
                .filter(|(k, _)| !refused.iter().any(|r| r.name == *k))
                .collect();
            if !survivors.is_empty()
                && let Some(text) = self.run(program, &render(&survivors), deadline)?
            {
                return Err(format!(
                    "{} -C refuses these settings together, none alone: {}",
                    program.display(),
                    fatal_line(&text).unwrap_or_else(|| "saying nothing".into())
                ));
            }
        }
        Ok(refused)
    }

    /// One `postgres -C` on `text`: `None` when it accepted all of it, else its
    /// stderr (when it ended with exit 1, PostgreSQL's "contains errors"). `Err`
    /// for anything else.
    fn run(
        &mut self,
        program: &Path,
        text: &str,
        deadline: Instant,
    ) -> Result<Option<String>, String> {
        self.reap();
        if clock::now() >= deadline {
            return Err("no time left before the deadline".into());
        }
        let _ = std::fs::remove_file(&self.scratch);
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&self.scratch)
            .and_then(|mut f| f.write_all(text.as_bytes()))
            .map_err(|e| format!("{}: {e}", self.scratch.display()))?;
        let r = self.run_on_scratch(program, deadline);
        let _ = std::fs::remove_file(&self.scratch);
        r
    }

    fn run_on_scratch(
        &mut self,
        program: &Path,
        deadline: Instant,
    ) -> Result<Option<String>, String> {
        let mut cmd = Command::new(program);
        // `-C` first: only then does postgres run as root (it refuses otherwise).
        cmd.arg("-C")
            .arg("data_directory")
            .arg(format!("--config-file={}", self.scratch.display()));
        // Where a start would find its other files: nowhere (nothing is read).
        for k in ["data_directory", "hba_file", "ident_file"] {
            cmd.arg("-c").arg(format!("{k}=/dev/null"));
        }
        // Its messages untranslated (they are read below); what it needs to load
        // its own libraries kept.
        cmd.env_clear().env("LC_ALL", "C");
        for k in ["PATH", "LD_LIBRARY_PATH"] {
            if let Some(v) = std::env::var_os(k) {
                cmd.env(k, v);
            }
        }
        cmd.stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .process_group(0);
        let mut child = cmd
            .spawn()
            .map_err(|e| format!("cannot run {}: {e}", program.display()))?;
        let pidfd = match super::procs::pidfd_open(child.id()) {
            Ok(fd) => fd,
            Err(e) => {
                self.give_up(child);
                return Err(format!("pidfd_open: {e}"));
            }
        };
        let Some(mut pipe) = child.stderr.take() else {
            self.give_up(child);
            return Err("no stderr pipe".into());
        };
        let mut err = Vec::new();
        if let Err(e) = drain_until_exit(&mut pipe, pidfd.as_raw_fd(), &mut err, deadline) {
            self.give_up(child);
            return Err(format!("{} -C {e}", program.display()));
        }
        let status = match child.try_wait() {
            Ok(Some(s)) => s,
            _ => {
                self.give_up(child);
                return Err(format!("{} -C: no exit status", program.display()));
            }
        };
        let text = String::from_utf8_lossy(&err).into_owned();
        match status.code() {
            Some(0) => Ok(None),
            // PostgreSQL's FATAL exit: what it said is read by the caller.
            Some(1) => Ok(Some(text)),
            _ => Err(format!(
                "{} -C ended with {status}: {}",
                program.display(),
                fatal_line(&text).unwrap_or_default()
            )),
        }
    }

    /// Kill a child past its deadline; it is reaped at a later check.
    fn give_up(&mut self, mut child: Child) {
        let _ = child.kill();
        if matches!(child.try_wait(), Ok(None)) {
            self.dying.push(child);
        }
    }
}

/// Read the child's stderr (non-blocking, at most [`MAX_STDERR`] kept) until its
/// pidfd says it exited and the pipe is empty, or `deadline` (`Err`).
fn drain_until_exit(
    pipe: &mut ChildStderr,
    pidfd: i32,
    out: &mut Vec<u8>,
    deadline: Instant,
) -> Result<(), String> {
    let fd = pipe.as_raw_fd();
    // SAFETY: fcntl on the pipe we own, integer arguments only.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    // SAFETY: as above.
    if flags < 0 || unsafe { libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) } < 0 {
        return Err(format!("stderr: {}", std::io::Error::last_os_error()));
    }
    let mut exited = false;
    let mut chunk = [0u8; 4096];
    loop {
        // What is in the pipe now.
        loop {
            match pipe.read(&mut chunk) {
                Ok(0) => break,
                Ok(n) => {
                    let room = MAX_STDERR.saturating_sub(out.len());
                    out.extend_from_slice(&chunk[..n.min(room)]);
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(_) => break,
            }
        }
        if exited {
            return Ok(());
        }
        let left = clock::now().until(deadline);
        if left == Duration::ZERO {
            return Err("did not answer in time (killed)".into());
        }
        // Rounded up: a remainder under a millisecond still waits.
        let ms = i32::try_from(left.as_micros().div_ceil(1000)).unwrap_or(i32::MAX);
        let mut p = [
            libc::pollfd {
                fd: pidfd,
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        // SAFETY: two valid, initialised pollfds on our stack and their count; the
        // fds are the child's pidfd and our pipe, open for the call; the kernel
        // writes only `revents`.
        if unsafe { libc::poll(p.as_mut_ptr(), 2, ms) } > 0 && p[0].revents & libc::POLLIN != 0 {
            // Exited: one more read takes what it wrote last.
            exited = true;
        }
        // Else data, a timeout or a signal: read, and the deadline decides.
    }
}

/// What follows `FATAL:` on the first line that has it (the time stamp and pid
/// before it left out).
fn fatal_line(stderr: &str) -> Option<String> {
    stderr
        .lines()
        .find_map(|l| Some(l.split_once("FATAL:")?.1.trim().to_string()))
}

/// The settings a run's `LOG:`/`FATAL:` lines refuse: `(NAME, why)` for every
/// line with `parameter "NAME"` (every one of PostgreSQL's refusals of a setting
/// says so: "invalid value for parameter", "unrecognized configuration
/// parameter", "parameter ... requires a Boolean value", "... is outside the
/// valid range for parameter", "parameter ... cannot be changed"), `why` without
/// the scratch file's name and line.
fn named_refusals(stderr: &str) -> Vec<(String, String)> {
    stderr
        .lines()
        .filter_map(|l| {
            let msg = l
                .split_once("LOG:")
                .or_else(|| l.split_once("FATAL:"))?
                .1
                .trim();
            let (_, rest) = msg.split_once("parameter \"")?;
            let (name, _) = rest.split_once('"')?;
            let why = msg.split(" in file \"").next().unwrap_or(msg);
            Some((name.to_string(), why.to_string()))
        })
        .collect()
}

/// Settings that change how PostgreSQL reports its refusals: judged alone.
const BLINDING: &[&str] = &[
    "lc_messages",
    "log_min_messages",
    "log_destination",
    "log_line_prefix",
    "log_error_verbosity",
];

/// PostgreSQL's `$libdir` for the programs in `bin_dir`: `../lib` next to them
/// (Debian's `/usr/lib/postgresql/15`, PGDG's `/usr/pgsql-15`), known by the
/// `plpgsql` every installation has. `None`: not found.
fn libdir(bin_dir: &Path) -> Option<PathBuf> {
    // `../lib/postgresql`: a build from source with its own prefix.
    let base = bin_dir.parent()?;
    [base.join("lib"), base.join("lib").join("postgresql")]
        .into_iter()
        .find(|d| d.join("plpgsql.so").is_file())
}

/// For `shared_preload_libraries`, `session_preload_libraries` and
/// `local_preload_libraries`: why the value cannot be taken here, if it cannot.
/// PostgreSQL's list: comma-separated, each name trimmed and optionally
/// double-quoted; a bare name is looked for in `$libdir` (`$libdir/plugins` for
/// `local_preload_libraries`), as given and with `.so`. Fails closed: a name with
/// a directory in it (cluster-wide settings name libraries, not paths on one
/// host; nothing outside `$libdir` is looked at, so no other file system can
/// hold the loop), or no `$libdir` found, is refused.
fn library_refusal(libdir: Option<&Path>, name: &str, value: &str) -> Option<String> {
    let plugins = match name {
        "shared_preload_libraries" | "session_preload_libraries" => false,
        "local_preload_libraries" => true,
        _ => return None,
    };
    let when = if name == "shared_preload_libraries" {
        "its next start"
    } else {
        "every new connection"
    };
    for item in value.split(',') {
        let item = item.trim();
        let lib = item
            .strip_prefix('"')
            .and_then(|i| i.strip_suffix('"'))
            .unwrap_or(item);
        if lib.is_empty() {
            continue;
        }
        let Some(dir) = libdir else {
            return Some(format!(
                "cannot tell where this PostgreSQL's libraries are (no plpgsql.so in \
                 bin_dir/../lib), so \"{lib}\" cannot be looked for: set it in each \
                 node's [postgresql.parameters]"
            ));
        };
        // `local_preload_libraries` takes only `$libdir/plugins` (PostgreSQL's
        // `check_restricted_library_name`): a bare name or `$libdir/plugins/NAME`.
        let bare = if plugins {
            lib.strip_prefix("$libdir/plugins/").unwrap_or(lib)
        } else {
            lib.strip_prefix("$libdir/").unwrap_or(lib)
        };
        if bare.contains('/') {
            return Some(format!(
                "\"{lib}\" names a path: a cluster-wide setting names libraries in \
                 PostgreSQL's library directory{}; set paths in each node's \
                 [postgresql.parameters]",
                if plugins {
                    " (plugins/ for this one)"
                } else {
                    ""
                }
            ));
        }
        let dir = if plugins {
            dir.join("plugins")
        } else {
            dir.to_path_buf()
        };
        let path = dir.join(bare);
        let so = dir.join(format!("{bare}.so"));
        if !path.is_file() && !so.is_file() {
            return Some(format!(
                "library \"{lib}\" is not installed on this host (no {} or {}): PostgreSQL \
                 would fail {when}",
                path.display(),
                so.display(),
            ));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_postgresql_refusals() {
        let e = "2026-12-07 17:40:45.230 GMT [19215] LOG:  skipping missing configuration \
                 file \"/dev/null/postgresql.auto.conf\"\n\
                 2026-12-07 17:40:45.230 GMT [19215] LOG:  invalid value for parameter \
                 \"work_mem\": \"banana\"\n\
                 x LOG:  1 8kB is outside the valid range for parameter \"shared_buffers\" \
                 (16 .. 1073741823)\n\
                 x LOG:  parameter \"enable_seqscan\" requires a Boolean value\n\
                 x LOG:  unrecognized configuration parameter \"foo\" in file \"/s/c.conf\" line 4\n\
                 x LOG:  invalid value for parameter \"TimeZone\": \"Mars\"\n\
                 x FATAL:  configuration file \"/s/c.conf\" contains errors\n";
        assert_eq!(
            named_refusals(e),
            [
                (
                    "work_mem",
                    "invalid value for parameter \"work_mem\": \"banana\""
                ),
                (
                    "shared_buffers",
                    "1 8kB is outside the valid range for parameter \"shared_buffers\" (16 .. \
                     1073741823)"
                ),
                (
                    "enable_seqscan",
                    "parameter \"enable_seqscan\" requires a Boolean value"
                ),
                ("foo", "unrecognized configuration parameter \"foo\""),
                (
                    "TimeZone",
                    "invalid value for parameter \"TimeZone\": \"Mars\""
                ),
            ]
            .map(|(a, b)| (a.to_string(), b.to_string()))
        );
        assert_eq!(
            fatal_line(e).as_deref(),
            Some("configuration file \"/s/c.conf\" contains errors")
        );
        assert!(named_refusals("x FATAL:  could not load library \"a\"\n").is_empty());
        assert!(named_refusals("could not open file").is_empty());
    }

    #[test]
    fn preload_libraries_are_looked_for_as_postgresql_looks() {
        let dir = std::env::temp_dir().join(format!("tenure-libdir-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("plugins")).unwrap();
        std::fs::write(dir.join("pg_stat_statements.so"), b"").unwrap();
        std::fs::write(dir.join("auto_explain"), b"").unwrap();
        std::fs::write(dir.join("plugins").join("plug.so"), b"").unwrap();
        let here = |v: &str| library_refusal(Some(&dir), "shared_preload_libraries", v);
        for ok in [
            "pg_stat_statements",
            " pg_stat_statements , \"auto_explain\"",
            "$libdir/pg_stat_statements",
            "",
        ] {
            assert_eq!(here(ok), None, "{ok:?}");
        }
        let e = here("pg_stat_statements, pg_nothere").expect("missing");
        assert!(
            e.contains("\"pg_nothere\"") && e.contains("its next start"),
            "{e}"
        );
        for path in ["/usr/lib/x.so", "a/relative/one", "$libdir/sub/x"] {
            assert!(
                here(path).expect("refused").contains("names a path"),
                "{path}"
            );
        }
        assert!(
            library_refusal(Some(&dir), "session_preload_libraries", "pg_nothere")
                .expect("missing")
                .contains("every new connection")
        );
        // local_preload_libraries: only $libdir/plugins.
        assert_eq!(
            library_refusal(Some(&dir), "local_preload_libraries", "plug"),
            None
        );
        assert_eq!(
            library_refusal(
                Some(&dir),
                "local_preload_libraries",
                "$libdir/plugins/plug"
            ),
            None
        );
        assert!(library_refusal(Some(&dir), "local_preload_libraries", "auto_explain").is_some());
        assert!(
            library_refusal(
                Some(&dir),
                "local_preload_libraries",
                "$libdir/auto_explain"
            )
            .expect("refused")
            .contains("names a path")
        );
        // Fails closed where the library directory is not known.
        assert!(
            library_refusal(None, "shared_preload_libraries", "pg_stat_statements")
                .expect("refused")
                .contains("cannot tell where")
        );
        assert_eq!(library_refusal(None, "shared_preload_libraries", ""), None);
        assert_eq!(library_refusal(Some(&dir), "work_mem", "pg_nothere"), None);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
