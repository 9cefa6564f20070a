//! Encoding and defensive parsing of the values under the scope (DESIGN §4).
//!
//! Owns: the byte format of `members/<name>`, `initialize`, `history`,
//! `confirm_epoch`, `rollback` and `status`.
//! Must never: fail or panic on what another writer left in etcd. Every parser
//! returns a usable value plus the problems it found; the caller logs them once.

use serde_json::{Map, Value, json};

use crate::core::model::{
    ConfirmEpoch, HistoryEntry, Initialize, LeaseId, Lsn, MAX_TTL, MAX_WATCHDOG, MemberInfo,
    RollbackMarker, RollbackSeen, SyncKey,
};

/// Longest excerpt of a bad value quoted in a problem text (logs stay readable).
const EXCERPT: usize = 64;

/// A short, printable excerpt of raw bytes for problem texts.
pub fn excerpt(raw: &[u8]) -> String {
    let s = String::from_utf8_lossy(raw);
    let mut out: String = s.chars().take(EXCERPT).collect();
    if s.chars().count() > EXCERPT {
        out.push('…');
    }
    format!("{out:?}")
}

/// A member's tags as Patroni writes them (`nofailover` always, `noloadbalance`,
/// `nosync` and `clonefrom` when set, then the custom ones): the member key and
/// `GET /cluster` show the same.
pub fn tags_json(info: &MemberInfo) -> Value {
    let mut tags = Map::new();
    tags.insert("nofailover".into(), json!(info.tags.nofailover));
    if info.tags.noloadbalance {
        tags.insert("noloadbalance".into(), json!(true));
    }
    if info.tags.nosync {
        tags.insert("nosync".into(), json!(true));
    }
    if info.tags.clonefrom {
        tags.insert("clonefrom".into(), json!(true));
    }
    for (k, v) in &info.tags.custom {
        tags.insert(k.clone(), json!(v));
    }
    Value::Object(tags)
}

/// The member JSON: Patroni's field names, plus ours (`epoch`, `watchdog_timeout`,
/// `leader_lease`, `pg_healthy`). `None` fields are left out.
pub fn encode_member(info: &MemberInfo) -> String {
    encode_member_with(info, Vec::new())
}

/// [`encode_member`] plus fields the core does not model (the published timing,
/// `pause`), added last.
pub fn encode_member_with(info: &MemberInfo, extra: Vec<(&str, Value)>) -> String {
    let mut m = Map::new();
    m.insert("conn_url".into(), json!(info.conn_url));
    m.insert("api_url".into(), json!(info.api_url));
    m.insert("state".into(), json!(info.state));
    m.insert("role".into(), json!(info.role));
    m.insert("version".into(), json!(info.version));
    m.insert("xlog_location".into(), json!(info.xlog_location));
    // Patroni's replica fields: `patronictl list` shows receive and replay lag
    // from them (against the `status` key's `optime`).
    if let Some(l) = info.receive_lsn {
        m.insert("receive_lsn".into(), json!(l));
    }
    if let Some(l) = info.replay_lsn {
        m.insert("replay_lsn".into(), json!(l));
    }
    if let Some(r) = &info.replication_state {
        m.insert("replication_state".into(), json!(r));
    }
    m.insert("timeline".into(), json!(info.timeline));
    if let Some(s) = info.sysid {
        m.insert("database_system_identifier".into(), json!(s.to_string()));
    }
    m.insert("tags".into(), tags_json(info));
    if let Some(e) = info.epoch {
        m.insert("epoch".into(), json!(e));
    }
    if let Some(w) = info.watchdog_timeout {
        m.insert("watchdog_timeout".into(), json!(w));
    }
    if let Some(t) = info.leader_ttl {
        m.insert("leader_ttl".into(), json!(t));
    }
    if let Some(l) = info.leader_lease {
        m.insert("leader_lease".into(), json!(l));
    }
    if let Some(t) = info.leader_ttl_seen {
        m.insert("leader_ttl_seen".into(), json!(t));
    }
    if let Some(w) = info.poll_window {
        m.insert("poll_window".into(), json!(w.as_secs_f64()));
    }
    if let Some(e) = info.released {
        m.insert("released".into(), json!(e));
    }
    m.insert("pg_healthy".into(), json!(info.pg_healthy));
    // Finding L1: this agent's acquire txns write the acquisition record (and its
    // marker fields older agents rewrite); candidates rely on it only while every
    // member says so.
    if !info.lacks_acquire_record {
        m.insert("acquire_record".into(), json!(true));
    }
    for (k, v) in extra {
        m.insert(k.into(), v);
    }
    Value::Object(m).to_string()
}

