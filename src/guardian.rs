//! The guardian: the fence for a frozen or dead agent where no watchdog device and
//! no systemd watchdog exist (DESIGN §2 "The guardian", docs/design.md).
//!
//! Owns: the guardian process (forked once, at start-up, before any leadership), the
//! pipe through which the agent hands it the deadline `G = F - B_g`, and the message
//! format. The child SIGKILLs the local PostgreSQL (the postmaster and every process
//! whose cwd is the data directory) when `G` passes without a newer one, or at once
//! when the agent dies (the pipe's EOF) while a `G` is pending.
//!
//! Must never, in the child after the fork: allocate, take a lock, return, unwind,
//! or touch anything of the agent's (runtime, logger, sockets). That is why it is
//! hand-written on raw, async-signal-safe system calls with fixed stack buffers,
//! instead of reusing `pg::procs` (which allocates); `tests/guardian.rs` runs every
//! path of the child under an allocator that kills a forked child that allocates.
//! Must never signal a process that is not verified, through a pidfd opened before
//! the check, to have the data directory as its cwd; never the agent, never itself.
//! On the agent's side: never block (the write end is non-blocking: a full pipe is
//! an error, not a stall), and never decide *when* to kill: the core computes `G`.

use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::core::time::Instant;

/// Every message is this long: a tag byte, seven zero bytes, then a little-endian
/// `u64` (`G` in `CLOCK_BOOTTIME` nanoseconds for `Arm`, zero otherwise). Writes of at
/// most `PIPE_BUF` bytes are atomic, so a message is never split or interleaved.
pub const MSG_LEN: usize = 16;

const TAG_ARM: u8 = b'A';
const TAG_STAND_DOWN: u8 = b'S';
const TAG_EXIT: u8 = b'X';

/// What the agent tells the guardian.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Msg {
    /// Kill at `G` unless a newer message arrives first.
    Arm(Instant),
    /// No deadline pending (after a complete fence or a clean stop).
    StandDown,
    /// Exit without killing anything (a clean exit of the agent).
    Exit,
}

impl Msg {
    pub fn encode(self) -> [u8; MSG_LEN] {
        let mut b = [0u8; MSG_LEN];
        let (tag, value) = match self {
            Msg::Arm(g) => (TAG_ARM, g.as_nanos()),
            Msg::StandDown => (TAG_STAND_DOWN, 0),
            Msg::Exit => (TAG_EXIT, 0),
        };
        b[0] = tag;
        b[8..].copy_from_slice(&value.to_le_bytes());
        b
    }

    /// `None` for anything [`Msg::encode`] cannot have written. Never panics (the
    /// child calls it).
    pub fn decode(b: &[u8; MSG_LEN]) -> Option<Msg> {
        let [
            tag,
            p1,
            p2,
            p3,
            p4,
            p5,
            p6,
            p7,
            v0,
            v1,
            v2,
            v3,
            v4,
            v5,
            v6,
            v7,
        ] = *b;
        if [p1, p2, p3, p4, p5, p6, p7] != [0; 7] {
            return None;
        }
        let value = u64::from_le_bytes([v0, v1, v2, v3, v4, v5, v6, v7]);
        match (tag, value) {
            (TAG_ARM, g) => Some(Msg::Arm(Instant::from_nanos(g))),
            (TAG_STAND_DOWN, 0) => Some(Msg::StandDown),
            (TAG_EXIT, 0) => Some(Msg::Exit),
            _ => None,
        }
    }
}

/// Why a message did not reach the guardian.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SendError {
    /// The pipe is full: the guardian is not reading (stopped?). Nothing was sent;
    /// it still holds the previous message's state.
    Full,
    /// The guardian is gone (EPIPE).
    Gone,
    /// Any other write error (errno).
    Io(i32),
}

impl std::fmt::Display for SendError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SendError::Full => write!(f, "the guardian's pipe is full (is it stopped?)"),
            SendError::Gone => write!(f, "the guardian is gone (broken pipe)"),
            SendError::Io(e) => write!(f, "write to the guardian's pipe: errno {e}"),
        }
    }
}

/// How the guardian process ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ended {
    Exited(i32),
    Signaled(i32),
    /// Reaped by someone else (the agent's orphan reaper): status unknown.
    Unknown,
}

impl std::fmt::Display for Ended {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Ended::Exited(c) => write!(f, "exit code {c}"),
            Ended::Signaled(s) => write!(f, "killed by signal {s}"),
            Ended::Unknown => write!(f, "exit status unknown"),
        }
    }
}

/// The agent's handle on its guardian.
#[derive(Debug)]
pub struct Guardian {
    pid: u32,
    /// The pipe's only write end (`O_CLOEXEC | O_NONBLOCK`); `None` once hung up.
    tx: Option<OwnedFd>,
    /// Readable once the guardian exited, reaped or not, with no pid-reuse race.
    pidfd: Option<OwnedFd>,
    /// The `G` last delivered (written whole to the pipe); `None` after a stand-down.
    holds: Option<Instant>,
    memory_locked: bool,
    exit_sent: bool,
    ended: Option<Ended>,
}

