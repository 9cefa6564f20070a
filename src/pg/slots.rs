//! Replication slots beyond the leader's own upkeep: what the probe saw of the
//! local physical slots, which of them the leader publishes in the `status` key,
//! and the copies a replica keeps of them ahead of a failover.
//!
//! Owns: the pure parts (parsing the probe's slot column, choosing what to
//! publish, planning a replica's drops, creates and advances). The SQL runs in
//! [`super::PgCtl::copy_slots`].
//!
//! Must never: plan a change to an active slot (a consumer is streaming from it),
//! move a slot backwards (PostgreSQL refuses, and a copy behind its consumer only
//! keeps more WAL, never less), or advance a copy past this replica's replay
//! position (WAL it has not replayed is not known to be on this timeline).

use std::time::Duration;

use crate::config::IgnoreSlot;
use crate::core::model::{ClusterView, Lsn, parse_lsn};
use crate::core::time::Instant;

/// One physical, non-temporary slot of the local server, as the probe saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalSlot {
    pub name: String,
    /// `None`: the slot reserves no WAL (made without `immediately_reserve` and
    /// never used): it cannot be advanced.
    pub restart_lsn: Option<Lsn>,
    pub active: bool,
    /// `wal_status` is `lost`: PostgreSQL invalidated it (`max_slot_wal_keep_size`).
    pub lost: bool,
}

/// The probe's column: `[[name, restart_lsn, active, wal_status], ...]` as JSON,
/// or `None` (SQL NULL: no physical slot). Rows that do not have that shape are
/// skipped (the column is our own query's; nothing else writes it).
pub fn parse_local(text: Option<&str>) -> Vec<LocalSlot> {
    let Some(t) = text else {
        return Vec::new();
    };
    let Ok(serde_json::Value::Array(rows)) = serde_json::from_str::<serde_json::Value>(t) else {
        return Vec::new();
    };
    rows.iter()
        .filter_map(|r| {
            let r = r.as_array()?;
            Some(LocalSlot {
                name: r.first()?.as_str()?.to_string(),
                restart_lsn: r.get(1).and_then(|l| l.as_str()).and_then(parse_lsn),
                active: r.get(2)?.as_bool()?,
                lost: r.get(3).and_then(|w| w.as_str()) == Some("lost"),
            })
        })
        .collect()
}

/// What the leader publishes: the restart positions of the local slots it keeps
/// (`keep`: the member and permanent slot names of its last upkeep), sorted by
/// name. A kept slot that reserves no WAL, or that PostgreSQL invalidated, is left
/// out: a copy of it would hold nothing a consumer can use.
pub fn published(local: &[LocalSlot], keep: &[String]) -> Vec<(String, Lsn)> {
    let mut out: Vec<(String, Lsn)> = local
        .iter()
        .filter(|s| !s.lost && keep.contains(&s.name))
        .filter_map(|s| Some((s.name.clone(), s.restart_lsn?)))
        .collect();
    out.sort();
    out
}

/// The leader's published slots a replica may copy: only a list written under
/// the current leadership (review M1). The last leadership's can name positions
/// past the switch point, WAL this timeline never had, and a copy advanced there
/// would be ahead of its consumer. Our own `status` writes are guarded by the
/// epoch, so a write after the leader key was made is this leader's. `None`: no
/// leader, no list, or an older one (the slots here are then left alone).
pub fn fresh_list(view: &ClusterView) -> Option<&[(String, Lsn)]> {
    let k = view.leader.as_ref()?;
    (view.status_revision > k.epoch)
        .then_some(view.status_slots.as_deref())
        .flatten()
}

/// A replica's work on its copies, in the order it runs: drops, creates, advances.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CopyWork {
    pub drops: Vec<String>,
    pub creates: Vec<String>,
    /// Slot and the position to advance it to.
    pub advances: Vec<(String, Lsn)>,
    /// Copies that start after the position the leader published for them, and
    /// by how many bytes: made on this standby while their consumer was behind
    /// its last restartpoint (a standby's new slot starts there). PostgreSQL
    /// cannot move a slot back, so until the consumer passes that point a
    /// failover to this node would leave it a gap. Not work: said, not fixed.
    pub ahead: Vec<(String, u64)>,
}

