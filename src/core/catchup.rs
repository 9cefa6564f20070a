//! The catch-up rule of a synchronous standby switch (DESIGN §3a; issue 8,
//! finding 10).
//!
//! Owns: the WAL position a standby newly named in `synchronous_standby_names` must
//! have flushed before the `sync` key may list it, and when that position is taken.
//!
//! Must never: do I/O, read a clock, or list a standby by itself: it only answers
//! "may the key name this standby now?", and the caller keeps today's order (names
//! first, `sync` in `pg_stat_replication`, names settled for a loop, then the key).
//!
//! Why: until the new names reached every PostgreSQL process, commits were
//! acknowledged through the previous configuration (the old standby's flush, or no
//! standby at all while degraded). `sync` in `pg_stat_replication` says commits wait
//! for the new standby *from now on*; it says nothing about WAL acknowledged before.
//! A standby listed while its flush trails that WAL may be the only node allowed to
//! take over, and would lose acknowledged commits.

use super::model::{Epoch, Lsn, StandbyStat, lsn_text};
use super::time::Instant;

/// The position a switch waits for: taken once per (leadership, names value, the
/// instant the names were first seen at that value).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct CatchUp {
    epoch: Epoch,
    names: String,
    names_since: Instant,
    /// The primary's `pg_current_wal_lsn()` in the observation that first found
    /// `names` settled.
    target: Lsn,
}

/// May the `sync` key name `standby` now? Called only once `names` (which name
/// `standby` alone) have held for a loop (`names_settled`) since `names_since` and
/// `standby` reports `sync`; `primary_lsn` is the primary's WAL position from the
/// same probe. `Err` says what is awaited.
pub(super) fn standby_caught_up(
    slot: &mut Option<CatchUp>,
    epoch: Epoch,
    names: &str,
    names_since: Instant,
    primary_lsn: Lsn,
    standby: &StandbyStat,
) -> Result<(), String> {
    let current = slot
        .as_ref()
        .filter(|c| c.epoch == epoch && c.names == names && c.names_since == names_since);
    let target = match current {
        Some(c) => c.target,
        // INVARIANT: the target is the primary's position in the first observation
        // that found the names settled (held for a loop in our session: the point
        // from which the core already trusts every process to have reloaded them),
        // never
        // the one in which our session first saw them: a walsender or backend still
        // on the old value (the old standby's walsender releasing waiters on its
        // flush, or no wait at all while degraded) can acknowledge commits after our
        // session saw the new names, up to the moment it reloads. Every commit
        // acknowledged under the old value therefore ends at or before this
        // position (`pg_current_wal_lsn()` is the write position, at or past every
        // locally flushed commit record); every later one waits for this standby's
        // flush. So a flush at or past it holds every acknowledged commit. A later
        // position would also be safe, but would chase the primary under load.
        None if primary_lsn > 0 => {
            *slot = Some(CatchUp {
                epoch,
                names: names.to_string(),
                names_since,
                target: primary_lsn,
            });
            primary_lsn
        }
        // `0/0` is what an unparsable `pg_current_wal_lsn()` reads as: no position to
        // wait for is known, so nothing counts as caught up (and no target is kept:
        // the next known one, later, is the conservative choice).
        None => {
            return Err(format!(
                "waiting for the primary's WAL position before naming {} synchronous",
                standby.name
            ));
        }
    };
    // A flush that did not parse reads as 0: never at or past a real position.
    if standby.flush >= target {
        Ok(())
    } else {
        Err(format!(
            "waiting for {} to flush to {} before naming it synchronous (flushed {})",
            standby.name,
            lsn_text(target),
            lsn_text(standby.flush)
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn st(flush: Lsn) -> StandbyStat {
        StandbyStat {
            name: "pg2".into(),
            streaming: true,
            sync: true,
            flush,
        }
    }

    #[test]
    fn lsn_text_is_postgres_form() {
        assert_eq!(lsn_text(0x3_0000_0060), "3/60");
        assert_eq!(lsn_text(0x0300_0060), "0/3000060");
        assert_eq!(lsn_text(0), "0/0");
    }

    #[test]
    fn the_target_is_taken_once_and_held() {
        let mut slot = None;
        let t0 = Instant::from_nanos(1);
        let e = standby_caught_up(&mut slot, 5, "\"pg2\"", t0, 0x0300_0060, &st(0x0200_0000));
        assert_eq!(
            e,
            Err("waiting for pg2 to flush to 0/3000060 before naming it synchronous (flushed 0/2000000)".into())
        );
        // The primary moved on; the target did not.
        assert_eq!(
            standby_caught_up(&mut slot, 5, "\"pg2\"", t0, 0x0900_0000, &st(0x0300_0060)),
            Ok(())
        );
        // New names (or a new leadership, or the names seen anew): a new target.
        let t1 = Instant::from_nanos(2);
        assert!(
            standby_caught_up(&mut slot, 5, "\"pg2\"", t1, 0x0900_0000, &st(0x0300_0060)).is_err()
        );
        assert!(
            standby_caught_up(&mut slot, 6, "\"pg2\"", t1, 0x0A00_0000, &st(0x0900_0000)).is_err()
        );
    }

    #[test]
    fn unknown_positions_never_count_as_caught_up() {
        let mut slot = None;
        let t0 = Instant::from_nanos(1);
        // Primary position unknown (unparsable): wait, keep no target.
        assert!(standby_caught_up(&mut slot, 5, "\"pg2\"", t0, 0, &st(0)).is_err());
        assert_eq!(slot, None);
        // Standby flush unknown (NULL or unparsable: 0).
        assert!(standby_caught_up(&mut slot, 5, "\"pg2\"", t0, 0x100, &st(0)).is_err());
    }
}
