//! The agent's counters and histograms for `GET /metrics` (issue 10).
//!
//! Owns: what the loop counts as it goes — renewals counted and failed, the
//! renewal round trip, how late each tick starts, deadline overruns, fences and how
//! long they took, promotions, the etcd endpoint in use and switches between
//! endpoints. Gauges (role, epoch, `F`, `H`, WAL positions, ...) are not kept here:
//! they are read from the [`ApiStatus`](crate::api::ApiStatus) snapshot when a
//! scrape is rendered (`api::metrics`).
//! Must never: allocate, block or read a clock when something is recorded (the
//! agent passes the durations it already measured), or decide anything. Buckets are
//! fixed at compile time, so an observation is a few additions into arrays that
//! live as long as the agent.

use std::time::Duration;

/// Most buckets a histogram has (its bounds are one of the consts below).
pub const MAX_BUCKETS: usize = 16;

/// Renewal round trip (keepalive sent → read answered), seconds. Spans a loopback
/// etcd (sub-millisecond) to a renewal that uses all of a 10 s `retry_timeout`.
pub const RENEWAL_BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];
/// How late a tick's iteration started after its slot on the renewal grid, seconds.
pub const LATENESS_BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
];
/// A fence, from SIGQUIT to its outcome (bounded by `demote_budget`), seconds.
pub const FENCE_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// A Prometheus histogram with fixed bounds: per-bucket counts (not cumulative:
/// the renderer adds them up), the count and the sum of what was observed.
#[derive(Clone, Debug)]
pub struct Histogram {
    /// Upper bounds, ascending (`le`); `+Inf` is implied.
    pub bounds: &'static [f64],
    /// `counts[i]`: observations in `(bounds[i-1], bounds[i]]`; the ones above the
    /// last bound are `count - sum(counts)`.
    pub counts: [u64; MAX_BUCKETS],
    pub count: u64,
    /// Sum of the observations in nanoseconds (integer, so the rendered sum in
    /// seconds carries no accumulated rounding; a u64 holds 584 years).
    pub sum_nanos: u64,
}

impl Histogram {
    /// An empty histogram over `bounds` (at most [`MAX_BUCKETS`]; extra bounds are
    /// ignored rather than panicking).
    pub const fn new(bounds: &'static [f64]) -> Histogram {
        Histogram {
            bounds,
            counts: [0; MAX_BUCKETS],
            count: 0,
            sum_nanos: 0,
        }
    }

    /// The bounds in use (at most [`MAX_BUCKETS`]).
    pub fn bounds(&self) -> &'static [f64] {
        let n = self.bounds.len().min(MAX_BUCKETS);
        &self.bounds[..n]
    }

    /// Count one observation. No allocation: an index into a fixed array.
    pub fn observe(&mut self, d: Duration) {
        let v = d.as_secs_f64();
        if let Some(i) = self.bounds().iter().position(|&b| v <= b) {
            self.counts[i] += 1;
        }
        self.count += 1;
        let ns = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        self.sum_nanos = self.sum_nanos.saturating_add(ns);
    }

    /// Sum of the observations, seconds.
    pub fn sum(&self) -> f64 {
        self.sum_nanos as f64 / 1e9
    }
}

/// What the loop counted since the agent started (Prometheus counters never go
/// back; a restart starts them from zero, which `rate()` understands).
#[derive(Clone, Debug)]
pub struct Metrics {
    /// Confirmed renewals that counted (DESIGN §1 step 2).
    pub renewals_counted: u64,
    /// Renewals sent that did not count: timed out, lease gone, key lost.
    pub renewals_failed: u64,
    pub renewal_rtt: Histogram,
    pub loop_lateness: Histogram,
    /// Iterations that took longer than `P` (+ `R` with a renewal), S6 (d).
    pub iteration_overruns: u64,
    /// Ticks that fell a whole `loop_wait` behind the renewal grid.
    pub schedule_overruns: u64,
    pub fences_complete: u64,
    pub fences_incomplete: u64,
    pub fence_duration: Histogram,
    pub promotions: u64,
    pub promotions_failed: u64,
    /// Replica builds (`create_replica_methods`) that ended, by outcome.
    pub replica_builds_ok: u64,
    pub replica_builds_failed: u64,
    /// `[etcd] endpoints`, as configured (set once at start-up).
    pub etcd_endpoints: Vec<String>,
    /// Index of the endpoint in use in `etcd_endpoints`.
    pub etcd_endpoint: usize,
    /// The endpoint in use when the SRV records no longer list it (it is kept
    /// until a call to it fails); `etcd_endpoint` is then where the list starts.
    pub etcd_endpoint_unlisted: Option<String>,
    /// Switches from one endpoint to the next (after a failed call).
    pub etcd_endpoint_switches: u64,
    /// Resolutions of endpoint names (start-up, after a failure) that answered
    /// for every name asked / that failed or timed out (crate::resolve).
    pub etcd_resolves: u64,
    pub etcd_resolve_failures: u64,
    pub etcd_resolve_timeouts: u64,
    /// etcd answers refused because they named another etcd cluster than the
    /// one the agent pinned (dcs/pin.rs).
    pub etcd_foreign_answers: u64,
}

