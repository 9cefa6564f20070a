//! Planned switchover and manual failover (issue 9): the `failover` key on the
//! leader's side, the hand-over, and the release marker's proof on the candidate's.
//!
//! Owns: the checks of a switchover request (Patroni's order: the leader named,
//! scheduled time, pause, the candidate known, healthy, streaming, caught up, the
//! synchronous standby in synchronous mode, not `nofailover`), the refusal that
//! deletes the request, the hand-over's phases (fast stop, fail-closed fence check,
//! release marker with the guarded delete, lease revoked) and the rule by which a
//! candidate may skip the early-expiry delay (docs/design.md "the release marker").
//!
//! Must never: start a hand-over from a PostgreSQL that is not running as primary,
//! write the marker before the fence check found no process left, run the local
//! PostgreSQL as primary again once a marker may exist for this epoch, or let a
//! request skip any check of an automatic takeover (a manual failover only makes a
//! replica the preferred candidate).

use std::time::Duration;

use super::fence::stop_checked;
use super::model::*;
use super::time::Instant;
use super::vacancy::Vacancy;
use super::{Core, Leadership, Planner, State};

/// A planned switchover under way on the leader.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Handover {
    /// The member the marker names (`None`: any fit replica may take over at once).
    pub candidate: Option<String>,
    pub phase: HandoverPhase,
    /// The request's `mod_revision`: a hand-over called off deletes it.
    pub failover_revision: i64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HandoverPhase {
    /// `pg_ctl stop -m fast` running: its shutdown checkpoint is the last WAL.
    Stopping,
    /// The fence as the fail-closed check that no process of it remains.
    Checking,
    /// `HandOver` planned: marker + guarded delete, then the revoke. From here the
    /// local PostgreSQL never runs as primary under this epoch again.
    Releasing,
}

/// What the leader does with a `failover` key this iteration.
pub(super) enum Request {
    /// Nothing asked (or nothing to do yet): lead as usual, with this note if any.
    Lead(Option<String>),
    /// The hand-over started: this is the step's reason.
    HandOver(Reason),
}

impl Core {
    /// Maintenance mode (`core::pause`): every switchover is refused while paused.
    /// Patroni lets an immediate one through, but here the pause also holds every
    /// candidate back (`candidacy`), so the leader would stop and nobody would take
    /// the key until `resume` (review finding F3). Refusing changes nothing.
    fn pause_refuses(&self) -> Option<String> {
        self.paused().then(|| {
            "the cluster is paused (maintenance mode): no switchover until it resumes \
             (no candidate would take the key)"
                .to_string()
        })
    }

    /// The leader with a running primary reads the `failover` key. A request it can
    /// carry out starts the hand-over; any other is refused: deleted (guarded), with
    /// the reason logged, and nothing else changes.
    pub(super) fn failover_request(
        &mut self,
        now: Instant,
        obs: &Observation,
        view: &ClusterView,
        l: &mut Leadership,
        p: &mut Planner,
    ) -> Request {
        let Some(req) = &view.failover else {
            return Request::Lead(None);
        };
        let me = self.cfg.name.clone();
        let refuse = |p: &mut Planner, why: String| {
            p.push(Action::ClearFailover {
                epoch: l.epoch,
                mod_revision: req.mod_revision,
            });
            Request::Lead(Some(format!(
                "switchover request refused: {why}; deleting the failover key"
            )))
        };
        if let Some(e) = &req.parse_error {
            return refuse(p, format!("the failover key does not parse ({e})"));
        }
        if req.member.as_deref() == Some(me.as_str()) {
            // Also the request of the switchover this node just won.
            return refuse(p, "I am already the leader".into());
        }
        // The member whose key this leadership followed, named by a request written
        // before that key was gone: it took the key after the request (served) or
        // held it when it was written (and would have refused it), then lost it
        // before it could delete it (a partition, a stall). Carried out, it would be
        // a switchover nobody asked for since (review LOW-2 of ee3df9e).
        if let (Some(m), Some((x, gone))) = (&req.member, &l.followed)
            && m == x
            && req.mod_revision < *gone
        {
            return refuse(
                p,
                format!(
                    "it names {x}, who held the key after it was written (revision {} < \
                     {gone}, when the key this leadership followed was gone): served",
                    req.mod_revision
                ),
            );
        }
        if let Some(x) = &req.leader
            && *x != me
        {
            return refuse(p, format!("it names {x} as the leader, not me"));
        }
        if req.leader.is_none() && req.member.is_none() {
            return refuse(p, "it names neither a leader nor a candidate".into());
        }
        if let Some(why) = self.pause_refuses() {
            return refuse(p, why);
        }
        if let Some(at) = req.scheduled_at {
            let text = req.scheduled_text.clone().unwrap_or_default();
            if now < at {
                return Request::Lead(Some(format!(
                    "switchover to {} scheduled at {text} (in {:.0} s)",
                    req.member.as_deref().unwrap_or("any replica"),
                    now.until(at).as_secs_f64()
                )));
            }
            let stale = Duration::from_secs(u64::from(self.timing.ttl));
            if now.since(at) > stale {
                return refuse(p, format!("it was scheduled at {text}, more than ttl ago"));
            }
        }
        let candidate = match &req.member {
            Some(c) => match self.switchover_fit(obs, view, l, c) {
                Ok(()) => Some(c.clone()),
                Err(why) => return refuse(p, why),
            },
            None => {
                let any = view
                    .members
                    .iter()
                    .filter(|m| m.name != me)
                    .any(|m| self.switchover_fit(obs, view, l, &m.name).is_ok());
                if !any {
                    return refuse(p, "no replica is fit to take over".into());
                }
                None
            }
        };
        let to = candidate
            .clone()
            .unwrap_or_else(|| "any fit replica".into());
        l.handover = Some(Handover {
            candidate,
            phase: HandoverPhase::Stopping,
            failover_revision: req.mod_revision,
        });
        p.push(Action::StartJob(JobKind::Stop));
        p.again = true;
        Request::HandOver(Reason::Other(format!(
            "switchover to {to}: stopping PostgreSQL (fast shutdown)"
        )))
    }

