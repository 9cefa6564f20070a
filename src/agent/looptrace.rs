//! A per-iteration trace of the loop for benchmarks (issue 13 items 1 and 2): off
//! unless `TENURE_LOOP_TRACE` names a file (`{name}` in it becomes the member name).
//!
//! Owns: one text line per iteration — how late it started against its slot on the
//! renewal grid, the renewal's round trip, the renewal's send → the watchdog pet,
//! how long it took, whether it overran `P` (S6 d) or fell a whole period behind
//! the grid, the thread's CPU time per phase (the wait and API service after it,
//! the renewal and its pet, the other etcd calls, the PostgreSQL probe, the core's
//! step, logging the reason and the status snapshot, the actions and the rest), its
//! page faults, and, in a `count-allocs` build, its heap allocations. The line of an
//! iteration is written when the next one begins, so it covers the whole cycle,
//! the wait included. `bench/loop_stress.rs` reads it.
//! Must never: decide anything, allocate while the loop runs (the line is
//! formatted into a stack buffer), or fail the agent (a failed write closes the
//! trace). The trace is I/O on the loop's thread: it is for benchmarks, never on by
//! default (one `write` per iteration to a file the bench keeps on tmpfs).

use std::fs::File;
use std::io::Write;
use std::time::Duration;

use crate::alloc_count::{self, AllocCounts};
use crate::core::time::Instant;

/// Where the thread's CPU time of an iteration went, in the order the loop runs.
#[derive(Clone, Copy, Debug)]
pub(super) enum Phase {
    /// The wait, and the API connections served between iterations.
    Wait = 0,
    /// The confirmed renewal and its pet (leader, tick iterations).
    Renew,
    /// The other etcd calls: side leases, the cluster read, the watch, the lease poll.
    Etcd,
    /// The PostgreSQL probe and the job poll.
    Probe,
    /// `Core::step` and what follows it directly (guardian, events).
    Step,
    /// The reason's text, the log line and the API's status snapshot.
    Log,
    /// The member key, the plan's actions, the status key, pg_hba, notify.
    Act,
}

const PHASES: usize = 7;

/// The header line, naming every column of a trace line.
pub const HEADER: &str = "# t_ms tick late_us rtt_us pet_us took_us over sched leader \
    cpu_wait_us cpu_renew_us cpu_etcd_us cpu_probe_us cpu_step_us cpu_log_us cpu_act_us \
    minflt majflt allocs reallocs alloc_bytes";

/// The trace: `None` inside when it is off (the default), so every call is one branch.
pub(super) struct LoopTrace {
    inner: Option<Box<Inner>>,
}

struct Inner {
    file: File,
    origin: Instant,
    /// The thread's CPU time at the last mark, ns.
    cpu_mark: u64,
    /// What the current line has counted so far.
    line: Line,
    /// Counters at the current line's start.
    faults_at: (u64, u64),
    allocs_at: AllocCounts,
    /// Whether an iteration has begun (so there is a line to write).
    open: bool,
}

#[derive(Clone, Copy, Default)]
struct Line {
    start: Option<Instant>,
    tick: bool,
    late: Option<Duration>,
    rtt: Option<Duration>,
    pet: Option<Duration>,
    took: Option<Duration>,
    over: bool,
    sched: bool,
    leader: bool,
    cpu: [u64; PHASES],
}

impl LoopTrace {
    /// The trace `TENURE_LOOP_TRACE` asks for, or an inert one.
    pub(super) fn from_env(member: &str) -> LoopTrace {
        let Some(path) = std::env::var_os("TENURE_LOOP_TRACE") else {
            return LoopTrace { inner: None };
        };
        let path = path.to_string_lossy().replace("{name}", member);
        let mut file = match File::create(&path) {
            Ok(f) => f,
            Err(e) => {
                log::warn!("TENURE_LOOP_TRACE {path}: {e}; no loop trace");
                return LoopTrace { inner: None };
            }
        };
        let _ = writeln!(
            file,
            "{HEADER}\n# count-allocs {}",
            u8::from(alloc_count::ENABLED)
        );
        log::info!("loop trace: one line per iteration to {path} (a benchmark's setting)");
        LoopTrace {
            inner: Some(Box::new(Inner {
                file,
                origin: crate::clock::now(),
                cpu_mark: thread_cpu_ns(),
                line: Line::default(),
                faults_at: faults(),
                allocs_at: alloc_count::snapshot(),
                open: false,
            })),
        }
    }

    /// An iteration begins at `now`: the previous one's line (its wait included)
    /// is written, and a new one opened.
    pub(super) fn begin(&mut self, now: Instant, tick: bool) {
        alloc_count::iteration();
        let Some(t) = self.inner.as_mut() else {
            return;
        };
        t.mark(Phase::Wait);
        if t.open && t.write_line().is_err() {
            // A full disk or a closed file: the trace stops, the agent does not.
            self.inner = None;
            return;
        }
        t.open = true;
        t.line = Line {
            start: Some(now),
            tick,
            ..Line::default()
        };
        t.faults_at = faults();
        t.allocs_at = alloc_count::snapshot();
    }

    /// How late this tick's iteration started after its slot on the grid.
    pub(super) fn late(&mut self, late: Duration) {
        if let Some(t) = self.inner.as_mut() {
            t.line.late = Some(late);
        }
    }

    /// The tick fell a whole `loop_wait` behind the grid.
    pub(super) fn schedule_overrun(&mut self) {
        if let Some(t) = self.inner.as_mut() {
            t.line.sched = true;
        }
    }

