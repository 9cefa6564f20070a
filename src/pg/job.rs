//! Supervised jobs: initdb, a replica's build (`pg_basebackup` or the operator's
//! `create_replica_methods`, tried in order), rewind, start, stop — each a short
//! list of steps, child processes run one after another with quick file edits in
//! between.
//!
//! Owns: building each job's steps, spawning children (as the PostgreSQL OS user,
//! in their own process group, output to the job log), advancing on `poll`, a
//! replica build's fallback from one method to the next, and a standby start's
//! floor (`pg_controldata` and `postgres -C` run as steps before it, their output
//! kept: `hotstandby` decides). Must never: wait for a
//! child (only `try_wait`), remove anything but its own temp files and its own
//! build directory (`<data>.basebackup-tmp`, and that only through a child, never
//! in the loop), let a copy into the data directory before `check_copy` passed, or
//! let a child inherit a password in its arguments (passwords go through 0600
//! files or stdin).

use std::borrow::Cow;
use std::collections::VecDeque;
use std::ffi::OsString;
use std::fs;
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::clock;
use crate::config::ReplicaMethod;
use crate::core::model::{DataDir, Job, JobKind};
use crate::core::time::Instant;

use super::{ConnTarget, PgCtl, PgError, conf, hotstandby, io_err};

/// A child process to run.
struct Cmd {
    /// Names the step in reports ("initdb", "pg_basebackup", a replica method's
    /// name, ...).
    what: Cow<'static, str>,
    /// Absolute: PostgreSQL's programs in `bin_dir`, or a replica method's own.
    program: PathBuf,
    args: Vec<OsString>,
    env: Vec<(&'static str, OsString)>,
    stdin: Option<PathBuf>,
    /// When it exits, its process group must be gone before the job goes on
    /// (`advance`): a replica method's leftover writers would write into the
    /// next method's copy, or into the copy being installed (review H1).
    drain: bool,
    /// The longest it may run (`[postgresql] create_replica_timeout` for replica
    /// methods, `[bootstrap] post_bootstrap_timeout`; only with `drain`): then its
    /// process group is killed and it has failed.
    limit: Option<Limit>,
}

/// A child's deadline and the setting it comes from (named in reports).
#[derive(Clone, Copy, Debug)]
struct Limit {
    after: Duration,
    setting: &'static str,
}

/// A quick in-process step between children.
enum Local {
    WriteConfig(Option<ConnTarget>),
    WriteHba,
    RemoveSignals,
    TouchStandby,
    /// Rename our finished basebackup copy into place (the data dir is absent or
    /// an empty directory, which is removed with rmdir: never anything with files).
    InstallBasebackup(PathBuf),
    /// Make our own build directory for a replica build's method (removed just
    /// before by a child, `remove_build_dir`): empty, 0700, owned by the
    /// PostgreSQL user.
    MakeBuildDir(PathBuf),
    /// Check a replica build's copy before it is moved into place: a cluster, of
    /// this cluster's system identifier; and make it a plain standby's data
    /// (`check_copy`).
    CheckCopy(PathBuf),
    /// Fail unless no process of this PostgreSQL remains (fail-closed: an
    /// unreadable process table is a failure).
    RequireStopped,
    /// Rename the data directory to `<data_dir>.aside-<unix time>` (never delete,
    /// DESIGN §3a); the new name goes into the job's report.
    MoveAside,
    /// The bootstrap finished: its directory is a cluster now, no longer held
    /// (`<data_dir>.building` removed).
    RemoveMark,
}

enum Step {
    Run(Cmd),
    /// A child whose output (stdout and stderr, from the job log) is kept for a
    /// later step, whatever its exit: it never fails the job.
    Capture(Cmd),
    /// `pg_ctl start` of a standby (built when the job is planned, so a server
    /// log that cannot be prepared refuses the job before anything stops), with
    /// the settings a hot standby needs at the primary's values raised to them
    /// when the files set less (`hotstandby`), from what the `Capture` steps
    /// before it kept.
    StartStandby(Cmd),
    Local(&'static str, Local),
    /// From here on, a failed step is followed by these steps (then the job
    /// reports the failure): what the steps after this one start, such as the
    /// bootstrap's temporary server, is stopped, not left running.
    OnFailure(VecDeque<Step>),
}

struct Running {
    child: Child,
    what: Cow<'static, str>,
    /// Where this child's output starts in the job log.
    log_offset: u64,
    /// `Cmd::drain`.
    drain: bool,
    /// Drained: the processes of its group still running when it exited.
    left: Vec<u32>,
    /// `Cmd::limit`, the instant it runs out (from the start), and whether it
    /// was killed for it.
    limit: Option<Limit>,
    deadline: Option<Instant>,
    timed_out: bool,
    /// `Step::Capture`: its output is kept in `RunningJob::captured`.
    capture: bool,
}

/// A finished child whose process group still had members when it exited: they
/// were sent SIGKILL (while the exited leader, not yet reaped, still held the
/// group's id), and the job waits for them to be gone before it goes on.
struct Draining {
    pgid: libc::pid_t,
    status: std::process::ExitStatus,
    what: Cow<'static, str>,
    log_offset: u64,
    /// The job ends with a failure (no other method) if any remain by then.
    until: Instant,
    /// The processes of its group that were still running when it exited (and
    /// were killed): a method that exits before the writers it started is a
    /// failed one, whatever its status (review of session 18, M1).
    left: Vec<u32>,
    /// Killed at its limit (`create_replica_timeout`, ...): failed, whatever its
    /// status.
    timed_out: Option<Limit>,
}

/// The most of a captured child's output kept.
const CAPTURE_MAX: u64 = 16 << 10;

/// How long a killed method's process group may take to be gone.
const DRAIN_LIMIT: Duration = Duration::from_secs(30);

/// Whether any process of group `pgid` remains (signal 0 sends nothing; EPERM:
/// one exists that we may not signal).
fn group_alive(pgid: libc::pid_t) -> bool {
    nix::sys::signal::killpg(nix::unistd::Pid::from_raw(pgid), None)
        .map_or_else(|e| e != nix::errno::Errno::ESRCH, |()| true)
}

pub(super) struct RunningJob {
    kind: JobKind,
    since: Instant,
    steps: VecDeque<Step>,
    child: Option<Running>,
    /// Removed when the job ends, whatever the outcome (password files).
    temp_files: Vec<PathBuf>,
    /// Set when the job ended (reported by the next poll).
    outcome: Option<Result<(), String>>,
    /// What a step wants said in the job's report (where it moved the data to).
    notes: Vec<String>,
    /// Set by a fence (`abort`): the remaining steps were dropped, and the job
    /// reports failure whatever its last child did.
    aborted: Option<String>,
    /// A replica build's later methods (`[postgresql] create_replica_methods`),
    /// each with all its steps, tried in order after a failed one while nothing
    /// was installed and no fence is under way.
    alternatives: VecDeque<(String, VecDeque<Step>)>,
    /// The replica method whose steps run now (`None`: not a replica build).
    method: Option<String>,
    /// No other replica method may run any more: the copy's install started, or
    /// a method's processes or files are where no copy may be built next to them.
    final_method: bool,
    /// A replica build's directory (`build_dir`), removed by a last step when
    /// every method failed.
    build_dir: Option<PathBuf>,
    /// Every replica method failed, with this report: the job ends with it once
    /// its last step (removing the build directory) ran.
    failed: Option<String>,
    /// A finished child's leftover processes, killed and waited for.
    draining: Option<Draining>,
    /// `Step::OnFailure`'s steps: run after a failed step, before the job ends.
    cleanup: VecDeque<Step>,
    /// What `Step::Capture` children printed (`Err`: they failed, with why).
    captured: Vec<(Cow<'static, str>, Result<String, String>)>,
}

impl RunningJob {
    pub(super) fn child_pid(&self) -> Option<u32> {
        self.child.as_ref().map(|r| r.child.id())
    }

    pub(super) fn kind(&self) -> &JobKind {
        &self.kind
    }

