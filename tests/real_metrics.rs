//! `GET /metrics` on real parts (issue 10, test 2): every node's scrape is read by a
//! real Prometheus text-format parser (the `prometheus-parse` crate) and checked
//! line by line, and the role, epoch and replication-lag values it reports match
//! the cluster's own state — the leader key in etcd, PostgreSQL's WAL positions
//! read with SQL — before and after a failover (a host crash of the primary).
//! Real etcd + PostgreSQL; one test at a time (`flock /tmp/tenure-real.lock`).

mod common;

use std::collections::HashMap;
use std::time::Duration;

use common::{BOOT, FAILOVER};
use prometheus_parse::{LineInfo, Scrape, Value};
use tenure::testbed::cluster::TestCluster;
use tenure::testbed::wait_for;

/// A scrape of one node: the parser's view, keyed by the metric name and its
/// labels other than `scope` and `name` (sorted `k=v`, comma-separated).
struct Metrics {
    values: HashMap<(String, String), f64>,
    histograms: HashMap<String, (f64, f64)>,
    text: String,
}

impl Metrics {
    fn get(&self, name: &str, labels: &str) -> Option<f64> {
        self.values
            .get(&(name.to_string(), labels.to_string()))
            .copied()
    }

    fn one(&self, name: &str) -> Option<f64> {
        self.get(name, "")
    }
}

/// `GET /metrics` on node `i`, checked strictly and parsed: `Err` says why not.
fn scrape(c: &TestCluster, i: usize, scope: &str) -> Result<Metrics, String> {
    let (code, body) = c
        .api_body(i, "/metrics")
        .ok_or_else(|| format!("{}: no answer to /metrics", c.name(i)))?;
    if code != 200 {
        return Err(format!("{}: /metrics answered {code}: {body}", c.name(i)));
    }
    if !body.ends_with('\n') {
        return Err("the body does not end with a newline".into());
    }
    // The parser skips what it cannot read: say here that nothing was skipped.
    for line in body.lines() {
        match LineInfo::parse(line) {
            LineInfo::Empty | LineInfo::Ignored => {
                return Err(format!("a line the parser cannot read: {line:?}"));
            }
            LineInfo::Sample {
                value, timestamp, ..
            } => {
                if value.parse::<f64>().is_err() && !["+Inf", "-Inf", "NaN"].contains(&value) {
                    return Err(format!("not a number: {line:?}"));
                }
                if timestamp.is_some() {
                    return Err(format!("a timestamp (we send none): {line:?}"));
                }
            }
            _ => {}
        }
    }
    let scrape = Scrape::parse(body.lines().map(|l| Ok(l.to_string())))
        .map_err(|e| format!("parser: {e}"))?;
    let mut values = HashMap::new();
    let mut histograms = HashMap::new();
    for s in &scrape.samples {
        if s.labels.get("scope") != Some(scope) || s.labels.get("name") != Some(c.name(i)) {
            return Err(format!(
                "{} has labels {:?}, not scope={scope} name={}",
                s.metric,
                s.labels,
                c.name(i)
            ));
        }
        let mut rest: Vec<String> = s
            .labels
            .iter()
            .filter(|(k, _)| *k != "scope" && *k != "name")
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        rest.sort();
        let v = match &s.value {
            Value::Counter(v) | Value::Gauge(v) | Value::Untyped(v) => *v,
            Value::Histogram(buckets) => {
                // Cumulative: never down, and `+Inf` holds every observation.
                let mut last = 0.0;
                for b in buckets {
                    if b.count < last {
                        return Err(format!("{}: buckets go down: {buckets:?}", s.metric));
                    }
                    last = b.count;
                }
                let inf = buckets
                    .iter()
                    .find(|b| b.less_than.is_infinite())
                    .map(|b| b.count)
                    .ok_or_else(|| format!("{}: no +Inf bucket", s.metric))?;
                histograms.insert(s.metric.clone(), (inf, last));
                continue;
            }
            Value::Summary(_) => return Err(format!("{}: a summary", s.metric)),
        };
        values.insert((s.metric.clone(), rest.join(",")), v);
    }
    Ok(Metrics {
        values,
        histograms,
        text: body,
    })
}

/// WAL position of `expr` (an LSN expression) on node `i`, in bytes.
fn lsn(c: &TestCluster, i: usize, expr: &str) -> Result<f64, String> {
    c.sql_one(
        i,
        &format!("SELECT pg_wal_lsn_diff({expr}, '0/0')::bigint::text"),
    )?
    .parse::<f64>()
    .map_err(|e| e.to_string())
}

