//! Certificate expiry, seen before it bites: the `notAfter` of every certificate
//! tenure already loads (the API's own, the etcd client's, each PostgreSQL role's
//! `sslcert`), the `tenure_tls_cert_expiry_timestamp_seconds` gauge's values, and
//! the `CERT_EXPIRING` / `CERT_EXPIRED` alerts at start-up, on reload and once a day
//! while they hold.
//!
//! The DER reader is hand-written on purpose: tenure needs one field of a
//! certificate (the validity), the walk to it is five elements deep and about
//! sixty lines, and a general X.509 crate would be a new dependency for the
//! binary whose size and RSS issue 13 item 2 measures. The walk borrows from the
//! input and never allocates; bad input (truncated, wrong tags, lengths past the
//! end, garbage times) is an error naming what is wrong, never a panic (every
//! index is checked: `get`, `split_first`, `split_at_checked`).
//!
//! Owns: reading `notBefore`/`notAfter` from a DER certificate, the alert levels
//! and their 14-day threshold, when the next re-check is due, and the
//! `check-config` lines. Must never: read a file (the certificates come from where
//! `Config::load` already reads them, at start-up and reload: DESIGN's loop never
//! blocks on a file for this), read a clock (`now` is passed in, Unix seconds), or
//! decide anything about leadership.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use crate::events::Event;

/// A certificate expiring within this many seconds is warned about (14 days).
pub const WARN_WITHIN: i64 = 14 * 86_400;

/// How often an alert that holds is said again (a day).
pub const RECHECK_EVERY: i64 = 86_400;

// ---------------------------------------------------------------------------
// The DER walk
// ---------------------------------------------------------------------------

/// What is wrong with a certificate's DER. Display: the element and the problem.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DerError {
    /// The input ends before the element's tag or length.
    Truncated(&'static str),
    /// The element has another tag than the one X.509 puts there.
    Tag {
        what: &'static str,
        expected: u8,
        found: u8,
    },
    /// The element's length runs past the end of what holds it.
    PastEnd(&'static str),
    /// An indefinite length (BER, not DER) or one of more than four bytes.
    BadLength(&'static str),
    /// The time is not DER's `YYMMDDHHMMSSZ` / `YYYYMMDDHHMMSSZ`, or not a date.
    Time(&'static str, &'static str),
}

impl fmt::Display for DerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DerError::Truncated(w) => write!(f, "truncated: the input ends inside the {w}"),
            DerError::Tag {
                what,
                expected,
                found,
            } => write!(f, "the {what} has tag 0x{found:02x}, not 0x{expected:02x}"),
            DerError::PastEnd(w) => write!(f, "the {w}'s length runs past the end"),
            DerError::BadLength(w) => {
                write!(f, "the {w} has an indefinite or over-long length (not DER)")
            }
            DerError::Time(w, why) => write!(f, "the {w} is not a valid time: {why}"),
        }
    }
}

const SEQUENCE: u8 = 0x30;
const INTEGER: u8 = 0x02;
const VERSION: u8 = 0xa0; // [0] EXPLICIT
const UTC_TIME: u8 = 0x17;
const GENERALIZED_TIME: u8 = 0x18;

/// One DER element at the start of `b`: (tag, content, what follows it).
fn tlv<'a>(b: &'a [u8], what: &'static str) -> Result<(u8, &'a [u8], &'a [u8]), DerError> {
    let (&tag, b) = b.split_first().ok_or(DerError::Truncated(what))?;
    let (&l0, b) = b.split_first().ok_or(DerError::Truncated(what))?;
    let (len, b) = if l0 < 0x80 {
        (usize::from(l0), b)
    } else {
        let n = usize::from(l0 & 0x7f);
        if n == 0 || n > 4 {
            return Err(DerError::BadLength(what));
        }
        let (bytes, b) = b.split_at_checked(n).ok_or(DerError::Truncated(what))?;
        let len = bytes.iter().fold(0u64, |acc, &x| (acc << 8) | u64::from(x));
        (
            usize::try_from(len).map_err(|_| DerError::PastEnd(what))?,
            b,
        )
    };
    let (content, rest) = b.split_at_checked(len).ok_or(DerError::PastEnd(what))?;
    Ok((tag, content, rest))
}

