//! Synchronous replication (DESIGN §3a): who may take over, and the running
//! primary's `sync` key and `synchronous_standby_names`.
//!
//! Owns: the `sync` key's rule for candidates, the names a leader needs before its
//! PostgreSQL accepts a write, the one-step-per-iteration order of listing and
//! unlisting a synchronous standby, and how long the names have held.
//!
//! Must never: list a standby in the `sync` key before the names name it and it
//! flushed past the writes acknowledged before, or change the names away from a
//! standby the key still lists.

use super::model::*;
use super::time::Instant;
use super::{Core, Planner, catchup};

/// `synchronous_standby_names` that makes every one of `standbys` (sorted, not
/// empty) synchronous: one quoted name alone, as before several were kept, and
/// `FIRST n (...)` with `n` the number of names for several, so that every commit
/// waits for each of them (never a subset: which subset acknowledged a commit is
/// not known afterwards). Quoted: member names may hold characters the list syntax
/// reserves.
pub fn sync_names_for(standbys: &[String]) -> String {
    let quote = |s: &String| format!("\"{}\"", s.replace('"', "\"\""));
    match standbys {
        [one] => quote(one),
        _ => format!(
            "FIRST {} ({})",
            standbys.len(),
            standbys.iter().map(quote).collect::<Vec<_>>().join(", ")
        ),
    }
}

/// The standbys a value of the forms [`sync_names_for`] writes names (anything
/// else names none). Used only to prefer a standby already named when picking one:
/// never to decide what the key may list.
fn names_in(names: &str) -> Vec<String> {
    let list = match names.strip_prefix("FIRST ") {
        Some(rest) => match rest.split_once(" (") {
            Some((n, l)) if n.bytes().all(|b| b.is_ascii_digit()) => match l.strip_suffix(')') {
                Some(l) => l,
                None => return Vec::new(),
            },
            _ => return Vec::new(),
        },
        None => names,
    };
    let mut out = Vec::new();
    let mut chars = list.chars().peekable();
    loop {
        if chars.next() != Some('"') {
            return Vec::new();
        }
        let mut name = String::new();
        loop {
            match chars.next() {
                Some('"') if chars.peek() == Some(&'"') => {
                    chars.next();
                    name.push('"');
                }
                Some('"') => break,
                Some(c) => name.push(c),
                None => return Vec::new(),
            }
        }
        out.push(name);
        match (chars.next(), chars.next()) {
            (None, _) => return out,
            (Some(','), Some(' ')) => {}
            _ => return Vec::new(),
        }
    }
}

impl Core {
    /// Synchronous mode (DESIGN §3a): only the leader that wrote the `sync` key or
    /// the standby it lists may take the leader key. `Err` says why `name` may not.
    /// No key at all: no leader ever listed a standby (a leader writes the key
    /// before its PostgreSQL accepts a write in synchronous mode), so asynchronous
    /// rules apply.
    pub(super) fn sync_allows(&self, view: &ClusterView, name: &str) -> Result<(), String> {
        if self.timing.synchronous == SyncMode::Off {
            return Ok(());
        }
        match &view.sync {
            None => Ok(()),
            Some(Err(e)) => Err(format!(
                "synchronous mode, and the sync key is unreadable ({e}): nobody may take over \
                 until a leader rewrites it"
            )),
            Some(Ok(k)) if k.allows(name) => Ok(()),
            Some(Ok(k)) if k.sync_standbys.is_empty() => Err(format!(
                "synchronous mode: the sync key allows only {}",
                k.leader
            )),
            Some(Ok(k)) => Err(format!(
                "synchronous mode: the sync key allows only {} and {}",
                k.leader,
                k.standbys_text()
            )),
        }
    }

    /// The standbys the `sync` key lists when it names this node as the leader. Any
    /// other key (missing, another leader's, garbled) is rewritten to name this node
    /// with no standby, and `Err` says so: nothing may go on until it is read back.
    pub(super) fn sync_key_for_me(
        &self,
        view: &ClusterView,
        epoch: Epoch,
        p: &mut Planner,
    ) -> Result<Vec<String>, String> {
        if let Some(listed) = self.listed_for_me(view) {
            return Ok(listed);
        }
        p.push(Action::WriteSync {
            epoch,
            leader: self.cfg.name.clone(),
            sync_standbys: Vec::new(),
        });
        p.again = true;
        Err(match &view.sync {
            Some(Err(e)) => format!("the sync key is unreadable ({e}); rewriting it"),
            _ => "writing the sync key that names me".into(),
        })
    }

