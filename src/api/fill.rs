//! How the agent's facts become an [`ApiStatus`]: once per loop iteration from the
//! observation and the core, and the lease-derived fields again at request time.
//!
//! Owns: the mapping from `Observation`/`Core`/`Config` to the API's snapshot and to
//! the replica positions the member key publishes.
//! Must never: do I/O or read a clock (the agent passes the instants), or decide
//! anything: the core decides, this only reports.

use std::time::Duration;

use super::ApiStatus;
use crate::config::Config;
use crate::core::Core;
use crate::core::model::{Job, JobKind, Lsn, Observation, PgRole, PgStatus, SyncMode, Tags};
use crate::core::time::Instant;

/// The tags this node publishes (member key, status JSON, `?tag_` matching).
pub fn tags(cfg: &Config, refuses_leadership: bool) -> Tags {
    Tags {
        // S3: a node that refuses leadership (required watchdog missing or
        // unusable) must not be waited for as "a better candidate": that would
        // block every failover behind it.
        nofailover: cfg.nofailover || refuses_leadership,
        noloadbalance: cfg.noloadbalance,
        nosync: cfg.nosync,
        clonefrom: cfg.clonefrom,
        custom: cfg.custom_tags.clone(),
    }
}

/// The snapshot before the first iteration: nothing known yet.
pub fn initial(cfg: &Config) -> ApiStatus {
    ApiStatus {
        name: cfg.name.clone(),
        scope: cfg.scope.clone(),
        role: "unknown",
        state: "starting".into(),
        reason: "starting".into(),
        cluster_unlocked: true,
        tags: tags(cfg, false),
        maximum_lag_on_failover: cfg.dynamic.maximum_lag_on_failover,
        ttl: cfg.timing.ttl,
        loop_wait: cfg.timing.loop_wait,
        primary_min_remaining: cfg.api.primary_min_remaining,
        cert_expiry: crate::certs::Gauges::of(&cfg.certs),
        metrics: crate::metrics::Metrics {
            etcd_endpoints: cfg.etcd.endpoints.clone(),
            ..crate::metrics::Metrics::default()
        },
        ..ApiStatus::default()
    }
}

/// Patroni's member-key state for this PostgreSQL: a job under way names what it
/// does (Patroni's words: `creating replica` while a replica's copy is built,
/// `initializing new cluster` during initdb, `restarting`), else the role's.
pub fn pg_state(role: PgRole, job: &Job) -> &'static str {
    match job {
        Job::Running {
            kind: JobKind::Basebackup { .. },
            ..
        } => return "creating replica",
        Job::Running {
            kind: JobKind::InitDb,
            ..
        } => return "initializing new cluster",
        Job::Running {
            kind: JobKind::Restart { .. },
            ..
        } => return "restarting",
        _ => {}
    }
    match role {
        PgRole::Stopped => "stopped",
        PgRole::Unresponsive => "starting",
        PgRole::Primary | PgRole::Replica => "running",
    }
}

/// A replica's positions for its member key (Patroni's `receive_lsn`, `replay_lsn`,
/// `replication_state`); none on a primary or a PostgreSQL not answering.
pub fn member_positions(pg: &PgStatus) -> (Option<Lsn>, Option<Lsn>, Option<String>) {
    if pg.role != PgRole::Replica {
        return (None, None, None);
    }
    (
        pg.report.receive_lsn,
        pg.report.replay_lsn,
        pg.streaming.then(|| "streaming".to_string()),
    )
}

/// Once per iteration, after the core's step: what this iteration observed.
/// `wall_now` is `CLOCK_REALTIME` (for `dcs_last_seen`), `now` `CLOCK_BOOTTIME`.
/// The armed watchdog's `W` is the agent's to set (`ApiStatus::watchdog`).
pub fn update(
    s: &mut ApiStatus,
    cfg: &Config,
    core: &Core,
    obs: &Observation,
    reason: &str,
    now: Instant,
    wall_now: Duration,
) {
    let leadership = core.leadership();
    let pg = &obs.pg;
    s.holds_leader_key = leadership.is_some();
    s.pg_running = matches!(pg.role, PgRole::Primary | PgRole::Replica);
    s.pg_primary = pg.role == PgRole::Primary;
    s.streaming = pg.role == PgRole::Replica && pg.streaming;
    s.role = match pg.role {
        PgRole::Primary => "primary",
        PgRole::Replica => "replica",
        _ => "unknown",
    };
    s.state = pg_state(pg.role, &obs.job).into();
    if let Job::Running {
        kind: JobKind::Restart { .. },
        ..
    } = &obs.job
    {
        // An operator's restart (Patroni's state, `pg_state`): whatever the probe
        // caught on the way down or up, nothing routes here until the job ended.
        s.pg_running = false;
        s.pg_primary = false;
        s.streaming = false;
    }
    s.timeline = pg.timeline;
    s.sysid = pg.data.sysid();
    s.lsn = pg.lsn;
    if s.report.slots_json != pg.report.slots_json {
        s.slots = crate::pg::slots::parse_local(pg.report.slots_json.as_deref());
    }
    s.report.clone_from(&pg.report);
    s.replication = pg
        .report
        .replication_json
        .as_deref()
        .and_then(|j| serde_json::from_str(j).ok());
    s.epoch = leadership.map(|l| l.epoch).or_else(|| {
        obs.cluster
            .as_ref()
            .ok()
            .and_then(|v| v.leader.as_ref().map(|k| k.epoch))
    });
    // Kept while etcd is unreadable: the last cluster read still answers, for a ttl
    // (`cluster_read_at`), as Patroni's cached cluster does.
    if let Ok(v) = &obs.cluster {
        s.leader = v.leader.as_ref().map(|k| k.name.clone());
        s.cluster_unlocked = v.leader.is_none();
        s.status_optime = v.status_optime;
        s.cluster_read_at = Some(now);
        s.dcs_last_seen = wall_now.as_secs();
        s.sync_standby = core.timing().synchronous != SyncMode::Off
            && matches!(&v.sync, Some(Ok(k)) if k.lists(&cfg.name));
        // `/cluster`, `/history`, `/config` answer from this read (no etcd call per
        // request).
        s.cluster.members.clone_from(&v.members);
        s.cluster.history.clone_from(&v.history);
        s.cluster.config.clone_from(&v.config);
        s.cluster.sync_standbys = match &v.sync {
            Some(Ok(k)) if core.timing().synchronous != SyncMode::Off => k.sync_standbys.clone(),
            _ => Vec::new(),
        };
    }
    s.tags = tags(cfg, core.refuses_leadership());
    s.maximum_lag_on_failover = core.timing().maximum_lag_on_failover;
    s.ttl = leadership.map_or(core.timing().ttl, |l| l.ttl);
    s.loop_wait = core.timing().loop_wait;
    s.reason.clear();
    s.reason.push_str(reason);
}

/// At request time: the instant, `F` and the last iteration's start, so `/primary`
/// answers from the lease as it is now, not as it was at the last iteration.
pub fn refresh(s: &mut ApiStatus, core: &Core, now: Instant, last_iteration: Option<Instant>) {
    s.now = now;
    s.fence_deadline = core.fence_deadline();
    s.holds_leader_key = core.leadership().is_some();
    s.last_iteration = last_iteration;
    s.horizon = core.horizon();
    s.lease_ttl = core.leadership().map(|l| l.ttl);
}
