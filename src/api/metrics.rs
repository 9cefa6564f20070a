//! `GET /metrics`: the Prometheus text exposition format 0.0.4, rendered from the
//! agent's [`ApiStatus`] snapshot (gauges) and its [`Metrics`] (counters and
//! histograms), straight into the connection's reused output buffer.
//!
//! Owns: the metric names, their `# HELP`/`# TYPE` lines, label escaping, and the
//! response head of a scrape. Two families: `tenure_*` (the lease, the loop, the
//! fence, etcd, PostgreSQL) and Patroni's own `patroni_*` names with Patroni's
//! labels (`scope`, `name`), as Patroni 4's `do_GET_metrics` renders them, so
//! dashboards built for Patroni keep working. Every sample carries `scope` and
//! `name`.
//! Must never: allocate per line or per scrape (everything is written with
//! `io::Write` into `out`, whose capacity the server keeps from one request to the
//! next: after the first scrape on a connection slot a scrape allocates nothing —
//! `tests/metrics_alloc.rs` counts), read a clock (`s.now` is the request instant),
//! or panic on any label value (escaped per the format).
//!
//! Where tenure renders differently from Patroni, on purpose:
//! - `patroni_postgres_server_version` gets its labels (Patroni 4 writes
//!   `patroni_postgres_server_version {scope=..}` with a space, which a strict
//!   parser refuses).
//! - `patroni_standby_leader`, `patroni_quorum_standby`,
//!   `patroni_postgres_in_archive_recovery`, `patroni_failsafe_mode_is_active` are
//!   always 0 (tenure has no standby clusters, quorum commit, archive recovery or
//!   failsafe mode).
//! - `patroni_postgres_state` is left out: its values are indexes into Patroni's
//!   own enum, which has no stable meaning outside Patroni.

use std::io::Write;
use std::time::Duration;

use super::{ApiStatus, Shape};
use crate::metrics::{Histogram, Metrics};

/// The content type of the text format.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// The output buffer a connection slot gets at start-up ([`super::server`]). A scrape
/// is 13–16 KB with short `scope` and `name` (`tests/metrics_alloc.rs` prints it;
/// about 300 bytes more per replication slot);
/// both labels are repeated on each of about 125 samples, so this leaves room for
/// `scope` and `name` of up to about 150 bytes together. A longer pair makes the
/// slot's buffer grow once, on its first scrape, and keep that capacity.
pub const SCRAPE_CAPACITY: usize = 32 * 1024;

/// A label value: a string (escaped) or a number (a histogram's `le`).
enum Lv<'a> {
    S(&'a str),
    F(f64),
    Inf,
}

/// Writes lines into `out`. Writing to a `Vec<u8>` cannot fail: results are
/// ignored on purpose.
struct Out<'a> {
    out: &'a mut Vec<u8>,
    scope: &'a str,
    name: &'a str,
}

/// A label value escaped as the format requires: `\` → `\\`, `"` → `\"`,
/// newline → `\n`. Everything else is written as is (UTF-8).
fn escape_into(out: &mut Vec<u8>, v: &str) {
    for b in v.bytes() {
        match b {
            b'\\' => out.extend_from_slice(b"\\\\"),
            b'"' => out.extend_from_slice(b"\\\""),
            b'\n' => out.extend_from_slice(b"\\n"),
            _ => out.push(b),
        }
    }
}

