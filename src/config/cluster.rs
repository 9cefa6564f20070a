//! The cluster-wide `config` key as a whole (DESIGN §3 "Configuration", §5 "Every
//! timing change is checked against what is armed"): what each member publishes of
//! its own timing (`W`, `M`, `B`, `P`), the check of a new value against every
//! member before it is stored, and Patroni's JSON merge patch.
//!
//! Owns: the member JSON's `timing` object, [`check_members`], [`merge_patch`], the
//! form of `postgresql.parameters` ([`parse_pg_parameters`]).
//! Must never: do I/O, adjust a value, or accept a value that breaks S6 for any
//! member that published its timing (the error names the member, the inequality and
//! the numbers).

use std::time::Duration;

use serde_json::{Map, Value, json};

use super::{Config, TimingConfig, show_d, validate_timing, watchdog_range};

/// What a member publishes of the values S6 is checked with on its side (member
/// JSON `timing`): every `W` in force (an armed device's read-back, systemd's
/// `WATCHDOG_USEC`), whether it will arm a device not opened yet (then some
/// whole-second `W` must exist for the ttl), its `M`, `B` and `P`, and the TTL of the
/// leader lease it holds.
#[derive(Clone, Debug, PartialEq)]
pub struct PublishedTiming {
    pub watchdogs: Vec<u32>,
    pub arms_watchdog: bool,
    pub safety_margin: Duration,
    pub demote_budget: Duration,
    pub iteration_budget: Duration,
    /// `P` is the default `loop_wait - retry_timeout`, and follows a new
    /// `loop_wait`/`retry_timeout` (as [`Config::merge_dynamic`] does).
    pub iteration_budget_default: bool,
    pub leader_ttl: Option<u32>,
}

fn secs(d: Duration) -> Value {
    json!(d.as_secs_f64())
}

impl PublishedTiming {
    /// The member JSON's `timing` object (`leader_ttl` is published on its own).
    pub fn to_json(&self) -> Value {
        json!({
            "W": self.watchdogs,
            "arms_watchdog": self.arms_watchdog,
            "M": secs(self.safety_margin),
            "B": secs(self.demote_budget),
            "P": secs(self.iteration_budget),
            "P_default": self.iteration_budget_default,
        })
    }

    /// Read a member JSON (the whole value). `Ok(None)`: no `timing` published (an
    /// older agent): nothing to check against. `Err`: garbage, which names the field.
    pub fn from_member_json(raw: &str) -> Result<Option<PublishedTiming>, String> {
        let v: Value = serde_json::from_str(raw).map_err(|e| format!("not JSON: {e}"))?;
        let Some(t) = v.get("timing") else {
            return Ok(None);
        };
        let d = |k: &str| -> Result<Duration, String> {
            let x = t
                .get(k)
                .and_then(Value::as_f64)
                .ok_or_else(|| format!("timing.{k}: expected a number of seconds"))?;
            super::secs_from_f64(x).map_err(|e| format!("timing.{k}: {e}"))
        };
        let watchdogs = match t.get("W") {
            Some(Value::Array(a)) => a
                .iter()
                .map(|w| {
                    w.as_u64()
                        .and_then(|w| u32::try_from(w).ok())
                        .ok_or_else(|| "timing.W: expected whole seconds".to_string())
                })
                .collect::<Result<Vec<u32>, String>>()?,
            _ => return Err("timing.W: expected a list of whole seconds".into()),
        };
        let flag = |k: &str| t.get(k).and_then(Value::as_bool).unwrap_or(false);
        Ok(Some(PublishedTiming {
            watchdogs,
            arms_watchdog: flag("arms_watchdog"),
            safety_margin: d("M")?,
            demote_budget: d("B")?,
            iteration_budget: d("P")?,
            iteration_budget_default: flag("P_default"),
            leader_ttl: v
                .get("leader_ttl")
                .and_then(Value::as_u64)
                .and_then(|t| u32::try_from(t).ok()),
        }))
    }

