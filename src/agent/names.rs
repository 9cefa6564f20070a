//! The loop's side of etcd endpoint names (issue 12, "Host names"): which
//! address each endpoint stands for, when a name is resolved again, and the name
//! TLS checks.
//!
//! Owns: the last good addresses of every endpoint given as a name, and the
//! resolver child in flight (crate::resolve). Names are resolved at start-up
//! (before the loop, holding no lease, bounded by `[etcd] resolve_timeout`),
//! again after an endpoint failed (`switch_endpoint` marks its name), and every
//! `[etcd] resolve_interval` while the endpoints answer (a timer's lookup that
//! fails keeps the last good addresses until the next round, rather than asking
//! again every `resolve_timeout` the way a failed endpoint's name is).
//! Must never: resolve in this process or wait for the resolver inside the loop
//! (the child runs on its own; the loop polls its pipe in `resolve_step`, which
//! never blocks, so a resolver that hangs holds neither a renewal nor a fence:
//! S1, S6 d), forget the last good addresses because a resolution failed or
//! timed out, or count a failed renewal as anything but failed (the re-resolve
//! is never part of it).
//!
//! `[etcd] srv`: the endpoint list itself comes from DNS SRV records, asked by
//! a child the same way (`tenure __resolve_srv`): at start-up (waiting at most
//! `resolve_timeout`, before any lease), again once the last endpoint of the
//! list failed in turn (every member it named may be gone), and every
//! `resolve_interval` (the answer carries the targets' addresses, so the names
//! are not asked on a timer of their own). An answer that changes the list
//! replaces it (names then resolved as above); a failed or timed-out one keeps
//! the last good list. A connected client is kept: where its endpoint is still
//! listed, at its new place; where it is not, until a call to it fails, and then
//! the new list from its first entry (a working client is not dropped at an
//! arbitrary point of a leadership because DNS changed).

use std::net::IpAddr;

use log::{debug, info, warn};

use super::Agent;
use crate::clock;
use crate::config::{Endpoint, EtcdConfig, EtcdSrv, Host};
use crate::core::time::Instant;
use crate::dcs::Security;
use crate::resolve::{Outcome, Resolver, SrvTarget};

/// One `[etcd] endpoints` entry and what its name resolved to.
struct Ep {
    ep: Option<Endpoint>,
    /// The last good addresses (empty: never resolved).
    addrs: Vec<IpAddr>,
    /// Which of `addrs` the next connect uses (moves on after a failure).
    next: usize,
    /// Resolve this name again (it failed, or has no address yet).
    stale: bool,
    /// Asked again by `resolve_interval`'s timer: cleared when that lookup ends,
    /// whatever it answered (a failure waits for the next round).
    due: bool,
}

/// Every endpoint's addresses and the resolver.
pub(super) struct Names {
    eps: Vec<Ep>,
    resolver: Resolver,
    /// When the last lookup ended: the next starts no sooner than
    /// `resolve_timeout` after it (a resolver that always hangs costs one child
    /// at a time, not one per iteration).
    last_end: Option<Instant>,
    /// `[etcd] srv`: where the endpoint list comes from.
    srv: Option<Srv>,
    /// `resolve_interval`'s next round for the names (without `srv`).
    refresh_at: Option<Instant>,
    /// What the SRV list file was last written with (it is rewritten only when
    /// that changes).
    srv_saved: Option<String>,
}

/// The SRV side: the records asked, the child in flight, whether to ask again.
struct Srv {
    spec: EtcdSrv,
    resolver: Resolver<SrvTarget>,
    /// Ask again (no answer yet, or the last endpoint of the list failed).
    stale: bool,
    /// As `Names::last_end`, for SRV lookups.
    last_end: Option<Instant>,
    /// As `Ep::due` and `Names::refresh_at`, for the records.
    due: bool,
    refresh_at: Option<Instant>,
}

fn ep_of(url: &str) -> Ep {
    // The configuration (or the SRV answer) was checked with the same parser; an
    // entry that fails here stays unusable rather than panicking.
    let ep = Endpoint::parse(url).ok();
    let (addrs, stale) = match ep.as_ref().map(|e| &e.host) {
        Some(Host::Ip(ip)) => (vec![*ip], false),
        _ => (Vec::new(), true),
    };
    Ep {
        ep,
        addrs,
        next: 0,
        stale,
        due: false,
    }
}

impl Names {
    pub(super) fn new(cfg: &EtcdConfig) -> Names {
        Names {
            eps: cfg.endpoints.iter().map(|u| ep_of(u)).collect(),
            resolver: Resolver::default(),
            last_end: None,
            srv: cfg.srv.clone().map(|spec| Srv {
                spec,
                resolver: Resolver::default(),
                stale: true,
                last_end: None,
                due: false,
                refresh_at: None,
            }),
            refresh_at: None,
            srv_saved: None,
        }
    }