    /// A fence is under way (S1): no step planned before it may run after it — a
    /// restart's `pg_ctl start` above all. The child running now is the fence's to
    /// kill; the job then reports failure with `why`.
    pub(super) fn abort(&mut self, why: &str) {
        self.steps.clear();
        self.alternatives.clear();
        // The fence stops what they would have stopped, and nothing planned
        // before it runs after it.
        self.cleanup.clear();
        self.aborted.get_or_insert_with(|| why.to_string());
    }

    /// SIGKILL the current child's process group (pg_basebackup forks a WAL
    /// streamer; pg_ctl's postmaster runs in its own session and is not hit).
    pub(super) fn kill(&mut self) {
        if let Some(mut r) = self.child.take() {
            let pid = r.child.id() as libc::pid_t;
            // SAFETY: kill() on our own child's process group (it is the group
            // leader: spawned with process_group(0)); no memory effects.
            unsafe {
                libc::kill(-pid, libc::SIGKILL);
            }
            let _ = r.child.kill();
            // Reap without blocking for long: SIGKILL is prompt.
            let until = clock::now().add(Duration::from_millis(200));
            while clock::now() < until {
                if !matches!(r.child.try_wait(), Ok(None)) {
                    break;
                }
                std::thread::sleep(Duration::from_millis(2));
            }
        }
    }
}

pub(super) fn start(
    ctl: &mut PgCtl,
    kind: &JobKind,
    source: Option<&ConnTarget>,
    now: Instant,
) -> Result<(), PgError> {
    if let Some(j) = &ctl.job {
        return Err(PgError::Busy(format!("{:?} since {}", j.kind, j.since)));
    }
    if matches!(kind, JobKind::InitDb)
        && let Some((pgid, what)) = &ctl.lingering
        && group_alive(*pgid)
    {
        // Nor a bootstrap next to a killed post_bootstrap's processes, which may
        // still reach the new cluster's socket.
        return Err(PgError::Busy(format!(
            "processes of {what} (process group {pgid}) outlived SIGKILL: no bootstrap \
             runs until they are gone (a process stuck in uninterruptible I/O: check its \
             storage)"
        )));
    }
    if matches!(kind, JobKind::Basebackup { .. })
        && let Some((pgid, what)) = &ctl.lingering
    {
        // INVARIANT: no build next to a killed method's processes that may still
        // write (they were given the build directory).
        if group_alive(*pgid) {
            return Err(PgError::Busy(format!(
                "processes of replica method {what} (process group {pgid}) outlived \
                 SIGKILL and may still write into the build directory: no replica is \
                 built until they are gone (a process stuck in uninterruptible I/O: \
                 check its storage)"
            )));
        }
        ctl.lingering = None;
    }
    if matches!(
        kind,
        JobKind::InitDb | JobKind::Basebackup { .. } | JobKind::Rewind { .. }
    ) {
        // The data directory's pg_hba.conf is about to be the source's (or
        // initdb's): write ours again afterwards (`PgCtl::set_hba_hosts`).
        ctl.hba_written = false;
    }
    let mut job = RunningJob {
        kind: kind.clone(),
        since: now,
        steps: VecDeque::new(),
        child: None,
        temp_files: Vec::new(),
        outcome: None,
        notes: Vec::new(),
        aborted: None,
        alternatives: VecDeque::new(),
        method: None,
        final_method: false,
        build_dir: None,
        failed: None,
        draining: None,
        cleanup: VecDeque::new(),
        captured: Vec::new(),
    };
    if let Err(e) = plan(ctl, kind, source, &mut job) {
        remove_temp(&job);
        return Err(e);
    }
    // Start the first child now, so job_pid() is meaningful at once.
    advance(ctl, &mut job);
    ctl.job = Some(job);
    Ok(())
}

pub(super) fn poll(ctl: &mut PgCtl, _now: Instant) -> Job {
    let Some(mut job) = ctl.job.take() else {
        return Job::Idle;
    };
    advance(ctl, &mut job);
    match job.outcome.take() {
        None => {
            let out = Job::Running {
                kind: job.kind.clone(),
                since: job.since,
            };
            ctl.job = Some(job);
            out
        }
        Some(Ok(())) => {
            remove_temp(&job);
            let took = clock::now().since(job.since).as_secs_f64();
            let mut detail = format!("done in {took:.2} s");
            if let Some(m) = &job.method {
                detail.push_str(&format!("; built by replica method {m}"));
            }
            for n in &job.notes {
                detail.push_str("; ");
                detail.push_str(n);
            }
            Job::Finished {
                kind: job.kind,
                ok: true,
                detail,
            }
        }
        Some(Err(mut detail)) => {
            remove_temp(&job);
            // A build or bootstrap that ended with the data directory still
            // empty leaves no mark (one left would hold a directory the operator
            // fills by hand later, e.g. a restore); one that did not keeps it:
            // held.
            if matches!(job.kind, JobKind::Basebackup { .. } | JobKind::InitDb)
                && matches!(ctl.data_dir_state(), DataDir::Empty)
                && let Err(e) = remove_build_mark(ctl)
            {
                detail.push_str(&format!("; {e}"));
            }
            for n in &job.notes {
                detail.push_str("; ");
                detail.push_str(n);
            }
            Job::Finished {
                kind: job.kind,
                ok: false,
                detail,
            }
        }
    }
}

/// Run local steps and spawn children until a child is running or the job ended
/// (then `outcome` is set).
fn advance(ctl: &mut PgCtl, job: &mut RunningJob) {
    if job.outcome.is_some() {
        return;
    }
    loop {
        if let Some(d) = job.draining.take() {
            if group_alive(d.pgid) {
                if clock::now() >= d.until {
                    // INVARIANT: no copy is built or installed while a method's
                    // process may still write: the job ends, no other method, and
                    // no later build starts while the group lives (`start`).
                    job.final_method = true;
                    ctl.lingering = Some((d.pgid, d.what.to_string()));
                    let why = format!(
                        "{}: processes of its group (pgid {}) outlived SIGKILL for {} s: \
                         nothing more is built while they may write",
                        d.what,
                        d.pgid,
                        DRAIN_LIMIT.as_secs()
                    );
                    if end_or_clean_up(job, why) {
                        continue;
                    }
                } else {
                    job.draining = Some(d);
                }
                return;
            }
            if let Some(limit) = d.timed_out {
                let why = format!(
                    "{} ran longer than {} ({} s): killed with its process group",
                    d.what,
                    limit.setting,
                    limit.after.as_secs_f64()
                );
                if fall_back(ctl, job, why) {
                    continue;
                }
                return;
            }
            if !d.left.is_empty() && d.status.success() {
                // INVARIANT (M1): a copy whose writers were still running when
                // its method exited is never checked, let alone installed.
                // The same for the post-bootstrap command: its work is not done.
                let pids: Vec<String> = d.left.iter().map(u32::to_string).collect();
                let so = if job.method.is_some() {
                    "a method must wait for what it starts, so its copy is not used"
                } else {
                    "a command must wait for what it starts, so it has failed"
                };
                let why = format!(
                    "{} exited while processes it started were still running in its \
                     process group (pid {}; killed): {so}",
                    d.what,
                    pids.join(", ")
                );
                if fall_back(ctl, job, why) {
                    continue;
                }
                return;
            }
            if exited(ctl, job, &d.what, d.status, d.log_offset) {
                continue;
            }
            return;
        }
        if let Some(r) = &mut job.child {
            if r.drain {
                // Exited? Asked without reaping it: while it is a zombie its pid,
                // the group's id, cannot be reused, so the SIGKILL below reaches
                // its own group only.
                let pid = nix::unistd::Pid::from_raw(r.child.id() as libc::pid_t);
                let flags = nix::sys::wait::WaitPidFlag::WEXITED
                    | nix::sys::wait::WaitPidFlag::WNOHANG
                    | nix::sys::wait::WaitPidFlag::WNOWAIT;
                match nix::sys::wait::waitid(nix::sys::wait::Id::Pid(pid), flags) {
                    Ok(nix::sys::wait::WaitStatus::StillAlive) => {
                        let now = clock::now();
                        if !r.timed_out && r.deadline.is_some_and(|d| now >= d) {
                            // Its whole group: a method's copy is often made by
                            // the children it started. Reaped by a next poll.
                            r.timed_out = true;
                            if let Some(l) = r.limit {
                                log::warn!(
                                    "{} ran longer than {} ({} s): killing its process \
                                     group {}",
                                    r.what,
                                    l.setting,
                                    l.after.as_secs_f64(),
                                    pid
                                );
                            }
                            let _ =
                                nix::sys::signal::killpg(pid, nix::sys::signal::Signal::SIGKILL);
                        } else if r.timed_out
                            && r.deadline.is_some_and(|d| now >= d.add(DRAIN_LIMIT))
                        {
                            // SIGKILL has not taken it for DRAIN_LIMIT: a process in
                            // uninterruptible sleep (a hung mount). A capture is no
                            // answer, and the job goes on without it (it wrote
                            // nothing; the agent's reaper takes it when it exits).
                            if r.capture {
                                let why = format!(
                                    "killed past {} and still there {} s later (process \
                                     group {pid}): no answer",
                                    r.limit.map_or("its limit", |l| l.setting),
                                    DRAIN_LIMIT.as_secs()
                                );
                                job.captured.push((r.what.clone(), Err(why)));
                                job.child = None;
                                continue;
                            }
                            // As a drained group that outlives the kill (review of
                            // the timeout, M1): the job ends, nothing more is built.
                            job.final_method = true;
                            ctl.lingering = Some((pid.as_raw(), r.what.to_string()));
                            let why = format!(
                                "{} ran longer than {} and outlived SIGKILL for {} s \
                                 (process group {}): nothing more is built while it may \
                                 write",
                                r.what,
                                r.limit.map_or("its limit", |l| l.setting),
                                DRAIN_LIMIT.as_secs(),
                                pid
                            );
                            // Given up on (its group is `lingering`): the clean-up
                            // steps, if any, run without it.
                            job.child = None;
                            if end_or_clean_up(job, why) {
                                continue;
                            }
                        }
                        return;
                    }
                    Ok(_) => {
                        // Who is still at work, before the kill: a method whose
                        // writers outlive it did not finish its copy (M1).
                        let id = r.child.id();
                        r.left = super::procs::group_members(id, id);
                        let _ = nix::sys::signal::killpg(pid, nix::sys::signal::Signal::SIGKILL);
                    }
                    // Reaped already, or not ours: try_wait below says.
                    Err(_) => {}
                }
            }
            match r.child.try_wait() {
                Ok(None) => return,
                Ok(Some(st)) => {
                    let Some(r) = job.child.take() else {
                        return;
                    };
                    if r.capture {
                        let out = read_log_from(ctl, r.log_offset, CAPTURE_MAX);
                        let kept = if st.success() {
                            Ok(out)
                        } else {
                            Err(format!("{st}: {}", one_line(&out)))
                        };
                        job.captured.push((r.what, kept));
                        continue;
                    }
                    if r.drain {
                        job.draining = Some(Draining {
                            pgid: r.child.id() as libc::pid_t,
                            status: st,
                            what: r.what,
                            log_offset: r.log_offset,
                            until: clock::now().add(DRAIN_LIMIT),
                            left: r.left,
                            timed_out: if r.timed_out { r.limit } else { None },
                        });
                        continue;
                    }
                    if exited(ctl, job, &r.what, st, r.log_offset) {
                        continue;
                    }
                    return;
                }
                // No fallback: the child may still run.
                Err(e) => {
                    job.outcome = Some(Err(format!("{}: cannot wait for it: {e}", r.what)));
                    return;
                }
            }
        }
        match job.steps.pop_front() {
            None => {
                // INVARIANT: a job a fence aborted, or whose every replica method
                // failed, never reports success.
                job.outcome = Some(match (&job.aborted, job.failed.take()) {
                    // A fence during the clean-up: both said.
                    (Some(why), Some(first)) => Err(format!("{first}; then {why}")),
                    (Some(why), None) => Err(why.clone()),
                    (None, Some(why)) => Err(why),
                    (None, None) => Ok(()),
                });
                return;
            }
            Some(Step::Local(what, op)) => {
                if matches!(op, Local::CheckCopy(_))
                    && !matches!(ctl.data_dir_state(), DataDir::Empty)
                {
                    // INVARIANT (review M3): no copy lands in the data directory
                    // unchecked. A method that wrote there (a tool's own setting of
                    // the data directory) ends the build: the next method would find
                    // it not empty, and the next loop would start what it left.
                    job.final_method = true;
                    let m = job.method.clone().unwrap_or_default();
                    job.outcome = Some(Err(format!(
                        "replica method {m}: {}",
                        hold_data_dir(ctl, &m)
                    )));
                    return;
                }
                if matches!(op, Local::InstallBasebackup(_)) {
                    // INVARIANT: once the install starts, the data directory may
                    // hold the copy: no other method may build after it.
                    job.final_method = true;
                }
                match run_local(ctl, op) {
                    Ok(Some(note)) => job.notes.push(note),
                    Ok(None) => {}
                    Err(e) => {
                        if fall_back(ctl, job, format!("{what}: {e}")) {
                            continue;
                        }
                        return;
                    }
                }
            }
            Some(Step::OnFailure(steps)) => job.cleanup = steps,
            Some(Step::Run(cmd)) => match spawn(ctl, &cmd) {
                Ok(r) => job.child = Some(r),
                Err(e) => {
                    if fall_back(ctl, job, format!("{}: {e}", cmd.what)) {
                        continue;
                    }
                    return;
                }
            },
            Some(Step::Capture(cmd)) => match spawn(ctl, &cmd) {
                Ok(mut r) => {
                    r.capture = true;
                    job.child = Some(r);
                }
                // Kept as its answer: the step after it decides without it.
                Err(e) => job.captured.push((cmd.what, Err(e.to_string()))),
            },
            Some(Step::StartStandby(mut cmd)) => {
                let raised = standby_floor(job);
                if !raised.is_empty() {
                    cmd.args
                        .extend([os("-o"), os(hotstandby::start_options(&raised))]);
                }
                match spawn(ctl, &cmd) {
                    Ok(r) => job.child = Some(r),
                    Err(e) => {
                        if fall_back(ctl, job, format!("pg_ctl start: {e}")) {
                            continue;
                        }
                        return;
                    }
                }
            }
        }
    }
}

/// The job failed with `why` where no other replica method may run: it ends,
/// unless `Step::OnFailure` steps are armed, which run first (`true`: go on).
fn end_or_clean_up(job: &mut RunningJob, why: String) -> bool {
    if !job.cleanup.is_empty() && job.aborted.is_none() && job.failed.is_none() {
        job.failed = Some(why);
        job.steps = std::mem::take(&mut job.cleanup);
        return true;
    }
    job.outcome = Some(Err(why));
    false
}

/// A child (and, for a drained one, its whole group) is gone with `status`: a
/// success lets the job go on (`true`); a failure goes to [`fall_back`].
fn exited(
    ctl: &PgCtl,
    job: &mut RunningJob,
    what: &str,
    status: std::process::ExitStatus,
    log_offset: u64,
) -> bool {
    if status.success() {
        return true;
    }
    let tail = log_tail(ctl, log_offset);
    fall_back(ctl, job, format!("{what} failed ({status}): {tail}"))
}

/// A step failed with `why`. A replica build with a method left (nothing
/// installed, no fence under way) goes on with that method: `true`. Otherwise the
/// job ends with `why`: `false`.
fn fall_back(ctl: &PgCtl, job: &mut RunningJob, why: String) -> bool {
    if let Some(first) = job.failed.take() {
        // The last step, removing the build directory after every method
        // failed, failed too.
        job.outcome = Some(Err(format!("{first}; and then {why}")));
        return false;
    }
    if !job.cleanup.is_empty() && job.aborted.is_none() {
        // INVARIANT: what the failed job started (the bootstrap's temporary
        // server) is stopped before the job reports its failure.
        return end_or_clean_up(job, why);
    }
    let failed = job.method.clone();
    let mut why = match &failed {
        Some(m) => format!("replica method {m}: {why}"),
        None => why,
    };
    // Tablespaces the failed copy linked to keep their files when its build
    // directory is removed, and the next build into the same paths fails on
    // them: say where, while the links still say it (review of session 18, M3).
    if failed.is_some()
        && let Some(dir) = &job.build_dir
        && let Some(note) = tablespace_note(dir)
    {
        why.push_str("; ");
        why.push_str(&note);
    }
    if job.final_method || job.aborted.is_some() {
        job.outcome = Some(Err(why));
        return false;
    }
    // INVARIANT (review of session 18, M4): a method that wrote into the data
    // directory, failed or not, ends the build under its own name, and the
    // directory is held for the operator: the next method would build beside an
    // unchecked copy, and the next loop would start it.
    if let Some(m) = &failed
        && job.build_dir.is_some()
        && !matches!(ctl.data_dir_state(), DataDir::Empty)
    {
        job.final_method = true;
        job.outcome = Some(Err(format!("{why}; and {}", hold_data_dir(ctl, m))));
        return false;
    }
    let Some((next, steps)) = job.alternatives.pop_front() else {
        // Every method failed: what the last one left in the build directory is
        // removed (in a child, `remove_build_dir`) before the job reports it.
        if let Some(dir) = job.build_dir.clone() {
            job.failed = Some(why);
            job.steps = VecDeque::from([remove_build_dir(&dir)]);
            return true;
        }
        job.outcome = Some(Err(why));
        return false;
    };
    log::warn!("{why}; trying replica method {next}");
    job.notes.push(why);
    job.method = Some(next);
    job.steps = steps;
    true
}

/// Where the copy in `dir` put its tablespaces (`pg_tblspc`'s links), if
/// anywhere: a few directory entries and links, read once per failed method.
fn tablespace_note(dir: &Path) -> Option<String> {
    let rd = fs::read_dir(dir.join("pg_tblspc")).ok()?;
    let targets: Vec<String> = rd
        .filter_map(|e| fs::read_link(e.ok()?.path()).ok())
        .take(16)
        .map(|t| t.display().to_string())
        .collect();
    (!targets.is_empty()).then(|| {
        format!(
            "its tablespaces ({}) keep what it wrote there: empty them before the next \
             build, which would fail on them",
            targets.join(", ")
        )
    })
}

/// One local step; `Some(note)` goes into the job's report.
fn run_local(ctl: &mut PgCtl, op: Local) -> Result<Option<String>, PgError> {
    match op {
        Local::WriteConfig(leader) => ctl.write_agent_config(leader.as_ref())?,
        Local::WriteHba => {
            let p = ctl.cfg.data_dir.join("pg_hba.conf");
            ctl.write_owned(&p, &conf::pg_hba(&ctl.cfg, &ctl.hba_hosts))?
        }
        Local::RemoveSignals => ctl.remove_signals()?,
        Local::TouchStandby => ctl.touch_standby_signal()?,
        Local::InstallBasebackup(tmp) => {
            let data = &ctl.cfg.data_dir;
            // INVARIANT: the mark goes only once the copy was checked and the
            // data directory is still empty: the copy moved in is a checked one.
            remove_build_mark(ctl)?;
            match fs::remove_dir(data) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(io_err("remove the empty data directory", data, e)),
            }
            fs::rename(&tmp, data).map_err(|e| io_err("rename the basebackup into", data, e))?
        }
        Local::MakeBuildDir(dir) => make_build_dir(ctl, &dir)?,
        Local::CheckCopy(dir) => return check_copy(ctl, &dir),
        Local::RequireStopped => require_stopped(ctl)?,
        Local::RemoveMark => remove_build_mark(ctl)?,
        Local::MoveAside => {
            let to = ctl.move_data_aside()?;
            return Ok(Some(format!(
                "the data directory was moved aside to {}",
                to.display()
            )));
        }
    }
    Ok(None)
}

/// The job log from `offset`, at most `max` bytes of it.
fn read_log_from(ctl: &PgCtl, offset: u64, max: u64) -> String {
    let mut buf = Vec::new();
    if let Ok(mut f) = fs::File::open(ctl.job_log())
        && f.seek(SeekFrom::Start(offset)).is_ok()
    {
        let _ = f.take(max).read_to_end(&mut buf);
    }
    String::from_utf8_lossy(&buf).into_owned()
}

/// `text`'s non-empty lines joined with ` | ` (a report's one line).
fn one_line(text: &str) -> String {
    let s: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    if s.is_empty() {
        "(no output)".into()
    } else {
        s.join(" | ")
    }
}

/// The children a standby's start reads its floor from (`hotstandby`):
/// `pg_controldata`, then `postgres -C` of each setting, then the start. Run
/// once the server is stopped, so `pg_control` holds the last parameter change
/// it replayed. Each child is killed (with its process group) past
/// [`CAPTURE_LIMIT`]: a hung data directory gives no answer, and the start goes
/// on without a raise.
fn standby_start_steps(ctl: &PgCtl, secs: u64) -> Result<Vec<Step>, PgError> {
    let data = &ctl.cfg.data_dir;
    let capture = |what: Cow<'static, str>, program: &str, args: Vec<OsString>| {
        Step::Capture(Cmd {
            what,
            program: ctl.cfg.bin_dir.join(program),
            args,
            env: vec![],
            stdin: None,
            drain: true,
            limit: Some(CAPTURE_LIMIT),
        })
    };
    let mut steps = vec![capture(
        CONTROLDATA.into(),
        "pg_controldata",
        vec![os("-D"), os(data)],
    )];
    for (name, _) in hotstandby::SETTINGS {
        steps.push(capture(
            Cow::Owned(format!("postgres -C {name}")),
            "postgres",
            vec![os("-D"), os(data), os("-C"), os(name)],
        ));
    }
    steps.push(Step::StartStandby(pg_ctl_start_cmd(ctl, secs)?));
    Ok(steps)
}

/// The longest a standby start's capture child may run (it answers in
/// milliseconds).
const CAPTURE_LIMIT: Limit = Limit {
    after: Duration::from_secs(10),
    setting: "the 10 s a settings check may take",
};

/// What `standby_start_steps`' `Capture` children name a step.
const CONTROLDATA: &str = "pg_controldata";

/// The settings this standby's start raises to the primary's values, from what
/// the job's `Capture` children kept; each said in the log and the job's report.
/// Nothing when `pg_control` could not be read (said: the start goes on as the
/// files say, and PostgreSQL refuses it with its own words if it must).
fn standby_floor(job: &mut RunningJob) -> Vec<hotstandby::Raise> {
    let got = |what: &str| {
        job.captured
            .iter()
            .find(|(w, _)| w == what)
            .map(|(_, r)| r.clone())
            .unwrap_or_else(|| Err("not run".into()))
    };
    let control = match got(CONTROLDATA).and_then(|t| hotstandby::control_values(&t)) {
        Ok(v) => v,
        Err(e) => {
            log::warn!(
                "the primary's max_connections and the other settings a hot standby \
                 needs at least as high are not known ({e}): this standby starts with \
                 its files' values"
            );
            return Vec::new();
        }
    };
    let mut configured = [None; 5];
    for (i, (name, _)) in hotstandby::SETTINGS.iter().enumerate() {
        match got(&format!("postgres -C {name}")) {
            Ok(t) => configured[i] = hotstandby::configured_value(&t),
            Err(e) => log::warn!("postgres -C {name}: {e}"),
        }
    }
    let raised = hotstandby::raises(&control, &configured);
    for r in &raised {
        log::warn!(
            "this standby starts with {} = {}, the primary's (its pg_control), not {} as \
             its files set: a hot standby below the primary's value is refused by \
             PostgreSQL; set it to at least {} on this node",
            r.name,
            r.to,
            r.from,
            r.to
        );
        job.notes.push(format!(
            "{} raised to the primary's {} (the files set {})",
            r.name, r.to, r.from
        ));
    }
    raised
}

fn log_tail(ctl: &PgCtl, offset: u64) -> String {
    let mut buf = Vec::new();
    if let Ok(mut f) = fs::File::open(ctl.job_log()) {
        let len = f.metadata().map(|m| m.len()).unwrap_or(0);
        let from = offset.max(len.saturating_sub(800));
        if f.seek(SeekFrom::Start(from)).is_ok() {
            let _ = f.read_to_end(&mut buf);
        }
    }
    let s = String::from_utf8_lossy(&buf);
    let s = s.trim();
    if s.is_empty() {
        "(no output)".into()
    } else {
        s.lines().collect::<Vec<_>>().join(" | ")
    }
}

fn spawn(ctl: &PgCtl, cmd: &Cmd) -> Result<Running, PgError> {
    let log_path = ctl.job_log();
    // The job log may hold a failing statement's text: 0600, the agent's own.
    let log = fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(&log_path)
        .map_err(|e| io_err("open job log", &log_path, e))?;
    let log_offset = log.metadata().map(|m| m.len()).unwrap_or(0);
    let log2 = log
        .try_clone()
        .map_err(|e| io_err("dup job log", &log_path, e))?;
    let program = &cmd.program;
    let mut c = Command::new(program);
    c.args(&cmd.args)
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("LC_ALL", "C")
        .current_dir("/")
        .stdout(log)
        .stderr(log2)
        // Own process group: a terminal's ^C for the agent does not reach it, and
        // kill_job can reach its forks.
        .process_group(0);
    match &cmd.stdin {
        Some(p) => {
            let f = fs::File::open(p).map_err(|e| io_err("open stdin file", p, e))?;
            c.stdin(Stdio::from(f));
        }
        None => {
            c.stdin(Stdio::null());
        }
    }
    match &ctl.run_as {
        Some(r) => {
            c.uid(r.uid.as_raw())
                .gid(r.gid.as_raw())
                .env("HOME", &r.home);
        }
        None => {
            if let Some(h) = std::env::var_os("HOME") {
                c.env("HOME", h);
            }
        }
    }
    for (k, v) in &cmd.env {
        c.env(k, v);
    }
    let child = c
        .spawn()
        .map_err(|e| PgError::Io(format!("spawn {}: {e}", program.display())))?;
    Ok(Running {
        child,
        what: cmd.what.clone(),
        drain: cmd.drain,
        log_offset,
        left: Vec::new(),
        limit: cmd.limit,
        deadline: cmd.limit.map(|l| clock::now().add(l.after)),
        timed_out: false,
        capture: false,
    })
}

fn os(s: impl Into<OsString>) -> OsString {
    s.into()
}

/// What a job leaves behind when it ends, whatever its outcome: its temp files.
/// A replica build's copy is never removed here: a partial copy of a large
/// database is millions of files, and removing them would hold the loop. A
/// build whose methods all failed removes it in a child as its last step
/// (`fall_back`); one killed or aborted by a fence leaves it to the next build,
/// whose first step removes it.
pub(super) fn remove_temp(job: &RunningJob) {
    for f in &job.temp_files {
        let _ = fs::remove_file(f);
    }
}

/// The source must be given and be the member the job names.
fn source_for<'a>(source: Option<&'a ConnTarget>, name: &str) -> Result<&'a ConnTarget, PgError> {
    match source {
        Some(s) if s.name == name => Ok(s),
        Some(s) => Err(PgError::Refused(format!(
            "the job names {name:?} but the connection target is {:?}",
            s.name
        ))),
        None => Err(PgError::Refused(format!(
            "no connection target given for {name:?}"
        ))),
    }
}