/// Wait until `check` passes on node `i`'s scrape; panic with its last complaint.
fn until(
    c: &TestCluster,
    i: usize,
    scope: &str,
    what: &str,
    check: impl Fn(&Metrics) -> Result<(), String>,
) -> Metrics {
    let mut last = String::new();
    let got = wait_for(
        Duration::from_secs(60),
        Duration::from_millis(200),
        || match scrape(c, i, scope).and_then(|m| check(&m).map(|()| m)) {
            Ok(m) => Some(m),
            Err(e) => {
                last = e;
                None
            }
        },
    );
    got.unwrap_or_else(|| panic!("{}: {what}: {last}{}", c.name(i), c.logs_tail(30)))
}

fn eq(m: &Metrics, name: &str, labels: &str, want: f64) -> Result<(), String> {
    match m.get(name, labels) {
        Some(v) if v == want => Ok(()),
        other => Err(format!("{name}{{{labels}}} is {other:?}, want {want}")),
    }
}

/// The primary's view: the key, the role, the lease, the loop's counters.
fn check_primary(m: &Metrics, epoch: i64) -> Result<(), String> {
    eq(m, "tenure_role", "role=primary", 1.0)?;
    eq(m, "tenure_role", "role=replica", 0.0)?;
    eq(m, "tenure_holds_leader_key", "", 1.0)?;
    eq(m, "tenure_epoch", "", epoch as f64)?;
    eq(m, "patroni_primary", "", 1.0)?;
    eq(m, "patroni_replica", "", 0.0)?;
    eq(m, "patroni_cluster_unlocked", "", 0.0)?;
    eq(m, "tenure_postgres_up", "", 1.0)?;
    eq(m, "tenure_replication_lag_bytes", "", 0.0)?;
    let ttl = m.one("tenure_lease_ttl_seconds").unwrap_or(0.0);
    let f = m.one("tenure_fence_deadline_seconds").unwrap_or(-1.0);
    let h = m.one("tenure_horizon_seconds").unwrap_or(-1.0);
    // S1/S2: F comes no later than H, and neither lies beyond one granted ttl.
    if !(ttl > 0.0 && f > 0.0 && f <= h && h <= ttl) {
        return Err(format!("lease ttl {ttl}, F in {f}, H in {h}"));
    }
    let counted = m.one("tenure_renewals_counted_total").unwrap_or(0.0);
    let failed = m.one("tenure_renewals_failed_total").unwrap_or(0.0);
    if counted < 1.0 {
        return Err("no counted renewal yet".into());
    }
    let (rtt, _) = m
        .histograms
        .get("tenure_renewal_round_trip_seconds")
        .copied()
        .ok_or("no renewal histogram")?;
    if rtt != counted + failed {
        return Err(format!(
            "renewal histogram holds {rtt} observations, counters {counted} + {failed}"
        ));
    }
    if m.one("patroni_xlog_location").unwrap_or(0.0) <= 0.0 {
        return Err("patroni_xlog_location is 0 on the primary".into());
    }
    Ok(())
}

/// A replica's view: not the key holder, the key's epoch, streaming.
fn check_replica(m: &Metrics, epoch: i64) -> Result<(), String> {
    eq(m, "tenure_role", "role=replica", 1.0)?;
    eq(m, "tenure_role", "role=primary", 0.0)?;
    eq(m, "tenure_holds_leader_key", "", 0.0)?;
    eq(m, "tenure_epoch", "", epoch as f64)?;
    eq(m, "patroni_primary", "", 0.0)?;
    eq(m, "patroni_replica", "", 1.0)?;
    eq(m, "patroni_postgres_streaming", "", 1.0)?;
    if m.one("tenure_fence_deadline_seconds").is_some()
        || m.one("tenure_lease_ttl_seconds").is_some()
    {
        return Err("a replica reports a lease of its own".into());
    }
    Ok(())
}

/// The replica `r`'s lag as scraped equals the primary's WAL position minus the
/// replica's replayed position, both read with SQL (and `want_positive`: more
/// than 1 MiB, so the match is not 0 = 0).
fn check_lag(c: &TestCluster, p: usize, r: usize, scope: &str, want_positive: bool) {
    let mut last = String::new();
    let ok = wait_for(Duration::from_secs(60), Duration::from_millis(300), || {
        let run = || -> Result<(), String> {
            let current = lsn(c, p, "pg_current_wal_lsn()")?;
            let replayed = lsn(c, r, "pg_last_wal_replay_lsn()")?;
            let m = scrape(c, r, scope)?;
            let current_after = lsn(c, p, "pg_current_wal_lsn()")?;
            if current_after != current {
                return Err("the primary's WAL moved while reading".into());
            }
            let lag = m.one("tenure_replication_lag_bytes");
            let at = m.get("tenure_wal_position_bytes", "position=replayed");
            if at != Some(replayed) || lag != Some(current - replayed) {
                return Err(format!(
                    "scraped lag {lag:?} at replayed {at:?}; SQL: primary at {current}, \
                     replica replayed {replayed}"
                ));
            }
            if want_positive && current - replayed < 1_048_576.0 {
                return Err(format!("lag only {} bytes", current - replayed));
            }
            if m.get("patroni_xlog_replayed_location", "") != Some(replayed) {
                return Err("patroni_xlog_replayed_location differs".into());
            }
            Ok(())
        };
        match run() {
            Ok(()) => Some(()),
            Err(e) => {
                last = e;
                None
            }
        }
    });
    assert!(
        ok.is_some(),
        "{}: lag does not match: {last}{}",
        c.name(r),
        c.logs_tail(30)
    );
}

