//! `GET /cluster`, `/history`, `/config`: the cluster as the loop last read it, in
//! Patroni's JSON shapes (`patroni/api.py` `do_GET_cluster`, `do_GET_history`,
//! `do_GET_config`; `utils.cluster_as_json`), plus tenure's epoch and the lease.
//!
//! Owns: rendering those answers from the [`ApiStatus`] snapshot.
//! Must never: call etcd (the snapshot is the last iteration's read, at most one
//! loop old; Patroni reads the DCS per request), read a clock, or panic on garbage
//! another writer left in a member key (it is shown as read).

use serde_json::{Map, Value, json};

use super::ApiStatus;
use crate::core::model::{HistoryEntry, Member, lsn_text};

/// What the loop last read of the cluster, kept for these endpoints.
#[derive(Clone, Debug, Default)]
pub struct ClusterSnapshot {
    pub members: Vec<Member>,
    pub history: Vec<HistoryEntry>,
    /// The raw `config` key (`None`: absent).
    pub config: Option<String>,
    /// The standbys the `sync` key lists (synchronous mode on), sorted.
    pub sync_standbys: Vec<String>,
}

/// Host and port of a `postgres://host:port/...` URL (IPv6 in brackets).
fn host_port(conn_url: &str) -> Option<(String, Option<u16>)> {
    let rest = conn_url.split_once("://")?.1;
    let authority = rest.split(['/', '?']).next()?;
    let authority = authority.rsplit_once('@').map_or(authority, |(_, a)| a);
    if let Some(v6) = authority.strip_prefix('[') {
        let (host, after) = v6.split_once(']')?;
        let port = after.strip_prefix(':').and_then(|p| p.parse().ok());
        return Some((host.to_string(), port));
    }
    match authority.rsplit_once(':') {
        Some((h, p)) => Some((h.to_string(), p.parse().ok())),
        None if !authority.is_empty() => Some((authority.to_string(), None)),
        None => None,
    }
}

/// Patroni's `cluster_as_json`, members sorted by name, plus `scope` (as
/// `do_GET_cluster` adds) and tenure's own block.
pub fn cluster_json(s: &ApiStatus) -> Value {
    let c = &s.cluster;
    let leader = s.leader.as_deref();
    let cluster_lsn = s.status_optime.unwrap_or(0);
    let mut members: Vec<Value> = Vec::with_capacity(c.members.len());
    for m in &c.members {
        let info = &m.info;
        let role = if Some(m.name.as_str()) == leader {
            "leader"
        } else if c.sync_standbys.contains(&m.name) {
            "sync_standby"
        } else {
            "replica"
        };
        let state = match (&info.replication_state, role) {
            (Some(r), r2) if r2 != "leader" && !r.is_empty() => r.clone(),
            _ => info.state.clone(),
        };
        let mut o = Map::new();
        o.insert("name".into(), json!(m.name));
        o.insert("role".into(), json!(role));
        o.insert("state".into(), json!(state));
        o.insert("api_url".into(), json!(info.api_url));
        if let Some((host, port)) = host_port(&info.conn_url) {
            o.insert("host".into(), json!(host));
            if let Some(p) = port {
                o.insert("port".into(), json!(p));
            }
        }
        o.insert("timeline".into(), json!(info.timeline));
        o.insert("tags".into(), crate::dcs::tags_json(info));
        if role != "leader" {
            let positions = [
                ("receive_", info.receive_lsn),
                ("replay_", info.replay_lsn),
                ("", Some(info.xlog_location).filter(|l| *l > 0)),
            ];
            for (prefix, lsn) in positions {
                let (lsn_k, lag_k) = (format!("{prefix}lsn"), format!("{prefix}lag"));
                match lsn.filter(|l| *l > 0) {
                    None => {
                        o.insert(lsn_k, json!("unknown"));
                        o.insert(lag_k, json!("unknown"));
                    }
                    Some(l) => {
                        o.insert(lsn_k, json!(lsn_text(l)));
                        o.insert(lag_k, json!(cluster_lsn.saturating_sub(l)));
                    }
                }
            }
        }
        // tenure's own: the epoch the member runs under.
        if let Some(e) = info.epoch {
            o.insert("epoch".into(), json!(e));
        }
        // Finding L1: only when true (the others keep Patroni's form).
        if info.lacks_acquire_record {
            o.insert("older_agent".into(), json!(true));
        }
        members.push(Value::Object(o));
    }
    members.sort_by(|a, b| a["name"].as_str().cmp(&b["name"].as_str()));
    let mut ret = Map::new();
    ret.insert("members".into(), Value::Array(members));
    if s.pause {
        ret.insert("pause".into(), json!(true));
    }
    ret.insert("scope".into(), json!(s.scope));
    let mut t = Map::new();
    t.insert("epoch".into(), json!(s.epoch));
    t.insert("leader".into(), json!(s.leader));
    t.insert("answered_by".into(), json!(s.name));
    // The lease as this node knows it: the time left to its own fence deadline
    // `F` while it leads (the lease outlives `F`); others cannot know more than
    // the leader publishes.
    t.insert(
        "lease_remaining".into(),
        s.time_left().map_or(Value::Null, |d| {
            json!((d.as_secs_f64() * 1000.0).round() / 1000.0)
        }),
    );
    t.insert(
        "read_age".into(),
        s.cluster_read_at.map_or(Value::Null, |r| {
            json!((s.now.since(r).as_secs_f64() * 1000.0).round() / 1000.0)
        }),
    );
    ret.insert("tenure".into(), Value::Object(t));
    Value::Object(ret)
}