/// The child's exit codes other than 0 (a clean exit, with or without a kill).
const EXIT_NO_TIMER: i32 = 3;

/// The status the child writes once, before its loop: `G`, memory locked (0/1).
const STATUS_LEN: usize = 8;

impl Guardian {
    /// Fork the guardian for the PostgreSQL in `data_dir` (DESIGN §2: at start-up,
    /// before any leadership). `realtime_priority`: the child runs `SCHED_FIFO` at it,
    /// like the loop (`[agent] realtime_priority`). Waits (at most 5 s) for the
    /// child's status: `Ok` means it runs, in its own session, with its timer.
    ///
    /// Safe to call from a process with other threads (the tests do): the child
    /// makes only async-signal-safe calls. The agent itself has one thread.
    pub fn spawn(data_dir: &Path, realtime_priority: Option<u8>) -> Result<Guardian, String> {
        let dir = canonical(data_dir);
        let dir_bytes: Vec<u8> = dir.as_os_str().as_bytes().to_vec();
        if dir_bytes.is_empty() || dir_bytes.len() >= PATH_MAX || dir_bytes.contains(&0) {
            return Err(format!(
                "data directory {} is not usable as a guardian target",
                dir.display()
            ));
        }
        let pidfile = CString::new(dir.join("postmaster.pid").as_os_str().as_bytes())
            .map_err(|_| format!("{}: NUL in the path", dir.display()))?;
        let (rx, tx) = pipe_cloexec().map_err(|e| format!("guardian pipe: {e}"))?;
        let (srx, stx) = pipe_cloexec().map_err(|e| format!("guardian status pipe: {e}"))?;
        // SAFETY: getpid has no preconditions.
        let agent = unsafe { libc::getpid() };
        let ctx = ChildCtx {
            dir: &dir_bytes,
            pidfile: pidfile.as_bytes_with_nul(),
            agent,
            me: 0,
        };
        let (rx_fd, stx_fd) = (rx.as_raw_fd(), stx.as_raw_fd());
        // SAFETY: fork has no memory preconditions. In the child only
        // `child_main` runs: async-signal-safe system calls on memory that the fork
        // copied (`ctx`, the fds), no allocation, and it ends in `_exit`, so no
        // destructor, no lock and no other thread's state is ever touched there.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            child_main(rx_fd, stx_fd, ctx, realtime_priority);
        }
        if pid < 0 {
            return Err(format!("fork: {}", std::io::Error::last_os_error()));
        }
        drop(rx);
        drop(stx);
        let pid_u = pid as u32;
        let pidfd = pidfd_open(pid);
        let mut g = Guardian {
            pid: pid_u,
            tx: Some(tx),
            pidfd,
            holds: None,
            memory_locked: false,
            exit_sent: false,
            ended: None,
        };
        set_nonblocking(g.tx.as_ref().map_or(-1, |t| t.as_raw_fd()))
            .map_err(|e| format!("guardian pipe: O_NONBLOCK: {e}"))?;
        let status = read_status(&srx, Duration::from_secs(5));
        match status {
            Some([b'G', locked, ..]) => {
                g.memory_locked = locked == 1;
                Ok(g)
            }
            _ => {
                g.hang_up();
                let how = g
                    .wait_exit(Duration::from_secs(1))
                    .map_or("still running".to_string(), |e| e.to_string());
                Err(format!(
                    "guardian (pid {pid}) did not start ({how}; exit code {EXIT_NO_TIMER} \
                     means no CLOCK_BOOTTIME timerfd)"
                ))
            }
        }
    }

    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The child's `mlockall` succeeded.
    pub fn memory_locked(&self) -> bool {
        self.memory_locked
    }

    /// The `G` last delivered, `None` after a stand-down or before the first.
    pub fn holds(&self) -> Option<Instant> {
        self.holds
    }

    /// Hand the guardian `G` (non-blocking). On `Err` nothing was delivered and it
    /// holds what it held.
    pub fn arm(&mut self, g: Instant) -> Result<(), SendError> {
        self.send(Msg::Arm(g))?;
        self.holds = Some(g);
        Ok(())
    }

    /// No deadline pending any more (after a complete fence or a clean stop).
    pub fn stand_down(&mut self) -> Result<(), SendError> {
        self.send(Msg::StandDown)?;
        self.holds = None;
        Ok(())
    }

    fn send(&mut self, m: Msg) -> Result<(), SendError> {
        let Some(fd) = self.tx.as_ref() else {
            return Err(SendError::Gone);
        };
        let b = m.encode();
        // SAFETY: `b` is a live buffer of MSG_LEN bytes; the fd is ours and open.
        let n = unsafe { libc::write(fd.as_raw_fd(), b.as_ptr().cast(), MSG_LEN) };
        if n == MSG_LEN as isize {
            return Ok(());
        }
        // A pipe write of at most PIPE_BUF bytes is all or nothing.
        match std::io::Error::last_os_error().raw_os_error() {
            Some(libc::EAGAIN) => Err(SendError::Full),
            Some(libc::EPIPE) => Err(SendError::Gone),
            Some(e) => Err(SendError::Io(e)),
            None => Err(SendError::Io(0)),
        }
    }

    /// Still running (not exited; a stopped guardian is alive, see
    /// [`Guardian::is_stopped`]).
    pub fn is_alive(&mut self) -> bool {
        if self.ended.is_some() {
            return false;
        }
        match &self.pidfd {
            Some(fd) => !fd_readable(fd.as_raw_fd(), 0),
            None => self.try_reap().is_none(),
        }
    }

    /// Stopped by a signal (SIGSTOP aimed at it): alive, but it cannot kill.
    pub fn is_stopped(&self) -> bool {
        self.ended.is_none() && crate::pg::procs::is_stopped(self.pid)
    }

    /// Close the pipe, as the agent's death would: with a `G` pending the guardian
    /// kills at once, with none it exits.
    pub fn hang_up(&mut self) {
        self.tx = None;
    }

    /// Wait at most `limit` for the guardian to exit, and reap it.
    pub fn wait_exit(&mut self, limit: Duration) -> Option<Ended> {
        if let Some(e) = self.ended {
            return Some(e);
        }
        let until = crate::clock::now().add(limit);
        loop {
            let exited = match &self.pidfd {
                Some(fd) => fd_readable(fd.as_raw_fd(), 10),
                None => {
                    std::thread::sleep(Duration::from_millis(10));
                    true
                }
            };
            if exited && let Some(e) = self.try_reap() {
                return Some(e);
            }
            if crate::clock::now() >= until {
                return None;
            }
        }
    }

    /// A clean shutdown: stand down, exit, reap (at most `limit`). Kills nothing.
    pub fn stop(mut self, limit: Duration) -> Result<Ended, String> {
        let sd = self.stand_down();
        let ex = self.send(Msg::Exit);
        if ex.is_ok() {
            self.exit_sent = true;
        }
        self.hang_up();
        match self.wait_exit(limit) {
            Some(e) => Ok(e),
            None => Err(format!(
                "guardian (pid {}) did not exit within {:.1} s (stand down: {sd:?}, exit: {ex:?})",
                self.pid,
                limit.as_secs_f64()
            )),
        }
    }

    fn try_reap(&mut self) -> Option<Ended> {
        let mut status = 0;
        // SAFETY: `status` is a live i32; WNOHANG never blocks.
        let r = unsafe { libc::waitpid(self.pid as libc::pid_t, &mut status, libc::WNOHANG) };
        let e = if r == self.pid as libc::pid_t {
            if libc::WIFEXITED(status) {
                Ended::Exited(libc::WEXITSTATUS(status))
            } else if libc::WIFSIGNALED(status) {
                Ended::Signaled(libc::WTERMSIG(status))
            } else {
                return None;
            }
        } else if r < 0 {
            // ECHILD: someone reaped it already (the orphan reaper).
            Ended::Unknown
        } else {
            return None;
        };
        self.ended = Some(e);
        Some(e)
    }
}

