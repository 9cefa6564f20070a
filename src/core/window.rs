//! The poll window `L_w + R` while a `config` change of `loop_wait` or
//! `retry_timeout` reaches the members one by one (review L2 of the unwatched
//! fence deadline).
//!
//! Owns: which `L_w + R` the leader's rules assume of the replicas' polls (the
//! unwatched `F`, the adoption window, the adoption's confirm wait: the *widest*
//! in force anywhere) and which a replica's on-time judgement of a DELETE allows
//! (the *tightest*: DESIGN §1 step 4's "last poll no older than `L_w + R`").
//!
//! Why: each rule pairs a replica's `L_w + R` with the leader's, and each node
//! applies a change when its own view shows it — or refuses it, if it breaks S6
//! for its own `W`, `M`, `B` (then for good). With the leader on `x` and a
//! replica on `y > x`, the replica counted a poll up to `y` old as fresh while the
//! leader's `F = s + ttl - (x + 1 s)` allowed only `x`: `y - x` of the margin gone.
//! So every member publishes its own `L_w + R` (`poll_window` in its member key)
//! and:
//! - a replica judges with the smaller of its own and the smallest valid one the
//!   followed leader published in its leadership; when that leader publishes none
//!   (an older agent, or its member key never read), with the smaller of its own
//!   and its previous one for `ttl + L_w + R + M` after a change, and for as long
//!   as it follows the leadership it followed then;
//! - a leader counts with the largest of its own and its previous one until a
//!   read shows its member key publishing the new one (only then can every replica
//!   that judges a later DELETE see it); a value in its member key at its first
//!   read of the run (written before a restart) counts as such a previous one; with a
//!   watchdog `F` is capped by the unwatched deadline on that widest window too.
//!
//! Must never: widen a replica's window past any value in force at its leader, or
//! narrow a leader's below one a replica may still judge with; do I/O or read a
//! clock (pure: `now` comes in). Members older than this rule publish nothing and
//! read nothing: a change applied unevenly among them keeps the narrowing (the
//! mixed-version residual, docs/design.md).

use std::time::Duration;

use super::Core;
use super::model::{Observation, Timing};
use super::time::Instant;

/// The `L_w + R` values in force before the last change, while they still count.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct WindowPrev {
    /// The largest earlier value no linearizable read has shown replaced in our
    /// member key: the leader's rules still assume it.
    widest: Duration,
    /// The smallest earlier value within its hold: a replica's judgement still
    /// allows no more.
    tightest: Duration,
    /// When the last change was applied, and how long `tightest` holds after it.
    since: Instant,
    hold: Duration,
    /// The leadership we followed then: while it publishes nothing (an older
    /// agent, which may have refused the change for good), `tightest` holds past
    /// `hold` (review of c776472, L5).
    holder_epoch: Option<super::model::Epoch>,
    /// A read showed our member key publishing the current value.
    published: bool,
}

/// This timing's `L_w + R`.
pub(super) fn window_of(t: &Timing) -> Duration {
    t.loop_wait + t.retry_timeout
}

impl Core {
    /// Our own `L_w + R`, as published in our member key (`poll_window`).
    pub fn poll_window(&self) -> Duration {
        window_of(&self.timing)
    }

    /// The `L_w + R` the leader's rules assume a replica's poll may be old.
    pub(super) fn poll_window_widest(&self) -> Duration {
        let own = self.poll_window();
        match self.window_prev {
            Some(p) if !p.published => own.max(p.widest),
            _ => own,
        }
    }

    /// The `L_w + R` a replica's judgement at `now` allows: no more than the
    /// followed leader publishes; with nothing published, no more than an earlier
    /// value of ours within its hold.
    pub(super) fn poll_window_tightest(&self, now: Instant) -> Duration {
        let own = self.poll_window();
        match (self.track.holder_window, self.window_prev) {
            // INVARIANT: a leader publishes a value only once it applied it, and
            // from then on its rules use no less (`poll_window_widest`); a value in
            // the read that shows its DELETE was written before the DELETE.
            (Some(h), _) => own.min(h),
            (None, Some(p)) if self.prev_holds(&p, now) => own.min(p.tightest),
            (None, _) => own,
        }
    }

    /// Whether an earlier value still binds a replica whose leader publishes none.
    fn prev_holds(&self, p: &WindowPrev, now: Instant) -> bool {
        now < p.since.add(p.hold)
            || (p.holder_epoch.is_some() && p.holder_epoch == self.track.epoch)
    }

    /// How long an earlier value holds for a replica whose leader publishes none:
    /// a leader that renews applies a change within about a loop of its commit (its
    /// renewal read shows it), so its `F` on the old value passes within its
    /// lease's ttl after that; `M` for the two clocks' rates.
    fn window_hold(&self, old: &Timing, was: Duration, is: Duration) -> Duration {
        let ttl = old.ttl.max(self.timing.ttl).max(self.max_leader_ttl_seen);
        Duration::from_secs(u64::from(ttl))
            + was.max(is)
            + self.timing.safety_margin.max(old.safety_margin)
    }

    /// `set_timing`'s part: a change of `L_w + R` keeps the old value counting.
    pub(super) fn retime_window(&mut self, now: Instant, old: &Timing) {
        let (was, is) = (window_of(old), window_of(&self.timing));
        if was == is {
            return;
        }
        let prev = self.window_prev;
        let widest = match prev {
            Some(p) if !p.published => was.max(p.widest),
            _ => was,
        };
        let tightest = match prev {
            Some(p) if self.prev_holds(&p, now) => was.min(p.tightest),
            _ => was,
        };
        let hold = self.window_hold(old, was, is);
        self.window_prev = Some(WindowPrev {
            widest,
            tightest,
            since: now,
            hold,
            holder_epoch: self.track.epoch,
            published: false,
        });
    }

    /// Step phase 1: our member key in a read publishing the current value ends
    /// the leader's use of the earlier one; both ended, the record goes.
    pub(super) fn note_poll_windows(&mut self, now: Instant, obs: &Observation) {
        let own = self.poll_window();
        let shown = match &obs.cluster {
            Ok(view) => view.member(&self.cfg.name).map(|m| m.info.poll_window),
            Err(_) => None,
        };
        let first_read = obs.cluster.is_ok() && !self.window_own_read;
        self.window_own_read |= obs.cluster.is_ok();
        match (shown, &mut self.window_prev) {
            (Some(Some(w)), Some(p)) if w == own => p.published = true,
            // Review of c776472, L2: at the first read of this run our member key
            // shows another value than ours — written before a restart (the core's
            // memory starts empty). Replicas may judge with it until ours replaces
            // it (the shell rewrites a key that does not show ours): the leader's
            // rules keep it as an earlier value not yet published. Only at the
            // first read: a value another writer puts there later is no window any
            // node applied, and must not move `F` (a huge one would fence a
            // healthy leader).
            // A `config` change applied before this first read (the file's timing
            // differed from the key's: second review, M) already made a record:
            // the value is folded into it.
            (Some(Some(w)), Some(p)) if w != own && first_read => {
                p.widest = p.widest.max(w);
                p.tightest = p.tightest.min(w);
                p.published = false;
            }
            (Some(Some(w)), None) if w != own && first_read => {
                let hold = self.window_hold(&self.timing, w, own);
                self.window_prev = Some(WindowPrev {
                    widest: w,
                    tightest: w,
                    since: now,
                    hold,
                    holder_epoch: self.track.epoch,
                    published: false,
                });
            }
            _ => {}
        }
        if let Some(p) = self.window_prev
            && p.published
            && !self.prev_holds(&p, now)
        {
            self.window_prev = None;
        }
    }
}
