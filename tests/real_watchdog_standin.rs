//! The watchdog stand-in (DESIGN §6 "Watchdog:") against real FUSE, as root:
//! the ioctls a driver answers, the kernel's open/release rules, and the
//! firing that "resets the host" of a test node. Raw ioctls through libc, so
//! these tests do not depend on the agent's own driver module.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use tenure::clock;
use tenure::core::time::Instant;
use tenure::testbed::watchdog::{
    HostKill, StandinOptions, WDIOC_GETBOOTSTATUS, WDIOC_GETSUPPORT, WDIOC_GETTIMELEFT,
    WDIOC_GETTIMEOUT, WDIOC_KEEPALIVE, WDIOC_SETPRETIMEOUT, WDIOC_SETTIMEOUT, WDIOF_CARDRESET,
    WDIOF_KEEPALIVEPING, WDIOF_MAGICCLOSE, WDIOF_SETTIMEOUT, WatchdogInfo, WatchdogStandin,
};
use tenure::testbed::{scratch_dir, stop_child, wait_for};

const FREEZER_ROOT: &str = "/sys/fs/cgroup/freezer";

/// One ioctl whose argument is an `int` (in, out or both). Returns the int
/// after the call, or the errno.
fn ioctl_int(f: &File, req: u32, val: i32) -> Result<i32, nix::errno::Errno> {
    let mut v: libc::c_int = val;
    // SAFETY: every watchdog ioctl used here reads and/or writes exactly one
    // `int` at the pointer, which points at a live local of that type.
    let r = unsafe {
        libc::ioctl(
            f.as_raw_fd(),
            req as libc::c_ulong,
            &mut v as *mut libc::c_int,
        )
    };
    if r < 0 {
        Err(nix::errno::Errno::last())
    } else {
        Ok(v)
    }
}

fn get_support(f: &File) -> Result<WatchdogInfo, nix::errno::Errno> {
    let mut info = WatchdogInfo::default();
    // SAFETY: WDIOC_GETSUPPORT writes one `struct watchdog_info` (40 bytes,
    // the layout of `WatchdogInfo`, checked by a unit test) at the pointer.
    let r = unsafe {
        libc::ioctl(
            f.as_raw_fd(),
            WDIOC_GETSUPPORT as libc::c_ulong,
            &mut info as *mut WatchdogInfo,
        )
    };
    if r < 0 {
        Err(nix::errno::Errno::last())
    } else {
        Ok(info)
    }
}

fn open_dev(path: &Path) -> std::io::Result<File> {
    std::fs::OpenOptions::new().write(true).open(path)
}

/// A test "node": a sleeping process (and what kills it when it fires).
struct Node {
    child: Child,
    cgroup: Option<PathBuf>,
}

impl Node {
    /// A `sleep` in its own freezer cgroup, if this machine has the freezer.
    fn in_freezer(tag: &str) -> Node {
        let mut child = Command::new("sleep")
            .arg("600")
            .stdin(Stdio::null())
            .spawn()
            .expect("spawn sleep");
        let root = Path::new(FREEZER_ROOT);
        let cgroup = root.join("cgroup.procs").exists().then(|| {
            let cg = root.join(format!("tenure-wdt-{tag}-{}", std::process::id()));
            std::fs::create_dir_all(&cg).expect("create freezer cgroup");
            std::fs::write(cg.join("cgroup.procs"), child.id().to_string())
                .expect("move the node's process into its cgroup");
            cg
        });
        if cgroup.is_none() {
            eprintln!("no cgroup v1 freezer here: the node is killed by pid");
        }
        let _ = child.try_wait();
        Node { child, cgroup }
    }

    /// A `sleep` whose cwd is `data_dir`, killed by pid + data dir.
    fn by_pid(data_dir: &Path) -> Node {
        let child = Command::new("sleep")
            .arg("600")
            .current_dir(data_dir)
            .stdin(Stdio::null())
            .spawn()
            .expect("spawn sleep");
        Node {
            child,
            cgroup: None,
        }
    }

    fn host(&self, data_dir: Option<&Path>) -> HostKill {
        match &self.cgroup {
            Some(cg) => HostKill::Freezer(cg.clone()),
            None => HostKill::Pids {
                pids: vec![self.child.id() as i32],
                data_dir: data_dir.map(Path::to_path_buf),
            },
        }
    }

    /// Whether the node's process died of SIGKILL (waits at most `limit`).
    fn killed(&mut self, limit: Duration) -> bool {
        use std::os::unix::process::ExitStatusExt;
        wait_for(limit, Duration::from_millis(5), || {
            self.child.try_wait().ok().flatten()
        })
        .is_some_and(|st| st.signal() == Some(libc::SIGKILL))
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        stop_child(&mut self.child, Duration::from_millis(100));
        if let Some(cg) = &self.cgroup {
            let _ = std::fs::remove_dir(cg);
        }
    }
}

