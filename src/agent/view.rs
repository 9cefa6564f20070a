//! Where an iteration's cluster view comes from (issue 13 item 5): the leader's
//! renewal read, the view kept from the scope watch, or a read of its own.
//!
//! Owns: the choice between them, the watch's events taken without waiting, the
//! lease poll that backs a kept view, the read made when they disagree, and the
//! follower's read every `ttl / 3` (`Core::kept_view_check`: a refused token shows
//! in bounded time) with the instant of the last read that answered.
//!
//! Must never: hand the core a kept view the core did not accept
//! (`Core::watched_view_serves`), hand it one without this iteration's poll of the
//! leader's lease having answered and agreed (DESIGN §3: the watch is never the
//! only way a replica learns of a change of `leader`), wait for a watch event, or
//! let a renewal read of an earlier iteration stand for this one's.

use log::debug;

use super::Agent;
use crate::clock;
use crate::core::KeptViewCheck;
use crate::core::model::{ClusterView, LeasePoll};
use crate::dcs::Etcd;

/// Where this iteration's view came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum ViewSource {
    /// A linearizable range over the scope made in this iteration (a read of its
    /// own, or the leader's confirm read, DESIGN §1 step 2).
    Read,
    /// A follower's read of the scope made in place of its lease poll
    /// (`Core::kept_view_check`): no poll follows it in this iteration.
    ReadForPoll,
    /// The view kept from the watch, checked against this iteration's poll.
    Kept,
}

impl ViewSource {
    /// Whether the iteration still polls the followed lease after its view (the
    /// read did not stand in for the poll).
    pub(super) fn poll_after(self) -> bool {
        self != ViewSource::ReadForPoll
    }

    /// Whether the view came from a linearizable read made in this iteration.
    pub(super) fn is_read(self) -> bool {
        self != ViewSource::Kept
    }
}

impl Agent {
    /// The watch events that arrived since the wait, handled as the wait handles
    /// them (`on_watch`: a DELETE's instant, a foreign PUT), and applied to the kept
    /// view. Never waits for one.
    pub(super) fn drain_watch(&mut self) {
        let events = {
            let Agent { etcd, rt, .. } = &mut *self;
            match etcd.as_mut() {
                Some(etcd) => etcd.poll_watch(rt),
                None => return,
            }
        };
        for ev in events {
            // Already inside an iteration: whether the event would wake one does
            // not matter here.
            let _ = self.on_watch(ev);
        }
    }