impl Drop for Guardian {
    /// An error path's exit (a clean exit calls [`Guardian::stop`]): with no `G`
    /// pending, tell it to exit; with one pending, only close the pipe, which is the
    /// agent's death as far as the guardian is concerned (it kills at once).
    fn drop(&mut self) {
        if self.tx.is_some() && self.holds.is_none() && !self.exit_sent {
            let _ = self.send(Msg::Exit);
        }
        self.tx = None;
        if self.ended.is_none() {
            let _ = self.try_reap();
        }
    }
}

/// The data directory as `/proc/<pid>/cwd` shows it: canonical, or (not created
/// yet) its canonical parent joined with its name.
fn canonical(d: &Path) -> PathBuf {
    if let Ok(c) = d.canonicalize() {
        return c;
    }
    match (
        d.parent().and_then(|p| p.canonicalize().ok()),
        d.file_name(),
    ) {
        (Some(p), Some(n)) => p.join(n),
        _ => d.to_path_buf(),
    }
}

fn pipe_cloexec() -> std::io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0i32; 2];
    // SAFETY: `fds` is a live array of two c_ints for the kernel to fill.
    let r = unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) };
    if r != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: pipe2 returned two fresh descriptors that nothing else owns.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

fn set_nonblocking(fd: i32) -> std::io::Result<()> {
    // SAFETY: fcntl on an fd with integer arguments has no memory effects.
    let fl = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    // SAFETY: as above.
    if fl < 0 || unsafe { libc::fcntl(fd, libc::F_SETFL, fl | libc::O_NONBLOCK) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

fn pidfd_open(pid: libc::pid_t) -> Option<OwnedFd> {
    // SAFETY: pidfd_open takes a pid and flags and returns a new fd or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0u32) };
    if fd < 0 {
        return None;
    }
    // SAFETY: a fresh descriptor nothing else owns.
    Some(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// `poll` one fd for POLLIN for at most `ms`.
fn fd_readable(fd: i32, ms: i32) -> bool {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one live pollfd.
    let r = unsafe { libc::poll(&mut p, 1, ms) };
    r > 0 && p.revents != 0
}

fn read_status(fd: &OwnedFd, limit: Duration) -> Option<[u8; STATUS_LEN]> {
    let ms = i32::try_from(limit.as_millis()).unwrap_or(i32::MAX);
    if !fd_readable(fd.as_raw_fd(), ms) {
        return None;
    }
    let mut b = [0u8; STATUS_LEN];
    // SAFETY: `b` is a live buffer of STATUS_LEN bytes.
    let n = unsafe { libc::read(fd.as_raw_fd(), b.as_mut_ptr().cast(), STATUS_LEN) };
    (n == STATUS_LEN as isize).then_some(b)
}

// ---------------------------------------------------------------------------------
// The child. Everything below runs after the fork: raw system calls, stack buffers,
// no allocation, no panicking operation (no indexing that can fail, no overflow).
// ---------------------------------------------------------------------------------

const PATH_MAX: usize = 4096;

/// What the child needs, prepared by the parent before the fork.
#[derive(Clone, Copy)]
struct ChildCtx<'a> {
    /// The canonical data directory (no NUL).
    dir: &'a [u8],
    /// `<dir>/postmaster.pid`, NUL-terminated.
    pidfile: &'a [u8],
    /// Never signalled.
    agent: libc::pid_t,
    me: libc::pid_t,
}

fn child_main(rx: i32, status: i32, mut ctx: ChildCtx<'_>, realtime_priority: Option<u8>) -> ! {
    // SAFETY: here and in every block of this function: plain system calls with
    // integer arguments or pointers to live locals/statics; all async-signal-safe.
    unsafe {
        // Its own session: a SIGSTOP of the agent's process group misses it.
        libc::setsid();
        // Hold no directory (not the agent's cwd, which the agent's own fence
        // would scan for, nor a mount an operator wants to unmount).
        libc::chdir(c"/".as_ptr());
        ctx.me = libc::getpid();
        libc::prctl(libc::PR_SET_NAME, c"tenure-guardian".as_ptr(), 0, 0, 0);
    }
    reset_signals();
    prefault_stack();
    // SAFETY: see above.
    let locked = unsafe { libc::mlockall(libc::MCL_CURRENT | libc::MCL_FUTURE) } == 0;
    if let Some(prio) = realtime_priority {
        let param = libc::sched_param {
            sched_priority: i32::from(prio),
        };
        // SAFETY: see above; a failure leaves the normal scheduler.
        unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) };
    }
    close_all_but(&mut [rx, status, 2]);
    // SAFETY: see above.
    let tfd = unsafe {
        libc::timerfd_create(libc::CLOCK_BOOTTIME, libc::TFD_CLOEXEC | libc::TFD_NONBLOCK)
    };
    let st: [u8; STATUS_LEN] = [b'G', u8::from(locked), 0, 0, 0, 0, 0, 0];
    // SAFETY: see above.
    unsafe {
        libc::write(status, st.as_ptr().cast(), STATUS_LEN);
        libc::close(status);
    }
    if tfd < 0 {
        exit(EXIT_NO_TIMER);
    }
    let mut line = Line::new();
    line.s(b"INFO  ").me(&ctx).s(b"started (own session");
    if !locked {
        line.s(b"; mlockall FAILED: memory not locked");
    }
    line.s(b"), guarding ").s(ctx.dir).emit();
    serve(rx, tfd, &ctx)
}

/// The loop: messages first (a newer `G` that arrived wins), then the deadline.
fn serve(rx: i32, tfd: i32, ctx: &ChildCtx<'_>) -> ! {
    let mut pending: Option<u64> = None;
    let mut buf = [0u8; MSG_LEN * 32];
    let mut have = 0usize;
    loop {
        let mut fds = [
            libc::pollfd {
                fd: rx,
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: tfd,
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        // SAFETY: two live pollfds.
        let r = unsafe { libc::poll(fds.as_mut_ptr(), 2, -1) };
        if r < 0 {
            continue; // EINTR (no handler is installed, but be safe)
        }
        if fds[0].revents != 0 {
            let Some(room) = buf.get_mut(have..) else {
                have = 0;
                continue;
            };
            // SAFETY: `room` is a live, writable slice of the stack buffer.
            let n = unsafe { libc::read(rx, room.as_mut_ptr().cast(), room.len()) };
            if n == 0 || (n < 0 && !retryable(errno())) {
                // EOF: the agent is gone (its write end is the only one). A read
                // error that is not EINTR/EAGAIN is treated the same: fail closed.
                agent_gone(ctx, pending);
            }
            if n > 0 {
                have = have.saturating_add(n as usize).min(buf.len());
                let mut at = 0usize;
                while at.saturating_add(MSG_LEN) <= have {
                    let Some(Ok(m)) = buf
                        .get(at..at.saturating_add(MSG_LEN))
                        .map(<[u8; MSG_LEN]>::try_from)
                    else {
                        break;
                    };
                    match Msg::decode(&m) {
                        Some(Msg::Arm(g)) => {
                            pending = Some(g.as_nanos());
                            set_timer(tfd, g.as_nanos());
                        }
                        Some(Msg::StandDown) => {
                            pending = None;
                            set_timer(tfd, 0);
                        }
                        Some(Msg::Exit) => {
                            let mut l = Line::new();
                            l.s(b"INFO  ")
                                .me(ctx)
                                .s(b"the agent stops cleanly: exiting");
                            if pending.is_some() {
                                l.s(b" (a deadline was pending; the agent said exit)");
                            }
                            l.emit();
                            exit(0);
                        }
                        None => {}
                    }
                    at = at.saturating_add(MSG_LEN);
                }
                // Keep a partial message (none is ever written, but be exact).
                buf.copy_within(at.min(have)..have, 0);
                have = have.saturating_sub(at.min(have));
            }
        }
        let mut drain = [0u8; 8];
        // SAFETY: a live 8-byte buffer; the timerfd is non-blocking.
        unsafe { libc::read(tfd, drain.as_mut_ptr().cast(), 8) };
        if let Some(g) = pending
            && boottime_ns() >= g
        {
            let mut l = Line::new();
            l.s(b"ERROR ")
                .me(ctx)
                .s(b"ALERT: deadline G = ")
                .secs(g)
                .s(b" s passed without a newer one (the agent is frozen?): killing PostgreSQL in ")
                .s(ctx.dir)
                .emit();
            let n = kill_all(ctx);
            killed_line(ctx, n);
            pending = None;
            set_timer(tfd, 0);
        }
    }
}

fn agent_gone(ctx: &ChildCtx<'_>, pending: Option<u64>) -> ! {
    match pending {
        Some(g) => {
            let mut l = Line::new();
            l.s(b"ERROR ")
                .me(ctx)
                .s(b"ALERT: the agent died with deadline G = ")
                .secs(g)
                .s(b" s pending: killing PostgreSQL in ")
                .s(ctx.dir)
                .s(b" at once")
                .emit();
            let n = kill_all(ctx);
            killed_line(ctx, n);
        }
        None => {
            let mut l = Line::new();
            l.s(b"INFO  ")
                .me(ctx)
                .s(b"the agent is gone and no deadline is pending: exiting")
                .emit();
        }
    }
    exit(0)
}

fn killed_line(ctx: &ChildCtx<'_>, n: u32) {
    let mut l = Line::new();
    l.s(b"ERROR ")
        .me(ctx)
        .s(b"killed PostgreSQL: ")
        .num(u64::from(n))
        .s(b" SIGKILLs sent, no process with cwd ")
        .s(ctx.dir)
        .s(b" remains")
        .emit();
}

fn exit(code: i32) -> ! {
    // SAFETY: _exit ends the process at once: no destructor, no atexit handler.
    unsafe { libc::_exit(code) }
}

fn errno() -> i32 {
    // SAFETY: __errno_location returns this thread's errno slot.
    unsafe { *libc::__errno_location() }
}

fn retryable(e: i32) -> bool {
    e == libc::EINTR || e == libc::EAGAIN
}

fn boottime_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a live timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut ts) };
    (ts.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(ts.tv_nsec as u64)
}

/// Arm the timerfd at absolute `CLOCK_BOOTTIME` `g` (0: disarm). `G = 0` cannot be
/// handed in practice; it is clamped to 1 ns so it never reads as "disarm".
fn set_timer(tfd: i32, g: u64) {
    let v = libc::itimerspec {
        it_interval: libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        },
        it_value: libc::timespec {
            tv_sec: (g / 1_000_000_000) as libc::time_t,
            tv_nsec: (g % 1_000_000_000) as libc::c_long,
        },
    };
    let flags = if g == 0 { 0 } else { libc::TFD_TIMER_ABSTIME };
    // SAFETY: a live itimerspec; old value not wanted (NULL).
    unsafe { libc::timerfd_settime(tfd, flags, &v, std::ptr::null_mut()) };
}

