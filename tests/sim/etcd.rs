//! A simulated etcd that behaves like etcd, not better: one linearizable KV with
//! revisions and `create_revision`, leases with a granted TTL >= the minimum, expiry
//! swept late by a 500 ms lessor tick, every lease reset to its full TTL plus an
//! election timeout when a new etcd leader takes over, and `LeaseTimeToLive`
//! truncating to whole seconds. The `sync` key (synchronous mode) is written and
//! deleted only under the leader's epoch guard, like `history`. Requests are applied at one instant chosen by the
//! world (between their send and their answer).

use std::collections::BTreeMap;
use std::time::Duration;

use tenure::core::model::*;
use tenure::core::time::Instant;

#[derive(Clone, Debug)]
pub enum Val {
    Name(String),
    InitLocked(String),
    InitDone(u64),
    History(Vec<HistoryEntry>),
    /// Boxed: the largest value by far (clippy's `large_enum_variant`).
    Member(Box<MemberInfo>),
    Rollback(RollbackMarker),
    Sync(SyncKey),
    /// `failover` (Patroni's request; its `mod_revision` is the key's).
    Failover(FailoverRequest),
    /// `release`: a switchover's marker.
    Release(ReleaseMarker),
    /// `release` as an acquire txn writes it: its record, and the marker it took.
    Acquired(AcquiredRecord, Option<ReleaseMarker>),
}

/// How an older agent's acquire txn treats `release` (`Op::CreateLeader::old`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OldAgent {
    /// A record alone is garbage to it (records without marker fields, before
    /// finding L1's fix): it deletes it.
    pub deletes: bool,
}

#[derive(Clone, Debug)]
pub struct Kv {
    pub val: Val,
    pub create_rev: i64,
    pub mod_rev: i64,
    pub lease: LeaseId,
}

#[derive(Clone, Debug)]
pub struct Lease {
    pub ttl: i64,
    pub expiry: Instant,
}

#[derive(Clone, Debug)]
pub enum Op {
    Grant {
        ttl: u32,
    },
    KeepAlive {
        lease: LeaseId,
    },
    TimeToLive {
        lease: LeaseId,
    },
    Revoke {
        lease: LeaseId,
    },
    ReadLeader,
    ReadScope,
    /// `If(version(leader) == 0 && mod_revision(release) == release_rev)
    /// Then(put(leader, me, lease), put(release, record + the marker taken by me))`
    /// (review F1, the acquisition record; the `config` compare is not modelled:
    /// the simulation has no pause).
    CreateLeader {
        me: String,
        lease: LeaseId,
        release_rev: i64,
        /// `TENURE_SIM_OLD_AGENTS`: the txn of an agent older than the record
        /// (2d59b46, docs/design.md "What an agent older than the record does to
        /// `release`"): no record; a marker it parses is rewritten taken by it, an
        /// absent key left absent, and (only with `deletes`) a record alone deleted
        /// as garbage, the form before records carried marker fields.
        old: Option<OldAgent>,
    },
    ClaimInit {
        me: String,
        lease: LeaseId,
    },
    /// `If(lease(initialize) == lease) Then(put(initialize, sysid))`.
    RecordInit {
        lease: LeaseId,
        sysid: u64,
    },
    /// Create-only `initialize`, and the `rollback` marker if absent (one txn).
    CreateInit {
        sysid: u64,
        by: String,
        rollback: RollbackSeen,
    },
    /// Create-only `rollback` marker.
    MarkRollback {
        by: String,
        seen: RollbackSeen,
    },
    PutMember {
        name: String,
        info: Box<MemberInfo>,
    },
    /// Guarded by `create_revision(leader) == epoch && value(leader) == me`.
    DeleteLeader {
        me: String,
        epoch: Epoch,
    },
    AppendHistory {
        me: String,
        epoch: Epoch,
        entry: HistoryEntry,
    },
    /// `If(guard) Then(put(sync, key))` (DESIGN §3a; no lease: it outlives leaders).
    WriteSync {
        me: String,
        epoch: Epoch,
        key: SyncKey,
    },
    /// `If(guard) Then(delete(sync))`.
    DeleteSync {
        me: String,
        epoch: Epoch,
    },
    /// The switchover's release: `If(guard) Then(put(release), delete(leader))`.
    HandOver {
        me: String,
        epoch: Epoch,
        marker: ReleaseMarker,
    },
    /// `If(guard && mod_revision(failover) == rev) Then(delete(failover))`.
    ClearFailover {
        me: String,
        epoch: Epoch,
        mod_revision: i64,
    },
}