/// Parse a member value. Never fails: a missing field takes its default, a field of
/// the wrong type too, and every problem is listed in `parse_error`.
pub fn parse_member(raw: &[u8]) -> MemberInfo {
    // Until the value shows `"acquire_record": true`, its agent may be older than
    // the acquisition record (finding L1): a value that is no JSON object says nothing.
    let mut info = MemberInfo {
        lacks_acquire_record: true,
        ..MemberInfo::default()
    };
    let mut problems: Vec<String> = Vec::new();
    let text = match std::str::from_utf8(raw) {
        Ok(t) => t,
        Err(e) => {
            info.parse_error = Some(format!("member value is not UTF-8 ({e}): {}", excerpt(raw)));
            return info;
        }
    };
    let obj = match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(o)) => o,
        Ok(other) => {
            info.parse_error = Some(format!(
                "member value is JSON but not an object ({}): {}",
                type_name(&other),
                excerpt(raw)
            ));
            return info;
        }
        Err(e) => {
            info.parse_error = Some(format!("member value is not JSON ({e}): {}", excerpt(raw)));
            return info;
        }
    };
    let field = |name: &str| -> Option<&Value> { obj.get(name).filter(|v| !v.is_null()) };

    for (name, slot) in [
        ("conn_url", &mut info.conn_url),
        ("api_url", &mut info.api_url),
        ("state", &mut info.state),
        ("role", &mut info.role),
        ("version", &mut info.version),
    ] {
        if let Some(v) = field(name) {
            match v.as_str() {
                Some(s) => *slot = s.to_string(),
                None => problems.push(format!("{name}: expected a string, got {}", short(v))),
            }
        }
    }
    if let Some(v) = field("xlog_location") {
        match parse_lsn_value(v) {
            Some(l) => info.xlog_location = l,
            None => problems.push(format!(
                "xlog_location: expected an integer LSN, got {}",
                short(v)
            )),
        }
    }
    for (name, slot) in [
        ("receive_lsn", &mut info.receive_lsn),
        ("replay_lsn", &mut info.replay_lsn),
    ] {
        if let Some(v) = field(name) {
            match parse_lsn_value(v) {
                Some(l) => *slot = Some(l),
                None => problems.push(format!("{name}: expected an integer LSN, got {}", short(v))),
            }
        }
    }
    if let Some(v) = field("replication_state") {
        match v.as_str() {
            Some(s) => info.replication_state = Some(s.to_string()),
            None => problems.push(format!(
                "replication_state: expected a string, got {}",
                short(v)
            )),
        }
    }
    if let Some(v) = field("timeline") {
        match v.as_u64().and_then(|t| u32::try_from(t).ok()) {
            Some(t) => info.timeline = t,
            None => problems.push(format!("timeline: expected a u32, got {}", short(v))),
        }
    }
    if let Some(v) = field("database_system_identifier") {
        // A string of digits, as written; an integer too (another writer's).
        let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
        match v
            .as_str()
            .filter(|s| digits(s))
            .and_then(|s| s.parse::<u64>().ok())
            .or_else(|| v.as_u64())
        {
            Some(s) => info.sysid = Some(s),
            None => problems.push(format!(
                "database_system_identifier: expected a string of digits, got {}",
                short(v)
            )),
        }
    }
    if let Some(v) = field("tags") {
        match v.as_object() {
            Some(tags) => {
                // A garbled boolean tag is named and read the conservative way:
                // `nofailover` set (never a candidate), `nosync` set (asks nothing
                // of the member's link; it may still take over in asynchronous
                // mode), `noloadbalance` and `clonefrom` not set (not a source: new
                // replicas clone the leader instead).
                let mut tag = |name: &str, garbled: bool, into: &mut bool| {
                    let Some(t) = tags.get(name).filter(|v| !v.is_null()) else {
                        return;
                    };
                    *into = parse_bool(t).unwrap_or_else(|| {
                        problems.push(format!(
                            "tags.{name}: expected a boolean, got {} (taken as {garbled})",
                            short(t)
                        ));
                        garbled
                    });
                };
                tag("nofailover", true, &mut info.tags.nofailover);
                tag("noloadbalance", false, &mut info.tags.noloadbalance);
                tag("nosync", true, &mut info.tags.nosync);
                tag("clonefrom", false, &mut info.tags.clonefrom);
                // Other writers' tags of other types are informational: left out,
                // no problem.
                let mut custom: Vec<(String, String)> = tags
                    .iter()
                    .filter(|(k, _)| {
                        !matches!(
                            k.as_str(),
                            "nofailover" | "noloadbalance" | "nosync" | "clonefrom"
                        )
                    })
                    .filter_map(|(k, v)| v.as_str().map(|s| (k.clone(), s.to_string())))
                    .collect();
                custom.sort();
                info.tags.custom = custom;
            }
            None => problems.push(format!("tags: expected an object, got {}", short(v))),
        }
    }
    if let Some(v) = field("epoch") {
        match v.as_i64() {
            Some(e) => info.epoch = Some(e),
            None => problems.push(format!("epoch: expected an i64, got {}", short(v))),
        }
    }
    // `W` and the TTLs size promote delays (DESIGN §1 step 4): a value above what any
    // validated configuration allows (`MAX_WATCHDOG`, `MAX_TTL`) is garbled like any
    // other bad value, left out (the wait is then what else is known), never read as
    // 0 (fresh-eyes review of seed 253898, R1: a `leader_ttl_seen` of 4e9 blocked
    // every failover).
    if let Some(v) = field("watchdog_timeout") {
        match v.as_u64().and_then(|w| u32::try_from(w).ok()) {
            Some(w) if w <= MAX_WATCHDOG => info.watchdog_timeout = Some(w),
            _ => problems.push(format!(
                "watchdog_timeout: expected whole seconds <= {MAX_WATCHDOG}, got {}",
                short(v)
            )),
        }
    }
    for (k, slot) in [
        ("leader_ttl", &mut info.leader_ttl),
        ("leader_ttl_seen", &mut info.leader_ttl_seen),
    ] {
        if let Some(v) = field(k) {
            match v.as_u64().and_then(|t| u32::try_from(t).ok()) {
                Some(t) if t <= MAX_TTL => *slot = Some(t),
                _ => problems.push(format!(
                    "{k}: expected whole seconds <= {MAX_TTL}, got {}",
                    short(v)
                )),
            }
        }
    }
    // Review L2: a replica judges with no more than its leader publishes, so a
    // value out of range is left out (its own and earlier values then count),
    // never read as 0 or as a huge window.
    if let Some(v) = field("poll_window") {
        match v.as_f64() {
            Some(x) if x > 0.0 && x <= f64::from(MAX_TTL) => {
                // Whole nanoseconds, as the config's own durations: the value
                // this agent publishes reads back equal (`core::window`).
                info.poll_window = Some(std::time::Duration::from_nanos((x * 1e9).round() as u64));
            }
            _ => problems.push(format!(
                "poll_window: expected seconds in (0, {MAX_TTL}], got {}",
                short(v)
            )),
        }
    }
    if let Some(v) = field("leader_lease") {
        match v.as_i64() {
            Some(l) => info.leader_lease = Some(l),
            None => problems.push(format!("leader_lease: expected an i64, got {}", short(v))),
        }
    }
    if let Some(v) = field("released") {
        match v.as_i64() {
            Some(e) => info.released = Some(e),
            None => problems.push(format!(
                "released: expected an epoch (i64), got {}",
                short(v)
            )),
        }
    }
    if let Some(v) = field("pg_healthy") {
        match v.as_bool() {
            Some(b) => info.pg_healthy = b,
            None => problems.push(format!("pg_healthy: expected a boolean, got {}", short(v))),
        }
    }
    // Absent (an older agent, or another writer) or anything but true: lacking.
    match field("acquire_record") {
        None => {}
        Some(v) => match parse_bool(v) {
            Some(b) => info.lacks_acquire_record = !b,
            None => problems.push(format!(
                "acquire_record: expected a boolean, got {} (taken as false)",
                short(v)
            )),
        },
    }
    if !problems.is_empty() {
        info.parse_error = Some(problems.join("; "));
    }
    info
}

/// Parse the `initialize` key. An empty value bound to a lease is the bootstrap
/// lock; a decimal number is the system identifier; anything else is garbage that
/// must never be bootstrapped over.
pub fn parse_initialize(raw: &[u8], lease: LeaseId) -> Initialize {
    let Ok(text) = std::str::from_utf8(raw) else {
        return Initialize::Garbage(format!("initialize is not UTF-8: {}", excerpt(raw)));
    };
    let text = text.trim();
    if text.is_empty() {
        return if lease != 0 {
            Initialize::Locked {
                lease,
                holder: String::new(),
            }
        } else {
            Initialize::Garbage("initialize is empty and bound to no lease".into())
        };
    }
    match text.parse::<u64>() {
        Ok(sysid) => Initialize::Done { sysid },
        Err(e) => Initialize::Garbage(format!(
            "initialize is not a decimal system identifier ({e}): {}",
            excerpt(raw)
        )),
    }
}

/// The `confirm_epoch` value: `{"up_to": <epoch>, "by": "<operator>", "at": "<time>"}`.
pub fn encode_confirm_epoch(c: &ConfirmEpoch) -> String {
    json!({"up_to": c.up_to, "by": c.by, "at": c.at}).to_string()
}