/// [`tlv`], and the tag must be `expected`.
fn expect<'a>(
    b: &'a [u8],
    expected: u8,
    what: &'static str,
) -> Result<(&'a [u8], &'a [u8]), DerError> {
    let (tag, content, rest) = tlv(b, what)?;
    if tag != expected {
        return Err(DerError::Tag {
            what,
            expected,
            found: tag,
        });
    }
    Ok((content, rest))
}

/// The tbsCertificate's fields from `validity` on (RFC 5280 §4.1): the walk past
/// the version, serial number, signature algorithm and issuer.
fn from_validity(cert: &[u8]) -> Result<&[u8], DerError> {
    let (c, _) = expect(cert, SEQUENCE, "certificate")?;
    let (tbs, _) = expect(c, SEQUENCE, "tbsCertificate")?;
    let mut rest = tbs;
    if let Some(&VERSION) = rest.first() {
        rest = tlv(rest, "version")?.2;
    }
    let (_, rest) = expect(rest, INTEGER, "serialNumber")?;
    let (_, rest) = expect(rest, SEQUENCE, "signature algorithm")?;
    let (_, rest) = expect(rest, SEQUENCE, "issuer")?;
    Ok(rest)
}

/// `(notBefore, notAfter)` of a DER certificate, Unix seconds.
///
/// Certificate ::= SEQUENCE { tbsCertificate SEQUENCE { version [0] EXPLICIT
/// OPTIONAL, serialNumber INTEGER, signature AlgorithmIdentifier (SEQUENCE),
/// issuer Name (SEQUENCE), validity SEQUENCE { notBefore Time, notAfter Time },
/// ... }, ... } (RFC 5280 §4.1).
pub fn validity(cert: &[u8]) -> Result<(i64, i64), DerError> {
    let (v, _) = expect(from_validity(cert)?, SEQUENCE, "validity")?;
    let (t1, nb, r) = tlv(v, "notBefore")?;
    let (t2, na, _) = tlv(r, "notAfter")?;
    Ok((time(t1, nb, "notBefore")?, time(t2, na, "notAfter")?))
}

/// The subject's first commonName (OID 2.5.4.3), as its bytes: what PostgreSQL's
/// `clientcert=verify-full` compares with the connecting user's name (it reads
/// the first CN too). `Ok(None)`: the subject has none.
///
/// ... validity SEQUENCE, subject Name ::= SEQUENCE OF RelativeDistinguishedName
/// (SET OF AttributeTypeAndValue ::= SEQUENCE { type OID, value ANY }) ...
/// (RFC 5280 §4.1.2.6).
pub fn subject_cn(cert: &[u8]) -> Result<Option<&[u8]>, DerError> {
    /// UTF8String, NumericString, PrintableString, TeletexString, IA5String,
    /// UniversalString, BMPString.
    const CN_STRINGS: &[u8] = &[0x0c, 0x12, 0x13, 0x14, 0x16, 0x1c, 0x1e];
    const SET: u8 = 0x31;
    const OID: u8 = 0x06;
    const CN: &[u8] = &[0x55, 0x04, 0x03];
    let (_, rest) = expect(from_validity(cert)?, SEQUENCE, "validity")?;
    let (mut rdns, _) = expect(rest, SEQUENCE, "subject")?;
    while !rdns.is_empty() {
        let (mut rdn, next) = expect(rdns, SET, "subject's RDN")?;
        rdns = next;
        while !rdn.is_empty() {
            let (atv, next) = expect(rdn, SEQUENCE, "subject's attribute")?;
            rdn = next;
            let (oid, value) = expect(atv, OID, "subject attribute's type")?;
            if oid == CN {
                // A string type's content (UTF8String, PrintableString, ...), as
                // OpenSSL keeps it; any other type is not a name PostgreSQL and we
                // would read alike.
                let (tag, text, _) = tlv(value, "subject's commonName")?;
                if !CN_STRINGS.contains(&tag) {
                    return Err(DerError::Tag {
                        what: "subject's commonName",
                        expected: 0x0c,
                        found: tag,
                    });
                }
                return Ok(Some(text));
            }
        }
    }
    Ok(None)
}

/// The `notAfter` of a DER certificate, Unix seconds (the last second it is valid).
pub fn not_after(cert: &[u8]) -> Result<i64, DerError> {
    validity(cert).map(|(_, na)| na)
}

