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

/// Why [`parse_timestamp`] refused a timestamp (Patroni's `parse_schedule`
/// answers 400 for the first, 422 for the second).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TimestampError {
    /// A date and time without a UTC offset: ambiguous, so refused.
    NoTimezone,
    /// Not an ISO 8601 / RFC 3339 date and time.
    Unparsable,
}

/// An ISO 8601 / RFC 3339 timestamp with its UTC offset (`2026-05-01T10:00:00+02:00`,
/// `2026-05-01 10:00:00.5Z`, `...+0200`, `...+02`; `T` or a space between date and
/// time; seconds and fractions optional), as seconds since the Unix epoch. Pure:
/// no clock is read. What patronictl sends is Python's `isoformat()`.
pub fn parse_timestamp(text: &str) -> Result<Duration, TimestampError> {
    use TimestampError::*;
    let s = text.trim();
    let b = s.as_bytes();
    let num = |from: usize, len: usize| -> Result<i64, TimestampError> {
        let part = s.get(from..from + len).ok_or(Unparsable)?;
        if part.bytes().all(|c| c.is_ascii_digit()) {
            part.parse().map_err(|_| Unparsable)
        } else {
            Err(Unparsable)
        }
    };
    // YYYY-MM-DD[T ]HH:MM
    if b.len() < 16
        || b[4] != b'-'
        || b[7] != b'-'
        || !matches!(b[10], b'T' | b't' | b' ')
        || b[13] != b':'
    {
        return Err(Unparsable);
    }
    let (y, mo, d, h, mi) = (num(0, 4)?, num(5, 2)?, num(8, 2)?, num(11, 2)?, num(14, 2)?);
    let mut i = 16;
    let mut sec = 0;
    let mut nanos = 0u32;
    if b.get(i) == Some(&b':') {
        sec = num(i + 1, 2)?;
        i += 3;
        if matches!(b.get(i), Some(b'.' | b',')) {
            i += 1;
            let start = i;
            while b.get(i).is_some_and(u8::is_ascii_digit) {
                i += 1;
            }
            let digits = &s[start..i];
            if digits.is_empty() {
                return Err(Unparsable);
            }
            // Digit by digit, no String: `/metrics` reads PostgreSQL's start time
            // with this on every scrape, which must not allocate.
            let mut scale = 100_000_000u32;
            for c in digits.bytes().take(9) {
                nanos += u32::from(c - b'0') * scale;
                scale /= 10;
            }
        }
    }
    let offset = match &s[i..] {
        "" => return Err(NoTimezone),
        "Z" | "z" => 0,
        rest => {
            let sign = match rest.as_bytes()[0] {
                b'+' => 1,
                b'-' => -1,
                _ => return Err(Unparsable),
            };
            let r = &rest[1..];
            if !r.is_ascii() {
                return Err(Unparsable);
            }
            let (oh, om) = match r.len() {
                2 => (r, "00"),
                4 => (&r[..2], &r[2..]),
                5 if r.as_bytes()[2] == b':' => (&r[..2], &r[3..]),
                _ => return Err(Unparsable),
            };
            let parse = |x: &str| -> Result<i64, TimestampError> {
                if x.bytes().all(|c| c.is_ascii_digit()) {
                    x.parse().map_err(|_| Unparsable)
                } else {
                    Err(Unparsable)
                }
            };
            let (oh, om) = (parse(oh)?, parse(om)?);
            if oh > 23 || om > 59 {
                return Err(Unparsable);
            }
            sign * (oh * 3600 + om * 60)
        }
    };
    let leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    let month_days = [
        31,
        if leap { 29 } else { 28 },
        31,
        30,
        31,
        30,
        31,
        31,
        30,
        31,
        30,
        31,
    ];
    if !(1..=12).contains(&mo) || d < 1 || h > 23 || mi > 59 || sec > 60 {
        return Err(Unparsable);
    }
    // INVARIANT: 1 <= mo <= 12, checked just above.
    if d > month_days[(mo - 1) as usize] {
        return Err(Unparsable);
    }
    // Days-from-civil (Howard Hinnant's algorithm), the inverse of `rfc3339_utc`'s.
    let yy = if mo <= 2 { y - 1 } else { y };
    let era = yy.div_euclid(400);
    let yoe = yy.rem_euclid(400);
    let mp = (mo + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let secs = days * 86_400 + h * 3600 + mi * 60 + sec - offset;
    let secs = u64::try_from(secs).map_err(|_| Unparsable)?;
    Ok(Duration::new(secs, nanos))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_with_an_offset_parse_and_without_one_are_refused() {
        let want = Duration::from_secs(1_796_000_000);
        for s in [
            "2026-11-30T00:53:20Z",
            "2026-11-30T00:53:20+00:00",
            "2026-11-30 02:53:20+02:00",
            "2026-11-30T02:53:20+0200",
            "2026-11-30T02:53:20+02",
            "2026-11-29T23:53:20-01:00",
            "2026-11-30T00:53Z",
        ] {
            let got = parse_timestamp(s);
            let want = if s.ends_with("53Z") {
                Duration::from_secs(1_796_000_000 - 20)
            } else {
                want
            };
            assert_eq!(got, Ok(want), "{s}");
        }
        assert_eq!(
            parse_timestamp("2026-11-30T00:53:20.25Z"),
            Ok(want + Duration::from_millis(250))
        );
        // Round trip with the formatter.
        assert_eq!(parse_timestamp(&rfc3339_utc(want)), Ok(want));
        assert_eq!(
            parse_timestamp("2024-02-29T00:00:00Z"),
            Ok(Duration::from_secs(1_709_164_800))
        );
        assert_eq!(
            parse_timestamp("2026-11-30T00:53:20"),
            Err(TimestampError::NoTimezone)
        );
        for bad in [
            "",
            "tomorrow",
            "2026-13-01T00:00:00Z",
            "2025-02-29T00:00:00Z",
            "2026-11-30T24:00:00Z",
            "2026-11-30T00:00:00+25:00",
            "2026-11-30T00:00:00 UTC",
            "1969-12-31T23:59:59Z",
            "2026-11-30T00:00:00.Z",
            "+2026-11-30T00:00:00Z",
            "2026-11-30T00:00:00+aé1",
            "2026-11-30T00:00:00é",
        ] {
            assert_eq!(
                parse_timestamp(bad),
                Err(TimestampError::Unparsable),
                "{bad}"
            );
        }
    }

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