/// Parse `confirm_epoch`. Anything but an object with a positive integer `up_to` is
/// an error text (the caller logs it and ignores the key: no confirmation).
pub fn parse_confirm_epoch(raw: &[u8]) -> Result<ConfirmEpoch, String> {
    let v: Value =
        serde_json::from_slice(raw).map_err(|e| format!("not JSON ({e}): {}", excerpt(raw)))?;
    let Value::Object(o) = v else {
        return Err(format!("expected an object, got {}", short(&v)));
    };
    let up_to = match o.get("up_to") {
        Some(x) => x
            .as_i64()
            .filter(|e| *e > 0)
            .ok_or_else(|| format!("up_to: expected a positive epoch, got {}", short(x)))?,
        None => return Err("up_to is missing".into()),
    };
    let text = |k: &str| o.get(k).and_then(Value::as_str).unwrap_or("").to_string();
    Ok(ConfirmEpoch {
        up_to,
        by: text("by"),
        at: text("at"),
    })
}

/// The `sync` key (Patroni's form): `{"leader": "<member>", "sync_standby":
/// "<member>[,<member>...]" | null}`.
pub fn encode_sync(k: &SyncKey) -> String {
    let standbys = (!k.sync_standbys.is_empty()).then(|| k.sync_standbys.join(","));
    json!({"leader": k.leader, "sync_standby": standbys}).to_string()
}

/// Parse `sync`. `Err` names what is wrong; in synchronous mode the core then lets
/// nobody take over until a leader rewrites it (never an unsafe promotion).
/// `sync_standby` is one member name or Patroni's comma-separated list (spaces
/// around the names are dropped, duplicates kept once); an empty name inside a
/// list is refused rather than guessed at.
pub fn parse_sync(raw: &[u8]) -> Result<SyncKey, String> {
    let v: Value =
        serde_json::from_slice(raw).map_err(|e| format!("not JSON ({e}): {}", excerpt(raw)))?;
    let Value::Object(o) = v else {
        return Err(format!("expected an object, got {}", short(&v)));
    };
    let leader = match o.get("leader") {
        Some(Value::String(s)) if !s.is_empty() => s.clone(),
        Some(x) => return Err(format!("leader: expected a member name, got {}", short(x))),
        None => return Err("leader is missing".into()),
    };
    let sync_standbys = match o.get("sync_standby") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::String(s)) if s.trim().is_empty() => Vec::new(),
        Some(Value::String(s)) => {
            let mut names = Vec::new();
            for n in s.split(',') {
                let n = n.trim();
                if n.is_empty() {
                    return Err(format!("sync_standby: {s:?} has an empty name in its list"));
                }
                names.push(n.to_string());
            }
            names.sort();
            names.dedup();
            names
        }
        Some(x) => {
            return Err(format!(
                "sync_standby: expected a member name, a comma-separated list of them, \
                 or null, got {}",
                short(x)
            ));
        }
    };
    Ok(SyncKey {
        leader,
        sync_standbys,
    })
}

/// The `rollback` marker: `{"seen_revision": N, "found_revision": M, "by": "<member>",
/// "at": "<RFC 3339>", "reason": "<what was seen>"}`.
pub fn encode_rollback(seen: &RollbackSeen, by: &str, at: &str) -> String {
    json!({
        "seen_revision": seen.seen_revision,
        "found_revision": seen.found_revision,
        "by": by,
        "at": at,
        "reason": seen.reason,
    })
    .to_string()
}

/// Parse the `rollback` marker at `key`. Never fails: whatever the key holds, it is
/// a marker (a garbled one must never allow a promotion); what did not parse is in
/// `parse_error` for the caller to log.
pub fn parse_rollback(key: &str, raw: &[u8]) -> RollbackMarker {
    let mut m = RollbackMarker {
        key: key.to_string(),
        ..RollbackMarker::default()
    };
    let obj = match serde_json::from_slice::<Value>(raw) {
        Ok(Value::Object(o)) => o,
        Ok(other) => {
            m.parse_error = Some(format!(
                "expected a JSON object, got {}: {}",
                type_name(&other),
                excerpt(raw)
            ));
            return m;
        }
        Err(e) => {
            m.parse_error = Some(format!("not JSON ({e}): {}", excerpt(raw)));
            return m;
        }
    };
    let mut problems = Vec::new();
    for (name, slot) in [
        ("seen_revision", &mut m.seen_revision),
        ("found_revision", &mut m.found_revision),
    ] {
        match obj.get(name) {
            Some(v) => match v.as_i64().filter(|r| *r >= 0) {
                Some(r) => *slot = r,
                None => problems.push(format!("{name}: expected a revision, got {}", short(v))),
            },
            None => problems.push(format!("{name} is missing")),
        }
    }
    for (name, slot) in [
        ("by", &mut m.by),
        ("at", &mut m.at),
        ("reason", &mut m.reason),
    ] {
        match obj.get(name) {
            Some(Value::String(t)) => *slot = t.clone(),
            // `reason` is ours, not in every writer's value.
            None if name == "reason" => {}
            None => problems.push(format!("{name} is missing")),
            Some(v) => problems.push(format!("{name}: expected a string, got {}", short(v))),
        }
    }
    if !problems.is_empty() {
        m.parse_error = Some(problems.join("; "));
    }
    m
}

/// One history entry as Patroni writes it: `[timeline, lsn, reason, timestamp, new_leader]`.
pub fn history_entry_json(e: &HistoryEntry) -> Value {
    json!([e.timeline, e.lsn, e.reason, e.timestamp, e.new_leader])
}

/// Parse `history`. Malformed entries are skipped (with a problem each); a value
/// that is not a JSON list yields no entries and one problem.
pub fn parse_history(raw: &[u8]) -> (Vec<HistoryEntry>, Vec<String>) {
    let mut problems = Vec::new();
    let list = match serde_json::from_slice::<Value>(raw) {
        Ok(Value::Array(a)) => a,
        Ok(other) => {
            problems.push(format!(
                "history is JSON but not a list ({}): {}",
                type_name(&other),
                excerpt(raw)
            ));
            return (Vec::new(), problems);
        }
        Err(e) => {
            problems.push(format!("history is not JSON ({e}): {}", excerpt(raw)));
            return (Vec::new(), problems);
        }
    };
    let mut out = Vec::with_capacity(list.len());
    for (i, item) in list.iter().enumerate() {
        match parse_history_entry(item) {
            Ok((entry, mut p)) => {
                problems.extend(p.drain(..).map(|s| format!("history[{i}]: {s}")));
                out.push(entry);
            }
            Err(why) => problems.push(format!("history[{i}] skipped: {why}")),
        }
    }
    (out, problems)
}

/// One entry: timeline and LSN are required (an entry without them says nothing);
/// the texts default to "" with a problem noted when of the wrong type.
fn parse_history_entry(v: &Value) -> Result<(HistoryEntry, Vec<String>), String> {
    let Some(a) = v.as_array() else {
        return Err(format!("expected a list, got {}", short(v)));
    };
    if a.len() < 2 {
        return Err(format!(
            "expected at least [timeline, lsn], got {}",
            short(v)
        ));
    }
    // A timeline is from 1, and the one after it must be one too: PostgreSQL's
    // TimeLineID is a u32 (review of bad input, finding 3: u32::MAX overflowed
    // `newest_timeline`).
    let timeline = a[0]
        .as_u64()
        .and_then(|t| u32::try_from(t).ok())
        .filter(|t| (1..u32::MAX).contains(t))
        .ok_or_else(|| {
            format!(
                "timeline: expected a timeline from 1 to {}, got {}",
                u32::MAX - 1,
                short(&a[0])
            )
        })?;
    let lsn = parse_lsn_value(&a[1])
        .ok_or_else(|| format!("lsn: expected an integer LSN, got {}", short(&a[1])))?;
    let mut problems = Vec::new();
    let mut text = |i: usize, name: &str| -> String {
        match a.get(i) {
            None | Some(Value::Null) => String::new(),
            Some(Value::String(s)) => s.clone(),
            // Patroni writes a number for the timestamp in some versions.
            Some(n @ Value::Number(_)) => n.to_string(),
            Some(other) => {
                problems.push(format!("{name}: expected a string, got {}", short(other)));
                String::new()
            }
        }
    };
    let reason = text(2, "reason");
    let timestamp = text(3, "timestamp");
    let new_leader = text(4, "new_leader");
    Ok((
        HistoryEntry {
            timeline,
            lsn,
            reason,
            timestamp,
            new_leader,
        },
        problems,
    ))
}

