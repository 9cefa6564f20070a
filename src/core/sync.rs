//! Synchronous replication (DESIGN §3a): who may take over, and the running
//! primary's `sync` key and `synchronous_standby_names`.
//!
//! Owns: the `sync` key's rule for candidates, the names a leader needs before its
//! PostgreSQL accepts a write, the one-step-per-iteration order of listing and
//! unlisting a synchronous standby, and how long the names have held.
//!
//! Must never: list a standby in the `sync` key before the names name it and it
//! flushed past the writes acknowledged before, or change the names away from a
//! standby the key still lists.

use super::model::*;
use super::time::Instant;
use super::{Core, Planner, catchup};

/// `synchronous_standby_names` that makes `standby` the one synchronous standby
/// (a quoted name: member names may hold characters the list syntax reserves).
pub fn sync_names_for(standby: &str) -> String {
    format!("\"{}\"", standby.replace('"', "\"\""))
}

impl Core {
    /// Synchronous mode (DESIGN §3a): only the leader that wrote the `sync` key or
    /// the standby it lists may take the leader key. `Err` says why `name` may not.
    /// No key at all: no leader ever listed a standby (a leader writes the key
    /// before its PostgreSQL accepts a write in synchronous mode), so asynchronous
    /// rules apply.
    pub(super) fn sync_allows(&self, view: &ClusterView, name: &str) -> Result<(), String> {
        if self.timing.synchronous == SyncMode::Off {
            return Ok(());
        }
        match &view.sync {
            None => Ok(()),
            Some(Err(e)) => Err(format!(
                "synchronous mode, and the sync key is unreadable ({e}): nobody may take over \
                 until a leader rewrites it"
            )),
            Some(Ok(k)) if k.allows(name) => Ok(()),
            Some(Ok(k)) => Err(format!(
                "synchronous mode: the sync key allows only {}{}",
                k.leader,
                k.sync_standby
                    .as_ref()
                    .map(|s| format!(" and {s}"))
                    .unwrap_or_default()
            )),
        }
    }

    /// The standby the `sync` key lists when it names this node as the leader. Any
    /// other key (missing, another leader's, garbled) is rewritten to name this node
    /// with no standby, and `Err` says so: nothing may go on until it is read back.
    pub(super) fn sync_key_for_me(
        &self,
        view: &ClusterView,
        epoch: Epoch,
        p: &mut Planner,
    ) -> Result<Option<String>, String> {
        let me = &self.cfg.name;
        match &view.sync {
            Some(Ok(k)) if k.leader == *me => Ok(k.sync_standby.clone()),
            other => {
                p.push(Action::WriteSync {
                    epoch,
                    leader: me.clone(),
                    sync_standby: None,
                });
                p.again = true;
                Err(match other {
                    Some(Err(e)) => format!("the sync key is unreadable ({e}); rewriting it"),
                    _ => "writing the sync key that names me".into(),
                })
            }
        }
    }

    /// `synchronous_standby_names` while the `sync` key lists `standby` (or none).
    pub(super) fn sync_names_wanted(&self, standby: Option<&str>) -> String {
        match (self.timing.synchronous, standby) {
            (SyncMode::Off, _) | (SyncMode::On, None) => String::new(),
            (_, Some(s)) => sync_names_for(s),
            (SyncMode::Strict, None) => "*".into(),
        }
    }

    /// Has `synchronous_standby_names` read `want` for at least a loop?
    pub(super) fn names_settled(&self, now: Instant, want: &str) -> bool {
        self.names_seen
            .as_ref()
            .is_some_and(|(n, since)| n == want && now.since(*since) >= self.timing.loop_wait)
    }

    /// Before this leadership's PostgreSQL may accept a write (a promotion, or a
    /// start as primary): in synchronous mode the `sync` key names this node as the
    /// leader (so no former leader or its standby can take over behind writes it
    /// acknowledges), and `synchronous_standby_names` is what that key allows: `*`
    /// in strict mode, empty otherwise (Patroni's order). `running`: PostgreSQL runs
    /// (the names must be seen in effect); else the value is set for the start.
    /// `Err` says what is awaited; the actions that advance it are pushed.
    pub(super) fn sync_before_writes(
        &mut self,
        now: Instant,
        obs: &Observation,
        epoch: Epoch,
        p: &mut Planner,
        running: bool,
    ) -> Result<(), String> {
        let standby = if self.timing.synchronous == SyncMode::Off {
            None
        } else {
            let Ok(view) = &obs.cluster else {
                return Err(
                    "synchronous mode: the sync key must name me first, etcd unreadable".into(),
                );
            };
            self.sync_key_for_me(view, epoch, p)
                .map_err(|why| format!("synchronous mode: {why}"))?
        };
        let want = self.sync_names_wanted(standby.as_deref());
        if !running {
            p.push(Action::SetSyncNames { names: want });
            return Ok(());
        }
        if self.timing.synchronous == SyncMode::Off {
            // Only a stale non-empty value (from an earlier synchronous leadership)
            // would hold commits back; an unknown one is not waited for.
            if obs.pg.sync_names.as_deref().is_some_and(|n| !n.is_empty()) {
                p.push(Action::SetSyncNames { names: want });
                return Err("clearing synchronous_standby_names (synchronous mode is off)".into());
            }
            return Ok(());
        }
        if obs.pg.sync_names.as_deref() != Some(want.as_str()) {
            p.push(Action::SetSyncNames {
                names: want.clone(),
            });
            return Err(format!("setting synchronous_standby_names to {want:?}"));
        }
        if !self.names_settled(now, &want) {
            return Err(format!(
                "synchronous_standby_names {want:?} takes effect in every process"
            ));
        }
        Ok(())
    }

