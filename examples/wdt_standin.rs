//! A watchdog stand-in device for the tests (DESIGN §6 "Watchdog:").
//!
//! One FUSE file that behaves like a kernel watchdog driver (the rules of
//! `drivers/watchdog/watchdog_dev.c`): single open (`EBUSY`), opening an inactive
//! device starts it, `WDIOC_SETTIMEOUT`, `WDIOC_KEEPALIVE` and any write ping it,
//! a `'V'` in a write arms the magic close, a release with it disarms (unless
//! `nowayout`), a release without it pings once and stays armed ("watchdog did
//! not stop!"). When `W` passes on `CLOCK_BOOTTIME` without a ping it fires:
//! it "resets the host" (kills every process of the test's node, see
//! `tenure::testbed::watchdog::crash_host`), records the instant and the reason,
//! and stays dead (opens fail with `ENODEV`) until the test revives it.
//!
//! Every event goes to `<state-dir>/events.log` as `<boottime ns> <event> <details>`.
//! Control: one command per line on stdin (`nowayout on|off`, `revive`,
//! `host<TAB>--freezer<TAB>DIR` / `host<TAB>--pid<TAB>N...<TAB>--data-dir<TAB>DIR`),
//! answered `ok` or `error: ...` on stdout. EOF on stdin (the test is gone):
//! unmount and exit. `ready` on stdout once the mount answers.
//!
//! Owns: its mount and its state files. Must never: kill anything but the
//! node it was given, or keep the mount after it exits (SIGTERM/EOF unmount).
//!
//! Known difference from a kernel driver: FUSE sends RELEASE asynchronously, so
//! the close-without-magic ping lands slightly after the close (a crash is seen
//! a little later, which makes tests stricter), and a quick reopen may see
//! `EBUSY`. `WDIOC_SETOPTIONS` is `_IOR` in the kernel header, so FUSE's
//! restricted ioctls carry no argument in: it is answered `EINVAL`.
//! The `fuser` crate speaks the FUSE wire protocol (pure Rust, mount(2) as
//! root, no libfuse).