    /// Is `name` fit to take over from this leader right now? (Patroni's
    /// `is_failover_possible`, plus the position check on our own
    /// `pg_stat_replication`.) `Err` says why not.
    fn switchover_fit(
        &self,
        obs: &Observation,
        view: &ClusterView,
        l: &Leadership,
        name: &str,
    ) -> Result<(), String> {
        let Some(m) = view.member(name) else {
            return Err(format!("{name} is not a member of the cluster"));
        };
        let i = &m.info;
        if let Some(e) = &i.parse_error {
            return Err(format!("{name}'s member key does not parse ({e})"));
        }
        if i.tags.nofailover {
            return Err(format!("{name} is tagged nofailover"));
        }
        if !i.pg_healthy || i.role != "replica" {
            return Err(format!("{name} is not a running replica"));
        }
        let Some(s) = obs.pg.standbys.iter().find(|s| s.name == name) else {
            return Err(format!("{name} is not replicating from me"));
        };
        if !s.streaming {
            return Err(format!("{name} is not streaming from me"));
        }
        let lag = obs.pg.lsn.saturating_sub(s.flush);
        if lag > self.timing.maximum_lag_on_failover {
            return Err(format!(
                "{name} is {lag} bytes behind > maximum_lag_on_failover {}",
                self.timing.maximum_lag_on_failover
            ));
        }
        if i.timeline != obs.pg.timeline {
            return Err(format!(
                "{name} is on timeline {}, I am on {}",
                i.timeline, obs.pg.timeline
            ));
        }
        if self.timing.synchronous != SyncMode::Off {
            let listed =
                matches!(&view.sync, Some(Ok(k)) if k.leader == self.cfg.name && k.lists(name));
            if !listed {
                return Err(format!(
                    "synchronous mode: {name} is not a synchronous standby"
                ));
            }
        }
        if self.lead_refusal_of(l).is_some() {
            return Err("the leader refuses leadership changes right now".into());
        }
        Ok(())
    }

    /// A hand-over in progress would be unsafe to start while the data's epoch is
    /// refused (the operator must decide first).
    fn lead_refusal_of(&self, l: &Leadership) -> Option<String> {
        self.epoch_regression(l.epoch)
            .or_else(|| self.rollback_refusal())
    }

