//! Which iterations' reasons go to the log.
//!
//! Owns: the level of the loop's one line a step. An unchanged steady state —
//! leading, or following the same leader — is logged at `info` once every
//! [`STEADY_LOG_EVERY`] and at `debug` on the ticks between (`TENURE_LOG=debug`
//! shows every tick, as before): at loop 0.5 s every loop at `info` was 7,200 lines
//! an hour per host in the journal; one in 10 s is Patroni's cadence at its default
//! loop, which operators know. Any other reason, and any change of state, is logged
//! at `info` as before: at once, and every tick while it lasts. Must never:
//! hold back a line that says something changed (a new leader, leadership taken or
//! lost, a refusal, a fence). The API and systemd's `STATUS=` still carry every
//! iteration's reason.

use std::time::Duration;

use log::Level;

use crate::core::model::Reason;
use crate::core::time::Instant;

/// How often an unchanged steady state is logged.
pub const STEADY_LOG_EVERY: Duration = Duration::from_secs(10);

/// The steady state last logged and when.
#[derive(Debug, Default)]
pub struct SteadyLog {
    /// `Some(None)`: leading; `Some(Some(l))`: following `l`; `None`: the last
    /// reason logged was not a steady state.
    last: Option<(Option<String>, Instant)>,
}

impl SteadyLog {
    /// At which level this iteration's reason goes to the log, if at all:
    /// `changed` says its text differs from the previous iteration's, `tick` that
    /// the iteration is the scheduled one (not woken by the watch or the API).
    pub fn level(
        &mut self,
        now: Instant,
        why: &Reason,
        changed: bool,
        tick: bool,
    ) -> Option<Level> {
        let state = match why {
            Reason::Leading { .. } => None,
            Reason::Following { leader, .. } => Some(leader),
            _ => {
                self.last = None;
                return (changed || tick).then_some(Level::Info);
            }
        };
        let due = self
            .last
            .as_ref()
            .is_none_or(|(last, at)| last.as_ref() != state || now.since(*at) >= STEADY_LOG_EVERY);
        if due {
            self.last = Some((state.cloned(), now));
            Some(Level::Info)
        } else {
            tick.then_some(Level::Debug)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const INFO: Option<Level> = Some(Level::Info);
    const DEBUG: Option<Level> = Some(Level::Debug);

    fn at(ms: u64) -> Instant {
        Instant::from_nanos(1_000_000_000 + ms * 1_000_000)
    }

    fn leading() -> Reason {
        Reason::Leading {
            me: "pg1".into(),
            valid_for: Duration::from_secs(5),
        }
    }

    fn following(l: &str) -> Reason {
        Reason::Following {
            me: "pg2".into(),
            leader: l.into(),
        }
    }

    #[test]
    fn an_unchanged_steady_state_is_logged_at_info_once_a_period() {
        let mut s = SteadyLog::default();
        assert_eq!(s.level(at(0), &leading(), true, true), INFO, "the first");
        // The lease's validity changes the text every loop: still the same state,
        // at `debug` on its ticks, not at all between them.
        for ms in (500..10_000).step_by(500) {
            assert_eq!(s.level(at(ms), &leading(), true, true), DEBUG, "{ms} ms");
        }
        assert_eq!(s.level(at(9_700), &leading(), true, false), None);
        assert_eq!(
            s.level(at(10_000), &leading(), true, true),
            INFO,
            "a period on"
        );
        assert_eq!(s.level(at(10_500), &leading(), true, true), DEBUG);
    }

    #[test]
    fn a_change_of_steady_state_is_logged_at_once() {
        let mut s = SteadyLog::default();
        assert_eq!(s.level(at(0), &following("pg1"), true, true), INFO);
        assert_eq!(s.level(at(500), &following("pg1"), false, true), DEBUG);
        assert_eq!(
            s.level(at(700), &following("pg3"), true, false),
            INFO,
            "a new leader"
        );
        assert_eq!(
            s.level(at(1_500), &leading(), true, true),
            INFO,
            "leading now"
        );
        assert_eq!(
            s.level(at(2_000), &following("pg3"), true, true),
            INFO,
            "following"
        );
    }

    #[test]
    fn other_reasons_are_logged_every_tick_and_on_change() {
        let mut s = SteadyLog::default();
        assert_eq!(s.level(at(0), &following("pg1"), true, true), INFO);
        let waiting = Reason::Waiting("the leader key is held".into());
        assert_eq!(s.level(at(500), &waiting, true, false), INFO, "a change");
        assert_eq!(s.level(at(1_000), &waiting, false, true), INFO, "a tick");
        assert_eq!(
            s.level(at(1_100), &waiting, false, false),
            None,
            "a wake, unchanged"
        );
        // Back to the steady state it left: logged at once, not a period later.
        assert_eq!(s.level(at(1_500), &following("pg1"), true, true), INFO);
    }
}