use std::ffi::OsStr;
use std::fs::{File, OpenOptions};
use std::io::{BufRead, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use fuser::{
    Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, INodeNo, IoctlFlags, LockOwner,
    MountOption, OpenFlags, ReplyAttr, ReplyData, ReplyEmpty, ReplyEntry, ReplyIoctl, ReplyOpen,
    ReplyWrite, Request, SessionACL, WriteFlags,
};
use tenure::clock;
use tenure::core::time::Instant;
use tenure::testbed::watchdog::{self as wd, HostKill};

/// The command line, parsed.
struct Opts {
    mount: PathBuf,
    state_dir: PathBuf,
    host: HostKill,
    nowayout: bool,
    cardreset: bool,
    initial: String,
    timeout: u32,
    max_timeout: u32,
    pretimeout: bool,
    magic_close: bool,
}

/// Parse `--freezer DIR` / `--pid N` / `--data-dir DIR` words into a host.
fn parse_host(words: &[String]) -> Result<HostKill, String> {
    let mut freezer = None;
    let mut pids = Vec::new();
    let mut data_dir = None;
    let mut it = words.iter();
    while let Some(w) = it.next() {
        let mut val = || it.next().ok_or(format!("{w} needs a value"));
        match w.as_str() {
            "--freezer" => freezer = Some(PathBuf::from(val()?)),
            "--pid" => {
                let v = val()?;
                pids.push(v.parse::<i32>().map_err(|e| format!("--pid {v}: {e}"))?)
            }
            "--data-dir" => data_dir = Some(PathBuf::from(val()?)),
            other => return Err(format!("unknown host option {other:?}")),
        }
    }
    match freezer {
        Some(_) if !pids.is_empty() || data_dir.is_some() => {
            Err("--freezer excludes --pid and --data-dir".into())
        }
        Some(cg) => Ok(HostKill::Freezer(cg)),
        None if pids.is_empty() && data_dir.is_none() => Ok(HostKill::Nothing),
        None => Ok(HostKill::Pids { pids, data_dir }),
    }
}

fn parse_args(args: Vec<String>) -> Result<Opts, String> {
    let mut o = Opts {
        mount: PathBuf::new(),
        state_dir: PathBuf::new(),
        host: HostKill::Nothing,
        nowayout: false,
        cardreset: false,
        initial: "inactive".into(),
        timeout: 60,
        max_timeout: 600,
        pretimeout: true,
        magic_close: true,
    };
    let mut host_words = Vec::new();
    let mut it = args.into_iter();
    while let Some(a) = it.next() {
        let mut val = || it.next().ok_or(format!("{a} needs a value"));
        match a.as_str() {
            "--mount" => o.mount = val()?.into(),
            "--state-dir" => o.state_dir = val()?.into(),
            "--timeout" => {
                let v = val()?;
                o.timeout = v.parse().map_err(|e| format!("--timeout {v}: {e}"))?
            }
            "--max-timeout" => {
                let v = val()?;
                o.max_timeout = v.parse().map_err(|e| format!("--max-timeout {v}: {e}"))?
            }
            "--initial" => o.initial = val()?,
            "--nowayout" => o.nowayout = true,
            "--cardreset" => o.cardreset = true,
            "--no-pretimeout" => o.pretimeout = false,
            "--no-magicclose" => o.magic_close = false,
            "--freezer" | "--pid" | "--data-dir" => {
                let v = val()?;
                host_words.push(a.clone());
                host_words.push(v);
            }
            other => return Err(format!("unknown option {other:?}")),
        }
    }
    if o.mount.as_os_str().is_empty() || o.state_dir.as_os_str().is_empty() {
        return Err("--mount and --state-dir are required".into());
    }
    if o.max_timeout == 0 || o.timeout == 0 || o.timeout > o.max_timeout {
        return Err(format!(
            "need 1 <= --timeout ({}) <= --max-timeout ({})",
            o.timeout, o.max_timeout
        ));
    }
    if !["inactive", "active", "dead"].contains(&o.initial.as_str()) {
        return Err(format!(
            "--initial {:?}: inactive, active or dead",
            o.initial
        ));
    }
    o.host = parse_host(&host_words)?;
    Ok(o)
}

/// The device state (the kernel's `watchdog_core_data` status bits and more).
struct Dev {
    /// The file handle of the one open, if open (`_WDOG_DEV_OPEN`).
    open: Option<u64>,
    next_fh: u64,
    /// Running: it fires `timeout` after `last_ping` (`WDOG_ACTIVE`).
    active: bool,
    last_ping: Instant,
    timeout: u32,
    pretimeout: u32,
    pretimeout_logged: bool,
    /// A `'V'` was written since the last write (`_WDOG_ALLOW_RELEASE`).
    magic: bool,
    nowayout: bool,
    dead: bool,
    bootstatus: u32,
    host: HostKill,
    log: File,
}

impl Dev {
    /// Append one event line, stamped now on `CLOCK_BOOTTIME`. Called with the
    /// state locked, so the log order is the order of the state changes.
    fn event(&mut self, ev: &str, details: &str) -> Instant {
        let now = clock::now();
        // One write per line (O_APPEND): a reader never sees two lines mixed.
        let _ = self
            .log
            .write_all(format!("{} {ev} {details}\n", now.as_nanos()).as_bytes());
        now
    }

    fn ping(&mut self, why: &str) {
        if self.active {
            self.last_ping = self.event("ping", why);
            self.pretimeout_logged = false;
        }
    }
}

struct Shared {
    dev: Mutex<Dev>,
    /// Wakes the timer after anything that moves the deadline.
    changed: Condvar,
    options: u32,
    max_timeout: u32,
    state_dir: PathBuf,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Dev> {
        // A panic while holding the lock would be a bug here; keep serving.
        self.dev.lock().unwrap_or_else(|p| p.into_inner())
    }
}

struct WdtFs(Arc<Shared>);

const TTL: Duration = Duration::from_secs(1);

fn attr() -> FileAttr {
    let t = SystemTime::UNIX_EPOCH;
    FileAttr {
        ino: INodeNo::ROOT,
        size: 0,
        blocks: 0,
        atime: t,
        mtime: t,
        ctime: t,
        crtime: t,
        kind: FileType::RegularFile,
        // Like /dev/watchdog: root only.
        perm: 0o600,
        nlink: 1,
        uid: 0,
        gid: 0,
        rdev: 0,
        flags: 0,
        blksize: 512,
    }
}

fn ioctl_name(cmd: u32) -> &'static str {
    match cmd {
        wd::WDIOC_GETSUPPORT => "GETSUPPORT",
        wd::WDIOC_GETSTATUS => "GETSTATUS",
        wd::WDIOC_GETBOOTSTATUS => "GETBOOTSTATUS",
        wd::WDIOC_GETTEMP => "GETTEMP",
        wd::WDIOC_SETOPTIONS => "SETOPTIONS",
        wd::WDIOC_KEEPALIVE => "KEEPALIVE",
        wd::WDIOC_SETTIMEOUT => "SETTIMEOUT",
        wd::WDIOC_GETTIMEOUT => "GETTIMEOUT",
        wd::WDIOC_SETPRETIMEOUT => "SETPRETIMEOUT",
        wd::WDIOC_GETPRETIMEOUT => "GETPRETIMEOUT",
        wd::WDIOC_GETTIMELEFT => "GETTIMELEFT",
        _ => "unknown",
    }
}

