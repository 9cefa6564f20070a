//! The replica's view of the leader's lease and of the key's absence.
//!
//! Owns: `E_max` and the last poll (DESIGN §1 step 4), the holder's published
//! watchdog, TTL and position, the newest leadership the scope watch reported
//! ([`Watched`]), and the [`Vacancy`] record: when the key vanished, whether that
//! was early, and whether the old lease is confirmed gone.
//!
//! Must never: plan actions (it only records facts the candidacy judges), judge a
//! DELETE on time without a fresh poll of the very leadership it ended, or on time
//! across a gap in the watch that no read closes (S3), or let a later leadership's
//! vacancy stand in for an early one (finding R1: the delay covers every leadership
//! since the last read that showed a tracked key).

use std::time::Duration;

use super::model::*;
use super::time::Instant;
use super::ttl_seen::sane_ttl;
use super::{Core, State};

/// What a replica knows about the current or last leader's lease.
#[derive(Clone, Debug, Default)]
pub(super) struct LeaseTrack {
    pub(super) holder: Option<String>,
    pub(super) lease: Option<LeaseId>,
    pub(super) epoch: Option<Epoch>,
    /// Largest lower bound on the lease's expiry seen (`E_max`).
    pub(super) e_max: Option<Instant>,
    /// Send instant of the last successful poll.
    pub(super) last_poll: Option<Instant>,
    /// The holder's published watchdog timeout.
    pub(super) holder_watchdog: Option<u32>,
    /// The smallest `L_w + R` the holder published in this leadership
    /// (`poll_window`; review L2, `window`).
    pub(super) holder_window: Option<Duration>,
    /// The TTL the holder's lease was granted with (`grantedTTL` from a poll, or the
    /// holder's published `leader_ttl`).
    pub(super) holder_ttl: Option<u32>,
    /// The holder's last published WAL position.
    pub(super) holder_xlog: Lsn,
    /// Revision of the newest read that showed this key (same lease, same create
    /// revision): the key stood unchanged from `epoch` to here, so a watch opened
    /// at or before the revision after it missed nothing of what followed.
    pub(super) seen_through: i64,
    /// A read showed the holder's member key as a primary under this key's epoch
    /// ([`promoted_under`]): it promoted after its own promote delay (S3), so any
    /// early-expired leader before it has fenced or been reset by now (review F2).
    pub(super) holder_promoted: bool,
    /// The last polls of this lease, each with `e_max` and `last_poll` as they were
    /// before it: a DELETE is judged on the polls sent before it ([`Self::judged_at`]).
    pub(super) recent: RecentPolls,
}

/// How many of the last polls [`LeaseTrack`] keeps: polls the shell sent after a
/// DELETE and before the read that shows the key gone (a loop or two). Fixed, so
/// the track allocates nothing.
const RECENT_POLLS: usize = 4;

/// One counted poll of the tracked lease and the track's state before it.
#[derive(Clone, Copy, Debug)]
pub(super) struct RecentPoll {
    sent_at: Instant,
    ttl: i64,
    e_before: Option<Instant>,
    poll_before: Option<Instant>,
}

/// The last [`RECENT_POLLS`] counted polls, oldest first once full (a ring).
#[derive(Clone, Debug, Default)]
pub(super) struct RecentPolls {
    polls: [Option<RecentPoll>; RECENT_POLLS],
    next: usize,
}

impl RecentPolls {
    fn push(&mut self, p: RecentPoll) {
        self.polls[self.next] = Some(p);
        self.next = (self.next + 1) % RECENT_POLLS;
    }

    /// Oldest first.
    fn iter(&self) -> impl Iterator<Item = &RecentPoll> {
        (0..RECENT_POLLS).filter_map(move |i| self.polls[(self.next + i) % RECENT_POLLS].as_ref())
    }
}

impl LeaseTrack {
    /// A read of the holder's member key: its `poll_window`, kept as the smallest
    /// valid one seen in this leadership (review of c776472, M1). A garbled or
    /// missing value (another writer) never erases a good one, and a larger one
    /// never replaces a smaller: a replica's judgement can only get stricter, the
    /// cost at most a promote delay after a widening.
    pub(super) fn note_holder_window(&mut self, published: Option<Duration>) {
        if let Some(w) = published {
            self.holder_window = Some(self.holder_window.map_or(w, |h| h.min(w)));
        }
    }