    /// The standbys the `sync` key lists when it names this node as the leader
    /// (`None`: any other key, or none).
    fn listed_for_me(&self, view: &ClusterView) -> Option<Vec<String>> {
        match &view.sync {
            Some(Ok(k)) if k.leader == self.cfg.name => Some(k.sync_standbys.clone()),
            _ => None,
        }
    }

    /// `synchronous_standby_names` that names `standbys` (sorted; the listed ones
    /// and those about to be), or none.
    pub(super) fn sync_names_wanted(&self, standbys: &[String]) -> String {
        match (self.timing.synchronous, standbys.is_empty()) {
            (SyncMode::Off, _) | (SyncMode::On, true) => String::new(),
            (SyncMode::Strict, true) => "*".into(),
            (_, false) => sync_names_for(standbys),
        }
    }

    /// While a promote delay runs, on this leader's still-standby PostgreSQL: set
    /// the names its first write will need (the standbys the `sync` key lists if
    /// it names this node already, else none), so they have held for a loop when
    /// the delay ends. A standby's names let no write in. The key itself is
    /// written only at the delay's end (`sync_before_writes`): a winner that
    /// rewrote it and then died inside a delay as long as `ttl + R` would leave a
    /// key only it may take over under, where the old key still allows the old
    /// leader or its listed standbys. Synchronous mode off: nothing (the names are
    /// cleared after any leftover key is deleted, review L1).
    pub(super) fn sync_names_ahead(&self, obs: &Observation, p: &mut Planner) {
        if self.timing.synchronous == SyncMode::Off {
            return;
        }
        let Ok(view) = &obs.cluster else {
            return;
        };
        // A key another leader wrote is rewritten naming no standby at the end.
        let standbys = self.listed_for_me(view).unwrap_or_default();
        let want = self.sync_names_wanted(&standbys);
        if obs.pg.sync_names.as_deref() != Some(want.as_str()) {
            p.push(Action::SetSyncNames { names: want });
        }
    }

    /// Has `synchronous_standby_names` read `want` for at least a loop?
    pub(super) fn names_settled(&self, now: Instant, want: &str) -> bool {
        self.names_seen
            .as_ref()
            .is_some_and(|(n, since)| n == want && now.since(*since) >= self.timing.loop_wait)
    }

    /// Before this leadership's PostgreSQL may accept a write (a promotion, or a
    /// start as primary): in synchronous mode the `sync` key names this node as the
    /// leader (so no former leader or its standby can take over behind writes it
    /// acknowledges), and `synchronous_standby_names` is what that key allows: `*`
    /// in strict mode, empty otherwise (Patroni's order). `running`: PostgreSQL runs
    /// (the names must be seen in effect); else the value is set for the start.
    /// `Err` says what is awaited; the actions that advance it are pushed.
    pub(super) fn sync_before_writes(
        &mut self,
        now: Instant,
        obs: &Observation,
        epoch: Epoch,
        p: &mut Planner,
        running: bool,
    ) -> Result<(), String> {
        let standbys = if self.timing.synchronous == SyncMode::Off {
            // A key left from synchronous mode goes before the names are cleared
            // or a start without them, as in `manage_sync` (review L1): a key that
            // still listed standbys after commits stopped waiting for them would be
            // trusted if the mode came back on. An unreadable etcd leaves it to
            // `manage_sync`.
            if matches!(&obs.cluster, Ok(v) if v.sync.is_some()) {
                p.push(Action::DeleteSync { epoch });
                p.again = true;
                return Err("deleting the sync key (synchronous mode is off)".into());
            }
            Vec::new()
        } else {
            let Ok(view) = &obs.cluster else {
                return Err(
                    "synchronous mode: the sync key must name me first, etcd unreadable".into(),
                );
            };
            self.sync_key_for_me(view, epoch, p)
                .map_err(|why| format!("synchronous mode: {why}"))?
        };
        let want = self.sync_names_wanted(&standbys);
        if !running {
            p.push(Action::SetSyncNames { names: want });
            return Ok(());
        }
        if self.timing.synchronous == SyncMode::Off {
            // Only a stale non-empty value (from an earlier synchronous leadership)
            // would hold commits back; an unknown one is set again but not waited
            // for (a failed clear, review 2 finding 2; `manage_sync` retries it).
            match obs.pg.sync_names.as_deref() {
                Some("") => {}
                Some(_) => {
                    p.push(Action::SetSyncNames { names: want });
                    return Err(
                        "clearing synchronous_standby_names (synchronous mode is off)".into(),
                    );
                }
                None => p.push(Action::SetSyncNames { names: want }),
            }
            return Ok(());
        }
        if obs.pg.sync_names.as_deref() != Some(want.as_str()) {
            p.push(Action::SetSyncNames {
                names: want.clone(),
            });
            return Err(format!("setting synchronous_standby_names to {want:?}"));
        }
        if !self.names_settled(now, &want) {
            return Err(format!(
                "synchronous_standby_names {want:?} takes effect in every process"
            ));
        }
        Ok(())
    }

