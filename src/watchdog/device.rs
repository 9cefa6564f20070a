//! The Linux watchdog device (`/dev/watchdog`, `/dev/watchdogN`; linux/watchdog.h).
//!
//! Owns: the device's file descriptor, the ioctls that interrogate and arm it, the
//! pings the agent asks for, and the magic close. It records the instant of every
//! call that may ping the device ([`Device::last_ping`]) because every such call is a
//! pet (DESIGN S2).
//! Must never: ping on its own (no timer, no thread: a pet needs proof, and the proof is
//! the agent's); write the magic `'V'` anywhere but [`Device::disarm`] and the clean-up
//! of an `open` that failed half-way; trust the timeout it asked for instead of the one
//! the driver reports back (S6 is checked with the read-back `W`).
//!
//! Deadlines: these are ioctls and one-byte writes on a character device; the kernel's
//! watchdog core answers them without sleeping on anything external, so they take no
//! deadline (a FUSE stand-in for tests is the exception, and its problem).

use std::ffi::c_int;
use std::fmt;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};

use log::{info, warn};
use nix::errno::Errno;

use crate::clock;
use crate::core::time::Instant;

/// The kernel's definitions, transcribed from linux/watchdog.h.
///
/// The request numbers are constants (tested against hand-computed `_IOR`/`_IOWR`
/// values below) and the ioctl functions are generated from exactly those constants
/// with nix's `*_bad!` macros, so the number the test checks is the number the code
/// sends. Public so a stand-in device for tests answers the same numbers.
pub mod sys {
    use nix::sys::ioctl::ioctl_num_type;

    /// `WATCHDOG_IOCTL_BASE`.
    pub const BASE: u8 = b'W';

    /// `struct watchdog_info`.
    #[repr(C)]
    #[derive(Clone, Copy, Debug)]
    pub struct WatchdogInfo {
        pub options: u32,
        pub firmware_version: u32,
        pub identity: [u8; 32],
    }

    const INT: usize = std::mem::size_of::<libc::c_int>();

    pub const WDIOC_GETSUPPORT: ioctl_num_type =
        nix::request_code_read!(BASE, 0, std::mem::size_of::<WatchdogInfo>());
    pub const WDIOC_GETSTATUS: ioctl_num_type = nix::request_code_read!(BASE, 1, INT);
    pub const WDIOC_GETBOOTSTATUS: ioctl_num_type = nix::request_code_read!(BASE, 2, INT);
    pub const WDIOC_GETTEMP: ioctl_num_type = nix::request_code_read!(BASE, 3, INT);
    // The kernel defines SETOPTIONS with _IOR although userspace writes it.
    pub const WDIOC_SETOPTIONS: ioctl_num_type = nix::request_code_read!(BASE, 4, INT);
    pub const WDIOC_KEEPALIVE: ioctl_num_type = nix::request_code_read!(BASE, 5, INT);
    pub const WDIOC_SETTIMEOUT: ioctl_num_type = nix::request_code_readwrite!(BASE, 6, INT);
    pub const WDIOC_GETTIMEOUT: ioctl_num_type = nix::request_code_read!(BASE, 7, INT);
    pub const WDIOC_SETPRETIMEOUT: ioctl_num_type = nix::request_code_readwrite!(BASE, 8, INT);
    pub const WDIOC_GETPRETIMEOUT: ioctl_num_type = nix::request_code_read!(BASE, 9, INT);
    pub const WDIOC_GETTIMELEFT: ioctl_num_type = nix::request_code_read!(BASE, 10, INT);

    pub const WDIOF_OVERHEAT: u32 = 0x0001;
    pub const WDIOF_FANFAULT: u32 = 0x0002;
    pub const WDIOF_EXTERN1: u32 = 0x0004;
    pub const WDIOF_EXTERN2: u32 = 0x0008;
    pub const WDIOF_POWERUNDER: u32 = 0x0010;
    /// The card previously reset the CPU.
    pub const WDIOF_CARDRESET: u32 = 0x0020;
    pub const WDIOF_POWEROVER: u32 = 0x0040;
    /// The timeout can be set.
    pub const WDIOF_SETTIMEOUT: u32 = 0x0080;
    /// Closing after writing `'V'` stops the device (without it, any close stops it).
    pub const WDIOF_MAGICCLOSE: u32 = 0x0100;
    pub const WDIOF_PRETIMEOUT: u32 = 0x0200;
    /// The device raises an alarm instead of resetting the machine.
    pub const WDIOF_ALARMONLY: u32 = 0x0400;
    /// `WDIOC_KEEPALIVE` is supported.
    pub const WDIOF_KEEPALIVEPING: u32 = 0x8000;

    nix::ioctl_read_bad!(wdioc_getsupport, WDIOC_GETSUPPORT, WatchdogInfo);
    nix::ioctl_read_bad!(wdioc_getbootstatus, WDIOC_GETBOOTSTATUS, libc::c_int);
    nix::ioctl_read_bad!(wdioc_keepalive, WDIOC_KEEPALIVE, libc::c_int);
    nix::ioctl_readwrite_bad!(wdioc_settimeout, WDIOC_SETTIMEOUT, libc::c_int);
    nix::ioctl_read_bad!(wdioc_gettimeout, WDIOC_GETTIMEOUT, libc::c_int);
    nix::ioctl_readwrite_bad!(wdioc_setpretimeout, WDIOC_SETPRETIMEOUT, libc::c_int);
    nix::ioctl_read_bad!(wdioc_getpretimeout, WDIOC_GETPRETIMEOUT, libc::c_int);
}

use sys::*;

/// The pretimeout asked for when the driver supports one: a pretimeout governor
/// (e.g. `panic` or `noop`) gets this long before the reset to log a last gasp.
const PRETIMEOUT_SECS: c_int = 1;

/// Where the kernel publishes per-device attributes (`nowayout`, `state`, ...).
const SYSFS_CLASS: &str = "/sys/class/watchdog";