/// Default handlers (the agent's signal-hook handlers write to fds the child closed),
/// SIGTERM/SIGINT/SIGHUP ignored (systemd's control-group stop sends SIGTERM to every
/// process: the agent's clean stop tells the guardian to exit), SIGPIPE ignored (a
/// closed stderr loses a line), nothing blocked.
fn reset_signals() {
    for sig in 1..=64 {
        if sig == libc::SIGKILL || sig == libc::SIGSTOP {
            continue;
        }
        let ign = matches!(
            sig,
            libc::SIGTERM | libc::SIGINT | libc::SIGHUP | libc::SIGPIPE
        );
        // SAFETY: a zeroed sigaction is valid (empty mask, no flags); the kernel
        // refuses signal numbers it reserves, which is harmless.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = if ign { libc::SIG_IGN } else { libc::SIG_DFL };
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(sig, &sa, std::ptr::null_mut());
        }
    }
    // SAFETY: an empty, live sigset.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigprocmask(libc::SIG_SETMASK, &set, std::ptr::null_mut());
    }
}

/// Touch the stack the loop and the kill will use, so `mlockall(MCL_CURRENT)` locks
/// it resident rather than leaving a page fault for a swap storm.
#[inline(never)]
fn prefault_stack() {
    let mut b = [0u8; 64 * 1024];
    std::hint::black_box(&mut b);
}