    /// The hand-over, one phase per observation. Until the `HandOver` txn is sent the
    /// key is ours and nobody else can promote, so a failure calls it off and the
    /// leader goes on as before (its PostgreSQL restarted by the usual path); from
    /// then on the local PostgreSQL stays stopped (docs/design.md "the release
    /// marker").
    pub(super) fn hand_over(
        &mut self,
        obs: &Observation,
        p: &mut Planner,
        mut l: Leadership,
        mut h: Handover,
    ) -> Reason {
        let to = h
            .candidate
            .clone()
            .unwrap_or_else(|| "any fit replica".into());
        let reason = match h.phase {
            HandoverPhase::Stopping => match (&obs.job, obs.pg.role) {
                (Job::Running { .. }, _) => Reason::Other(format!(
                    "switchover to {to}: waiting for PostgreSQL to stop"
                )),
                (
                    Job::Finished {
                        kind: JobKind::Stop,
                        ok: false,
                        detail,
                    },
                    _,
                ) => {
                    return self.call_off(p, l, &h, format!("the fast stop failed ({detail})"));
                }
                (_, PgRole::Stopped) => {
                    h.phase = HandoverPhase::Checking;
                    p.push(Action::Fence);
                    p.again = true;
                    Reason::Other(format!(
                        "switchover to {to}: PostgreSQL stopped; checking that no process of it remains"
                    ))
                }
                (Job::Finished { .. }, _) => {
                    return self.call_off(p, l, &h, "PostgreSQL did not stop".into());
                }
                _ => {
                    p.push(Action::StartJob(JobKind::Stop));
                    Reason::Other(format!("switchover to {to}: stopping PostgreSQL (fast)"))
                }
            },
            HandoverPhase::Checking => {
                if obs.pg.role != PgRole::Stopped {
                    return self.call_off(p, l, &h, "PostgreSQL runs again".into());
                }
                if !stop_checked(obs) {
                    // Fail closed: an incomplete check is retried, the key kept.
                    p.push(Action::Fence);
                    p.again = true;
                    Reason::Other(format!(
                        "switchover to {to}: the check that no process of PostgreSQL remains is not complete; retrying"
                    ))
                } else {
                    // INVARIANT: from here the local PostgreSQL never runs as primary
                    // under this epoch: the marker may exist once the txn is sent.
                    h.phase = HandoverPhase::Releasing;
                    p.push(Action::HandOver {
                        lease: l.lease,
                        epoch: l.epoch,
                        candidate: h.candidate.clone(),
                    });
                    p.again = true;
                    Reason::Other(format!(
                        "switchover to {to}: no process of PostgreSQL remains; publishing the release marker and deleting the key"
                    ))
                }
            }
            HandoverPhase::Releasing => match &obs.handed_over {
                Some(HandOverOutcome::Released(m)) => {
                    // The stop was clean and the new timeline forks after our last
                    // record: follow the new leader without a rewind.
                    if self.has_fence() {
                        p.push(Action::DisarmWatchdog);
                    }
                    self.needs_rewind = false;
                    self.state = State::Follower;
                    p.again = true;
                    return Reason::Other(format!(
                        "switchover to {to}: released epoch {} at shutdown checkpoint {} (timeline {}); following the new leader",
                        m.epoch, m.lsn, m.timeline
                    ));
                }
                Some(HandOverOutcome::NotSent(why)) => {
                    return self.call_off(p, l, &h, format!("the release was not sent ({why})"));
                }
                Some(HandOverOutcome::Unknown(why)) => {
                    // The marker may exist: never back to primary. Retry; a guard
                    // refusal (the key already gone) fences, which is complete at once.
                    p.push(Action::HandOver {
                        lease: l.lease,
                        epoch: l.epoch,
                        candidate: h.candidate.clone(),
                    });
                    Reason::Other(format!(
                        "switchover to {to}: the release's answer is unknown ({why}); retrying"
                    ))
                }
                None => {
                    p.push(Action::HandOver {
                        lease: l.lease,
                        epoch: l.epoch,
                        candidate: h.candidate.clone(),
                    });
                    Reason::Other(format!("switchover to {to}: releasing the key"))
                }
            },
        };
        l.handover = Some(h);
        self.state = State::Leader(l);
        reason
    }

    /// A hand-over called off before anything was published: the key is still ours,
    /// so leading goes on; the request is deleted with the reason.
    fn call_off(
        &mut self,
        p: &mut Planner,
        mut l: Leadership,
        h: &Handover,
        why: String,
    ) -> Reason {
        p.push(Action::ClearFailover {
            epoch: l.epoch,
            mod_revision: h.failover_revision,
        });
        l.handover = None;
        self.state = State::Leader(l);
        p.again = true;
        Reason::Other(format!(
            "switchover called off: {why}; still the leader, deleting the failover key"
        ))
    }

    /// The candidate the cluster prefers for this vacancy: the one the release marker
    /// of the vacated epoch names, else the `failover` key's member when the key names
    /// no leader or the one that left. Preferred for one `ttl` from when this node
    /// saw the old lease gone (no node may acquire before: counted from the DELETE,
    /// a lease that outlived it used the preference up); the others wait for it
    /// only for a rival's head start of that (`candidacy`): a candidate that never
    /// takes the key must not hold the cluster up.
    pub(super) fn preferred_candidate(
        &self,
        now: Instant,
        view: &ClusterView,
        v: &Vacancy,
    ) -> Option<String> {
        let patience = Duration::from_secs(u64::from(self.timing.ttl));
        let from = v.gone_at.map_or(v.at, |g| g.max(v.at));
        if now.since(from) > patience {
            return None;
        }
        if let Some(Ok(m)) = &view.release
            && v.old_epoch == Some(m.epoch)
            && m.taken_by.is_none()
            && m.candidate.is_some()
        {
            return m.candidate.clone();
        }
        let req = view.failover.as_ref()?;
        if req.parse_error.is_some() {
            return None;
        }
        let named = match (&req.leader, &v.old_holder) {
            (None, _) => req.member.clone(),
            (Some(x), Some(old)) if x == old => req.member.clone(),
            _ => None,
        };
        // A request whose candidate held the key that just went vacant was served:
        // it took the key and lost it (a partition, a stall) before it could clear
        // the request. Preferring it again would have every other node wait a ttl
        // for a node that is gone (simulation seeds 1725165121, 1725169102).
        named.filter(|x| Some(x) != v.old_holder.as_ref())
    }

