//! Events: the few things an on-call engineer must hear about, each one message
//! with a stable name first and a severity that fits (RFC 5424 levels, issue 10).
//!
//! A line reads `PROMOTED scope=demo member=pg2 epoch=73 after=7.30s`: the name,
//! then `key=value` fields (values with spaces or quotes are quoted). [`TABLE`] is
//! the one list of events, their severities and what the reader should do;
//! docs/events.md is checked against it by a test, so the two cannot drift.
//!
//! Owns: the event names, severities and their formatting, and the scope/member
//! stamped on each line. Must never: decide anything (the loop emits an event where
//! a transition is known), emit on every loop (events are edge-triggered: the
//! caller emits once per transition), or block (it hands the line to
//! [`crate::logging::emit`], which drops rather than waits).

use std::fmt::{self, Write as _};
use std::sync::OnceLock;
use std::time::Duration;

/// RFC 5424 severities (syslog's numbers; journald's `<N>` prefix uses the same).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Severity {
    Emerg = 0,
    Alert = 1,
    Crit = 2,
    Err = 3,
    Warning = 4,
    Notice = 5,
    Info = 6,
    Debug = 7,
}

impl Severity {
    /// The number (0 = emerg ... 7 = debug).
    pub fn code(self) -> u8 {
        self as u8
    }

    /// The name syslog and `journalctl -p` use.
    pub fn name(self) -> &'static str {
        match self {
            Severity::Emerg => "emerg",
            Severity::Alert => "alert",
            Severity::Crit => "crit",
            Severity::Err => "err",
            Severity::Warning => "warning",
            Severity::Notice => "notice",
            Severity::Info => "info",
            Severity::Debug => "debug",
        }
    }
}

/// One row of the event table: name, severity, and what the reader should do.
#[derive(Clone, Copy, Debug)]
pub struct Kind {
    pub name: &'static str,
    pub severity: Severity,
    pub action: &'static str,
}