fn require_stopped(ctl: &PgCtl) -> Result<(), PgError> {
    match ctl.running_text() {
        Ok(None) => Ok(()),
        Ok(Some(pids)) => Err(PgError::Refused(format!(
            "processes of this PostgreSQL still run (pid {pids}): fence or stop first"
        ))),
        // DESIGN §5: an unreadable process table is not "stopped".
        Err(e) => Err(PgError::Refused(format!(
            "cannot tell whether processes of this PostgreSQL still run ({e})"
        ))),
    }
}

/// The build directory of a replica's copy: `<data>.basebackup-tmp`, never the
/// data directory.
fn build_dir(ctl: &PgCtl) -> Result<PathBuf, PgError> {
    let dir = ctl.sibling("basebackup-tmp");
    // INVARIANT: the only directory a replica build removes or fills is this one.
    if dir == ctl.cfg.data_dir {
        return Err(PgError::Refused(format!(
            "{} is the data directory",
            dir.display()
        )));
    }
    Ok(dir)
}

/// Whether the checked copy can be renamed onto the data directory `data` at the
/// end of a build: not a symbolic link (rename replaces the link, and the empty
/// directory it points to cannot be removed through it) and not a mount point
/// (the build directory next to it is on another filesystem). Refused before
/// the copy is made, not after hours of it (review of session 18, M2: every
/// build failed at its install, and the next started over).
fn replaceable(data: &Path) -> Result<(), PgError> {
    use std::os::unix::fs::MetadataExt;
    let meta = match fs::symlink_metadata(data) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(io_err("stat", data, e)),
    };
    if meta.file_type().is_symlink() {
        let to = fs::read_link(data).map_or_else(|_| "?".into(), |t| t.display().to_string());
        return Err(PgError::Refused(format!(
            "data directory {} is a symbolic link (to {to}): a replica build renames its \
             checked copy onto the data directory, which a link does not allow; set \
             data_dir to the directory it points to",
            data.display()
        )));
    }
    let parent = data.parent().unwrap_or(Path::new("/"));
    let pmeta = fs::metadata(parent).map_err(|e| io_err("stat", parent, e))?;
    if meta.dev() != pmeta.dev() {
        return Err(PgError::Refused(format!(
            "data directory {} is a mount point: a replica is built next to it, in {}, \
             on another filesystem, and cannot be moved onto it; make data_dir a \
             directory below the mount point",
            data.display(),
            parent.display()
        )));
    }
    Ok(())
}