#[test]
fn real_metrics_match_the_cluster_before_and_after_a_failover() {
    let opts = common::options("metrics", "failover");
    let scope = opts.scope.clone();
    let mut c = common::start(opts);
    let p = c.settled(BOOT).unwrap_or_else(|e| panic!("{e}"));
    let (leader, epoch) = c.leader_key().expect("leader key");
    assert_eq!(leader, c.name(p));
    let replicas: Vec<usize> = (0..c.node_count()).filter(|&i| i != p).collect();

    let before = until(&c, p, &scope, "primary before the failover", |m| {
        check_primary(m, epoch)
    });
    for &r in &replicas {
        until(&c, r, &scope, "replica before the failover", |m| {
            check_replica(m, epoch)
        });
        check_lag(&c, p, r, &scope, false);
    }
    // Slots: on the primary each replica streams through its own; each replica
    // keeps an inactive copy of the other's (it holds WAL: a retained size).
    let slot = |i: usize| format!("slot={}", tenure::pg::slot_name(c.name(i)));
    until(&c, p, &scope, "the replicas' slots on the primary", |m| {
        for &r in &replicas {
            eq(m, "tenure_replication_slot_active", &slot(r), 1.0)?;
            eq(m, "tenure_replication_slot_invalidated", &slot(r), 0.0)?;
            m.get("tenure_replication_slot_wal_retained_bytes", &slot(r))
                .ok_or("no retained size")?;
        }
        Ok(())
    });
    for &r in &replicas {
        let other = replicas.iter().copied().find(|&o| o != r).expect("two");
        until(&c, r, &scope, "a copy of the other replica's slot", |m| {
            eq(m, "tenure_replication_slot_active", &slot(other), 0.0)?;
            m.get("tenure_replication_slot_wal_retained_bytes", &slot(other))
                .ok_or("no retained size")?;
            match m.get("tenure_replication_slot_active", &slot(r)) {
                None => Ok(()),
                Some(_) => Err("a slot of its own".into()),
            }
        });
    }

    // A real lag: replay paused on one replica while the primary writes 2 MiB+.
    let r = replicas[0];
    c.sql(r, "SELECT pg_wal_replay_pause()")
        .expect("pause replay");
    c.sql(
        p,
        "CREATE TABLE metrics_lag AS SELECT g, repeat('x', 200) AS pad \
         FROM generate_series(1, 20000) g",
    )
    .expect("write WAL");
    check_lag(&c, p, r, &scope, true);
    until(&c, r, &scope, "replay paused", |m| {
        eq(m, "patroni_xlog_paused", "", 1.0)
    });
    c.sql(r, "SELECT pg_wal_replay_resume()")
        .expect("resume replay");
    check_lag(&c, p, r, &scope, false);
    let timeline = before.one("tenure_postgres_timeline").expect("timeline");

    // The failover: the primary's host crashes.
    c.host_crash(p).expect("host crash");
    let np = c
        .wait_new_primary(p, FAILOVER)
        .unwrap_or_else(|| panic!("no new primary within {FAILOVER:?}{}", c.logs_tail(40)));
    let (leader2, epoch2) = c.leader_key().expect("leader key after the failover");
    assert_eq!(leader2, c.name(np));
    assert!(epoch2 > epoch, "epoch {epoch2} after {epoch}");
    assert!(
        c.api_body(p, "/metrics").is_none(),
        "the crashed host answers"
    );

    let after = until(&c, np, &scope, "new primary after the failover", |m| {
        check_primary(m, epoch2)?;
        if m.one("tenure_promotions_total") < Some(1.0) {
            return Err("no promotion counted".into());
        }
        match m.one("tenure_postgres_timeline") {
            Some(t) if t > timeline => Ok(()),
            t => Err(format!("timeline {t:?}, was {timeline}")),
        }
    });
    let other = replicas
        .iter()
        .copied()
        .find(|&i| i != np)
        .expect("survivor");
    let replica = until(&c, other, &scope, "replica after the failover", |m| {
        check_replica(m, epoch2)?;
        eq(
            m,
            "tenure_postgres_timeline",
            "",
            after.one("tenure_postgres_timeline").unwrap_or(-1.0),
        )
    });
    check_lag(&c, np, other, &scope, false);
    eprintln!("a scrape of the new primary:\n{}", after.text);
    eprintln!("a scrape of its replica:\n{}", replica.text);
}