    /// `(E_max, last poll)` for judging a DELETE received at `at` (DESIGN §1 step 4:
    /// early if before `E_max`, or if the last poll is older than `L_w + R`).
    ///
    /// A poll the shell sent after `at` (before the read that shows the key gone)
    /// asked about a lease whose key was already deleted. An answer of TTL >= 1
    /// shows the lease outliving the DELETE: it counts, and makes the DELETE early
    /// (`sent_at + ttl > at`). An answer of 0 or less comes only when the key went
    /// apart from its lease (an expiry's revoke takes both, and the next poll
    /// answers "not found"): an `etcdctl del`, here while the lease's revoke was in
    /// flight (simulation seed 552750413). Counted, its bound `sent_at + 0` lay
    /// after `at` by construction and made the DELETE early: the winner waited
    /// `ttl + R` after a lease that had expired. So those are left out, and the
    /// DELETE is judged on `E_max` and the last poll from before it.
    ///
    /// Why that is safe (review of the change): etcd computed that answer at some
    /// `c > at` and found the lease's expiry before `c + 1 s` (an etcd leader
    /// change only moves it later), so the holder's last counted renewal was sent
    /// at or before `c + 1 s - ttl`; with a watchdog S6(e) puts its fence deadline
    /// before `c - (L_w + R)`, and the core acts on the answer only after `c`.
    /// Without a watchdog the fence deadline `unwatched_deadline` (core::lease) gives
    /// the same (docs/design.md "Take over"). The judged state is also one the core reached
    /// before: when the poll after the DELETE answers "not found" or times out, it
    /// judges on the same values.
    pub(super) fn judged_at(&self, at: Instant) -> (Option<Instant>, Option<Instant>) {
        let now = (self.e_max, self.last_poll);
        let mut after = self.recent.iter().filter(|p| p.sent_at > at).peekable();
        let Some(first) = after.peek().copied() else {
            return now;
        };
        if after.any(|p| p.ttl >= 1) || first.poll_before.is_none() {
            return now;
        }
        // INVARIANT (S3): only answers of TTL <= 0 sent after `at` are left out;
        // the state before the first of them is the one every poll before `at`
        // built. (If the ring dropped that first one, `first.e_before` still
        // counts the polls between: later, so only more often early.)
        (first.e_before, first.poll_before)
    }
}

/// The newest leadership (a `leader` PUT with a new create revision) the scope
/// watch reported, whether or not a read ever showed it, and its DELETE if seen.
#[derive(Clone, Debug)]
pub(super) struct Watched {
    pub(super) key: LeaderKey,
    /// When the shell received the first DELETE after it, and that DELETE's revision.
    /// Leaderships of one key follow each other, so it is also the latest DELETE of
    /// every leadership the watch reported: the later, the longer the delay counted
    /// from it.
    pub(super) deleted: Option<(Instant, i64)>,
    /// The create revision of the leadership the watch reported before `key` (0:
    /// none). A read that last showed a key older than it missed more than one
    /// leadership, and only the newest's watchdog and TTL can be read (finding R1).
    pub(super) prev_epoch: Epoch,
}

/// The key was found absent after we knew a leader (or never knew one).
#[derive(Clone, Debug)]
pub(super) struct Vacancy {
    /// When we first learned of the absence.
    pub(super) at: Instant,
    /// Cluster revision of the first read that showed it absent: member entries
    /// written after it carry fresh positions (DESIGN §3a).
    pub(super) seen_revision: i64,
    /// The lease the previous holder had, if known (must be confirmed gone).
    pub(super) old_lease: Option<LeaseId>,
    pub(super) old_holder: Option<String>,
    /// The expiry came early (or we cannot tell): promotion waits.
    pub(super) early: bool,
    pub(super) old_watchdog: Option<u32>,
    /// The granted TTL of the old lease, if known.
    pub(super) old_ttl: Option<u32>,
    pub(super) old_xlog: Lsn,
    /// When this node saw the old lease confirmed gone (TTL -1); `None` while it
    /// is not ([`Vacancy::lease_gone`]). No node may acquire before its own such
    /// moment, so a head start for a requested candidate counts from here, not
    /// from `at` (review of f8e4c4c: a lease that outlived the DELETE used up the
    /// head start before anyone could take the key, and a switchover went to
    /// another node).
    pub(super) gone_at: Option<Instant>,
    /// Newest leadership epoch a member published when this vacancy was judged.
    pub(super) seen_epoch: Epoch,
    /// The epoch of the key whose absence opened this vacancy, if known (a release
    /// marker proves something only for it).
    pub(super) old_epoch: Option<Epoch>,
    /// Revision of the newest read that showed the key absent: a gap in the watch
    /// since it may hide a leadership this node never saw.
    pub(super) absent_through: i64,
    /// The newest leadership epoch this judgement accounts for: a PUT the watch
    /// reports with a newer one (before the read, even if it arrives late) is a
    /// leadership it missed.
    pub(super) judged: Epoch,
    /// Leases of other old holders that must be seen gone too, polled one after the
    /// other once `old_lease` is (review F3: a leadership a member publishes after
    /// a gap in the watch; and the earlier one when two vacancies merge).
    pub(super) also_gone: Vec<LeaseId>,
    /// The `release` key's mod revision this judgement accounts for (0: none): a
    /// value there that names no epoch (garbage) is weighed once, not at each read.
    pub(super) release_seen: i64,
    /// A read while this vacancy was open showed this member running an agent
    /// older than the acquisition record (`mixed`, finding L1): untimeable since,
    /// and the win's delay counts from the win.
    pub(super) older_agent: Option<String>,
}