/// Close every fd but `keep` (sorted in place).
fn close_all_but(keep: &mut [i32]) {
    keep.sort_unstable();
    let mut lo: u32 = 0;
    for &k in keep.iter() {
        let Ok(k) = u32::try_from(k) else { continue };
        if k > lo {
            close_range(lo, k - 1);
        }
        lo = lo.max(k.saturating_add(1));
    }
    close_range(lo, u32::MAX);
}

fn close_range(lo: u32, hi: u32) {
    // SAFETY: close_range takes integers only.
    let r = unsafe { libc::syscall(libc::SYS_close_range, lo, hi, 0u32) };
    if r == 0 {
        return;
    }
    // No close_range (Linux < 5.9): one by one, up to the fd limit.
    let top = hi.min(65_535);
    let mut fd = lo;
    while fd <= top {
        // SAFETY: closing an fd number; EBADF for unused ones is harmless.
        unsafe { libc::close(fd as i32) };
        fd = fd.saturating_add(1);
        if fd == 0 {
            break;
        }
    }
}

/// SIGKILL the postmaster named in `postmaster.pid`, then every process whose cwd is
/// the data directory, until a complete `/proc` scan finds none (a scan that fails
/// is never "none": fail closed). Returns the number of SIGKILLs sent.
fn kill_all(ctx: &ChildCtx<'_>) -> u32 {
    let mut sent: u32 = 0;
    let mut rounds: u32 = 0;
    loop {
        if let Some(pm) = read_pidfile(ctx)
            && kill_if_ours(ctx, pm)
        {
            sent = sent.saturating_add(1);
        }
        match scan_and_kill(ctx) {
            Some(0) => return sent,
            Some(k) => sent = sent.saturating_add(k),
            None => {}
        }
        rounds = rounds.saturating_add(1);
        if rounds == 1000 {
            let mut l = Line::new();
            l.s(b"ERROR ")
                .me(ctx)
                .s(b"ALERT: processes of ")
                .s(ctx.dir)
                .s(b" survive SIGKILL after 1000 rounds; still trying")
                .emit();
        }
        nap_ms(2);
    }
}