    /// S6 for this member with the cluster timing `t` (its own `M`, `B`, `P` put in):
    /// with the ttl `t` asks for and the one of the leader lease it holds, for
    /// every `W` it runs, and, if it will arm a device, with some `W` existing.
    pub fn check(&self, t: &TimingConfig) -> Result<(), String> {
        let mut t = t.clone();
        t.safety_margin = self.safety_margin;
        t.demote_budget = self.demote_budget;
        if !self.iteration_budget_default {
            t.iteration_budget = self.iteration_budget;
        }
        let mut ttls = vec![t.ttl];
        ttls.extend(self.leader_ttl.filter(|l| *l != t.ttl));
        for ttl in ttls {
            validate_timing(&t, ttl, None).map_err(|e| format!("with ttl {ttl} s: {e}"))?;
            for &w in &self.watchdogs {
                validate_timing(&t, ttl, Some(w))
                    .map_err(|e| format!("with ttl {ttl} s and its W = {w} s: {e}"))?;
            }
            if self.arms_watchdog && watchdog_range(&t, ttl).is_none() {
                return Err(format!(
                    "with ttl {ttl} s: {}",
                    super::empty_range_error(&t, ttl)
                ));
            }
        }
        Ok(())
    }

    /// `W = [..] s, M = .. s, B = .. s, P = .. s` for messages.
    pub fn describe(&self) -> String {
        format!(
            "W = {:?} s, M = {} s, B = {} s, P = {} s",
            self.watchdogs,
            show_d(self.safety_margin),
            show_d(self.demote_budget),
            show_d(self.iteration_budget)
        )
    }
}

/// Check a whole `config` value before it is stored: it must parse (types, as
/// every agent reads it; missing keys take `base`'s file values) and hold S6 for
/// every member that published its timing. `members`: (name, member JSON).
/// `Err` names the member, its values, the inequality and the numbers.
pub fn check_members(
    base: &Config,
    value: &str,
    members: &[(String, String)],
) -> Result<(), String> {
    let (t, _) = base.merge_dynamic(value)?;
    for (name, raw) in members {
        let pt = match PublishedTiming::from_member_json(raw) {
            Ok(Some(pt)) => pt,
            // An older agent, or a member key that does not parse: it checks the
            // value itself when it reads it (and refuses it, keeping its own).
            Ok(None) | Err(_) => continue,
        };
        pt.check(&t)
            .map_err(|e| format!("refused for member {name} ({}): {e}", pt.describe()))?;
    }
    Ok(())
}

/// What the `config` key's `postgresql.parameters` holds (Patroni's cluster-wide
/// PostgreSQL settings): what every member's PostgreSQL gets (`tenure.params.conf`,
/// read before each node's own `[postgresql.parameters]`, which win), and the
/// entries set there that tenure does not take.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PgParameters {
    /// (name lower-cased, value as PostgreSQL reads it), sorted by name. Only the
    /// form is checked here; the values are checked by PostgreSQL's own parser
    /// before they are stored or written (`pg::paramcheck`).
    pub set: Vec<(String, String)>,
    /// Entries left out, each with why: a name that is not a parameter name, a
    /// value that is not a string, number or boolean (or too long, or with a line
    /// break), a setting tenure owns ([`crate::pg::conf::AGENT_OWNED`]) or one of a
    /// node's own ([`node_only`]), a value tenure cannot run with, a second
    /// spelling of a name. An agent says them and applies the rest (another
    /// writer, a Patroni-era key, may have left them); tenure's own writers refuse
    /// them.
    pub ignored: Vec<(String, String)>,
}

/// Settings that name this host's files or its TLS set-up: each node's own, in its
/// `[postgresql.parameters]` (where they are checked against the files), never
/// cluster-wide. Also every name starting with `ssl` ([`node_only`]).
pub const NODE_ONLY: &[&str] = &[
    "data_directory",
    "config_file",
    "hba_file",
    "ident_file",
    "external_pid_file",
];

/// The most entries `postgresql.parameters` may hold (PostgreSQL 15 has about
/// 350 settings; extensions add some).
pub const MAX_PG_PARAMETERS: usize = 1000;

/// The longest value taken (`log_line_prefix`, a library list: far shorter).
pub const MAX_PG_VALUE: usize = 8 << 10;

/// The most bytes of values in all (PostgreSQL repeats a refused value in its
/// message: a check must see every message).
pub const MAX_PG_BYTES: usize = 32 << 10;