/// A missed leadership's vacancy `m` found after `v` (open, or just built for the
/// key our last read showed): if `v` was early too, the delay must cover both old
/// leaders, so it counts from the later DELETE and, unless both are known alike,
/// from the horizon bound (no `W`; S6(b) makes `ttl + R` the longer) with the
/// largest TTL seen. A release marker of `m`'s epoch proves that holder's clean
/// exit, never that `v`'s old leader has fenced (finding R1).
fn after_open(v: &Vacancy, mut m: Vacancy) -> Vacancy {
    if v.early {
        m.at = m.at.max(v.at);
        if m.old_watchdog != v.old_watchdog {
            m.old_watchdog = None;
        }
        if m.old_ttl != v.old_ttl {
            m.old_ttl = None;
        }
        m.old_epoch = None;
    }
    // DESIGN §1 step 4's "previous holder's lease gone", for both: `v`'s lease, if
    // not seen gone yet, is polled after `m`'s.
    if !v.lease_gone() {
        v.old_lease.into_iter().for_each(|l| owe_lease(&mut m, l));
    }
    v.also_gone.iter().for_each(|l| owe_lease(&mut m, *l));
    m.release_seen = m.release_seen.max(v.release_seen);
    if m.older_agent.is_none() {
        m.older_agent.clone_from(&v.older_agent);
    }
    // INVARIANT (S3, DESIGN §1 step 4): the delay `won` takes from `m` covers `v`'s
    // old leader as well as `m`'s: a later `at`, a `W` only if both had that same
    // one, else `ttl + R`, and no marker skips it.
    m
}

impl Vacancy {
    /// The old lease was confirmed gone (TTL -1).
    pub(super) fn lease_gone(&self) -> bool {
        self.gone_at.is_some()
    }
}

/// `lease` must be seen gone (TTL -1) before this vacancy lets anyone acquire: the
/// one polled next if the vacancy's own is gone or unknown, else after it.
fn owe_lease(v: &mut Vacancy, lease: LeaseId) {
    if v.old_lease == Some(lease) || v.also_gone.contains(&lease) {
        return;
    }
    if v.lease_gone() || v.old_lease.is_none() {
        v.old_lease = Some(lease);
        v.gone_at = None;
    } else {
        v.also_gone.push(lease);
    }
}

/// A vacancy after a gap in the watch (review F3): a whole leadership may lie in
/// the gap, its DELETE after the one seen and before this read, so the vacancy is
/// early from `now` and nothing of the tracked holder sizes its delay: no `W`, no
/// TTL (`won` takes the largest seen: `ttl + R`, S6(b) makes it the longer), no
/// release marker. Every leader lease a member publishes for a leadership newer
/// than the vacancy's judgement must be seen gone as well.
pub(super) fn untimeable(mut v: Vacancy, now: Instant, view: &ClusterView, me: &str) -> Vacancy {
    v.at = now;
    v.early = true;
    v.old_watchdog = None;
    v.old_ttl = None;
    v.old_epoch = None;
    for m in view.members.iter().filter(|m| m.name != me) {
        if let (Some(e), Some(l)) = (m.info.epoch, m.info.leader_lease)
            && e > v.judged
        {
            owe_lease(&mut v, l);
        }
    }
    // INVARIANT (S3, DESIGN §1 step 4): after a gap the delay is the horizon bound
    // of the largest TTL known, counted from a read later than any DELETE in it.
    v
}

/// Whether member `m`, read now, shows it ran as a primary under leadership
/// `epoch`: the leader publishes `role` from its PostgreSQL and `epoch` from its
/// leadership, so only a promotion (or a start as primary) under that key, after
/// its promote delay (S3), makes both true. A value that cannot be parsed proves
/// nothing (review F2).
pub(super) fn promoted_under(m: &Member, epoch: Epoch) -> bool {
    m.info.parse_error.is_none() && m.info.role == "primary" && m.info.epoch == Some(epoch)
}

/// Whether the watch, as of this read, had reported every change after revision
/// `seen` (DESIGN §1 step 4: else a whole leadership may lie in the gap).
fn watch_covers(obs: &Observation, seen: i64) -> bool {
    obs.watch_from
        .is_some_and(|from| from <= seen.saturating_add(1))
}

