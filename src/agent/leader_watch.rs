//! What the scope watch tells the core about `leader` beyond its DELETEs (DESIGN §1
//! step 4, S3): every PUT and DELETE in etcd's order, and whether the watch covered
//! the time before this iteration's read without a gap.
//!
//! Owns: the changes collected between two observations (bounded), the watch's
//! start revision as of the read, and the drain of changes already received when a
//! read shows the key absent.
//!
//! Must never: judge a vacancy (the core does, `core::vacancy`), wait longer than
//! the drain's own bound, or report a gapless watch after dropping a change.

use std::time::Duration;

use crate::clock;
use crate::core::model::{LeaderChange, LeaderKey};

use super::Agent;

/// Changes kept between two observations. More than this between two steps (a
/// flood of leaderships, or a loop that stalled) is reported as a gap instead:
/// the core then judges the vacancy untimeable (fail safe).
const MAX_CHANGES: usize = 64;

/// How long the drain after a read that shows the key absent may wait for watch
/// events already on their way (the connection task must run to hand them over).
const DRAIN: Duration = Duration::from_millis(2);

/// The scope watch's view of `leader` between two observations.
#[derive(Default)]
pub(super) struct LeaderWatch {
    changes: Vec<LeaderChange>,
    /// A change was dropped (the buffer was full): the next observation reports a gap.
    dropped: bool,
    /// `Etcd::watch_from` when this iteration's read was sent.
    from_at_read: Option<i64>,
}

impl Agent {
    /// A `leader` change from the watch, for the next observation.
    pub(super) fn note_leader_change(&mut self, revision: i64, put: Option<LeaderKey>) {
        let w = &mut self.leader_watch;
        if w.changes.len() >= MAX_CHANGES {
            w.dropped = true;
            return;
        }
        w.changes.push(LeaderChange {
            at: clock::now(),
            revision,
            put,
        });
    }

    /// Record the watch's coverage just before the read is sent: the changes the
    /// observation carries are complete from this revision on (until the read).
    pub(super) fn note_watch_at_read(&mut self, from: Option<i64>) {
        self.leader_watch.from_at_read = from;
    }

    /// After a read that shows the key absent: hand the core every change the
    /// watch already received, so a leadership that came and went just before the
    /// read (or while this loop was stopped) is in the same observation. Bounded by
    /// `DRAIN` and by `deadline`; a change still on its way after that is the
    /// residual docs/failure-modes.md names.
    pub(super) fn drain_leader_watch(&mut self, deadline: crate::core::time::Instant) {
        let until = clock::now().add(DRAIN).min(deadline);
        for _ in 0..MAX_CHANGES {
            let left = until.since(clock::now());
            if left.is_zero() {
                return;
            }
            let Some(etcd) = self.etcd.as_mut() else {
                return;
            };
            if !etcd.watch_is_open() {
                return;
            }
            let ev = self.rt.block_on(async {
                tokio::time::timeout(left, etcd.next_watch_event())
                    .await
                    .ok()
            });
            match ev {
                // The wake it would cause is not needed: this iteration decides now.
                Some(ev) => {
                    let _ = self.on_watch(ev);
                }
                None => return,
            }
        }
    }

    /// The watch facts of this observation (each reported once).
    pub(super) fn take_leader_watch(&mut self) -> (Vec<LeaderChange>, Option<i64>) {
        // Still the same watch: broken since the read (a `Broken` drained), its
        // changes since may be lost.
        let now = self.etcd.as_ref().and_then(|e| e.watch_from());
        let w = &mut self.leader_watch;
        let from = w
            .from_at_read
            .take()
            .filter(|f| !w.dropped && now == Some(*f));
        w.dropped = false;
        (std::mem::take(&mut w.changes), from)
    }
}