    /// The running primary's synchronous replication, one step per iteration in
    /// DESIGN §3a's order: a standby is listed in the `sync` key only after
    /// `synchronous_standby_names` names it, PostgreSQL reports it `sync` and it
    /// flushed the WAL written before the names took effect (`catchup`); it is
    /// unlisted (guarded write) before the names stop naming it. Up to
    /// `synchronous_node_count` standbys are kept (Patroni's name); the names
    /// always make every commit wait for each standby they name, so any listed
    /// standby holds every acknowledged commit. A failed write changes nothing: the
    /// names keep what the key promises. Returns a note for the log line, `None`
    /// when synchronous mode is off and nothing is left to undo.
    pub(super) fn manage_sync(
        &mut self,
        now: Instant,
        view: &ClusterView,
        pg: &PgStatus,
        epoch: Epoch,
        p: &mut Planner,
    ) -> Option<String> {
        let me = self.cfg.name.clone();
        let names = pg.sync_names.as_deref();
        if self.timing.synchronous == SyncMode::Off {
            if view.sync.is_some() {
                p.push(Action::DeleteSync { epoch });
                return Some("synchronous mode is off: deleting the sync key".into());
            }
            // Unknown (`None`: a clear whose reload failed, review 2 finding 2) is
            // set again too: the server may still wait for a standby.
            if names != Some("") {
                p.push(Action::SetSyncNames {
                    names: String::new(),
                });
                return Some("synchronous mode is off: clearing synchronous_standby_names".into());
            }
            return None;
        }
        let listed = match self.sync_key_for_me(view, epoch, p) {
            Ok(listed) => listed,
            Err(why) => return Some(why),
        };
        // INVARIANT (review H1): a name stands for one walsender. PostgreSQL matches
        // `synchronous_standby_names` against `application_name` without regard to
        // case, even quoted, and with two matching walsenders (a second member
        // `PG2`, a `pg_receivewal` or subscription named so, a reconnect's old
        // row) `FIRST n` may count the other one and leave this standby behind
        // while commits are acknowledged. So a standby is fit only while exactly
        // one row in `pg_stat_replication` matches its name in any case, and that
        // row is its own, streaming.
        let row = |name: &str| -> Option<&StandbyStat> {
            let mut matching = pg
                .standbys
                .iter()
                .filter(|s| s.name.eq_ignore_ascii_case(name));
            match (matching.next(), matching.next()) {
                (Some(s), None) if s.name == name && s.streaming => Some(s),
                _ => None,
            }
        };
        let rows: Vec<&StandbyStat> = pg
            .standbys
            .iter()
            .filter(|s| row(&s.name).is_some())
            .collect();
        // A standby fit to be synchronous: its one streaming row, a live member that
        // may take over (so listing it keeps a failover possible) and not tagged
        // `nosync`.
        let fit = |name: &str| {
            row(name).is_some()
                && view.member(name).is_some_and(|m| {
                    m.name != me
                        && !m.info.tags.nofailover
                        && !m.info.tags.nosync
                        && m.info.parse_error.is_none()
                })
        };
        let count = self.timing.synchronous_node_count.max(1) as usize;
        // `maximum_lag_on_syncnode`: a fit standby more than that many bytes
        // behind the most advanced fit one, for at least a loop, lags. A
        // performance rule that only ever swaps, adding before it removes: with
        // the key full and a listed standby lagging, one healthy standby is named
        // and listed beside the others (one over the count: every commit waits for
        // each listed standby, and each may take over, so one more is only
        // stricter), and then the count's own rule unlists the least advanced.
        // The key never lists fewer standbys for lag (review of the first form,
        // which unlisted first: H1, H2, M1).
        let best = rows
            .iter()
            .filter(|r| fit(&r.name))
            .map(|r| r.flush)
            .max()
            .unwrap_or(0);
        let over: Vec<String> = match self.timing.maximum_lag_on_syncnode {
            Some(m) => rows
                .iter()
                .filter(|r| fit(&r.name) && best.saturating_sub(r.flush) > m)
                .map(|r| r.name.clone())
                .collect(),
            None => Vec::new(),
        };
        let loop_wait = self.timing.loop_wait;
        // "Continuously" holds only across samples a loop apart: after a gap
        // (etcd unreadable, not primary, another leadership) start afresh
        // (re-review L2).
        if self
            .sync_lag_sampled
            .is_none_or(|t| now.since(t) > loop_wait * 2)
        {
            self.sync_lag_since.clear();
        }
        self.sync_lag_sampled = Some(now);
        self.sync_lag_since.retain(|(n, _)| over.contains(n));
        for n in &over {
            if !self.sync_lag_since.iter().any(|(s, _)| s == n) {
                self.sync_lag_since.push((n.clone(), now));
            }
        }
        let lag_since = &self.sync_lag_since;
        // A listed standby lags once it has been over for a loop (a sample is
        // noise); a candidate is healthy only while it is within the limit now
        // (re-review M2: one that just fell behind is no replacement).
        let lagging = |name: &str| {
            lag_since
                .iter()
                .any(|(n, since)| n == name && now.since(*since) >= loop_wait)
        };
        let healthy_now = |name: &str| !over.iter().any(|n| n == name);
        // 1. Unlist first (guarded): listed standbys no longer fit, and past
        //    `synchronous_node_count` (lowered at run time) the least advanced. The
        //    names change only once the key says so.
        // A listed standby must also read `sync`: the names name it in a form that
        // waits for each name, so PostgreSQL reporting it otherwise means the names
        // in effect are not what the key relies on.
        // Judged only once the names held for a loop: each walsender takes a new
        // value on its own reload, and until then can report a kept standby
        // `potential` (review 2, finding 7).
        let settled = names.is_some_and(|n| self.names_settled(now, n));
        let mut keep: Vec<String> = listed
            .iter()
            .filter(|s| fit(s) && (!settled || row(s).is_some_and(|r| r.sync)))
            .cloned()
            .collect();
        if keep.len() > count {
            let flush = |n: &String| rows.iter().find(|r| &r.name == n).map_or(0, |r| r.flush);
            keep.sort_by(|a, b| flush(b).cmp(&flush(a)).then_with(|| a.cmp(b)));
            keep.truncate(count);
            keep.sort();
        }

        if keep.len() < listed.len() {
            let dropped: Vec<&str> = listed
                .iter()
                .filter(|s| !keep.contains(s))
                .map(String::as_str)
                .collect();
            p.push(Action::WriteSync {
                epoch,
                leader: me,
                sync_standbys: keep,
            });
            p.again = true;
            return Some(format!(
                "unlisting synchronous standby {} (not streaming or not reported sync, its \
                 name matched by another walsender, not a member fit to take over, or the \
                 least advanced past synchronous_node_count {count}, as after a swap for \
                 maximum_lag_on_syncnode) before changing synchronous_standby_names",
                dropped.join(", ")
            ));
        }
        // 2. The names: every listed standby, and as many more fit ones as
        //    `synchronous_node_count` leaves room for (those the names already name
        //    first, then the most WAL flushed, then the name).
        let named = names.map(names_in).unwrap_or_default();
        let mut candidates: Vec<&StandbyStat> = rows
            .iter()
            .copied()
            .filter(|s| fit(&s.name) && !listed.contains(&s.name))
            .collect();
        // Healthy first (a named standby that lags for a loop gives way: a hung
        // one must not hold an empty place, re-review M1), then already named (a
        // value that keeps changing never settles, and nothing is listed until it
        // does), then the most flushed.
        candidates.sort_by(|a, b| {
            let pending = |s: &StandbyStat| named.contains(&s.name);
            let healthy = |s: &StandbyStat| !lagging(&s.name);
            (healthy(b), pending(b), b.flush, std::cmp::Reverse(&b.name)).cmp(&(
                healthy(a),
                pending(a),
                a.flush,
                std::cmp::Reverse(&a.name),
            ))
        });
        // The swap's extra place: the key full, a listed standby lagging, and a
        // standby within the limit now to take its place.
        let fresh = |c: &&StandbyStat| !lagging(&c.name) && healthy_now(&c.name);
        let swap = listed.len() >= count
            && listed.iter().any(|s| lagging(s))
            && candidates.iter().any(fresh);
        if swap && let Some(i) = candidates.iter().position(fresh) {
            let c = candidates.remove(i);
            candidates.insert(0, c);
        }
        let room = (count + usize::from(swap)).saturating_sub(listed.len());
        candidates.truncate(room);
        let mut wanted: Vec<String> = listed.clone();
        wanted.extend(candidates.iter().map(|c| c.name.clone()));
        wanted.sort();
        let want = self.sync_names_wanted(&wanted);
        let adding = || {
            candidates
                .iter()
                .map(|c| c.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        };
        if names != Some(want.as_str()) {
            // Stricter than needed is safe: `wanted` holds every listed standby.
            p.push(Action::SetSyncNames { names: want });
            return Some(if candidates.is_empty() && listed.is_empty() {
                match self.timing.synchronous {
                    SyncMode::Strict => "no synchronous standby: commits wait \
                                         (synchronous_mode_strict)"
                        .into(),
                    _ => "no synchronous standby: degraded to asynchronous replication".into(),
                }
            } else if candidates.is_empty() {
                format!(
                    "synchronous standby {}: restoring synchronous_standby_names",
                    listed.join(", ")
                )
            } else if swap {
                let slow: Vec<&str> = listed
                    .iter()
                    .filter(|s| lagging(s))
                    .map(String::as_str)
                    .collect();
                format!(
                    "adding {} as synchronous standby beside lagging {} \
                     (maximum_lag_on_syncnode: added before the least advanced goes)",
                    adding(),
                    slow.join(", ")
                )
            } else {
                format!("adding {} as synchronous standby", adding())
            });
        }
        if candidates.is_empty() {
            return Some(if !listed.is_empty() {
                format!("synchronous standby {}", listed.join(", "))
            } else if self.timing.synchronous == SyncMode::Strict {
                "no synchronous standby: commits wait (synchronous_mode_strict)".into()
            } else {
                "no synchronous standby: degraded to asynchronous replication".into()
            });
        }
        // 3. List the new ones that are `sync` and caught up, once the names held
        //    for a loop. Commits acknowledged before the names took effect need not
        //    be on them yet: each is listed only once it flushed past them.
        if !self.names_settled(now, &want) {
            return Some(format!("waiting for {} to become synchronous", adding()));
        }
        let since = self.names_seen.as_ref().map_or(now, |(_, at)| *at);
        let mut ready = Vec::new();
        let mut waiting = Vec::new();
        for c in &candidates {
            if !c.sync {
                waiting.push(format!("waiting for {} to become synchronous", c.name));
                continue;
            }
            match catchup::standby_caught_up(&mut self.sync_catchup, epoch, &want, since, pg.lsn, c)
            {
                Ok(()) => ready.push(c.name.clone()),
                Err(why) => waiting.push(why),
            }
        }
        if ready.is_empty() {
            return Some(waiting.join("; "));
        }
        let note = format!(
            "{} synchronous and caught up; listing in the sync key",
            ready.join(", ")
        );
        let mut now_listed = listed;
        now_listed.extend(ready);
        now_listed.sort();
        p.push(Action::WriteSync {
            epoch,
            leader: me,
            sync_standbys: now_listed,
        });
        p.again = true;
        Some(note)
    }

    /// Step phase: since when `synchronous_standby_names` reads what it reads.
    pub(super) fn note_sync_names(&mut self, now: Instant, obs: &Observation) {
        match &obs.pg.sync_names {
            Some(n) if self.names_seen.as_ref().is_some_and(|(seen, _)| seen == n) => {}
            Some(n) => self.names_seen = Some((n.clone(), now)),
            None => self.names_seen = None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(x: &[&str]) -> Vec<String> {
        x.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn names_in_reads_back_every_form_written_and_nothing_else() {
        for list in [v(&["pg2"]), v(&["pg2", "pg3"]), v(&["a\"b", "c, d", "e"])] {
            assert_eq!(names_in(&sync_names_for(&list)), list);
        }
        for other in [
            "",
            "*",
            "pg2",
            "FIRST 2 (pg2, pg3)",
            "ANY 1 (\"pg2\", \"pg3\")",
            "FIRST x (\"pg2\")",
            "\"pg2",
            "\"pg2\",\"pg3\"",
        ] {
            assert_eq!(names_in(other), Vec::<String>::new(), "{other:?}");
        }
    }
}
