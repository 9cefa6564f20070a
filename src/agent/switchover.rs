//! The loop's part of a planned switchover (issue 9): the release (`HandOver`), the
//! deletion of a request (`ClearFailover`), and `scheduled_at` put on the loop's
//! clock.
//!
//! Owns: reading the shutdown checkpoint, the marker's content, and what is
//! reported back (`handed_over`). Must never: decide (the core planned the
//! hand-over after a fast stop and a complete fence check), or report a release
//! whose txn's answer it did not get (that is `Unknown`: the marker may exist).

use log::{info, warn};

use super::Agent;
use crate::clock;
use crate::core::model::*;
use crate::core::time::Instant;

impl Agent {
    pub(super) fn hand_over(
        &mut self,
        lease: LeaseId,
        epoch: Epoch,
        candidate: Option<String>,
        deadline: Instant,
    ) {
        let me = self.cfg.name.clone();
        let out = match self.pg.shutdown_checkpoint() {
            Err(why) => HandOverOutcome::NotSent(why),
            Ok((timeline, lsn)) => {
                let marker = ReleaseMarker {
                    epoch,
                    lsn,
                    timeline,
                    candidate,
                    by: me.clone(),
                };
                match self.connect(deadline) {
                    None => HandOverOutcome::NotSent("etcd unreachable".into()),
                    Some((etcd, rt)) => {
                        match etcd.hand_over(rt, &me, epoch, lease, &marker, deadline) {
                            Ok(true) => {
                                info!(
                                    "released the leader key (epoch {epoch}) with the release \
                                     marker: shutdown checkpoint {lsn} on timeline {timeline}"
                                );
                                self.handed_over_hook();
                                HandOverOutcome::Released(marker)
                            }
                            Ok(false) => {
                                self.pending.guard_refused = Some("the release txn".into());
                                HandOverOutcome::NotSent("the epoch guard refused".into())
                            }
                            Err(e) => HandOverOutcome::Unknown(e.to_string()),
                        }
                    }
                }
            }
        };
        if let HandOverOutcome::NotSent(why) | HandOverOutcome::Unknown(why) = &out {
            warn!("switchover release: {why}");
        }
        self.pending.handed_over = Some(out);
    }

    pub(super) fn clear_failover(&mut self, epoch: Epoch, mod_revision: i64, deadline: Instant) {
        let me = self.cfg.name.clone();
        if let Some((etcd, rt)) = self.connect(deadline) {
            match etcd.clear_failover(rt, &me, epoch, mod_revision, deadline) {
                Ok(true) => info!("deleted the failover key"),
                Ok(false) => info!("the failover key changed or leadership moved: not deleted"),
                Err(e) => warn!("deleting the failover key: {e}"),
            }
        }
    }
}

/// `scheduled_at` (wall clock, RFC 3339 with offset) as an instant on the loop's
/// `CLOCK_BOOTTIME`, read against the wall clock now: the core compares instants.
pub(super) fn schedule_on_boottime(view: &mut ClusterView, now: Instant) {
    let Some(req) = &mut view.failover else {
        return;
    };
    let Some(at) = req
        .scheduled_text
        .as_deref()
        .and_then(crate::dcs::parse_rfc3339)
    else {
        return;
    };
    let wall = clock::realtime().as_secs_f64();
    let d = std::time::Duration::from_secs_f64((at - wall).abs().min(1e9));
    req.scheduled_at = Some(if at >= wall { now.add(d) } else { now.sub(d) });
}