impl Out<'_> {
    /// `# HELP` and `# TYPE` of a family (help texts are ours: no escaping needed).
    fn family(&mut self, name: &str, typ: &str, help: &str) {
        let _ = write!(self.out, "# HELP {name} {help}\n# TYPE {name} {typ}\n");
    }

    /// `name{scope="..",name=".."<,k="v">...} value`.
    fn sample(&mut self, name: &str, labels: &[(&str, Lv)], value: f64) {
        self.out.extend_from_slice(name.as_bytes());
        self.out.extend_from_slice(b"{scope=\"");
        escape_into(self.out, self.scope);
        self.out.extend_from_slice(b"\",name=\"");
        escape_into(self.out, self.name);
        self.out.push(b'"');
        for (k, v) in labels {
            let _ = write!(self.out, ",{k}=\"");
            match v {
                Lv::S(s) => escape_into(self.out, s),
                Lv::F(f) => {
                    let _ = write!(self.out, "{f}");
                }
                Lv::Inf => self.out.extend_from_slice(b"+Inf"),
            }
            self.out.push(b'"');
        }
        self.out.extend_from_slice(b"} ");
        write_value(self.out, value);
        self.out.push(b'\n');
    }

    /// A gauge of one sample.
    fn gauge(&mut self, name: &str, help: &str, value: f64) {
        self.family(name, "gauge", help);
        self.sample(name, &[], value);
    }

    /// A counter of one sample.
    fn counter(&mut self, name: &str, help: &str, value: u64) {
        self.family(name, "counter", help);
        self.sample(name, &[], value as f64);
    }

    /// A counter with one label: a sample per `(label value, count)`.
    fn counters(&mut self, name: &str, help: &str, label: &str, values: &[(&str, u64)]) {
        self.family(name, "counter", help);
        for (v, n) in values {
            self.sample(name, &[(label, Lv::S(v))], *n as f64);
        }
    }

    /// A histogram: cumulative `_bucket`s up to `+Inf`, `_sum`, `_count`.
    fn histogram(&mut self, base: &str, help: &str, h: &Histogram) {
        self.family(base, "histogram", help);
        let mut name = [0u8; 64];
        let bucket = suffixed(&mut name, base, "_bucket");
        let mut cumulative = 0u64;
        for (i, &le) in h.bounds().iter().enumerate() {
            cumulative += h.counts[i];
            self.sample(bucket, &[("le", Lv::F(le))], cumulative as f64);
        }
        self.sample(bucket, &[("le", Lv::Inf)], h.count as f64);
        let mut name = [0u8; 64];
        self.sample(suffixed(&mut name, base, "_sum"), &[], h.sum());
        let mut name = [0u8; 64];
        self.sample(suffixed(&mut name, base, "_count"), &[], h.count as f64);
    }
}

/// `base + suffix` in a stack buffer (our names are short ASCII constants; a name
/// that would not fit is cut, never a panic).
fn suffixed<'a>(buf: &'a mut [u8; 64], base: &str, suffix: &str) -> &'a str {
    let mut n = 0;
    for &b in base.as_bytes().iter().chain(suffix.as_bytes()) {
        if n == buf.len() {
            break;
        }
        buf[n] = b;
        n += 1;
    }
    std::str::from_utf8(&buf[..n]).unwrap_or("")
}

/// A sample value: integers without a fraction, `+Inf`/`-Inf`/`NaN` as the format
/// spells them, other floats with Rust's shortest round-trip form.
fn write_value(out: &mut Vec<u8>, v: f64) {
    if v.is_nan() {
        out.extend_from_slice(b"NaN");
    } else if v.is_infinite() {
        out.extend_from_slice(if v > 0.0 { b"+Inf" } else { b"-Inf" });
    } else if v.fract() == 0.0 && v.abs() < 9.0e15 {
        let _ = write!(out, "{}", v as i64);
    } else {
        let _ = write!(out, "{v}");
    }
}

fn b(v: bool) -> f64 {
    if v { 1.0 } else { 0.0 }
}

fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

/// Patroni's `patroni_version`: each part of the version zero-padded to two digits
/// (`0.1.0` → `000100`), as a number.
fn padded_version(v: &str) -> f64 {
    let mut n = 0u64;
    for part in v.split('.') {
        let p: u64 = part
            .split(|c: char| !c.is_ascii_digit())
            .next()
            .and_then(|d| d.parse().ok())
            .unwrap_or(0);
        n = n.saturating_mul(100).saturating_add(p.min(99));
    }
    n as f64
}

/// Seconds since the Unix epoch of a timestamp as the probe prints it
/// (`2024-05-01 10:00:00.123456+00:00`); `None` if it does not read as one.
/// `clock::parse_timestamp` reads it (one parser for every timestamp; it does not
/// allocate).
pub fn epoch_seconds(ts: &str) -> Option<f64> {
    crate::clock::parse_timestamp(ts)
        .ok()
        .map(|d| d.as_secs_f64())
}