/// Why a watchdog operation failed. Each variant's doc line is its message.
pub enum WatchdogError {
    /// `<path>` is busy (EBUSY): another process holds it open, or the release of a
    /// previous open (e.g. of an agent that just crashed) has not finished; retry shortly.
    Busy { path: PathBuf },
    /// Opening `<path>` failed (nothing was armed).
    Open { path: PathBuf, errno: Errno },
    /// The requested timeout is not a positive number of seconds that fits in a C int
    /// (checked before opening: nothing was armed).
    BadRequest { path: PathBuf, requested: u32 },
    /// `open` failed after the device was opened (the open armed it). The device was
    /// closed with the magic `'V'` to disarm it; under `nowayout` (`Some(true)`, or
    /// unknown `None`) it may stay armed and reset this host unless reopened and petted.
    Setup {
        path: PathBuf,
        step: &'static str,
        detail: String,
        nowayout: Option<bool>,
    },
    /// A ping (`WDIOC_KEEPALIVE`, or the one-byte write that replaces it) failed.
    Keepalive { path: PathBuf, errno: Errno },
    /// The device runs with `nowayout`: a magic close would only ping it and leave it
    /// armed. It is handed back so the caller keeps it open and keeps petting (S1).
    NoWayOut(Box<Device>),
    /// Writing the magic `'V'` failed; the device is handed back, still open and armed.
    DisarmWrite { device: Box<Device>, errno: Errno },
    /// `close` after the magic `'V'` reported an error: the descriptor is gone, and
    /// whether the device stopped is unknown (assume it is armed).
    Close { path: PathBuf, errno: Errno },
}

impl fmt::Display for WatchdogError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WatchdogError::Busy { path } => write!(
                f,
                "watchdog {}: busy (EBUSY): another process has it open, or a previous \
                 holder's release is still in progress; retry",
                path.display()
            ),
            WatchdogError::Open { path, errno } => {
                write!(f, "watchdog {}: open failed: {errno}", path.display())
            }
            WatchdogError::BadRequest { path, requested } => write!(
                f,
                "watchdog {}: requested timeout {requested} s is not in 1..={} s; not opened",
                path.display(),
                c_int::MAX
            ),
            WatchdogError::Setup {
                path,
                step,
                detail,
                nowayout,
            } => {
                write!(
                    f,
                    "watchdog {}: {step} failed after the open armed it: {detail}; closed with \
                     the magic 'V' to disarm it",
                    path.display()
                )?;
                match nowayout {
                    Some(false) => write!(f, " (nowayout is not set: disarmed)"),
                    Some(true) => write!(
                        f,
                        " — but nowayout is set: it STAYS ARMED and resets this host unless \
                         reopened and petted"
                    ),
                    None => write!(
                        f,
                        " — nowayout is unknown: if the kernel has it set, the device stays \
                         armed and resets this host unless reopened and petted"
                    ),
                }
            }
            WatchdogError::Keepalive { path, errno } => {
                write!(f, "watchdog {}: keepalive failed: {errno}", path.display())
            }
            WatchdogError::NoWayOut(d) => write!(
                f,
                "watchdog {} ({}): nowayout is set, a magic close would leave it armed; \
                 keeping it open (keep petting)",
                d.path.display(),
                d.identity
            ),
            WatchdogError::DisarmWrite { device, errno } => write!(
                f,
                "watchdog {}: writing the magic 'V' failed: {errno}; still open and armed",
                device.path.display()
            ),
            WatchdogError::Close { path, errno } => write!(
                f,
                "watchdog {}: close after the magic 'V' failed: {errno}; it may still be armed",
                path.display()
            ),
        }
    }
}

impl fmt::Debug for WatchdogError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl std::error::Error for WatchdogError {}

/// Proof of a completed magic close.
#[derive(Clone, Debug)]
pub struct Disarmed {
    pub path: PathBuf,
    pub identity: String,
    /// Just before the magic `'V'` was written (that write pings the device too).
    pub at: Instant,
    /// `false` when sysfs did not say whether `nowayout` is set: the close was tried
    /// anyway, and if the kernel does have `nowayout` the device is still armed.
    pub nowayout_known: bool,
}

/// An open, armed watchdog device.
///
/// **Dropping a `Device` without [`Device::disarm`] closes it WITHOUT the magic
/// character**: a driver with `WDIOF_MAGICCLOSE` then pings once and stays armed, so the
/// host resets `W` seconds after the drop unless the device is reopened and petted
/// (this is what makes a crashed agent safe, DESIGN S2). A driver without
/// `WDIOF_MAGICCLOSE` is stopped by any close, a drop included (see
/// [`super::check_usable`]).
pub struct Device {
    path: PathBuf,
    io: Io,
    options: u32,
    firmware_version: u32,
    identity: String,
    timeout: u32,
    pretimeout: Option<u32>,
    nowayout: Option<bool>,
    boot_reset: bool,
    /// Set once `WDIOC_KEEPALIVE` turned out unsupported: ping by writing instead.
    keepalive_by_write: bool,
    opened_at: Instant,
    last_ping: Instant,
}

impl fmt::Debug for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Device")
            .field("path", &self.path)
            .field("identity", &self.identity)
            .field("options", &format_args!("{:#06x}", self.options))
            .field("timeout", &self.timeout)
            .field("pretimeout", &self.pretimeout)
            .field("nowayout", &self.nowayout)
            .field("last_ping", &self.last_ping)
            .finish()
    }
}

impl Device {
    /// Open `path` and arm it with timeout `requested_timeout` (seconds).
    ///
    /// The open itself is a pet (it starts an inactive device), and so is
    /// `WDIOC_SETTIMEOUT`: call this only where S2 allows a pet. The sequence is
    /// `open(O_WRONLY|O_CLOEXEC)`, `WDIOC_GETSUPPORT` (logged), `WDIOC_GETBOOTSTATUS`,
    /// `WDIOC_SETTIMEOUT` (only if the driver reports `WDIOF_SETTIMEOUT`; a refusal is
    /// logged, not fatal), `WDIOC_GETTIMEOUT` (the only `W` believed), and
    /// `WDIOC_SETPRETIMEOUT` of 1 s when `WDIOF_PRETIMEOUT` is supported and `W > 1`.
    /// `nowayout` is read from `/sys/class/watchdog/<name>/nowayout`.
    ///
    /// EBUSY gives [`WatchdogError::Busy`] (retry: a quick reopen after a crash sees it
    /// until the old release finishes). A failure after the open closes the device with
    /// the magic `'V'` ([`WatchdogError::Setup`]).
    pub fn open(path: &Path, requested_timeout: u32) -> Result<Device, WatchdogError> {
        Device::open_with_sysfs(path, requested_timeout, Path::new(SYSFS_CLASS))
    }

    /// [`Device::open`], reading `nowayout` from `<sysfs_class>/<name>/nowayout`
    /// instead of `/sys/class/watchdog`: for a stand-in device in tests, which can
    /// then play either `nowayout` setting.
    pub fn open_with_sysfs(
        path: &Path,
        requested_timeout: u32,
        sysfs_class: &Path,
    ) -> Result<Device, WatchdogError> {
        let requested = checked_request(path, requested_timeout)?;
        let nowayout = sysfs_nowayout(sysfs_class, path);
        let opened_at = clock::now();
        let fd = match nix::fcntl::open(
            path,
            nix::fcntl::OFlag::O_WRONLY | nix::fcntl::OFlag::O_CLOEXEC,
            nix::sys::stat::Mode::empty(),
        ) {
            Ok(fd) => fd,
            Err(Errno::EBUSY) => {
                return Err(WatchdogError::Busy {
                    path: path.to_path_buf(),
                });
            }
            Err(errno) => {
                return Err(WatchdogError::Open {
                    path: path.to_path_buf(),
                    errno,
                });
            }
        };
        setup(path, Io::Fd(fd), requested, nowayout, opened_at)
    }