/// Start a stand-in on a fresh scratch dir: `(scratch, stand-in)`.
fn standin(tag: &str, tweak: impl FnOnce(&mut StandinOptions)) -> (PathBuf, WatchdogStandin) {
    let dir = scratch_dir(&format!("wdt-{tag}")).expect("scratch dir");
    let mut o = StandinOptions::new(dir.join("watchdog"), dir.join("state"));
    tweak(&mut o);
    let wd = WatchdogStandin::start(&o, Duration::from_secs(10)).expect("start stand-in");
    (dir, wd)
}

/// The last event named `name` at or before the firing, e.g. the last ping.
fn last_event_before(
    wd: &WatchdogStandin,
    name: &str,
    until: Instant,
) -> Option<(Instant, String)> {
    wd.event_list()
        .into_iter()
        .rfind(|(t, ev, _)| ev == name && *t <= until)
        .map(|(t, _, d)| (t, d))
}

/// Wait for the firing and check it came after `W` from the last ping and
/// well before `W + 1 s`; returns the firing instant and the last ping's reason.
fn assert_fired_after(wd: &WatchdogStandin, w: Duration, limit: Duration) -> (Instant, String) {
    let (at, reason) = wd
        .wait_fired(limit)
        .unwrap_or_else(|| panic!("did not fire within {limit:?}; events:\n{}", wd.events()));
    let (ping, why) = last_event_before(wd, "ping", at).expect("a ping before the firing");
    let after = at.since(ping);
    eprintln!(
        "fired {:?} after the last ping ({why}); W = {w:?}, lateness {:?}; {reason}",
        after,
        after.saturating_sub(w)
    );
    assert!(
        after >= w,
        "fired early: {after:?} < W {w:?}\n{}",
        wd.events()
    );
    assert!(
        after < w + Duration::from_secs(1),
        "fired late: {after:?}\n{}",
        wd.events()
    );
    (at, why)
}

#[test]
fn answers_the_driver_ioctls_and_refuses_a_second_open() {
    let (dir, wd) = standin("ioctl", |o| {
        o.timeout_s = 10;
        o.max_timeout_s = 30;
    });
    let f = open_dev(wd.path()).expect("open the stand-in");

    let info = get_support(&f).expect("GETSUPPORT");
    let id = std::str::from_utf8(&info.identity)
        .expect("ascii identity")
        .trim_end_matches('\0');
    assert_eq!(id, "tenure-standin");
    for bit in [WDIOF_SETTIMEOUT, WDIOF_MAGICCLOSE, WDIOF_KEEPALIVEPING] {
        assert_ne!(
            info.options & bit,
            0,
            "option {bit:#x} in {:#x}",
            info.options
        );
    }
    assert_eq!(ioctl_int(&f, WDIOC_GETBOOTSTATUS, -1), Ok(0));
    assert_eq!(ioctl_int(&f, WDIOC_SETTIMEOUT, 2), Ok(2));
    assert_eq!(ioctl_int(&f, WDIOC_GETTIMEOUT, 0), Ok(2));
    // Over the maximum: clamped, and the read-back says so.
    assert_eq!(ioctl_int(&f, WDIOC_SETTIMEOUT, 1000), Ok(30));
    assert_eq!(ioctl_int(&f, WDIOC_GETTIMEOUT, 0), Ok(30));
    assert_eq!(
        ioctl_int(&f, WDIOC_SETTIMEOUT, 0),
        Err(nix::errno::Errno::EINVAL)
    );
    assert_eq!(ioctl_int(&f, WDIOC_SETTIMEOUT, 2), Ok(2));
    // A pretimeout must be below the timeout.
    assert_eq!(
        ioctl_int(&f, WDIOC_SETPRETIMEOUT, 2),
        Err(nix::errno::Errno::EINVAL)
    );
    assert_eq!(ioctl_int(&f, WDIOC_SETPRETIMEOUT, 1), Ok(1));
    assert_eq!(ioctl_int(&f, WDIOC_KEEPALIVE, 0).map(|_| ()), Ok(()));
    let left = ioctl_int(&f, WDIOC_GETTIMELEFT, -1).expect("GETTIMELEFT");
    assert!((0..=2).contains(&left), "time left {left}");
    // Not a watchdog ioctl: ENOTTY, like any driver.
    let bogus = nix::request_code_read!(b'W', 99, 4) as u32;
    assert_eq!(ioctl_int(&f, bogus, 0), Err(nix::errno::Errno::ENOTTY));

    let second = open_dev(wd.path()).expect_err("a second open must fail");
    assert_eq!(second.raw_os_error(), Some(libc::EBUSY), "{second}");

    // Magic close: disarmed, nothing fires.
    (&f).write_all_v();
    drop(f);
    std::thread::sleep(Duration::from_millis(2500));
    assert_eq!(wd.fired(), None, "{}", wd.events());
    assert!(wd.events().contains(" disarm "), "{}", wd.events());
    drop(wd);
    let _ = std::fs::remove_dir_all(dir);
}

/// The magic character, written through the fd (a one-byte write, like the agent).
trait WriteV {
    fn write_all_v(self);
}
impl WriteV for &File {
    fn write_all_v(self) {
        use std::io::Write;
        let mut f = self;
        f.write_all(b"V").expect("write 'V'");
    }
}