#[derive(Clone, Debug)]
pub enum Resp {
    Granted {
        id: LeaseId,
        ttl: i64,
    },
    /// Keepalive answer: the TTL, <= 0 when the lease is gone or expired.
    Ttl(i64),
    TimeToLive {
        ttl: Option<i64>,
        granted_ttl: Option<i64>,
        has_keys: bool,
    },
    Done(bool),
    Leader(Option<LeaderKey>),
    Scope(Box<ClusterView>),
    Created(Option<i64>),
}

pub struct Etcd {
    pub rev: i64,
    pub kv: BTreeMap<String, Kv>,
    pub leases: BTreeMap<LeaseId, Lease>,
    next_lease: LeaseId,
    pub min_ttl: i64,
    pub election_timeout: Duration,
    /// Set when `leader` was deleted (the world turns it into watch events).
    pub leader_deleted: bool,
    /// Every change of `leader` since the world last looked, in order: (revision,
    /// the key a PUT wrote; `None` a DELETE). The world hands them to every node
    /// whose watch is open (`Observation::leader_changes`).
    pub leader_changes: Vec<(i64, Option<LeaderKey>)>,
}

impl Etcd {
    pub fn new() -> Etcd {
        Etcd {
            rev: 1,
            kv: BTreeMap::new(),
            leases: BTreeMap::new(),
            next_lease: 0x7a00,
            // ceil(1.5 x election timeout 500 ms)
            min_ttl: 1,
            election_timeout: Duration::from_millis(500),
            leader_deleted: false,
            leader_changes: Vec::new(),
        }
    }

    /// An acquire txn's compares, whichever agent sends it: no leader key, the
    /// candidate's lease alive, `release` at the revision the candidate read.
    fn acquire_compares(&self, lease: i64, release_rev: i64, now: Instant) -> bool {
        let rel = self.kv.get("release").map_or(0, |k| k.mod_rev);
        !self.kv.contains_key("leader") && !self.expired(lease, now) && rel == release_rev
    }

    fn expired(&self, id: LeaseId, now: Instant) -> bool {
        self.leases.get(&id).is_none_or(|l| l.expiry <= now)
    }

    pub fn leader_key(&self) -> Option<LeaderKey> {
        self.kv.get("leader").and_then(|kv| match &kv.val {
            Val::Name(n) => Some(LeaderKey {
                name: n.clone(),
                epoch: kv.create_rev,
                mod_revision: kv.mod_rev,
                lease: kv.lease,
            }),
            _ => None,
        })
    }

    pub fn put(&mut self, key: &str, val: Val, lease: LeaseId) -> i64 {
        self.rev += 1;
        let rev = self.rev;
        let create_rev = self.kv.get(key).map_or(rev, |k| k.create_rev);
        self.kv.insert(
            key.to_string(),
            Kv {
                val,
                create_rev,
                mod_rev: rev,
                lease,
            },
        );
        create_rev
    }

    pub fn delete(&mut self, key: &str) -> bool {
        if self.kv.remove(key).is_some() {
            self.rev += 1;
            if key == "leader" {
                self.leader_deleted = true;
                self.leader_changes.push((self.rev, None));
            }
            true
        } else {
            false
        }
    }