/// Every event tenure emits. docs/events.md lists exactly these rows (checked by
/// `docs_table_matches` below).
pub const TABLE: &[Kind] = &[
    Kind {
        name: "PROMOTED",
        severity: Severity::Notice,
        action: "This node's PostgreSQL is the primary now (new epoch). Check that clients followed (health endpoints, proxy); find out why the old leader went.",
    },
    Kind {
        name: "FENCED",
        severity: Severity::Warning,
        action: "This node stopped its primary (lost or gave up the lease). Read `why`; the node rejoins as a replica on its own.",
    },
    Kind {
        name: "LEASE_LOST",
        severity: Severity::Crit,
        action: "The leader lost its lease (renewals failed until F - B, or the key was deleted or taken): a failover follows. Check etcd reachability from this host.",
    },
    Kind {
        name: "RENEWAL_LATE",
        severity: Severity::Crit,
        action: "A leader's confirmed renewal failed: if renewals keep failing until F - B it fences. Check etcd health and the network now.",
    },
    Kind {
        name: "FENCE_FAILED",
        severity: Severity::Alert,
        action: "PostgreSQL processes survived the fence or it overran its budget B: the watchdog/guardian resets the host at F. Inspect the host at once.",
    },
    Kind {
        name: "WATCHDOG_ARMED",
        severity: Severity::Info,
        action: "None: the device is armed with the read-back W while this node leads.",
    },
    Kind {
        name: "WATCHDOG_DISARMED",
        severity: Severity::Info,
        action: "None: disarmed after a complete fence or a clean stop.",
    },
    Kind {
        name: "WATCHDOG_RESET",
        severity: Severity::Alert,
        action: "The last reset of this host was the watchdog's: the agent froze or could not fence in time. Read the previous boot's log (journalctl -b -1).",
    },
    Kind {
        name: "GUARDIAN_STARTED",
        severity: Severity::Info,
        action: "None: the guardian process is this node's fence for a frozen agent.",
    },
    Kind {
        name: "GUARDIAN_LOST",
        severity: Severity::Crit,
        action: "The guardian died: this node has no fence for a frozen agent (in required mode it gives up leadership). Restart the agent.",
    },
    Kind {
        name: "DEADLINE_OVERRUN",
        severity: Severity::Warning,
        action: "An iteration or the loop's schedule ran over its budget (slow disk, CPU starvation, a stall). Repeated: check the host's load and swap.",
    },
    Kind {
        name: "ETCD_UNREACHABLE",
        severity: Severity::Err,
        action: "No etcd member answered this node. A leader fences after T s of this; check etcd and the network.",
    },
    Kind {
        name: "ETCD_BACK",
        severity: Severity::Notice,
        action: "None: etcd answers again (`after` says how long it did not).",
    },
    Kind {
        name: "CONFIG_REFUSED",
        severity: Severity::Err,
        action: "A configuration (SIGHUP reload or the config key) broke a rule and was refused; the last good one stays in force. Or one of the config key's cluster-wide PostgreSQL settings was refused on this node (PostgreSQL's parser, a library not installed here) and left out of `tenure.params.conf`; the others apply. Fix the value the message names.",
    },
    Kind {
        name: "ROLLBACK_MARKED",
        severity: Severity::Crit,
        action: "etcd went back in time (wiped or restored): no node leads until an operator checks and runs `tenure confirm-epoch`.",
    },
    Kind {
        name: "SYNC_DEGRADED",
        severity: Severity::Warning,
        action: "Synchronous mode has no synchronous standby: commits are acknowledged by the primary alone. Bring a replica back.",
    },
    Kind {
        name: "SWITCHOVER_REQUESTED",
        severity: Severity::Notice,
        action: "None if you asked for it: the leader hands over to `to` (or the best candidate).",
    },
    Kind {
        name: "SWITCHOVER_COMPLETED",
        severity: Severity::Notice,
        action: "None: this node took over after a clean hand-over.",
    },
    Kind {
        name: "LOG_DROPPED",
        severity: Severity::Warning,
        action: "Log lines were dropped because the log receiver did not keep up (the loop never waits for it). Check the syslog daemon/journald.",
    },
    Kind {
        name: "HOOK_FAILED",
        severity: Severity::Warning,
        action: "A hook exited non-zero or could not start: whatever it moves (VIP, pooler) may be stale. Check the command.",
    },
    Kind {
        name: "HOOK_KILLED",
        severity: Severity::Warning,
        action: "A hook ran past its deadline, or a newer event replaced it, and was killed (its process group). Make the hook faster or raise [hooks] timeout.",
    },
    Kind {
        name: "OLDER_AGENT",
        severity: Severity::Warning,
        action: "Member `other` runs a tenure agent older than the acquisition record (mixed versions, a rolling upgrade), or its member key was not written by a tenure agent (not a JSON object, or written by hand): every failover waits ttl + R after the win and no clean hand-over skips it, and one older agent's acquisition may still go unseen. Finish the upgrade, or delete a member key no agent wrote.",
    },
    Kind {
        name: "CERT_EXPIRING",
        severity: Severity::Warning,
        action: "A TLS certificate tenure uses (`cert`: api, etcd, replication or rewind) expires within 14 days (said at start-up, on reload and daily). Renew `file`, then reload (SIGHUP).",
    },
    Kind {
        name: "CERT_EXPIRED",
        severity: Severity::Err,
        action: "A TLS certificate tenure uses is past its notAfter: its handshakes fail (the API's clients, etcd, libpq for replication or pg_rewind). Renew `file` now, then reload (SIGHUP).",
    },
];

