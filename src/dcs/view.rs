//! The cluster view, parsed from a full read and kept up to date from the scope
//! watch (issue 13 item 5).
//!
//! Owns: the defensive parse of the scope's keys into a [`ClusterView`] — one code
//! path for a range read and for the watch's events, so a view kept from events is
//! the view a read at the same revision would give — the log-once of parse
//! problems, the member parse cache, and the view kept between reads: the last full
//! read with every later watch event applied in order, and whether it is complete
//! up to its revision.
//!
//! Must never: talk to etcd, decide which decisions may rest on a kept view (the
//! core does: `core::watched`), or hand out a kept view after a gap in the events
//! (a watch that broke, was cancelled or compacted, or was opened past the read the
//! view comes from): the next full read starts it again.

use std::collections::HashSet;

use crate::core::model::{ClusterView, Initialize, LeaderKey, Member};

use super::member_cache::MemberCache;
use super::{handover, keys};

/// At most this many distinct parse problems are remembered for log-once.
const WARNED_CAP: usize = 1024;

/// One key under the scope as etcd holds it, its name relative to the scope's
/// prefix (`leader`, `members/pg1`, ...).
#[derive(Clone, Copy, Debug)]
pub struct Kv<'a> {
    pub key: &'a [u8],
    pub value: &'a [u8],
    pub create_revision: i64,
    pub mod_revision: i64,
    pub lease: i64,
}

/// One event of the scope watch.
#[derive(Clone, Copy, Debug)]
pub enum Change<'a> {
    Put(Kv<'a>),
    /// The key was deleted at `revision` (its tombstone's mod revision).
    Delete {
        key: &'a [u8],
        revision: i64,
    },
}

impl Change<'_> {
    fn revision(&self) -> i64 {
        match self {
            Change::Put(kv) => kv.mod_revision,
            Change::Delete { revision, .. } => *revision,
        }
    }
}

/// The parser of the scope's keys and the view kept from the watch.
pub struct ViewKeeper {
    /// `<namespace>/<scope>/`, for messages.
    prefix: String,
    /// Parse problems already logged (log once per distinct problem).
    warned: HashSet<String>,
    /// The member values last parsed (issue 13: no JSON parse of an unchanged one).
    members: MemberCache,
    /// The last full read, with every watch event after it applied in order.
    /// `None`: no read yet, or a gap since (the watch broke).
    kept: Option<ClusterView>,
    /// The revision of the full read `kept` started from: every write at or below
    /// it is in the read already (the writes of one txn share one revision, and a
    /// read sees all of them or none), so the watch's events up to it are skipped.
    read_revision: i64,
    /// The revision the open watch delivers events from (`None`: no watch open).
    /// `kept` is complete only while it is at most `read_revision + 1`.
    watch_from: Option<i64>,
    /// Events were applied to `kept` since its read. A new watch from
    /// `read_revision + 1` would deliver them again, and replaying them over a view
    /// that already holds them can show states etcd never had: such a view goes
    /// with the watch that brought them.
    applied: bool,
}

impl ViewKeeper {
    pub fn new(prefix: &str) -> ViewKeeper {
        ViewKeeper {
            prefix: prefix.to_string(),
            warned: HashSet::new(),
            members: MemberCache::default(),
            kept: None,
            read_revision: 0,
            watch_from: None,
            applied: false,
        }
    }

    /// Log a parse problem once per distinct text.
    pub fn warn_once(&mut self, key: &str, problem: &str) {
        let msg = format!("etcd key {}{key}: {problem}", self.prefix);
        if self.warned.contains(&msg) {
            return;
        }
        if self.warned.len() >= WARNED_CAP {
            self.warned.clear();
        }
        log::warn!("{msg}");
        self.warned.insert(msg);
    }