    /// Whether the endpoints come from DNS: `[etcd] srv`, or an endpoint given by
    /// host name. Only then are the agent's clients pinned to one etcd cluster
    /// (dcs/pin.rs): DNS may come to name another cluster's member.
    pub(super) fn named_by_dns(&self) -> bool {
        self.srv.is_some()
            || self
                .eps
                .iter()
                .any(|e| !matches!(e.ep.as_ref().map(|e| &e.host), Some(Host::Ip(_))))
    }

    /// `resolve_interval`'s timer: once a round is due, every name (without
    /// `srv`) or the SRV records (with it) are asked again at the next step. The
    /// first round is an interval after the first call (start-up just asked).
    fn refresh(&mut self, now: Instant, interval: Option<std::time::Duration>) {
        let Some(iv) = interval else {
            return;
        };
        let due = |at: &mut Option<Instant>| match *at {
            Some(t) if now >= t => {
                *at = Some(now.add(iv));
                true
            }
            Some(_) => false,
            None => {
                *at = Some(now.add(iv));
                false
            }
        };
        match &mut self.srv {
            Some(s) => {
                if due(&mut s.refresh_at) {
                    s.due = true;
                }
            }
            None => {
                if due(&mut self.refresh_at) {
                    for e in &mut self.eps {
                        e.due = e.ep.as_ref().and_then(Endpoint::name).is_some();
                    }
                    // Now, not a `resolve_timeout` after the last lookup.
                    self.last_end = None;
                }
            }
        }
    }

    /// A lookup of `names` ended: the timer's round for them is over, whatever
    /// it answered (a name that failed keeps its last good addresses; one that
    /// is also stale is asked again as before).
    fn round_over(&mut self, names: &[String]) {
        for e in &mut self.eps {
            if e.ep
                .as_ref()
                .and_then(Endpoint::name)
                .is_some_and(|n| names.iter().any(|x| x == n))
            {
                e.due = false;
            }
        }
    }

    /// A new endpoint list (from an SRV answer): an entry listed before keeps
    /// its addresses; new names are resolved at the next step.
    fn set_endpoints(&mut self, urls: &[String]) {
        let mut old = std::mem::take(&mut self.eps);
        for u in urls {
            let fresh = ep_of(u);
            match old.iter().position(|e| e.ep.is_some() && e.ep == fresh.ep) {
                Some(k) => self.eps.push(old.swap_remove(k)),
                None => self.eps.push(fresh),
            }
        }
        // New names now, not a `resolve_timeout` after the last lookup.
        self.last_end = None;
    }

    /// The names to resolve now (stale, deduplicated).
    fn stale_names(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for e in &self.eps {
            if let Some(n) = e.ep.as_ref().and_then(Endpoint::name)
                && (e.stale || e.due)
                && !out.iter().any(|x| x == n)
            {
                out.push(n.to_string());
            }
        }
        out
    }

    /// Endpoint `i` failed: its next address from now on, and its name (if any)
    /// is resolved again.
    pub(super) fn failed(&mut self, i: usize) {
        if let Some(e) = self.eps.get_mut(i) {
            e.next = e.next.wrapping_add(1);
            e.stale = e.ep.as_ref().and_then(Endpoint::name).is_some();
        }
        // The list is tried in order: its last entry failing means every member
        // it names failed once since the last answer (or there is no list).
        if let Some(s) = &mut self.srv
            && i + 1 >= self.eps.len()
        {
            s.stale = true;
        }
    }

    /// Apply a lookup's answers: a name that resolved gets its new addresses, one
    /// that failed keeps its last good ones (and stays stale).
    fn apply(&mut self, answers: &[crate::resolve::Answer]) {
        for (name, r) in answers {
            for e in &mut self.eps {
                if e.ep.as_ref().and_then(Endpoint::name) != Some(name.as_str()) {
                    continue;
                }
                match r {
                    Ok(addrs) => {
                        if *addrs != e.addrs {
                            info!(
                                "etcd: {name} resolves to {}",
                                addrs
                                    .iter()
                                    .map(IpAddr::to_string)
                                    .collect::<Vec<_>>()
                                    .join(", ")
                            );
                            e.addrs = addrs.clone();
                            e.next = 0;
                        }
                        e.stale = false;
                    }
                    Err(why) => warn!(
                        "etcd: cannot resolve {name}: {why}; keeping {}",
                        last_good(&e.addrs)
                    ),
                }
            }
        }
    }

    /// Whether `pid` is a resolver child (the orphan reaper leaves it alone).
    pub(super) fn owns(&self, pid: u32) -> bool {
        self.resolver.owns(pid) || self.srv.as_ref().is_some_and(|s| s.resolver.owns(pid))
    }
}