    /// DESIGN §1 step 4's exception: the release marker proves that the holder of the
    /// vacated epoch stopped with a shutdown checkpoint at `lsn` and fenced before its
    /// guarded delete. It lets this node skip the early-expiry delay only if it names
    /// this node (or nobody), and this node's WAL is on its timeline and reaches its
    /// position. `Err` says why the marker does not apply (for the log).
    pub(super) fn release_proves(
        &self,
        obs: &Observation,
        v: &Vacancy,
    ) -> Result<ReleaseMarker, String> {
        let Ok(view) = &obs.cluster else {
            return Err("etcd unreadable".into());
        };
        let m = match &view.release {
            None => return Err("no release marker".into()),
            Some(Err(e)) => return Err(format!("the release marker does not parse ({e})")),
            Some(Ok(m)) => m,
        };
        // Taken by an acquisition after it: it speaks for an older DELETE (review F1).
        if let Some(t) = &m.taken_by {
            return Err(format!(
                "the release marker of epoch {} was taken by {t}",
                m.epoch
            ));
        }
        // Mixed versions: a member whose acquisitions do not take markers could have
        // led since without a trace on the marker (review of F1).
        if let Some(old) = view
            .members
            .iter()
            .find(|m| !binds_release_markers(&m.info.version))
        {
            return Err(format!(
                "member {} runs tenure version {:?}, whose acquisitions do not take release markers",
                old.name, old.info.version
            ));
        }
        // A newer epoch published by any member means a leadership came after the
        // marker's: it proves nothing about this DELETE (review F1).
        if v.seen_epoch > m.epoch {
            return Err(format!(
                "the release marker is of epoch {}, but epoch {} led since",
                m.epoch, v.seen_epoch
            ));
        }
        if v.old_epoch != Some(m.epoch) {
            return Err(format!(
                "the release marker is of epoch {}, not of the vacated one",
                m.epoch
            ));
        }
        if let Some(c) = &m.candidate
            && *c != self.cfg.name
        {
            return Err(format!("the release marker names {c}"));
        }
        if obs.pg.timeline != m.timeline {
            return Err(format!(
                "I am on timeline {}, the release marker on {}",
                obs.pg.timeline, m.timeline
            ));
        }
        if obs.pg.lsn < m.lsn {
            return Err(format!(
                "my WAL reaches {}, short of the release marker's {}",
                obs.pg.lsn, m.lsn
            ));
        }
        Ok(m.clone())
    }

    /// A key of this node's own at start-up whose epoch a release marker gave up: the
    /// hand-over was under way when the agent stopped. Never resume on it (S4).
    pub(super) fn released_by_marker(&self, view: &ClusterView, epoch: Epoch) -> bool {
        matches!(&view.release, Some(Ok(m)) if m.epoch == epoch && m.by == self.cfg.name)
    }
}

/// The first tenure version whose acquire txn binds release markers to their DELETE
/// and takes them (review F1).
const BINDS_MARKERS_SINCE: (u64, u64, u64) = (0, 1, 0);

/// Whether a member publishing `version` (its agent's `X.Y.Z`, a pre-release or
/// build suffix allowed) takes release markers when it acquires. Anything else —
/// an older tenure, a PostgreSQL version number older builds published, garbage —
/// does not, and no marker proves anything while such a member is in the cluster.
pub fn binds_release_markers(version: &str) -> bool {
    let core = version.split(['-', '+']).next().unwrap_or("");
    let mut parts = core.split('.').map(|p| p.parse::<u64>().ok());
    match (parts.next(), parts.next(), parts.next(), parts.next()) {
        (Some(Some(a)), Some(Some(b)), Some(Some(c)), None) => (a, b, c) >= BINDS_MARKERS_SINCE,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::binds_release_markers;

    #[test]
    fn versions_that_bind_release_markers() {
        for v in [
            "0.1.0",
            "0.1.1",
            "0.2.0-rc1",
            "1.0.0+deb12",
            env!("CARGO_PKG_VERSION"),
        ] {
            assert!(binds_release_markers(v), "{v}");
        }
        for v in ["15", "", "0.0.9", "0.1", "0.1.0.1", "x.y.z", "3.2.0x"] {
            assert!(!binds_release_markers(v), "{v}");
        }
    }
}