    /// The device's path as opened.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The read-back timeout `W` (`WDIOC_GETTIMEOUT`), whole seconds.
    pub fn timeout(&self) -> u32 {
        self.timeout
    }

    /// The read-back pretimeout, if one was set.
    pub fn pretimeout(&self) -> Option<u32> {
        self.pretimeout
    }

    /// The driver's identity string (`watchdog_info.identity`).
    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// `watchdog_info.firmware_version`.
    pub fn firmware_version(&self) -> u32 {
        self.firmware_version
    }

    /// `watchdog_info.options` (`WDIOF_*` bits).
    pub fn options(&self) -> u32 {
        self.options
    }

    /// `WDIOF_MAGICCLOSE`: closing after `'V'` stops it; without it any close does.
    pub fn magic_close_supported(&self) -> bool {
        self.options & WDIOF_MAGICCLOSE != 0
    }

    /// `nowayout` from sysfs; `None` when sysfs does not say (no such attribute, not a
    /// kernel device, unreadable). Callers pick the conservative reading per use.
    pub fn nowayout(&self) -> Option<bool> {
        self.nowayout
    }

    /// Whether the driver reports that the last reset was its own (`WDIOF_CARDRESET`
    /// in `WDIOC_GETBOOTSTATUS`); `false` if it could not say.
    pub fn boot_status_watchdog_reset(&self) -> bool {
        self.boot_reset
    }

    /// Just before the `open` syscall: the earliest instant the open can have pinged.
    pub fn opened_at(&self) -> Instant {
        self.opened_at
    }

    /// Just after the last call that may have pinged the device returned (the open and
    /// its ioctls, a keepalive, a write): the latest instant of the last ping, so
    /// `last_ping() + W` bounds when the device fires if nothing pings it again.
    pub fn last_ping(&self) -> Instant {
        self.last_ping
    }

    /// Ping the device (a pet: call only where S2 allows one). `WDIOC_KEEPALIVE`, or a
    /// one-byte write (not `'V'`) when the driver lacks `WDIOF_KEEPALIVEPING` or refuses
    /// the ioctl. The attempt is recorded in [`Device::last_ping`] even if it fails (a
    /// failed call may still have pinged: counting it is the conservative side).
    pub fn keepalive(&mut self) -> Result<(), WatchdogError> {
        if !self.keepalive_by_write {
            let r = self.io.keepalive();
            self.last_ping = clock::now();
            match r {
                Ok(()) => return Ok(()),
                Err(Errno::ENOTTY | Errno::EOPNOTSUPP | Errno::EINVAL) => {
                    warn!(
                        "watchdog {}: WDIOC_KEEPALIVE refused ({}); pinging by write from now on",
                        self.path.display(),
                        r.err().map(|e| e.desc()).unwrap_or("")
                    );
                    self.keepalive_by_write = true;
                }
                Err(errno) => {
                    return Err(WatchdogError::Keepalive {
                        path: self.path.clone(),
                        errno,
                    });
                }
            }
        }
        // Any byte but 'V' pings; a write without 'V' also withdraws an earlier 'V'.
        let r = self.io.write(b"\0");
        self.last_ping = clock::now();
        match r {
            Ok(_) => Ok(()),
            Err(errno) => Err(WatchdogError::Keepalive {
                path: self.path.clone(),
                errno,
            }),
        }
    }

    /// Stop the device: write the magic `'V'`, then close. Call only after a complete
    /// fence or a clean stop (S1): the `'V'` write pings the device too.
    ///
    /// Under `nowayout` (sysfs says so) a magic close would only ping it and leave it
    /// armed, so nothing is written and the device comes back as
    /// [`WatchdogError::NoWayOut`]: keep it open and keep petting (DESIGN S1). When sysfs
    /// does not say, the close is tried and [`Disarmed::nowayout_known`] is `false`.
    /// Without `WDIOF_MAGICCLOSE` any close stops the device, so it is just closed.
    pub fn disarm(mut self) -> Result<Disarmed, WatchdogError> {
        if self.nowayout == Some(true) {
            return Err(WatchdogError::NoWayOut(Box::new(self)));
        }
        let at = clock::now();
        if self.magic_close_supported() {
            let r = self.io.write(b"V");
            self.last_ping = clock::now();
            if let Err(errno) = r {
                return Err(WatchdogError::DisarmWrite {
                    device: Box::new(self),
                    errno,
                });
            }
        }
        let Device {
            path,
            io,
            identity,
            nowayout,
            ..
        } = self;
        if let Err(errno) = io.close() {
            return Err(WatchdogError::Close { path, errno });
        }
        info!(
            "watchdog {} ({identity}): disarmed (magic close){}",
            path.display(),
            if nowayout.is_none() {
                "; nowayout unknown: if the kernel has it set, the device is still armed"
            } else {
                ""
            }
        );
        Ok(Disarmed {
            path,
            identity,
            at,
            nowayout_known: nowayout.is_some(),
        })
    }
}

fn checked_request(path: &Path, requested: u32) -> Result<c_int, WatchdogError> {
    match c_int::try_from(requested) {
        Ok(t) if t > 0 => Ok(t),
        _ => Err(WatchdogError::BadRequest {
            path: path.to_path_buf(),
            requested,
        }),
    }
}