/// The endpoint list saved at the last SRV answer (`URL ADDR ...` a line), as
/// far as it is one this configuration could have made: each URL an endpoint of
/// the configured scheme whose host is a name, each address an IP; anything else
/// (garbage, another writer, a scheme from before a TLS change) makes the whole
/// file unusable.
fn saved_list(spec: &EtcdSrv, text: &str) -> Vec<(String, Vec<IpAddr>)> {
    let scheme = if spec.https { "https://" } else { "http://" };
    let mut out = Vec::new();
    for line in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let mut words = line.split_whitespace();
        let url = words.next().unwrap_or_default();
        let addrs: Option<Vec<IpAddr>> = words.map(|w| w.parse().ok()).collect();
        let ok = url.starts_with(scheme) && Endpoint::parse(url).is_ok_and(|e| e.name().is_some());
        match addrs {
            Some(a) if ok && out.len() < 64 => out.push((url.to_string(), a)),
            _ => return Vec::new(),
        }
    }
    out
}

/// What an SRV lookup's outcome does to the endpoint list.
#[derive(Debug, PartialEq, Eq)]
enum SrvDecision {
    /// Killed at its deadline before it answered: the list stays.
    TimedOut,
    /// No usable answer (why): the list stays.
    Failed(String),
    /// The same list: nothing moves (the targets' addresses are taken).
    Same { addrs: Vec<crate::resolve::Answer> },
    /// A new list; `keep_at`: where the endpoint in use now is in it (its client
    /// stays connected), `None`: not listed, a new client from the start; `addrs`:
    /// the targets the child resolved, with their addresses.
    Replace {
        urls: Vec<String>,
        keep_at: Option<usize>,
        addrs: Vec<crate::resolve::Answer>,
    },
}

/// The pure part of `srv_resolved`: `list` is the endpoint list in use and
/// `in_use` the URL of the endpoint the client talks to (listed or not).
fn srv_decision(
    spec: &EtcdSrv,
    o: Outcome<SrvTarget>,
    list: &[String],
    in_use: Option<&str>,
) -> SrvDecision {
    let answer = match o {
        Outcome::Done(a) | Outcome::TimedOut(a) if !a.is_empty() => a.into_iter().next(),
        Outcome::Done(_) => None,
        Outcome::TimedOut(_) => return SrvDecision::TimedOut,
        Outcome::Failed(why) => return SrvDecision::Failed(why),
    };
    let targets = match answer {
        Some((_, Ok(targets))) => targets,
        Some((_, Err(why))) => return SrvDecision::Failed(why),
        None => return SrvDecision::Failed("the resolver answered nothing".into()),
    };
    let urls: Vec<String> = targets.iter().map(|t| spec.endpoint(t)).collect();
    let addrs: Vec<crate::resolve::Answer> = targets
        .into_iter()
        .filter(|t| !t.addrs.is_empty())
        .map(|t| (t.host, Ok(t.addrs)))
        .collect();
    if urls == list {
        return SrvDecision::Same { addrs };
    }
    let keep_at = in_use.and_then(|c| urls.iter().position(|u| u == c));
    SrvDecision::Replace {
        urls,
        keep_at,
        addrs,
    }
}

fn last_good(addrs: &[IpAddr]) -> String {
    if addrs.is_empty() {
        "no address (none resolved yet)".into()
    } else {
        addrs
            .iter()
            .map(IpAddr::to_string)
            .collect::<Vec<_>>()
            .join(", ")
    }
}

impl Agent {
    /// What endpoint `i` connects to: an address URL and the security settings,
    /// with the endpoint's name as the TLS server name unless `tls_server_name`
    /// is configured (the certificate is checked against the name, the
    /// connection goes to the address). `Err`: a name with no address yet.
    pub(super) fn etcd_target(&self, i: usize) -> Result<(String, Security), String> {
        let mut sec = Security::of(&self.cfg.etcd);
        let Some(e) = self.names.eps.get(i) else {
            return Err(match &self.names.srv {
                Some(s) if self.names.eps.is_empty() => format!(
                    "no etcd endpoint yet: the DNS SRV lookup of {} has not answered \
                     (asked again in its own step, outside the loop)",
                    s.spec.service()
                ),
                _ => format!("etcd endpoint #{i}: not configured"),
            });
        };
        let Some(ep) = &e.ep else {
            return Err(format!(
                "etcd endpoint {}: not a valid endpoint",
                self.cfg.etcd.endpoints.get(i).map_or("?", String::as_str)
            ));
        };
        if e.addrs.is_empty() {
            return Err(format!(
                "etcd endpoint {ep}: name not resolved yet (resolution is its own step, \
                 outside the loop)"
            ));
        }
        let ip = e.addrs[e.next % e.addrs.len()];
        if let (Some(name), Some(tls)) = (ep.name(), sec.tls.as_mut())
            && tls.server_name.is_none()
        {
            tls.server_name = Some(name.to_string());
        }
        Ok((ep.url_with(ip), sec))
    }

