//! Maintenance mode (`pause: true` in the `config` key, as Patroni stores it).
//!
//! Owns: which actions a pause holds back — the health-driven ones only: taking a
//! vacant key (no automatic failover or promotion), restarting a stopped
//! PostgreSQL (as primary or replica), a rewind (also the stop a divergence would
//! make for one), and a leader giving its key up after `primary_start_timeout`.
//!
//! Must never: hold back anything S1–S4 need. Unlike Patroni, which keeps a primary
//! running after it failed to renew, a paused leader that cannot renew still fences
//! by `F - B` (`fence`, which runs before any state's step), its watchdog stays
//! armed and petted only on proof (S2), a local primary without the key is still
//! fenced (S4), and a key already won (the acquire txn compared the `config` key's
//! revision, so the winner saw no pause) still leads to its promotion. Resuming
//! (`pause` gone) returns to the normal rules with no failover of its own.

use super::Core;
use super::model::Reason;

impl Core {
    /// Enter or leave maintenance mode (the `config` key in force says so).
    pub fn set_pause(&mut self, paused: bool) {
        self.paused = paused;
    }

    /// Whether maintenance mode is on.
    pub fn paused(&self) -> bool {
        self.paused
    }

    /// `Some(reason)` when a pause holds back `what` (a health-driven action).
    pub(super) fn held_by_pause(&self, what: &str) -> Option<Reason> {
        self.paused.then(|| {
            Reason::Waiting(format!(
                "paused (maintenance mode): not {what}; resume to return to automatic failover"
            ))
        })
    }
}