/// `rm -rf --one-file-system <dir>` as a child (as the PostgreSQL user, who owns
/// the copy): what an earlier or a failed build left in the build directory,
/// which can be millions of files, removed without holding the loop.
fn remove_build_dir(dir: &Path) -> Step {
    Step::Run(Cmd {
        what: "remove the build directory (rm -rf)".into(),
        program: PathBuf::from("/bin/rm"),
        args: vec![os("-rf"), os("--one-file-system"), os(dir)],
        env: vec![],
        stdin: None,
        drain: false,
        limit: None,
    })
}

/// Make the (removed) build directory afresh: empty, 0700, owned by the
/// PostgreSQL user.
fn make_build_dir(ctl: &PgCtl, dir: &Path) -> Result<(), PgError> {
    if *dir != build_dir(ctl)? {
        return Err(PgError::Refused(format!(
            "{} is not tenure's build directory",
            dir.display()
        )));
    }
    fs::create_dir(dir).map_err(|e| io_err("create", dir, e))?;
    // Mode and owner on the directory we made, opened without following a link
    // the PostgreSQL user (who owns the parent) could have put there since (L6).
    let d = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW)
        .open(dir)
        .map_err(|e| io_err("open", dir, e))?;
    d.set_permissions(fs::Permissions::from_mode(0o700))
        .map_err(|e| io_err("chmod 0700", dir, e))?;
    ctl.fchown(&d, dir)
}