    /// The confirmed renewal's round trip (its send → its outcome).
    pub(super) fn renewal(&mut self, rtt: Duration) {
        if let Some(t) = self.inner.as_mut() {
            t.line.rtt = Some(rtt);
        }
    }

    /// The renewal's send → the pet's return.
    pub(super) fn pet(&mut self, since_send: Duration) {
        if let Some(t) = self.inner.as_mut() {
            t.line.pet = Some(since_send);
        }
    }

    /// The CPU time since the last mark was spent in `phase`.
    pub(super) fn phase(&mut self, phase: Phase) {
        if let Some(t) = self.inner.as_mut() {
            t.mark(phase);
        }
    }

    /// The iteration's work is done (the wait follows): it took `took`, overran its
    /// budget or not, and this node led or not.
    pub(super) fn end(&mut self, took: Duration, over: bool, leader: bool) {
        if let Some(t) = self.inner.as_mut() {
            t.mark(Phase::Act);
            t.line.took = Some(took);
            t.line.over = over;
            t.line.leader = leader;
        }
    }
}

impl Inner {
    fn mark(&mut self, phase: Phase) {
        let now = thread_cpu_ns();
        self.line.cpu[phase as usize] += now.saturating_sub(self.cpu_mark);
        self.cpu_mark = now;
    }

    /// The open line, one `write` from a stack buffer (no allocation).
    fn write_line(&mut self) -> std::io::Result<()> {
        let l = &self.line;
        let (minflt, majflt) = faults();
        let a = alloc_count::snapshot().since(&self.allocs_at);
        let us = |d: Option<Duration>| d.map_or(-1, |d| d.as_micros() as i64);
        let mut buf = [0u8; 512];
        let mut w = &mut buf[..];
        write!(
            w,
            "{} {} {} {} {} {} {} {} {}",
            l.start.map_or(0, |s| s.since(self.origin).as_millis()),
            u8::from(l.tick),
            us(l.late),
            us(l.rtt),
            us(l.pet),
            us(l.took),
            u8::from(l.over),
            u8::from(l.sched),
            u8::from(l.leader),
        )?;
        for c in l.cpu {
            write!(w, " {}", c / 1000)?;
        }
        writeln!(
            w,
            " {} {} {} {} {}",
            minflt.saturating_sub(self.faults_at.0),
            majflt.saturating_sub(self.faults_at.1),
            a.allocs,
            a.reallocs,
            a.bytes
        )?;
        let n = 512 - w.len();
        self.file.write_all(&buf[..n])
    }
}

/// The calling thread's CPU time (user + system), ns; 0 if it cannot be read.
fn thread_cpu_ns() -> u64 {
    use nix::time::{ClockId, clock_gettime};
    clock_gettime(ClockId::CLOCK_THREAD_CPUTIME_ID)
        .map(|t| (t.tv_sec() as u64) * 1_000_000_000 + t.tv_nsec() as u64)
        .unwrap_or(0)
}

/// The calling thread's (minor, major) page faults since it started.
fn faults() -> (u64, u64) {
    // SAFETY: `rusage` is plain integers and timevals: all zeros is a valid value.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `getrusage` only writes the `rusage` behind the valid pointer it is
    // given; RUSAGE_THREAD is a valid `who` on Linux.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut ru) };
    if rc != 0 {
        return (0, 0);
    }
    (ru.ru_minflt as u64, ru.ru_majflt as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The bench parses lines by column (bench/loop_stress.rs): every line has one
    /// field per `HEADER` column, in that order, and an iteration's line is written
    /// when the next one begins.
    #[test]
    fn a_line_per_iteration_with_one_field_per_header_column() {
        let dir = std::env::temp_dir().join(format!("looptrace-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let path = dir.join("pg1.trace");
        let file = File::create(&path).expect("trace file");
        let origin = Instant::from_nanos(1_000_000_000);
        let mut t = LoopTrace {
            inner: Some(Box::new(Inner {
                file,
                origin,
                cpu_mark: thread_cpu_ns(),
                line: Line::default(),
                faults_at: faults(),
                allocs_at: alloc_count::snapshot(),
                open: false,
            })),
        };
        t.begin(origin.add(Duration::from_millis(500)), true);
        t.late(Duration::from_micros(1234));
        t.renewal(Duration::from_micros(2000));
        t.pet(Duration::from_micros(2100));
        t.phase(Phase::Renew);
        t.end(Duration::from_micros(9000), false, true);
        t.begin(origin.add(Duration::from_millis(1000)), false);
        t.end(Duration::from_micros(100), true, false);
        drop(t);
        let text = std::fs::read_to_string(&path).expect("read trace");
        let _ = std::fs::remove_dir_all(&dir);
        let columns = HEADER.trim_start_matches("# ").split_whitespace().count();
        let lines: Vec<&str> = text.lines().filter(|l| !l.starts_with('#')).collect();
        // The second iteration has not been followed by a third: one line.
        assert_eq!(lines.len(), 1, "{text}");
        let f: Vec<&str> = lines[0].split_whitespace().collect();
        assert_eq!(f.len(), columns, "{text}");
        // t_ms tick late_us rtt_us pet_us took_us over sched leader
        assert_eq!(
            &f[..9],
            &["500", "1", "1234", "2000", "2100", "9000", "0", "0", "1"]
        );
    }
}