impl Core {
    /// The cluster revision of the first read that showed the open vacancy (none
    /// open: `None`). Member keys written after it carry fresh positions (DESIGN
    /// §3a): the shell publishes this node's once past it, and wakes on a rival's.
    pub fn vacancy_revision(&self) -> Option<i64> {
        if matches!(self.state, State::Leader(_)) {
            return None;
        }
        self.vacancy.as_ref().map(|v| v.seen_revision)
    }

    /// The leader lease a replica should poll with `LeaseTimeToLive` this iteration.
    pub fn lease_to_poll(&self) -> Option<LeaseId> {
        if matches!(self.state, State::Leader(_)) {
            return None;
        }
        if let Some(v) = &self.vacancy {
            if !v.lease_gone() {
                return v.old_lease;
            }
            return None;
        }
        self.track.lease
    }

    /// Replica-side lease tracking: `E_max`, the holder, and the vacancy record.
    pub(super) fn track_leader(&mut self, now: Instant, obs: &Observation) {
        if let Some(poll) = &obs.lease_poll
            && self.track.lease == Some(poll.lease)
            && let Some(ttl) = poll.ttl
        {
            // A lower bound on the expiry: etcd truncates the TTL to whole
            // seconds and cannot expire the lease before poll + ttl. An answer of
            // 0 or less (expired, revoke in flight) is still a successful poll
            // (DESIGN §1 step 4): it keeps the prediction fresh. Counting only
            // TTL >= 1 would leave the last poll >= 1 s before expiry, older than
            // L_w + R with short loops, and make every expiry look early.
            let e = poll
                .sent_at
                .add(Duration::from_secs(ttl.max(0).unsigned_abs()));
            self.track.recent.push(RecentPoll {
                sent_at: poll.sent_at,
                ttl,
                e_before: self.track.e_max,
                poll_before: self.track.last_poll,
            });
            self.track.e_max = Some(self.track.e_max.map_or(e, |m| m.max(e)));
            self.track.last_poll = Some(poll.sent_at);
        }
        // The old lease's own TTL (issue 8 finding 2): from `grantedTTL`, whichever
        // lease was polled, and from every leader's published `leader_ttl`.
        // etcd's own `grantedTTL` is not capped here (review of the caps): it is
        // the lease's real TTL, not another writer's value, and a lease granted
        // above `MAX_TTL` before an upgrade (or by hand) really holds its holder
        // that long. Only what is published and remembered across a restart
        // (`leader_ttl_seen`) stays capped (ttl_seen.rs).
        if let Some(poll) = &obs.lease_poll
            && let Some(g) = poll.granted_ttl.and_then(|g| u32::try_from(g).ok())
        {
            self.max_leader_ttl_seen = self.max_leader_ttl_seen.max(g);
            if self.track.lease == Some(poll.lease) {
                self.track.holder_ttl = Some(self.track.holder_ttl.map_or(g, |t| t.max(g)));
            }
            if let Some(v) = &mut self.vacancy
                && v.old_lease == Some(poll.lease)
            {
                v.old_ttl = Some(v.old_ttl.map_or(g, |t| t.max(g)));
            }
        }
        if let Ok(view) = &obs.cluster {
            // Leaders' own granted TTLs. Not members' `leader_ttl_seen` (fresh-eyes
            // review of seed 253898, R1): this maximum never decays, so a value read
            // from others would be kept for the run; `ttl_floor` reads those afresh
            // at each use, while they are published.
            for t in view.members.iter().filter_map(|m| m.info.leader_ttl) {
                if let Some(t) = sane_ttl(t.into()) {
                    self.max_leader_ttl_seen = self.max_leader_ttl_seen.max(t);
                }
            }
        }
        self.track_vacancy(now, obs);
        // Finding L1: an older agent in the view, `release` may not show its
        // acquisitions (`mixed`).
        self.note_older_agents(now, obs);
        // After the vacancy is known: this iteration's poll may already show the old
        // lease gone (the poll runs after the read that showed the key absent).
        if let (Some(poll), Some(v)) = (&obs.lease_poll, &mut self.vacancy)
            && poll.ttl.is_none()
        {
            v.also_gone.retain(|l| *l != poll.lease);
            if v.old_lease == Some(poll.lease) {
                // INVARIANT (DESIGN §1 step 4): `lease_gone` only once every lease
                // the vacancy owes was seen gone.
                match v.also_gone.pop() {
                    Some(next) => v.old_lease = Some(next),
                    None => {
                        // The first poll that showed it (later polls show it too).
                        v.gone_at.get_or_insert(now);
                    }
                }
            }
        }
        self.note_ttls_seen(now, obs);
    }