fn nap_ms(ms: i64) {
    let ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: (ms * 1_000_000) as libc::c_long,
    };
    // SAFETY: a live timespec; the remainder is not wanted.
    unsafe { libc::nanosleep(&ts, std::ptr::null_mut()) };
}

/// The pid on the first line of `postmaster.pid`, if it reads as one.
fn read_pidfile(ctx: &ChildCtx<'_>) -> Option<libc::pid_t> {
    // SAFETY: `pidfile` is NUL-terminated (prepared before the fork).
    let fd = unsafe {
        libc::open(
            ctx.pidfile.as_ptr().cast(),
            libc::O_RDONLY | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return None;
    }
    let mut b = [0u8; 32];
    // SAFETY: a live 32-byte buffer.
    let n = unsafe { libc::read(fd, b.as_mut_ptr().cast(), b.len()) };
    // SAFETY: our own fd.
    unsafe { libc::close(fd) };
    let n = usize::try_from(n).ok()?;
    parse_pid(b.get(..n)?.split(|&c| c == b'\n').next()?)
}

/// A positive decimal pid and nothing else.
fn parse_pid(s: &[u8]) -> Option<libc::pid_t> {
    if s.is_empty() || s.len() > 10 {
        return None;
    }
    let mut v: i64 = 0;
    for &c in s {
        if !c.is_ascii_digit() {
            return None;
        }
        v = v * 10 + i64::from(c - b'0');
    }
    let v = libc::pid_t::try_from(v).ok()?;
    (v > 0).then_some(v)
}

/// One pass over `/proc`: SIGKILL every process (but the agent and ourselves) whose
/// cwd is the data directory. `Some(found)`, or `None` if `/proc` could not be read.
fn scan_and_kill(ctx: &ChildCtx<'_>) -> Option<u32> {
    // SAFETY: a static NUL-terminated path.
    let fd = unsafe {
        libc::open(
            c"/proc".as_ptr(),
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return None;
    }
    let mut found: u32 = 0;
    let mut buf = [0u8; 4096];
    let ok = loop {
        // SAFETY: a live buffer of buf.len() bytes for the kernel to fill.
        let n = unsafe { libc::syscall(libc::SYS_getdents64, fd, buf.as_mut_ptr(), buf.len()) };
        if n < 0 {
            break false;
        }
        if n == 0 {
            break true;
        }
        let end = usize::try_from(n).unwrap_or(0).min(buf.len());
        let mut off = 0usize;
        // struct linux_dirent64: d_ino u64, d_off i64, d_reclen u16, d_type u8, d_name.
        while off < end {
            let Some(&[r0, r1]) = buf.get(off + 16..off + 18) else {
                break;
            };
            let reclen = usize::from(u16::from_ne_bytes([r0, r1]));
            if reclen == 0 {
                break;
            }
            let name = buf
                .get(off + 19..(off + reclen).min(end))
                .and_then(|n| n.split(|&c| c == 0).next());
            if let Some(pid) = name.and_then(parse_pid)
                && pid != ctx.me
                && pid != ctx.agent
                && kill_if_ours(ctx, pid)
            {
                found = found.saturating_add(1);
            }
            off = off.saturating_add(reclen);
        }
    };
    // SAFETY: our own fd.
    unsafe { libc::close(fd) };
    ok.then_some(found)
}

/// SIGKILL `pid` if its cwd is the data directory: the pidfd is opened first, then
/// the cwd checked, then the signal sent through the pidfd, so a pid reused in
/// between is never hit. Without pidfds (ENOSYS): check, then kill(2).
fn kill_if_ours(ctx: &ChildCtx<'_>, pid: libc::pid_t) -> bool {
    if pid == ctx.me || pid == ctx.agent || pid <= 1 {
        return false;
    }
    // SAFETY: integers only.
    let pfd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0u32) };
    if pfd < 0 {
        if errno() != libc::ENOSYS {
            return false; // ESRCH: gone; anything else: not verifiable
        }
        if !cwd_is(ctx, pid) {
            return false;
        }
        // SAFETY: integers only.
        unsafe { libc::kill(pid, libc::SIGKILL) };
        return true;
    }
    let pfd = pfd as i32;
    let ours = cwd_is(ctx, pid);
    if ours {
        // SAFETY: our pidfd; NULL info (as kill(2)); flags 0.
        unsafe {
            libc::syscall(
                libc::SYS_pidfd_send_signal,
                pfd,
                libc::SIGKILL,
                std::ptr::null::<libc::siginfo_t>(),
                0u32,
            )
        };
    }
    // SAFETY: our own fd.
    unsafe { libc::close(pfd) };
    ours
}

