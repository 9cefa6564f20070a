//! An operator's PostgreSQL actions (`POST /restart`, `POST /reinitialize`): whether
//! one may start now, and the job that carries it out.
//!
//! Owns: the refusals (Patroni's sentences where Patroni has one) and the choice of
//! job. The shell asks between two steps and starts the job itself; from then on
//! the job is an ordinary `Job::Running` the state's own step already handles (the
//! leader keeps renewing on its fixed schedule and keeps its fence deadline, S1).
//! Must never: change the core's state (asking is free), let a node that leads
//! reinitialize, or restart a PostgreSQL this node is about to fence (S4) or whose
//! leadership is not settled (adopting, promoting, fencing, stopping).

use super::model::*;
use super::{Core, State};

impl Core {
    /// `POST /restart`: the job that restarts the running PostgreSQL, or why not now.
    /// `pg`: the last probe; `running`: the job in progress, if any.
    ///
    /// On the leader the key is kept through the restart: the primary is down
    /// while the key is held (no writes anywhere, the health API answers 503), the
    /// renewals and `F` are untouched (S1), and it starts again under the same
    /// epoch with its fence still armed (S3's condition for writes holds
    /// throughout). A restart that does not bring it back within
    /// `primary_start_timeout` gives the key up, as after any failure.
    pub fn restart_job(
        &self,
        pg: &PgStatus,
        running: Option<&JobKind>,
        start_timeout: Option<u32>,
    ) -> Result<JobKind, String> {
        if let Some(kind) = running {
            return Err(format!("{} already in progress", job_name(kind)));
        }
        self.settled()?;
        match (&self.state, pg.role) {
            (State::Leader(l), PgRole::Primary) if l.promoted && self.fence_armed(l) => {}
            (State::Leader(_), _) => {
                return Err(
                    "PostgreSQL is not running as the primary yet: the agent brings it \
                            up itself"
                        .into(),
                );
            }
            (_, PgRole::Replica) => {}
            (_, PgRole::Primary) => {
                // S4: a primary without the key is about to be fenced.
                return Err("a local primary without the leader key is being fenced (S4)".into());
            }
            (_, PgRole::Stopped | PgRole::Unresponsive) => {
                return Err("PostgreSQL is not running: the agent starts it by itself".into());
            }
        }
        Ok(JobKind::Restart { start_timeout })
    }

    /// `POST /reinitialize`: the job that moves this replica's data directory aside
    /// (the follower then clones the leader), or why not now. `force`: a running
    /// job is no refusal (the shell kills it first). Patroni's refusals, then ours:
    /// the leader must run as a primary, or nothing could be cloned and this node
    /// would be left without data.
    pub fn reinitialize_job(
        &self,
        view: Option<&ClusterView>,
        pg: &PgStatus,
        running: Option<&JobKind>,
        force: bool,
    ) -> Result<JobKind, String> {
        let me = self.cfg.name.as_str();
        let view = view.ok_or("etcd has not been read yet: cannot tell who leads")?;
        let Some(leader) = &view.leader else {
            return Err("Cluster has no leader, can not reinitialize".into());
        };
        if matches!(self.state, State::Leader(_)) || leader.name == me {
            return Err("I am the leader, can not reinitialize".into());
        }
        if let Some(kind) = running
            && !force
        {
            return Err(format!("{} already in progress", job_name(kind)));
        }
        self.settled()?;
        if pg.may_accept_writes() {
            return Err("a local primary without the leader key is being fenced (S4)".into());
        }
        let healthy = view
            .member(&leader.name)
            .is_some_and(|m| m.info.role == "primary" && m.info.pg_healthy);
        if !healthy {
            return Err(format!(
                "leader {} is not running as a primary: nothing to clone from",
                leader.name
            ));
        }
        Ok(JobKind::Reinitialize)
    }

    /// The states in which an operator's job may start: leading or following.
    fn settled(&self) -> Result<(), String> {
        match &self.state {
            State::Leader(_) | State::Follower => Ok(()),
            State::Init | State::Adopting { .. } => {
                Err("the agent is starting up: retry in a moment".into())
            }
            State::Bootstrapping { .. } => Err("the cluster is bootstrapping".into()),
            State::Fencing { .. } => Err("this node is fencing its PostgreSQL".into()),
            State::Stopping => Err("the agent is shutting down".into()),
        }
    }
}

/// A job as Patroni names its actions ("restart already in progress").
pub fn job_name(kind: &JobKind) -> &'static str {
    match kind {
        JobKind::InitDb => "bootstrap",
        JobKind::Basebackup { .. } => "basebackup",
        JobKind::Rewind { .. } => "pg_rewind",
        JobKind::StartPrimary | JobKind::StartReplica { .. } => "start",
        JobKind::Stop => "stop",
        JobKind::Restart { .. } => "restart",
        JobKind::Reinitialize => "reinitialize",
    }
}