    /// Fold the watch's `leader` changes into [`Watched`], read or not (a failed
    /// read must not lose them). Our own leaderships are known without it.
    fn note_leader_changes(&mut self, obs: &Observation) {
        for c in &obs.leader_changes {
            match &c.put {
                Some(k) if k.name != self.cfg.name => {
                    if self.watched.as_ref().is_none_or(|w| k.epoch > w.key.epoch) {
                        self.watched = Some(Watched {
                            key: k.clone(),
                            deleted: None,
                            prev_epoch: self.watched.as_ref().map_or(0, |w| w.key.epoch),
                        });
                    }
                }
                Some(_) => {}
                None => {
                    if let Some(w) = &mut self.watched
                        && w.deleted.is_none()
                        && c.revision > w.key.epoch
                    {
                        w.deleted = Some((c.at, c.revision));
                    }
                }
            }
        }
    }

    /// A vacancy left by a leadership this node never read (created after its last
    /// read of the key, `after`), as the watch reported it: untimeable, since no
    /// poll of its lease ever predicted its expiry (DESIGN §1 step 4, S3). Its lease
    /// must be seen gone like any old lease, and only a release marker of its own
    /// epoch proves a clean hand-over.
    fn missed_vacancy(&self, now: Instant, view: &ClusterView, after: i64) -> Option<Vacancy> {
        let w = self
            .watched
            .as_ref()
            .filter(|w| w.key.epoch > after && w.key.epoch <= view.revision)?;
        // More than one leadership since that read: the older ones' `W`, TTL and
        // markers are unknown (their member keys may be gone), so the delay is the
        // horizon bound with the largest TTL seen, and no marker proves it.
        let several = w.prev_epoch > after;
        let m = view
            .member(&w.key.name)
            .filter(|m| m.info.leader_lease == Some(w.key.lease));
        let seen_epoch = view
            .members
            .iter()
            .filter_map(|m| m.info.epoch)
            .chain([w.key.epoch])
            .max()
            .unwrap_or(w.key.epoch);
        Some(Vacancy {
            // Not seen deleted (a DELETE in flight, or lost): now is later than it.
            at: w.deleted.map_or(now, |(d, _)| d.min(now)),
            seen_revision: w
                .deleted
                .map(|(_, r)| r)
                .filter(|r| *r <= view.revision)
                .unwrap_or(view.revision),
            old_lease: Some(w.key.lease),
            old_holder: Some(w.key.name.clone()),
            early: true,
            old_watchdog: m.and_then(|m| m.info.watchdog_timeout).filter(|_| !several),
            old_ttl: m.and_then(|m| m.info.leader_ttl).filter(|_| !several),
            old_xlog: self
                .track
                .holder_xlog
                .max(m.map_or(0, |m| m.info.xlog_location)),
            gone_at: None,
            seen_epoch,
            old_epoch: Some(w.key.epoch).filter(|e| *e >= seen_epoch && !several),
            absent_through: view.revision,
            // INVARIANT (S3): this delay covers every leadership the watch reported
            // after `after`: the latest DELETE, and `W` or a marker only for one.
            judged: w.key.epoch,
            also_gone: Vec::new(),
            release_seen: 0,
            older_agent: None,
        })
    }

    /// A leadership the `release` key shows and vacancy `v` does not account for
    /// (docs/design.md "the acquisition record"): an acquisition record's epoch is
    /// the key's mod revision (written in that acquire txn); an untaken hand-over
    /// marker's is its own `epoch` (it is written later, with that leadership's
    /// DELETE, under its guard: the leader's own marker never counts as a newer
    /// leadership); a taken marker without a record (an older agent's acquisition)
    /// is its mod revision; a value that parses as neither is an unknown leadership
    /// at or before its mod revision. One newer than `v.judged` was missed by every
    /// read and by the watch so far: the vacancy becomes untimeable from this read
    /// (its DELETE came before it; more than one may have come and gone, so no `W`,
    /// TTL or marker sizes or skips the delay), and the record's lease is owed gone.
    /// Returns the merged vacancy and the record's TTL (if sane), which `won`'s
    /// horizon bound must take.
    fn missed_in_release(
        &self,
        now: Instant,
        view: &ClusterView,
        v: &Vacancy,
    ) -> Option<(Vacancy, Option<u32>)> {
        let rev = view.release_revision;
        if rev <= v.release_seen {
            return None;
        }
        let shown = match (&view.release_acquired, &view.release) {
            (Some(_), _) => Some(rev),
            (None, Some(Ok(m))) if m.taken_by.is_none() => Some(m.epoch),
            (None, Some(Ok(_))) => Some(rev),
            (None, Some(Err(_))) => None,
            (None, None) => return None,
        };
        if shown.unwrap_or(rev) <= v.judged {
            return None;
        }
        let mut m = untimeable(v.clone(), now, view, &self.cfg.name);
        // DESIGN §3a: positions published before this read may predate the missed
        // leader's DELETE.
        m.seen_revision = m.seen_revision.max(view.revision);
        m.absent_through = m.absent_through.max(view.revision);
        m.release_seen = rev;
        m.judged = m.judged.max(shown.unwrap_or(0));
        let mut ttl = None;
        if let Some(a) = &view.release_acquired {
            owe_lease(&mut m, a.lease);
            m.old_holder = Some(a.by.clone());
            // `maximum_lag_on_failover` is measured against the newest leader's
            // position: the missed holder's, if its member key (under that lease)
            // published one (review of the record, F1).
            if let Some(h) = view
                .member(&a.by)
                .filter(|h| h.info.leader_lease == Some(a.lease))
            {
                m.old_xlog = m.old_xlog.max(h.info.xlog_location);
            }
            // Its holder's horizon bound: `won` takes the largest leader TTL seen.
            ttl = sane_ttl(a.ttl);
        }
        // INVARIANT (S3, DESIGN §1 step 4): every acquisition writes its record in
        // its txn and compares the one its candidate read, so what a win was
        // decided on shows the last acquisition before it, and the delay `won`
        // takes covers it.
        Some((m, ttl))
    }