/// The new `history` value: the old list (kept verbatim, even entries we cannot
/// parse, so we never destroy another writer's data) with `entry` appended. A value
/// that is not a list cannot be appended to: it is replaced, and the problem
/// returned for the caller to log.
pub fn append_history_value(old: Option<&[u8]>, entry: &HistoryEntry) -> (String, Option<String>) {
    let mut problem = None;
    let mut list = match old.map(serde_json::from_slice::<Value>) {
        None => Vec::new(),
        Some(Ok(Value::Array(a))) => a,
        Some(_) => {
            problem = Some(format!(
                "history was not a JSON list, replaced: {}",
                excerpt(old.unwrap_or_default())
            ));
            Vec::new()
        }
    };
    list.push(history_entry_json(entry));
    (Value::Array(list).to_string(), problem)
}

/// The `status` key the leader writes (Patroni's form, DESIGN §4): `{"optime": N}`,
/// with `slots` the restart positions of the physical slots it keeps (`{"pg2": N,
/// "barman": N}`), which replicas copy ahead of a failover, and `retain_slots`
/// the member slots it keeps (its members', its own, and departed members' within
/// `member_slots_ttl`), which the next leader keeps too: both Patroni's fields.
/// `None`: no such field (replicas then leave their slots alone).
pub fn encode_status(
    optime: Lsn,
    slots: Option<&[(String, Lsn)]>,
    retain: Option<&[String]>,
) -> String {
    let mut v = json!({ "optime": optime });
    if let Some(s) = slots {
        let map: serde_json::Map<String, Value> =
            s.iter().map(|(n, l)| (n.clone(), json!(l))).collect();
        v["slots"] = Value::Object(map);
    }
    if let Some(r) = retain {
        v["retain_slots"] = json!(r);
    }
    v.to_string()
}

/// The `status` key as read: the leader's WAL position and, when it published
/// them, its slots' positions, sorted by name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatusValue {
    pub optime: Lsn,
    /// `None`: no `slots` field (an older agent, or nothing kept yet), or one that
    /// does not parse (`slots_problem` says why).
    pub slots: Option<Vec<(String, Lsn)>>,
    /// `retain_slots`, sorted (`None`: absent, or garbage `slots_problem` names).
    pub retain_slots: Option<Vec<String>>,
    pub slots_problem: Option<String>,
}

/// The `status` key: `optime`, `slots`, `retain_slots` (other fields Patroni
/// stores, such as `failsafe`, are ignored). `Err`
/// names what is wrong with a value another writer left; a `slots` field that
/// does not parse leaves the optime usable and is named in `slots_problem`.
pub fn parse_status(raw: &[u8]) -> Result<StatusValue, String> {
    let v: Value = serde_json::from_slice(raw)
        .map_err(|e| format!("status value is not JSON ({e}): {}", excerpt(raw)))?;
    let Some(obj) = v.as_object() else {
        return Err(format!(
            "status value is JSON but not an object ({}): {}",
            type_name(&v),
            excerpt(raw)
        ));
    };
    let optime = match obj.get("optime") {
        Some(o) => parse_lsn_value(o)
            .ok_or_else(|| format!("status optime: expected an integer LSN, got {}", short(o)))?,
        None => return Err(format!("status value has no optime: {}", excerpt(raw))),
    };
    let (slots, mut slots_problem) = match obj.get("slots") {
        None | Some(Value::Null) => (None, None),
        Some(s) => match parse_status_slots(s) {
            Ok(l) => (Some(l), None),
            Err(e) => (None, Some(e)),
        },
    };
    let retain_slots = match obj.get("retain_slots") {
        None | Some(Value::Null) => None,
        Some(r) => match parse_retain_slots(r) {
            Ok(l) => Some(l),
            Err(e) => {
                slots_problem = Some(slots_problem.map_or(e.clone(), |p| format!("{p}; {e}")));
                None
            }
        },
    };
    Ok(StatusValue {
        optime,
        slots,
        retain_slots,
        slots_problem,
    })
}

/// `["pg1", "pg2", ...]`: every name one PostgreSQL accepts.
fn parse_retain_slots(v: &Value) -> Result<Vec<String>, String> {
    let Some(list) = v.as_array() else {
        return Err(format!(
            "status retain_slots: expected a list of slot names, found {}",
            type_name(v)
        ));
    };
    if list.len() > MAX_STATUS_SLOTS {
        return Err(format!(
            "status retain_slots: {} names, more than the {MAX_STATUS_SLOTS} any cluster keeps",
            list.len()
        ));
    }
    let mut out = Vec::with_capacity(list.len());
    for n in list {
        match n.as_str() {
            Some(s) if crate::config::valid_slot_name(s) => out.push(s.to_string()),
            _ => {
                return Err(format!(
                    "status retain_slots: {} is not a replication slot name (1 to 63 of a-z, 0-9, _)",
                    short(n)
                ));
            }
        }
    }
    out.sort();
    out.dedup();
    Ok(out)
}

/// The most slots a `status` key may list: PostgreSQL's `max_replication_slots`
/// is rarely above a few dozen; a longer list is another writer's garbage, and
/// replicas would make slots for it until the server refused.
pub const MAX_STATUS_SLOTS: usize = 1000;

/// `{"<slot>": <LSN>, ...}`: every name one PostgreSQL accepts, every position an
/// LSN; anything else refuses the whole list (a replica then leaves its slots
/// alone rather than mirror half of it).
fn parse_status_slots(v: &Value) -> Result<Vec<(String, Lsn)>, String> {
    let Some(map) = v.as_object() else {
        return Err(format!(
            "status slots: expected an object of slot names, found {}",
            type_name(v)
        ));
    };
    if map.len() > MAX_STATUS_SLOTS {
        return Err(format!(
            "status slots: {} slots, more than the {MAX_STATUS_SLOTS} any cluster keeps",
            map.len()
        ));
    }
    let mut out = Vec::with_capacity(map.len());
    for (name, lsn) in map {
        if !crate::config::valid_slot_name(name) {
            return Err(format!(
                "status slots: {:?} is not a replication slot name (1 to 63 of a-z, 0-9, _)",
                name.chars().take(EXCERPT).collect::<String>()
            ));
        }
        let Some(l) = parse_lsn_value(lsn) else {
            return Err(format!(
                "status slots: {name}: expected an integer LSN, got {}",
                short(lsn)
            ));
        };
        out.push((name.clone(), l));
    }
    out.sort();
    Ok(out)
}

