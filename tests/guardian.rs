//! The guardian process on its own (DESIGN §2 "The guardian", `src/guardian.rs`):
//! real forks, real signals, dummy "PostgreSQL" processes (`sleep`) whose cwd is a
//! scratch data directory. No etcd, no PostgreSQL.
//!
//! The whole binary runs under a global allocator that `_exit(99)`s any process
//! other than the test process that allocates: a guardian child that allocated after
//! the fork would end with code 99 instead of 0, and every test below checks how the
//! guardian ended. `tripwire_catches_an_allocating_child` shows the tripwire works.

use std::alloc::{GlobalAlloc, Layout, System};
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use tenure::clock;
use tenure::core::time::Instant;
use tenure::guardian::{Ended, Guardian, SendError};
use tenure::testbed::{scratch_dir, wait_for};

/// Any allocation in a process whose pid is not `PARENT` ends it with code 99.
struct Tripwire;

static PARENT: AtomicI32 = AtomicI32::new(0);

fn tripwire() {
    let p = PARENT.load(Ordering::Relaxed);
    // SAFETY: getpid and _exit have no preconditions.
    if p != 0 && unsafe { libc::getpid() } != p {
        // SAFETY: _exit ends the process at once; nothing of it is used afterwards.
        unsafe { libc::_exit(99) };
    }
}