/// The body of a scrape, appended to `out`.
pub fn render(s: &ApiStatus, out: &mut Vec<u8>) {
    let m: &Metrics = &s.metrics;
    let mut o = Out {
        out,
        scope: &s.scope,
        name: &s.name,
    };
    let version = env!("CARGO_PKG_VERSION");
    let replica = s.pg_running && !s.pg_primary;
    let replayed = s.report.replay_lsn.unwrap_or(0);
    let received = s.report.receive_lsn.unwrap_or(replayed);

    // --- tenure: the agent and the lease -------------------------------------
    o.family("tenure_info", "gauge", "Always 1; the agent's version.");
    o.sample("tenure_info", &[("version", Lv::S(version))], 1.0);
    o.family(
        "tenure_role",
        "gauge",
        "1 for the role PostgreSQL answers as (primary, replica, or unknown when it does not answer).",
    );
    for role in ["primary", "replica", "unknown"] {
        o.sample("tenure_role", &[("role", Lv::S(role))], b(s.role == role));
    }
    o.gauge(
        "tenure_holds_leader_key",
        "1 while this node holds the leader key (its own leadership, not fenced).",
        b(s.holds_leader_key),
    );
    o.family(
        "tenure_epoch",
        "gauge",
        "Epoch (the leader key's create_revision) of the leadership this node runs under; absent when none is known.",
    );
    if let Some(e) = s.epoch {
        o.sample("tenure_epoch", &[], e as f64);
    }
    o.family(
        "tenure_lease_ttl_seconds",
        "gauge",
        "TTL etcd granted for this node's lease (never the configured number); absent unless leading.",
    );
    if let Some(ttl) = s.lease_ttl {
        o.sample("tenure_lease_ttl_seconds", &[], f64::from(ttl));
    }
    o.family(
        "tenure_fence_deadline_seconds",
        "gauge",
        "Seconds left to the fence deadline F (DESIGN S1); absent unless leading.",
    );
    if let Some(left) = s.time_left() {
        o.sample("tenure_fence_deadline_seconds", &[], secs(left));
    }
    o.family(
        "tenure_horizon_seconds",
        "gauge",
        "Seconds left to the horizon H = s + ttl - M before which etcd cannot have expired the lease; absent unless leading.",
    );
    if let Some(h) = s.horizon {
        o.sample("tenure_horizon_seconds", &[], secs(s.now.until(h)));
    }
    o.counter(
        "tenure_renewals_counted_total",
        "Confirmed renewals that counted (keepalive TTL > 0 and the linearizable read showed our key).",
        m.renewals_counted,
    );
    o.counter(
        "tenure_renewals_failed_total",
        "Renewals sent that did not count (timed out, lease gone, key lost).",
        m.renewals_failed,
    );
    o.histogram(
        "tenure_renewal_round_trip_seconds",
        "A confirmed renewal from the keepalive's send to the read's answer.",
        &m.renewal_rtt,
    );
    o.histogram(
        "tenure_loop_lateness_seconds",
        "How late an iteration started after its tick on the renewal grid.",
        &m.loop_lateness,
    );
    o.counters(
        "tenure_deadline_overruns_total",
        "Iterations over their budget P (+ R with a renewal), and ticks a whole loop_wait behind the renewal grid.",
        "deadline",
        &[("iteration_budget", m.iteration_overruns), ("renewal_schedule", m.schedule_overruns)],
    );
    o.counters(
        "tenure_fences_total",
        "Fences of PostgreSQL (SIGQUIT), by outcome: complete (no process left) or incomplete at the budget.",
        "outcome",
        &[("complete", m.fences_complete), ("incomplete", m.fences_incomplete)],
    );
    o.histogram(
        "tenure_fence_duration_seconds",
        "A fence from SIGQUIT to its outcome.",
        &m.fence_duration,
    );
    o.counter(
        "tenure_promotions_total",
        "Promotions of the local PostgreSQL (pg_promote succeeded).",
        m.promotions,
    );
    o.counter(
        "tenure_promotions_failed_total",
        "Promotions that failed.",
        m.promotions_failed,
    );
    o.counters(
        "tenure_replica_builds_total",
        "Replica builds (create_replica_methods) that ended, by outcome; a failed one tried every method.",
        "outcome",
        &[("ok", m.replica_builds_ok), ("failed", m.replica_builds_failed)],
    );
    o.gauge(
        "tenure_replica_build_running",
        "1 while this node builds its replica's copy (state \"creating replica\").",
        b(s.state == "creating replica"),
    );
    o.counter(
        "tenure_log_dropped_total",
        "Log lines a receiver (syslog, journald) did not take in time: dropped, never waited for.",
        crate::logging::dropped(),
    );
    o.gauge(
        "tenure_watchdog_armed",
        "1 while the watchdog device is open and armed.",
        b(s.watchdog.is_some()),
    );
    o.family(
        "tenure_watchdog_timeout_seconds",
        "gauge",
        "The watchdog timeout W the device reported back; absent while not armed.",
    );
    if let Some(w) = s.watchdog {
        o.sample("tenure_watchdog_timeout_seconds", &[], f64::from(w));
    }
    o.family(
        "tenure_etcd_endpoint",
        "gauge",
        "1 for the etcd endpoint the agent talks to.",
    );
    if let Some(ep) = m.endpoint() {
        o.sample("tenure_etcd_endpoint", &[("endpoint", Lv::S(ep))], 1.0);
    }
    o.counter(
        "tenure_etcd_endpoint_switches_total",
        "Switches to the next etcd endpoint after a failed call.",
        m.etcd_endpoint_switches,
    );
    o.counter(
        "tenure_etcd_foreign_answers_total",
        "etcd answers refused because they came from another etcd cluster than the one this agent uses.",
        m.etcd_foreign_answers,
    );
    o.counter(
        "tenure_etcd_resolves_total",
        "Resolutions of etcd endpoint names that answered for every name asked.",
        m.etcd_resolves,
    );
    o.counter(
        "tenure_etcd_resolve_failures_total",
        "Resolutions of etcd endpoint names that failed (the last good addresses stay).",
        m.etcd_resolve_failures,
    );
    o.counter(
        "tenure_etcd_resolve_timeouts_total",
        "Resolutions of etcd endpoint names killed at resolve_timeout (the last good addresses stay).",
        m.etcd_resolve_timeouts,
    );
    o.gauge(
        "tenure_paused",
        "1 while the cluster is paused (maintenance mode).",
        b(s.pause),
    );
    o.family(
        "tenure_tls_cert_expiry_timestamp_seconds",
        "gauge",
        "notAfter (Unix seconds) of each TLS certificate tenure uses, read at start-up and reload: the API's own, the etcd client's, each PostgreSQL role's sslcert; absent when not configured.",
    );
    for role in crate::certs::CertRole::ALL {
        if let Some(t) = s.cert_expiry.get(role) {
            o.sample(
                "tenure_tls_cert_expiry_timestamp_seconds",
                &[("cert", Lv::S(role.name()))],
                t as f64,
            );
        }
    }

    // --- tenure: PostgreSQL ------------------------------------------------
    o.gauge(
        "tenure_postgres_up",
        "1 while the local PostgreSQL answers queries.",
        b(s.pg_running),
    );
    o.gauge(
        "tenure_postgres_timeline",
        "Timeline of the local PostgreSQL (0 when it does not answer).",
        f64::from(if s.pg_running { s.timeline } else { 0 }),
    );
    o.family(
        "tenure_wal_position_bytes",
        "gauge",
        "WAL positions in bytes: current (primary), received and replayed (replica).",
    );
    if s.pg_running && s.pg_primary {
        o.sample(
            "tenure_wal_position_bytes",
            &[("position", Lv::S("current"))],
            s.lsn as f64,
        );
    }
    if replica {
        o.sample(
            "tenure_wal_position_bytes",
            &[("position", Lv::S("received"))],
            received as f64,
        );
        o.sample(
            "tenure_wal_position_bytes",
            &[("position", Lv::S("replayed"))],
            replayed as f64,
        );
    }
    o.family(
        "tenure_replication_lag_bytes",
        "gauge",
        "A replica's replayed WAL behind the leader's position (the larger of the status key's optime and the sender's WAL end), as /readiness measures it; 0 on the primary; absent when PostgreSQL does not answer.",
    );
    if s.pg_running {
        let lag = if replica {
            s.leader_optime().saturating_sub(replayed)
        } else {
            0
        };
        o.sample("tenure_replication_lag_bytes", &[], lag as f64);
    }
    o.gauge(
        "tenure_sync_standby",
        "1 while the sync key lists this node as a synchronous standby.",
        b(s.sync_standby),
    );
    o.family(
        "tenure_synchronous_standby",
        "gauge",
        "1 for each member the sync key lists as a synchronous standby (synchronous mode).",
    );
    for sb in &s.cluster.sync_standbys {
        o.sample("tenure_synchronous_standby", &[("standby", Lv::S(sb))], 1.0);
    }
    // Replication slots: a slot nobody reads holds WAL until the disk fills or
    // `max_slot_wal_keep_size` invalidates it. Members' slots, permanent ones,
    // departed members' kept for `member_slots_ttl`, copies on replicas, and any
    // other physical slot of this server.
    o.family(
        "tenure_replication_slot_active",
        "gauge",
        "1 while a consumer streams from the physical replication slot, 0 while none does.",
    );
    for sl in s.slots.iter().filter(|_| s.pg_running) {
        o.sample(
            "tenure_replication_slot_active",
            &[("slot", Lv::S(&sl.name))],
            b(sl.active),
        );
    }
    o.family(
        "tenure_replication_slot_wal_retained_bytes",
        "gauge",
        "WAL the physical replication slot keeps on this server: from its restart_lsn to the current position (the primary's current WAL, a replica's received or replayed, whichever is further); absent for a slot that reserves none or was invalidated.",
    );
    for sl in s.slots.iter().filter(|_| s.pg_running) {
        if let Some(r) = sl.restart_lsn.filter(|_| !sl.lost) {
            o.sample(
                "tenure_replication_slot_wal_retained_bytes",
                &[("slot", Lv::S(&sl.name))],
                s.lsn.saturating_sub(r) as f64,
            );
        }
    }
    o.family(
        "tenure_replication_slot_invalidated",
        "gauge",
        "1 while PostgreSQL has invalidated the physical replication slot (wal_status lost: it kept more than max_slot_wal_keep_size); its consumer cannot resume from it.",
    );
    for sl in s.slots.iter().filter(|_| s.pg_running) {
        o.sample(
            "tenure_replication_slot_invalidated",
            &[("slot", Lv::S(&sl.name))],
            b(sl.lost),
        );
    }

    // --- Patroni's names (Patroni 4 `do_GET_metrics`), same labels -------------
    o.gauge(
        "patroni_version",
        "Patroni semver without periods.",
        padded_version(version),
    );
    o.gauge(
        "patroni_postgres_running",
        "Value is 1 if Postgres is running, 0 otherwise.",
        b(s.state == "running"),
    );
    o.gauge(
        "patroni_postmaster_start_time",
        "Epoch seconds since Postgres started.",
        s.report
            .postmaster_start_time
            .as_deref()
            .filter(|_| s.pg_running)
            .and_then(epoch_seconds)
            .unwrap_or(0.0),
    );
    o.gauge(
        "patroni_primary",
        "Value is 1 if this node is the leader, 0 otherwise.",
        b(s.pg_running && s.pg_primary),
    );
    o.family(
        "patroni_xlog_location",
        "counter",
        "Current location of the Postgres transaction log, 0 if this node is not the leader.",
    );
    o.sample(
        "patroni_xlog_location",
        &[],
        if s.pg_running && s.pg_primary {
            s.lsn as f64
        } else {
            0.0
        },
    );
    o.gauge(
        "patroni_standby_leader",
        "Value is 1 if this node is the standby_leader, 0 otherwise.",
        0.0,
    );
    o.gauge(
        "patroni_replica",
        "Value is 1 if this node is a replica, 0 otherwise.",
        b(replica),
    );
    o.gauge(
        "patroni_sync_standby",
        "Value is 1 if this node is a sync standby, 0 otherwise.",
        b(replica && s.sync_standby),
    );
    o.gauge(
        "patroni_quorum_standby",
        "Value is 1 if this node is a quorum standby, 0 otherwise.",
        0.0,
    );
    o.family(
        "patroni_xlog_received_location",
        "counter",
        "Current location of the received Postgres transaction log, 0 if this node is not a replica.",
    );
    o.sample(
        "patroni_xlog_received_location",
        &[],
        if replica { received as f64 } else { 0.0 },
    );
    o.family(
        "patroni_xlog_replayed_location",
        "counter",
        "Current location of the replayed Postgres transaction log, 0 if this node is not a replica.",
    );
    o.sample(
        "patroni_xlog_replayed_location",
        &[],
        if replica { replayed as f64 } else { 0.0 },
    );
    o.gauge(
        "patroni_xlog_replayed_timestamp",
        "Current timestamp of the replayed Postgres transaction log, 0 if null.",
        s.report
            .replayed_timestamp
            .as_deref()
            .filter(|_| replica)
            .and_then(epoch_seconds)
            .unwrap_or(0.0),
    );
    o.gauge(
        "patroni_xlog_paused",
        "Value is 1 if the Postgres xlog is paused, 0 otherwise.",
        b(replica && s.report.replay_paused == Some(true)),
    );
    o.gauge(
        "patroni_postgres_streaming",
        "Value is 1 if Postgres is streaming, 0 otherwise.",
        b(s.streaming && replica),
    );
    o.gauge(
        "patroni_postgres_in_archive_recovery",
        "Value is 1 if Postgres is replicating from archive, 0 otherwise.",
        0.0,
    );
    o.gauge(
        "patroni_postgres_server_version",
        "Version of Postgres (if running), 0 otherwise.",
        f64::from(
            s.report
                .server_version
                .filter(|_| s.pg_running)
                .unwrap_or(0),
        ),
    );
    o.gauge(
        "patroni_cluster_unlocked",
        "Value is 1 if the cluster is unlocked, 0 if locked.",
        b(s.cluster_unlocked),
    );
    o.gauge(
        "patroni_failsafe_mode_is_active",
        "Value is 1 if failsafe mode is active, 0 if inactive.",
        0.0,
    );
    o.family(
        "patroni_postgres_timeline",
        "counter",
        "Postgres timeline of this node (if running), 0 otherwise.",
    );
    o.sample(
        "patroni_postgres_timeline",
        &[],
        f64::from(if s.pg_running { s.timeline } else { 0 }),
    );
    o.gauge(
        "patroni_dcs_last_seen",
        "Epoch timestamp when DCS was last contacted successfully by Patroni.",
        s.dcs_last_seen as f64,
    );
    o.gauge(
        "patroni_pending_restart",
        "Value is 1 if the node needs a restart, 0 otherwise.",
        b(s.pg_running && s.report.pending_restart),
    );
    o.gauge(
        "patroni_is_paused",
        "Value is 1 if auto failover is disabled, 0 otherwise.",
        b(s.pause),
    );
}

