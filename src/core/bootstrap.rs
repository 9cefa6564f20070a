//! The cluster's birth: the `initialize` lock, initdb and the system identifier.
//!
//! Owns: `Bootstrapping` (initdb under the bootstrap lock, then recording the
//! system identifier), and what a node does while `initialize` is missing, locked
//! or garbage (race for the lock, or re-create a lost key from its data with the
//! rollback marker, DESIGN §3).
//!
//! Must never: run initdb because a key is missing next to data, or record a
//! system identifier after losing the lock or while another member shows data;
//! race for the lock while a member shows data, or before `L_w + R` after this
//! node first found the key missing.

use std::time::Duration;

use super::model::*;
use super::time::Instant;
use super::{Core, Planner, State};

impl Core {
    pub(super) fn bootstrapping(
        &mut self,
        obs: &Observation,
        p: &mut Planner,
        lease: LeaseId,
    ) -> Reason {
        if let Some(written) = obs.recorded_initialize {
            if written {
                self.bootstrapped_here = true;
                // Any vacancy seen so far predates the cluster: nobody led before us.
                self.vacancy = None;
                self.state = State::Follower;
                p.again = true;
                return Reason::Bootstrapping(
                    "recorded the system identifier in initialize".into(),
                );
            }
            // Our lock expired under us: our data is of a cluster nobody agreed on.
            // It is held, so no later loop re-creates `initialize` from it (and
            // remembered, should the mark not be written).
            self.given_up = obs.pg.data.sysid();
            p.push(Action::HoldDataDir {
                why: "a bootstrap made this directory, but its initialize lock was lost \
                      before the system identifier was recorded: no `initialize` key \
                      names this cluster (another member may have made the cluster)"
                    .into(),
            });
            self.state = State::Follower;
            return Reason::Refusing(
                "lost the initialize lock before recording the system identifier; \
                 the new data directory must be moved aside by an operator"
                    .into(),
            );
        }
        match (&obs.job, &obs.pg.data) {
            (Job::Running { .. }, _) => Reason::Bootstrapping("initdb running".into()),
            (
                Job::Finished {
                    kind: JobKind::InitDb,
                    ok: false,
                    detail,
                },
                _,
            ) => {
                // Leave the lock to expire; another node (or we) may retry.
                p.push(Action::Revoke { lease });
                self.state = State::Follower;
                Reason::Refusing(format!("initdb failed: {detail}"))
            }
            (_, DataDir::Present { sysid, .. }) => {
                // A host with data showed itself while initdb ran (a restore whose
                // host started a little after this one's grace ended): its data is
                // the cluster, this new one would be refused by it. Give the lock
                // back and hold the new directory (never removed: post_bootstrap
                // may have put data in it); the restored host then re-creates
                // `initialize` from its own data.
                // Only on this iteration's read (a failed one decides nothing: a
                // record sent to the next etcd member could land while the member
                // shows data), and never once `initialize` names our data (a record
                // whose answer was lost: the next record reads it as written).
                let Ok(view) = &obs.cluster else {
                    return Reason::Bootstrapping(format!(
                        "initdb done, system identifier {sysid}; recording it at the next \
                         read of the cluster"
                    ));
                };
                let ours =
                    matches!(view.initialize, Some(Initialize::Done { sysid: s }) if s == *sysid);
                if !ours
                    && let Some(shown) = Self::member_with_data(view, &self.cfg.name, Some(*sysid))
                {
                    // Remembered for this run: a mark that cannot be written (a
                    // full disk) must not let a later loop re-create `initialize`
                    // from this directory.
                    self.given_up = Some(*sysid);
                    p.push(Action::HoldDataDir {
                        why: format!(
                            "a bootstrap made this directory (system identifier {sysid}), \
                             then gave the cluster up before recording it because {shown}: \
                             empty it to make this node a replica of that cluster"
                        ),
                    });
                    p.push(Action::Revoke { lease });
                    self.state = State::Follower;
                    return Reason::Refusing(format!(
                        "gave the bootstrap up after initdb: {shown}; this node's new data \
                         directory is held"
                    ));
                }
                p.push(Action::RecordInitialize {
                    sysid: *sysid,
                    lease,
                });
                p.again = true;
                Reason::Bootstrapping(format!("initdb done, system identifier {sysid}"))
            }
            (_, DataDir::Empty) => {
                p.push(Action::StartJob(JobKind::InitDb));
                Reason::Bootstrapping("won the initialize lock; running initdb".into())
            }
            (_, DataDir::Unusable(why)) => {
                p.push(Action::Revoke { lease });
                self.state = State::Follower;
                Reason::Refusing(format!("data directory unusable: {why}"))
            }
            (_, DataDir::Held(why)) => {
                p.push(Action::Revoke { lease });
                self.state = State::Follower;
                Reason::Refusing(format!("data directory held: {why}"))
            }
        }
    }