/// The result of one ioctl: the bytes to copy out, or an errno.
type IoctlResult = Result<Vec<u8>, Errno>;

impl WdtFs {
    fn do_ioctl(&self, d: &mut Dev, cmd: u32, input: &[u8]) -> IoctlResult {
        let int = |v: u32| Ok(v.to_ne_bytes().to_vec());
        let arg = || -> Result<i32, Errno> {
            let b: [u8; 4] = input.try_into().map_err(|_| Errno::EINVAL)?;
            Ok(i32::from_ne_bytes(b))
        };
        let s = &self.0;
        match cmd {
            wd::WDIOC_GETSUPPORT => {
                let mut out = Vec::with_capacity(wd::WATCHDOG_INFO_SIZE);
                out.extend_from_slice(&s.options.to_ne_bytes());
                out.extend_from_slice(&0u32.to_ne_bytes());
                let mut id = [0u8; 32];
                id[..wd::STANDIN_IDENTITY.len()].copy_from_slice(wd::STANDIN_IDENTITY.as_bytes());
                out.extend_from_slice(&id);
                Ok(out)
            }
            wd::WDIOC_GETSTATUS => int(0),
            wd::WDIOC_GETBOOTSTATUS => int(d.bootstatus),
            wd::WDIOC_GETTEMP => Err(Errno::EOPNOTSUPP),
            // `_IOR` in the header: FUSE carries no input for it (see module doc).
            wd::WDIOC_SETOPTIONS => Err(Errno::EINVAL),
            wd::WDIOC_KEEPALIVE => {
                d.ping("keepalive");
                Ok(Vec::new())
            }
            wd::WDIOC_SETTIMEOUT => {
                let v = arg()?;
                if v < 1 {
                    return Err(Errno::EINVAL);
                }
                // Clamp like a driver whose hardware has a maximum; the caller
                // must believe the read-back, not its request.
                d.timeout = (v as u32).min(s.max_timeout);
                if d.pretimeout >= d.timeout {
                    d.pretimeout = 0;
                }
                d.ping("settimeout");
                int(d.timeout)
            }
            wd::WDIOC_GETTIMEOUT => int(d.timeout),
            wd::WDIOC_SETPRETIMEOUT => {
                if s.options & wd::WDIOF_PRETIMEOUT == 0 {
                    return Err(Errno::EOPNOTSUPP);
                }
                let v = arg()?;
                if v < 0 || (v != 0 && v as u32 >= d.timeout) {
                    return Err(Errno::EINVAL);
                }
                d.pretimeout = v as u32;
                int(d.pretimeout)
            }
            wd::WDIOC_GETPRETIMEOUT => int(d.pretimeout),
            wd::WDIOC_GETTIMELEFT => {
                let left = if d.active {
                    let deadline = d.last_ping.add(Duration::from_secs(d.timeout.into()));
                    clock::now().until(deadline).as_secs() as u32
                } else {
                    0
                };
                int(left)
            }
            _ => Err(Errno::ENOTTY),
        }
    }
}

impl Filesystem for WdtFs {
    fn lookup(&self, _req: &Request, _parent: INodeNo, _name: &OsStr, reply: ReplyEntry) {
        // The root is the only file: nothing below it.
        reply.error(Errno::ENOTDIR);
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        if ino == INodeNo::ROOT {
            reply.attr(&TTL, &attr());
        } else {
            reply.error(Errno::ENOENT);
        }
    }

    fn setattr(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _mode: Option<u32>,
        _uid: Option<u32>,
        _gid: Option<u32>,
        _size: Option<u64>,
        _atime: Option<fuser::TimeOrNow>,
        _mtime: Option<fuser::TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        // A device node ignores O_TRUNC and the like: report the fixed attributes.
        reply.attr(&TTL, &attr());
    }