/// What the leader's [`super::PgCtl::sync_slots`] could not do, or gave up.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SyncOutcome {
    /// Creates PostgreSQL refused.
    pub refused: Vec<String>,
    /// Departed members' slots PostgreSQL invalidated: dropped, not made again.
    pub gave_up: Vec<String>,
    /// Each failed step, in order.
    pub errors: Vec<String>,
}

/// What [`super::PgCtl::copy_slots`] could not do.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CopyOutcome {
    /// Creates PostgreSQL refused (tried again only after a while).
    pub refused: Vec<String>,
    /// Each failed step, in order.
    pub errors: Vec<String>,
}

impl CopyWork {
    /// No SQL to run (`ahead` is a report, not work).
    pub fn is_empty(&self) -> bool {
        self.drops.is_empty() && self.creates.is_empty() && self.advances.is_empty()
    }

    /// Drops or creates: the set of slots changes (run at once; advances alone
    /// may wait, a copy behind its consumer only keeps more WAL).
    pub fn changes_set(&self) -> bool {
        !self.drops.is_empty() || !self.creates.is_empty()
    }
}

/// Plan a replica's copies of the leader's published slots (Patroni keeps the
/// same copies): each published slot but this node's own (`mine`) is made here,
/// and advanced to the leader's position, never past `replay` (this replica's
/// replay position; `None`: unknown, no advance). With `copies` false (a node
/// tagged `nofailover`, which never leads) nothing is wanted. Inactive physical
/// slots that are not wanted are dropped, as the leader drops them; a wanted
/// copy that is invalidated, or reserves no WAL, is made anew. Active slots, and
/// existing slots `ignore` matches (an operator's consumer of this standby, even
/// one named like a published slot), are never touched; a missing one is made.
pub fn plan_copies(
    local: &[LocalSlot],
    published: &[(String, Lsn)],
    mine: &str,
    copies: bool,
    ignore: &[IgnoreSlot],
    replay: Option<Lsn>,
) -> CopyWork {
    let wanted = |name: &str| copies && name != mine && published.iter().any(|(n, _)| n == name);
    let mut w = CopyWork::default();
    for s in local.iter().filter(|s| !s.active) {
        if ignore.iter().any(|i| i.matches_physical(&s.name)) {
            continue;
        }
        if !wanted(&s.name) {
            w.drops.push(s.name.clone());
            continue;
        }
        let Some(restart) = s.restart_lsn.filter(|_| !s.lost) else {
            // INVARIANT: a copy is kept only while it reserves WAL that is still
            // there; otherwise it would promise a consumer WAL it cannot give.
            w.drops.push(s.name.clone());
            w.creates.push(s.name.clone());
            continue;
        };
        let leader_at = published
            .iter()
            .find(|(n, _)| *n == s.name)
            .map(|(_, l)| *l);
        if let Some(l) = leader_at
            && restart > l
        {
            w.ahead.push((s.name.clone(), restart - l));
        }
        let target = leader_at.zip(replay).map(|(l, r)| l.min(r));
        if let Some(t) = target
            && t > restart
        {
            w.advances.push((s.name.clone(), t));
        }
    }
    if copies {
        for (name, _) in published {
            if name != mine && !local.iter().any(|s| s.name == *name) {
                w.creates.push(name.clone());
            }
        }
    }
    w
}

/// The leader's memory of departed members' slots (`member_slots_ttl`, Patroni
/// 4's rule): a member slot is kept until its member has been gone that long, so
/// a replica whose host rebooted streams again from where it stopped instead of
/// needing a new copy. A new leadership starts the wait afresh for every name the
/// last leader's `retain_slots` listed: the time they were last seen is not
/// published, so it errs on keeping WAL longer, never shorter.
#[derive(Debug, Default)]
pub struct Retention {
    /// Slot name and when its member was first found gone (`None`: present at
    /// the last update; a seeded name counts as gone from the leadership's start).
    seen: Vec<(String, Option<Instant>)>,
    /// The leadership (epoch) that last seeded from `retain_slots`.
    seeded: Option<crate::core::model::Epoch>,
}