    /// The running primary's synchronous replication, one step per iteration in
    /// DESIGN §3a's order: a standby is listed in the `sync` key only after
    /// `synchronous_standby_names` names it, PostgreSQL reports it `sync` and it
    /// flushed the WAL written before the names took effect (`catchup`); it is
    /// unlisted (guarded write) before the names stop naming it. A failed write
    /// changes nothing: the names keep what the key promises. Returns a note for the
    /// log line, `None` when synchronous mode is off and nothing is left to undo.
    pub(super) fn manage_sync(
        &mut self,
        now: Instant,
        view: &ClusterView,
        pg: &PgStatus,
        epoch: Epoch,
        p: &mut Planner,
    ) -> Option<String> {
        let me = self.cfg.name.clone();
        let names = pg.sync_names.as_deref();
        if self.timing.synchronous == SyncMode::Off {
            if view.sync.is_some() {
                p.push(Action::DeleteSync { epoch });
                return Some("synchronous mode is off: deleting the sync key".into());
            }
            if names.is_some_and(|n| !n.is_empty()) {
                p.push(Action::SetSyncNames {
                    names: String::new(),
                });
                return Some("synchronous mode is off: clearing synchronous_standby_names".into());
            }
            return None;
        }
        let listed = match self.sync_key_for_me(view, epoch, p) {
            Ok(listed) => listed,
            Err(why) => return Some(why),
        };
        // A standby fit to be synchronous: streaming from us, a live member that may
        // take over (so listing it keeps a failover possible).
        let fit = |name: &str| {
            pg.standbys.iter().any(|s| s.name == name && s.streaming)
                && view.member(name).is_some_and(|m| {
                    m.name != me && !m.info.tags.nofailover && m.info.parse_error.is_none()
                })
        };
        if let Some(s) = listed {
            if fit(&s) {
                let want = sync_names_for(&s);
                if names != Some(want.as_str()) {
                    // Stricter than needed is safe: the key already lists it.
                    p.push(Action::SetSyncNames { names: want });
                    return Some(format!(
                        "synchronous standby {s}: restoring synchronous_standby_names"
                    ));
                }
                return Some(format!("synchronous standby {s}"));
            }
            // Unlist first (guarded); the names change only once the key says so.
            p.push(Action::WriteSync {
                epoch,
                leader: me,
                sync_standby: None,
            });
            p.again = true;
            return Some(format!(
                "synchronous standby {s} is not streaming; unlisting it before changing synchronous_standby_names"
            ));
        }
        // None listed: pick one (the one the names already name first, then the most
        // WAL flushed, then the name).
        let best = pg.standbys.iter().filter(|s| fit(&s.name)).max_by(|a, b| {
            let pending = |s: &StandbyStat| names == Some(sync_names_for(&s.name).as_str());
            (pending(a), a.flush, std::cmp::Reverse(&a.name)).cmp(&(
                pending(b),
                b.flush,
                std::cmp::Reverse(&b.name),
            ))
        });
        match best {
            Some(c) => {
                let want = sync_names_for(&c.name);
                if names != Some(want.as_str()) {
                    p.push(Action::SetSyncNames { names: want });
                    Some(format!("adding {} as synchronous standby", c.name))
                } else if c.sync && self.names_settled(now, &want) {
                    // Commits acknowledged before the names took effect need not be
                    // on `c` yet: it is listed only once it flushed past them.
                    let since = self.names_seen.as_ref().map_or(now, |(_, at)| *at);
                    let caught_up = catchup::standby_caught_up(
                        &mut self.sync_catchup,
                        epoch,
                        &want,
                        since,
                        pg.lsn,
                        c,
                    );
                    if let Err(why) = caught_up {
                        return Some(why);
                    }
                    p.push(Action::WriteSync {
                        epoch,
                        leader: me,
                        sync_standby: Some(c.name.clone()),
                    });
                    p.again = true;
                    Some(format!(
                        "{} is synchronous; listing it in the sync key",
                        c.name
                    ))
                } else {
                    Some(format!("waiting for {} to become synchronous", c.name))
                }
            }
            None => {
                let want = self.sync_names_wanted(None);
                if names != Some(want.as_str()) {
                    p.push(Action::SetSyncNames { names: want });
                }
                Some(if self.timing.synchronous == SyncMode::Strict {
                    "no synchronous standby: commits wait (synchronous_mode_strict)".into()
                } else {
                    "no synchronous standby: degraded to asynchronous replication".into()
                })
            }
        }
    }

    /// Step phase: since when `synchronous_standby_names` reads what it reads.
    pub(super) fn note_sync_names(&mut self, now: Instant, obs: &Observation) {
        match &obs.pg.sync_names {
            Some(n) if self.names_seen.as_ref().is_some_and(|(seen, _)| seen == n) => {}
            Some(n) => self.names_seen = Some((n.clone(), now)),
            None => self.names_seen = None,
        }
    }
}