    /// Revoke a lease and delete its keys (one revision for all, like etcd).
    pub fn revoke(&mut self, id: LeaseId) -> bool {
        if self.leases.remove(&id).is_none() {
            return false;
        }
        let keys: Vec<String> = self
            .kv
            .iter()
            .filter(|(_, v)| v.lease == id)
            .map(|(k, _)| k.clone())
            .collect();
        for k in keys {
            self.delete(&k);
        }
        true
    }

    /// The lessor's periodic check: revoke every lease past its expiry.
    pub fn sweep(&mut self, now: Instant) {
        let due: Vec<LeaseId> = self
            .leases
            .iter()
            .filter(|(_, l)| l.expiry <= now)
            .map(|(id, _)| *id)
            .collect();
        for id in due {
            self.revoke(id);
        }
    }

    /// A new etcd leader: every lease gets its full TTL plus an election timeout,
    /// counted from now (no lease checkpointing in 3.4).
    pub fn leader_changed(&mut self, now: Instant) {
        let et = self.election_timeout;
        for l in self.leases.values_mut() {
            l.expiry = now.add(Duration::from_secs(l.ttl.unsigned_abs())).add(et);
        }
    }

    pub fn apply(&mut self, now: Instant, op: &Op) -> Resp {
        match op {
            Op::Grant { ttl } => {
                self.next_lease += 1;
                let id = self.next_lease;
                let ttl = i64::from(*ttl).max(self.min_ttl);
                self.leases.insert(
                    id,
                    Lease {
                        ttl,
                        expiry: now.add(Duration::from_secs(ttl.unsigned_abs())),
                    },
                );
                Resp::Granted { id, ttl }
            }
            Op::KeepAlive { lease } => {
                // An expired lease awaiting its revoke answers "not found".
                if self.expired(*lease, now) {
                    return Resp::Ttl(0);
                }
                let l = self.leases.get_mut(lease).expect("checked above");
                l.expiry = now.add(Duration::from_secs(l.ttl.unsigned_abs()));
                Resp::Ttl(l.ttl)
            }
            Op::TimeToLive { lease } => match self.leases.get(lease) {
                None => Resp::TimeToLive {
                    ttl: None,
                    granted_ttl: None,
                    has_keys: false,
                },
                Some(l) => {
                    // Truncated toward zero, negative once expired.
                    let rem = if l.expiry >= now {
                        (l.expiry.since(now).as_secs()) as i64
                    } else {
                        -(now.since(l.expiry).as_secs() as i64)
                    };
                    Resp::TimeToLive {
                        ttl: Some(rem),
                        granted_ttl: Some(l.ttl),
                        has_keys: self.kv.values().any(|v| v.lease == *lease),
                    }
                }
            },
            Op::Revoke { lease } => Resp::Done(self.revoke(*lease)),
            Op::ReadLeader => Resp::Leader(self.leader_key()),
            Op::ReadScope => Resp::Scope(Box::new(self.scope())),
            Op::CreateLeader {
                me,
                lease,
                release_rev,
                old: Some(old),
            } => {
                if !self.acquire_compares(*lease, *release_rev, now) {
                    return Resp::Created(None);
                }
                let taken = |m: ReleaseMarker| ReleaseMarker {
                    taken_by: Some(me.clone()),
                    ..m
                };
                let write = match self.kv.get("release").map(|k| k.val.clone()) {
                    None => None,
                    Some(Val::Release(m) | Val::Acquired(_, Some(m))) => {
                        Some(Some(Val::Release(taken(m))))
                    }
                    // The record's placeholder marker (epoch 0) parses for it.
                    Some(Val::Acquired(a, None)) if !old.deletes => {
                        Some(Some(Val::Release(taken(ReleaseMarker {
                            epoch: 0,
                            lsn: 0,
                            timeline: 0,
                            candidate: None,
                            by: String::new(),
                            taken_by: Some(a.by),
                        }))))
                    }
                    Some(_) => Some(None),
                };
                let epoch = self.put("leader", Val::Name(me.clone()), *lease);
                // One txn: one revision for all.
                match write {
                    None => {}
                    Some(Some(v)) => {
                        self.rev -= 1;
                        self.put("release", v, 0);
                    }
                    Some(None) => {
                        self.rev -= 1;
                        self.delete("release");
                    }
                }
                self.leader_changes.push((epoch, self.leader_key()));
                Resp::Created(Some(epoch))
            }
            Op::CreateLeader {
                me,
                lease,
                release_rev,
                old: None,
            } => {
                if !self.acquire_compares(*lease, *release_rev, now) {
                    return Resp::Created(None);
                }
                let taken = match self.kv.get("release").map(|k| k.val.clone()) {
                    Some(Val::Release(m) | Val::Acquired(_, Some(m))) => Some(ReleaseMarker {
                        taken_by: Some(me.clone()),
                        ..m
                    }),
                    _ => None,
                };
                let record = AcquiredRecord {
                    by: me.clone(),
                    lease: *lease,
                    ttl: self.leases.get(lease).map_or(0, |l| l.ttl),
                };
                let epoch = self.put("leader", Val::Name(me.clone()), *lease);
                // One txn: one revision for both.
                self.rev -= 1;
                self.put("release", Val::Acquired(record, taken), 0);
                self.leader_changes.push((epoch, self.leader_key()));
                Resp::Created(Some(epoch))
            }
            Op::ClaimInit { me, lease } => {
                if self.kv.contains_key("initialize") || self.expired(*lease, now) {
                    return Resp::Created(None);
                }
                Resp::Created(Some(self.put(
                    "initialize",
                    Val::InitLocked(me.clone()),
                    *lease,
                )))
            }
            Op::RecordInit { lease, sysid } => {
                let ok = self.kv.get("initialize").is_some_and(|k| k.lease == *lease);
                if ok {
                    self.put("initialize", Val::InitDone(*sysid), 0);
                }
                // As the real txn's Else: a retry after a lost answer finds its own
                // identifier there, written (`Etcd::record_initialize`).
                let mine = self.kv.get("initialize").is_some_and(|k| {
                    k.lease == 0 && matches!(k.val, Val::InitDone(s) if s == *sysid)
                });
                Resp::Done(ok || mine)
            }
            Op::CreateInit {
                sysid,
                by,
                rollback,
            } => {
                if self.kv.contains_key("initialize") {
                    return Resp::Done(false);
                }
                // One txn, one revision, like etcd.
                self.rev += 1;
                let rev = self.rev;
                let mut keys = vec![("initialize", Val::InitDone(*sysid))];
                if !self.kv.contains_key("rollback") {
                    keys.push(("rollback", Val::Rollback(marker(by, rollback))));
                }
                for (k, val) in keys {
                    self.kv.insert(
                        k.to_string(),
                        Kv {
                            val,
                            create_rev: rev,
                            mod_rev: rev,
                            lease: 0,
                        },
                    );
                }
                Resp::Done(true)
            }
            Op::MarkRollback { by, seen } => {
                if self.kv.contains_key("rollback") {
                    return Resp::Done(false);
                }
                self.put("rollback", Val::Rollback(marker(by, seen)), 0);
                Resp::Done(true)
            }
            Op::PutMember { name, info } => {
                self.put(&format!("members/{name}"), Val::Member(info.clone()), 0);
                Resp::Done(true)
            }
            Op::DeleteLeader { me, epoch } => {
                let ok = self.guard(me, *epoch);
                if ok {
                    self.delete("leader");
                }
                Resp::Done(ok)
            }
            Op::AppendHistory { me, epoch, entry } => {
                if !self.guard(me, *epoch) {
                    return Resp::Done(false);
                }
                let mut h = match self.kv.get("history").map(|k| &k.val) {
                    Some(Val::History(h)) => h.clone(),
                    _ => Vec::new(),
                };
                h.push(entry.clone());
                self.put("history", Val::History(h), 0);
                Resp::Done(true)
            }
            Op::WriteSync { me, epoch, key } => {
                let ok = self.guard(me, *epoch);
                if ok {
                    self.put("sync", Val::Sync(key.clone()), 0);
                }
                Resp::Done(ok)
            }
            Op::DeleteSync { me, epoch } => {
                let ok = self.guard(me, *epoch);
                if ok {
                    self.delete("sync");
                }
                Resp::Done(ok)
            }
            Op::HandOver { me, epoch, marker } => {
                let ok = self.guard(me, *epoch);
                if ok {
                    // One txn: one revision for both (the world sees the marker with
                    // the DELETE).
                    self.put("release", Val::Release(marker.clone()), 0);
                    self.rev -= 1;
                    self.delete("leader");
                }
                Resp::Done(ok)
            }
            Op::ClearFailover {
                me,
                epoch,
                mod_revision,
            } => {
                let ok = self.guard(me, *epoch)
                    && self
                        .kv
                        .get("failover")
                        .is_some_and(|k| k.mod_rev == *mod_revision);
                if ok {
                    self.delete("failover");
                }
                Resp::Done(ok)
            }
        }
    }