impl Retention {
    /// Note `current` (the slot names of the members now, seen at `now`); at a
    /// new `epoch`, seed from `published` (the `status` key's `retain_slots`,
    /// this node's own `mine` left out); forget what has been gone `ttl` or
    /// longer. Returns the departed slots still kept, sorted, and the instant the
    /// first of them expires (when the leader's upkeep must run again).
    pub fn update(
        &mut self,
        now: Instant,
        epoch: crate::core::model::Epoch,
        current: &[String],
        published: Option<&[String]>,
        mine: &str,
        ttl: Duration,
    ) -> (Vec<String>, Option<Instant>) {
        if self.seeded != Some(epoch) {
            // A new leadership starts from the last one's list alone: what this
            // node remembered from an earlier leadership of its own is stale (a
            // member that left then may have come back and left again since,
            // review H1).
            self.seeded = Some(epoch);
            self.seen.clear();
            for n in published.unwrap_or_default() {
                if n != mine && !self.seen.iter().any(|(s, _)| s == n) {
                    self.seen.push((n.clone(), Some(now)));
                }
            }
        }
        for (s, gone) in &mut self.seen {
            if current.contains(s) {
                *gone = None;
            } else if gone.is_none() {
                *gone = Some(now);
            }
        }
        for c in current {
            if !self.seen.iter().any(|(s, _)| s == c) {
                self.seen.push((c.clone(), None));
            }
        }
        self.seen
            .retain(|(s, gone)| s != mine && gone.is_none_or(|g| now.since(g) < ttl));
        let mut kept: Vec<String> = Vec::new();
        let mut first: Option<Instant> = None;
        for (s, gone) in &self.seen {
            if let Some(g) = gone {
                kept.push(s.clone());
                let ends = g.add(ttl);
                first = Some(first.map_or(ends, |f| f.min(ends)));
            }
        }
        kept.sort();
        (kept, first)
    }

    /// Every member slot this leadership keeps (present members' and departed
    /// ones' within the ttl, as of the last update), sorted: the `status` key's
    /// `retain_slots` besides the leader's own. `None` before the first update of
    /// leadership `epoch`.
    pub fn names(&self, epoch: crate::core::model::Epoch) -> Option<Vec<String>> {
        (self.seeded == Some(epoch)).then(|| {
            let mut n: Vec<String> = self.seen.iter().map(|(s, _)| s.clone()).collect();
            n.sort();
            n
        })
    }

