//! The only place that reads clocks.
//!
//! Owns: `CLOCK_BOOTTIME` (all lease arithmetic, DESIGN S5) and `CLOCK_REALTIME`
//! (stall cross-check and timestamps in `history`), and `CLOCK_MONOTONIC` for
//! systemd's `MONOTONIC_USEC=` only. Must never: be called from
//! `core` (the core gets `now` passed in).

use std::time::Duration;

use crate::core::time::Instant;

/// Now on `CLOCK_BOOTTIME`.
pub fn now() -> Instant {
    let ts = nix::time::clock_gettime(nix::time::ClockId::CLOCK_BOOTTIME)
        .expect("CLOCK_BOOTTIME is available on every Linux since 2.6.39");
    let ns = (ts.tv_sec() as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(ts.tv_nsec() as u64);
    Instant::from_nanos(ns)
}

/// Now on `CLOCK_MONOTONIC`, since its (unspecified) origin: only for systemd's
/// `MONOTONIC_USEC=` (sd_notify's reload protocol compares it with its own clock).
pub fn monotonic() -> Duration {
    let ts = nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC)
        .expect("CLOCK_MONOTONIC is available on every Linux");
    Duration::new(ts.tv_sec() as u64, ts.tv_nsec() as u32)
}

/// Now on `CLOCK_REALTIME`, since the Unix epoch.
pub fn realtime() -> Duration {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
}

/// `now` as an RFC 3339 UTC timestamp (for `history`), without a date crate.
pub fn rfc3339_utc(since_epoch: Duration) -> String {
    let secs = since_epoch.as_secs() as i64;
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    let (h, m, s) = (rem / 3600, (rem % 3600) / 60, rem % 60);
    // Civil-from-days (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let mo = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(mo <= 2);
    format!("{y:04}-{mo:02}-{d:02}T{h:02}:{m:02}:{s:02}Z")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_known_instants() {
        assert_eq!(rfc3339_utc(Duration::from_secs(0)), "1970-01-01T00:00:00Z");
        assert_eq!(
            rfc3339_utc(Duration::from_secs(1_796_000_000)),
            "2026-11-30T00:53:20Z"
        );
    }

    #[test]
    fn boottime_moves_forward() {
        let a = now();
        let b = now();
        assert!(b >= a);
    }
}