    /// The view of a full (linearizable) read at header revision `revision` with
    /// these keys. It also becomes the kept view, which the watch's events bring
    /// forward from here (events at or below `revision` are in it already; a watch
    /// open since before the read delivers every event after it, provided it
    /// started no later than `revision + 1`: `view` checks) — unless a watch is
    /// open and the kept view is already past `revision`: a read parsed after the
    /// watch delivered newer events (the leader's renewal read is parsed after the
    /// pet) must not take the view back to a state whose later events will not
    /// come again. With no watch open a read always replaces it (after a restored
    /// etcd the new store's revisions are lower, and its watch starts afresh).
    pub fn read<'a>(
        &mut self,
        revision: i64,
        kvs: impl IntoIterator<Item = Kv<'a>>,
    ) -> ClusterView {
        let mut view = ClusterView {
            revision,
            ..ClusterView::default()
        };
        for kv in kvs {
            self.put(&mut view, &kv);
        }
        let behind =
            self.watch_from.is_some() && self.kept.as_ref().is_some_and(|k| k.revision > revision);
        if !behind {
            self.kept = Some(view.clone());
            self.read_revision = revision;
            self.applied = false;
        }
        view
    }

    /// A watch was opened that delivers every event from `start_revision` on. The
    /// kept view is complete only if nothing between its read and `start_revision`
    /// can be missing (`view` checks).
    pub fn watch_opened(&mut self, start_revision: i64) {
        self.watch_from = Some(start_revision);
    }

    /// The watch is gone (broken, cancelled by etcd, compacted, replaced): events
    /// may be missed from now on. The kept view stays only if it is still exactly
    /// its read (no event applied), so a watch opened right after that read takes
    /// it up again; otherwise the next full read starts it again.
    pub fn watch_closed(&mut self) {
        self.watch_from = None;
        if self.applied {
            self.kept = None;
        }
    }

    /// One watch response: its header revision (the store's revision when it was
    /// sent: every event of the scope up to it is in this response or an earlier
    /// one) and its events, in etcd's order.
    pub fn apply<'a>(
        &mut self,
        header_revision: i64,
        changes: impl IntoIterator<Item = Change<'a>>,
    ) {
        let Some(mut view) = self.kept.take() else {
            return;
        };
        for c in changes {
            let rev = c.revision();
            if rev <= self.read_revision {
                continue;
            }
            match c {
                Change::Put(kv) => self.put(&mut view, &kv),
                Change::Delete { key, .. } => remove(&mut view, key),
            }
            self.applied = true;
            view.revision = view.revision.max(rev);
        }
        view.revision = view.revision.max(header_revision);
        self.kept = Some(view);
    }

    /// The kept view, while it is complete: a watch open whose events follow on
    /// from its read without a gap.
    pub fn view(&self) -> Option<&ClusterView> {
        // INVARIANT: every event after `read_revision` reaches `apply`, in order:
        // the watch starts at or before `read_revision + 1` and has not closed.
        match self.watch_from {
            Some(from) if from <= self.read_revision + 1 => self.kept.as_ref(),
            _ => None,
        }
    }

    /// Set `kv` in `view`, replacing what the key held there before. Garbage is
    /// logged once per distinct problem and carried in the view as `read_cluster`
    /// always did (never an error because of content).
    fn put(&mut self, view: &mut ClusterView, kv: &Kv) {
        remove(view, kv.key);
        match kv.key {
            b"leader" => {
                if std::str::from_utf8(kv.value).is_err() {
                    self.warn_once("leader", "value is not UTF-8; nobody can match it");
                }
                view.leader = Some(LeaderKey {
                    name: String::from_utf8_lossy(kv.value).into_owned(),
                    epoch: kv.create_revision,
                    mod_revision: kv.mod_revision,
                    lease: kv.lease,
                });
            }
            b"initialize" => {
                let init = keys::parse_initialize(kv.value, kv.lease);
                if let Initialize::Garbage(why) = &init {
                    self.warn_once("initialize", why);
                }
                view.initialize = Some(init);
            }
            b"history" => {
                let (h, problems) = keys::parse_history(kv.value);
                for p in problems {
                    self.warn_once("history", &p);
                }
                view.history = h;
            }
            b"sync" => {
                let k = keys::parse_sync(kv.value);
                if let Err(why) = &k {
                    self.warn_once("sync", why);
                }
                view.sync = Some(k);
            }
            b"rollback" => {
                let key = format!("{}rollback", self.prefix);
                let m = keys::parse_rollback(&key, kv.value);
                match &m.parse_error {
                    Some(why) => self.warn_once(
                        "rollback",
                        &format!(
                            "{why}; it still counts as a rollback marker: no node takes the \
                             leader key or promotes until `tenure confirm-epoch` deletes it"
                        ),
                    ),
                    None => self.warn_once(
                        "rollback",
                        &format!(
                            "etcd went back in time ({}: revision {} seen, {} found, by {} at \
                             {}): no node takes the leader key or promotes until an operator \
                             runs `tenure confirm-epoch`",
                            m.reason, m.seen_revision, m.found_revision, m.by, m.at
                        ),
                    ),
                }
                view.rollback = Some(m);
            }
            b"confirm_epoch" => match keys::parse_confirm_epoch(kv.value) {
                Ok(c) => view.confirm_epoch = Some(c),
                Err(why) => self.warn_once("confirm_epoch", &format!("{why}; ignored")),
            },
            b"failover" => {
                view.failover = handover::parse_failover(kv.value, kv.mod_revision);
                if let Some(why) = view.failover.as_ref().and_then(|f| f.parse_error.clone()) {
                    self.warn_once("failover", &format!("{why}; the leader deletes it"));
                }
            }
            b"release" => {
                let r = handover::parse_release_key(kv.value);
                if let Some(Err(why)) = &r.marker {
                    self.warn_once("release", &format!("{why}; it proves nothing"));
                }
                view.release = r.marker;
                view.release_acquired = r.acquired;
                view.release_revision = kv.mod_revision;
            }
            b"status" => match keys::parse_status(kv.value) {
                Ok(s) => {
                    if let Some(why) = &s.slots_problem {
                        self.warn_once(
                            "status slots",
                            &format!(
                                "{why}; that field is left out (no slot copies without \
                                 slots, no departed members' slots kept by the next \
                                 leader without retain_slots)"
                            ),
                        );
                    }
                    view.status_optime = Some(s.optime);
                    view.status_slots = s.slots;
                    view.status_retain_slots = s.retain_slots;
                    view.status_revision = kv.mod_revision;
                }
                Err(why) => self.warn_once("status", &format!("{why}; ignored")),
            },
            b"config" => {
                if std::str::from_utf8(kv.value).is_err() {
                    self.warn_once("config", "value is not UTF-8");
                }
                view.config = Some(String::from_utf8_lossy(kv.value).into_owned());
                view.config_revision = kv.mod_revision;
            }
            _ => {
                let Some(name) = member_name(kv.key) else {
                    if let Some(name) = kv.key.strip_prefix(b"members/") {
                        let name_s = String::from_utf8_lossy(name).into_owned();
                        self.warn_once(
                            &format!("members/{name_s}"),
                            "not a usable member name, ignored",
                        );
                    }
                    return;
                };
                let info = self.members.parse(name.as_bytes(), kv.value);
                if let Some(p) = &info.parse_error {
                    let p = p.clone();
                    self.warn_once(&format!("members/{name}"), &p);
                }
                // Sorted by name, as a range read returns them (key order).
                let at = view.members.partition_point(|m| m.name.as_str() < name);
                view.members.insert(
                    at,
                    Member {
                        name: name.to_string(),
                        mod_revision: kv.mod_revision,
                        lease: kv.lease,
                        info,
                    },
                );
            }
        }
    }
}