    /// The `sync` key as stored (garbage values are not modelled).
    pub fn sync_key(&self) -> Option<SyncKey> {
        match self.kv.get("sync").map(|k| &k.val) {
            Some(Val::Sync(k)) => Some(k.clone()),
            _ => None,
        }
    }

    fn guard(&self, me: &str, epoch: Epoch) -> bool {
        self.leader_key()
            .is_some_and(|k| k.name == me && k.epoch == epoch)
    }

    fn scope(&self) -> ClusterView {
        let mut v = ClusterView {
            revision: self.rev,
            leader: self.leader_key(),
            ..ClusterView::default()
        };
        for (k, kv) in &self.kv {
            match (&kv.val, k.strip_prefix("members/")) {
                (Val::Member(info), Some(name)) => v.members.push(Member {
                    name: name.to_string(),
                    mod_revision: kv.mod_rev,
                    lease: kv.lease,
                    info: (**info).clone(),
                }),
                (Val::InitLocked(holder), _) => {
                    v.initialize = Some(Initialize::Locked {
                        lease: kv.lease,
                        holder: holder.clone(),
                    })
                }
                (Val::InitDone(sysid), _) => {
                    v.initialize = Some(Initialize::Done { sysid: *sysid })
                }
                (Val::History(h), _) => v.history = h.clone(),
                (Val::Rollback(m), _) => v.rollback = Some(m.clone()),
                (Val::Sync(k), _) => v.sync = Some(Ok(k.clone())),
                (Val::Failover(r), _) => {
                    v.failover = Some(FailoverRequest {
                        mod_revision: kv.mod_rev,
                        ..r.clone()
                    })
                }
                (Val::Release(m), _) => {
                    v.release = Some(Ok(m.clone()));
                    v.release_revision = kv.mod_rev;
                }
                (Val::Acquired(a, m), _) => {
                    // The placeholder marker a record carries when no marker was
                    // read (epoch 0) is no marker (`handover::parse_release_key`).
                    v.release = m.clone().filter(|m| m.epoch != 0).map(Ok);
                    v.release_acquired = Some(a.clone());
                    v.release_revision = kv.mod_rev;
                }
                _ => {}
            }
        }
        v
    }
}

fn marker(by: &str, seen: &RollbackSeen) -> RollbackMarker {
    RollbackMarker {
        key: "rollback".into(),
        seen_revision: seen.seen_revision,
        found_revision: seen.found_revision,
        by: by.to_string(),
        at: String::new(),
        reason: seen.reason.clone(),
        parse_error: None,
    }
}