    /// Start-up, before the loop and before any lease: resolve every name,
    /// waiting at most `[etcd] resolve_timeout`. Names that do not resolve now
    /// are retried by `resolve_step`.
    pub(super) fn resolve_at_startup(&mut self) {
        // One deadline for the SRV lookup and the names after it (review finding
        // 9): a restarted agent waits `resolve_timeout` at most before it adopts.
        let deadline = clock::now().add(self.cfg.etcd.resolve_timeout);
        if let Some(s) = &self.names.srv {
            let service = s.spec.service();
            let o = match crate::resolve::Lookup::<SrvTarget>::start(&[service], deadline) {
                Ok(l) => l.wait(),
                Err(e) => Outcome::Failed(e),
            };
            self.srv_resolved(o);
            if let Some(s) = &mut self.names.srv {
                s.last_end = Some(clock::now());
            }
            // DNS did not answer: the list of this host's last answer, if any
            // (review finding 7: an agent restarted during a DNS outage would
            // otherwise start with no endpoint and S4 would fence a primary it
            // could have adopted). Still stale: DNS is asked again.
            if self.cfg.etcd.endpoints.is_empty()
                && let Some(s) = &self.names.srv
            {
                let path = self.srv_saved_path();
                let saved = std::fs::read_to_string(&path)
                    .map(|t| saved_list(&s.spec, &t))
                    .unwrap_or_default();
                if !saved.is_empty() {
                    let urls: Vec<String> = saved.iter().map(|(u, _)| u.clone()).collect();
                    warn!(
                        "etcd: no DNS SRV answer at start-up; starting from the list of \
                         the last answer ({}): {}",
                        path.display(),
                        urls.join(", ")
                    );
                    self.names.set_endpoints(&urls);
                    // Their addresses too: with DNS down the names would not resolve.
                    let addrs: Vec<crate::resolve::Answer> = saved
                        .into_iter()
                        .filter(|(_, a)| !a.is_empty())
                        .filter_map(|(u, a)| {
                            Some((Endpoint::parse(&u).ok()?.name()?.to_string(), Ok(a)))
                        })
                        .collect();
                    self.names.apply(&addrs);
                    self.cfg.etcd.endpoints = urls.clone();
                    self.status.metrics.etcd_endpoints = urls;
                }
            }
        }
        let names = self.names.stale_names();
        if names.is_empty() || clock::now() >= deadline {
            return;
        }
        let o = match crate::resolve::Lookup::start(&names, deadline) {
            Ok(l) => l.wait(),
            Err(e) => Outcome::Failed(e),
        };
        self.resolved(&names, o);
        self.names.last_end = Some(clock::now());
    }

    /// Poll the resolver and start one for stale names. Never blocks: the child
    /// does the waiting; its answers are read when they are there, and it is
    /// killed once past its deadline. Runs after the renewal and the
    /// authentication step, never inside a renewal.
    pub(super) fn resolve_step(&mut self) {
        let now = clock::now();
        self.names.refresh(now, self.cfg.etcd.resolve_interval);
        self.srv_step(now);
        if let Some((names, started, o)) = self.names.resolver.service(now) {
            debug!(
                "etcd: resolver for {} ended after {:.3} s",
                names.join(", "),
                now.since(started).as_secs_f64()
            );
            self.resolved(&names, o);
            self.names.last_end = Some(now);
        }
        if self.names.resolver.running() {
            return;
        }
        let timeout = self.cfg.etcd.resolve_timeout;
        if self.names.last_end.is_some_and(|t| now < t.add(timeout)) {
            return;
        }
        let names = self.names.stale_names();
        if names.is_empty() {
            return;
        }
        debug!("etcd: resolving {} again", names.join(", "));
        if let Err(e) = self.names.resolver.start(&names, now.add(timeout)) {
            warn!("etcd: {e}");
            self.status.metrics.etcd_resolve_failures += 1;
            self.names.last_end = Some(now);
            self.names.round_over(&names);
        }
    }

    /// Where the last SRV answer's list is kept for a restart.
    fn srv_saved_path(&self) -> std::path::PathBuf {
        self.cfg.postgresql.socket_dir.join("tenure.etcd-srv")
    }

    /// Keep an SRV answer's list and its targets' addresses (`URL ADDR ...` a
    /// line) for a restart while DNS is down (`resolve_at_startup`): a small file
    /// in the socket directory, as the member lease's. Only when it says
    /// something new (the timer asks every `resolve_interval`), through a temp
    /// file and a rename: a crash mid-write leaves the old list, not half of it.
    fn save_srv_list(&mut self, urls: &[String], addrs: &[crate::resolve::Answer]) {
        let mut text = String::new();
        for u in urls {
            text.push_str(u);
            let name = Endpoint::parse(u)
                .ok()
                .and_then(|e| e.name().map(str::to_string));
            if let Some((_, Ok(a))) = addrs.iter().find(|(n, _)| Some(n) == name.as_ref()) {
                for ip in a {
                    text.push(' ');
                    text.push_str(&ip.to_string());
                }
            }
            text.push('\n');
        }
        if self.names.srv_saved.as_deref() == Some(text.as_str()) {
            return;
        }
        let path = self.srv_saved_path();
        let tmp = path.with_extension("etcd-srv.tmp");
        match std::fs::write(&tmp, &text).and_then(|()| std::fs::rename(&tmp, &path)) {
            Ok(()) => self.names.srv_saved = Some(text),
            Err(e) => warn!(
                "etcd: cannot record the SRV list in {}: {e}",
                path.display()
            ),
        }
    }