/// The connection settings PostgreSQL only checks against each other when the
/// postmaster starts (`postgres -C` does not), and the slots a start must find
/// room for: `(name, why)` for each setting of `cluster` that breaks them on
/// this node, with its own `[postgresql.parameters]` (`own`, which win) and the
/// replication slots its data directory holds (`slots`). A value this cannot read
/// (hexadecimal, octal) is left to PostgreSQL.
pub fn cross_refusals(
    cluster: &[(String, String)],
    own: &[(String, String)],
    slots: usize,
) -> Vec<(String, String)> {
    let find = |l: &[(String, String)], n: &str| l.iter().any(|(k, _)| k.eq_ignore_ascii_case(n));
    let from_cluster = |n: &str| !find(own, n) && find(cluster, n);
    // The value in force: the node's own (first), else the cluster's.
    let in_force: Vec<(String, String)> = own.iter().chain(cluster).cloned().collect();
    let mut out = Vec::new();
    for (rule, why) in start_violations(&in_force, slots) {
        for n in rule.names() {
            if from_cluster(n) {
                out.push((n.to_string(), why.clone()));
            }
        }
    }
    out
}

/// A check PostgreSQL makes only when the postmaster starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StartRule {
    /// The reserved connections below `max_connections`.
    Connections,
    /// `max_replication_slots` not below the slots on disk.
    Slots,
}

impl StartRule {
    /// The settings the rule reads.
    pub fn names(self) -> &'static [&'static str] {
        match self {
            StartRule::Connections => &[
                "max_connections",
                "superuser_reserved_connections",
                "reserved_connections",
            ],
            StartRule::Slots => &["max_replication_slots"],
        }
    }
}

/// The start-time checks `in_force` (the first entry of a name wins; a name not
/// there has tenure's or PostgreSQL's default) breaks on a node whose data
/// directory holds `slots` replication slots, each with why. A value this cannot
/// read (hexadecimal, octal) is left to PostgreSQL.
pub fn start_violations(in_force: &[(String, String)], slots: usize) -> Vec<(StartRule, String)> {
    let value =
        |n: &str, default: i64| match in_force.iter().find(|(k, _)| k.eq_ignore_ascii_case(n)) {
            Some((_, v)) => pg_count(v),
            None => Some(default),
        };
    let mut out = Vec::new();
    // `reserved_connections` is PostgreSQL 16's (0 where it is not set).
    if let (Some(max), Some(su), Some(other)) = (
        value("max_connections", 100),
        value("superuser_reserved_connections", 3),
        value("reserved_connections", 0),
    ) && su.saturating_add(other) >= max
    {
        out.push((
            StartRule::Connections,
            format!(
                "superuser_reserved_connections ({su}) + reserved_connections ({other}) must \
                 be less than max_connections ({max}) on this node: PostgreSQL would not start"
            ),
        ));
    }
    if let Some(n) = value("max_replication_slots", 10)
        && n < slots as i64
    {
        out.push((
            StartRule::Slots,
            format!(
                "{n} is less than the {slots} replication slots this node's data directory \
                 holds: PostgreSQL would not start"
            ),
        ));
    }
    out
}

/// Whether `name` (lower-cased) is a node's own setting ([`NODE_ONLY`], `ssl`,
/// `ssl_*`): `pg_hba.conf`'s `hostssl` lines and the certificate checks follow a
/// node's `ssl`, and the files are paths on its host.
pub fn node_only(name: &str) -> bool {
    NODE_ONLY.contains(&name) || name == "ssl" || name.starts_with("ssl_")
}

/// A name PostgreSQL's configuration-file lexer reads as one (guc-file.l): a
/// letter or `_`, then letters, digits and `_`, with at most one `.`-qualified
/// part (`pg_stat_statements.max`); at most 63 bytes. `a.b.c` is a syntax error
/// in a file even though `postgres -c` takes it.
pub fn pg_param_name_ok(name: &str) -> bool {
    let id = |s: &str| {
        s.bytes()
            .next()
            .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
            && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
    };
    name.len() <= 63
        && match name.split_once('.') {
            None => id(name),
            Some((a, b)) => id(a) && id(b),
        }
}