    pub(super) fn track_vacancy(&mut self, now: Instant, obs: &Observation) {
        let me = self.cfg.name.clone();
        self.note_leader_changes(obs);
        let Ok(view) = &obs.cluster else { return };
        // Review L2: the holder's `L_w + R` as its member key publishes it now,
        // also in the read that shows its key gone (a value published before the
        // DELETE is in every read after it).
        if let Some(m) = self.track.holder.as_deref().and_then(|h| view.member(h)) {
            self.track.note_holder_window(m.info.poll_window);
        }
        match &view.leader {
            Some(k) => {
                // A DELETE the watch reported after the previous step, of a key our
                // reads showed before too, is this key's: keep its instant for the
                // vacancy the next read shows (else the DELETE is dated a loop late,
                // the last poll looks stale and the expiry early: seed 11713).
                let known = self.track.lease == Some(k.lease);
                self.late_delete = match (obs.leader_deleted_at, self.last_step) {
                    (Some(d), Some(prev)) if known && d > prev => {
                        Some((d, obs.leader_deleted_revision))
                    }
                    _ => None,
                };
                if k.name != me || !matches!(self.state, State::Leader(_)) {
                    if self.track.lease != Some(k.lease) {
                        self.track = LeaseTrack {
                            holder: Some(k.name.clone()),
                            lease: Some(k.lease),
                            epoch: Some(k.epoch),
                            ..LeaseTrack::default()
                        };
                    }
                    // INVARIANT: the key stood with create revision `track.epoch`
                    // from then to this read (one incarnation: a re-created key
                    // has a new create revision).
                    if self.track.epoch == Some(k.epoch) {
                        self.track.seen_through = view.revision;
                    }
                    if let Some(m) = view.member(&k.name) {
                        if self.track.epoch == Some(k.epoch) && promoted_under(m, k.epoch) {
                            self.track.holder_promoted = true;
                        }
                        self.track.holder_watchdog = m.info.watchdog_timeout;
                        self.track.note_holder_window(m.info.poll_window);
                        if m.info.leader_lease == Some(k.lease)
                            && let Some(t) = m.info.leader_ttl.and_then(|t| sane_ttl(t.into()))
                        {
                            self.track.holder_ttl =
                                Some(self.track.holder_ttl.map_or(t, |h| h.max(t)));
                        }
                        self.track.holder_xlog = self.track.holder_xlog.max(m.info.xlog_location);
                    }
                }
                // The read that follows our own winning acquire shows our new key:
                // the vacancy it ends must survive until `won` has taken its promote
                // delay from it (DESIGN §1 step 4).
                let won_now = k.name == me
                    && matches!(
                        &obs.acquire,
                        Some(AcquireOutcome::Won { lease, .. }) if *lease == k.lease
                    );
                if !won_now {
                    self.vacancy = None;
                } else if let Some(v) = &self.vacancy {
                    if let Some(missed) = self
                        .missed_vacancy(now, view, v.judged)
                        .filter(|m| m.judged < k.epoch)
                    {
                        // The watch reported, only now, a leadership before our win
                        // that this vacancy's judgement missed: `won` takes the delay
                        // from it.
                        self.vacancy = Some(after_open(v, missed));
                    } else if !watch_covers(obs, v.absent_through) {
                        // Review F4: a gap in the watch between the vacancy's last
                        // read and this one, which shows our win, may hide a whole
                        // leadership before it (S3): untimeable, from now.
                        self.vacancy = Some(untimeable(v.clone(), now, view, &me));
                    }
                }
            }
            None => {
                // A member publishing a newer leadership epoch held the key after this
                // vacancy began, unseen by us (it came and went between two reads): its
                // DELETE is a new vacancy, judged early (DESIGN §1 step 4; seed 16393:
                // else we promote at once beside it).
                let newest = view
                    .members
                    .iter()
                    .filter(|m| m.name != me)
                    // A leadership's epoch is a create revision no later than this
                    // read: a larger one is garbage, and would blind the missed-
                    // leadership checks (`judged`) for the rest of the vacancy
                    // (review of the record, L4).
                    .filter_map(|m| m.info.epoch.filter(|e| *e <= view.revision).map(|e| (e, m)))
                    .max_by_key(|(e, _)| *e);
                if let (Some(v), Some((e, m))) = (&self.vacancy, newest)
                    && e > v.seen_epoch
                    && Some(e) > self.track.epoch
                {
                    // Merged with the open vacancy, never in its place (finding R1):
                    // if that one was early its old leader may not have fenced yet.
                    let newer = Vacancy {
                        at: now,
                        seen_revision: view.revision,
                        old_lease: m.info.leader_lease,
                        old_holder: Some(m.name.clone()),
                        early: true,
                        // Its `W` and TTL size the delay only if it ran as a primary
                        // under `e` (review F2: else an early leader before it may
                        // not have fenced yet).
                        old_watchdog: m.info.watchdog_timeout.filter(|_| promoted_under(m, e)),
                        old_ttl: m.info.leader_ttl.filter(|_| promoted_under(m, e)),
                        old_xlog: v.old_xlog.max(m.info.xlog_location),
                        gone_at: m.info.leader_lease.is_none().then_some(now),
                        seen_epoch: e,
                        old_epoch: Some(e),
                        absent_through: view.revision,
                        judged: e.max(v.judged),
                        also_gone: Vec::new(),
                        release_seen: 0,
                        older_agent: None,
                    };
                    self.vacancy = Some(after_open(v, newer));
                }
                // The same, told by the watch (DESIGN §1 step 4, S3): a leadership
                // created after our last read of the vacancy came and went unseen,
                // perhaps never published. Or the watch had a gap since that read:
                // one may have, so the vacancy is untimeable from now on (its DELETE
                // came before this read; `now` is later).
                if let Some(v) = &self.vacancy {
                    if let Some(missed) = self.missed_vacancy(now, view, v.judged) {
                        self.vacancy = Some(after_open(v, missed));
                    } else if !watch_covers(obs, v.absent_through) {
                        // Review F3: not with the tracked holder's `W` or TTL.
                        self.vacancy = Some(Vacancy {
                            seen_revision: view.revision,
                            absent_through: view.revision,
                            ..untimeable(v.clone(), now, view, &me)
                        });
                    }
                }
                if let Some(v) = &mut self.vacancy {
                    v.absent_through = v.absent_through.max(view.revision);
                }
                // Not only the key we polled (DESIGN §1 step 4, S3): the watch
                // reported a leadership after it that no read showed (shorter than a
                // loop). The tracked key's own vacancy is still judged below, then
                // merged with it (finding R1: its early DELETE is owed a delay too).
                let missed = if self.vacancy.is_none() {
                    self.missed_vacancy(now, view, self.track.epoch.unwrap_or(0))
                } else {
                    None
                };
                if self.vacancy.is_none() {
                    let late = self.late_delete.take();
                    let (at, deleted_revision) = match obs.leader_deleted_at {
                        Some(d) => (Some(d), obs.leader_deleted_revision),
                        None => late.map_or((None, None), |(d, r)| (Some(d), r)),
                    };
                    let at = at.map_or(now, |d| d.min(now));
                    // DESIGN §3a: positions written after the DELETE are fresh. Its
                    // revision (the watch's, the same for every node) when it is the
                    // DELETE of the key we tracked, else this read's (later: stricter).
                    // Judged against each node's own first read, a rival that
                    // published between the two reads never counted (issue 13 item 4,
                    // seen in bench/failover_dist: a 1.2 s election).
                    let seen_revision = deleted_revision
                        .filter(|r| *r <= view.revision && self.track.epoch.is_some_and(|e| *r > e))
                        .unwrap_or(view.revision);
                    // Review L2: no more than the holder (and our earlier value)
                    // allows, while a change of it reaches the members.
                    let l_w_r = self.poll_window_tightest(now);
                    // The watch had a gap since the last read that showed the key we
                    // polled: a whole leadership may lie in it, its DELETE after the
                    // one we saw and before this read (S3: untimeable, from now).
                    let gap =
                        self.track.lease.is_some() && !watch_covers(obs, self.track.seen_through);
                    let at = if gap { now } else { at };
                    // DESIGN §1 step 4: early if before E_max, or if our last poll is too
                    // old to predict anything, or if we never knew the lease at all.
                    let (e_max, last_poll) = self.track.judged_at(at);
                    let early = gap
                        || match (self.track.lease, e_max, last_poll) {
                            (Some(_), Some(e), Some(lp)) => at < e || at.since(lp) > l_w_r,
                            _ => !self.bootstrapped_here,
                        };
                    // A clean stop or a switchover is not judged here: only the release
                    // marker (epoch-guarded, with the shutdown checkpoint's LSN) lets the
                    // winner skip the delay, checked when it plans `Acquire` and bound
                    // to that txn (`release_proves`, `acquire_proof`; DESIGN §1 step
                    // 4). The member key's `released` proves nothing.
                    // A holder we never watched may have published its lease.
                    let old_lease = self.track.lease.or_else(|| {
                        view.members
                            .iter()
                            .filter(|m| m.info.role == "primary")
                            .find_map(|m| m.info.leader_lease)
                    });
                    let seen_epoch = view
                        .members
                        .iter()
                        .filter_map(|m| m.info.epoch)
                        .chain(self.track.epoch)
                        .max()
                        .unwrap_or(0);
                    // A member published a newer epoch than the last key we saw: a
                    // whole leadership came and went unseen, so the vacated epoch is not
                    // known, and no release marker can prove this DELETE (review F1).
                    let old_epoch = self.track.epoch.filter(|e| *e >= seen_epoch);
                    // Review F2: an early DELETE of a holder no read showed running as
                    // a primary under its epoch (in its own promote delay, or waiting
                    // to promote) may follow an early DELETE of the leader before it,
                    // which that holder's `W` and TTL say nothing about: the horizon
                    // bound of the largest TTL known (S6(b) makes it the longer), from
                    // this DELETE, which came after that one.
                    let proven = self.track.holder_promoted
                        || self.track.epoch.is_some_and(|e| {
                            self.track
                                .holder
                                .as_deref()
                                .and_then(|h| view.member(h))
                                .is_some_and(|m| promoted_under(m, e))
                        });
                    let sized = proven || !early;
                    let vacancy = Vacancy {
                        at,
                        seen_revision,
                        seen_epoch,
                        old_epoch,
                        old_lease,
                        old_holder: self.track.holder.clone(),
                        early,
                        old_watchdog: self.track.holder_watchdog.filter(|_| sized),
                        old_ttl: self.track.holder_ttl.filter(|_| sized),
                        old_xlog: self.track.holder_xlog,
                        // This observation's poll may already have answered TTL -1
                        // for that lease (polled before the read showed the key gone).
                        gone_at: (old_lease.is_none()
                            || obs
                                .lease_poll
                                .as_ref()
                                .is_some_and(|lp| Some(lp.lease) == old_lease && lp.ttl.is_none()))
                        .then_some(now),
                        absent_through: view.revision,
                        judged: self.track.epoch.unwrap_or(0),
                        also_gone: Vec::new(),
                        release_seen: 0,
                        older_agent: None,
                    };
                    // Review F3: after a gap, or when a member publishes a leadership
                    // newer than the key we tracked (one came and went unseen), the
                    // tracked holder's `W`, TTL and marker size nothing.
                    let unseen = view.members.iter().any(|m| {
                        m.name != me
                            && m.info.leader_lease.is_some()
                            && m.info
                                .epoch
                                .zip(self.track.epoch)
                                .is_some_and(|(e, t)| e > t)
                    });
                    self.vacancy = Some(if gap || unseen {
                        untimeable(vacancy, now, view, &me)
                    } else {
                        vacancy
                    });
                }
                if let (Some(m), Some(v)) = (missed, &self.vacancy) {
                    // INVARIANT (S3): the vacancy's delay covers every leadership
                    // since the last read that showed a tracked key: that key's own
                    // (judged above) and the ones the watch reported after it.
                    self.vacancy = Some(after_open(v, m));
                }
                // The same, told by the acquisition record in `release` (S3): a
                // leadership the watch has not reported yet (its PUT not sent when
                // the agent's drain after this read ended) still shows there.
                if let Some((m, ttl)) = self
                    .vacancy
                    .as_ref()
                    .and_then(|v| self.missed_in_release(now, view, v))
                {
                    self.vacancy = Some(m);
                    if let Some(t) = ttl {
                        self.max_leader_ttl_seen = self.max_leader_ttl_seen.max(t);
                    }
                }
            }
        }
    }
}