    /// `resolve_step`'s SRV half: poll the SRV child, start one when the list is
    /// stale. Never blocks.
    fn srv_step(&mut self, now: Instant) {
        let Some(s) = &mut self.names.srv else {
            return;
        };
        if let Some((_, _, o)) = s.resolver.service(now) {
            s.last_end = Some(now);
            self.srv_resolved(o);
        }
        let timeout = self.cfg.etcd.resolve_timeout;
        let Some(s) = &mut self.names.srv else {
            return;
        };
        if !(s.stale || s.due)
            || s.resolver.running()
            || (!s.due && s.last_end.is_some_and(|t| now < t.add(timeout)))
        {
            return;
        }
        let service = s.spec.service();
        debug!("etcd: asking DNS for {service} again");
        if let Err(e) = s.resolver.start(&[service], now.add(timeout)) {
            warn!("etcd: {e}");
            s.last_end = Some(now);
            // The timer's round is over too: the spacing applies to the next try
            // (review of resolve_interval, L3: a failed spawn was retried every
            // iteration while the round was due).
            s.due = false;
            self.status.metrics.etcd_resolve_failures += 1;
        }
    }

    /// An SRV lookup's outcome: a new list replaces the endpoints (the client
    /// kept when its endpoint is still listed); a failure keeps the last good
    /// list.
    fn srv_resolved(&mut self, o: Outcome<SrvTarget>) {
        let Some(s) = &mut self.names.srv else {
            return;
        };
        // The timer's round is over, whatever this answered: a failure keeps the
        // list until the next round (or a failed endpoint asks sooner).
        s.due = false;
        let service = s.spec.service();
        let in_use = self
            .endpoint_unlisted
            .clone()
            .or_else(|| self.cfg.etcd.endpoints.get(self.endpoint).cloned());
        let kept = if self.cfg.etcd.endpoints.is_empty() {
            "no endpoint yet".to_string()
        } else {
            self.cfg.etcd.endpoints.join(", ")
        };
        match srv_decision(&s.spec, o, &self.cfg.etcd.endpoints, in_use.as_deref()) {
            SrvDecision::TimedOut => {
                self.status.metrics.etcd_resolve_timeouts += 1;
                warn!(
                    "etcd: DNS SRV lookup of {service} took longer than resolve_timeout = \
                     {:.3} s (resolver killed); keeping {kept}",
                    self.cfg.etcd.resolve_timeout.as_secs_f64()
                );
            }
            SrvDecision::Failed(why) => {
                self.status.metrics.etcd_resolve_failures += 1;
                warn!("etcd: DNS SRV lookup of {service}: {why}; keeping {kept}");
            }
            SrvDecision::Same { addrs } => {
                s.stale = false;
                self.status.metrics.etcd_resolves += 1;
                self.names.apply(&addrs);
                let urls = self.cfg.etcd.endpoints.clone();
                self.save_srv_list(&urls, &addrs);
            }
            SrvDecision::Replace {
                urls,
                keep_at,
                addrs,
            } => {
                s.stale = false;
                self.status.metrics.etcd_resolves += 1;
                info!("etcd: DNS SRV {service}: {}", urls.join(", "));
                self.save_srv_list(&urls, &addrs);
                self.names.set_endpoints(&urls);
                // The targets' addresses came with the answer: no second child,
                // no loop lost before the first connect (review finding 8).
                self.names.apply(&addrs);
                self.cfg.etcd.endpoints = urls.clone();
                self.status.metrics.etcd_endpoints = urls;
                // The client's index only while there is a client (second review,
                // L2): otherwise the new list from its first, in priority order.
                match (keep_at, self.etcd.is_some()) {
                    (Some(k), true) => {
                        self.endpoint = k;
                        self.endpoint_unlisted = None;
                    }
                    (None, true) => {
                        // Its member answers (the client is dropped at a failed
                        // call): kept until a call to it fails, then the new list
                        // from its first entry (switch_endpoint). Dropping it here
                        // would reconnect at an arbitrary point of a leadership,
                        // to a member DNS may name before it serves.
                        let url = in_use.unwrap_or_default();
                        info!(
                            "etcd: {url} is no longer in the SRV records; staying on it \
                             until a call to it fails, then {}",
                            self.cfg
                                .etcd
                                .endpoints
                                .first()
                                .map_or("(none)", String::as_str)
                        );
                        self.endpoint = 0;
                        self.endpoint_unlisted = Some(url);
                    }
                    (_, false) => {
                        self.endpoint = 0;
                        self.endpoint_unlisted = None;
                        self.etcd = None;
                        // The token now, in this step (review finding 3): the rest
                        // of the iteration and the next renewal must not go out
                        // without one.
                        self.authenticate_step(self.deadline(self.core.timing().retry_timeout));
                    }
                }
                self.status.metrics.etcd_endpoint = self.endpoint;
                self.status.metrics.etcd_endpoint_unlisted = self.endpoint_unlisted.clone();
            }
        }
    }

