//! The cluster's birth: the `initialize` lock, initdb and the system identifier.
//!
//! Owns: `Bootstrapping` (initdb under the bootstrap lock, then recording the
//! system identifier), and what a node does while `initialize` is missing, locked
//! or garbage (race for the lock, or re-create a lost key from its data with the
//! rollback marker, DESIGN §3).
//!
//! Must never: run initdb because a key is missing next to data, or record a
//! system identifier after losing the lock.

use super::model::*;
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
        obs: &Observation,
        p: &mut Planner,
        view: &ClusterView,
    ) -> Result<u64, Reason> {
        let me = self.cfg.name.clone();
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
                        p.push(Action::ClaimInitialize);
                        p.again = true;
                        Reason::Bootstrapping(
                            "no initialize key: racing for the bootstrap lock".into(),
                        )
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
            Some(Initialize::Locked { holder, .. }) => Err(Reason::Waiting(format!(
                "{holder} is bootstrapping the cluster"
            ))),
            Some(Initialize::Garbage(raw)) => Err(Reason::Refusing(format!(
                "the initialize key holds something that is not a system identifier: {raw:?}"
            ))),
            Some(Initialize::Done { sysid }) => Ok(*sysid),
        }
    }
}