    /// This iteration's cluster view and, for a kept view, the poll that backs it.
    ///
    /// - The leader's (or an adopter's) confirm read, made by this iteration's
    ///   renewal: a linearizable range over the scope (`renewed` says a renewal was
    ///   attempted in this iteration; an older one's read is dropped).
    /// - Else the view kept from the watch, on a renewal tick with no outcome of a
    ///   DCS action to report and no watch DELETE pending, when the core accepts it
    ///   (`Core::watched_view_serves`) — and only once this iteration's poll of the
    ///   leader's lease answered and agrees with it. A poll that fails makes the
    ///   view an error (etcd did not answer this iteration, as a failed read did);
    ///   a poll that shows the lease gone or without its key means the view is
    ///   behind: read now. Once every `ttl / 3` the core has it read the scope
    ///   instead (`Core::kept_view_check`: an authenticated, linearizable read in a
    ///   bounded time), in place of the poll when the read shows the followed key
    ///   on the followed lease and the core allows it.
    /// - Else a read of its own.
    pub(super) fn cluster_view(
        &mut self,
        tick: bool,
        renewed: bool,
    ) -> (Result<ClusterView, String>, ViewSource, Option<LeasePoll>) {
        // Only this iteration's renewal read may stand for its view: one left by an
        // earlier iteration (cut short past `F - B`) is dropped unparsed.
        let renewal_view = match self.etcd.as_mut() {
            Some(etcd) if renewed => etcd.take_renewal_view(),
            Some(etcd) => {
                etcd.drop_renewal_read();
                None
            }
            None => None,
        };
        if let Some(v) = renewal_view {
            return (Ok(v), ViewSource::Read, None);
        }
        let kept = if tick
            && self.leader_deleted_at.is_none()
            && self.pending.acquire.is_none()
            && self.pending.claim.is_none()
            && self.pending.released.is_none()
            && self.pending.handed_over.is_none()
        {
            self.etcd
                .as_ref()
                .and_then(Etcd::watched_view)
                .filter(|v| self.core.watched_view_serves(v))
        } else {
            None
        };
        let Some(view) = kept else {
            return (self.read_scope(), ViewSource::Read, None);
        };
        // `watched_view_serves` holds: the core tracks this very key's lease, and
        // it is the lease to poll.
        let Some(lease) = self.core.lease_to_poll() else {
            return (self.read_scope(), ViewSource::Read, None);
        };
        match self.core.kept_view_check(clock::now(), self.scope_read_at) {
            KeptViewCheck::Poll => {}
            check => {
                let read = self.read_scope();
                // The read stands in for the poll only while it shows the key the
                // poll would have backed: anything else (a vacancy, a new key) is
                // weighed with the poll, as after any read.
                let instead = check == KeptViewCheck::Read
                    && read
                        .as_ref()
                        .is_ok_and(|v| v.leader.as_ref().is_some_and(|k| k.lease == lease));
                let source = if instead {
                    ViewSource::ReadForPoll
                } else {
                    ViewSource::Read
                };
                return (read, source, None);
            }
        }
        let r = self.core.timing().retry_timeout;
        let deadline = self.deadline(r);
        let polled = match self.connect(deadline) {
            Some((etcd, rt)) => etcd
                .lease_ttl(rt, lease, deadline)
                .map_err(|e| e.to_string()),
            None => Err("etcd unreachable".to_string()),
        };
        match polled {
            Ok(p) => {
                let agrees = view.leader.as_ref().is_some_and(|k| k.lease == p.lease)
                    && p.ttl.is_some()
                    && p.has_keys;
                if agrees {
                    (Ok(view), ViewSource::Kept, Some(p))
                } else {
                    // INVARIANT: the kept view is never used against a poll that
                    // contradicts it: the key or its lease is gone, and the watch
                    // has not said so yet. A linearizable read decides instead
                    // (DESIGN §3's backstop re-read of `leader`).
                    debug!(
                        "lease {lease:x}: the poll shows it {} while the kept view shows the \
                         leader key on it: reading the scope",
                        if p.ttl.is_none() {
                            "gone"
                        } else {
                            "without keys"
                        }
                    );
                    (self.read_scope(), ViewSource::Read, Some(p))
                }
            }
            Err(e) => {
                // Like a failed read: this member may be dead or cut off from its
                // quorum (then its watch is silent too). A fresh connection to the
                // next member, and a read there next time.
                self.etcd_failed(&format!("lease poll: {e}"));
                self.switch_endpoint();
                (Err(format!("lease poll: {e}")), ViewSource::Kept, None)
            }
        }
    }

    /// One linearizable range read of the scope, with the handling of a failure
    /// the loop always had: a fresh connection to the next member unless the read
    /// only ran out of the time left before the tick.
    pub(super) fn read_scope(&mut self) -> Result<ClusterView, String> {
        let r = self.core.timing().retry_timeout;
        let deadline = self.deadline(r);
        let cut = self.cut_by_tick(r);
        let sent_at = clock::now();
        let mut cluster = match self.connect(deadline) {
            Some((etcd, rt)) => etcd.read_cluster(rt, deadline).map_err(|e| e.to_string()),
            None => Err("etcd unreachable".to_string()),
        };
        if cluster.is_ok() {
            // An authenticated, linearizable read answered (`kept_view_check`).
            self.scope_read_at = Some(sent_at);
        }
        if let Err(e) = &mut cluster {
            // A fresh connection to the next member: this one may be dead, cut off
            // from the quorum, or its channel broken for good — unless the read only
            // ran out of the time left before the tick.
            debug!("cluster read failed: {e}");
            self.etcd_failed(&format!("cluster read: {e}"));
            if cut {
                // Out of the time left before the tick: no evidence about etcd, so
                // no ETCD_UNREACHABLE (`etcd_events` skips "not read").
                *e = format!("not read: cut short by the next tick ({e})");
            } else {
                self.switch_endpoint();
                // The next renewal needs a token: get it now, not on its path.
                self.authenticate_step(self.deadline(r));
            }
        }
        cluster
    }
}