/// Everything after the open: interrogate, set and read back the timeout, pretimeout.
fn setup(
    path: &Path,
    mut io: Io,
    requested: c_int,
    nowayout: Option<bool>,
    opened_at: Instant,
) -> Result<Device, WatchdogError> {
    let info = match io.get_support() {
        Ok(info) => info,
        Err(errno) => {
            return Err(abandon(
                path,
                io,
                "WDIOC_GETSUPPORT",
                errno.to_string(),
                nowayout,
            ));
        }
    };
    let identity = identity_of(&info.identity);
    info!(
        "watchdog {}: identity \"{identity}\", firmware {}, options {:#06x} ({})",
        path.display(),
        info.firmware_version,
        info.options,
        describe_options(info.options)
    );
    if info.options & WDIOF_ALARMONLY != 0 {
        warn!(
            "watchdog {}: the driver reports WDIOF_ALARMONLY: it may raise an alarm instead \
             of resetting this host",
            path.display()
        );
    }

    let boot_reset = match io.get_bootstatus() {
        Ok(flags) => (flags as u32) & WDIOF_CARDRESET != 0,
        Err(errno) => {
            warn!(
                "watchdog {}: WDIOC_GETBOOTSTATUS failed: {errno}; last reset cause unknown",
                path.display()
            );
            false
        }
    };
    if boot_reset {
        warn!(
            "watchdog {}: the last reset of this host was the watchdog's (WDIOF_CARDRESET)",
            path.display()
        );
    }

    if info.options & WDIOF_SETTIMEOUT != 0 {
        // Not fatal: the read-back below is the only W we believe, and the caller
        // checks it against S6.
        if let Err(errno) = io.set_timeout(requested) {
            warn!(
                "watchdog {}: WDIOC_SETTIMEOUT {requested} s refused: {errno}; keeping the \
                 driver's timeout",
                path.display()
            );
        }
    } else {
        warn!(
            "watchdog {}: the driver cannot set its timeout (no WDIOF_SETTIMEOUT); using its own",
            path.display()
        );
    }
    let timeout = match io.get_timeout() {
        Ok(t) if t > 0 => t as u32,
        Ok(t) => {
            return Err(abandon(
                path,
                io,
                "WDIOC_GETTIMEOUT",
                format!("the driver reports a timeout of {t} s"),
                nowayout,
            ));
        }
        Err(errno) => {
            return Err(abandon(
                path,
                io,
                "WDIOC_GETTIMEOUT",
                errno.to_string(),
                nowayout,
            ));
        }
    };
    if timeout != requested as u32 {
        warn!(
            "watchdog {}: asked for a {requested} s timeout, the driver runs {timeout} s \
             (the read-back is what counts)",
            path.display()
        );
    }

    let mut pretimeout = None;
    if info.options & WDIOF_PRETIMEOUT != 0 && timeout as c_int > PRETIMEOUT_SECS {
        match io
            .set_pretimeout(PRETIMEOUT_SECS)
            .and_then(|_| io.get_pretimeout())
        {
            Ok(p) if p > 0 => pretimeout = Some(p as u32),
            Ok(_) => {}
            Err(errno) => warn!(
                "watchdog {}: setting a {PRETIMEOUT_SECS} s pretimeout failed: {errno}",
                path.display()
            ),
        }
    }
    // INVARIANT: no call that may ping the device comes after this instant in `open`.
    let last_ping = clock::now();
    info!(
        "watchdog {} armed: W = {timeout} s, pretimeout {}, magic close {}, nowayout {}",
        path.display(),
        pretimeout.map_or("none".to_string(), |p| format!("{p} s")),
        if info.options & WDIOF_MAGICCLOSE != 0 {
            "yes"
        } else {
            "NO (any close stops it)"
        },
        match nowayout {
            Some(true) => "set",
            Some(false) => "not set",
            None => "unknown",
        }
    );
    Ok(Device {
        path: path.to_path_buf(),
        io,
        options: info.options,
        firmware_version: info.firmware_version,
        identity,
        timeout,
        pretimeout,
        nowayout,
        boot_reset,
        keepalive_by_write: info.options & WDIOF_KEEPALIVEPING == 0,
        opened_at,
        last_ping,
    })
}

/// A failed setup: magic close (best effort) so an `open` that could not finish does
/// not leave a device nobody pets. Writing `'V'` to a driver without magic close is a
/// harmless ping, and such a driver stops on any close anyway.
fn abandon(
    path: &Path,
    mut io: Io,
    step: &'static str,
    detail: String,
    nowayout: Option<bool>,
) -> WatchdogError {
    let _ = io.write(b"V");
    let _ = io.close();
    WatchdogError::Setup {
        path: path.to_path_buf(),
        step,
        detail,
        nowayout,
    }
}

/// `watchdog_info.identity`: up to the first NUL, lossily decoded, trimmed.
fn identity_of(raw: &[u8; 32]) -> String {
    let end = raw.iter().position(|&b| b == 0).unwrap_or(raw.len());
    String::from_utf8_lossy(&raw[..end]).trim().to_string()
}

/// The `WDIOF_*` names set in `options`, for the log.
fn describe_options(options: u32) -> String {
    const NAMES: [(u32, &str); 13] = [
        (WDIOF_OVERHEAT, "OVERHEAT"),
        (WDIOF_FANFAULT, "FANFAULT"),
        (WDIOF_EXTERN1, "EXTERN1"),
        (WDIOF_EXTERN2, "EXTERN2"),
        (WDIOF_POWERUNDER, "POWERUNDER"),
        (WDIOF_CARDRESET, "CARDRESET"),
        (WDIOF_POWEROVER, "POWEROVER"),
        (WDIOF_SETTIMEOUT, "SETTIMEOUT"),
        (WDIOF_MAGICCLOSE, "MAGICCLOSE"),
        (WDIOF_PRETIMEOUT, "PRETIMEOUT"),
        (WDIOF_ALARMONLY, "ALARMONLY"),
        (WDIOF_KEEPALIVEPING, "KEEPALIVEPING"),
        (0, ""),
    ];
    let names: Vec<&str> = NAMES
        .iter()
        .filter(|(bit, _)| *bit != 0 && options & bit != 0)
        .map(|(_, n)| *n)
        .collect();
    if names.is_empty() {
        "none".into()
    } else {
        names.join("|")
    }
}

/// `nowayout` for the device at `dev` from `<class_dir>/<name>/nowayout`: `watchdogN`
/// is itself, the legacy `/dev/watchdog` is the first device (`watchdog0`, which the
/// kernel registers it for). Symlinks are resolved first. `None` when the name is not a
/// watchdog device's or the attribute is missing or unreadable.
pub fn sysfs_nowayout(class_dir: &Path, dev: &Path) -> Option<bool> {
    let text = std::fs::read_to_string(sysfs_attr(class_dir, dev, "nowayout")?).ok()?;
    match text.trim() {
        "0" => Some(false),
        "1" => Some(true),
        _ => None,
    }
}

/// `<class_dir>/<watchdogN>/<attr>` for the device node `dev` (`/dev/watchdog` is
/// the first device, `watchdog0`); `None` for a name that is not a watchdog's.
fn sysfs_attr(class_dir: &Path, dev: &Path, attr: &str) -> Option<PathBuf> {
    let real = std::fs::canonicalize(dev).unwrap_or_else(|_| dev.to_path_buf());
    let name = real.file_name()?.to_str()?;
    let name = match name.strip_prefix("watchdog")? {
        "" => "watchdog0".to_string(),
        n if n.bytes().all(|b| b.is_ascii_digit()) => name.to_string(),
        _ => return None,
    };
    Some(class_dir.join(name).join(attr))
}