/// `readlink("/proc/<pid>/cwd") == dir` (a zombie's cwd reads as ENOENT: it cannot
/// run, let alone commit).
fn cwd_is(ctx: &ChildCtx<'_>, pid: libc::pid_t) -> bool {
    let mut path = [0u8; 32];
    let mut w = Writer {
        buf: &mut path,
        len: 0,
    };
    w.put(b"/proc/");
    w.num(pid as u64);
    w.put(b"/cwd\0");
    if w.len >= 32 {
        return false; // truncated: cannot name it
    }
    let mut out = [0u8; PATH_MAX];
    // SAFETY: `path` is NUL-terminated; `out` is a live buffer of PATH_MAX bytes.
    let n = unsafe { libc::readlink(path.as_ptr().cast(), out.as_mut_ptr().cast(), PATH_MAX) };
    let Ok(n) = usize::try_from(n) else {
        return false;
    };
    n < PATH_MAX && out.get(..n) == Some(ctx.dir)
}

/// Bytes into a fixed buffer; what does not fit is dropped.
struct Writer<'a> {
    buf: &'a mut [u8],
    len: usize,
}

impl Writer<'_> {
    fn put(&mut self, s: &[u8]) {
        for &c in s {
            if let Some(slot) = self.buf.get_mut(self.len) {
                *slot = c;
                self.len += 1;
            } else {
                // Mark as overflowing so callers can tell.
                self.len = self.buf.len().saturating_add(1);
                return;
            }
        }
    }

    fn num(&mut self, mut v: u64) {
        let mut d = [0u8; 20];
        let mut i = d.len();
        loop {
            i -= 1;
            if let Some(slot) = d.get_mut(i) {
                *slot = b'0' + (v % 10) as u8;
            }
            v /= 10;
            if v == 0 || i == 0 {
                break;
            }
        }
        if let Some(digits) = d.get(i..) {
            self.put(digits);
        }
    }
}