/// The complete response to `/metrics`: head and (for GET) body, appended to `out`.
/// The body is rendered first, straight into `out`; the head (whose
/// Content-Length needs the body's size) is then written after it and rotated in
/// front, in place: no second buffer.
pub(super) fn respond(s: &ApiStatus, shape: Shape, extra: &str, out: &mut Vec<u8>) {
    let start = out.len();
    render(s, out);
    let body_len = out.len() - start;
    if shape != Shape::Full {
        out.truncate(start);
    }
    let before_head = out.len();
    let _ = write!(
        out,
        "HTTP/1.1 200 OK\r\nContent-Type: {CONTENT_TYPE}\r\nContent-Length: {}\r\n\
         Cache-Control: no-store\r\n{extra}Connection: close\r\n\r\n",
        if shape == Shape::Empty { 0 } else { body_len },
    );
    let head_len = out.len() - before_head;
    out[start..].rotate_right(head_len);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{Method, respond as api_respond};
    use crate::core::model::PgReport;
    use crate::core::time::Instant;

    fn primary() -> ApiStatus {
        let now = Instant::from_nanos(1_000_000_000_000);
        ApiStatus {
            name: "pg1".into(),
            scope: "demo".into(),
            role: "primary",
            state: "running".into(),
            pg_running: true,
            pg_primary: true,
            holds_leader_key: true,
            epoch: Some(73),
            timeline: 3,
            lsn: 123_456,
            now,
            fence_deadline: Some(now.add(Duration::from_millis(5_500))),
            horizon: Some(now.add(Duration::from_secs(12))),
            lease_ttl: Some(30),
            watchdog: Some(13),
            report: PgReport {
                server_version: Some(150_004),
                postmaster_start_time: Some("2026-01-01 10:00:00.5+00:00".into()),
                ..PgReport::default()
            },
            ..ApiStatus::default()
        }
    }

    fn body(s: &ApiStatus) -> String {
        let mut out = Vec::new();
        render(s, &mut out);
        String::from_utf8(out).expect("UTF-8")
    }

    /// The sample lines (not comments) whose name is `name` exactly.
    fn samples<'a>(text: &'a str, name: &str) -> Vec<&'a str> {
        text.lines()
            .filter(|l| !l.starts_with('#'))
            .filter(|l| l.split(['{', ' ']).next() == Some(name))
            .collect()
    }

    #[test]
    fn label_values_are_escaped() {
        let mut s = primary();
        s.scope = "a\"b\\c\nd".into();
        s.name = "pg\u{e9}1".into();
        let text = body(&s);
        let line = samples(&text, "tenure_holds_leader_key")[0];
        assert_eq!(
            line,
            "tenure_holds_leader_key{scope=\"a\\\"b\\\\c\\nd\",name=\"pg\u{e9}1\"} 1"
        );
        // A raw newline inside a value would split a sample in two: none may remain.
        assert!(
            text.lines().all(|l| l.starts_with('#')
                || l.ends_with(|c: char| c.is_ascii_digit()
                    || l.ends_with("Inf")
                    || l.ends_with("NaN"))),
            "{text}"
        );
    }

    #[test]
    fn histogram_buckets_are_cumulative_and_end_at_inf() {
        let mut s = primary();
        for ms in [1, 2, 2, 40, 20_000] {
            s.metrics.renewal(true, Duration::from_millis(ms));
        }
        let text = body(&s);
        let buckets = samples(&text, "tenure_renewal_round_trip_seconds_bucket");
        assert_eq!(buckets.len(), crate::metrics::RENEWAL_BUCKETS.len() + 1);
        let value = |le: &str| -> f64 {
            let l = buckets
                .iter()
                .find(|l| l.contains(&format!("le=\"{le}\"")))
                .unwrap_or_else(|| panic!("no bucket le={le} in {buckets:?}"));
            l.rsplit(' ').next().unwrap().parse().unwrap()
        };
        assert_eq!(value("0.001"), 1.0);
        assert_eq!(value("0.0025"), 3.0);
        assert_eq!(value("0.05"), 4.0);
        assert_eq!(value("10"), 4.0);
        assert_eq!(value("+Inf"), 5.0);
        let mut last = 0.0;
        for l in &buckets {
            let v: f64 = l.rsplit(' ').next().unwrap().parse().unwrap();
            assert!(v >= last, "buckets go down: {buckets:?}");
            last = v;
        }
        assert_eq!(
            samples(&text, "tenure_renewal_round_trip_seconds_count"),
            vec!["tenure_renewal_round_trip_seconds_count{scope=\"demo\",name=\"pg1\"} 5"]
        );
        let sum = samples(&text, "tenure_renewal_round_trip_seconds_sum")[0];
        let sum: f64 = sum.rsplit(' ').next().unwrap().parse().unwrap();
        assert_eq!(sum, 20.045);
    }

    #[test]
    fn every_family_has_help_then_type_once_before_its_samples() {
        let mut s = primary();
        s.cluster.sync_standbys = vec!["pg2".into()];
        s.report.pending_restart = true;
        let text = body(&s);
        let mut seen: Vec<(String, String)> = Vec::new();
        let lines: Vec<&str> = text.lines().collect();
        for (i, l) in lines.iter().enumerate() {
            if let Some(rest) = l.strip_prefix("# HELP ") {
                let name = rest.split(' ').next().unwrap();
                let ty = lines[i + 1]
                    .strip_prefix(&format!("# TYPE {name} "))
                    .unwrap_or_else(|| panic!("no TYPE right after HELP of {name}"));
                assert!(
                    ["gauge", "counter", "histogram"].contains(&ty),
                    "{name}: {ty}"
                );
                assert!(
                    !seen.iter().any(|(n, _)| n == name),
                    "{name} described twice"
                );
                seen.push((name.to_string(), ty.to_string()));
            } else if !l.starts_with('#') {
                let sample = l.split(['{', ' ']).next().unwrap();
                let (family, ty) = seen.last().expect("a sample before any HELP");
                let ok = sample == family
                    || (ty == "histogram"
                        && ["_bucket", "_sum", "_count"]
                            .iter()
                            .any(|suf| sample == format!("{family}{suf}")));
                assert!(ok, "sample {sample} under family {family}");
                assert!(l.contains("{scope=\"demo\",name=\"pg1\""), "labels of {l}");
            }
        }
        // Patroni's names, for dashboards built on them.
        for name in [
            "patroni_version",
            "patroni_postgres_running",
            "patroni_postmaster_start_time",
            "patroni_primary",
            "patroni_replica",
            "patroni_sync_standby",
            "patroni_xlog_location",
            "patroni_xlog_received_location",
            "patroni_xlog_replayed_location",
            "patroni_xlog_paused",
            "patroni_postgres_timeline",
            "patroni_dcs_last_seen",
            "patroni_pending_restart",
            "patroni_is_paused",
            "patroni_cluster_unlocked",
            "patroni_failsafe_mode_is_active",
        ] {
            assert_eq!(samples(&text, name).len(), 1, "{name}");
        }
        let one = |n: &str| samples(&text, n)[0].rsplit(' ').next().unwrap().to_string();
        assert_eq!(one("patroni_version"), "100"); // 0.1.0 -> 000100
        assert_eq!(one("patroni_primary"), "1");
        assert_eq!(one("patroni_pending_restart"), "1");
        assert_eq!(one("patroni_xlog_location"), "123456");
        assert_eq!(one("patroni_postmaster_start_time"), "1767261600.5");
        assert_eq!(one("tenure_epoch"), "73");
        assert_eq!(one("tenure_fence_deadline_seconds"), "5.5");
        assert_eq!(one("tenure_horizon_seconds"), "12");
        assert_eq!(one("tenure_watchdog_timeout_seconds"), "13");
        assert!(text.contains(
            "tenure_role{scope=\"demo\",name=\"pg1\",role=\"primary\"} 1\n\
             tenure_role{scope=\"demo\",name=\"pg1\",role=\"replica\"} 0\n"
        ));
        assert!(text.contains(
            "tenure_synchronous_standby{scope=\"demo\",name=\"pg1\",standby=\"pg2\"} 1\n"
        ));
    }

    #[test]
    fn response_head_frames_the_body_get_head_options() {
        let s = primary();
        let mut out = b"left alone".to_vec();
        api_respond(&Method::Get, "/metrics", "", &s, &mut out);
        let text = String::from_utf8(out).unwrap();
        let text = text.strip_prefix("left alone").expect("appended after");
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        assert!(head.starts_with("HTTP/1.1 200 OK\r\n"), "{head}");
        assert!(head.contains("Content-Type: text/plain; version=0.0.4; charset=utf-8\r\n"));
        assert!(
            head.contains(&format!("Content-Length: {}\r\n", body.len())),
            "{head}"
        );
        assert!(body.starts_with("# HELP tenure_info "));
        assert!(body.len() < SCRAPE_CAPACITY);

        let mut out = Vec::new();
        api_respond(&Method::Head, "/metrics", "", &s, &mut out);
        let text = String::from_utf8(out).unwrap();
        let (head, rest) = text.split_once("\r\n\r\n").unwrap();
        assert_eq!(rest, "");
        assert!(head.contains(&format!("Content-Length: {}\r\n", body.len())));

        let mut out = Vec::new();
        api_respond(&Method::Options, "/metrics", "", &s, &mut out);
        let text = String::from_utf8(out).unwrap();
        assert!(text.contains("Content-Length: 0\r\n") && text.ends_with("\r\n\r\n"));
    }

    #[test]
    fn timestamps_read_as_epoch_seconds() {
        assert_eq!(epoch_seconds("1970-01-01 00:00:00+00:00"), Some(0.0));
        assert_eq!(
            epoch_seconds("2026-01-01 10:00:00.5+00"),
            Some(1_767_261_600.5)
        );
        assert_eq!(
            epoch_seconds("2026-01-01 12:30:00+02:30"),
            Some(1_767_261_600.0)
        );
        assert_eq!(
            epoch_seconds("2000-02-29 00:00:00-01:00"),
            Some(951_786_000.0)
        );
        for bad in [
            "",
            "yesterday",
            "2026-13-01 00:00:00+00",
            "2026-01-01",
            "2026-01-01 x:y:z",
        ] {
            assert_eq!(epoch_seconds(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn replication_slot_gauges_per_slot_and_none_while_postgres_is_down() {
        use crate::pg::slots::parse_local;
        let mut s = primary();
        s.lsn = 0x300_0000;
        s.slots = parse_local(Some(
            r#"[["barman","0/1000000",false,"extended"],["pg2","0/3000000",true,"reserved"],["old",null,false,"lost"]]"#,
        ));
        let text = body(&s);
        let l = |n: &str, slot: &str, v: &str| {
            format!("{n}{{scope=\"demo\",name=\"pg1\",slot=\"{slot}\"}} {v}")
        };
        assert_eq!(
            samples(&text, "tenure_replication_slot_active"),
            vec![
                l("tenure_replication_slot_active", "barman", "0"),
                l("tenure_replication_slot_active", "pg2", "1"),
                l("tenure_replication_slot_active", "old", "0"),
            ]
        );
        assert_eq!(
            samples(&text, "tenure_replication_slot_wal_retained_bytes"),
            vec![
                l(
                    "tenure_replication_slot_wal_retained_bytes",
                    "barman",
                    "33554432"
                ),
                l("tenure_replication_slot_wal_retained_bytes", "pg2", "0"),
            ],
            "an invalidated slot keeps nothing"
        );
        assert_eq!(
            samples(&text, "tenure_replication_slot_invalidated")[2],
            l("tenure_replication_slot_invalidated", "old", "1")
        );
        s.pg_running = false;
        let text = body(&s);
        assert!(samples(&text, "tenure_replication_slot_active").is_empty());
    }

    #[test]
    fn cert_expiry_gauge_per_configured_certificate() {
        use crate::certs::{CertExpiry, CertRole, Gauges};
        let mut s = primary();
        let text = body(&s);
        assert!(
            samples(&text, "tenure_tls_cert_expiry_timestamp_seconds").is_empty(),
            "no certificate configured: no sample"
        );
        let c = |role, not_after| CertExpiry {
            role,
            file: "/etc/x.pem".into(),
            not_after,
        };
        s.cert_expiry = Gauges::of(&[
            c(CertRole::Api, 1_767_225_600),
            c(CertRole::Rewind, 2_524_608_000),
        ]);
        let text = body(&s);
        assert_eq!(
            samples(&text, "tenure_tls_cert_expiry_timestamp_seconds"),
            [
                "tenure_tls_cert_expiry_timestamp_seconds{scope=\"demo\",name=\"pg1\",cert=\"api\"} 1767225600",
                "tenure_tls_cert_expiry_timestamp_seconds{scope=\"demo\",name=\"pg1\",cert=\"rewind\"} 2524608000",
            ]
        );
    }
}