    fn open(&self, req: &Request, _ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        let mut d = self.0.lock();
        if d.dead {
            d.event("open-refused", &format!("pid={} dead: ENODEV", req.pid()));
            return reply.error(Errno::ENODEV);
        }
        if d.open.is_some() {
            d.event("open-refused", &format!("pid={} busy: EBUSY", req.pid()));
            return reply.error(Errno::EBUSY);
        }
        let fh = d.next_fh;
        d.next_fh += 1;
        d.open = Some(fh);
        d.magic = false;
        d.event(
            "open",
            &format!("pid={} fh={fh} flags={:#o}", req.pid(), flags.0),
        );
        if d.active {
            // watchdog_start() returns at once on an active device: no ping.
            d.event("start", "already active: no ping");
        } else {
            d.active = true;
            d.ping("open-start");
        }
        drop(d);
        self.0.changed.notify_all();
        // direct_io: every write reaches us (a 'V' must not sit in a cache).
        reply.opened(
            FileHandle(fh),
            FopenFlags::FOPEN_DIRECT_IO | FopenFlags::FOPEN_NONSEEKABLE,
        );
    }

    fn read(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _offset: u64,
        _size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        // The kernel's watchdog has no read method.
        reply.error(Errno::EINVAL);
    }

    fn write(
        &self,
        req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let mut d = self.0.lock();
        if d.dead || d.open != Some(fh.0) {
            d.event(
                "write-refused",
                &format!("pid={} fh={}: EIO", req.pid(), fh.0),
            );
            return reply.error(Errno::EIO);
        }
        if data.is_empty() {
            return reply.written(0);
        }
        // watchdog_write(): clear, then scan the whole buffer for 'V'. nowayout
        // is checked at release (watchdog_stop), not here.
        d.magic = data.contains(&b'V');
        let magic = d.magic;
        d.event(
            "write",
            &format!("pid={} len={} magic={magic}", req.pid(), data.len()),
        );
        d.ping("write");
        drop(d);
        self.0.changed.notify_all();
        reply.written(data.len() as u32);
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        reply.ok();
    }

    fn release(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        let mut d = self.0.lock();
        if d.open != Some(fh.0) {
            // An open from before a firing/revive: that "host" is gone.
            d.event("release-stale", &format!("fh={}", fh.0));
            return reply.ok();
        }
        d.open = None;
        let magic = std::mem::take(&mut d.magic);
        let magic_close = self.0.options & wd::WDIOF_MAGICCLOSE != 0;
        if !d.active {
            d.event("release", &format!("fh={} inactive", fh.0));
        } else if magic || !magic_close {
            if d.nowayout {
                d.event(
                    "release",
                    &format!("fh={} magic={magic}: nowayout prevents stop", fh.0),
                );
                d.ping("release-nowayout");
            } else {
                d.event("release", &format!("fh={} magic={magic}", fh.0));
                d.active = false;
                d.event("disarm", "magic close");
            }
        } else {
            d.event(
                "release",
                &format!("fh={} no magic: watchdog did not stop!", fh.0),
            );
            d.ping("release-no-magic");
        }
        drop(d);
        self.0.changed.notify_all();
        reply.ok();
    }

    fn ioctl(
        &self,
        req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: IoctlFlags,
        cmd: u32,
        in_data: &[u8],
        _out_size: u32,
        reply: ReplyIoctl,
    ) {
        let mut d = self.0.lock();
        let res = if d.dead || d.open != Some(fh.0) {
            Err(Errno::EIO)
        } else {
            self.do_ioctl(&mut d, cmd, in_data)
        };
        let shown = match &res {
            Ok(out) if out.len() == 4 => format!(
                "-> {}",
                i32::from_ne_bytes([out[0], out[1], out[2], out[3]])
            ),
            Ok(out) => format!("-> {} bytes", out.len()),
            Err(e) => format!("-> {:?}", nix::errno::Errno::from_raw(e.code())),
        };
        let arg = match <[u8; 4]>::try_from(in_data) {
            Ok(b) => i32::from_ne_bytes(b).to_string(),
            Err(_) => "-".into(),
        };
        d.event(
            "ioctl",
            &format!("pid={} {} arg={arg} {shown}", req.pid(), ioctl_name(cmd)),
        );
        drop(d);
        self.0.changed.notify_all();
        match res {
            Ok(out) => reply.ioctl(0, &out),
            Err(e) => reply.error(e),
        }
    }
}