#[test]
fn keepalive_holds_it_off_then_it_fires_and_kills_the_node() {
    let mut node = Node::in_freezer("fire");
    let host = node.host(None);
    let (dir, mut wd) = standin("fire", |o| o.host = host);
    let f = open_dev(wd.path()).expect("open");
    // W = 2 s: a test thread starved for a second on two busy cores must not
    // let it fire early.
    let w = Duration::from_secs(2);
    assert_eq!(ioctl_int(&f, WDIOC_SETTIMEOUT, 2), Ok(2));
    // Pet for 2.5 W (every 0.1 W): it must not fire.
    let until = clock::now().add(w * 5 / 2);
    while clock::now() < until {
        ioctl_int(&f, WDIOC_KEEPALIVE, 0).expect("KEEPALIVE");
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(wd.fired(), None, "{}", wd.events());
    assert!(!node.killed(Duration::ZERO), "the node died while petted");

    // Stop petting, keep it open (a hung agent).
    let (_, why) = assert_fired_after(&wd, w, Duration::from_secs(5));
    assert_eq!(why, "keepalive");
    assert!(
        node.killed(Duration::from_secs(5)),
        "the node survived the firing"
    );

    // Dead until revived; then the next boot reports the card reset.
    let refused = open_dev(wd.path()).expect_err("open after the firing");
    assert_eq!(refused.raw_os_error(), Some(libc::ENODEV), "{refused}");
    drop(f);
    wd.revive().expect("revive");
    assert_eq!(wd.fired(), None);
    let f = open_dev(wd.path()).expect("open after revive");
    assert_eq!(
        ioctl_int(&f, WDIOC_GETBOOTSTATUS, 0),
        Ok(WDIOF_CARDRESET as i32)
    );
    (&f).write_all_v();
    drop(f);
    drop(wd);
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn close_without_magic_pings_once_and_fires_w_later() {
    let dir = scratch_dir("wdt-nomagic-node").expect("scratch");
    let data = dir.join("data");
    std::fs::create_dir_all(&data).expect("data dir");
    // Killed by pid + data dir (the path for machines without the freezer).
    let mut node = Node::by_pid(&data);
    let mut cwd_only = Node::by_pid(&data);
    let host = HostKill::Pids {
        pids: vec![node.child.id() as i32],
        data_dir: Some(data.clone()),
    };
    let (sdir, wd) = standin("nomagic", |o| o.host = host);
    let f = open_dev(wd.path()).expect("open");
    // W = 2 s: a test thread starved for a second on two busy cores must not
    // let it fire early.
    let w = Duration::from_secs(2);
    assert_eq!(ioctl_int(&f, WDIOC_SETTIMEOUT, 2), Ok(2));
    std::thread::sleep(Duration::from_millis(500));
    let closed_at = clock::now();
    drop(f); // an agent that dies: no 'V'
    let (_, why) = assert_fired_after(&wd, w, Duration::from_secs(5));
    assert_eq!(why, "release-no-magic", "{}", wd.events());
    let (ping, _) = last_event_before(&wd, "ping", clock::now()).expect("ping");
    assert!(ping >= closed_at, "the release ping comes at the close");
    assert!(wd.events().contains("watchdog did not stop!"));
    assert!(node.killed(Duration::from_secs(5)), "listed pid survived");
    assert!(
        cwd_only.killed(Duration::from_secs(5)),
        "data-dir process survived"
    );
    drop(wd);
    let _ = std::fs::remove_dir_all(sdir);
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn nowayout_turns_a_magic_close_into_a_ping() {
    let mut node = Node::in_freezer("nowayout");
    let host = node.host(None);
    let (dir, mut wd) = standin("nowayout", |o| o.host = host);
    wd.set_nowayout(true).expect("nowayout on");
    let f = open_dev(wd.path()).expect("open");
    // W = 2 s: a test thread starved for a second on two busy cores must not
    // let it fire early.
    let w = Duration::from_secs(2);
    assert_eq!(ioctl_int(&f, WDIOC_SETTIMEOUT, 2), Ok(2));
    (&f).write_all_v();
    drop(f);
    let (_, why) = assert_fired_after(&wd, w, Duration::from_secs(5));
    assert_eq!(why, "release-nowayout", "{}", wd.events());
    assert!(!wd.events().contains(" disarm "), "{}", wd.events());
    assert!(node.killed(Duration::from_secs(5)), "the node survived");
    drop(wd);
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn magic_close_with_nowayout_off_again_disarms() {
    let (dir, mut wd) = standin("nowayout-off", |o| o.nowayout = true);
    wd.set_nowayout(false).expect("nowayout off");
    let f = open_dev(wd.path()).expect("open");
    assert_eq!(ioctl_int(&f, WDIOC_SETTIMEOUT, 2), Ok(2));
    (&f).write_all_v();
    drop(f);
    std::thread::sleep(Duration::from_millis(2600));
    assert_eq!(wd.fired(), None, "{}", wd.events());
    drop(wd);
    let _ = std::fs::remove_dir_all(dir);
}