// SAFETY: delegates to the system allocator unchanged; the check only reads an
// atomic and makes a system call.
unsafe impl GlobalAlloc for Tripwire {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        tripwire();
        // SAFETY: the caller's contract, passed on.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        tripwire();
        // SAFETY: the caller's contract, passed on.
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        tripwire();
        // SAFETY: the caller's contract, passed on.
        unsafe { System.alloc_zeroed(l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        tripwire();
        // SAFETY: the caller's contract, passed on.
        unsafe { System.realloc(p, l, n) }
    }
}

#[global_allocator]
static ALLOC: Tripwire = Tripwire;

fn arm_tripwire() {
    // SAFETY: getpid has no preconditions.
    PARENT.store(unsafe { libc::getpid() }, Ordering::Relaxed);
}

/// `B_g`'s default: the kill must be over this long after `G` (DESIGN §2).
const B_G: Duration = Duration::from_millis(500);

struct Dir(PathBuf);

impl Dir {
    fn new(tag: &str) -> Dir {
        let d = scratch_dir(tag).expect("scratch dir");
        Dir(d.canonicalize().expect("canonical"))
    }
    fn data(&self) -> PathBuf {
        let d = self.0.join("data");
        std::fs::create_dir_all(&d).expect("data dir");
        d
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A dummy process whose cwd is `dir`, killed and reaped when dropped.
struct Dummy(Child);

impl Dummy {
    fn start(dir: &Path) -> Dummy {
        let c = Command::new("sleep")
            .arg("1000")
            .current_dir(dir)
            .spawn()
            .expect("spawn sleep");
        let d = Dummy(c);
        let cwd = format!("/proc/{}/cwd", d.pid());
        wait_for(Duration::from_secs(5), Duration::from_millis(5), || {
            (std::fs::read_link(&cwd).ok()? == dir).then_some(())
        })
        .expect("dummy in its dir");
        d
    }
    fn pid(&self) -> u32 {
        self.0.id()
    }
    /// Reaps it if it died; true while it runs.
    fn alive(&mut self) -> bool {
        matches!(self.0.try_wait(), Ok(None))
    }
}

impl Drop for Dummy {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn spawn(dir: &Path) -> Guardian {
    arm_tripwire();
    Guardian::spawn(dir, None).unwrap_or_else(|e| panic!("spawn: {e}"))
}

/// The first instant at which every dummy is dead (polled every ms), or `None`
/// within `limit`.
fn all_dead_at(ds: &mut [&mut Dummy], limit: Duration) -> Option<Instant> {
    wait_for(limit, Duration::from_millis(1), || {
        ds.iter_mut().all(|d| !d.alive()).then(clock::now)
    })
}

fn clean_exit(g: Guardian) {
    let e = g.stop(Duration::from_secs(5)).expect("stop");
    assert_eq!(
        e,
        Ended::Exited(0),
        "the guardian did not exit cleanly: {e}"
    );
}

#[test]
fn tripwire_catches_an_allocating_child() {
    arm_tripwire();
    // SAFETY: the child only allocates (which the tripwire turns into _exit(99)) or
    // exits.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        let v = std::hint::black_box(vec![1u8; 64]);
        drop(v);
        // SAFETY: no preconditions.
        unsafe { libc::_exit(0) };
    }
    assert!(pid > 0);
    let mut st = 0;
    // SAFETY: a live status.
    unsafe { libc::waitpid(pid, &mut st, 0) };
    assert!(libc::WIFEXITED(st));
    assert_eq!(
        libc::WEXITSTATUS(st),
        99,
        "an allocating child ends with 99"
    );
}

/// DESIGN §2: its own session (`setsid`), memory locked after the fork (`mlockall`
/// is not inherited: the test process itself locks nothing).
#[test]
fn the_guardian_has_its_own_session_and_locked_memory() {
    let d = Dir::new("guardian-session");
    let g = spawn(&d.data());
    let pid = g.pid();
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("stat");
    let rest = &stat[stat.rfind(')').expect("comm") + 2..];
    // state ppid pgrp session ...
    let f: Vec<&str> = rest.split_whitespace().collect();
    let (ppid, pgrp, session) = (f[1], f[2], f[3]);
    assert_eq!(ppid, std::process::id().to_string(), "forked by us");
    assert_eq!(session, pid.to_string(), "a session of its own: {stat}");
    assert_eq!(pgrp, pid.to_string(), "its own process group: {stat}");
    let our_session = std::fs::read_to_string("/proc/self/stat").expect("own stat");
    let ours: Vec<&str> = our_session[our_session.rfind(')').unwrap() + 2..]
        .split_whitespace()
        .collect();
    assert_ne!(ours[3], session, "not our session");
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    let vmlck = status
        .lines()
        .find_map(|l| l.strip_prefix("VmLck:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .expect("VmLck");
    assert!(g.memory_locked(), "mlockall reported a failure");
    assert!(vmlck > 0, "VmLck is {vmlck} kB: {status}");
    let name = std::fs::read_to_string(format!("/proc/{pid}/comm")).expect("comm");
    assert_eq!(name.trim(), "tenure-guardian");
    // Only its pipe, stderr (and nothing inherited) stay open.
    let fds: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .expect("fd dir")
        .filter_map(|e| e.ok().map(|e| e.file_name().to_string_lossy().into_owned()))
        .collect();
    assert!(fds.len() <= 4, "fds {fds:?}: pipe, stderr, timerfd");
    println!("guardian pid {pid}: session {session}, VmLck {vmlck} kB, fds {fds:?}");
    clean_exit(g);
}

/// `G` passes with no newer one: every process whose cwd is the data directory is
/// SIGKILLed, not before `G` and over by `G + B_g`; a process elsewhere survives even
/// when `postmaster.pid` names it.
#[test]
fn g_passing_kills_every_process_in_the_data_directory_and_nothing_else() {
    let d = Dir::new("guardian-g");
    let data = d.data();
    let other_dir = d.0.join("elsewhere");
    std::fs::create_dir_all(&other_dir).unwrap();
    let mut pm = Dummy::start(&data);
    let mut backend = Dummy::start(&data);
    let mut bystander = Dummy::start(&other_dir);
    // A stale postmaster.pid naming a process that is not ours.
    std::fs::write(
        data.join("postmaster.pid"),
        format!("{}\n{}\n", bystander.pid(), data.display()),
    )
    .unwrap();
    let mut g = spawn(&data);
    let at = clock::now().add(Duration::from_millis(400));
    g.arm(at).expect("arm");
    assert_eq!(g.holds(), Some(at));
    std::thread::sleep(Duration::from_millis(200));
    assert!(pm.alive() && backend.alive(), "killed before G");
    let dead = all_dead_at(&mut [&mut pm, &mut backend], Duration::from_secs(5))
        .expect("processes in the data directory survived G");
    println!(
        "killed {:.3} s after G (bound: B_g = {:.1} s)",
        dead.since(at).as_secs_f64(),
        B_G.as_secs_f64()
    );
    assert!(dead >= at, "killed before G");
    assert!(dead <= at.add(B_G), "kill not over by G + B_g");
    assert!(
        bystander.alive(),
        "a process outside the data directory was killed"
    );
    assert!(g.is_alive(), "the guardian keeps running after a G kill");
    clean_exit(g);
    assert!(bystander.alive());
}

/// The postmaster named in `postmaster.pid` is killed too, and a newer `G` that
/// arrives before the old one passes postpones the kill.
#[test]
fn a_newer_g_postpones_the_kill() {
    let d = Dir::new("guardian-newer");
    let data = d.data();
    let mut pm = Dummy::start(&data);
    std::fs::write(data.join("postmaster.pid"), format!("{}\n", pm.pid())).unwrap();
    let mut g = spawn(&data);
    let g1 = clock::now().add(Duration::from_millis(300));
    g.arm(g1).expect("arm");
    std::thread::sleep(Duration::from_millis(100));
    let g2 = clock::now().add(Duration::from_millis(900));
    g.arm(g2).expect("re-arm");
    std::thread::sleep(clock::now().until(g1) + Duration::from_millis(300));
    assert!(clock::now() > g1.add(Duration::from_millis(250)));
    assert!(
        pm.alive(),
        "killed at the old G although a newer one arrived"
    );
    let dead = all_dead_at(&mut [&mut pm], Duration::from_secs(5)).expect("not killed at G2");
    assert!(
        dead >= g2 && dead <= g2.add(B_G),
        "kill outside [G2, G2 + B_g]"
    );
    clean_exit(g);
}

/// Stand-down cancels the pending `G`; a clean stop kills nothing.
#[test]
fn stand_down_cancels_and_a_clean_stop_kills_nothing() {
    let d = Dir::new("guardian-standdown");
    let data = d.data();
    let mut pm = Dummy::start(&data);
    let mut g = spawn(&data);
    g.arm(clock::now().add(Duration::from_millis(200)))
        .expect("arm");
    g.stand_down().expect("stand down");
    assert_eq!(g.holds(), None);
    std::thread::sleep(Duration::from_millis(600));
    assert!(pm.alive(), "killed after a stand-down");
    // A clean stop with a G pending: stop() stands down first, then exits.
    g.arm(clock::now().add(Duration::from_millis(300)))
        .expect("arm");
    clean_exit(g);
    std::thread::sleep(Duration::from_millis(600));
    assert!(pm.alive(), "a clean stop killed PostgreSQL");
}

/// The agent dies (its pipe closes) with a `G` pending: the guardian kills at once,
/// long before `G`, and exits.
#[test]
fn agent_death_with_g_pending_kills_at_once() {
    let d = Dir::new("guardian-eof");
    let data = d.data();
    let mut pm = Dummy::start(&data);
    let mut backend = Dummy::start(&data);
    let mut g = spawn(&data);
    let far = clock::now().add(Duration::from_secs(60));
    g.arm(far).expect("arm");
    let t = clock::now();
    g.hang_up();
    let dead = all_dead_at(&mut [&mut pm, &mut backend], Duration::from_secs(5))
        .expect("the agent's death did not kill PostgreSQL");
    println!(
        "killed {:.3} s after the agent's death",
        dead.since(t).as_secs_f64()
    );
    assert!(dead < far);
    assert_eq!(g.wait_exit(Duration::from_secs(5)), Some(Ended::Exited(0)));
    assert!(!g.is_alive());
}

/// The agent dies with nothing pending: the guardian exits and kills nothing.
#[test]
fn agent_death_without_g_kills_nothing() {
    let d = Dir::new("guardian-eof-idle");
    let data = d.data();
    let mut pm = Dummy::start(&data);
    let mut g = spawn(&data);
    g.hang_up();
    assert_eq!(g.wait_exit(Duration::from_secs(5)), Some(Ended::Exited(0)));
    std::thread::sleep(Duration::from_millis(200));
    assert!(pm.alive(), "killed with no deadline pending");
}

/// The parent side never blocks: a stopped guardian's full pipe is `Full`, a dead
/// one is `Gone`; `is_stopped` and `is_alive` say so.
#[test]
fn the_parent_side_never_blocks() {
    let d = Dir::new("guardian-api");
    let data = d.data();
    let mut g = spawn(&data);
    assert!(g.is_alive() && !g.is_stopped());
    let pid = Pid::from_raw(g.pid() as i32);
    kill(pid, Signal::SIGSTOP).expect("SIGSTOP");
    wait_for(Duration::from_secs(2), Duration::from_millis(5), || {
        g.is_stopped().then_some(())
    })
    .expect("seen stopped");
    let far = clock::now().add(Duration::from_secs(3600));
    let t0 = std::time::Instant::now();
    let mut sent = 0;
    let full = loop {
        match g.arm(far) {
            Ok(()) => sent += 1,
            Err(e) => break e,
        }
        assert!(sent < 1_000_000, "the pipe never filled");
    };
    assert_eq!(full, SendError::Full, "after {sent} messages");
    assert!(t0.elapsed() < Duration::from_secs(2), "a write blocked");
    assert_eq!(g.holds(), Some(far), "the last delivered G");
    kill(pid, Signal::SIGCONT).expect("SIGCONT");
    g.stand_down().ok();
    // Drain: the guardian reads the backlog, then the stand-down.
    wait_for(Duration::from_secs(5), Duration::from_millis(10), || {
        g.stand_down().ok()
    })
    .expect("pipe drained");
    kill(pid, Signal::SIGKILL).expect("SIGKILL");
    assert_eq!(
        g.wait_exit(Duration::from_secs(5)),
        Some(Ended::Signaled(libc::SIGKILL))
    );
    assert!(!g.is_alive());
    assert_eq!(g.arm(far), Err(SendError::Gone));
    println!("pipe full after {sent} messages");
}