/// PostgreSQL's boolean as its configuration parser reads it (`parse_bool`): a
/// prefix of `true`, `false`, `yes`, `no`; `on`, `of`/`off`; `1`, `0`; any case.
/// `None`: not a boolean.
pub fn pg_bool(v: &str) -> Option<bool> {
    let l = v.to_ascii_lowercase();
    let prefix = |word: &str| !l.is_empty() && word.starts_with(l.as_str());
    match l.as_bytes().first()? {
        b't' if prefix("true") => Some(true),
        b'f' if prefix("false") => Some(false),
        b'y' if prefix("yes") => Some(true),
        b'n' if prefix("no") => Some(false),
        b'o' if l == "on" => Some(true),
        b'o' if l.len() >= 2 && prefix("off") => Some(false),
        b'1' if l.len() == 1 => Some(true),
        b'0' if l.len() == 1 => Some(false),
        _ => None,
    }
}

/// A setting's number as PostgreSQL reads it (`parse_int`/`parse_real`): decimal,
/// a fraction or an exponent (`0.4`, `1e-9`), then an optional unit, which
/// `unit` converts to the setting's base unit; integers rounded half to even as
/// PostgreSQL's `rint`. `None`: not such a number (hexadecimal and octal, which
/// PostgreSQL also takes, among them: not judged here).
fn pg_number(v: &str, unit: impl Fn(&str) -> Option<f64>) -> Option<i64> {
    let t = v.trim();
    let end = t
        .find(|c: char| !(c.is_ascii_digit() || matches!(c, '.' | '+' | '-' | 'e' | 'E')))
        .unwrap_or(t.len());
    let (num, rest) = t.split_at(end);
    if num.len() > 1 && num.starts_with('0') && !num.starts_with("0.") {
        return None;
    }
    let x: f64 = num.parse().ok()?;
    let x = x * unit(rest.trim())?;
    let r = x.round_ties_even();
    (r.is_finite() && r.abs() < 9.0e18).then_some(r as i64)
}

/// A count (`max_connections`): no unit.
pub fn pg_count(v: &str) -> Option<i64> {
    pg_number(v, |u| u.is_empty().then_some(1.0))
}

/// A time in seconds (`wal_receiver_status_interval`): `us`, `ms`, `s`, `min`,
/// `h`, `d`; none is seconds.
fn pg_seconds(v: &str) -> Option<i64> {
    pg_number(v, |u| match u {
        "" | "s" => Some(1.0),
        "us" => Some(1e-6),
        "ms" => Some(1e-3),
        "min" => Some(60.0),
        "h" => Some(3600.0),
        "d" => Some(86400.0),
        _ => None,
    })
}

/// A value tenure needs otherwise on every member, with the reason: replicas need
/// WAL, WAL senders, slots and standby replies for replication; standbys must
/// take the agent's probe; `pg_rewind` needs full pages; a watchdog reset is a
/// host crash, which `fsync = off` does not survive.
fn refused_value(name: &str, value: &str) -> Option<&'static str> {
    let off = || pg_bool(value.trim()) == Some(false);
    match name {
        "wal_level" if value.trim().eq_ignore_ascii_case("minimal") => {
            Some("\"minimal\" leaves nothing to stream: every replica needs replica or logical")
        }
        "hot_standby" if off() => {
            Some("off would refuse every connection to a replica, the agent's probe among them")
        }
        "full_page_writes" if off() => {
            Some("off breaks pg_rewind, which a failed-over primary needs to follow again")
        }
        "fsync" if off() => {
            Some("off loses committed data at a host crash, and tenure's watchdog resets hosts")
        }
        "max_wal_senders" | "max_replication_slots" if pg_count(value) == Some(0) => {
            Some("0 (as PostgreSQL rounds it) leaves the replicas nothing to stream through")
        }
        "wal_receiver_status_interval" if pg_seconds(value) == Some(0) => Some(
            "0 stops the standbys' replies that release synchronous commits and show their lag",
        ),
        _ => None,
    }
}

