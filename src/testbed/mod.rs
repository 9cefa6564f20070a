//! Test bed: real etcd and PostgreSQL processes for `tenure demo` and the tests.
//!
//! Two layers. Always built, because `tenure demo` runs on them: the cluster on
//! loopback (`cluster`), etcd (`etcd`, `etcdkv`), the write probe (`probe`, the
//! demo measures its failover with it) and the helpers below. Built only with the
//! `testbed` feature, which tests, examples and benches turn on through their
//! dev-dependency and the shipped binary never has (docs/packaging.md): network
//! namespaces (`netns`), the delaying relay (`relay`), the watchdog stand-in's
//! support (`watchdog`), the cluster's notify sockets and `Stopped`.
//!
//! Owns: starting and stopping processes the bed itself started (by pid, never by
//! name), picking loopback ports below 32768, scratch directories on tmpfs.
//! Must never: touch a process it did not start, or send traffic anywhere but
//! 127.0.0.0/8 and namespaces it created.

pub mod cluster;
pub mod etcd;
pub mod etcdkv;
#[cfg(feature = "testbed")]
pub mod netns;
pub mod probe;
#[cfg(feature = "testbed")]
pub mod relay;
#[cfg(feature = "testbed")]
pub mod watchdog;

use std::net::{Ipv4Addr, SocketAddrV4, TcpListener};
use std::path::{Path, PathBuf};
use std::process::Child;
use std::sync::atomic::{AtomicU16, Ordering};
use std::time::{Duration, Instant};

/// Ports handed out by this process, so two beds in one process never collide.
static NEXT_PORT: AtomicU16 = AtomicU16::new(0);

/// A free TCP port on 127.0.0.1 below 32768 (the kernel's ephemeral range starts
/// there, so a TIME-WAIT socket cannot be holding it). Starts at a point derived
/// from our pid so concurrent test processes spread out.
pub fn free_port() -> u16 {
    let start = 20_000 + (std::process::id() % 500) as u16 * 20;
    let _ = NEXT_PORT.compare_exchange(0, start, Ordering::SeqCst, Ordering::SeqCst);
    loop {
        let p = NEXT_PORT.fetch_add(1, Ordering::SeqCst);
        let p = if p >= 32_000 {
            NEXT_PORT.store(10_001, Ordering::SeqCst);
            10_000
        } else {
            p
        };
        if TcpListener::bind(SocketAddrV4::new(Ipv4Addr::LOCALHOST, p)).is_ok() {
            return p;
        }
    }
}

/// A scratch directory on tmpfs (`/dev/shm`, DESIGN §6), made world-traversable so
/// the `postgres` user can reach directories below it.
pub fn scratch_dir(tag: &str) -> std::io::Result<PathBuf> {
    let base = if Path::new("/dev/shm").is_dir() {
        PathBuf::from("/dev/shm")
    } else {
        std::env::temp_dir()
    };
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .subsec_nanos();
    let dir = base.join(format!("tenure-{tag}-{}-{nanos}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755))?;
    Ok(dir)
}

/// Stop a child we started: SIGTERM, then SIGKILL after `grace`, then reap.
pub fn stop_child(child: &mut Child, grace: Duration) {
    if let Ok(Some(_)) = child.try_wait() {
        return;
    }
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
    let t0 = Instant::now();
    while t0.elapsed() < grace {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// Poll `f` every `every` until it returns `Some` or `limit` passes.
pub fn wait_for<T>(
    limit: Duration,
    every: Duration,
    mut f: impl FnMut() -> Option<T>,
) -> Option<T> {
    let t0 = Instant::now();
    loop {
        if let Some(v) = f() {
            return Some(v);
        }
        if t0.elapsed() >= limit {
            return None;
        }
        std::thread::sleep(every);
    }
}

/// SIGSTOPs processes the bed started and SIGCONTs them when dropped (or at
/// `resume`), so a failing test never leaves a process stopped.
#[cfg(feature = "testbed")]
pub struct Stopped(Vec<u32>);

#[cfg(feature = "testbed")]
impl Stopped {
    /// SIGSTOP every pid. Err names the pid that could not be stopped (those
    /// already stopped are resumed on drop).
    pub fn stop(pids: Vec<u32>) -> Result<Stopped, String> {
        let mut s = Stopped(Vec::new());
        for p in pids {
            nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(p as i32),
                nix::sys::signal::Signal::SIGSTOP,
            )
            .map_err(|e| format!("SIGSTOP to {p}: {e}"))?;
            s.0.push(p);
        }
        Ok(s)
    }

    /// SIGCONT everything now.
    pub fn resume(self) {}
}

#[cfg(feature = "testbed")]
impl Drop for Stopped {
    fn drop(&mut self) {
        for &p in &self.0 {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(p as i32),
                nix::sys::signal::Signal::SIGCONT,
            );
        }
    }
}