/// Patroni's `do_GET_history`: `[[timeline, lsn, reason, timestamp, new_leader]]`.
pub fn history_json(s: &ApiStatus) -> Value {
    Value::Array(
        s.cluster
            .history
            .iter()
            .map(|h| json!([h.timeline, h.lsn, h.reason, h.timestamp, h.new_leader]))
            .collect(),
    )
}

/// `GET path` for one of [`super::mgmt::READ_PATHS`]: status and JSON body.
/// `/config` answers 502 when the key is absent or not a JSON object (Patroni's
/// `do_GET_config`).
pub fn answer(path: &str, s: &ApiStatus) -> (u16, String) {
    match path {
        "/cluster" => (200, cluster_json(s).to_string()),
        "/history" => (200, history_json(s).to_string()),
        "/config" => match s
            .cluster
            .config
            .as_deref()
            .and_then(|raw| serde_json::from_str::<Value>(raw).ok())
        {
            Some(v @ Value::Object(_)) => (200, v.to_string()),
            _ => (
                502,
                json!({ "error": "the config key is absent or not a JSON object" }).to_string(),
            ),
        },
        _ => (
            404,
            json!({ "error": format!("no such endpoint: {}", super::truncate(path)) }).to_string(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::model::{MemberInfo, Tags};
    use crate::core::time::Instant;
    use std::time::Duration;

    fn member(name: &str, role: &str, xlog: u64, recv: Option<u64>) -> Member {
        Member {
            name: name.into(),
            mod_revision: 1,
            lease: 7,
            info: MemberInfo {
                conn_url: format!("postgres://127.0.0.{}:5432/postgres", name.len()),
                api_url: format!("http://127.0.0.1:8008/{name}"),
                state: "running".into(),
                role: role.into(),
                version: "15".into(),
                xlog_location: xlog,
                receive_lsn: recv,
                replay_lsn: recv.map(|r| r - 16),
                replication_state: recv.map(|_| "streaming".to_string()),
                timeline: 2,
                tags: Tags::default(),
                epoch: Some(42),
                ..MemberInfo::default()
            },
        }
    }

    fn status() -> ApiStatus {
        let now = Instant::from_nanos(5_000_000_000);
        ApiStatus {
            name: "pg2".into(),
            scope: "demo".into(),
            leader: Some("pg1".into()),
            epoch: Some(42),
            status_optime: Some(0x3000_0100),
            now,
            cluster_read_at: Some(now.sub(Duration::from_millis(250))),
            cluster: ClusterSnapshot {
                members: vec![
                    member("pg3", "replica", 0, None),
                    member("pg1", "primary", 0x3000_0100, None),
                    member("pg2", "replica", 0x3000_0000, Some(0x3000_0000)),
                ],
                history: vec![HistoryEntry {
                    timeline: 1,
                    lsn: 0x3000_0000,
                    reason: "no recovery target specified".into(),
                    timestamp: "2026-01-01T00:00:00+00:00".into(),
                    new_leader: "pg1".into(),
                }],
                config: Some(r#"{"ttl": 7, "loop_wait": 0.5}"#.into()),
                sync_standbys: vec!["pg2".into()],
            },
            ..ApiStatus::default()
        }
    }

    #[test]
    fn cluster_has_patronis_shape_sorted_with_lag_against_the_status_optime() {
        let v = cluster_json(&status());
        let m = v["members"].as_array().expect("members");
        let names: Vec<&str> = m.iter().filter_map(|x| x["name"].as_str()).collect();
        assert_eq!(names, ["pg1", "pg2", "pg3"]);
        assert_eq!(m[0]["role"], "leader");
        assert_eq!(m[0]["state"], "running");
        assert!(m[0].get("lag").is_none(), "no lag on the leader");
        assert_eq!(m[0]["host"], "127.0.0.3");
        assert_eq!(m[0]["port"], 5432);
        assert_eq!(m[0]["timeline"], 2);
        assert_eq!(m[1]["role"], "sync_standby");
        assert_eq!(m[1]["state"], "streaming");
        assert_eq!(m[1]["lag"], 0x100);
        assert_eq!(m[1]["receive_lsn"], "0/30000000");
        assert_eq!(m[1]["replay_lag"], 0x110);
        assert_eq!(m[2]["role"], "replica");
        assert_eq!(m[2]["lag"], "unknown");
        assert_eq!(m[2]["receive_lsn"], "unknown");
        assert_eq!(v["scope"], "demo");
        assert_eq!(v["tenure"]["epoch"], 42);
        assert_eq!(v["tenure"]["lease_remaining"], Value::Null);
        assert_eq!(v["tenure"]["read_age"], 0.25);
        assert!(v.get("pause").is_none());
        let mut s = status();
        s.pause = true;
        s.holds_leader_key = true;
        s.fence_deadline = Some(s.now.add(Duration::from_millis(4_500)));
        let v = cluster_json(&s);
        assert_eq!(v["pause"], true);
        assert_eq!(v["tenure"]["lease_remaining"], 4.5);
    }

    /// Finding L1: a member whose key lacks `"acquire_record": true` runs an older
    /// agent; `/cluster` says so on that member only (failed before: no field).
    #[test]
    fn cluster_marks_a_member_running_an_older_agent() {
        let mut s = status();
        s.cluster.members[0].info.lacks_acquire_record = true;
        let v = cluster_json(&s);
        let m = v["members"].as_array().expect("members");
        let older: Vec<&str> = m
            .iter()
            .filter(|x| x["older_agent"] == true)
            .filter_map(|x| x["name"].as_str())
            .collect();
        assert_eq!(older, ["pg3"]);
        assert!(m[0].get("older_agent").is_none(), "{}", m[0]);
    }

    #[test]
    fn history_and_config_as_patroni_answers_them() {
        let s = status();
        assert_eq!(
            answer("/history", &s),
            (
                200,
                r#"[[1,805306368,"no recovery target specified","2026-01-01T00:00:00+00:00","pg1"]]"#
                    .to_string()
            )
        );
        let (code, body) = answer("/config", &s);
        assert_eq!(code, 200);
        let v: Value = serde_json::from_str(&body).expect("json");
        assert_eq!(v["loop_wait"], 0.5);
        let mut none = status();
        none.cluster.config = None;
        assert_eq!(answer("/config", &none).0, 502);
        none.cluster.config = Some("garbage".into());
        assert_eq!(answer("/config", &none).0, 502);
    }

    #[test]
    fn host_port_of_conn_urls() {
        assert_eq!(
            host_port("postgres://10.0.0.1:5433/postgres"),
            Some(("10.0.0.1".into(), Some(5433)))
        );
        assert_eq!(
            host_port("postgres://u@[::1]:5432/x"),
            Some(("::1".into(), Some(5432)))
        );
        assert_eq!(host_port("postgres://h/x"), Some(("h".into(), None)));
        assert_eq!(host_port("garbage"), None);
        assert_eq!(lsn_text(0x1_0000_0060), "1/60");
    }
}