/// Whether sysfs says the last reset of this host was the watchdog's
/// (`bootstatus` has `WDIOF_CARDRESET`), read without opening the device: the
/// agent alerts at start-up, before it may open it (S4). `None` when unknown.
pub fn sysfs_boot_reset(class_dir: &Path, dev: &Path) -> Option<bool> {
    let text = std::fs::read_to_string(sysfs_attr(class_dir, dev, "bootstatus")?).ok()?;
    let v: u32 = text.trim().parse().ok()?;
    Some(v & sys::WDIOF_CARDRESET != 0)
}

/// The descriptor the device's calls go to: the real device, or (in unit tests) a
/// scripted driver that records the calls.
enum Io {
    Fd(OwnedFd),
    #[cfg(test)]
    Fake(fake::Fake),
}

impl Io {
    fn get_support(&mut self) -> nix::Result<WatchdogInfo> {
        match self {
            Io::Fd(fd) => {
                let mut info = WatchdogInfo {
                    options: 0,
                    firmware_version: 0,
                    identity: [0; 32],
                };
                // SAFETY: `fd` is an open descriptor we own; `info` is a valid, writable
                // `struct watchdog_info` (repr(C), the kernel's layout) that outlives the call,
                // and the request's encoded size is `size_of::<WatchdogInfo>()`.
                unsafe { wdioc_getsupport(fd.as_raw_fd(), &mut info) }?;
                Ok(info)
            }
            #[cfg(test)]
            Io::Fake(f) => f.get_support(),
        }
    }

    fn get_bootstatus(&mut self) -> nix::Result<c_int> {
        match self {
            Io::Fd(fd) => {
                let mut v: c_int = 0;
                // SAFETY: `fd` is an open descriptor we own; `v` is a writable int that
                // outlives the call, matching the request's `_IOR(int)` size.
                unsafe { wdioc_getbootstatus(fd.as_raw_fd(), &mut v) }?;
                Ok(v)
            }
            #[cfg(test)]
            Io::Fake(f) => f.int("GETBOOTSTATUS", f.bootstatus),
        }
    }

    fn keepalive(&mut self) -> nix::Result<()> {
        match self {
            Io::Fd(fd) => {
                // The kernel ignores the argument, but the request is `_IOR(int)`:
                // hand it a valid int.
                let mut dummy: c_int = 0;
                // SAFETY: `fd` is an open descriptor we own; `dummy` is a writable int
                // that outlives the call.
                unsafe { wdioc_keepalive(fd.as_raw_fd(), &mut dummy) }?;
                Ok(())
            }
            #[cfg(test)]
            Io::Fake(f) => f.keepalive(),
        }
    }

    fn set_timeout(&mut self, secs: c_int) -> nix::Result<c_int> {
        match self {
            Io::Fd(fd) => {
                let mut v = secs;
                // SAFETY: `fd` is an open descriptor we own; `v` is a readable and
                // writable int that outlives the call (`_IOWR(int)`).
                unsafe { wdioc_settimeout(fd.as_raw_fd(), &mut v) }?;
                Ok(v)
            }
            #[cfg(test)]
            Io::Fake(f) => f.set_timeout(secs),
        }
    }

    fn get_timeout(&mut self) -> nix::Result<c_int> {
        match self {
            Io::Fd(fd) => {
                let mut v: c_int = 0;
                // SAFETY: `fd` is an open descriptor we own; `v` is a writable int that
                // outlives the call (`_IOR(int)`).
                unsafe { wdioc_gettimeout(fd.as_raw_fd(), &mut v) }?;
                Ok(v)
            }
            #[cfg(test)]
            Io::Fake(f) => f.int("GETTIMEOUT", f.timeout),
        }
    }

    fn set_pretimeout(&mut self, secs: c_int) -> nix::Result<c_int> {
        match self {
            Io::Fd(fd) => {
                let mut v = secs;
                // SAFETY: `fd` is an open descriptor we own; `v` is a readable and
                // writable int that outlives the call (`_IOWR(int)`).
                unsafe { wdioc_setpretimeout(fd.as_raw_fd(), &mut v) }?;
                Ok(v)
            }
            #[cfg(test)]
            Io::Fake(f) => f.set_pretimeout(secs),
        }
    }

    fn get_pretimeout(&mut self) -> nix::Result<c_int> {
        match self {
            Io::Fd(fd) => {
                let mut v: c_int = 0;
                // SAFETY: `fd` is an open descriptor we own; `v` is a writable int that
                // outlives the call (`_IOR(int)`).
                unsafe { wdioc_getpretimeout(fd.as_raw_fd(), &mut v) }?;
                Ok(v)
            }
            #[cfg(test)]
            Io::Fake(f) => f.int("GETPRETIMEOUT", f.pretimeout),
        }
    }

    fn write(&mut self, bytes: &[u8]) -> nix::Result<usize> {
        match self {
            Io::Fd(fd) => nix::unistd::write(&*fd, bytes),
            #[cfg(test)]
            Io::Fake(f) => f.write(bytes),
        }
    }

    /// Close with the error reported (dropping an `OwnedFd` would swallow it).
    fn close(self) -> nix::Result<()> {
        match self {
            Io::Fd(fd) => nix::unistd::close(fd),
            #[cfg(test)]
            Io::Fake(f) => {
                f.log("close");
                Ok(())
            }
        }
    }
}

#[cfg(test)]
pub(crate) mod fake {
    //! A scripted driver: answers the ioctls from its fields and records every call,
    //! so the open sequence and the disarm rules can be tested without a device.

    use std::ffi::c_int;
    use std::path::Path;
    use std::sync::{Arc, Mutex};

    use nix::errno::Errno;

    use super::{Device, Io, WatchdogError, WatchdogInfo};

    #[derive(Clone)]
    pub struct Fake {
        pub options: u32,
        pub identity: &'static str,
        pub bootstatus: c_int,
        pub timeout: c_int,
        pub pretimeout: c_int,
        /// The driver clamps SETTIMEOUT to this maximum (like real hardware).
        pub max_timeout: c_int,
        /// Calls (by name, e.g. "GETSUPPORT") that fail with EIO.
        pub fail: Vec<&'static str>,
        /// Shared with the test (Arc + Mutex so `Device` stays `Send` in test builds).
        pub calls: Arc<Mutex<Vec<String>>>,
    }