/// An LSN as an integer (Patroni) or as PostgreSQL's text form `X/Y` (hex).
fn parse_lsn_value(v: &Value) -> Option<Lsn> {
    match v {
        Value::Number(n) => n.as_u64(),
        Value::String(s) => crate::core::model::parse_lsn(s),
        _ => None,
    }
}

/// Booleans as Patroni accepts them in tags: JSON booleans or the usual words.
fn parse_bool(v: &Value) -> Option<bool> {
    match v {
        Value::Bool(b) => Some(*b),
        Value::String(s) => match s.to_ascii_lowercase().as_str() {
            "true" | "on" | "yes" | "1" => Some(true),
            "false" | "off" | "no" | "0" => Some(false),
            _ => None,
        },
        _ => None,
    }
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

/// A value printed short for a problem text.
fn short(v: &Value) -> String {
    let s = v.to_string();
    if s.chars().count() > EXCERPT {
        let mut t: String = s.chars().take(EXCERPT).collect();
        t.push('…');
        t
    } else {
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn confirm_epoch_round_trip_and_garbage() {
        let c = ConfirmEpoch {
            up_to: 17,
            by: "alice".into(),
            at: "2026-01-01T00:00:00Z".into(),
        };
        assert_eq!(
            parse_confirm_epoch(encode_confirm_epoch(&c).as_bytes()),
            Ok(c)
        );
        for bad in [
            &b"x"[..],
            b"[]",
            b"{}",
            b"{\"up_to\": \"7\"}",
            b"{\"up_to\": -1}",
            b"\xff",
        ] {
            assert!(parse_confirm_epoch(bad).is_err(), "{bad:?}");
        }
    }
    use crate::core::model::Tags;

    #[test]
    fn sync_key_round_trip_and_garbage() {
        let k = SyncKey {
            leader: "pg1".into(),
            sync_standbys: vec!["pg-2".into()],
        };
        assert_eq!(encode_sync(&k), r#"{"leader":"pg1","sync_standby":"pg-2"}"#);
        assert_eq!(parse_sync(encode_sync(&k).as_bytes()), Ok(k));
        let two = SyncKey {
            leader: "pg1".into(),
            sync_standbys: vec!["pg2".into(), "pg3".into()],
        };
        assert_eq!(
            encode_sync(&two),
            r#"{"leader":"pg1","sync_standby":"pg2,pg3"}"#
        );
        assert_eq!(parse_sync(encode_sync(&two).as_bytes()), Ok(two.clone()));
        // Patroni's list, with spaces, unsorted and a name twice: the same set.
        assert_eq!(
            parse_sync(br#"{"leader":"pg1","sync_standby":" pg3 ,pg2,pg3"}"#),
            Ok(two)
        );
        let none = SyncKey {
            leader: "pg1".into(),
            sync_standbys: Vec::new(),
        };
        assert_eq!(parse_sync(encode_sync(&none).as_bytes()), Ok(none.clone()));
        // Patroni writes null; an empty string means the same.
        assert_eq!(
            parse_sync(br#"{"leader":"pg1","sync_standby":""}"#),
            Ok(none)
        );
        for (raw, names) in [
            (&b"\xff"[..], "not JSON"),
            (b"[1]", "expected an object"),
            (br#"{"sync_standby":"pg2"}"#, "leader is missing"),
            (br#"{"leader":7}"#, "leader"),
            (br#"{"leader":""}"#, "leader"),
            (
                br#"{"leader":"pg1","sync_standby":["pg2"]}"#,
                "sync_standby",
            ),
            (
                br#"{"leader":"pg1","sync_standby":"pg2,,pg3"}"#,
                "empty name",
            ),
            (br#"{"leader":"pg1","sync_standby":"pg2,"}"#, "empty name"),
        ] {
            let e = parse_sync(raw).expect_err(&String::from_utf8_lossy(raw));
            assert!(e.contains(names), "{e} should name {names}");
        }
    }

    #[test]
    fn rollback_round_trip_and_garbage_is_still_a_marker() {
        let seen = RollbackSeen {
            seen_revision: 316,
            found_revision: 4,
            reason: "a read's revision went from 316 back to 4".into(),
        };
        let m = parse_rollback(
            "/service/x/rollback",
            encode_rollback(&seen, "pg2", "2026-01-01T00:00:00Z").as_bytes(),
        );
        assert_eq!(
            m,
            RollbackMarker {
                key: "/service/x/rollback".into(),
                seen_revision: 316,
                found_revision: 4,
                by: "pg2".into(),
                at: "2026-01-01T00:00:00Z".into(),
                reason: seen.reason.clone(),
                parse_error: None,
            }
        );
        // The brief's form, without `reason`, parses cleanly.
        let m = parse_rollback(
            "k",
            br#"{"seen_revision":9,"found_revision":2,"by":"a","at":"t"}"#,
        );
        assert_eq!(
            (m.seen_revision, m.found_revision, m.parse_error),
            (9, 2, None)
        );
        for bad in [
            &b""[..],
            b"x",
            b"[]",
            b"{}",
            b"null",
            b"\xff",
            br#"{"seen_revision":"9","found_revision":2,"by":"a","at":"t"}"#,
            br#"{"seen_revision":-1,"found_revision":2,"by":"a","at":"t"}"#,
            br#"{"seen_revision":9,"found_revision":2,"by":7,"at":"t"}"#,
        ] {
            let m = parse_rollback("/service/x/rollback", bad);
            assert!(m.parse_error.is_some(), "{bad:?}");
            assert_eq!(m.key, "/service/x/rollback");
        }
    }

    fn full() -> MemberInfo {
        MemberInfo {
            conn_url: "postgres://127.0.0.1:5432/postgres".into(),
            api_url: "http://127.0.0.1:8008/patroni".into(),
            state: "running".into(),
            role: "primary".into(),
            version: "0.1.0".into(),
            xlog_location: 0x1_0300_0060,
            receive_lsn: Some(0x1_0300_0070),
            replay_lsn: Some(0x1_0300_0050),
            replication_state: Some("streaming".into()),
            timeline: 3,
            sysid: Some(7_298_031_012_345_678_901),
            tags: Tags {
                nofailover: true,
                noloadbalance: true,
                nosync: true,
                clonefrom: true,
                custom: vec![("dc".into(), "east".into())],
            },
            epoch: Some(42),
            watchdog_timeout: Some(13),
            leader_lease: Some(0x7a2b_0000_1234),
            leader_ttl: Some(30),
            leader_ttl_seen: Some(60),
            poll_window: Some(std::time::Duration::from_millis(300)),
            pg_healthy: true,
            released: Some(41),
            lacks_acquire_record: false,
            parse_error: None,
        }
    }

    /// Finding L1: this version's member key says its acquisitions write the
    /// record; a key without the field (an older agent's, 2d59b46's exact form
    /// below), with it false or garbled, or not a JSON object, lacks it and still
    /// parses. Before the field existed nothing told the two versions apart (both
    /// publish 0.1.0): this test did not compile, and the old JSON read the same.
    #[test]
    fn member_acquire_record_capability() {
        let v: Value = serde_json::from_str(&encode_member(&full())).expect("our own JSON");
        assert_eq!(v["acquire_record"], json!(true));
        assert!(!parse_member(encode_member(&full()).as_bytes()).lacks_acquire_record);
        let old = br#"{"conn_url":"postgres://127.0.0.1:5432/postgres","api_url":"http://127.0.0.1:8008/patroni","state":"running","role":"replica","version":"0.1.0","xlog_location":50331744,"timeline":1,"tags":{"nofailover":false},"epoch":7,"pg_healthy":true}"#;
        let m = parse_member(old);
        assert!(m.lacks_acquire_record);
        assert_eq!(m.parse_error, None, "an older agent's key is no garbage");
        assert_eq!(
            (m.role.as_str(), m.epoch, m.version.as_str()),
            ("replica", Some(7), "0.1.0")
        );
        for (raw, problem) in [
            (&br#"{"role":"replica","acquire_record":false}"#[..], false),
            (br#"{"role":"replica","acquire_record":"x"}"#, true),
            (br#"{"role":"replica","acquire_record":null}"#, false),
            (b"garbage", true),
            (b"[1]", true),
        ] {
            let m = parse_member(raw);
            assert!(m.lacks_acquire_record, "{raw:?}");
            assert_eq!(m.parse_error.is_some(), problem, "{raw:?}");
        }
        assert!(!parse_member(br#"{"acquire_record":"true"}"#).lacks_acquire_record);
    }

    #[test]
    fn member_round_trip() {
        let m = full();
        assert_eq!(parse_member(encode_member(&m).as_bytes()), m);
        let d = MemberInfo::default();
        assert_eq!(parse_member(encode_member(&d).as_bytes()), d);
    }

    #[test]
    fn member_json_uses_patroni_names_and_integer_xlog() {
        let v: Value = serde_json::from_str(&encode_member(&full())).expect("our own JSON");
        assert_eq!(v["xlog_location"], json!(0x1_0300_0060u64));
        assert_eq!(v["role"], json!("primary"));
        assert_eq!(v["tags"]["nofailover"], json!(true));
        assert_eq!(v["tags"]["noloadbalance"], json!(true));
        assert_eq!(v["tags"]["dc"], json!("east"));
        assert_eq!(v["receive_lsn"], json!(0x1_0300_0070u64));
        assert_eq!(v["replay_lsn"], json!(0x1_0300_0050u64));
        assert_eq!(v["replication_state"], json!("streaming"));
        assert_eq!(v["epoch"], json!(42));
        // A primary's key carries no replica positions.
        let d: Value =
            serde_json::from_str(&encode_member(&MemberInfo::default())).expect("our own JSON");
        assert!(d.get("receive_lsn").is_none() && d.get("replay_lsn").is_none());
        assert!(d["tags"].get("noloadbalance").is_none());
    }

    #[test]
    fn status_key_round_trip_patroni_form_and_garbage() {
        let plain =
            parse_status(encode_status(0x3_0000_0028, None, None).as_bytes()).expect("ours");
        assert_eq!((plain.optime, plain.slots), (0x3_0000_0028, None));
        assert_eq!(plain.retain_slots, None);
        let slots = vec![("barman".to_string(), 0x3_0000_0000), ("pg2".into(), 7)];
        let retain = vec!["pg1".to_string(), "pg2".into(), "pg3".into()];
        let with =
            parse_status(encode_status(9, Some(&slots), Some(&retain)).as_bytes()).expect("ours");
        assert_eq!((with.optime, with.slots), (9, Some(slots)));
        assert_eq!(with.retain_slots, Some(retain));
        let empty = parse_status(encode_status(9, Some(&[]), None).as_bytes()).expect("ours");
        assert_eq!(empty.slots, Some(Vec::new()), "an empty list is a list");
        // Patroni's own value, with slots and retain_slots.
        let patroni = br#"{"optime":67108960,"slots":{"pg2":67108960},"retain_slots":["pg2"]}"#;
        let v = parse_status(patroni).expect("Patroni's");
        assert_eq!(v.optime, 67_108_960);
        assert_eq!(v.slots, Some(vec![("pg2".to_string(), 67_108_960)]));
        assert_eq!(v.retain_slots, Some(vec!["pg2".to_string()]));
        for (bad, what) in [
            (&br#"{"optime":5,"retain_slots":"pg2"}"#[..], "a string"),
            (br#"{"optime":5,"retain_slots":["pg2",3]}"#, "3 is not"),
            (br#"{"optime":5,"retain_slots":["a-b"]}"#, "a-b"),
        ] {
            let v = parse_status(bad).expect("the optime is still read");
            assert_eq!((v.optime, &v.retain_slots), (5, &None));
            let why = v.slots_problem.expect("named");
            assert!(why.contains("retain_slots") && why.contains(what), "{why}");
        }
        assert_eq!(
            parse_status(br#"{"optime":"0/4000060"}"#).map(|v| v.optime),
            Ok(0x400_0060)
        );
        // A `slots` field that does not parse: the optime stays, the list is
        // dropped as a whole, and the problem names what is wrong.
        for (bad, what) in [
            (&br#"{"optime":5,"slots":[1]}"#[..], "a list"),
            (br#"{"optime":5,"slots":{"Pg2":1}}"#, "\"Pg2\""),
            (
                br#"{"optime":5,"slots":{"pg2":1,"x":-3}}"#,
                "x: expected an integer LSN",
            ),
            (br#"{"optime":5,"slots":{"pg2":"zz"}}"#, "pg2: expected"),
        ] {
            let v = parse_status(bad).expect("the optime is still read");
            assert_eq!((v.optime, &v.slots), (5, &None));
            let why = v.slots_problem.expect("named");
            assert!(why.contains("status slots") && why.contains(what), "{why}");
        }
        for bad in [
            &b"garbage"[..],
            b"",
            b"[1]",
            b"{}",
            br#"{"optime":-1}"#,
            br#"{"optime":"x"}"#,
            b"{\"optime\":\xff}",
        ] {
            let e = parse_status(bad).expect_err("garbage is refused");
            assert!(e.contains("status"), "{e}");
        }
    }

    #[test]
    fn member_patroni_written_value_parses() {
        let raw = br#"{"conn_url":"postgres://10.0.0.1:5432/postgres","api_url":"http://10.0.0.1:8008/patroni","state":"running","role":"replica","version":"3.2.0","xlog_location":50331744,"timeline":2,"tags":{"nofailover":false,"clonefrom":true}}"#;
        let m = parse_member(raw);
        assert_eq!(m.parse_error, None);
        assert_eq!(m.xlog_location, 50_331_744);
        assert_eq!(m.timeline, 2);
        assert_eq!(m.role, "replica");
        assert_eq!(m.epoch, None);
        assert!(m.tags.clonefrom && m.tags.custom.is_empty());
        // A garbled clonefrom reads as not a source, and is named.
        let m = parse_member(br#"{"tags":{"clonefrom":"maybe"}}"#);
        assert!(!m.tags.clonefrom);
        assert!(
            m.parse_error
                .as_deref()
                .is_some_and(|e| e.contains("tags.clonefrom")),
            "{:?}",
            m.parse_error
        );
    }

    #[test]
    fn member_garbage_json() {
        for raw in [
            &b"not json"[..],
            b"",
            b"{",
            b"[1,2]",
            b"42",
            b"null",
            b"\"s\"",
        ] {
            let m = parse_member(raw);
            assert!(m.parse_error.is_some(), "{raw:?}");
            assert_eq!(m.conn_url, "");
            assert!(!m.pg_healthy);
        }
    }

    #[test]
    fn member_non_utf8() {
        let m = parse_member(b"{\"role\":\"\xff\xfe\"}");
        assert!(m.parse_error.expect("a problem").contains("UTF-8"));
        assert_eq!(m.role, "");
    }

    #[test]
    fn member_wrong_types_keep_the_good_fields() {
        let raw = br#"{"role":7,"state":"running","timeline":"two","xlog_location":-5,"epoch":"9","pg_healthy":"yes","tags":[],"watchdog_timeout":1.5}"#;
        let m = parse_member(raw);
        let err = m.parse_error.clone().expect("problems");
        for f in [
            "role",
            "timeline",
            "xlog_location",
            "epoch",
            "pg_healthy",
            "tags",
            "watchdog_timeout",
        ] {
            assert!(err.contains(f), "{f} not named in {err}");
        }
        assert_eq!(m.state, "running");
        assert_eq!(m.role, "");
        assert_eq!(m.timeline, 0);
        assert_eq!(m.epoch, None);
        assert!(!m.pg_healthy);
    }

    /// Seed 253898 review: `leader_ttl_seen` is a lower bound other writers may
    /// garble; a bad value is left out with a problem, never read as a number.
    #[test]
    fn member_leader_ttl_seen_garbled_is_left_out() {
        for bad in [
            &br#"{"leader_ttl_seen":"30"}"#[..],
            br#"{"leader_ttl_seen":-1}"#,
            br#"{"leader_ttl_seen":1.5}"#,
            br#"{"leader_ttl_seen":1e300}"#,
            br#"{"leader_ttl_seen":4294967296}"#,
            br#"{"leader_ttl_seen":[30]}"#,
        ] {
            let m = parse_member(bad);
            assert_eq!(m.leader_ttl_seen, None, "{}", excerpt(bad));
            let err = m.parse_error.expect("a problem");
            assert!(err.contains("leader_ttl_seen"), "{err}");
        }
        let m = parse_member(br#"{"leader_ttl_seen":30,"leader_ttl":null}"#);
        assert_eq!((m.leader_ttl_seen, m.parse_error), (Some(30), None));
    }

    /// The data directory's system identifier is a string (a double loses its low
    /// digits: 7298031012345678901 reads back as ...8900 in JavaScript or jq); an
    /// integer another writer left reads too; anything else is left out with a
    /// problem, never read as some other identifier.
    #[test]
    fn member_system_identifier_is_a_string_and_garbled_is_left_out() {
        let v: Value = serde_json::from_str(&encode_member(&full())).expect("our own JSON");
        assert_eq!(
            v["database_system_identifier"],
            json!("7298031012345678901")
        );
        let m = parse_member(br#"{"database_system_identifier":7298031012345678901}"#);
        assert_eq!(
            (m.sysid, m.parse_error),
            (Some(7_298_031_012_345_678_901), None)
        );
        for bad in [
            &br#"{"database_system_identifier":"72980310123456789012"}"#[..],
            br#"{"database_system_identifier":"-1"}"#,
            br#"{"database_system_identifier":"+1"}"#,
            br#"{"database_system_identifier":" 1"}"#,
            br#"{"database_system_identifier":""}"#,
            br#"{"database_system_identifier":"0x65"}"#,
            br#"{"database_system_identifier":1.5}"#,
            br#"{"database_system_identifier":[1]}"#,
        ] {
            let m = parse_member(bad);
            assert_eq!(m.sysid, None, "{}", excerpt(bad));
            let err = m.parse_error.expect("a problem");
            assert!(err.contains("database_system_identifier"), "{err}");
        }
        let mut empty = full();
        empty.sysid = None;
        let v: Value = serde_json::from_str(&encode_member(&empty)).expect("our own JSON");
        assert_eq!(v.get("database_system_identifier"), None);
    }

    /// Review L2: a replica judges with no more than its leader's `poll_window`, so a
    /// garbled one is left out with a problem (the replica's own value and its hold
    /// then count), never read as 0 or as a huge window; values this agent writes read
    /// back to the nanosecond (a leader compares its own with what it applied).
    #[test]
    fn member_poll_window_garbled_is_left_out_and_its_own_reads_back_exactly() {
        for bad in [
            &br#"{"poll_window":"0.75"}"#[..],
            br#"{"poll_window":0}"#,
            br#"{"poll_window":-0.5}"#,
            br#"{"poll_window":3601}"#,
            br#"{"poll_window":1e300}"#,
            br#"{"poll_window":[1]}"#,
        ] {
            let m = parse_member(bad);
            assert_eq!(m.poll_window, None, "{}", excerpt(bad));
            let err = m.parse_error.expect("a problem");
            assert!(err.contains("poll_window"), "{err}");
        }
        for ns in [
            300_000_000u64,
            750_000_000,
            1_100_000_000,
            3_000_000_001,
            86_399_999_999,
        ] {
            let w = std::time::Duration::from_nanos(ns).min(std::time::Duration::from_secs(3600));
            let info = MemberInfo {
                poll_window: Some(w),
                ..MemberInfo::default()
            };
            let back = parse_member(encode_member(&info).as_bytes());
            assert_eq!(back.poll_window, Some(w), "{ns} ns");
        }
    }

    /// Fresh-eyes review of seed 253898, R1: a TTL or `W` no validated configuration
    /// allows (4e9 parses as a u32) is garbled like any bad value: left out, with a
    /// problem naming the field (the view logs it once, naming the member key).
    #[test]
    fn member_ttls_and_watchdog_above_the_caps_are_left_out() {
        for (bad, field) in [
            (&br#"{"leader_ttl_seen":4000000000}"#[..], "leader_ttl_seen"),
            (br#"{"leader_ttl_seen":3601}"#, "leader_ttl_seen"),
            (br#"{"leader_ttl":4000000000}"#, "leader_ttl"),
            (br#"{"leader_ttl":3601}"#, "leader_ttl"),
            (br#"{"watchdog_timeout":4294967295}"#, "watchdog_timeout"),
            (br#"{"watchdog_timeout":1801}"#, "watchdog_timeout"),
        ] {
            let m = parse_member(bad);
            assert_eq!(
                (m.leader_ttl_seen, m.leader_ttl, m.watchdog_timeout),
                (None, None, None),
                "{}",
                excerpt(bad)
            );
            let err = m.parse_error.expect("a problem");
            assert!(err.contains(field), "{err}");
        }
        let m =
            parse_member(br#"{"leader_ttl_seen":3600,"leader_ttl":3600,"watchdog_timeout":1800}"#);
        assert_eq!(
            (
                m.leader_ttl_seen,
                m.leader_ttl,
                m.watchdog_timeout,
                m.parse_error
            ),
            (Some(MAX_TTL), Some(MAX_TTL), Some(MAX_WATCHDOG), None)
        );
    }

    #[test]
    fn member_huge_numbers() {
        let raw = br#"{"xlog_location":99999999999999999999999,"timeline":4294967296,"epoch":1e300,"watchdog_timeout":18446744073709551615,"leader_lease":9223372036854775808}"#;
        let m = parse_member(raw);
        let err = m.parse_error.clone().expect("problems");
        assert!(err.contains("xlog_location"), "{err}");
        assert!(err.contains("timeline"), "{err}");
        assert!(err.contains("epoch"), "{err}");
        assert!(err.contains("watchdog_timeout"), "{err}");
        assert!(err.contains("leader_lease"), "{err}");
        assert_eq!(m.xlog_location, 0);
        assert_eq!(m.leader_lease, None);
        // The largest u64 is a valid LSN.
        let m = parse_member(br#"{"xlog_location":18446744073709551615}"#);
        assert_eq!(m.parse_error, None);
        assert_eq!(m.xlog_location, u64::MAX);
    }

    #[test]
    fn member_xlog_location_forms() {
        assert_eq!(parse_member(br#"{"xlog_location":123}"#).xlog_location, 123);
        assert_eq!(
            parse_member(br#"{"xlog_location":"1/3000060"}"#).xlog_location,
            0x1_0300_0060
        );
        let m = parse_member(br#"{"xlog_location":"zz"}"#);
        assert!(m.parse_error.is_some());
        let m = parse_member(br#"{"xlog_location":12.5}"#);
        assert!(m.parse_error.is_some());
    }

    #[test]
    fn member_nulls_are_absent_and_garbled_nofailover_is_conservative() {
        let m = parse_member(br#"{"epoch":null,"tags":{"nofailover":null}}"#);
        assert_eq!(m.parse_error, None);
        assert!(!m.tags.nofailover);
        let m = parse_member(br#"{"tags":{"nofailover":"maybe"}}"#);
        assert!(m.tags.nofailover);
        assert!(m.parse_error.is_some());
        assert!(
            parse_member(br#"{"tags":{"nofailover":"on"}}"#)
                .tags
                .nofailover
        );
        // `nosync` alike: garbled reads as set, and is named.
        let m = parse_member(br#"{"tags":{"nosync":[1]}}"#);
        assert!(m.tags.nosync);
        assert!(
            m.parse_error
                .as_deref()
                .is_some_and(|e| e.contains("tags.nosync")),
            "{:?}",
            m.parse_error
        );
        let m = parse_member(br#"{"tags":{"nosync":true,"dc":"east"}}"#);
        assert!(m.tags.nosync && m.parse_error.is_none());
        assert_eq!(m.tags.custom, vec![("dc".to_string(), "east".to_string())]);
    }

    #[test]
    fn member_deep_nesting_does_not_overflow() {
        let raw = "[".repeat(100_000);
        assert!(parse_member(raw.as_bytes()).parse_error.is_some());
    }

    #[test]
    fn initialize_forms() {
        assert_eq!(
            parse_initialize(b"7298031012345678901", 0),
            Initialize::Done {
                sysid: 7_298_031_012_345_678_901
            }
        );
        assert_eq!(
            parse_initialize(b"", 77),
            Initialize::Locked {
                lease: 77,
                holder: String::new()
            }
        );
        assert!(matches!(parse_initialize(b"", 0), Initialize::Garbage(_)));
        assert!(matches!(
            parse_initialize(b"abc", 0),
            Initialize::Garbage(_)
        ));
        assert!(matches!(parse_initialize(b"-1", 0), Initialize::Garbage(_)));
        assert!(matches!(
            parse_initialize(b"99999999999999999999999", 0),
            Initialize::Garbage(_)
        ));
        assert!(matches!(
            parse_initialize(b"\xff\xfe", 5),
            Initialize::Garbage(_)
        ));
        assert!(matches!(
            parse_initialize(b"abc", 5),
            Initialize::Garbage(_)
        ));
    }

    #[test]
    fn history_patroni_forms() {
        let raw = br#"[[1,50331808,"no recovery target specified","2024-01-01T00:00:00+00:00","pg2"],[2,67109000,"no recovery target specified"],[3,"0/5000000","x",1700000000.5,"pg1"]]"#;
        let (h, p) = parse_history(raw);
        assert!(p.is_empty(), "{p:?}");
        assert_eq!(h.len(), 3);
        assert_eq!(h[0].timeline, 1);
        assert_eq!(h[0].new_leader, "pg2");
        assert_eq!(h[1].timestamp, "");
        assert_eq!(h[2].lsn, 0x500_0000);
    }

    #[test]
    fn history_malformed_entries_are_skipped() {
        let raw = br#"[[1,100,"a","t","pg1"],"junk",[],[2],["x",5],[-1,5],[4294967296,5],[4294967295,5],[0,5],[3,-7],[4,200,{"a":1},"t","pg3"],[5,300]]"#;
        let (h, p) = parse_history(raw);
        let tls: Vec<u32> = h.iter().map(|e| e.timeline).collect();
        assert_eq!(tls, vec![1, 4, 5]);
        assert_eq!(h[1].reason, "");
        // 9 skipped entries (u32::MAX and 0 are no timelines: the next of the
        // first overflowed, review of bad input, 3) and one wrong-typed reason.
        assert_eq!(p.len(), 10, "{p:?}");
    }

    #[test]
    fn history_garbage_value() {
        for raw in [&b"{}"[..], b"nope", b"", b"\xff", b"12"] {
            let (h, p) = parse_history(raw);
            assert!(h.is_empty());
            assert_eq!(p.len(), 1, "{raw:?}");
        }
    }

    #[test]
    fn history_append_keeps_foreign_entries() {
        let e = HistoryEntry {
            timeline: 2,
            lsn: 1000,
            reason: "failover".into(),
            timestamp: "2026-01-01T00:00:00Z".into(),
            new_leader: "pg2".into(),
        };
        let (v, p) = append_history_value(Some(br#"[[1,5,"r","t","pg1"],"junk"]"#), &e);
        assert!(p.is_none());
        assert_eq!(
            v,
            r#"[[1,5,"r","t","pg1"],"junk",[2,1000,"failover","2026-01-01T00:00:00Z","pg2"]]"#
        );
        let (h, _) = parse_history(v.as_bytes());
        assert_eq!(h.last(), Some(&e));
        let (v, p) = append_history_value(Some(b"garbage"), &e);
        assert!(p.is_some());
        assert_eq!(parse_history(v.as_bytes()).0, vec![e.clone()]);
        let (v, p) = append_history_value(None, &e);
        assert!(p.is_none());
        assert_eq!(parse_history(v.as_bytes()).0, vec![e]);
    }

    #[test]
    fn lsn_text() {
        assert_eq!(crate::core::model::parse_lsn("0/0"), Some(0));
        assert_eq!(
            crate::core::model::parse_lsn("FFFFFFFF/FFFFFFFF"),
            Some(u64::MAX)
        );
        assert_eq!(crate::core::model::parse_lsn("1/"), None);
        assert_eq!(crate::core::model::parse_lsn("100000000/0"), None);
        assert_eq!(crate::core::model::parse_lsn("12"), None);
    }
}