/// UTCTime (YYMMDDHHMMSSZ, 1950–2049, RFC 5280 §4.1.2.5.1) or GeneralizedTime
/// (YYYYMMDDHHMMSSZ, no fraction: §4.1.2.5.2) as Unix seconds.
fn time(tag: u8, s: &[u8], what: &'static str) -> Result<i64, DerError> {
    let bad = |why| DerError::Time(what, why);
    let digits = match tag {
        UTC_TIME => 12,
        GENERALIZED_TIME => 14,
        t => {
            return Err(DerError::Tag {
                what,
                expected: UTC_TIME,
                found: t,
            });
        }
    };
    let (last, body) = s.split_last().ok_or(bad("empty"))?;
    if *last != b'Z' || body.len() != digits {
        return Err(bad("not YYMMDDHHMMSSZ / YYYYMMDDHHMMSSZ"));
    }
    if !body.iter().all(u8::is_ascii_digit) {
        return Err(bad("a non-digit"));
    }
    // INVARIANT: `body` is `digits` ASCII digits, so every pair below exists.
    let pair = |i: usize| -> i64 {
        body.get(i..i + 2)
            .map_or(0, |p| i64::from(p[0] - b'0') * 10 + i64::from(p[1] - b'0'))
    };
    let (year, at) = if tag == UTC_TIME {
        let yy = pair(0);
        (if yy >= 50 { 1900 + yy } else { 2000 + yy }, 2)
    } else {
        (pair(0) * 100 + pair(2), 4)
    };
    let (mo, d, h, mi, se) = (
        pair(at),
        pair(at + 2),
        pair(at + 4),
        pair(at + 6),
        pair(at + 8),
    );
    if !(1..=12).contains(&mo) {
        return Err(bad("month out of range"));
    }
    if d < 1 || d > days_in_month(year, mo) {
        return Err(bad("day out of range"));
    }
    if h > 23 || mi > 59 || se > 59 {
        return Err(bad("hour, minute or second out of range"));
    }
    // Days from civil (Howard Hinnant's algorithm).
    let y = if mo <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (mo + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Ok(days * 86_400 + h * 3600 + mi * 60 + se)
}

fn days_in_month(year: i64, month: i64) -> i64 {
    match month {
        2 if year % 4 == 0 && (year % 100 != 0 || year % 400 == 0) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

// ---------------------------------------------------------------------------
// What the agent keeps, and what operators see
// ---------------------------------------------------------------------------

/// Which certificate: the label of the gauge and of the alert.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum CertRole {
    /// `[api] certfile`, the REST API's own (leaf) certificate.
    Api,
    /// `[etcd] cert`, the etcd client's (leaf) certificate.
    Etcd,
    /// `postgresql.authentication.replication.sslcert`.
    Replication,
    /// `postgresql.authentication.rewind.sslcert`.
    Rewind,
}

impl CertRole {
    /// Every role, in the gauge's order.
    pub const ALL: [CertRole; 4] = [
        CertRole::Api,
        CertRole::Etcd,
        CertRole::Replication,
        CertRole::Rewind,
    ];

    /// The `cert` label.
    pub fn name(self) -> &'static str {
        match self {
            CertRole::Api => "api",
            CertRole::Etcd => "etcd",
            CertRole::Replication => "replication",
            CertRole::Rewind => "rewind",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// One certificate's `notAfter`, read where the file was already loaded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CertExpiry {
    pub role: CertRole,
    pub file: PathBuf,
    /// Unix seconds: the last second the certificate is valid.
    pub not_after: i64,
}

/// `notAfter` per role for `/metrics` (Copy, fixed size: a scrape reads it without
/// allocating). `None`: no such certificate is configured.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Gauges(pub [Option<i64>; 4]);

impl Gauges {
    /// The earliest `notAfter` per role of `certs`.
    pub fn of(certs: &[CertExpiry]) -> Gauges {
        let mut g = [None; 4];
        for c in certs {
            let slot: &mut Option<i64> = &mut g[c.role.index()];
            *slot = Some(slot.map_or(c.not_after, |v: i64| v.min(c.not_after)));
        }
        Gauges(g)
    }

    /// The role's `notAfter`, if it has a certificate.
    pub fn get(&self, role: CertRole) -> Option<i64> {
        self.0[role.index()]
    }
}

/// How close a certificate is to its end at some instant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Level {
    /// More than [`WARN_WITHIN`] left.
    Fine,
    /// Valid, but for [`WARN_WITHIN`] or less: `CERT_EXPIRING` (warning).
    Expiring,
    /// Past its `notAfter`: `CERT_EXPIRED` (err).
    Expired,
}

/// The level of a certificate valid through `not_after` at `now` (Unix seconds).
/// A certificate is valid through its `notAfter` second (RFC 5280 §4.1.2.5).
pub fn level(not_after: i64, now: i64) -> Level {
    if now > not_after {
        Level::Expired
    } else if not_after.saturating_sub(now) <= WARN_WITHIN {
        Level::Expiring
    } else {
        Level::Fine
    }
}

/// An RFC 3339 UTC date of Unix seconds (0 for a date before 1970).
fn date(unix: i64) -> String {
    crate::clock::rfc3339_utc(Duration::from_secs(u64::try_from(unix).unwrap_or(0)))
}

/// The alert for `c` at `now`, if its level calls for one.
pub fn alert(c: &CertExpiry, now: i64) -> Option<Event> {
    let cert = c.role.name();
    let file = c.file.display().to_string();
    let not_after = date(c.not_after);
    match level(c.not_after, now) {
        Level::Fine => None,
        Level::Expiring => Some(Event::CertExpiring {
            cert,
            file,
            not_after,
            days_left: (c.not_after - now) / 86_400,
        }),
        Level::Expired => Some(Event::CertExpired {
            cert,
            file,
            not_after,
        }),
    }
}

/// The certificates the agent watches and when it looks at them next.
#[derive(Clone, Debug, Default)]
pub struct CertWatch {
    certs: Vec<CertExpiry>,
    /// Unix seconds of the next check; `None`: at the next iteration (start-up,
    /// reload).
    next: Option<i64>,
}

impl CertWatch {
    /// Watch `certs` (start-up, reload): checked at the next [`CertWatch::due`].
    pub fn new(certs: &[CertExpiry]) -> CertWatch {
        CertWatch {
            certs: certs.to_vec(),
            next: None,
        }
    }

    /// The gauge values.
    pub fn gauges(&self) -> Gauges {
        Gauges::of(&self.certs)
    }

    /// The alerts due at `now`, if a check is due; then the next check is set a
    /// day on, or sooner where a certificate crosses into a level (14 days before
    /// its end, its end), so an expiry is said when it happens. Pure: `now` and the
    /// stored `notAfter`s in, events out. Nothing is due between checks, which
    /// costs one comparison and no allocation.
    pub fn due(&mut self, now: i64) -> Vec<Event> {
        if self.next.is_some_and(|n| now < n) {
            return Vec::new();
        }
        let mut next = now.saturating_add(RECHECK_EVERY);
        for c in &self.certs {
            for t in [
                c.not_after.saturating_sub(WARN_WITHIN),
                c.not_after.saturating_add(1),
            ] {
                if t > now {
                    next = next.min(t);
                }
            }
        }
        self.next = Some(next);
        self.certs.iter().filter_map(|c| alert(c, now)).collect()
    }

    /// [`CertWatch::due`], each event emitted (the loop's call, once per iteration).
    pub fn check(&mut self, now: i64) {
        for ev in self.due(now) {
            crate::events::emit(&ev);
        }
    }
}

/// `tenure check-config`'s lines: each certificate's `notAfter` and what is left.
pub fn report(certs: &[CertExpiry], now: i64) -> String {
    if certs.is_empty() {
        return String::new();
    }
    let mut out = String::from("\ncertificates (notAfter):\n");
    for c in certs {
        let left = match level(c.not_after, now) {
            Level::Expired => "EXPIRED".to_string(),
            l => {
                let days = (c.not_after - now) / 86_400;
                let warn = if l == Level::Expiring {
                    " (warned about: 14 days or less)"
                } else {
                    ""
                };
                format!("{days} days left{warn}")
            }
        };
        out += &format!(
            "  {:<12} {}  {}  {}\n",
            c.role.name(),
            date(c.not_after),
            left,
            c.file.display()
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(tag: u8, s: &str) -> Result<i64, DerError> {
        time(tag, s.as_bytes(), "notAfter")
    }

    #[test]
    fn times_utc_and_generalized() {
        assert_eq!(t(UTC_TIME, "700101000000Z"), Ok(0));
        assert_eq!(t(UTC_TIME, "260101000000Z"), Ok(1_767_225_600));
        assert_eq!(t(GENERALIZED_TIME, "20260101000000Z"), Ok(1_767_225_600));
        // UTCTime's window: 50..99 is 19YY, 00..49 is 20YY.
        assert_eq!(t(UTC_TIME, "491231235959Z"), Ok(2_524_607_999));
        assert_eq!(t(UTC_TIME, "500101000000Z"), Ok(-631_152_000));
        assert_eq!(t(GENERALIZED_TIME, "20500101000000Z"), Ok(2_524_608_000));
        assert_eq!(t(GENERALIZED_TIME, "20240229120000Z"), Ok(1_709_208_000));
    }

    #[test]
    fn garbage_times_are_named() {
        for (tag, s) in [
            (UTC_TIME, "26010100000Z"),                 // a digit short
            (UTC_TIME, "2601010000000"),                // no Z
            (UTC_TIME, ""),                             // empty
            (GENERALIZED_TIME, "20261301000000Z"),      // month 13
            (GENERALIZED_TIME, "20230229000000Z"),      // not a leap year
            (GENERALIZED_TIME, "20260431000000Z"),      // April 31
            (GENERALIZED_TIME, "20260101240000Z"),      // hour 24
            (GENERALIZED_TIME, "20260101000060Z"),      // second 60
            (GENERALIZED_TIME, "2026010100000.Z"),      // not a digit
            (GENERALIZED_TIME, "20260101000000.5Z"),    // a fraction
            (GENERALIZED_TIME, "2026\u{e9}101000000Z"), // non-ASCII
            // Twelve bytes with a multi-byte character across a digit pair: the
            // reader this replaces (config/secrets.rs) sliced a `str` there and
            // panicked, at start-up or on a reload.
            (UTC_TIME, "1\u{e9}010100000Z"),
        ] {
            let e = t(tag, s).expect_err(s);
            assert!(matches!(e, DerError::Time("notAfter", _)), "{s}: {e:?}");
        }
        assert!(matches!(
            t(0x04, "260101000000Z"),
            Err(DerError::Tag { found: 0x04, .. })
        ));
    }

    #[test]
    fn malformed_structure_is_named() {
        assert_eq!(validity(&[]), Err(DerError::Truncated("certificate")));
        assert_eq!(
            validity(&[0x30, 0x82, 0xff]),
            Err(DerError::Truncated("certificate"))
        );
        assert_eq!(
            validity(&[0x30, 0x05, 0x30]),
            Err(DerError::PastEnd("certificate"))
        );
        assert_eq!(
            validity(&[0x30, 0x80, 0x00, 0x00]),
            Err(DerError::BadLength("certificate"))
        );
        assert_eq!(
            validity(&[0x30, 0x85, 1, 0, 0, 0, 0]),
            Err(DerError::BadLength("certificate"))
        );
        assert_eq!(
            validity(&[0x31, 0x00]),
            Err(DerError::Tag {
                what: "certificate",
                expected: 0x30,
                found: 0x31
            })
        );
        // tbs { serial 1 } and nothing more: the signature algorithm is missing.
        assert_eq!(
            validity(&[0x30, 0x05, 0x30, 0x03, 0x02, 0x01, 0x01]),
            Err(DerError::Truncated("signature algorithm"))
        );
        let e = DerError::Tag {
            what: "validity",
            expected: 0x30,
            found: 0x02,
        };
        assert_eq!(e.to_string(), "the validity has tag 0x02, not 0x30");
    }

    #[test]
    fn levels_at_their_thresholds() {
        let end = 2_000_000_000;
        assert_eq!(level(end, end - WARN_WITHIN - 1), Level::Fine);
        assert_eq!(level(end, end - WARN_WITHIN), Level::Expiring);
        assert_eq!(level(end, end), Level::Expiring, "valid through notAfter");
        assert_eq!(level(end, end + 1), Level::Expired);
        assert_eq!(level(i64::MIN, i64::MAX), Level::Expired);
        assert_eq!(level(i64::MAX, i64::MIN), Level::Fine);
    }

    fn rec(role: CertRole, not_after: i64) -> CertExpiry {
        CertExpiry {
            role,
            file: PathBuf::from(format!("/etc/tenure/{}.pem", role.name())),
            not_after,
        }
    }

    #[test]
    fn alerts_name_the_role_file_and_date() {
        let now = 1_767_225_600; // 2026-01-01T00:00:00Z
        let soon = rec(CertRole::Api, now + 3 * 86_400 + 5);
        let Some(Event::CertExpiring {
            cert,
            file,
            not_after,
            days_left,
        }) = alert(&soon, now)
        else {
            panic!("expected CERT_EXPIRING");
        };
        assert_eq!(
            (cert, file.as_str(), not_after.as_str(), days_left),
            ("api", "/etc/tenure/api.pem", "2026-01-04T00:00:05Z", 3)
        );
        let gone = rec(CertRole::Rewind, now - 1);
        let ev = alert(&gone, now).expect("expired");
        assert_eq!(ev.name(), "CERT_EXPIRED");
        assert_eq!(ev.severity(), crate::events::Severity::Err);
        let line = ev.line("demo", "pg1");
        assert!(
            line.contains("cert=rewind")
                && line.contains("file=/etc/tenure/rewind.pem")
                && line.contains("not_after=2025-12-31T23:59:59Z"),
            "{line}"
        );
        assert_eq!(
            alert(&rec(CertRole::Etcd, now + WARN_WITHIN + 1), now),
            None
        );
    }

    #[test]
    fn rechecks_daily_and_at_each_crossing_never_in_between() {
        let now = 1_000_000_000;
        // Warned about at 20 days - 14 days = in 6 days; fine until then.
        let c = rec(CertRole::Etcd, now + 20 * 86_400);
        let mut w = CertWatch::new(std::slice::from_ref(&c));
        assert!(w.due(now).is_empty(), "fine at start-up: no alert");
        assert!(w.due(now + 1).is_empty() && w.next == Some(now + 86_400));
        // Day by day until the 14-day line, which is a check of its own.
        let mut at = now;
        let mut said = Vec::new();
        while at <= c.not_after + 3 * 86_400 {
            if let Some(n) = w.next {
                at = n;
            }
            for ev in w.due(at) {
                said.push((at, ev.name()));
            }
        }
        let warn_at = c.not_after - WARN_WITHIN;
        assert_eq!(said.first(), Some(&(warn_at, "CERT_EXPIRING")));
        // Once a day while it holds: 14 days, the last second included, then the
        // expiry at its second, then daily again.
        let expiring = said.iter().filter(|s| s.1 == "CERT_EXPIRING").count();
        assert_eq!(expiring, 15, "{said:?}");
        let first_expired = said.iter().find(|s| s.1 == "CERT_EXPIRED");
        assert_eq!(first_expired, Some(&(c.not_after + 1, "CERT_EXPIRED")));
        assert!(said.windows(2).all(|p| p[1].0 - p[0].0 <= RECHECK_EVERY));
        // A reload watches afresh: said again at once.
        let mut w = CertWatch::new(std::slice::from_ref(&c));
        assert_eq!(w.due(c.not_after + 10).len(), 1);
        assert!(w.due(c.not_after + 11).is_empty());
    }

    #[test]
    fn gauges_keep_the_earliest_per_role() {
        let g = Gauges::of(&[
            rec(CertRole::Replication, 50),
            rec(CertRole::Api, 30),
            rec(CertRole::Replication, 40),
        ]);
        assert_eq!(g.get(CertRole::Api), Some(30));
        assert_eq!(g.get(CertRole::Replication), Some(40));
        assert_eq!(g.get(CertRole::Etcd), None);
        assert_eq!(g.get(CertRole::Rewind), None);
    }

    #[test]
    fn check_config_lines() {
        let now = 1_767_225_600;
        let r = report(
            &[
                rec(CertRole::Api, now + 100 * 86_400),
                rec(CertRole::Etcd, now + 86_400),
                rec(CertRole::Rewind, now - 1),
            ],
            now,
        );
        assert!(
            r.contains("api")
                && r.contains("2026-04-11T00:00:00Z  100 days left  /etc/tenure/api.pem"),
            "{r}"
        );
        assert!(r.contains("1 days left (warned about"), "{r}");
        assert!(
            r.contains("2025-12-31T23:59:59Z  EXPIRED  /etc/tenure/rewind.pem"),
            "{r}"
        );
        assert_eq!(report(&[], now), "");
    }
}
