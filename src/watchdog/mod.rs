//! The watchdog shell: the `/dev/watchdog` driver ([`device`]), systemd's notify
//! protocol ([`notify`]), and the small policy helpers the agent and the tests share.
//!
//! Owns: whether an opened device is fit for use under DESIGN S2/S6 ([`check_usable`]),
//! and S2's pet rule and S1's fence deadline as pure functions ([`pet_allowed`],
//! [`fence_deadline`]).
//! Must never: decide anything about leadership, or pet on its own: the core says when
//! to pet (`Action::PetWatchdog`) and when to disarm (`Action::DisarmWatchdog`); this
//! module only carries that out and says whether a device can be trusted with it.

pub mod device;
pub mod notify;

use std::time::Duration;

use crate::config::{TimingConfig, WatchdogMode, validate_timing};
use crate::core::time::Instant;

pub use device::{Device, Disarmed, WatchdogError};
pub use notify::{Notifier, NotifyError};

/// Whether `dev` may serve as this leader's watchdog (DESIGN S2, S6).
///
/// Refused (the message names the device and the numbers) when the read-back `W`
/// breaks S6 with `granted_ttl` (checked by [`validate_timing`], the same rules as at
/// start-up), or when a crash could disarm it: a driver without `WDIOF_MAGICCLOSE` is
/// stopped by any close, a crashed agent's included, unless `nowayout` is set (unknown
/// counts as not set: that is the side that keeps the check honest).
///
/// In `required` mode an `Err` means: do not lead with it (release the key, do not
/// promote). In `automatic` the same `Err` means: run without a watchdog, and say so
/// loudly. In `off` mode the device should not have been opened at all: always `Err`.
pub fn check_usable(
    dev: &Device,
    timing: &TimingConfig,
    granted_ttl: u32,
    mode: &WatchdogMode,
) -> Result<(), String> {
    check(
        &DeviceFacts {
            path: &dev.path().display().to_string(),
            identity: dev.identity(),
            w: dev.timeout(),
            magic_close: dev.magic_close_supported(),
            nowayout: dev.nowayout(),
        },
        timing,
        granted_ttl,
        mode,
    )
}

/// What [`check_usable`] looks at, separated from the device so the rule is testable
/// on its own.
struct DeviceFacts<'a> {
    path: &'a str,
    identity: &'a str,
    w: u32,
    magic_close: bool,
    nowayout: Option<bool>,
}

fn check(
    d: &DeviceFacts<'_>,
    timing: &TimingConfig,
    granted_ttl: u32,
    mode: &WatchdogMode,
) -> Result<(), String> {
    let mode_name = match mode {
        WatchdogMode::Off => {
            return Err(format!(
                "watchdog {} ({}): watchdog mode is \"off\"; the device must not be used",
                d.path, d.identity
            ));
        }
        WatchdogMode::Automatic => "automatic",
        WatchdogMode::Required => "required",
    };
    if let Err(e) = validate_timing(timing, granted_ttl, Some(d.w)) {
        return Err(format!(
            "watchdog {} ({}), mode {mode_name}: the driver's read-back timeout W = {} s does \
             not fit the timing with the granted ttl {} s: {e}",
            d.path, d.identity, d.w, granted_ttl
        ));
    }
    if !d.magic_close && d.nowayout != Some(true) {
        return Err(format!(
            "watchdog {} ({}), mode {mode_name}: the driver lacks WDIOF_MAGICCLOSE, so any \
             close disarms it — a crashed agent's too — and nowayout is {} (DESIGN S2)",
            d.path,
            d.identity,
            if d.nowayout.is_none() {
                "unknown"
            } else {
                "not set"
            }
        ));
    }
    Ok(())
}