/// The timer: fires `timeout` after the last ping of an active device. Waits
/// on the condvar (woken by every ping) and re-reads `CLOCK_BOOTTIME` after
/// each wake-up, so it fires within a millisecond or so of the deadline.
fn timer(s: Arc<Shared>) {
    let mut d = s.lock();
    loop {
        if d.dead || !d.active {
            d = s
                .changed
                .wait_timeout(d, Duration::from_millis(100))
                .map(|(g, _)| g)
                .unwrap_or_else(|p| p.into_inner().0);
            continue;
        }
        let now = clock::now();
        let deadline = d.last_ping.add(Duration::from_secs(d.timeout.into()));
        let pre = deadline.sub(Duration::from_secs(d.pretimeout.into()));
        if d.pretimeout > 0 && !d.pretimeout_logged && now >= pre {
            d.pretimeout_logged = true;
            let msg = format!("{} s before the deadline", d.pretimeout);
            d.event("pretimeout", &msg);
        }
        if now >= deadline {
            let late = now.since(deadline);
            let last = d.last_ping;
            let w = d.timeout;
            d.dead = true;
            d.active = false;
            let at = d.event(
                "fire",
                &format!(
                    "W={w}s last_ping={} late_us={}",
                    last.as_nanos(),
                    late.as_micros()
                ),
            );
            let host = d.host.clone();
            // Kill without the lock: a node process blocked in a FUSE request
            // must get its answer (EIO, we are dead) or it could not freeze.
            drop(d);
            let spare = [std::process::id() as i32, nix::unistd::getppid().as_raw()];
            let outcome = wd::crash_host(&host, &spare);
            d = s.lock();
            let result = match &outcome {
                Ok(c) => format!("killed={} stopped_ns={}", c.killed, c.stopped.as_nanos()),
                Err(e) => format!("kill-failed: {e}"),
            };
            d.event("host-reset", &result);
            let reason = format!(
                "watchdog timeout: no ping for {w} s since {} (fired {} us late); host reset: {result}",
                last.as_nanos(),
                late.as_micros()
            );
            write_fired(&s.state_dir, at, &reason);
            continue;
        }
        let next = if d.pretimeout > 0 && !d.pretimeout_logged {
            pre.min(deadline)
        } else {
            deadline
        };
        let wait = now.until(next).min(Duration::from_millis(100));
        d = s
            .changed
            .wait_timeout(d, wait)
            .map(|(g, _)| g)
            .unwrap_or_else(|p| p.into_inner().0);
    }
}

/// Write the firing record atomically (tmp + rename): a reader sees all or none.
fn write_fired(dir: &std::path::Path, at: Instant, reason: &str) {
    let tmp = dir.join(format!("{}.tmp", wd::FIRED_FILE));
    let text = format!("{} {reason}\n", at.as_nanos());
    if std::fs::write(&tmp, text).is_ok() {
        let _ = std::fs::rename(&tmp, dir.join(wd::FIRED_FILE));
    }
}

/// One control line from stdin.
fn control(s: &Shared, line: &str) -> Result<(), String> {
    let mut words = line.split('\t');
    let cmd = words.next().unwrap_or("");
    let mut d = s.lock();
    match cmd {
        "nowayout on" | "nowayout off" => {
            d.nowayout = cmd == "nowayout on";
            let v = d.nowayout;
            d.event("control", &format!("nowayout={v}"));
        }
        "revive" => {
            if !d.dead {
                return Err("revive: the device has not fired".into());
            }
            d.dead = false;
            d.active = false;
            d.open = None;
            d.magic = false;
            // The "host" rebooted because of us: the next boot reports it.
            d.bootstatus |= wd::WDIOF_CARDRESET;
            d.event("control", "revive");
            let _ = std::fs::remove_file(s.state_dir.join(wd::FIRED_FILE));
        }
        "host" => {
            let rest: Vec<String> = words.map(str::to_string).collect();
            d.host = parse_host(&rest)?;
            let h = format!("{:?}", d.host);
            d.event("control", &format!("host={h}"));
        }
        other => return Err(format!("unknown command {other:?}")),
    }
    Ok(())
}