/// An event with its fields. Build one, then [`emit`] it.
#[derive(Clone, Debug, PartialEq)]
pub enum Event {
    Promoted {
        epoch: i64,
        /// Since this node first saw the leader key vacant, if it did.
        after: Option<Duration>,
    },
    Fenced {
        epoch: Option<i64>,
        took: Duration,
        why: String,
    },
    LeaseLost {
        epoch: i64,
        why: String,
    },
    RenewalLate {
        epoch: i64,
        why: String,
    },
    FenceFailed {
        outcome: String,
        took: Duration,
        budget: Duration,
    },
    WatchdogArmed {
        device: String,
        w: u32,
    },
    WatchdogDisarmed {
        device: String,
    },
    WatchdogReset {
        device: String,
        via: &'static str,
    },
    GuardianStarted {
        pid: u32,
    },
    GuardianLost {
        why: String,
    },
    DeadlineOverrun {
        what: &'static str,
        took: Duration,
        budget: Duration,
    },
    EtcdUnreachable {
        error: String,
    },
    EtcdBack {
        after: Duration,
    },
    ConfigRefused {
        source: &'static str,
        error: String,
    },
    RollbackMarked {
        reason: String,
    },
    SyncDegraded {
        why: String,
    },
    SwitchoverRequested {
        from: String,
        to: Option<String>,
        scheduled_at: Option<String>,
    },
    SwitchoverCompleted {
        from: String,
        epoch: i64,
    },
    LogDropped {
        count: u64,
    },
    HookFailed {
        action: &'static str,
        role: &'static str,
        why: String,
    },
    HookKilled {
        action: &'static str,
        role: &'static str,
        why: &'static str,
        after: Duration,
    },
    OlderAgent {
        other: String,
        version: String,
    },
    /// A certificate's `notAfter` is 14 days away or less (crate::certs).
    CertExpiring {
        cert: &'static str,
        file: String,
        /// RFC 3339 UTC.
        not_after: String,
        days_left: i64,
    },
    /// A certificate is past its `notAfter` (crate::certs).
    CertExpired {
        cert: &'static str,
        file: String,
        not_after: String,
    },
}

