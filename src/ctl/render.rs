//! What `tenure ctl` shows: rows derived from a [`Snapshot`], rendered as tables for
//! people and JSON for scripts.
//!
//! Owns: the columns, their order and meaning, lag arithmetic, the JSON shapes
//! (documented in docs/operations.md: scripts rely on them). Must never: do I/O or
//! read a clock (the snapshot carries what was read), or panic on what another
//! writer left in etcd (a garbled member still gets a row, with its problem).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde_json::{Map, Value, json};

use crate::core::model::{ClusterView, HistoryEntry, Initialize, Member, lsn_text};

/// Everything ctl read from etcd in one go.
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    pub scope: String,
    pub view: ClusterView,
    /// `members/<name>` as JSON objects, for fields the agent does not parse
    /// (`pending_restart`, set by Patroni-compatible writers). Garbage is left out.
    pub raw_members: BTreeMap<String, Map<String, Value>>,
    /// What etcd answered for the leader key's lease (`LeaseTimeToLive`, whole
    /// seconds, served from the etcd leader's memory); `None`: no leader key, or
    /// the lease was not found.
    pub leader_lease_ttl: Option<i64>,
}

impl Snapshot {
    /// The `config` key as a JSON object, if it is one.
    pub fn config(&self) -> Option<Map<String, Value>> {
        let raw = self.view.config.as_deref()?;
        match serde_json::from_str::<Value>(raw) {
            Ok(Value::Object(o)) => Some(o),
            _ => None,
        }
    }

    /// Maintenance mode, as Patroni stores it: `"pause": true` in `config`.
    pub fn paused(&self) -> bool {
        self.config()
            .and_then(|c| c.get("pause").cloned())
            .is_some_and(|v| v == Value::Bool(true) || v == json!("true"))
    }

    pub fn leader_name(&self) -> Option<&str> {
        self.view.leader.as_ref().map(|k| k.name.as_str())
    }

    pub fn member(&self, name: &str) -> Option<&Member> {
        self.view.members.iter().find(|m| m.name == name)
    }

    /// Member names, sorted, for error texts ("members are a, b, c").
    pub fn member_names(&self) -> Vec<String> {
        let mut v: Vec<String> = self.view.members.iter().map(|m| m.name.clone()).collect();
        v.sort();
        v
    }

    fn sync_standby(&self, name: &str) -> bool {
        matches!(&self.view.sync, Some(Ok(k)) if k.lists(name))
    }

    /// What lag is measured against, as Patroni does: the `status` key's `optime`,
    /// or the leader member's published position if that is further.
    pub fn leader_position(&self) -> Option<u64> {
        let from_member = self
            .leader_name()
            .and_then(|n| self.member(n))
            .map(|m| m.info.xlog_location)
            .filter(|l| *l > 0);
        match (self.view.status_optime, from_member) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        }
    }
}

/// Replication lag of one member.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lag {
    /// The leader: no lag.
    Leader,
    Bytes(u64),
    /// The member published no position, or there is nothing to measure against.
    Unknown,
}

/// One member as `list` shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Row {
    pub name: String,
    pub host: String,
    pub port: Option<u16>,
    /// `Leader`, `Sync Standby`, `Replica`, `Primary` (published, without the key),
    /// or the published role as written.
    pub role: String,
    pub state: String,
    pub timeline: Option<u32>,
    pub lag: Lag,
    pub epoch: Option<i64>,
    /// Leader only: seconds left on the leader key's lease, as etcd answered.
    pub lease_left: Option<i64>,
    pub is_leader: bool,
    pub pending_restart: bool,
    /// The time of the restart the member has scheduled (`scheduled_restart`'s
    /// `schedule` in its key), as written.
    pub scheduled_restart: Option<String>,
    pub nofailover: bool,
    pub api_url: String,
    pub xlog_location: Option<u64>,
    pub receive_lsn: Option<u64>,
    pub replay_lsn: Option<u64>,
    /// What was wrong with the member key, if anything.
    pub problem: Option<String>,
}