/// systemd's watchdog at start-up (DESIGN §5, S6(b)): the unit's `WatchdogSec=`
/// (`WATCHDOG_USEC` in our environment) is one number for every host, but S6(b)
/// bounds `W` by this node's timing (`WatchdogSec=13s` fits ttl 30 and breaks ttl 7).
/// So the agent tells systemd its own `W` — the top of S6(b)/(e)'s range for the
/// configured ttl, the `W` it would ask a device for — with `WATCHDOG_USEC=`, and
/// plays what systemd will enforce: the value it sent, or the unit's when the message
/// could not be sent (then the caller's S6 check refuses a unit value that breaks
/// it). `None`: the unit asked for no watchdog, and the agent never starts one (it
/// cannot know that the unit kills the whole cgroup with SIGKILL).
pub fn own_systemd_timeout(notifier: &mut Notifier, timing: &TimingConfig) -> Option<Duration> {
    let unit = notifier.watchdog_usec()?;
    let Some((_, hi)) = crate::config::watchdog_range(timing, timing.ttl) else {
        // No W fits this timing: the caller's check refuses it with the numbers.
        return Some(unit);
    };
    let want = Duration::from_secs(u64::from(hi));
    if want == unit {
        return Some(unit);
    }
    if notifier.override_watchdog_usec(want) {
        log::info!(
            "systemd watchdog: WATCHDOG_USEC={} sent, replacing the unit's WatchdogSec= \
             ({} s) with W = {hi} s, the top of the range S6 allows for ttl {} s",
            want.as_micros(),
            unit.as_secs_f64(),
            timing.ttl
        );
        Some(want)
    } else {
        log::warn!(
            "systemd watchdog: could not send WATCHDOG_USEC={} (no notify socket, or the \
             message was dropped); the unit's WatchdogSec= ({} s) stays in force",
            want.as_micros(),
            unit.as_secs_f64()
        );
        Some(unit)
    }
}

/// DESIGN S2: a deliberate pet at `now` is allowed only if `now + 2W <= H`, so that an
/// agent dying right after it (whose close pings once more) still has its host reset
/// by `H`.
pub fn pet_allowed(now: Instant, w: Duration, horizon: Instant) -> bool {
    now.add(w).add(w) <= horizon
}

/// DESIGN S1: the fence deadline with a watchdog, `F = last_pet + W` (S2 makes this
/// `<= H - W`; the `min` with `H` only matters if a caller broke S2, and then `H` is
/// the deadline that still holds).
pub fn fence_deadline(last_pet: Instant, w: Duration, horizon: Instant) -> Instant {
    last_pet.add(w).min(horizon)
}

/// How long a leadership's arming has found its device busy, across attempts
/// (review of 677a682, M1): an `open_within` whose retries the loop cut short
/// (the tick, `F - B`, S2) is no evidence yet; busy for `retry_timeout` across a
/// leadership's attempts is. Keyed by the leadership's epoch, so a new
/// leadership starts afresh; cleared by an open.
#[derive(Debug, Default)]
pub struct BusySince(Option<(Option<i64>, Instant)>);

impl BusySince {
    /// An attempt of leadership `epoch` that began at `first_try` ended busy at
    /// `now`: how long this leadership's arming has seen the device busy.
    pub fn busy(&mut self, epoch: Option<i64>, first_try: Instant, now: Instant) -> Duration {
        let since = match self.0 {
            Some((e, at)) if e == epoch => at,
            _ => {
                self.0 = Some((epoch, first_try));
                first_try
            }
        };
        now.since(since)
    }

    /// The device opened: the next busy starts a new count.
    pub fn opened(&mut self) {
        self.0 = None;
    }
}

/// How a leadership's open of its device ended ([`open_within`]).
#[derive(Debug)]
pub enum OpenTry<D> {
    /// Opened at this instant (read just before the `open`: the pet's instant).
    Opened(D, Instant),
    /// Not tried: the instant was already past `not_after` (S2). Nothing is wrong
    /// with the device; the pet is skipped and the next counted renewal tries again.
    Late,
    /// Busy at every attempt until the retries ran out.
    Busy,
    /// The open failed otherwise (the device's own error).
    Failed(WatchdogError),
}

