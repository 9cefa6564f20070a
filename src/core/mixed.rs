//! Mixed-version clusters (finding L1): members whose agent is older than the
//! acquisition record (docs/design.md "the acquisition record").
//!
//! Such an agent writes no record, and it leaves no trace in `release` when it finds
//! the key absent or garbled (it deletes a value it cannot parse). So while one runs,
//! `release` may not show every acquisition: not one before the read a candidate
//! decided on, nor one after it that the acquire txn's compare-and-set cannot see.
//!
//! Owns: which members of a read lack the capability (`"acquire_record": true` in
//! the member key, `MemberInfo::lacks_acquire_record`), the mark an open vacancy
//! keeps once a read showed one, and the delay a win takes in such a cluster.
//!
//! Must never: let a candidate rely on the record while a member lacks it (S3), or
//! read a clock (the win's instant is the step's `now`).

use std::time::Duration;

use super::Core;
use super::model::{ClusterView, Member, Observation};
use super::time::Instant;
use super::vacancy::untimeable;

/// The members of `view`, other than `me`, whose key does not say that their
/// acquisitions write the acquisition record: an older agent's, or one that is not
/// a JSON object (conservative: it may be one).
pub fn older_agents<'a>(view: &'a ClusterView, me: &'a str) -> impl Iterator<Item = &'a Member> {
    view.members
        .iter()
        .filter(move |m| m.name != me && m.info.lacks_acquire_record)
}

impl Core {
    /// A read that shows an older agent while a vacancy is open makes the vacancy
    /// untimeable from this read, as after a gap in the watch (no `W`, no TTL of the
    /// tracked holder, no release marker; every leader lease a member publishes
    /// for a newer leadership owed gone): its acquisitions before this read may
    /// have left no trace in `release`. Once per vacancy (else its instant would
    /// move with every read); the mark names the member for the win's reason.
    pub(super) fn note_older_agents(&mut self, now: Instant, obs: &Observation) {
        let Ok(view) = &obs.cluster else { return };
        let Some(v) = &self.vacancy else { return };
        if v.older_agent.is_some() {
            return;
        }
        let Some(old) = older_agents(view, &self.cfg.name).next() else {
            return;
        };
        let mut m = untimeable(v.clone(), now, view, &self.cfg.name);
        // DESIGN §3a: positions published before this read may predate such an
        // unseen leadership's DELETE (as in `missed_in_release`).
        m.seen_revision = m.seen_revision.max(view.revision);
        m.absent_through = m.absent_through.max(view.revision);
        m.older_agent = Some(old.name.clone());
        // INVARIANT (S3, finding L1): a vacancy that ever saw an older agent is
        // untimeable, and `won` counts its delay from the win (`older_agent_delay`).
        self.vacancy = Some(m);
    }

    /// The promote delay of a win while an older agent runs (the open vacancy saw
    /// one, or the read after the win shows one), whatever marker or record the
    /// candidate read: the horizon bound `ttl + R` (`ttl` the largest leader TTL
    /// known, `horizon_ttl`), counted from this step, which comes after the acquire
    /// txn applied. Every leadership before our win, one that came after the read
    /// we decided on included (the compare-and-set cannot see an older agent's
    /// acquisition over an absent `release`), had its key deleted before our txn
    /// applied, so its last counted renewal was sent before `now`: its horizon
    /// `s + ttl - M`, and with it its fence deadline, is before `now + ttl`.
    pub(super) fn older_agent_delay(
        &self,
        now: Instant,
        obs: &Observation,
        horizon_ttl: u32,
    ) -> Option<(Instant, String)> {
        let name = self
            .vacancy
            .as_ref()
            .and_then(|v| v.older_agent.clone())
            .or_else(|| {
                let view = obs.cluster.as_ref().ok()?;
                older_agents(view, &self.cfg.name)
                    .next()
                    .map(|m| m.name.clone())
            })?;
        let d = Duration::from_secs(u64::from(horizon_ttl)) + self.timing.retry_timeout;
        Some((
            now.add(d),
            format!(
                "member {name} runs an agent older than the acquisition record (mixed \
                 versions): its acquisitions may leave no trace, so waiting ttl + R = \
                 {:.1} s from the win",
                d.as_secs_f64()
            ),
        ))
    }
}