/// `postgres://host:port/db` → `(host, port)`.
pub fn host_port(conn_url: &str) -> (String, Option<u16>) {
    let rest = conn_url
        .split_once("://")
        .map(|(_, r)| r)
        .unwrap_or(conn_url);
    let authority = rest.split(['/', '?']).next().unwrap_or("");
    let authority = authority.rsplit('@').next().unwrap_or(authority);
    match authority.rsplit_once(':') {
        Some((h, p)) if !h.is_empty() && p.bytes().all(|c| c.is_ascii_digit()) => {
            (h.to_string(), p.parse().ok())
        }
        _ => (authority.to_string(), None),
    }
}

fn title(s: &str) -> String {
    s.split('_')
        .map(|w| {
            let mut c = w.chars();
            match c.next() {
                Some(f) => f.to_uppercase().collect::<String>() + c.as_str(),
                None => String::new(),
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// The rows of `list`, sorted by name (a leader without a member key included).
pub fn rows(s: &Snapshot) -> Vec<Row> {
    let leader = s.leader_name();
    let reference = s.leader_position();
    let mut out: Vec<Row> = s
        .view
        .members
        .iter()
        .map(|m| {
            let i = &m.info;
            let is_leader = leader == Some(m.name.as_str());
            let (host, port) = host_port(&i.conn_url);
            let role = if is_leader {
                "Leader".to_string()
            } else if s.sync_standby(&m.name) {
                "Sync Standby".to_string()
            } else if i.role.is_empty() {
                "Unknown".to_string()
            } else {
                title(&i.role)
            };
            let xlog = (i.xlog_location > 0).then_some(i.xlog_location);
            let lag = if is_leader {
                Lag::Leader
            } else {
                match (reference, xlog) {
                    (Some(r), Some(x)) => Lag::Bytes(r.saturating_sub(x)),
                    _ => Lag::Unknown,
                }
            };
            let raw = s.raw_members.get(&m.name);
            let pending_restart = raw
                .and_then(|o| o.get("pending_restart"))
                .is_some_and(|v| v == &Value::Bool(true));
            // Another writer's value may be anything: only a string is shown.
            let scheduled_restart = raw
                .and_then(|o| o.get("scheduled_restart"))
                .and_then(|v| v.get("schedule"))
                .and_then(Value::as_str)
                .map(|t| t.chars().take(64).collect());
            Row {
                name: m.name.clone(),
                host,
                port,
                role,
                state: if i.state.is_empty() {
                    "unknown".into()
                } else {
                    i.state.clone()
                },
                timeline: (i.timeline > 0).then_some(i.timeline),
                lag,
                epoch: i.epoch,
                lease_left: if is_leader { s.leader_lease_ttl } else { None },
                is_leader,
                pending_restart,
                scheduled_restart,
                nofailover: i.tags.nofailover,
                api_url: i.api_url.clone(),
                xlog_location: xlog,
                receive_lsn: i.receive_lsn,
                replay_lsn: i.replay_lsn,
                problem: i.parse_error.clone(),
            }
        })
        .collect();
    if let Some(k) = &s.view.leader
        && !out.iter().any(|r| r.name == k.name)
    {
        out.push(Row {
            name: k.name.clone(),
            host: String::new(),
            port: None,
            role: "Leader".into(),
            state: "no member key".into(),
            timeline: None,
            lag: Lag::Leader,
            epoch: Some(k.epoch),
            lease_left: s.leader_lease_ttl,
            is_leader: true,
            pending_restart: false,
            scheduled_restart: None,
            nofailover: false,
            api_url: String::new(),
            xlog_location: None,
            receive_lsn: None,
            replay_lsn: None,
            problem: Some("the leader key names a member without a member key".into()),
        });
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

/// Rows in topology order: the leader first, then its replicas (tenure's replicas
/// all stream from the leader). The second field is the depth in the tree.
pub fn topology(rows: &[Row]) -> Vec<(usize, &Row)> {
    match rows.iter().find(|r| r.is_leader) {
        Some(l) => std::iter::once((0, l))
            .chain(rows.iter().filter(|r| !r.is_leader).map(|r| (1, r)))
            .collect(),
        None => rows.iter().map(|r| (0, r)).collect(),
    }
}

/// Patroni's `Lag in MB`: whole MiB, rounded.
fn lag_mb(b: u64) -> u64 {
    // Rounded to the nearest MB without overflow (review of bad input, 4).
    (b >> 20) + ((b >> 19) & 1)
}

/// A table with a frame, every column left-aligned except those in `right`.
/// `title` goes into the top rule (`+ Cluster: x ---+---`), as patronictl does.
pub fn table(
    title: Option<&str>,
    columns: &[&str],
    rows: &[Vec<String>],
    right: &[usize],
) -> String {
    // Cells come from values other writers left in etcd: a line break would
    // break the frame, an escape sequence would reach the terminal.
    let rows: Vec<Vec<String>> = rows
        .iter()
        .map(|r| r.iter().map(|c| printable(c)).collect())
        .collect();
    let rows = &rows;
    let mut width: Vec<usize> = columns.iter().map(|c| c.chars().count()).collect();
    for r in rows {
        for (i, cell) in r.iter().enumerate().take(width.len()) {
            width[i] = width[i].max(cell.chars().count());
        }
    }
    let rule: String = {
        let mut s = String::from("+");
        for w in &width {
            s += &"-".repeat(w + 2);
            s.push('+');
        }
        s
    };
    let mut out = String::new();
    match title {
        Some(t) => {
            let label = format!("+ {t} ");
            let n = label.chars().count();
            if n < rule.chars().count() {
                out += &label;
                out.extend(rule.chars().skip(n));
            } else {
                out += &label;
            }
        }
        None => out += &rule,
    }
    out.push('\n');
    let line = |cells: &[String]| {
        let mut s = String::from("|");
        for (i, w) in width.iter().enumerate() {
            let c = cells.get(i).map(String::as_str).unwrap_or("");
            let pad = w - c.chars().count().min(*w);
            if right.contains(&i) {
                let _ = write!(s, " {}{c} |", " ".repeat(pad));
            } else {
                let _ = write!(s, " {c}{} |", " ".repeat(pad));
            }
        }
        s.push('\n');
        s
    };
    let header: Vec<String> = columns.iter().map(|c| c.to_string()).collect();
    out += &line(&header);
    out += &rule;
    out.push('\n');
    for r in rows {
        out += &line(r);
    }
    out += &rule;
    out.push('\n');
    out
}

fn system_identifier(s: &Snapshot) -> Option<String> {
    match &s.view.initialize {
        Some(Initialize::Done { sysid }) => Some(sysid.to_string()),
        Some(Initialize::Locked { .. }) => Some("initializing".into()),
        Some(Initialize::Garbage(_)) => Some("garbage".into()),
        None => None,
    }
}

/// Lines under the table: maintenance mode, the rollback marker, garbled keys.
fn footer(s: &Snapshot, rows: &[Row]) -> String {
    let mut out = String::new();
    if s.paused() {
        out += " Maintenance mode: on\n";
    }
    if let Some(m) = &s.view.rollback {
        let _ = writeln!(
            out,
            " Rollback marker set ({}): no node takes the leader key or promotes until \
             `tenure confirm-epoch`",
            match &m.parse_error {
                Some(e) => format!("does not parse: {e}"),
                None => m.reason.clone(),
            }
        );
    }
    if s.view.leader.is_none() && !rows.is_empty() {
        out += " No leader: the leader key is absent\n";
    }
    if let Some((at, from, to)) = scheduled_switchover(s) {
        let _ = writeln!(
            out,
            " Switchover scheduled at: {} (from {}, to {})",
            printable(at),
            printable(from.unwrap_or("the leader")),
            printable(to.unwrap_or("the best candidate"))
        );
    }
    for r in rows {
        if let Some(p) = &r.problem {
            let _ = writeln!(out, " {}: {p}", r.name);
        }
    }
    // Finding L1: a member key without `"acquire_record": true`.
    for m in s
        .view
        .members
        .iter()
        .filter(|m| m.info.lacks_acquire_record)
    {
        let _ = writeln!(
            out,
            " {}: runs an agent older than the acquisition record (mixed versions: \
             every failover waits ttl + R after the win)",
            m.name
        );
    }
    out
}

/// `s` with every control character written as its escape (`\n`, `\u{1b}`): text
/// from etcd printed for people.
pub fn printable(s: &str) -> String {
    if !s.chars().any(char::is_control) {
        return s.to_string();
    }
    s.chars()
        .map(|c| {
            if c.is_control() {
                c.escape_default().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
}

/// The switchover the `failover` key schedules: `(time as written, from, to)`.
fn scheduled_switchover(s: &Snapshot) -> Option<(&str, Option<&str>, Option<&str>)> {
    // A value that does not parse is the leader's to delete, not a schedule.
    let f = s
        .view
        .failover
        .as_ref()
        .filter(|f| f.parse_error.is_none())?;
    let at = f.scheduled_text.as_deref()?;
    Some((at, f.leader.as_deref(), f.member.as_deref()))
}

/// `list` (or `topology`) for people.
pub fn list_table(s: &Snapshot, as_topology: bool) -> String {
    let rows = rows(s);
    let pending = rows.iter().any(|r| r.pending_restart);
    // Host alone unless a port differs from 5432 or two members share a host.
    let mut hosts: Vec<&str> = rows.iter().map(|r| r.host.as_str()).collect();
    hosts.sort();
    hosts.dedup();
    let with_port =
        rows.iter().any(|r| r.port.is_some_and(|p| p != 5432)) || hosts.len() < rows.len();
    let mut columns = vec![
        "Member",
        "Host",
        "Role",
        "State",
        "TL",
        "Lag in MB",
        "Epoch",
        "Lease left",
    ];
    if pending {
        columns.push("Pending restart");
    }
    let scheduled = rows.iter().any(|r| r.scheduled_restart.is_some());
    if scheduled {
        columns.push("Scheduled restart");
    }
    let ordered: Vec<(usize, &Row)> = if as_topology {
        topology(&rows)
    } else {
        rows.iter().map(|r| (0, r)).collect()
    };
    let cells: Vec<Vec<String>> = ordered
        .iter()
        .map(|(depth, r)| {
            let name = if *depth > 0 {
                format!("{}+ {}", "  ".repeat(depth - 1), r.name)
            } else {
                r.name.clone()
            };
            let host = match (with_port, r.port) {
                (true, Some(p)) => format!("{}:{p}", r.host),
                _ => r.host.clone(),
            };
            let mut v = vec![
                name,
                host,
                r.role.clone(),
                r.state.clone(),
                r.timeline.map(|t| t.to_string()).unwrap_or_default(),
                match r.lag {
                    Lag::Leader => String::new(),
                    Lag::Bytes(b) => lag_mb(b).to_string(),
                    Lag::Unknown => "unknown".into(),
                },
                r.epoch.map(|e| e.to_string()).unwrap_or_default(),
                r.lease_left.map(|t| format!("{t} s")).unwrap_or_default(),
            ];
            if pending {
                v.push(if r.pending_restart {
                    "*".into()
                } else {
                    String::new()
                });
            }
            if scheduled {
                v.push(r.scheduled_restart.clone().unwrap_or_default());
            }
            v
        })
        .collect();
    let title = match system_identifier(s) {
        Some(id) => format!("Cluster: {} ({id})", s.scope),
        None => format!("Cluster: {}", s.scope),
    };
    let mut out = table(Some(&title), &columns, &cells, &[4, 5, 6, 7]);
    out += &footer(s, &rows);
    out
}

fn row_json(r: &Row) -> Value {
    json!({
        "name": r.name,
        "host": r.host,
        "port": r.port,
        "role": r.role,
        "state": r.state,
        "timeline": r.timeline,
        "lag_bytes": match r.lag { Lag::Bytes(b) => json!(b), Lag::Leader => json!(0), Lag::Unknown => Value::Null },
        "lag_mb": match r.lag { Lag::Bytes(b) => json!(lag_mb(b)), Lag::Leader => json!(0), Lag::Unknown => Value::Null },
        "epoch": r.epoch,
        "leader": r.is_leader,
        "lease_ttl_left": r.lease_left,
        "pending_restart": r.pending_restart,
        "scheduled_restart": r.scheduled_restart,
        "nofailover": r.nofailover,
        "api_url": r.api_url,
        "xlog_location": r.xlog_location,
        "receive_lsn": r.receive_lsn,
        "replay_lsn": r.replay_lsn,
        "problem": r.problem,
    })
}

fn cluster_json(s: &Snapshot) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("scope".into(), json!(s.scope));
    m.insert("system_identifier".into(), json!(system_identifier(s)));
    m.insert("leader".into(), json!(s.leader_name()));
    m.insert(
        "epoch".into(),
        json!(s.view.leader.as_ref().map(|k| k.epoch)),
    );
    m.insert("lease_ttl_left".into(), json!(s.leader_lease_ttl));
    m.insert("leader_position".into(), json!(s.leader_position()));
    m.insert("paused".into(), json!(s.paused()));
    m.insert(
        "rollback_marker".into(),
        json!(s.view.rollback.as_ref().map(|r| r.key.clone())),
    );
    m.insert(
        "scheduled_switchover".into(),
        match scheduled_switchover(s) {
            Some((at, from, to)) => json!({ "at": at, "from": from, "to": to }),
            None => Value::Null,
        },
    );
    m
}

/// `list --json`: the cluster's facts and one object per member, sorted by name.
pub fn list_json(s: &Snapshot) -> Value {
    let mut m = cluster_json(s);
    m.insert(
        "members".into(),
        Value::Array(rows(s).iter().map(row_json).collect()),
    );
    Value::Object(m)
}

/// `topology --json`: the cluster's facts and the tree (`replicas` under the
/// leader; without a leader every member is a root).
pub fn topology_json(s: &Snapshot) -> Value {
    let rows = rows(s);
    let ordered = topology(&rows);
    let mut roots: Vec<Value> = Vec::new();
    for (depth, r) in ordered {
        let mut v = row_json(r);
        if depth == 0 {
            if let Value::Object(o) = &mut v {
                o.insert("replicas".into(), json!([]));
            }
            roots.push(v);
        } else if let Some(Value::Object(parent)) = roots.last_mut()
            && let Some(Value::Array(reps)) = parent.get_mut("replicas")
        {
            reps.push(v);
        }
    }
    let mut m = cluster_json(s);
    m.insert("topology".into(), Value::Array(roots));
    Value::Object(m)
}

/// `history` for people.
pub fn history_table(h: &[HistoryEntry]) -> String {
    let rows: Vec<Vec<String>> = h
        .iter()
        .map(|e| {
            vec![
                e.timeline.to_string(),
                lsn_text(e.lsn),
                e.reason.clone(),
                e.timestamp.clone(),
                e.new_leader.clone(),
            ]
        })
        .collect();
    table(
        None,
        &["TL", "LSN", "Reason", "Timestamp", "New Leader"],
        &rows,
        &[0],
    )
}

/// `history --json`.
pub fn history_json(h: &[HistoryEntry]) -> Value {
    Value::Array(
        h.iter()
            .map(|e| {
                json!({
                    "timeline": e.timeline,
                    "lsn": e.lsn,
                    "lsn_text": lsn_text(e.lsn),
                    "reason": e.reason,
                    "timestamp": e.timestamp,
                    "new_leader": e.new_leader,
                })
            })
            .collect(),
    )
}

/// PostgreSQL's `server_version_num` (150004) as people write it (15.4).
pub fn pg_version_text(num: u64) -> String {
    if num >= 100_000 {
        format!("{}.{}", num / 10_000, num % 10_000)
    } else {
        format!("{}.{}.{}", num / 10_000, (num / 100) % 100, num % 100)
    }
}

#[cfg(test)]
mod lag_tests {
    /// Review of bad input, 4: a lag near u64::MAX (another writer's optime)
    /// rounds without overflow; the usual values round to the nearest MB.
    #[test]
    fn lag_rounds_to_the_nearest_mb_without_overflow() {
        assert_eq!(super::lag_mb(0), 0);
        assert_eq!(super::lag_mb(512 * 1024 - 1), 0);
        assert_eq!(super::lag_mb(512 * 1024), 1);
        assert_eq!(super::lag_mb(3 << 20), 3);
        assert_eq!(super::lag_mb(u64::MAX), (u64::MAX >> 20) + 1);
    }
}