/// Method `m` wrote into the data directory: the build's mark stays (read by
/// `dir_state` as [`DataDir::Held`]: never started, built into or moved aside),
/// now saying why, and so does the report.
fn hold_data_dir(ctl: &PgCtl, m: &str) -> String {
    let data = &ctl.cfg.data_dir;
    let why = format!(
        "replica method {m} wrote into the data directory {}, not into the build \
         directory it was given (--datadir, PGDATA; for pgBackRest, pg1-path)",
        data.display()
    );
    let mark = super::build_mark_of(data);
    // The mark is there since before the method ran: if this rewrite fails (a
    // full disk, the likely reason the method failed), the directory is held
    // all the same, with the mark's first words (review of this fix, M2).
    let said = match ctl.write_owned(&mark, &format!("{why}\n")) {
        Ok(()) => String::new(),
        Err(e) => format!("; the mark's reason could not be rewritten: {e}"),
    };
    format!(
        "{why}: nothing more is built, and the data directory is held for the operator \
         ({} says why; remove it, or empty the directory, once checked){said}",
        mark.display()
    )
}

/// Before any method runs: the mark that holds a data directory that is not
/// empty while it is there (a method that writes into it, a build cut short by a
/// crash, a fence or a forced reinit), written while the data directory is
/// still empty.
fn write_build_mark(ctl: &PgCtl, build: &Path) -> Result<(), PgError> {
    ctl.write_owned(
        &super::build_mark_of(&ctl.cfg.data_dir),
        &format!(
            "a replica build into {} was under way (the data directory must stay empty \
             until its checked copy is moved in)\n",
            build.display()
        ),
    )
}