/// Open a device for a leadership's arming: the first attempt whenever the instant
/// is at or before `not_after` (S2: the open is a pet), EBUSY retried every 20 ms
/// while also at or before `retry_until` (the caller's cap: the next tick and
/// `F - B`, so retries never delay a renewal).
///
/// Why the first attempt is not held to `retry_until`: an iteration that ran past
/// its tick (the bootstrap's, which ran initdb, seeded the configuration and took
/// the key in one go) would otherwise fail an open it never tried, and a required
/// watchdog's failure gives up the key and refuses leadership for the run: a
/// freshly bootstrapped cluster left with no primary (found by
/// `real_watchdog_e2e`, 1 boot in 12). One `open(2)` and its `ioctl`s are as short
/// as the keepalive an armed device gets at the same point.
pub fn open_within<D>(
    not_after: Instant,
    retry_until: Instant,
    mut now: impl FnMut() -> Instant,
    mut open: impl FnMut() -> Result<D, WatchdogError>,
    mut sleep: impl FnMut(Duration),
) -> OpenTry<D> {
    let mut tried = false;
    loop {
        let at = now();
        if at > not_after || (tried && at > retry_until) {
            return if tried { OpenTry::Busy } else { OpenTry::Late };
        }
        tried = true;
        match open() {
            Ok(d) => return OpenTry::Opened(d, at),
            Err(WatchdogError::Busy { .. }) => {
                let left = now().until(retry_until.min(not_after));
                sleep(Duration::from_millis(20).min(left));
            }
            Err(e) => return OpenTry::Failed(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::device::fake::{self, Fake};
    use super::device::sys::*;
    use super::*;

    fn secs(s: f64) -> Duration {
        Duration::from_secs_f64(s)
    }

    /// DESIGN S6's first worked example: ttl 30, loop 2, retry 1, margin 2, budget 1.
    fn timing_30() -> TimingConfig {
        TimingConfig {
            ttl: 30,
            loop_wait: secs(2.0),
            retry_timeout: secs(1.0),
            safety_margin: secs(2.0),
            demote_budget: secs(1.0),
            promote_delay: None,
            iteration_budget: secs(1.0),
        }
    }

    /// The second: ttl 7, loop 0.5, retry 0.25, margin 0.5, budget 0.3.
    fn timing_7() -> TimingConfig {
        TimingConfig {
            ttl: 7,
            loop_wait: secs(0.5),
            retry_timeout: secs(0.25),
            safety_margin: secs(0.5),
            demote_budget: secs(0.3),
            promote_delay: None,
            iteration_budget: secs(0.25),
        }
    }

    fn facts(w: u32, magic_close: bool, nowayout: Option<bool>) -> DeviceFacts<'static> {
        DeviceFacts {
            path: "/dev/watchdog0",
            identity: "iTCO_wdt",
            w,
            magic_close,
            nowayout,
        }
    }

    #[test]
    fn worked_example_one_allows_5_to_13() {
        let t = timing_30();
        for mode in [WatchdogMode::Automatic, WatchdogMode::Required] {
            for w in 5..=13 {
                check(&facts(w, true, None), &t, 30, &mode).expect("in range");
            }
            for w in [1, 4, 14, 60] {
                let e = check(&facts(w, true, None), &t, 30, &mode).expect_err("out of range");
                assert!(e.contains(&format!("W = {w} s")), "{e}");
                assert!(e.contains("S6(b)"), "{e}");
                assert!(e.contains("/dev/watchdog0"), "{e}");
            }
        }
    }

    #[test]
    fn worked_example_two_allows_2_and_3() {
        let t = timing_7();
        let m = WatchdogMode::Required;
        check(&facts(2, true, Some(false)), &t, 7, &m).expect("W = 2");
        check(&facts(3, true, Some(false)), &t, 7, &m).expect("W = 3");
        // W = 1: S6(b)'s left side (0.5 + 0.25 + 0.3 = 1.05 < W) already fails.
        let e = check(&facts(1, true, Some(false)), &t, 7, &m).expect_err("W = 1");
        assert!(e.contains("1.05"), "{e}");
        let e = check(&facts(4, true, Some(false)), &t, 7, &m).expect_err("W = 4");
        assert!(e.contains("3.125"), "{e}");
    }

    #[test]
    fn the_granted_ttl_counts_not_the_configured_one() {
        // Configured 30 but granted 20: W = 13 no longer fits ((20 - 2 - 1) / 2 = 8.5).
        let e = check(
            &facts(13, true, None),
            &timing_30(),
            20,
            &WatchdogMode::Required,
        )
        .expect_err("granted ttl is smaller");
        assert!(e.contains("granted ttl 20"), "{e}");
    }

    #[test]
    fn e_rule_is_checked() {
        // loop 1, retry 0.5, budget 0.1, margin 0.1: (b) needs W > 1.6, (e) W > 2.4.
        let t = TimingConfig {
            ttl: 20,
            loop_wait: secs(1.0),
            retry_timeout: secs(0.5),
            safety_margin: secs(0.1),
            demote_budget: secs(0.1),
            promote_delay: None,
            iteration_budget: secs(0.5),
        };
        let e = check(&facts(2, true, None), &t, 20, &WatchdogMode::Automatic).expect_err("(e)");
        assert!(e.contains("S6(e)"), "{e}");
        check(&facts(3, true, None), &t, 20, &WatchdogMode::Automatic).expect("W = 3");
    }

    #[test]
    fn no_magic_close_needs_nowayout() {
        let t = timing_30();
        for mode in [WatchdogMode::Automatic, WatchdogMode::Required] {
            for nwo in [None, Some(false)] {
                let e = check(&facts(10, false, nwo), &t, 30, &mode).expect_err("crash disarms");
                assert!(e.contains("WDIOF_MAGICCLOSE"), "{e}");
            }
            check(&facts(10, false, Some(true)), &t, 30, &mode).expect("nowayout holds it");
        }
    }

    #[test]
    fn off_mode_never_uses_a_device() {
        let e = check(
            &facts(10, true, Some(true)),
            &timing_30(),
            30,
            &WatchdogMode::Off,
        )
        .expect_err("off");
        assert!(e.contains("\"off\""), "{e}");
    }

    #[test]
    fn check_usable_reads_the_device() {
        let mut f = Fake::new(WDIOF_SETTIMEOUT | WDIOF_MAGICCLOSE);
        f.max_timeout = 20; // asked 13, fine
        let d = fake::open(f, 13, None).expect("opens");
        check_usable(&d, &timing_30(), 30, &WatchdogMode::Required).expect("usable");

        let mut f = Fake::new(WDIOF_MAGICCLOSE); // cannot set: runs its own 60 s
        f.timeout = 60;
        let d = fake::open(f, 13, None).expect("opens");
        let e = check_usable(&d, &timing_30(), 30, &WatchdogMode::Required).expect_err("60 s");
        assert!(e.contains("W = 60 s"), "{e}");
    }

    #[test]
    fn systemd_watchdog_follows_the_timing() {
        use std::os::linux::net::SocketAddrExt as _;
        use std::os::unix::net::{SocketAddr, UnixDatagram};
        let name = format!("tenure-test-own-wd-{}", std::process::id());
        let addr = SocketAddr::from_abstract_name(name.as_bytes()).expect("addr");
        let rx = UnixDatagram::bind_addr(&addr).expect("bind");
        rx.set_nonblocking(true).expect("nonblocking");
        let sock = format!("@{name}");
        let recv = || {
            let mut buf = [0u8; 256];
            let mut out = Vec::new();
            while let Ok(n) = rx.recv(&mut buf) {
                out.push(String::from_utf8_lossy(&buf[..n]).into_owned());
            }
            out
        };
        let unit = |usec: &str| Notifier::from_values(Some(&sock), Some(usec), None, 1);

        // The shipped WatchdogSec=13s at ttl 7: the agent asks for its own 3 s and
        // plays 3 s, which S6 accepts (13 s would break S6(b)).
        let t7 = timing_7();
        let mut n = unit("13000000").expect("notifier");
        assert_eq!(own_systemd_timeout(&mut n, &t7), Some(secs(3.0)));
        assert_eq!(recv(), ["WATCHDOG_USEC=3000000"]);
        assert_eq!(n.watchdog_usec(), Some(secs(3.0)));
        validate_timing(&t7, 7, Some(3)).expect("the W played fits");
        validate_timing(&t7, 7, Some(13)).expect_err("the unit's W would not");

        // At ttl 30 the unit's 13 s is already the top of the range: nothing sent.
        let mut n = unit("13000000").expect("notifier");
        assert_eq!(own_systemd_timeout(&mut n, &timing_30()), Some(secs(13.0)));
        assert!(recv().is_empty());

        // A smaller unit value is raised to the top too (the longest etcd outage).
        let mut n = unit("6000000").expect("notifier");
        assert_eq!(own_systemd_timeout(&mut n, &timing_30()), Some(secs(13.0)));
        assert_eq!(recv(), ["WATCHDOG_USEC=13000000"]);

        // No WatchdogSec= in the unit: no watchdog is started.
        let mut n = Notifier::from_values(Some(&sock), None, None, 1).expect("notifier");
        assert_eq!(own_systemd_timeout(&mut n, &t7), None);
        assert!(recv().is_empty());

        // systemd could not be told: the unit's value is what the agent plays.
        let mut n = Notifier::from_values(None, Some("13000000"), None, 1).expect("notifier");
        assert_eq!(own_systemd_timeout(&mut n, &t7), Some(secs(13.0)));
    }

    #[test]
    fn pet_rule_boundaries() {
        let h = Instant::from_nanos(100_000_000_000); // H = 100 s
        let w = Duration::from_secs(13);
        assert!(pet_allowed(Instant::from_nanos(74_000_000_000), w, h)); // 74 + 26 = 100
        assert!(!pet_allowed(Instant::from_nanos(74_000_000_001), w, h));
        assert!(pet_allowed(Instant::ZERO, w, h));
        assert!(!pet_allowed(h, w, h));
        // Saturation at the end of time never allows a pet by wrapping around.
        assert!(!pet_allowed(
            Instant::from_nanos(u64::MAX - 1),
            w,
            Instant::from_nanos(u64::MAX - 2)
        ));
    }

    #[test]
    fn fence_deadline_is_last_pet_plus_w_and_never_past_h() {
        let h = Instant::from_nanos(100_000_000_000);
        let w = Duration::from_secs(13);
        let pet = Instant::from_nanos(70_000_000_000);
        assert_eq!(
            fence_deadline(pet, w, h),
            Instant::from_nanos(83_000_000_000)
        );
        // Any allowed pet gives F <= H - W.
        let last_allowed = Instant::from_nanos(74_000_000_000);
        assert!(pet_allowed(last_allowed, w, h));
        assert!(fence_deadline(last_allowed, w, h) <= h.sub(w));
        // A pet that broke S2 is capped at H.
        assert_eq!(fence_deadline(Instant::from_nanos(95_000_000_000), w, h), h);
    }

    #[test]
    fn helpers_agree_with_s6_for_every_allowed_w() {
        // S6(b) right side: for any W it allows, a pet right after a renewal that met
        // its deadline (t <= s + R) is allowed.
        let t = timing_30();
        let (lo, hi) = crate::config::watchdog_range(&t, 30).expect("non-empty");
        assert_eq!((lo, hi), (5, 13));
        let s = Instant::from_nanos(1_000_000_000_000);
        let h = s.add(Duration::from_secs(30)).sub(t.safety_margin);
        for w in lo..=hi {
            let w = Duration::from_secs(u64::from(w));
            assert!(pet_allowed(s.add(t.retry_timeout), w, h));
        }
    }

    /// A scripted clock and device for [`open_within`]: each `open` returns the next
    /// scripted result and takes 1 ms; `sleep` advances the clock.
    struct Script {
        now_ns: std::cell::Cell<u64>,
        results: std::cell::RefCell<Vec<Result<u32, WatchdogError>>>,
        opens_at: std::cell::RefCell<Vec<u64>>,
    }

    impl Script {
        fn new(now_ms: u64, results: Vec<Result<u32, WatchdogError>>) -> Script {
            Script {
                now_ns: std::cell::Cell::new(now_ms * 1_000_000),
                results: std::cell::RefCell::new(results),
                opens_at: std::cell::RefCell::new(Vec::new()),
            }
        }

        fn run(&self, not_after_ms: u64, retry_until_ms: u64) -> OpenTry<u32> {
            open_within(
                Instant::from_nanos(not_after_ms * 1_000_000),
                Instant::from_nanos(retry_until_ms * 1_000_000),
                || Instant::from_nanos(self.now_ns.get()),
                || {
                    self.opens_at
                        .borrow_mut()
                        .push(self.now_ns.get() / 1_000_000);
                    self.now_ns.set(self.now_ns.get() + 1_000_000);
                    let mut r = self.results.borrow_mut();
                    if r.is_empty() {
                        Err(busy())
                    } else {
                        r.remove(0)
                    }
                },
                |d| self.now_ns.set(self.now_ns.get() + d.as_nanos() as u64),
            )
        }

        fn opens(&self) -> Vec<u64> {
            self.opens_at.borrow().clone()
        }
    }

    fn busy() -> WatchdogError {
        WatchdogError::Busy {
            path: "/dev/watchdog".into(),
        }
    }

    #[test]
    fn an_iteration_past_its_tick_still_tries_the_open_once() {
        // The bootstrap's iteration ran past its tick (retry_until = 500 ms) but the
        // pet is still allowed until 900 ms: the open is tried, and succeeds.
        let s = Script::new(535, vec![Ok(7)]);
        match s.run(900, 500) {
            OpenTry::Opened(7, at) => assert_eq!(at, Instant::from_nanos(535_000_000)),
            other => panic!("expected the open at 535 ms, got {other:?}"),
        }
        assert_eq!(s.opens(), vec![535]);
        // Busy at that one attempt: not retried past the tick, reported busy.
        let s = Script::new(535, vec![Err(busy()), Ok(7)]);
        assert!(matches!(s.run(900, 500), OpenTry::Busy));
        assert_eq!(s.opens(), vec![535]);
    }

    #[test]
    fn past_not_after_the_open_is_not_tried_and_is_late_not_failed() {
        let s = Script::new(901, vec![Ok(7)]);
        assert!(matches!(s.run(900, 2_000), OpenTry::Late));
        assert!(s.opens().is_empty(), "S2: no open past not_after");
    }

    #[test]
    fn busy_is_retried_every_20_ms_until_the_earlier_cap() {
        // Busy twice, then free: opened at the third attempt.
        let s = Script::new(0, vec![Err(busy()), Err(busy()), Ok(3)]);
        assert!(matches!(s.run(1_000, 250), OpenTry::Opened(3, _)));
        assert_eq!(s.opens(), vec![0, 21, 42]);
        // Busy for good: the last attempt is at or before the retry cap...
        let s = Script::new(0, vec![]);
        assert!(matches!(s.run(1_000, 250), OpenTry::Busy));
        let opens = s.opens();
        assert!(
            opens.len() > 5 && *opens.last().unwrap() <= 250,
            "{opens:?}"
        );
        // ...and at or before not_after when that comes first (S2).
        let s = Script::new(0, vec![]);
        assert!(matches!(s.run(100, 250), OpenTry::Busy));
        assert!(s.opens().iter().all(|&t| t <= 100), "{:?}", s.opens());
    }

    #[test]
    fn another_error_ends_the_open_at_once() {
        let s = Script::new(
            0,
            vec![Err(WatchdogError::Open {
                path: "/dev/watchdog".into(),
                errno: nix::errno::Errno::ENOENT,
            })],
        );
        assert!(matches!(
            s.run(1_000, 250),
            OpenTry::Failed(WatchdogError::Open { .. })
        ));
        assert_eq!(s.opens(), vec![0]);
    }

    #[test]
    fn busy_is_counted_across_a_leaderships_attempts_and_starts_afresh() {
        let at = |ms: u64| Instant::from_nanos(ms * 1_000_000);
        let mut b = BusySince::default();
        // A cut-short attempt at 1000 ms (busy until 1001): 1 ms so far.
        assert_eq!(
            b.busy(Some(7), at(1000), at(1001)),
            Duration::from_millis(1)
        );
        // The next renewal's attempt, same leadership: counted from the first.
        assert_eq!(
            b.busy(Some(7), at(1500), at(1750)),
            Duration::from_millis(750)
        );
        // Another leadership: afresh.
        assert_eq!(
            b.busy(Some(9), at(2000), at(2010)),
            Duration::from_millis(10)
        );
        // An open in between: afresh too.
        b.opened();
        assert_eq!(
            b.busy(Some(9), at(3000), at(3020)),
            Duration::from_millis(20)
        );
    }
}