    impl Fake {
        pub fn new(options: u32) -> Fake {
            Fake {
                options,
                identity: "fake wdt",
                bootstatus: 0,
                timeout: 60,
                pretimeout: 0,
                max_timeout: 3600,
                fail: Vec::new(),
                calls: Arc::new(Mutex::new(Vec::new())),
            }
        }

        pub fn log(&self, s: &str) {
            self.calls
                .lock()
                .expect("test fake: no panics while holding the log")
                .push(s.to_string());
        }

        fn check(&self, name: &'static str) -> nix::Result<()> {
            if self.fail.contains(&name) {
                Err(Errno::EIO)
            } else {
                Ok(())
            }
        }

        pub fn get_support(&mut self) -> nix::Result<WatchdogInfo> {
            self.log("GETSUPPORT");
            self.check("GETSUPPORT")?;
            let mut identity = [0u8; 32];
            let b = self.identity.as_bytes();
            identity[..b.len()].copy_from_slice(b);
            Ok(WatchdogInfo {
                options: self.options,
                firmware_version: 7,
                identity,
            })
        }

        pub fn int(&mut self, name: &'static str, v: c_int) -> nix::Result<c_int> {
            self.log(name);
            self.check(name)?;
            Ok(v)
        }

        pub fn keepalive(&mut self) -> nix::Result<()> {
            self.log("KEEPALIVE");
            self.check("KEEPALIVE")?;
            if self.options & super::WDIOF_KEEPALIVEPING == 0 {
                return Err(Errno::EOPNOTSUPP);
            }
            Ok(())
        }

        pub fn set_timeout(&mut self, secs: c_int) -> nix::Result<c_int> {
            self.log(&format!("SETTIMEOUT {secs}"));
            self.check("SETTIMEOUT")?;
            self.timeout = secs.min(self.max_timeout);
            Ok(self.timeout)
        }

        pub fn set_pretimeout(&mut self, secs: c_int) -> nix::Result<c_int> {
            self.log(&format!("SETPRETIMEOUT {secs}"));
            self.check("SETPRETIMEOUT")?;
            self.pretimeout = secs;
            Ok(secs)
        }

        pub fn write(&mut self, bytes: &[u8]) -> nix::Result<usize> {
            self.log(&format!("write {:?}", String::from_utf8_lossy(bytes)));
            self.check("write")?;
            Ok(bytes.len())
        }
    }

    /// `Device::open` with the fake in place of the kernel.
    pub fn open(
        fake: Fake,
        requested: u32,
        nowayout: Option<bool>,
    ) -> Result<Device, WatchdogError> {
        let path = Path::new("/dev/fake-watchdog");
        let requested = super::checked_request(path, requested)?;
        fake.log("open");
        let now = crate::clock::now();
        super::setup(path, Io::Fake(fake), requested, nowayout, now)
    }
}

#[cfg(test)]
mod tests {
    use super::fake::{self, Fake};
    use super::*;