impl Event {
    /// The stable name, first on the line.
    pub fn name(&self) -> &'static str {
        match self {
            Event::Promoted { .. } => "PROMOTED",
            Event::Fenced { .. } => "FENCED",
            Event::LeaseLost { .. } => "LEASE_LOST",
            Event::RenewalLate { .. } => "RENEWAL_LATE",
            Event::FenceFailed { .. } => "FENCE_FAILED",
            Event::WatchdogArmed { .. } => "WATCHDOG_ARMED",
            Event::WatchdogDisarmed { .. } => "WATCHDOG_DISARMED",
            Event::WatchdogReset { .. } => "WATCHDOG_RESET",
            Event::GuardianStarted { .. } => "GUARDIAN_STARTED",
            Event::GuardianLost { .. } => "GUARDIAN_LOST",
            Event::DeadlineOverrun { .. } => "DEADLINE_OVERRUN",
            Event::EtcdUnreachable { .. } => "ETCD_UNREACHABLE",
            Event::EtcdBack { .. } => "ETCD_BACK",
            Event::ConfigRefused { .. } => "CONFIG_REFUSED",
            Event::RollbackMarked { .. } => "ROLLBACK_MARKED",
            Event::SyncDegraded { .. } => "SYNC_DEGRADED",
            Event::SwitchoverRequested { .. } => "SWITCHOVER_REQUESTED",
            Event::SwitchoverCompleted { .. } => "SWITCHOVER_COMPLETED",
            Event::LogDropped { .. } => "LOG_DROPPED",
            Event::HookFailed { .. } => "HOOK_FAILED",
            Event::HookKilled { .. } => "HOOK_KILLED",
            Event::OlderAgent { .. } => "OLDER_AGENT",
            Event::CertExpiring { .. } => "CERT_EXPIRING",
            Event::CertExpired { .. } => "CERT_EXPIRED",
        }
    }

    /// The severity [`TABLE`] gives this event's name.
    pub fn severity(&self) -> Severity {
        kind(self.name()).map_or(Severity::Warning, |k| k.severity)
    }

    /// The fields after scope and member, in a fixed order.
    fn fields(&self, f: &mut Fields) {
        match self {
            Event::Promoted { epoch, after } => {
                f.num("epoch", *epoch);
                if let Some(a) = after {
                    f.secs("after", *a);
                }
            }
            Event::Fenced { epoch, took, why } => {
                if let Some(e) = epoch {
                    f.num("epoch", *e);
                }
                f.secs("took", *took);
                f.text("why", why);
            }
            Event::LeaseLost { epoch, why } | Event::RenewalLate { epoch, why } => {
                f.num("epoch", *epoch);
                f.text("why", why);
            }
            Event::FenceFailed {
                outcome,
                took,
                budget,
            } => {
                f.text("outcome", outcome);
                f.secs("took", *took);
                f.secs("budget", *budget);
            }
            Event::WatchdogArmed { device, w } => {
                f.text("device", device);
                f.num("w", i64::from(*w));
            }
            Event::WatchdogDisarmed { device } => f.text("device", device),
            Event::WatchdogReset { device, via } => {
                f.text("device", device);
                f.text("via", via);
            }
            Event::GuardianStarted { pid } => f.num("pid", i64::from(*pid)),
            Event::GuardianLost { why } | Event::SyncDegraded { why } => f.text("why", why),
            Event::DeadlineOverrun { what, took, budget } => {
                f.text("what", what);
                f.secs("took", *took);
                f.secs("budget", *budget);
            }
            Event::EtcdUnreachable { error } => f.text("error", error),
            Event::EtcdBack { after } => f.secs("after", *after),
            Event::ConfigRefused { source, error } => {
                f.text("source", source);
                f.text("error", error);
            }
            Event::RollbackMarked { reason } => f.text("reason", reason),
            Event::SwitchoverRequested {
                from,
                to,
                scheduled_at,
            } => {
                f.text("from", from);
                f.text("to", to.as_deref().unwrap_or("any"));
                if let Some(at) = scheduled_at {
                    f.text("scheduled_at", at);
                }
            }
            Event::SwitchoverCompleted { from, epoch } => {
                f.text("from", from);
                f.num("epoch", *epoch);
            }
            Event::LogDropped { count } => {
                f.num("count", i64::try_from(*count).unwrap_or(i64::MAX))
            }
            Event::HookFailed { action, role, why } => {
                f.text("action", action);
                f.text("role", role);
                f.text("why", why);
            }
            Event::HookKilled {
                action,
                role,
                why,
                after,
            } => {
                f.text("action", action);
                f.text("role", role);
                f.text("why", why);
                f.secs("after", *after);
            }
            Event::OlderAgent { other, version } => {
                f.text("other", other);
                f.text("version", version);
            }
            Event::CertExpiring {
                cert,
                file,
                not_after,
                days_left,
            } => {
                f.text("cert", cert);
                f.text("file", file);
                f.text("not_after", not_after);
                f.num("days_left", *days_left);
            }
            Event::CertExpired {
                cert,
                file,
                not_after,
            } => {
                f.text("cert", cert);
                f.text("file", file);
                f.text("not_after", not_after);
            }
        }
    }

    /// The whole message: `NAME scope=.. member=.. fields..`.
    pub fn line(&self, scope: &str, member: &str) -> String {
        let mut f = Fields(String::with_capacity(96));
        f.0.push_str(self.name());
        f.text("scope", scope);
        f.text("member", member);
        self.fields(&mut f);
        f.0
    }
}

/// The table row for `name`.
pub fn kind(name: &str) -> Option<&'static Kind> {
    TABLE.iter().find(|k| k.name == name)
}

/// A line under construction.
struct Fields(String);

impl Fields {
    fn num(&mut self, k: &str, v: i64) {
        let _ = write!(self.0, " {k}={v}");
    }

    fn secs(&mut self, k: &str, d: Duration) {
        let _ = write!(self.0, " {k}={:.2}s", d.as_secs_f64());
    }