fn run(o: Opts) -> Result<(), String> {
    std::fs::create_dir_all(&o.state_dir)
        .map_err(|e| format!("create {}: {e}", o.state_dir.display()))?;
    let log_path = o.state_dir.join(wd::EVENTS_FILE);
    let log = OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log_path)
        .map_err(|e| format!("open {}: {e}", log_path.display()))?;
    let mut options = wd::WDIOF_SETTIMEOUT | wd::WDIOF_KEEPALIVEPING;
    if o.magic_close {
        options |= wd::WDIOF_MAGICCLOSE;
    }
    if o.pretimeout {
        options |= wd::WDIOF_PRETIMEOUT;
    }
    let now = clock::now();
    let mut dev = Dev {
        open: None,
        next_fh: 1,
        active: o.initial == "active",
        last_ping: now,
        timeout: o.timeout,
        pretimeout: 0,
        pretimeout_logged: false,
        magic: false,
        nowayout: o.nowayout,
        dead: o.initial == "dead",
        bootstatus: if o.cardreset { wd::WDIOF_CARDRESET } else { 0 },
        host: o.host.clone(),
        log,
    };
    dev.event(
        "start",
        &format!(
            "pid={} initial={} W={} max={} nowayout={} options={options:#x} host={:?}",
            std::process::id(),
            o.initial,
            o.timeout,
            o.max_timeout,
            o.nowayout,
            o.host
        ),
    );
    let shared = Arc::new(Shared {
        dev: Mutex::new(dev),
        changed: Condvar::new(),
        options,
        max_timeout: o.max_timeout,
        state_dir: o.state_dir.clone(),
    });

    let mut cfg = fuser::Config::default();
    cfg.mount_options = vec![
        MountOption::FSName("tenure-wdt".into()),
        MountOption::DefaultPermissions,
    ];
    // Root opens it (the agent runs as root); allow_other so a test may also
    // run the agent under another uid and let the file mode decide.
    cfg.acl = SessionACL::All;
    let session = fuser::spawn_mount(WdtFs(shared.clone()), &o.mount, &cfg)
        .map_err(|e| format!("mount FUSE at {}: {e}", o.mount.display()))?;
    let session = Arc::new(Mutex::new(Some(session)));

    {
        let s = shared.clone();
        std::thread::Builder::new()
            .name("timer".into())
            .spawn(move || timer(s))
            .map_err(|e| format!("spawn timer thread: {e}"))?;
    }
    // SIGTERM/SIGINT: unmount, then exit (the test's Drop or a human).
    {
        let session = session.clone();
        let (shared, path) = (shared.clone(), o.mount.clone());
        let mut signals = signal_hook::iterator::Signals::new([
            signal_hook::consts::SIGTERM,
            signal_hook::consts::SIGINT,
        ])
        .map_err(|e| format!("install signal handlers: {e}"))?;
        std::thread::spawn(move || {
            if let Some(sig) = signals.forever().next() {
                shared
                    .lock()
                    .event("stop", &format!("signal {sig}: unmounting"));
                unmount(&session, &path);
                std::process::exit(0);
            }
        });
    }

    println!("ready");
    let _ = std::io::stdout().flush();
    for line in std::io::stdin().lock().lines() {
        let Ok(line) = line else { break };
        let answer = match control(&shared, line.trim_end_matches('\r')) {
            Ok(()) => "ok".to_string(),
            Err(e) => format!("error: {e}"),
        };
        println!("{answer}");
        let _ = std::io::stdout().flush();
    }
    shared.lock().event("stop", "stdin closed: unmounting");
    unmount(&session, &o.mount);
    Ok(())
}

/// Unmount; if someone still holds the file open (EBUSY), detach it lazily so
/// no stale mount outlives us (their fd then reads ENOTCONN, a dead device).
fn unmount(session: &Mutex<Option<fuser::BackgroundSession>>, path: &std::path::Path) {
    let taken = session.lock().unwrap_or_else(|p| p.into_inner()).take();
    if let Some(Err(e)) = taken.map(fuser::BackgroundSession::umount_and_join) {
        eprintln!("wdt_standin: unmount: {e}; detaching lazily");
        let Ok(c) = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()) else {
            return;
        };
        // SAFETY: `c` is a valid NUL-terminated path that outlives the call;
        // umount2 only reads it.
        if unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) } != 0 {
            eprintln!(
                "wdt_standin: umount2({}, MNT_DETACH): {}",
                path.display(),
                std::io::Error::last_os_error()
            );
        }
    }
}

fn main() -> ExitCode {
    let opts = match parse_args(std::env::args().skip(1).collect()) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("wdt_standin: {e}");
            return ExitCode::from(2);
        }
    };
    match run(opts) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("wdt_standin: {e}");
            ExitCode::FAILURE
        }
    }
}
