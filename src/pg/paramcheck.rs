//! PostgreSQL's own check of the cluster-wide settings (the `config` key's
//! `postgresql.parameters`) before tenure stores them or writes them where a start
//! reads them: a value PostgreSQL refuses in a configuration file stops the next
//! start of every member (`FATAL: invalid value for parameter`), so none may get
//! into `tenure.params.conf`.
//!
//! Owns: running `postgres -C data_directory` with the settings as `-c` options,
//! an empty configuration file (`/dev/null`) and no data directory, so nothing of
//! this node's is read and only the settings themselves are judged, by the very
//! parser a start uses (names, types, units, ranges, enum values, time zones); and
//! reading which setting it refused. Hand-written (a child with a deadline and a
//! line of its stderr) because it runs on the loop's terms: bounded by the
//! caller's deadline, the child killed and left for a later reap past it.
//! Must never: wait past its deadline, read or write a data directory, or run
//! anything but `bin_dir`'s `postgres`.
//!
//! Not judged here, as `postgres -C` does not: whether a library in
//! `shared_preload_libraries` exists, and settings checked against each other at
//! a start (`wal_level` against `max_wal_senders`: `config::cluster` refuses
//! `wal_level = minimal` itself).

use std::io::Read;
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::clock;
use crate::core::time::Instant;

/// A setting PostgreSQL refused, with its own words (`FATAL:` and after).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    pub name: String,
    pub value: String,
    pub why: String,
}

/// The most of the child's stderr kept: its refusal is one line.
const MAX_STDERR: usize = 16 << 10;

/// Children killed at their deadline and not reaped yet (reaped without waiting at
/// the next check).
#[derive(Default)]
pub struct Checker {
    dying: Vec<Child>,
}

impl Checker {
    /// The settings of `params` that `bin_dir/postgres` refuses, each with
    /// PostgreSQL's reason; the rest are accepted. `Err`: no answer (the program
    /// could not run, or did not answer by `deadline`): nothing is known, the
    /// caller keeps what it had and asks again later.
    pub fn check(
        &mut self,
        bin_dir: &Path,
        params: &[(String, String)],
        deadline: Instant,
    ) -> Result<Vec<Refusal>, String> {
        let program = bin_dir.join("postgres");
        let mut left: Vec<&(String, String)> = params.iter().collect();
        let mut refused = Vec::new();
        // PostgreSQL stops at the first setting it refuses: that one is taken out
        // and the rest asked again, once per refused setting.
        while !left.is_empty() {
            let Some(why) = self.run(&program, &left, deadline)? else {
                break;
            };
            let named = refused_name(&why)
                .and_then(|n| left.iter().position(|(k, _)| k.eq_ignore_ascii_case(&n)));
            match named {
                Some(i) => {
                    let (name, value) = left.remove(i);
                    refused.push(Refusal {
                        name: name.clone(),
                        value: value.clone(),
                        why,
                    });
                }
                None => {
                    // The message names no setting of ours as `parameter "NAME"` (an
                    // invalid custom name: "invalid configuration parameter name"):
                    // each alone, to find it.
                    for p in std::mem::take(&mut left) {
                        if let Some(why) = self.run(&program, &[p], deadline)? {
                            refused.push(Refusal {
                                name: p.0.clone(),
                                value: p.1.clone(),
                                why,
                            });
                        }
                    }
                }
            }
        }
        Ok(refused)
    }

    /// One `postgres -C`: `None` when it accepted every setting, else its
    /// `FATAL:` line (or, without one, what it wrote).
    fn run(
        &mut self,
        program: &Path,
        params: &[&(String, String)],
        deadline: Instant,
    ) -> Result<Option<String>, String> {
        self.dying.retain_mut(|c| matches!(c.try_wait(), Ok(None)));
        let mut cmd = Command::new(program);
        // `-C` first: only then does postgres run as root (it refuses otherwise).
        cmd.arg("-C")
            .arg("data_directory")
            .arg("--config-file=/dev/null");
        // Where a start would find its other files: nowhere (nothing is read).
        for k in ["data_directory", "hba_file", "ident_file"] {
            cmd.arg("-c").arg(format!("{k}=/dev/null"));
        }
        for (k, v) in params {
            cmd.arg("-c").arg(format!("{k}={v}"));
        }
        cmd.env_clear()
            .env("LC_ALL", "C")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .process_group(0);
        let mut child = cmd
            .spawn()
            .map_err(|e| format!("cannot run {}: {e}", program.display()))?;
        let exited = match super::procs::pidfd_open(child.id()) {
            Ok(fd) => wait_readable(fd.as_raw_fd(), deadline),
            Err(e) => {
                self.give_up(child);
                return Err(format!("pidfd_open: {e}"));
            }
        };
        if !exited {
            self.give_up(child);
            return Err(format!(
                "{} -C did not answer in time (killed)",
                program.display()
            ));
        }
        // It exited: its stderr is in the pipe (a few lines, far below its size).
        let mut err = Vec::new();
        if let Some(mut pipe) = child.stderr.take() {
            let _ = (&mut pipe).take(MAX_STDERR as u64).read_to_end(&mut err);
        }
        let status = match child.try_wait() {
            Ok(Some(s)) => s,
            _ => {
                self.give_up(child);
                return Err(format!("{} -C: no exit status", program.display()));
            }
        };
        if status.success() {
            return Ok(None);
        }
        let text = String::from_utf8_lossy(&err);
        Ok(Some(fatal_line(&text).unwrap_or_else(|| {
            let t = text.trim();
            if t.is_empty() {
                format!("{} -C failed ({status})", program.display())
            } else {
                t.replace('\n', " ")
            }
        })))
    }