/// `members/<name>` with a usable name (non-empty, UTF-8, no `/`).
fn member_name(key: &[u8]) -> Option<&str> {
    let name = key.strip_prefix(b"members/")?;
    if name.is_empty() || name.contains(&b'/') {
        return None;
    }
    std::str::from_utf8(name).ok()
}

/// What `key`'s deletion leaves in `view`: what a read without the key shows.
fn remove(view: &mut ClusterView, key: &[u8]) {
    match key {
        b"leader" => view.leader = None,
        b"initialize" => view.initialize = None,
        b"history" => view.history = Vec::new(),
        b"sync" => view.sync = None,
        b"rollback" => view.rollback = None,
        b"confirm_epoch" => view.confirm_epoch = None,
        b"failover" => view.failover = None,
        b"release" => {
            view.release = None;
            view.release_acquired = None;
            view.release_revision = 0;
        }
        b"status" => {
            view.status_optime = None;
            view.status_slots = None;
            view.status_retain_slots = None;
            view.status_revision = 0;
        }
        b"config" => {
            view.config = None;
            view.config_revision = 0;
        }
        _ => {
            if let Some(name) = member_name(key) {
                view.members.retain(|m| m.name != name);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A key as a test writes it: (key, value, create revision, mod revision, lease).
    type Row = (&'static str, String, i64, i64, i64);

    fn kvs(rows: &[Row]) -> Vec<Kv<'_>> {
        let mut v: Vec<Kv> = rows
            .iter()
            .map(|(k, val, c, m, l)| Kv {
                key: k.as_bytes(),
                value: val.as_bytes(),
                create_revision: *c,
                mod_revision: *m,
                lease: *l,
            })
            .collect();
        // A range read returns keys in byte order.
        v.sort_by(|a, b| a.key.cmp(b.key));
        v
    }

    fn member(role: &str, xlog: u64) -> String {
        format!(
            r#"{{"conn_url":"postgres://x","role":"{role}","state":"running","xlog_location":{xlog},"timeline":1}}"#
        )
    }

    /// Debug text: `ClusterView` has no `PartialEq`, and the text shows every field.
    fn text(v: &ClusterView) -> String {
        format!("{v:?}")
    }

    fn keeper_at(rows: &[Row], revision: i64) -> ViewKeeper {
        let mut k = ViewKeeper::new("/service/t/");
        k.read(revision, kvs(rows));
        k.watch_opened(revision + 1);
        k
    }

    fn fresh_read(rows: &[Row], revision: i64) -> ClusterView {
        ViewKeeper::new("/service/t/").read(revision, kvs(rows))
    }

    #[test]
    fn watch_events_applied_in_order_give_the_view_a_read_gives() {
        let start: Vec<Row> = vec![
            ("leader", "pg1".into(), 10, 10, 0x1),
            ("initialize", "7001".into(), 2, 2, 0),
            ("config", r#"{"ttl":7}"#.into(), 3, 3, 0),
            ("members/pg1", member("primary", 100), 4, 12, 0x11),
            ("members/pg3", member("replica", 90), 5, 11, 0x13),
        ];
        let mut k = keeper_at(&start, 12);
        // Events in etcd's order: pg2 joins (sorted between pg1 and pg3), pg3
        // moves twice (the later value wins), config changes, a txn at 16 writes
        // the sync key and history together.
        let pg2 = member("replica", 95);
        let pg3a = member("replica", 96);
        let pg3b = member("replica", 99);
        let cfg = r#"{"ttl":7,"loop_wait":1}"#.to_string();
        let sync = r#"{"leader":"pg1","sync_standby":"pg2"}"#.to_string();
        let hist = r#"[[1,1000,"no recovery target specified","2026-01-01T00:00:00+00:00","pg1"]]"#
            .to_string();
        k.apply(
            14,
            [
                Change::Put(Kv {
                    key: b"members/pg2",
                    value: pg2.as_bytes(),
                    create_revision: 13,
                    mod_revision: 13,
                    lease: 0x12,
                }),
                Change::Put(Kv {
                    key: b"members/pg3",
                    value: pg3a.as_bytes(),
                    create_revision: 5,
                    mod_revision: 14,
                    lease: 0x13,
                }),
            ],
        );
        k.apply(
            16,
            [
                Change::Put(Kv {
                    key: b"members/pg3",
                    value: pg3b.as_bytes(),
                    create_revision: 5,
                    mod_revision: 15,
                    lease: 0x13,
                }),
                Change::Put(Kv {
                    key: b"config",
                    value: cfg.as_bytes(),
                    create_revision: 3,
                    mod_revision: 16,
                    lease: 0,
                }),
            ],
        );
        k.apply(
            17,
            [
                Change::Put(Kv {
                    key: b"sync",
                    value: sync.as_bytes(),
                    create_revision: 17,
                    mod_revision: 17,
                    lease: 0,
                }),
                Change::Put(Kv {
                    key: b"history",
                    value: hist.as_bytes(),
                    create_revision: 17,
                    mod_revision: 17,
                    lease: 0,
                }),
            ],
        );
        let end: Vec<Row> = vec![
            ("leader", "pg1".into(), 10, 10, 0x1),
            ("initialize", "7001".into(), 2, 2, 0),
            ("config", cfg.clone(), 3, 16, 0),
            ("members/pg1", member("primary", 100), 4, 12, 0x11),
            ("members/pg2", pg2.clone(), 13, 13, 0x12),
            ("members/pg3", pg3b.clone(), 5, 15, 0x13),
            ("sync", sync.clone(), 17, 17, 0),
            ("history", hist.clone(), 17, 17, 0),
        ];
        let kept = k.view().expect("a watch is open since the read");
        assert_eq!(text(kept), text(&fresh_read(&end, 17)));
        assert_eq!(
            kept.members
                .iter()
                .map(|m| m.name.as_str())
                .collect::<Vec<_>>(),
            ["pg1", "pg2", "pg3"]
        );
        assert_eq!(kept.config_revision, 16);
    }

    #[test]
    fn a_deleted_member_key_leaves_the_view() {
        let start: Vec<Row> = vec![
            ("leader", "pg1".into(), 10, 10, 0x1),
            ("members/pg1", member("primary", 100), 4, 4, 0x11),
            ("members/pg2", member("replica", 90), 5, 5, 0x12),
        ];
        let mut k = keeper_at(&start, 10);
        k.apply(
            11,
            [Change::Delete {
                key: b"members/pg2",
                revision: 11,
            }],
        );
        let kept = k.view().expect("in sync");
        assert!(kept.member("pg2").is_none(), "pg2's key expired: {kept:?}");
        assert!(kept.member("pg1").is_some());
        assert_eq!(kept.revision, 11);
        // The leader key and the rest go the same way.
        k.apply(
            12,
            [
                Change::Delete {
                    key: b"leader",
                    revision: 12,
                },
                Change::Delete {
                    key: b"members/pg1",
                    revision: 12,
                },
            ],
        );
        let kept = k.view().expect("in sync");
        assert!(kept.leader.is_none() && kept.members.is_empty(), "{kept:?}");
        assert_eq!(text(kept), text(&fresh_read(&[], 12)));
    }

    #[test]
    fn a_put_of_garbage_replaces_a_good_value_as_a_read_would() {
        let good = r#"{"up_to":5,"by":"op","at":"x"}"#;
        let start: Vec<Row> = vec![
            ("leader", "pg1".into(), 10, 10, 0x1),
            ("confirm_epoch", good.into(), 3, 3, 0),
            ("release", "not json".into(), 4, 4, 0),
        ];
        let mut k = keeper_at(&start, 10);
        k.apply(
            11,
            [
                Change::Put(Kv {
                    key: b"confirm_epoch",
                    value: b"junk",
                    create_revision: 3,
                    mod_revision: 11,
                    lease: 0,
                }),
                Change::Delete {
                    key: b"release",
                    revision: 11,
                },
            ],
        );
        let end: Vec<Row> = vec![
            ("leader", "pg1".into(), 10, 10, 0x1),
            ("confirm_epoch", "junk".into(), 3, 11, 0),
        ];
        let kept = k.view().expect("in sync");
        assert!(kept.confirm_epoch.is_none() && kept.release.is_none());
        assert_eq!(kept.release_revision, 0);
        assert_eq!(text(kept), text(&fresh_read(&end, 11)));
    }

    #[test]
    fn events_the_read_already_holds_are_skipped() {
        // The watch opened earlier delivers events at or below a newer read's
        // revision after that read: they are in it already (a txn's writes share
        // its revision), and applying an old one would undo a newer value.
        let mut k = keeper_at(&[("leader", "pg1".into(), 10, 10, 0x1)], 10);
        let newer: Vec<Row> = vec![
            ("leader", "pg1".into(), 10, 10, 0x1),
            ("members/pg2", member("replica", 200), 11, 13, 0x12),
        ];
        k.read(13, kvs(&newer));
        let old = member("replica", 150);
        k.apply(
            12,
            [Change::Put(Kv {
                key: b"members/pg2",
                value: old.as_bytes(),
                create_revision: 11,
                mod_revision: 12,
                lease: 0x12,
            })],
        );
        k.apply(
            13,
            [Change::Delete {
                key: b"leader",
                revision: 13,
            }],
        );
        let kept = k.view().expect("in sync");
        assert_eq!(text(kept), text(&fresh_read(&newer, 13)));
        // A later one applies.
        k.apply(
            14,
            [Change::Delete {
                key: b"leader",
                revision: 14,
            }],
        );
        assert!(k.view().expect("in sync").leader.is_none());
    }

    #[test]
    fn a_gap_or_a_compaction_forces_a_full_read() {
        let rows: Vec<Row> = vec![("leader", "pg1".into(), 10, 10, 0x1)];
        // No read yet: nothing to hand out, whatever the watch says.
        let mut k = ViewKeeper::new("/service/t/");
        k.watch_opened(1);
        k.apply(
            5,
            [Change::Delete {
                key: b"leader",
                revision: 5,
            }],
        );
        assert!(k.view().is_none());
        // A read, but no watch open: the view would go stale unseen.
        k.read(10, kvs(&rows));
        k.watch_closed();
        assert!(k.view().is_none());
        k.read(10, kvs(&rows));
        assert!(k.view().is_none(), "read without a watch");
        // A watch opened past the read's revision + 1 would miss the writes between.
        k.watch_opened(12);
        assert!(k.view().is_none(), "events at revision 11 would be missing");
        k.apply(
            13,
            [Change::Delete {
                key: b"leader",
                revision: 13,
            }],
        );
        assert!(k.view().is_none(), "events after a gap bring nothing back");
        // A read after those events (so at or past them, and past the watch's
        // start): the watch holds every event after that read.
        k.read(13, kvs(&rows));
        assert!(k.view().is_some());
        // Opened right after the read: in sync.
        k.watch_closed();
        k.read(10, kvs(&rows));
        k.watch_opened(11);
        assert!(k.view().is_some());
        // The watch broke (a cancel for compaction, no leader, a stream error):
        // gone until the next read, and a watch reopened after it.
        k.watch_closed();
        assert!(k.view().is_none());
        k.apply(
            14,
            [Change::Delete {
                key: b"leader",
                revision: 14,
            }],
        );
        assert!(k.view().is_none());
        k.read(20, kvs(&rows));
        k.watch_opened(21);
        assert_eq!(k.view().map(|v| v.revision), Some(20));
    }

    #[test]
    fn a_watch_reopened_after_events_needs_a_read_and_right_after_its_read_does_not() {
        let rows: Vec<Row> = vec![("leader", "pg1".into(), 10, 10, 0x1)];
        let mut k = keeper_at(&rows, 10);
        // Broken before any event: the view is still exactly the read, and a
        // watch from right after that read takes it up again (the agent reads,
        // then opens the watch).
        k.watch_closed();
        assert!(k.view().is_none());
        k.watch_opened(11);
        assert_eq!(k.view().map(|v| v.revision), Some(10));
        // Broken after events: the new watch would replay them over a view that
        // holds them already.
        k.apply(
            11,
            [Change::Delete {
                key: b"leader",
                revision: 11,
            }],
        );
        k.watch_closed();
        k.watch_opened(11);
        assert!(k.view().is_none(), "needs a read");
        k.read(12, kvs(&rows));
        assert!(k.view().is_some());
    }

    #[test]
    fn a_read_parsed_after_newer_events_does_not_take_the_view_back() {
        let rows: Vec<Row> = vec![("leader", "pg1".into(), 10, 10, 0x1)];
        let mut k = keeper_at(&rows, 10);
        // The watch delivered the DELETE at 12 before a read made at 11 was parsed
        // (the leader's renewal read waits for the pet): the event will not come
        // again, so the kept view stays where it is.
        k.apply(
            12,
            [Change::Delete {
                key: b"leader",
                revision: 12,
            }],
        );
        let old = k.read(11, kvs(&rows));
        assert!(old.leader.is_some(), "the read itself is what it is");
        let kept = k.view().expect("in sync");
        assert!(kept.leader.is_none() && kept.revision == 12, "{kept:?}");
        // With no watch open, a read always starts the view again (a restored etcd
        // has lower revisions).
        k.watch_closed();
        k.read(3, kvs(&rows));
        k.watch_opened(4);
        assert_eq!(k.view().map(|v| v.revision), Some(3));
    }

    #[test]
    fn the_revision_only_moves_forward_with_the_watch() {
        // The rollback check (core::epoch) takes a revision below the highest seen
        // for etcd going back in time: a kept view never goes below its read.
        let mut k = keeper_at(&[("leader", "pg1".into(), 10, 10, 0x1)], 50);
        k.apply(60, []);
        assert_eq!(k.view().map(|v| v.revision), Some(60));
        k.apply(
            55,
            [Change::Delete {
                key: b"members/x",
                revision: 40,
            }],
        );
        assert_eq!(k.view().map(|v| v.revision), Some(60));
    }
}