/// The build's mark, once the data directory is empty at its end or its checked
/// copy is about to be moved in. Absent is fine.
fn remove_build_mark(ctl: &PgCtl) -> Result<(), PgError> {
    let mark = super::build_mark_of(&ctl.cfg.data_dir);
    match fs::remove_file(&mark) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io_err("remove the build mark", &mark, e)),
    }
}

/// A replica method's deadline, `[postgresql] create_replica_timeout`.
fn replica_limit(ctl: &PgCtl) -> Option<Limit> {
    ctl.cfg.create_replica.timeout.map(|after| Limit {
        after,
        setting: "create_replica_timeout",
    })
}

/// The child that builds a replica's copy into `dir` with method `m`.
fn replica_cmd(ctl: &PgCtl, m: &ReplicaMethod, src: &ConnTarget, dir: &Path) -> Cmd {
    // The replication role's password file and TLS settings (issue 12) as libpq's
    // variables: env_clear() leaves no others behind.
    let mut env: Vec<(&'static str, OsString)> = vec![
        ("PGPASSFILE", os(ctl.passfile())),
        ("PGCONNECT_TIMEOUT", os("10")),
    ];
    env.extend(
        ctl.cfg
            .replication_ssl
            .env()
            .into_iter()
            .map(|(k, v)| (k, os(v))),
    );
    match m {
        ReplicaMethod::Basebackup => {
            let extra = &ctl.cfg.create_replica.basebackup_args;
            let mut args = vec![
                os("-D"),
                os(dir),
                os("-h"),
                os(&src.host),
                os("-p"),
                os(src.port.to_string()),
                os("-U"),
                os(&ctl.cfg.replication_user),
                // Merged with -h/-p/-U (libpq has no variables for these): a
                // source that dies mid-copy ends it in about 25 s.
                os("-d"),
                os(conf::COPY_KEEPALIVES),
                os("-X"),
                os("stream"),
                os("-w"),
            ];
            // A fast checkpoint unless `[postgresql.basebackup] checkpoint` says.
            if !extra.iter().any(|a| a.starts_with("--checkpoint=")) {
                args.extend([os("-c"), os("fast")]);
            }
            args.extend(extra.iter().map(os));
            env.push(("PGAPPNAME", os("tenure-basebackup")));
            Cmd {
                what: "pg_basebackup".into(),
                program: ctl.cfg.bin_dir.join("pg_basebackup"),
                args,
                env,
                stdin: None,
                drain: true,
                limit: replica_limit(ctl),
            }
        }
        ReplicaMethod::Command(c) => {
            let mut args: Vec<OsString> = c.command[1..].iter().map(os).collect();
            if !c.no_params {
                args.push(os(format!("--scope={}", ctl.scope)));
                let mut d = os("--datadir=");
                d.push(dir);
                args.push(d);
                args.push(os("--role=replica"));
                args.push(os(format!(
                    "--connstring={}",
                    conf::replica_connstring(&ctl.cfg, src)
                )));
            }
            args.extend(c.params.iter().map(os));
            env.push(("PGAPPNAME", os(format!("tenure-{}", c.name))));
            env.push(("PGDATA", os(dir)));
            Cmd {
                what: c.command[0].clone().into(),
                program: PathBuf::from(&c.command[0]),
                args,
                env,
                stdin: None,
                drain: true,
                limit: replica_limit(ctl),
            }
        }
    }
}