impl Default for Metrics {
    fn default() -> Metrics {
        Metrics {
            renewals_counted: 0,
            renewals_failed: 0,
            renewal_rtt: Histogram::new(RENEWAL_BUCKETS),
            loop_lateness: Histogram::new(LATENESS_BUCKETS),
            iteration_overruns: 0,
            schedule_overruns: 0,
            fences_complete: 0,
            fences_incomplete: 0,
            fence_duration: Histogram::new(FENCE_BUCKETS),
            promotions: 0,
            promotions_failed: 0,
            replica_builds_ok: 0,
            replica_builds_failed: 0,
            etcd_endpoints: Vec::new(),
            etcd_endpoint: 0,
            etcd_endpoint_unlisted: None,
            etcd_endpoint_switches: 0,
            etcd_resolves: 0,
            etcd_resolve_failures: 0,
            etcd_resolve_timeouts: 0,
            etcd_foreign_answers: 0,
        }
    }
}

impl Metrics {
    /// A confirmed renewal's outcome and its round trip.
    pub fn renewal(&mut self, counted: bool, rtt: Duration) {
        if counted {
            self.renewals_counted += 1;
        } else {
            self.renewals_failed += 1;
        }
        self.renewal_rtt.observe(rtt);
    }

    /// A fence's outcome and how long it took.
    pub fn fence(&mut self, complete: bool, took: Duration) {
        if complete {
            self.fences_complete += 1;
        } else {
            self.fences_incomplete += 1;
        }
        self.fence_duration.observe(took);
    }

    /// A `pg_promote()` that succeeded or failed.
    /// A replica build ended.
    pub fn replica_build(&mut self, ok: bool) {
        if ok {
            self.replica_builds_ok += 1;
        } else {
            self.replica_builds_failed += 1;
        }
    }

    pub fn promotion(&mut self, ok: bool) {
        if ok {
            self.promotions += 1;
        } else {
            self.promotions_failed += 1;
        }
    }

    /// The endpoint in use changed to `index` (a failed call moved on).
    pub fn endpoint_switched(&mut self, index: usize) {
        self.etcd_endpoint = index;
        self.etcd_endpoint_switches += 1;
    }

    /// The endpoint in use, if any is configured.
    pub fn endpoint(&self) -> Option<&str> {
        if let Some(u) = &self.etcd_endpoint_unlisted {
            return Some(u);
        }
        self.etcd_endpoints
            .get(self.etcd_endpoint)
            .map(String::as_str)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn observe_puts_each_value_in_its_bucket_and_the_rest_above() {
        let mut h = Histogram::new(&[0.1, 1.0]);
        h.observe(Duration::from_millis(100)); // le 0.1 (bounds are inclusive)
        h.observe(Duration::from_millis(500)); // le 1.0
        h.observe(Duration::from_secs(3)); // +Inf only
        assert_eq!(&h.counts[..2], &[1, 1]);
        assert_eq!(h.count, 3);
        assert_eq!(h.sum(), 3.6);
    }

    #[test]
    fn counters_split_by_outcome() {
        let mut m = Metrics::default();
        m.renewal(true, Duration::from_millis(2));
        m.renewal(false, Duration::from_secs(1));
        m.fence(true, Duration::from_millis(30));
        m.promotion(true);
        m.promotion(false);
        assert_eq!((m.renewals_counted, m.renewals_failed), (1, 1));
        assert_eq!(m.renewal_rtt.count, 2);
        assert_eq!((m.fences_complete, m.fences_incomplete), (1, 0));
        assert_eq!((m.promotions, m.promotions_failed), (1, 1));
    }
}