    /// A bare value when it has no space, quote, `=` or control character;
    /// otherwise quoted with `\"` and `\\` escaped and controls as spaces, so a
    /// line stays one line whatever an error message holds.
    fn text(&mut self, k: &str, v: &str) {
        let plain = !v.is_empty()
            && !v
                .chars()
                .any(|c| c == ' ' || c == '"' || c == '=' || c == '\\' || c.is_control());
        if plain {
            let _ = write!(self.0, " {k}={v}");
            return;
        }
        let _ = write!(self.0, " {k}=\"");
        for c in v.chars() {
            match c {
                '"' => self.0.push_str("\\\""),
                '\\' => self.0.push_str("\\\\"),
                c if c.is_control() => self.0.push(' '),
                c => self.0.push(c),
            }
        }
        self.0.push('"');
    }
}

impl fmt::Display for Severity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Scope and member, set once at start-up ([`set_identity`]).
static IDENTITY: OnceLock<(String, String)> = OnceLock::new();

/// Stamp every event of this process with `scope` and `member`. Only the first call
/// counts (the name and scope cannot change at run time).
pub fn set_identity(scope: &str, member: &str) {
    let _ = IDENTITY.set((scope.to_string(), member.to_string()));
}

/// Emit `ev` once, at its severity, wherever the logger sends lines.
pub fn emit(ev: &Event) {
    let (scope, member) = IDENTITY
        .get()
        .map_or(("-", "-"), |(s, m)| (s.as_str(), m.as_str()));
    crate::logging::emit(ev.severity(), &ev.line(scope, member));
}