    /// Count and log a lookup's outcome, and keep what it found.
    fn resolved(&mut self, names: &[String], o: Outcome) {
        self.names.round_over(names);
        match o {
            Outcome::Done(a) => {
                if a.iter().all(|(_, r)| r.is_ok()) {
                    self.status.metrics.etcd_resolves += 1;
                } else {
                    self.status.metrics.etcd_resolve_failures += 1;
                }
                self.names.apply(&a);
            }
            Outcome::TimedOut(a) => {
                self.status.metrics.etcd_resolve_timeouts += 1;
                self.names.apply(&a);
                let missing: Vec<&String> = names
                    .iter()
                    .filter(|n| !a.iter().any(|(k, _)| k == *n))
                    .collect();
                for n in missing {
                    let kept = self
                        .names
                        .eps
                        .iter()
                        .find(|e| e.ep.as_ref().and_then(Endpoint::name) == Some(n.as_str()))
                        .map(|e| last_good(&e.addrs))
                        .unwrap_or_default();
                    warn!(
                        "etcd: resolving {n} took longer than resolve_timeout = {:.3} s \
                         (resolver killed); keeping {kept}",
                        self.cfg.etcd.resolve_timeout.as_secs_f64()
                    );
                }
            }
            Outcome::Failed(why) => {
                self.status.metrics.etcd_resolve_failures += 1;
                warn!("etcd: resolving {}: {why}", names.join(", "));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn cfg(eps: &[&str]) -> EtcdConfig {
        EtcdConfig {
            endpoints: eps.iter().map(|s| s.to_string()).collect(),
            srv: None,
            tls: None,
            auth: None,
            resolve_timeout: Duration::from_secs(2),
            resolve_interval: Some(Duration::from_secs(300)),
        }
    }

    /// Which endpoint lists pin the agent to one etcd cluster (dcs/pin.rs): those
    /// DNS names, not a list of addresses.
    #[test]
    fn only_endpoints_from_dns_are_pinned() {
        let ips = cfg(&["http://10.0.0.1:2379", "https://[::1]:2379"]);
        assert!(!Names::new(&ips).named_by_dns());
        let named = cfg(&["http://10.0.0.1:2379", "http://etcd2.example:2379"]);
        assert!(Names::new(&named).named_by_dns());
        let mut srv = cfg(&[]);
        srv.srv = Some(EtcdSrv {
            domain: "srv.test".into(),
            suffix: None,
            https: false,
        });
        assert!(Names::new(&srv).named_by_dns());
    }

    /// `[etcd] srv`: a new list keeps the addresses of entries it keeps; the
    /// last entry failing (every one tried since the answer) asks DNS again.
    #[test]
    fn an_srv_list_keeps_what_it_keeps_and_is_asked_again_after_a_round() {
        let mut c = cfg(&[]);
        c.srv = Some(EtcdSrv {
            domain: "srv.test".into(),
            suffix: None,
            https: false,
        });
        let mut n = Names::new(&c);
        assert!(n.eps.is_empty());
        assert!(n.srv.as_ref().is_some_and(|s| s.stale), "asked at start-up");
        n.set_endpoints(&[
            "http://etcd1.srv.test:2379".into(),
            "http://etcd2.srv.test:2379".into(),
        ]);
        n.srv.as_mut().expect("srv").stale = false;
        n.apply(&[("etcd1.srv.test".into(), Ok(vec![ip("10.0.0.1")]))]);
        assert_eq!(n.stale_names(), vec!["etcd2.srv.test".to_string()]);
        n.failed(0);
        assert!(!n.srv.as_ref().is_some_and(|s| s.stale), "one failure");
        n.failed(1);
        assert!(
            n.srv.as_ref().is_some_and(|s| s.stale),
            "the last one failed"
        );
        n.last_end = Some(crate::clock::now());
        n.set_endpoints(&[
            "http://etcd3.srv.test:2379".into(),
            "http://etcd1.srv.test:2379".into(),
        ]);
        assert_eq!(
            n.eps[1].addrs,
            vec![ip("10.0.0.1")],
            "etcd1 keeps its address"
        );
        assert!(n.eps[0].addrs.is_empty());
        assert!(n.last_end.is_none(), "new names are resolved at once");
    }

    /// `resolve_interval`: every name is asked again once a round is due, even
    /// though none failed; the round ends with the lookup whatever it answered
    /// (a failed name keeps its addresses and waits for the next round), while a
    /// name that also failed stays to be asked again. With `srv` the records are
    /// asked instead, and the names have no timer of their own.
    #[test]
    fn the_timer_asks_every_name_again_once_a_round() {
        let c = cfg(&["http://etcd1.example:2379", "http://10.0.0.9:2379"]);
        let mut n = Names::new(&c);
        n.apply(&[("etcd1.example".into(), Ok(vec![ip("10.0.0.1")]))]);
        assert!(n.stale_names().is_empty());
        let t0 = crate::clock::now();
        let iv = Some(Duration::from_secs(300));
        n.refresh(t0, iv);
        assert!(
            n.stale_names().is_empty(),
            "the first round is an interval away"
        );
        n.refresh(t0.add(Duration::from_secs(299)), iv);
        assert!(n.stale_names().is_empty());
        n.last_end = Some(t0.add(Duration::from_secs(299)));
        n.refresh(t0.add(Duration::from_secs(300)), iv);
        assert_eq!(n.stale_names(), vec!["etcd1.example".to_string()]);
        assert!(
            n.last_end.is_none(),
            "asked at once, not a resolve_timeout later"
        );
        // DNS fails this round: the address stays, and nothing is asked until
        // the next round.
        n.apply(&[("etcd1.example".into(), Err("timed out".into()))]);
        n.round_over(&["etcd1.example".into()]);
        assert!(n.stale_names().is_empty());
        assert_eq!(n.eps[0].addrs, vec![ip("10.0.0.1")]);
        n.refresh(t0.add(Duration::from_secs(599)), iv);
        assert!(n.stale_names().is_empty());
        n.refresh(t0.add(Duration::from_secs(600)), iv);
        assert_eq!(n.stale_names(), vec!["etcd1.example".to_string()]);
        // A name that failed as an endpoint stays stale past the round.
        n.failed(0);
        n.round_over(&["etcd1.example".into()]);
        assert_eq!(n.stale_names(), vec!["etcd1.example".to_string()]);
        // Off: no round ever.
        let mut off = Names::new(&c);
        off.apply(&[("etcd1.example".into(), Ok(vec![ip("10.0.0.1")]))]);
        off.refresh(t0, None);
        off.refresh(t0.add(Duration::from_secs(86_400)), None);
        assert!(off.stale_names().is_empty());
        // With srv: the records are due, the names are not.
        let mut c = cfg(&[]);
        c.srv = Some(EtcdSrv {
            domain: "srv.test".into(),
            suffix: None,
            https: false,
        });
        let mut s = Names::new(&c);
        s.set_endpoints(&["http://etcd1.srv.test:2379".into()]);
        s.apply(&[("etcd1.srv.test".into(), Ok(vec![ip("10.0.0.1")]))]);
        s.srv.as_mut().expect("srv").stale = false;
        s.refresh(t0, iv);
        assert!(!s.srv.as_ref().expect("srv").due);
        s.refresh(t0.add(Duration::from_secs(300)), iv);
        assert!(s.srv.as_ref().expect("srv").due, "the records are due");
        assert!(s.stale_names().is_empty(), "the names come with the answer");
    }

    /// What an SRV answer does to the list in use (review of the SRV change, T2):
    /// failures and timeouts keep it, the same list moves nothing, a new one keeps
    /// the client when its endpoint is still listed (at its new index).
    #[test]
    fn an_srv_answer_keeps_replaces_or_keeps_the_client() {
        let spec = EtcdSrv {
            domain: "srv.test".into(),
            suffix: None,
            https: false,
        };
        let t = |h: &str| SrvTarget {
            host: h.into(),
            port: 2379,
            addrs: Vec::new(),
        };
        let u = |h: &str| format!("http://{h}:2379");
        let ok = |hs: &[&str]| {
            Outcome::Done(vec![(
                spec.service(),
                Ok(hs.iter().map(|h| t(h)).collect()),
            )])
        };
        let list = vec![u("a.srv.test"), u("b.srv.test")];
        assert_eq!(
            srv_decision(
                &spec,
                Outcome::TimedOut(vec![]),
                &list,
                Some(list[1].as_str())
            ),
            SrvDecision::TimedOut
        );
        assert_eq!(
            srv_decision(
                &spec,
                Outcome::Failed("x".into()),
                &list,
                Some(list[1].as_str())
            ),
            SrvDecision::Failed("x".into())
        );
        let nx = Outcome::Done(vec![(
            spec.service(),
            Err("no such name (NXDOMAIN)".into()),
        )]);
        assert_eq!(
            srv_decision(&spec, nx, &list, Some(list[1].as_str())),
            SrvDecision::Failed("no such name (NXDOMAIN)".into())
        );
        assert_eq!(
            srv_decision(
                &spec,
                ok(&["a.srv.test", "b.srv.test"]),
                &list,
                Some(list[1].as_str())
            ),
            SrvDecision::Same { addrs: vec![] }
        );
        // b (in use) moves to index 0 and keeps its client.
        assert_eq!(
            srv_decision(
                &spec,
                ok(&["b.srv.test", "c.srv.test"]),
                &list,
                Some(list[1].as_str())
            ),
            SrvDecision::Replace {
                urls: vec![u("b.srv.test"), u("c.srv.test")],
                keep_at: Some(0),
                addrs: vec![]
            }
        );
        // b (in use) is gone: no index for it (the agent keeps a working client
        // until it fails, or starts the new list from its first entry).
        assert_eq!(
            srv_decision(
                &spec,
                ok(&["c.srv.test", "a.srv.test"]),
                &list,
                Some(list[1].as_str())
            ),
            SrvDecision::Replace {
                urls: vec![u("c.srv.test"), u("a.srv.test")],
                keep_at: None,
                addrs: vec![]
            }
        );
        // Start-up: no list yet.
        assert_eq!(
            srv_decision(&spec, ok(&["c.srv.test"]), &[], None),
            SrvDecision::Replace {
                urls: vec![u("c.srv.test")],
                keep_at: None,
                addrs: vec![]
            }
        );
        // The addresses the child found come with the decision (no second
        // child for those names); a target without any resolves on its own.
        let with = Outcome::Done(vec![(
            spec.service(),
            Ok(vec![
                SrvTarget {
                    host: "c.srv.test".into(),
                    port: 2379,
                    addrs: vec![ip("10.0.0.3"), ip("fd00::3")],
                },
                t("d.srv.test"),
            ]),
        )]);
        assert_eq!(
            srv_decision(&spec, with, &list, Some(list[0].as_str())),
            SrvDecision::Replace {
                urls: vec![u("c.srv.test"), u("d.srv.test")],
                keep_at: None,
                addrs: vec![("c.srv.test".into(), Ok(vec![ip("10.0.0.3"), ip("fd00::3")]))]
            }
        );
        // An answer that came in before the kill counts.
        let late = Outcome::TimedOut(vec![(spec.service(), Ok(vec![t("c.srv.test")]))]);
        assert!(matches!(
            srv_decision(&spec, late, &list, Some(list[0].as_str())),
            SrvDecision::Replace { .. }
        ));
    }

    /// The list saved for a restart: read back only whole and in this
    /// configuration's scheme.
    #[test]
    fn a_saved_srv_list_is_taken_whole_or_not_at_all() {
        let spec = EtcdSrv {
            domain: "srv.test".into(),
            suffix: None,
            https: false,
        };
        let good = "http://etcd1.srv.test:2379 10.0.0.1 fd00::1\nhttp://etcd2.srv.test:2380\n";
        assert_eq!(
            saved_list(&spec, good),
            vec![
                (
                    "http://etcd1.srv.test:2379".to_string(),
                    vec![ip("10.0.0.1"), ip("fd00::1")]
                ),
                ("http://etcd2.srv.test:2380".to_string(), vec![]),
            ]
        );
        for bad in [
            "",
            "http://etcd1.srv.test:2379\ngarbage\n",
            "http://etcd1.srv.test:2379 10.0.0.300\n",
            "https://etcd1.srv.test:2379\n",
            "http://10.0.0.1:2379\n",
            "http://etcd1.srv.test\n",
        ] {
            assert!(saved_list(&spec, bad).is_empty(), "{bad:?}");
        }
        let tls = EtcdSrv {
            https: true,
            ..spec
        };
        assert!(saved_list(&tls, good).is_empty(), "http:// under TLS");
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().expect("ip")
    }

    /// A failure marks only a name stale; a failed or timed-out answer keeps the
    /// last good addresses; a new answer replaces them.
    #[test]
    fn last_good_addresses_survive_a_failed_resolution() {
        let mut n = Names::new(&cfg(&[
            "http://10.0.0.1:2379",
            "http://etcd2.example:2379",
            "http://etcd2.example:2380",
        ]));
        assert_eq!(n.stale_names(), vec!["etcd2.example".to_string()]);
        n.apply(&[(
            "etcd2.example".into(),
            Ok(vec![ip("10.0.0.2"), ip("10.0.0.3")]),
        )]);
        assert!(n.stale_names().is_empty());
        assert_eq!(n.eps[1].addrs, vec![ip("10.0.0.2"), ip("10.0.0.3")]);
        assert_eq!(n.eps[2].addrs, vec![ip("10.0.0.2"), ip("10.0.0.3")]);

        // An IP endpoint's failure resolves nothing.
        n.failed(0);
        assert!(n.stale_names().is_empty());
        // A name's failure moves to its next address and asks again.
        n.failed(1);
        assert_eq!(n.eps[1].next, 1);
        assert_eq!(n.stale_names(), vec!["etcd2.example".to_string()]);
        n.apply(&[("etcd2.example".into(), Err("timed out".into()))]);
        assert_eq!(n.eps[1].addrs, vec![ip("10.0.0.2"), ip("10.0.0.3")]);
        assert_eq!(n.stale_names(), vec!["etcd2.example".to_string()]);
        n.apply(&[("etcd2.example".into(), Ok(vec![ip("10.0.0.9")]))]);
        assert_eq!(n.eps[1].addrs, vec![ip("10.0.0.9")]);
        assert_eq!(n.eps[1].next, 0);
        assert!(n.stale_names().is_empty());
    }
}