    /// Give up on a departed member's slot before its time (PostgreSQL
    /// invalidated it: the member cannot resume from it, so keeping it only
    /// holds WAL for nobody).
    pub fn forget(&mut self, slot: &str) {
        self.seen.retain(|(s, gone)| s != slot || gone.is_none());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slot(name: &str, restart: Option<Lsn>, active: bool, lost: bool) -> LocalSlot {
        LocalSlot {
            name: name.into(),
            restart_lsn: restart,
            active,
            lost,
        }
    }

    fn names(l: &[&str]) -> Vec<String> {
        l.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn only_a_list_written_under_the_current_leadership_is_copied() {
        use crate::core::model::LeaderKey;
        let list = vec![("barman".to_string(), 500)];
        let mut v = ClusterView {
            leader: Some(LeaderKey {
                name: "pg1".into(),
                epoch: 40,
                mod_revision: 40,
                lease: 7,
            }),
            status_slots: Some(list.clone()),
            status_revision: 41,
            ..Default::default()
        };
        assert_eq!(fresh_list(&v), Some(&list[..]));
        // Written before this leader's key was made: the last leadership's.
        v.status_revision = 39;
        assert_eq!(fresh_list(&v), None);
        v.status_revision = 41;
        v.leader = None;
        assert_eq!(fresh_list(&v), None, "no leader: nothing to mirror");
    }

    #[test]
    fn the_probe_column_parses_and_garbage_is_nothing() {
        let t = r#"[["barman","0/3000060",false,"reserved"],["pg2",null,true,null],["pg3","1/0",false,"lost"],[1,2]]"#;
        assert_eq!(
            parse_local(Some(t)),
            vec![
                slot("barman", Some(0x300_0060), false, false),
                slot("pg2", None, true, false),
                slot("pg3", Some(0x1_0000_0000), false, true),
            ]
        );
        assert_eq!(parse_local(None), Vec::new());
        assert_eq!(parse_local(Some("not json")), Vec::new());
    }

    #[test]
    fn the_leader_publishes_only_what_it_keeps_and_can_be_copied() {
        let local = vec![
            slot("pg3", Some(30), true, false),
            slot("barman", Some(10), false, false),
            slot("keepme", Some(5), false, false),
            slot("pg2", None, false, false),
            slot("old", Some(1), false, true),
        ];
        let keep = names(&["barman", "pg2", "pg3", "old"]);
        assert_eq!(
            published(&local, &keep),
            vec![("barman".to_string(), 10), ("pg3".to_string(), 30)],
            "an operator's slot is not published, nor one without WAL or invalidated"
        );
    }

    #[test]
    fn a_replica_copies_advances_up_to_replay_and_drops_the_rest() {
        let published = vec![
            ("barman".to_string(), 500),
            ("pg1".to_string(), 900),
            ("pg2".to_string(), 800),
        ];
        let local = vec![
            slot("barman", Some(100), false, false),
            slot("stray", Some(1), false, false),
            slot("keepme", Some(1), false, false),
            slot("streaming", Some(1), true, false),
        ];
        let ignore = vec![IgnoreSlot {
            name: Some("keepme".into()),
            kind: None,
            database: None,
            plugin: None,
        }];
        // I am pg2: my own slot is never made here.
        let w = plan_copies(&local, &published, "pg2", true, &ignore, Some(700));
        assert_eq!(w.drops, names(&["stray"]), "ignored and active slots stay");
        assert!(w.ahead.is_empty());
        assert_eq!(w.creates, names(&["pg1"]));
        assert_eq!(w.advances, vec![("barman".to_string(), 500)]);
        assert!(w.changes_set());

        // Advanced no further than this replica replayed; not at all when unknown.
        let w = plan_copies(&local[..1], &published, "pg2", true, &[], Some(300));
        assert_eq!(w.advances, vec![("barman".to_string(), 300)]);
        let w = plan_copies(&local[..1], &published, "pg2", true, &[], None);
        assert!(w.advances.is_empty());
        // Never backwards: the leader's position behind the copy's is no work,
        // only a report of the gap a failover here would leave.
        let ahead = vec![slot("barman", Some(600), false, false)];
        let w = plan_copies(&ahead, &published[..1], "pg2", true, &[], Some(700));
        assert!(w.is_empty(), "{w:?}");
        assert_eq!(w.ahead, vec![("barman".to_string(), 100)]);
    }

    #[test]
    fn an_ignored_slot_here_is_never_touched_even_under_a_published_name() {
        // A pg_receivewal streaming from this standby through its own `barman`,
        // which `ignore_slots` names: not advanced to the leader's consumer's
        // position, not dropped, not made anew; a stray one beside it goes.
        let published = vec![("barman".to_string(), 500)];
        let local = vec![
            slot("barman", Some(100), false, false),
            slot("mine_too", None, false, true),
        ];
        let ignore = vec![IgnoreSlot {
            name: Some("barman".into()),
            kind: Some("physical".into()),
            database: None,
            plugin: None,
        }];
        let w = plan_copies(&local, &published, "pg2", true, &ignore, Some(700));
        assert_eq!(w.drops, names(&["mine_too"]));
        assert!(w.creates.is_empty() && w.advances.is_empty(), "{w:?}");
        // Missing, it is made (the leader makes an ignored permanent slot too).
        let w = plan_copies(&[], &published, "pg2", true, &ignore, Some(700));
        assert_eq!(w.creates, names(&["barman"]));
    }

    #[test]
    fn an_invalidated_or_unreserved_copy_is_made_anew() {
        let published = vec![("barman".to_string(), 500), ("pg1".to_string(), 500)];
        let local = vec![
            slot("barman", Some(100), false, true),
            slot("pg1", None, false, false),
        ];
        let w = plan_copies(&local, &published, "pg2", true, &[], Some(700));
        assert_eq!(w.drops, names(&["barman", "pg1"]));
        assert_eq!(w.creates, names(&["barman", "pg1"]));
        assert!(w.advances.is_empty(), "advanced once made, on the next run");
    }

    #[test]
    fn a_departed_member_s_slot_is_kept_for_member_slots_ttl() {
        let t0 = Instant::from_nanos(1_000_000_000_000);
        let ttl = Duration::from_secs(1800);
        let at = |s: u64| t0.add(Duration::from_secs(s));
        let mut r = Retention::default();
        let both = names(&["pg2", "pg3"]);
        assert_eq!(r.update(t0, 5, &both, None, "pg1", ttl), (Vec::new(), None));
        // pg3's key went away at 100 s: its slot is kept until 100 + 1800 s.
        let only2 = names(&["pg2"]);
        assert_eq!(
            r.update(at(100), 5, &only2, None, "pg1", ttl),
            (names(&["pg3"]), Some(at(1900)))
        );
        assert_eq!(
            r.update(at(1899), 5, &only2, None, "pg1", ttl).0,
            names(&["pg3"])
        );
        assert_eq!(
            r.update(at(1900), 5, &only2, None, "pg1", ttl),
            (Vec::new(), None)
        );
        // Back before the end: seen again, nothing departed.
        let mut r = Retention::default();
        r.update(t0, 5, &both, None, "pg1", ttl);
        r.update(at(10), 5, &only2, None, "pg1", ttl);
        assert_eq!(
            r.update(at(20), 5, &both, None, "pg1", ttl),
            (Vec::new(), None)
        );
        // Zero: dropped at once.
        let mut r = Retention::default();
        r.update(t0, 5, &both, None, "pg1", Duration::ZERO);
        assert_eq!(
            r.update(at(1), 5, &only2, None, "pg1", Duration::ZERO).0,
            Vec::<String>::new()
        );
    }

    #[test]
    fn a_new_leadership_keeps_what_the_last_one_retained_for_a_full_ttl() {
        let t0 = Instant::from_nanos(1_000_000_000_000);
        let ttl = Duration::from_secs(60);
        let mut r = Retention::default();
        // The last leader (pg1) kept pg1, pg2, pg3 and old; pg2 leads now, pg1
        // crashed: pg1's slot (for its rejoin) and old's are kept from now on, pg2
        // never keeps a slot of its own.
        let published = names(&["old", "pg1", "pg2", "pg3"]);
        let (kept, ends) = r.update(t0, 9, &names(&["pg3"]), Some(&published), "pg2", ttl);
        assert_eq!(kept, names(&["old", "pg1"]));
        assert_eq!(ends, Some(t0.add(ttl)));
        // Seeded once per leadership: a later read of the same list seeds nothing.
        let later = t0.add(Duration::from_secs(61));
        assert_eq!(
            r.update(later, 9, &names(&["pg3"]), Some(&published), "pg2", ttl),
            (Vec::new(), None)
        );
    }

    #[test]
    fn a_node_that_leads_again_starts_from_the_last_leader_s_list_not_its_own_memory() {
        // Review H1: A led, pg3 left at 100 s; A lost the lead; pg3 came back
        // and left again under B; B crashed; A leads again at 7300 s with B's
        // list naming pg3: kept a full ttl from 7300 s, not dropped for its
        // departure under A's first leadership.
        let t0 = Instant::from_nanos(1_000_000_000_000);
        let ttl = Duration::from_secs(1800);
        let at = |s: u64| t0.add(Duration::from_secs(s));
        let mut r = Retention::default();
        r.update(t0, 5, &names(&["pg2", "pg3"]), None, "pg1", ttl);
        r.update(at(100), 5, &names(&["pg2"]), None, "pg1", ttl);
        let b_list = names(&["pg1", "pg2", "pg3"]);
        let (kept, ends) = r.update(at(7300), 9, &names(&["pg2"]), Some(&b_list), "pg1", ttl);
        assert_eq!(kept, names(&["pg3"]));
        assert_eq!(ends, Some(at(7300 + 1800)));
        assert_eq!(r.names(9), Some(names(&["pg2", "pg3"])));
        assert_eq!(r.names(5), None, "not the leadership it was seeded for");
        // An invalidated kept slot is given up; a present member's never is.
        r.forget("pg3");
        r.forget("pg2");
        assert_eq!(r.names(9), Some(names(&["pg2"])));
    }

    #[test]
    fn nofailover_keeps_no_copies_and_a_slot_named_like_me_is_not_mine_to_copy() {
        let published = vec![("barman".to_string(), 500), ("pg2".to_string(), 500)];
        let local = vec![
            slot("barman", Some(100), false, false),
            slot("pg2", Some(100), false, false),
        ];
        let w = plan_copies(&local, &published, "pg2", false, &[], Some(700));
        assert_eq!(w.drops, names(&["barman", "pg2"]));
        assert!(w.creates.is_empty() && w.advances.is_empty());
        // A copy named like this node (left from a time it was someone else's
        // replica target, say) is not wanted: nothing here would read it.
        let w = plan_copies(&local, &published, "pg2", true, &[], Some(700));
        assert_eq!(w.drops, names(&["pg2"]));
        assert_eq!(w.advances, vec![("barman".to_string(), 500)]);
    }
}