/// The Markdown rows of [`TABLE`] as docs/events.md has them.
pub fn markdown_rows() -> String {
    let mut s = String::new();
    for k in TABLE {
        let _ = writeln!(
            s,
            "| `{}` | {} ({}) | {} |",
            k.name,
            k.severity.name(),
            k.severity.code(),
            k.action
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One of every variant (the match in `name` makes a new variant a compile
    /// error there; this list is checked against the table below).
    fn samples() -> Vec<Event> {
        let d = Duration::from_millis(7300);
        vec![
            Event::Promoted {
                epoch: 73,
                after: Some(d),
            },
            Event::Fenced {
                epoch: Some(73),
                took: d,
                why: "lease lost".into(),
            },
            Event::LeaseLost {
                epoch: 73,
                why: "x".into(),
            },
            Event::RenewalLate {
                epoch: 73,
                why: "x".into(),
            },
            Event::FenceFailed {
                outcome: "x".into(),
                took: d,
                budget: d,
            },
            Event::WatchdogArmed {
                device: "/dev/watchdog".into(),
                w: 13,
            },
            Event::WatchdogDisarmed {
                device: "/dev/watchdog".into(),
            },
            Event::WatchdogReset {
                device: "/dev/watchdog".into(),
                via: "WDIOC_GETBOOTSTATUS",
            },
            Event::GuardianStarted { pid: 1 },
            Event::GuardianLost { why: "x".into() },
            Event::DeadlineOverrun {
                what: "iteration",
                took: d,
                budget: d,
            },
            Event::EtcdUnreachable { error: "x".into() },
            Event::EtcdBack { after: d },
            Event::ConfigRefused {
                source: "reload",
                error: "x".into(),
            },
            Event::RollbackMarked { reason: "x".into() },
            Event::SyncDegraded { why: "x".into() },
            Event::SwitchoverRequested {
                from: "pg1".into(),
                to: None,
                scheduled_at: None,
            },
            Event::SwitchoverCompleted {
                from: "pg1".into(),
                epoch: 1,
            },
            Event::LogDropped { count: 3 },
            Event::HookFailed {
                action: "on_start",
                role: "replica",
                why: "x".into(),
            },
            Event::HookKilled {
                action: "on_start",
                role: "replica",
                why: "deadline",
                after: d,
            },
            Event::OlderAgent {
                other: "pg3".into(),
                version: "0.1.0".into(),
            },
            Event::CertExpiring {
                cert: "api",
                file: "/etc/tenure/api.pem".into(),
                not_after: "2026-01-01T00:00:00Z".into(),
                days_left: 3,
            },
            Event::CertExpired {
                cert: "etcd",
                file: "/etc/tenure/etcd.pem".into(),
                not_after: "2026-01-01T00:00:00Z".into(),
            },
        ]
    }

    #[test]
    fn every_event_has_one_table_row_and_every_row_an_event() {
        let names: Vec<&str> = samples().iter().map(Event::name).collect();
        for n in &names {
            assert_eq!(
                TABLE.iter().filter(|k| k.name == *n).count(),
                1,
                "{n} must have exactly one row in TABLE"
            );
        }
        for k in TABLE {
            assert!(names.contains(&k.name), "TABLE row {} has no event", k.name);
        }
    }

    #[test]
    fn severities_follow_the_issue() {
        let sev = |n: &str| kind(n).map(|k| k.severity);
        assert_eq!(sev("PROMOTED"), Some(Severity::Notice));
        assert_eq!(sev("FENCED"), Some(Severity::Warning));
        assert_eq!(sev("LEASE_LOST"), Some(Severity::Crit));
        assert_eq!(sev("RENEWAL_LATE"), Some(Severity::Crit));
        assert_eq!(sev("FENCE_FAILED"), Some(Severity::Alert));
        assert_eq!(sev("WATCHDOG_ARMED"), Some(Severity::Info));
        assert_eq!(sev("WATCHDOG_RESET"), Some(Severity::Alert));
        assert_eq!(sev("GUARDIAN_STARTED"), Some(Severity::Info));
        assert_eq!(sev("GUARDIAN_LOST"), Some(Severity::Crit));
        assert_eq!(sev("DEADLINE_OVERRUN"), Some(Severity::Warning));
        assert_eq!(sev("ETCD_UNREACHABLE"), Some(Severity::Err));
        assert_eq!(sev("ETCD_BACK"), Some(Severity::Notice));
        assert_eq!(sev("CONFIG_REFUSED"), Some(Severity::Err));
        assert_eq!(sev("ROLLBACK_MARKED"), Some(Severity::Crit));
        assert_eq!(sev("SYNC_DEGRADED"), Some(Severity::Warning));
        assert_eq!(sev("SWITCHOVER_REQUESTED"), Some(Severity::Notice));
        assert_eq!(sev("SWITCHOVER_COMPLETED"), Some(Severity::Notice));
        assert_eq!(Severity::Alert.code(), 1);
        assert_eq!(Severity::Notice.code(), 5);
    }

    #[test]
    fn a_line_is_the_name_then_fields() {
        let ev = Event::Promoted {
            epoch: 73,
            after: Some(Duration::from_millis(7300)),
        };
        assert_eq!(
            ev.line("demo", "pg2"),
            "PROMOTED scope=demo member=pg2 epoch=73 after=7.30s"
        );
        let ev = Event::EtcdUnreachable {
            error: "status: Unavailable, \"no leader\"\nmore".into(),
        };
        assert_eq!(
            ev.line("demo", "pg1"),
            "ETCD_UNREACHABLE scope=demo member=pg1 error=\"status: Unavailable, \\\"no \
             leader\\\" more\""
        );
        let ev = Event::SwitchoverRequested {
            from: "pg1".into(),
            to: Some("pg2".into()),
            scheduled_at: None,
        };
        assert_eq!(
            ev.line("s", "pg1"),
            "SWITCHOVER_REQUESTED scope=s member=pg1 from=pg1 to=pg2"
        );
        assert_eq!(
            Event::Fenced {
                epoch: None,
                took: Duration::ZERO,
                why: String::new()
            }
            .line("a", "b"),
            "FENCED scope=a member=b took=0.00s why=\"\""
        );
    }

    #[test]
    fn docs_table_matches() {
        let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/events.md"))
            .expect("docs/events.md");
        let rows = markdown_rows();
        assert!(
            doc.contains(&rows),
            "docs/events.md must contain the table rows generated from events::TABLE, \
             exactly:\n{rows}"
        );
    }
}