/// Read `postgresql.parameters` of a `config` value or patch (`v`: the value's
/// `postgresql` member). A `null` entry is left out (a patch's removal, whatever
/// its name). `Err` only when the section itself is not an object (or holds more
/// than [`MAX_PG_PARAMETERS`]); a bad entry is set aside in `ignored`.
pub fn parse_pg_parameters(v: Option<&Value>) -> Result<PgParameters, String> {
    let mut out = PgParameters::default();
    let params = match v {
        None | Some(Value::Null) => return Ok(out),
        Some(Value::Object(pg)) => match pg.get("parameters") {
            None | Some(Value::Null) => return Ok(out),
            Some(Value::Object(p)) => p,
            Some(other) => {
                return Err(format!(
                    "postgresql.parameters: expected an object of settings, found {}",
                    super::json_kind(other)
                ));
            }
        },
        Some(other) => {
            return Err(format!(
                "postgresql: expected an object, found {}",
                super::json_kind(other)
            ));
        }
    };
    if params.len() > MAX_PG_PARAMETERS {
        return Err(format!(
            "postgresql.parameters: {} settings, more than the {MAX_PG_PARAMETERS} taken",
            params.len()
        ));
    }
    let mut bytes = 0usize;
    for (k, v) in params {
        let mut skip = |why: String| out.ignored.push((k.clone(), why));
        if v.is_null() {
            continue;
        }
        if !pg_param_name_ok(k) {
            skip(
                "not a PostgreSQL parameter name (NAME or PREFIX.NAME of letters, digits \
                 and '_', at most 63 bytes)"
                    .into(),
            );
            continue;
        }
        let value = match v {
            Value::String(s) => s.clone(),
            Value::Number(n) => n.to_string(),
            Value::Bool(b) => if *b { "on" } else { "off" }.to_string(),
            other => {
                skip(format!(
                    "expected a string, number or boolean, found {}",
                    super::json_kind(other)
                ));
                continue;
            }
        };
        if value.len() > MAX_PG_VALUE {
            skip(format!(
                "the value is {} bytes, more than the {MAX_PG_VALUE} taken",
                value.len()
            ));
            continue;
        }
        if value.contains(['\n', '\r', '\0']) {
            skip("the value has a line break or a NUL".into());
            continue;
        }
        bytes += value.len();
        if bytes > MAX_PG_BYTES {
            skip(format!(
                "beyond the {MAX_PG_BYTES} bytes of values taken in all"
            ));
            continue;
        }
        let name = k.to_ascii_lowercase();
        if crate::pg::conf::AGENT_OWNED.contains(&name.as_str()) {
            skip("set by tenure itself (tenure.conf)".into());
            continue;
        }
        if node_only(&name) {
            skip(
                "a node's own setting (its files, its TLS): set it in [postgresql.parameters] \
                 of each node's file"
                    .into(),
            );
            continue;
        }
        if let Some(why) = refused_value(&name, &value) {
            skip(format!("{value:?}: {why}"));
            continue;
        }
        if out.set.iter().any(|(n, _)| *n == name) {
            skip(
                "a second spelling of a name set already (PostgreSQL's names are not \
                 case-sensitive)"
                    .into(),
            );
            continue;
        }
        out.set.push((name, value));
    }
    out.set.sort();
    Ok(out)
}

/// In synchronous mode, `synchronous_commit` set cluster-wide to `off` or `local`
/// would acknowledge commits no standby has: set aside as [`PgParameters::ignored`].
pub fn check_sync_commit(p: &mut PgParameters, synchronous_mode: bool) {
    if !synchronous_mode {
        return;
    }
    // PostgreSQL's spellings of off (`false`, `no`, `0`, ...) and `local`.
    if let Some(i) = p.set.iter().position(|(k, v)| {
        k == "synchronous_commit"
            && (pg_bool(v.trim()) == Some(false) || v.trim().eq_ignore_ascii_case("local"))
    }) {
        let (k, v) = p.set.remove(i);
        p.ignored.push((
            k,
            format!(
                "{v:?} with synchronous_mode acknowledges commits no synchronous standby \
                 has: remote_write, on or remote_apply"
            ),
        ));
    }
}

/// Apply a JSON merge patch (RFC 7396; Patroni's `patch_config`): `null` deletes a
/// key, objects merge recursively, anything else replaces.
pub fn merge_patch(target: &mut Value, patch: &Value) {
    let Value::Object(p) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    if let Value::Object(t) = target {
        for (k, v) in p {
            if v.is_null() {
                t.remove(k);
            } else {
                merge_patch(t.entry(k.clone()).or_insert(Value::Null), v);
            }
        }
    }
}

#[cfg(test)]
mod tests;