    // linux/ioctl.h, generic layout (x86, arm, riscv...): dir << 30 | size << 16 |
    // type << 8 | nr, with _IOC_READ = 2 and _IOC_WRITE = 1. 'W' = 0x57,
    // sizeof(int) = 4, sizeof(struct watchdog_info) = 4 + 4 + 32 = 40 = 0x28.
    #[cfg(any(
        target_arch = "x86_64",
        target_arch = "x86",
        target_arch = "aarch64",
        target_arch = "arm",
        target_arch = "riscv64"
    ))]
    #[test]
    fn ioctl_numbers_match_the_kernel() {
        use nix::sys::ioctl::ioctl_num_type as N;
        let ior = |nr: N, size: N| -> N { (2 << 30) | (size << 16) | (0x57 << 8) | nr };
        let iowr = |nr: N, size: N| -> N { (3 << 30) | (size << 16) | (0x57 << 8) | nr };
        assert_eq!(std::mem::size_of::<WatchdogInfo>(), 40);
        assert_eq!(WDIOC_GETSUPPORT, ior(0, 40));
        assert_eq!(WDIOC_GETSUPPORT, 0x8028_5700);
        assert_eq!(WDIOC_GETSTATUS, ior(1, 4));
        assert_eq!(WDIOC_GETBOOTSTATUS, ior(2, 4));
        assert_eq!(WDIOC_GETTEMP, ior(3, 4));
        assert_eq!(WDIOC_SETOPTIONS, ior(4, 4));
        assert_eq!(WDIOC_KEEPALIVE, ior(5, 4));
        assert_eq!(WDIOC_KEEPALIVE, 0x8004_5705);
        assert_eq!(WDIOC_SETTIMEOUT, iowr(6, 4));
        assert_eq!(WDIOC_SETTIMEOUT, 0xC004_5706);
        assert_eq!(WDIOC_GETTIMEOUT, ior(7, 4));
        assert_eq!(WDIOC_GETTIMEOUT, 0x8004_5707);
        assert_eq!(WDIOC_SETPRETIMEOUT, iowr(8, 4));
        assert_eq!(WDIOC_GETPRETIMEOUT, ior(9, 4));
        assert_eq!(WDIOC_GETTIMELEFT, ior(10, 4));
    }

    #[test]
    fn watchdog_info_layout_is_the_kernels() {
        assert_eq!(std::mem::align_of::<WatchdogInfo>(), 4);
        assert_eq!(std::mem::offset_of!(WatchdogInfo, options), 0);
        assert_eq!(std::mem::offset_of!(WatchdogInfo, firmware_version), 4);
        assert_eq!(std::mem::offset_of!(WatchdogInfo, identity), 8);
    }

    #[test]
    fn flags_match_the_kernel() {
        assert_eq!(WDIOF_CARDRESET, 0x20);
        assert_eq!(WDIOF_SETTIMEOUT, 0x80);
        assert_eq!(WDIOF_MAGICCLOSE, 0x100);
        assert_eq!(WDIOF_PRETIMEOUT, 0x200);
        assert_eq!(WDIOF_ALARMONLY, 0x400);
        assert_eq!(WDIOF_KEEPALIVEPING, 0x8000);
    }

    fn calls(f: &Fake) -> Vec<String> {
        f.calls.lock().expect("test fake log").clone()
    }

    const FULL: u32 = WDIOF_SETTIMEOUT | WDIOF_MAGICCLOSE | WDIOF_KEEPALIVEPING | WDIOF_PRETIMEOUT;

    #[test]
    fn open_sets_then_believes_the_read_back() {
        let mut f = Fake::new(FULL);
        f.max_timeout = 10; // the driver clamps 13 to 10
        f.bootstatus = WDIOF_CARDRESET as c_int;
        let d = fake::open(f.clone(), 13, Some(false)).expect("opens");
        assert_eq!(d.timeout(), 10);
        assert_eq!(d.identity(), "fake wdt");
        assert_eq!(d.firmware_version(), 7);
        assert!(d.magic_close_supported());
        assert!(d.boot_status_watchdog_reset());
        assert_eq!(d.nowayout(), Some(false));
        assert_eq!(d.pretimeout(), Some(1));
        assert!(d.opened_at() <= d.last_ping());
        assert_eq!(
            calls(&f),
            [
                "open",
                "GETSUPPORT",
                "GETBOOTSTATUS",
                "SETTIMEOUT 13",
                "GETTIMEOUT",
                "SETPRETIMEOUT 1",
                "GETPRETIMEOUT"
            ]
        );
    }

    #[test]
    fn no_settimeout_support_means_no_settimeout_call() {
        let mut f = Fake::new(WDIOF_MAGICCLOSE);
        f.timeout = 30;
        let d = fake::open(f.clone(), 13, None).expect("opens");
        assert_eq!(d.timeout(), 30);
        assert_eq!(d.pretimeout(), None);
        assert!(!d.boot_status_watchdog_reset());
        assert_eq!(
            calls(&f),
            ["open", "GETSUPPORT", "GETBOOTSTATUS", "GETTIMEOUT"]
        );
    }

    #[test]
    fn refused_settimeout_is_not_fatal_read_back_counts() {
        let mut f = Fake::new(FULL);
        f.timeout = 45;
        f.fail = vec!["SETTIMEOUT"];
        let d = fake::open(f, 13, None).expect("opens");
        assert_eq!(d.timeout(), 45);
    }

    #[test]
    fn failed_pretimeout_and_bootstatus_are_not_fatal() {
        let mut f = Fake::new(FULL);
        f.fail = vec!["SETPRETIMEOUT", "GETBOOTSTATUS"];
        let d = fake::open(f, 5, None).expect("opens");
        assert_eq!(d.pretimeout(), None);
        assert!(!d.boot_status_watchdog_reset());
    }

    #[test]
    fn no_pretimeout_when_w_is_one_second() {
        let f = Fake::new(FULL);
        let d = fake::open(f.clone(), 1, None).expect("opens");
        assert_eq!(d.pretimeout(), None);
        assert!(!calls(&f).iter().any(|c| c.starts_with("SETPRETIMEOUT")));
    }

    #[test]
    fn setup_failure_closes_with_the_magic_character() {
        for step in ["GETSUPPORT", "GETTIMEOUT"] {
            let mut f = Fake::new(FULL);
            f.fail = vec![step];
            let e = fake::open(f.clone(), 13, Some(true)).expect_err("fails");
            let msg = e.to_string();
            assert!(matches!(e, WatchdogError::Setup { .. }), "{msg}");
            assert!(msg.contains(&format!("WDIOC_{step}")), "{msg}");
            assert!(msg.contains("STAYS ARMED"), "{msg}");
            let c = calls(&f);
            assert_eq!(&c[c.len() - 2..], ["write \"V\"", "close"]);
        }
    }

    #[test]
    fn zero_read_back_is_refused() {
        let mut f = Fake::new(WDIOF_MAGICCLOSE);
        f.timeout = 0;
        let e = fake::open(f, 13, Some(false)).expect_err("fails");
        assert!(e.to_string().contains("timeout of 0 s"), "{e}");
    }

    #[test]
    fn bad_request_is_refused_before_opening() {
        let f = Fake::new(FULL);
        let e = fake::open(f.clone(), 0, None).expect_err("fails");
        assert!(matches!(e, WatchdogError::BadRequest { requested: 0, .. }));
        let e = fake::open(f.clone(), u32::MAX, None).expect_err("fails");
        assert!(e.to_string().contains("4294967295"), "{e}");
        assert!(calls(&f).is_empty());
    }

    #[test]
    fn keepalive_uses_the_ioctl_and_records_the_ping() {
        let f = Fake::new(FULL);
        let mut d = fake::open(f.clone(), 13, None).expect("opens");
        let before = d.last_ping();
        d.keepalive().expect("pings");
        assert!(d.last_ping() >= before);
        assert_eq!(calls(&f).last().map(String::as_str), Some("KEEPALIVE"));
    }

    #[test]
    fn keepalive_without_the_ioctl_writes_a_byte_not_v() {
        let f = Fake::new(WDIOF_MAGICCLOSE | WDIOF_SETTIMEOUT);
        let mut d = fake::open(f.clone(), 13, None).expect("opens");
        d.keepalive().expect("pings");
        d.keepalive().expect("pings");
        let c = calls(&f);
        assert!(!c.iter().any(|c| c == "KEEPALIVE"), "{c:?}");
        assert_eq!(
            c.iter().filter(|c| *c == "write \"\\0\"").count(),
            2,
            "{c:?}"
        );
    }

    #[test]
    fn refused_keepalive_ioctl_falls_back_to_write_once() {
        // Claims KEEPALIVEPING but refuses the ioctl: fall back, and stop trying it.
        let f = Fake::new(FULL); // keepalive() in the fake succeeds with the bit set...
        let mut d = fake::open(f.clone(), 13, None).expect("opens");
        if let Io::Fake(inner) = &mut d.io {
            inner.options &= !WDIOF_KEEPALIVEPING; // ...so refuse it from now on.
        }
        d.keepalive().expect("pings by write");
        d.keepalive().expect("pings by write");
        let c = calls(&f);
        assert_eq!(c.iter().filter(|c| *c == "KEEPALIVE").count(), 1, "{c:?}");
        assert_eq!(
            c.iter().filter(|c| *c == "write \"\\0\"").count(),
            2,
            "{c:?}"
        );
    }

    #[test]
    fn keepalive_error_names_the_device() {
        let mut f = Fake::new(FULL);
        f.fail = vec!["KEEPALIVE"];
        let mut d = fake::open(f, 13, None).expect("opens");
        let e = d.keepalive().expect_err("fails");
        assert!(e.to_string().contains("/dev/fake-watchdog"), "{e}");
    }

    #[test]
    fn disarm_writes_v_then_closes() {
        let f = Fake::new(FULL);
        let d = fake::open(f.clone(), 13, Some(false)).expect("opens");
        let done = d.disarm().expect("disarms");
        assert!(done.nowayout_known);
        let c = calls(&f);
        assert_eq!(&c[c.len() - 2..], ["write \"V\"", "close"]);
    }

    #[test]
    fn disarm_with_unknown_nowayout_tries_and_says_so() {
        let f = Fake::new(FULL);
        let d = fake::open(f.clone(), 13, None).expect("opens");
        let done = d.disarm().expect("disarms");
        assert!(!done.nowayout_known);
    }

    #[test]
    fn disarm_under_nowayout_hands_the_device_back_untouched() {
        let f = Fake::new(FULL);
        let d = fake::open(f.clone(), 13, Some(true)).expect("opens");
        let n = calls(&f).len();
        match d.disarm() {
            Err(WatchdogError::NoWayOut(mut d)) => {
                assert_eq!(calls(&f).len(), n, "nothing written, nothing closed");
                d.keepalive().expect("still usable");
            }
            other => panic!("expected NoWayOut, got {other:?}"),
        }
    }

    #[test]
    fn disarm_without_magic_close_just_closes() {
        let f = Fake::new(WDIOF_SETTIMEOUT);
        let d = fake::open(f.clone(), 13, Some(false)).expect("opens");
        d.disarm().expect("disarms");
        let c = calls(&f);
        assert_eq!(c.last().map(String::as_str), Some("close"));
        assert!(!c.iter().any(|c| c.starts_with("write")), "{c:?}");
    }

    #[test]
    fn failed_magic_write_hands_the_device_back() {
        let mut f = Fake::new(FULL);
        f.fail = vec!["write"];
        let d = fake::open(f.clone(), 13, Some(false)).expect("opens");
        match d.disarm() {
            Err(WatchdogError::DisarmWrite { device, errno }) => {
                assert_eq!(errno, Errno::EIO);
                assert_eq!(device.timeout(), 13);
            }
            other => panic!("expected DisarmWrite, got {other:?}"),
        }
        assert!(!calls(&f).iter().any(|c| c == "close"));
    }

    #[test]
    fn identity_stops_at_nul_and_survives_garbage() {
        let mut raw = [0u8; 32];
        raw[..9].copy_from_slice(b"iTCO_wdt ");
        assert_eq!(identity_of(&raw), "iTCO_wdt");
        let raw = [0xffu8; 32];
        assert_eq!(identity_of(&raw).chars().count(), 32);
    }

    #[test]
    fn options_are_named() {
        assert_eq!(describe_options(0), "none");
        assert_eq!(
            describe_options(WDIOF_SETTIMEOUT | WDIOF_MAGICCLOSE),
            "SETTIMEOUT|MAGICCLOSE"
        );
    }

    #[test]
    fn nowayout_is_read_from_sysfs_by_device_name() {
        let dir = crate::testbed::scratch_dir("wdt-sysfs").expect("scratch dir");
        let class = dir.join("class");
        for (name, v) in [
            ("watchdog0", "1\n"),
            ("watchdog1", "0\n"),
            ("watchdog2", "x"),
        ] {
            std::fs::create_dir_all(class.join(name)).expect("mkdir");
            std::fs::write(class.join(name).join("nowayout"), v).expect("write");
        }
        let dev = dir.join("dev");
        std::fs::create_dir_all(&dev).expect("mkdir");
        for n in [
            "watchdog",
            "watchdog0",
            "watchdog1",
            "watchdog2",
            "watchdog3",
            "wd",
        ] {
            std::fs::write(dev.join(n), "").expect("touch");
        }
        std::os::unix::fs::symlink(dev.join("watchdog1"), dev.join("mywd")).expect("symlink");
        let q = |n: &str| sysfs_nowayout(&class, &dev.join(n));
        assert_eq!(q("watchdog"), Some(true), "legacy node is watchdog0");
        assert_eq!(q("watchdog0"), Some(true));
        assert_eq!(q("watchdog1"), Some(false));
        assert_eq!(q("mywd"), Some(false), "symlinks resolved");
        assert_eq!(q("watchdog2"), None, "garbage attribute");
        assert_eq!(q("watchdog3"), None, "no attribute");
        assert_eq!(q("wd"), None, "not a watchdog name");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn open_errors_name_the_path() {
        let dir = crate::testbed::scratch_dir("wdt-open").expect("scratch dir");
        let missing = dir.join("no-such-watchdog");
        let e = Device::open(&missing, 13).expect_err("missing device");
        assert!(
            matches!(
                e,
                WatchdogError::Open {
                    errno: Errno::ENOENT,
                    ..
                }
            ),
            "{e}"
        );
        assert!(e.to_string().contains("no-such-watchdog"), "{e}");

        // A regular file opens but answers no ioctl: a Setup error, and the clean-up
        // wrote the magic 'V' into it.
        let file = dir.join("watchdog-file");
        std::fs::write(&file, "").expect("touch");
        let e = Device::open(&file, 13).expect_err("not a watchdog");
        assert!(
            matches!(
                e,
                WatchdogError::Setup {
                    step: "WDIOC_GETSUPPORT",
                    ..
                }
            ),
            "{e}"
        );
        assert_eq!(std::fs::read(&file).expect("read"), b"V");

        // open_with_sysfs reads nowayout for the device's name from the given class dir.
        let class = dir.join("class");
        std::fs::create_dir_all(class.join("watchdog7")).expect("mkdir");
        std::fs::write(class.join("watchdog7").join("nowayout"), "1\n").expect("write");
        let file = dir.join("watchdog7");
        std::fs::write(&file, "").expect("touch");
        let e = Device::open_with_sysfs(&file, 13, &class).expect_err("not a watchdog");
        assert!(
            matches!(
                e,
                WatchdogError::Setup {
                    nowayout: Some(true),
                    ..
                }
            ),
            "{e}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn device_and_errors_are_send() {
        fn send<T: Send>() {}
        send::<Device>();
        send::<WatchdogError>();
    }
}

#[cfg(test)]
mod sysfs_boot_tests {
    use super::*;

    #[test]
    fn boot_reset_is_read_from_bootstatus() {
        let dir = std::env::temp_dir().join(format!("tenure-bootstatus-{}", std::process::id()));
        let class = dir.join("class");
        std::fs::create_dir_all(class.join("watchdog0")).unwrap();
        let dev = dir.join("watchdog");
        std::fs::write(&dev, b"").unwrap();
        assert_eq!(sysfs_boot_reset(&class, &dev), None, "no bootstatus file");
        std::fs::write(class.join("watchdog0/bootstatus"), "32\n").unwrap();
        assert_eq!(sysfs_boot_reset(&class, &dev), Some(true));
        std::fs::write(class.join("watchdog0/bootstatus"), "0\n").unwrap();
        assert_eq!(sysfs_boot_reset(&class, &dev), Some(false));
        std::fs::write(class.join("watchdog0/bootstatus"), "garbage").unwrap();
        assert_eq!(sysfs_boot_reset(&class, &dev), None);
        assert_eq!(sysfs_boot_reset(&class, &dir.join("not-a-watchdog")), None);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