/// One log line on stderr, in the agent's format (`[<CLOCK_BOOTTIME>s] LEVEL ...`),
/// built in a fixed buffer and written with one `write` (a closed or full stderr
/// loses the line, nothing else).
struct Line {
    buf: [u8; 1024],
    len: usize,
}

impl Line {
    fn new() -> Line {
        let mut l = Line {
            buf: [0u8; 1024],
            len: 0,
        };
        l.s(b"[").secs(boottime_ns()).s(b"s] ");
        l
    }

    fn s(&mut self, b: &[u8]) -> &mut Line {
        let mut w = Writer {
            buf: &mut self.buf,
            len: self.len,
        };
        w.put(b);
        self.len = w.len.min(self.buf.len());
        self
    }

    fn num(&mut self, v: u64) -> &mut Line {
        let mut w = Writer {
            buf: &mut self.buf,
            len: self.len,
        };
        w.num(v);
        self.len = w.len.min(self.buf.len());
        self
    }

    /// Nanoseconds as seconds with three decimals.
    fn secs(&mut self, ns: u64) -> &mut Line {
        let ms = ns / 1_000_000;
        self.num(ms / 1000).s(b".");
        let frac = ms % 1000;
        if frac < 100 {
            self.s(b"0");
        }
        if frac < 10 {
            self.s(b"0");
        }
        self.num(frac)
    }

    fn me(&mut self, ctx: &ChildCtx<'_>) -> &mut Line {
        self.s(b"tenure-guardian[").num(ctx.me as u64).s(b"]: ")
    }

    fn emit(&mut self) {
        if self.len >= self.buf.len() {
            self.len = self.buf.len() - 1;
        }
        if let Some(slot) = self.buf.get_mut(self.len) {
            *slot = b'\n';
        }
        let n = self.len + 1;
        // SAFETY: `buf` is live and at least `n` bytes long.
        unsafe { libc::write(2, self.buf.as_ptr().cast(), n) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_round_trip() {
        for m in [
            Msg::Arm(Instant::from_nanos(0)),
            Msg::Arm(Instant::from_nanos(1_234_567_890_123)),
            Msg::Arm(Instant::from_nanos(u64::MAX)),
            Msg::StandDown,
            Msg::Exit,
        ] {
            let b = m.encode();
            assert_eq!(b.len(), MSG_LEN);
            assert_eq!(Msg::decode(&b), Some(m), "{b:?}");
        }
    }

    #[test]
    fn message_layout_is_fixed() {
        let b = Msg::Arm(Instant::from_nanos(0x0102_0304_0506_0708)).encode();
        assert_eq!(
            b,
            [b'A', 0, 0, 0, 0, 0, 0, 0, 8, 7, 6, 5, 4, 3, 2, 1],
            "tag, seven zero bytes, G little-endian"
        );
        assert_eq!(Msg::StandDown.encode()[0], b'S');
        assert_eq!(Msg::Exit.encode()[0], b'X');
    }

    #[test]
    fn garbage_is_refused() {
        let mut b = Msg::StandDown.encode();
        b[15] = 1; // a stand-down carries no value
        assert_eq!(Msg::decode(&b), None);
        let mut b = Msg::Exit.encode();
        b[3] = 9; // padding must be zero
        assert_eq!(Msg::decode(&b), None);
        let mut b = Msg::Exit.encode();
        b[0] = b'?';
        assert_eq!(Msg::decode(&b), None);
        assert_eq!(Msg::decode(&[0; MSG_LEN]), None);
    }

    #[test]
    fn pids_parse_strictly() {
        assert_eq!(parse_pid(b"1234"), Some(1234));
        assert_eq!(parse_pid(b"0"), None);
        assert_eq!(parse_pid(b""), None);
        assert_eq!(parse_pid(b"12a"), None);
        assert_eq!(parse_pid(b"self"), None);
        assert_eq!(parse_pid(b"99999999999"), None);
        assert_eq!(parse_pid(b"4294967296"), None);
    }

    #[test]
    fn writer_never_overflows() {
        let mut b = [0u8; 8];
        let mut w = Writer {
            buf: &mut b,
            len: 0,
        };
        w.put(b"/proc/");
        w.num(123_456);
        assert!(w.len > 8, "overflow is visible");
        let mut b = [0u8; 32];
        let mut w = Writer {
            buf: &mut b,
            len: 0,
        };
        w.num(0);
        w.put(b"|");
        w.num(u64::MAX);
        let len = w.len;
        assert_eq!(&b[..len], b"0|18446744073709551615");
    }
}