    /// Kill a child past its deadline; it is reaped at a later check.
    fn give_up(&mut self, mut child: Child) {
        let _ = child.kill();
        if matches!(child.try_wait(), Ok(None)) {
            self.dying.push(child);
        }
    }
}

/// `poll(2)` on a pidfd until it turns readable (the process exited: `true`) or
/// `deadline` passes (`false`).
fn wait_readable(fd: i32, deadline: Instant) -> bool {
    loop {
        let left = clock::now().until(deadline);
        if left == Duration::ZERO {
            return false;
        }
        // Rounded up: a remainder under a millisecond still waits.
        let ms = i32::try_from(left.as_micros().div_ceil(1000)).unwrap_or(i32::MAX);
        let mut p = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid, initialised pollfd on our stack and its count; the
        // fd is the caller's open pidfd; the kernel writes only `revents`.
        if unsafe { libc::poll(&mut p, 1, ms) } > 0 {
            return true;
        }
        // Timed out, or interrupted by a signal: the deadline decides.
    }
}

/// What follows `FATAL:` on the first line that has it (the time stamp and pid
/// before it left out), with the `DETAIL:` and `HINT:` lines after it.
fn fatal_line(stderr: &str) -> Option<String> {
    let mut lines = stderr.lines();
    let mut out = lines.find_map(|l| Some(l.split_once("FATAL:")?.1.trim().to_string()))?;
    for l in lines {
        match l.split_once("DETAIL:").or_else(|| l.split_once("HINT:")) {
            Some((_, more)) => {
                out.push_str(" (");
                out.push_str(more.trim());
                out.push(')');
            }
            None => break,
        }
    }
    Some(out)
}

/// The setting a refusal names: the first `parameter "NAME"` in it (every one of
/// PostgreSQL's refusals of a setting says so: "invalid value for parameter",
/// "unrecognized configuration parameter", "parameter ... requires a Boolean
/// value", "... is outside the valid range for parameter", "parameter ... cannot
/// be changed").
fn refused_name(why: &str) -> Option<String> {
    let (_, rest) = why.split_once("parameter \"")?;
    let (name, _) = rest.split_once('"')?;
    Some(name.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_postgresql_refusals() {
        let e = "2026-12-07 17:12:34.979 GMT [1989] FATAL:  invalid value for parameter \
                 \"work_mem\": \"banana\"\n";
        let w = fatal_line(e).unwrap();
        assert_eq!(w, "invalid value for parameter \"work_mem\": \"banana\"");
        assert_eq!(refused_name(&w).as_deref(), Some("work_mem"));
        for (line, name) in [
            ("unrecognized configuration parameter \"foo\"", "foo"),
            (
                "parameter \"enable_seqscan\" requires a Boolean value",
                "enable_seqscan",
            ),
            (
                "1 8kB is outside the valid range for parameter \"shared_buffers\" (16 .. 1073741823)",
                "shared_buffers",
            ),
            (
                "invalid value for parameter \"TimeZone\": \"Mars\"",
                "TimeZone",
            ),
        ] {
            assert_eq!(refused_name(line).as_deref(), Some(name), "{line}");
        }
        assert_eq!(refused_name("could not open file"), None);
        // A LOG line before it is not the refusal.
        let two = "x LOG:  skipping missing configuration file \"/dev/null/a\"\n\
                   y FATAL:  parameter \"a\" cannot be changed\n";
        assert_eq!(
            fatal_line(two).unwrap(),
            "parameter \"a\" cannot be changed"
        );
        let detail = "x FATAL:  invalid configuration parameter name \"x.1y\"\n\
                      x DETAIL:  Custom parameter names must be two or more simple \
                      identifiers separated by dots.\nx LOG:  later\n";
        assert_eq!(
            fatal_line(detail).unwrap(),
            "invalid configuration parameter name \"x.1y\" (Custom parameter names must be \
             two or more simple identifiers separated by dots.)"
        );
        // Named otherwise than `parameter "NAME"`: the check asks one at a time.
        assert_eq!(refused_name(&fatal_line(detail).unwrap()), None);
        assert_eq!(fatal_line("nothing here"), None);
    }
}