/// A replica build's copy in `dir`, before it is moved into place: it must hold
/// a cluster, with this cluster's system identifier when that is known (a backup
/// of another cluster is refused here, not after it replaced an empty data
/// directory). Then it is made a plain standby's data: the recovery target and
/// owned settings a restore may leave in `postgresql.auto.conf` are commented out
/// (`conf::sanitize_auto_conf`: `recovery_target_action = 'promote'` would promote
/// the replica without the leader key), `recovery.signal` is removed (the install
/// writes `standby.signal`), and an empty `postgresql.conf` is written where the
/// copy has none (tenure's settings are in the `tenure.conf` it includes).
fn check_copy(ctl: &PgCtl, dir: &Path) -> Result<Option<String>, PgError> {
    let sysid = match super::dir_state(dir) {
        DataDir::Present { sysid, .. } => sysid,
        DataDir::Empty => {
            return Err(PgError::Refused(format!(
                "{} is empty: the method built nothing there",
                dir.display()
            )));
        }
        DataDir::Unusable(why) | DataDir::Held(why) => {
            return Err(PgError::Refused(format!(
                "no usable cluster in the copy: {why}"
            )));
        }
    };
    if let Some(want) = ctl.cluster_sysid
        && sysid != want
    {
        return Err(PgError::Refused(format!(
            "the copy is of another cluster: system identifier {sysid}, this cluster's is {want}"
        )));
    }
    let mut notes: Vec<String> = Vec::new();
    if let Some(removed) = ctl.sanitize_auto_conf(dir)? {
        let what = format!(
            "commented out in the copy's postgresql.auto.conf: {}",
            removed.join(", ")
        );
        log::warn!("{what}");
        notes.push(what);
    }
    let rs = dir.join("recovery.signal");
    match fs::remove_file(&rs) {
        Ok(()) => notes.push("removed the copy's recovery.signal".into()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(io_err("remove", &rs, e)),
    }
    // A standby from the moment it is in place (review L3): were the agent to die
    // between the install and `standby.signal`'s own step, a start by hand would
    // otherwise run the copy as a primary.
    ctl.write_owned(&dir.join("standby.signal"), "")?;
    let pc = dir.join("postgresql.conf");
    if !pc.exists() {
        ctl.write_owned(
            &pc,
            "# Written by tenure: the replica's copy had no postgresql.conf. tenure's\n\
             # settings are in tenure.conf, included below.\n",
        )?;
        notes.push("the copy had no postgresql.conf: wrote an empty one".into());
    }
    Ok((!notes.is_empty()).then(|| notes.join("; ")))
}

fn require_state(ctl: &PgCtl, want_empty: bool) -> Result<(), PgError> {
    match (ctl.data_dir_state(), want_empty) {
        (DataDir::Empty, true) | (DataDir::Present { .. }, false) => Ok(()),
        (st, true) => Err(PgError::Refused(format!(
            "data directory {} is not empty ({st:?}): never initdb or basebackup into it",
            ctl.cfg.data_dir.display()
        ))),
        (st, false) => Err(PgError::Refused(format!(
            "data directory {} holds no usable cluster ({st:?})",
            ctl.cfg.data_dir.display()
        ))),
    }
}

/// Make a sibling file for the job, 0600, owned by the PostgreSQL user, removed
/// when the job ends.
fn temp_file(
    ctl: &PgCtl,
    job: &mut RunningJob,
    suffix: &str,
    text: &str,
) -> Result<PathBuf, PgError> {
    let p = ctl.sibling(suffix);
    job.temp_files.push(p.clone());
    ctl.write_owned(&p, text)?;
    Ok(p)
}

/// The server log next to the data dir, created owned by the PostgreSQL user so
/// pg_ctl can append to it even when the parent directory is not theirs.
fn prepare_server_log(ctl: &PgCtl) -> Result<PathBuf, PgError> {
    let p = ctl.server_log();
    // Not through a link (L6: one planted in the PostgreSQL user's directory
    // would have root append to, and hand over, a file of root's).
    let f = fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(&p)
        .map_err(|e| io_err("create server log", &p, e))?;
    if !f.metadata().is_ok_and(|m| m.is_file()) {
        return Err(PgError::Refused(format!(
            "server log {} is not a regular file",
            p.display()
        )));
    }
    ctl.fchown(&f, &p)?;
    Ok(p)
}

fn pg_ctl_start(ctl: &PgCtl) -> Result<Step, PgError> {
    pg_ctl_start_within(ctl, ctl.ctl_timeout.as_secs())
}

/// `pg_ctl start -w -t secs`.
fn pg_ctl_start_within(ctl: &PgCtl, secs: u64) -> Result<Step, PgError> {
    pg_ctl_start_cmd(ctl, secs).map(Step::Run)
}

fn pg_ctl_start_cmd(ctl: &PgCtl, secs: u64) -> Result<Cmd, PgError> {
    let log = prepare_server_log(ctl)?;
    Ok(Cmd {
        what: "pg_ctl start".into(),
        program: ctl.cfg.bin_dir.join("pg_ctl"),
        args: vec![
            os("start"),
            os("-D"),
            os(&ctl.cfg.data_dir),
            os("-w"),
            os("-t"),
            os(secs.max(1).to_string()),
            os("-l"),
            os(log),
        ],
        env: vec![],
        stdin: None,
        drain: false,
        limit: None,
    })
}

/// The bootstrap's temporary server for `post_bootstrap`: `pg_ctl start` with
/// no TCP address (`listen_addresses` empty), so only the agent's Unix socket
/// reaches it.
fn pg_ctl_start_socket_only(ctl: &PgCtl) -> Result<Step, PgError> {
    let mut cmd = pg_ctl_start_cmd(ctl, ctl.ctl_timeout.as_secs())?;
    cmd.what = "pg_ctl start (the socket only, for post_bootstrap)".into();
    // pg_ctl hands -o to the server through /bin/sh: '' is an empty value. No
    // archiving: a bootstrap that fails must not leave WAL of a cluster nobody
    // agreed on in the archive (it would collide with the real one's segments).
    cmd.args
        .extend([os("-o"), os("-c listen_addresses='' -c archive_mode=off")]);
    Ok(Step::Run(cmd))
}

/// `[bootstrap] post_bootstrap`: the program and its words, then a connection
/// URL to the new cluster as the superuser over the Unix socket (Patroni passes
/// one too); libpq's variables say the same for a script that takes none.
/// Run as the PostgreSQL user, with `post_bootstrap_timeout`.
fn post_bootstrap_cmd(ctl: &PgCtl, words: &[String]) -> Cmd {
    let socket = ctl.cfg.socket_dir.to_string_lossy().into_owned();
    let url = format!(
        "postgresql://{}@/postgres?host={}&port={}",
        pct(&ctl.cfg.superuser, false),
        pct(&socket, true),
        ctl.port
    );
    let mut args: Vec<OsString> = words[1..].iter().map(os).collect();
    args.push(os(url));
    let mut path = os(&ctl.cfg.bin_dir);
    path.push(":/usr/bin:/bin");
    Cmd {
        what: format!("post_bootstrap {}", words[0]).into(),
        program: PathBuf::from(&words[0]),
        args,
        env: vec![
            ("PATH", path),
            ("PGHOST", os(socket)),
            ("PGPORT", os(ctl.port.to_string())),
            ("PGUSER", os(&ctl.cfg.superuser)),
            ("PGDATABASE", os("postgres")),
            ("PGDATA", os(&ctl.cfg.data_dir)),
            ("PGAPPNAME", os("tenure-post_bootstrap")),
            // As Patroni: no standby to wait for yet, and no statement cut short.
            (
                "PGOPTIONS",
                os("-c synchronous_commit=local -c statement_timeout=0"),
            ),
        ],
        stdin: None,
        // Its whole process group is waited for and, past the deadline, killed.
        drain: true,
        limit: Some(Limit {
            after: ctl.cfg.bootstrap.post_bootstrap_timeout,
            setting: "post_bootstrap_timeout",
        }),
    }
}

/// Percent-encoding for a URL's user and query values: RFC 3986's unreserved
/// characters kept, and `/` where `slash` (a query value may hold it: the socket
/// directory's path reads better so).
fn pct(s: &str, slash: bool) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric()
            || matches!(b, b'-' | b'.' | b'_' | b'~')
            || (slash && b == b'/')
        {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn plan(
    ctl: &mut PgCtl,
    kind: &JobKind,
    source: Option<&ConnTarget>,
    job: &mut RunningJob,
) -> Result<(), PgError> {
    let data = ctl.cfg.data_dir.clone();
    match kind {
        JobKind::InitDb => {
            require_state(ctl, true)?;
            require_stopped(ctl)?;
            ctl.clear_stale_lock()?;
            if data.exists() {
                // initdb chmods an existing empty directory: it must be theirs.
                ctl.chown(&data)?;
                fs::set_permissions(&data, fs::Permissions::from_mode(0o700))
                    .map_err(|e| io_err("chmod 0700", &data, e))?;
            }
            let pw = format!("{}\n", ctl.cfg.superuser_password);
            let pwfile = temp_file(ctl, job, "initdb-pw", &pw)?;
            let sql = temp_file(ctl, job, "bootstrap-sql", &conf::bootstrap_sql(&ctl.cfg))?;
            let mut args = vec![os("-D"), os(&data)];
            // The operator's options ([bootstrap] initdb, checked by
            // `config::bootstrap`); then tenure's own, which they cannot name.
            args.extend(ctl.cfg.bootstrap.initdb_args.iter().map(os));
            args.extend([
                os("-U"),
                os(&ctl.cfg.superuser),
                os(format!("--pwfile={}", pwfile.display())),
                os("--auth-local=trust"),
                os("--auth-host=scram-sha-256"),
            ]);
            job.steps.push_back(Step::Run(Cmd {
                what: "initdb".into(),
                program: ctl.cfg.bin_dir.join("initdb"),
                args,
                env: vec![],
                stdin: None,
                drain: false,
                limit: None,
            }));
            job.steps
                .push_back(Step::Local("write pg_hba.conf", Local::WriteHba));
            job.steps
                .push_back(Step::Local("write tenure.conf", Local::WriteConfig(None)));
            job.steps.push_back(Step::Run(Cmd {
                what: "create roles (postgres --single)".into(),
                program: ctl.cfg.bin_dir.join("postgres"),
                // exit_on_error: an ERROR in single-user mode would otherwise be
                // printed and the exit status would still be 0.
                args: vec![
                    os("--single"),
                    os("-D"),
                    os(&data),
                    os("-c"),
                    os("exit_on_error=on"),
                    os("postgres"),
                ],
                env: vec![],
                stdin: Some(sql),
                drain: false,
                limit: None,
            }));
            if let Some(words) = ctl.cfg.bootstrap.post_bootstrap.clone() {
                // The operator's post-bootstrap command, on a server nobody else
                // can reach yet (the socket only, in the agent's 0700 directory),
                // which is stopped again, also when the command fails.
                // The shutdown checkpoint after a script that loaded data may take
                // a while: the stop may take as long as the script could.
                let stop_secs = ctl
                    .ctl_timeout
                    .max(ctl.cfg.bootstrap.post_bootstrap_timeout)
                    .as_secs();
                job.steps
                    .push_back(Step::OnFailure(VecDeque::from([pg_ctl_stop_within(
                        ctl, stop_secs,
                    )])));
                job.steps.push_back(pg_ctl_start_socket_only(ctl)?);
                job.steps
                    .push_back(Step::Run(post_bootstrap_cmd(ctl, &words)));
                job.steps.push_back(Step::OnFailure(VecDeque::new()));
                job.steps.push_back(pg_ctl_stop_within(ctl, stop_secs));
            }
            job.steps.push_back(Step::Local(
                "remove the bootstrap's mark",
                Local::RemoveMark,
            ));
            // INVARIANT: a directory this job wrote into is not a cluster anybody
            // agreed on until its last step: the mark holds it (`DataDir::Held`)
            // if the job fails or the agent dies on the way, instead of a later
            // loop re-creating `initialize` from a half-made cluster. Removed by
            // the job's last step, or at its end when the directory is empty; put
            // back if the lock is found lost before the record
            // (`Action::HoldDataDir`). Written once every step is planned: a plan
            // that fails leaves none.
            ctl.write_owned(&super::build_mark_of(&data), BOOTSTRAP_MARK)?;
        }
        JobKind::Basebackup { from } => {
            let src = source_for(source, from)?.clone();
            require_state(ctl, true)?;
            require_stopped(ctl)?;
            ctl.clear_stale_lock()?;
            ctl.write_owned(&ctl.passfile(), &conf::pgpass(&ctl.cfg))?;
            // Every method builds into this directory of ours, never into the
            // data directory (DESIGN §3a), which the copy replaces only once it
            // was checked (`check_copy`).
            replaceable(&data)?;
            let tmp = build_dir(ctl)?;
            write_build_mark(ctl, &tmp)?;
            job.build_dir = Some(tmp.clone());
            let methods = ctl.cfg.create_replica.methods.clone();
            for m in &methods {
                // Each method starts from an empty directory: what an earlier
                // build or the method before left there is removed first.
                let mut steps = VecDeque::new();
                steps.push_back(remove_build_dir(&tmp));
                steps.push_back(Step::Local(
                    "make the build directory",
                    Local::MakeBuildDir(tmp.clone()),
                ));
                steps.push_back(Step::Run(replica_cmd(ctl, m, &src, &tmp)));
                steps.push_back(Step::Local("check the copy", Local::CheckCopy(tmp.clone())));
                steps.push_back(Step::Local(
                    "install basebackup",
                    Local::InstallBasebackup(tmp.clone()),
                ));
                steps.push_back(Step::Local(
                    "write tenure.conf",
                    Local::WriteConfig(Some(src.clone())),
                ));
                steps.push_back(Step::Local("write standby.signal", Local::TouchStandby));
                job.alternatives.push_back((m.name().to_string(), steps));
            }
            let Some((first, steps)) = job.alternatives.pop_front() else {
                return Err(PgError::Config(
                    "no replica method (create_replica_methods is empty)".into(),
                ));
            };
            job.method = Some(first);
            job.steps = steps;
        }
        JobKind::Rewind { from } => {
            let src = source_for(source, from)?.clone();
            require_state(ctl, false)?;
            require_stopped(ctl)?;
            ctl.clear_stale_lock()?;
            let pf = ctl.passfile();
            ctl.write_owned(&pf, &conf::pgpass(&ctl.cfg))?;
            let pf = pf
                .to_str()
                .ok_or_else(|| PgError::Config(format!("passfile {} is not UTF-8", pf.display())))?
                .to_string();
            let conninfo = conf::rewind_conninfo(&ctl.cfg, &src, &pf);
            // PostgreSQL 15's pg_rewind takes the source's timeline from its
            // pg_control, which says the old timeline until the first checkpoint
            // after promotion: rewinding earlier answers "no rewind required" and
            // leaves a standby stuck on a forked timeline (seen in tests/real_pg.rs).
            job.steps.push_back(Step::Run(Cmd {
                what: crate::core::model::REWIND_SOURCE_STEP.into(),
                program: ctl.cfg.bin_dir.join("psql"),
                args: vec![
                    os("-X"),
                    os("-w"),
                    os("-v"),
                    os("ON_ERROR_STOP=1"),
                    os("-c"),
                    os("CHECKPOINT"),
                    os(&conninfo),
                ],
                env: vec![("PGCONNECT_TIMEOUT", os("10"))],
                stdin: None,
                drain: false,
                limit: None,
            }));
            job.steps.push_back(Step::Run(Cmd {
                what: "pg_rewind".into(),
                program: ctl.cfg.bin_dir.join("pg_rewind"),
                // No --no-ensure-shutdown: PostgreSQL >= 13 runs the unclean target's
                // crash recovery itself (DESIGN §3a).
                args: vec![
                    os("-D"),
                    os(&data),
                    os(format!("--source-server={conninfo}")),
                ],
                env: vec![("PGCONNECT_TIMEOUT", os("10"))],
                stdin: None,
                drain: false,
                limit: None,
            }));
            // pg_rewind copied the source's config files: ours again.
            job.steps.push_back(Step::Local(
                "write tenure.conf",
                Local::WriteConfig(Some(src)),
            ));
            job.steps
                .push_back(Step::Local("write standby.signal", Local::TouchStandby));
        }
        JobKind::StartPrimary => {
            require_state(ctl, false)?;
            require_stopped(ctl)?;
            ctl.clear_stale_lock()?;
            job.steps
                .push_back(Step::Local("write tenure.conf", Local::WriteConfig(None)));
            job.steps
                .push_back(Step::Local("remove standby.signal", Local::RemoveSignals));
            let start = pg_ctl_start(ctl)?;
            job.steps.push_back(start);
        }
        JobKind::StartReplica { leader } => {
            // An empty leader: a standby with no upstream (no leader exists yet), which
            // replays its own WAL so it can publish a live position as a candidate.
            let src = if leader.is_empty() {
                None
            } else {
                Some(source_for(source, leader)?.clone())
            };
            require_state(ctl, false)?;
            require_stopped(ctl)?;
            ctl.clear_stale_lock()?;
            job.steps
                .push_back(Step::Local("write tenure.conf", Local::WriteConfig(src)));
            job.steps
                .push_back(Step::Local("write standby.signal", Local::TouchStandby));
            job.steps
                .extend(standby_start_steps(ctl, ctl.ctl_timeout.as_secs())?);
        }
        JobKind::Stop => {
            job.steps.push_back(pg_ctl_stop(ctl));
        }
        JobKind::Restart { start_timeout } => {
            // A primary starts again as a primary, a standby (its signal files say
            // so, or the agent passed the leader it follows: `source`) as a standby.
            require_state(ctl, false)?;
            if ctl.postmaster_pid().is_none() {
                return Err(PgError::Refused("PostgreSQL is not running".into()));
            }
            let standby = source.is_some()
                || ["standby.signal", "recovery.signal"]
                    .iter()
                    .any(|f| data.join(f).exists());
            // The node's configuration as it is now (a reload's settings, a
            // changed `ssl*`, a `tenure.conf` an older version wrote): a primary's
            // files, or a standby's following `source` (the leader); a standby
            // whose leader is not known keeps its files. Written before the stop,
            // while PostgreSQL runs (it reads them only at a reload or a start):
            // files that cannot be written refuse the restart with PostgreSQL
            // still up, not after it stopped.
            if !standby {
                job.steps
                    .push_back(Step::Local("write tenure.conf", Local::WriteConfig(None)));
            } else if let Some(src) = source {
                job.steps.push_back(Step::Local(
                    "write tenure.conf",
                    Local::WriteConfig(Some(src.clone())),
                ));
                job.steps
                    .push_back(Step::Local("write standby.signal", Local::TouchStandby));
            }
            job.steps.push_back(pg_ctl_stop(ctl));
            job.steps.push_back(Step::Local(
                "check that no process of PostgreSQL remains",
                Local::RequireStopped,
            ));
            let secs = start_timeout.map_or(ctl.ctl_timeout.as_secs(), u64::from);
            // A standby starts again with its floor read after the stop: the
            // replay before it may have raised pg_control's.
            if standby {
                job.steps.extend(standby_start_steps(ctl, secs)?);
            } else {
                let start = pg_ctl_start_within(ctl, secs)?;
                job.steps.push_back(start);
            }
        }
        JobKind::Reinitialize => {
            if ctl.postmaster_pid().is_some() {
                job.steps.push_back(pg_ctl_stop(ctl));
            }
            // `move_data_aside` itself refuses while any process of this
            // PostgreSQL remains (fail-closed).
            job.steps.push_back(Step::Local(
                "move the data directory aside",
                Local::MoveAside,
            ));
        }
    }
    Ok(())
}

/// What the bootstrap's mark says while it runs.
pub(super) const BOOTSTRAP_MARK: &str = "a bootstrap (initdb, the roles, post_bootstrap) \
     was under way when this directory was written into and did not finish: no \
     `initialize` key names this cluster\n";

/// `pg_ctl stop -m fast -w`: the shutdown checkpoint, every backend gone.
fn pg_ctl_stop(ctl: &PgCtl) -> Step {
    pg_ctl_stop_within(ctl, ctl.ctl_timeout.as_secs())
}

/// The same, `pg_ctl -t secs`.
fn pg_ctl_stop_within(ctl: &PgCtl, secs: u64) -> Step {
    Step::Run(Cmd {
        what: "pg_ctl stop".into(),
        program: ctl.cfg.bin_dir.join("pg_ctl"),
        args: vec![
            os("stop"),
            os("-D"),
            os(&ctl.cfg.data_dir),
            os("-m"),
            os("fast"),
            os("-w"),
            os("-t"),
            os(secs.max(1).to_string()),
        ],
        env: vec![],
        stdin: None,
        drain: false,
        limit: None,
    })
}