    /// The cluster's system identifier from `initialize`; while there is none yet
    /// (missing, locked by a bootstrapping node, garbage), what this node does
    /// instead: race for the bootstrap lock with an empty data directory, re-create
    /// a lost key from its data (with the rollback marker, DESIGN §3), or wait.
    pub(super) fn cluster_sysid(
        &mut self,
        now: Instant,
        obs: &Observation,
        p: &mut Planner,
        view: &ClusterView,
    ) -> Result<u64, Reason> {
        let me = self.cfg.name.clone();
        // The grace counts from the first read without the key, a refused one too.
        if view.initialize.is_none() && obs.pg.data == DataDir::Empty {
            self.empty_since.get_or_insert(now);
        } else {
            self.empty_since = None;
        }
        match &view.initialize {
            None => {
                Err(match &obs.pg.data {
                    DataDir::Empty if self.leadership_refusal().is_some() => {
                        Reason::Refusing(format!(
                            "not bootstrapping: {}",
                            self.leadership_refusal().unwrap_or_default()
                        ))
                    }
                    DataDir::Empty => {
                        // A host with data re-creates `initialize` from it at its
                        // first read (below); an empty one that won the race first
                        // would initdb a new, empty cluster over which that host's
                        // data is refused (system identifier mismatch): a restore
                        // started on every host at once. So the empty host waits
                        // while a member shows data, and until an agent started
                        // within about a loop of it has had a whole loop
                        // (`L_w + R`) to show itself.
                        if let Some(reason) = Self::member_with_data(view, &me, None) {
                            self.empty_since = None;
                            return Err(Reason::Waiting(format!(
                                "no initialize key; not bootstrapping while {reason}"
                            )));
                        }
                        let since = self.empty_since.unwrap_or(now);
                        let grace = self.bootstrap_grace();
                        let waited = now.since(since);
                        if waited < grace {
                            // Raced when the grace ends, not at the next tick.
                            p.wake_by(since.add(grace));
                            return Err(Reason::Waiting(format!(
                                "no initialize key: racing for the bootstrap lock in {:.1} s \
                                 (a host with data started with this one goes first)",
                                (grace - waited).as_secs_f64()
                            )));
                        }
                        p.push(Action::ClaimInitialize);
                        p.again = true;
                        Reason::Bootstrapping(
                            "no initialize key: racing for the bootstrap lock".into(),
                        )
                    }
                    DataDir::Present { sysid, .. } if self.given_up == Some(*sysid) => {
                        Reason::Refusing(format!(
                            "this node's bootstrap was given up (system identifier \
                             {sysid}): its data directory is no cluster's; empty it"
                        ))
                    }
                    DataDir::Present { sysid, .. } => {
                        // `initialize` is never deleted: missing next to data, etcd
                        // lost its memory. The marker goes in the same txn.
                        let rollback = self.rollback_seen.clone().unwrap_or(RollbackSeen {
                            seen_revision: self.prior_max_revision,
                            found_revision: view.revision,
                            reason: format!(
                                "initialize was missing while {me} has data (system identifier {sysid})"
                            ),
                        });
                        p.push(Action::CreateInitialize {
                            sysid: *sysid,
                            rollback,
                        });
                        p.again = true;
                        Reason::Bootstrapping(format!(
                            "initialize key missing; re-creating it from my data (system identifier {sysid})"
                        ))
                    }
                    DataDir::Unusable(why) => self.unusable(p, why),
                    DataDir::Held(why) => Reason::Refusing(format!("data directory held: {why}")),
                })
            }
            // The lock's value is empty (as Patroni's): its holder is not named
            // in it, only its lease.
            Some(Initialize::Locked { lease, .. }) => Err(Reason::Waiting(format!(
                "another member is bootstrapping the cluster (it holds the initialize \
                 lock, lease {lease:x})"
            ))),
            Some(Initialize::Garbage(raw)) => Err(Reason::Refusing(format!(
                "the initialize key holds something that is not a system identifier: {raw:?}"
            ))),
            Some(Initialize::Done { sysid }) => Ok(*sysid),
        }
    }

    /// How long an empty node waits after it first read the scope without
    /// `initialize` (the first read after the last failed one) before it races for
    /// the bootstrap lock: one whole loop of any agent (`loop_wait`, and
    /// `retry_timeout` for its etcd calls), within which an agent started within
    /// about a loop of it, its start-up work done, has read the scope and, if it has
    /// data, re-created the key.
    pub(super) fn bootstrap_grace(&self) -> Duration {
        self.timing.loop_wait + self.timing.retry_timeout
    }

    /// Another member whose key shows a data directory (`database_system_identifier`)
    /// while `initialize` is missing: said as the reason an empty node does not
    /// bootstrap. Its data is the cluster's: a follower re-creates `initialize` from
    /// it at its next read; a leader does not (the key deleted by hand under a
    /// running cluster), and the empty node waits until an operator acts.
    pub(super) fn member_with_data(
        view: &ClusterView,
        me: &str,
        mine: Option<u64>,
    ) -> Option<String> {
        view.members
            .iter()
            .filter(|m| m.name != me)
            // Our own new cluster under another name (a renamed agent) is not
            // another member's data.
            .find_map(|m| m.info.sysid.filter(|s| Some(*s) != mine).map(|s| (m, s)))
            .map(|(m, sysid)| format!("{} has data (system identifier {sysid})", m.name))
    }
}
