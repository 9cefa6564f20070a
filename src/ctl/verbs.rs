//! The verbs of `tenure ctl`: what each reads, asks, sends and prints.
//!
//! Owns: the order of checks before a request is sent (patronictl's: the cluster
//! and the members named exist, the leader is who the operator says, the
//! candidate may lead, the confirmation), and the waits afterwards. Must never:
//! write to etcd, send anything before the confirmation, or retry a request a
//! member refused on purpose (only an unreachable member is skipped for the next).

use std::io::{BufRead, Write};
use std::thread::sleep;
use std::time::{Duration, Instant};

use serde_json::{Map, Value, json};

use super::args::{Command, FlushTarget, RoleFilter};
use super::http::{self, Response};
use super::render::{self, Snapshot};
use super::{API_TIMEOUT, CtlError, Ctx, VERSION};

/// How often the waits look again.
const POLL: Duration = Duration::from_millis(250);

pub(super) fn run(ctx: &mut Ctx) -> Result<(), CtlError> {
    match ctx.inv.command.clone() {
        Command::Help => Ok(()),
        Command::List => list(ctx, false),
        Command::Topology => list(ctx, true),
        Command::History => history(ctx),
        Command::Dsn { member, role } => dsn(ctx, member, role),
        Command::ShowConfig => show_config(ctx),
        Command::Version => version(ctx),
        Command::Switchover {
            leader,
            candidate,
            scheduled,
        } => switchover(ctx, leader, candidate, scheduled),
        Command::Failover { candidate, leader } => failover(ctx, candidate, leader),
        Command::Pause { wait } => toggle_pause(ctx, true, wait),
        Command::Resume { wait } => toggle_pause(ctx, false, wait),
        Command::Restart {
            members,
            pending,
            role,
            pg_version,
            scheduled,
        } => restart(ctx, members, pending, role, pg_version, scheduled),
        Command::Flush { target, members } => match target {
            FlushTarget::Restart => flush_restart(ctx, members),
            FlushTarget::Switchover => flush_switchover(ctx),
        },
        Command::Reload { members } => reload(ctx, members),
        Command::Reinit { members, wait } => reinit(ctx, members, wait),
        Command::EditConfig {
            set,
            apply,
            replace,
        } => edit_config(ctx, set, apply, replace),
    }
}

fn print_json(v: &Value) {
    outln!("{v}");
}

/// What a server said, for an error text: its JSON `error`/`message`/`reason`, or
/// the body itself (shortened).
pub fn server_says(body: &str) -> String {
    if let Ok(Value::Object(o)) = serde_json::from_str::<Value>(body) {
        for k in ["error", "message", "reason"] {
            if let Some(Value::String(s)) = o.get(k) {
                return s.clone();
            }
        }
    }
    let t = body.trim();
    let mut s: String = t.chars().take(300).collect();
    if t.chars().count() > 300 {
        s.push('…');
    }
    if s.is_empty() {
        "(empty body)".into()
    } else {
        s
    }
}

/// The body as JSON if it is JSON, else as a string (for `--json` output).
fn body_value(body: &str) -> Value {
    serde_json::from_str(body).unwrap_or_else(|_| json!(body.trim()))
}

/// Ask on the terminal (stderr, so `--json` output stays clean) unless `--force`.
fn confirm(ctx: &Ctx, question: &str) -> Result<(), CtlError> {
    if ctx.inv.force {
        return Ok(());
    }
    eprint!("{question} [y/N]: ");
    let _ = std::io::stderr().flush();
    let mut line = String::new();
    let n = std::io::stdin()
        .lock()
        .read_line(&mut line)
        .map_err(|e| CtlError::Aborted(format!("cannot read the answer: {e}")))?;
    if n == 0 {
        return Err(CtlError::Aborted(
            "no answer (standard input closed); use --force to skip the question".into(),
        ));
    }
    match line.trim().to_ascii_lowercase().as_str() {
        "y" | "yes" => Ok(()),
        _ => Err(CtlError::Aborted("not confirmed".into())),
    }
}

/// One request to `member`'s API. 401 and 403 are errors here (exit 6); every
/// other status is the caller's to judge. `Err(Failed)`: unreachable.
pub(super) fn api(
    ctx: &Ctx,
    member: &str,
    api_url: &str,
    method: &str,
    path: &str,
    body: Option<&Value>,
    timeout: Duration,
) -> Result<Response, CtlError> {
    if api_url.is_empty() {
        return Err(CtlError::Failed(format!(
            "{member} publishes no api_url in its member key"
        )));
    }
    let text = body.map(|b| b.to_string());
    let r = http::request_with(
        api_url,
        method,
        path,
        text.as_deref(),
        ctx.creds.as_ref(),
        ctx.tls.as_ref().map_err(String::as_str),
        timeout,
    )
    .map_err(|e| CtlError::Failed(format!("{member}: {e}")))?;
    match r.status {
        401 => Err(CtlError::Auth(format!(
            "{member} ({api_url}): {method} {path}: credentials rejected: set [api] \
             username/password in {}{}",
            ctx.inv.config.display(),
            if ctx.creds.is_none() {
                " (none are set there)"
            } else {
                " (the ones there were refused)"
            }
        ))),
        403 => Err(CtlError::Auth(format!(
            "{member} ({api_url}): {method} {path}: forbidden: {}",
            server_says(&r.body)
        ))),
        _ => Ok(r),
    }
}

fn ok(r: &Response) -> bool {
    (200..300).contains(&r.status)
}

fn unknown_member(s: &Snapshot, name: &str) -> CtlError {
    let names = s.member_names();
    CtlError::Failed(format!(
        "unknown member {name:?}: the members of {} are {}",
        s.scope,
        if names.is_empty() {
            "(none)".to_string()
        } else {
            names.join(", ")
        }
    ))
}

/// `(name, api_url)` of every member with an API, the leader first (patronictl's
/// order for requests any member can serve).
fn leader_first(s: &Snapshot) -> Vec<(String, String)> {
    let leader = s.leader_name();
    let mut v: Vec<(String, String)> = s
        .view
        .members
        .iter()
        .filter(|m| !m.info.api_url.is_empty())
        .map(|m| (m.name.clone(), m.info.api_url.clone()))
        .collect();
    v.sort_by_key(|(n, _)| (Some(n.as_str()) != leader, n.clone()));
    v
}

/// Send to the members leader first until one answers; an unreachable member is
/// skipped, an answer (any status) is final.
fn to_any_member(
    ctx: &Ctx,
    s: &Snapshot,
    method: &str,
    path: &str,
    body: &Value,
) -> Result<(String, Response), CtlError> {
    let mut unreachable = Vec::new();
    for (name, url) in leader_first(s) {
        match api(ctx, &name, &url, method, path, Some(body), API_TIMEOUT) {
            Ok(r) => return Ok((name, r)),
            Err(CtlError::Failed(e)) => unreachable.push(e),
            Err(e) => return Err(e),
        }
    }
    Err(CtlError::Failed(if unreachable.is_empty() {
        format!("no member of {} publishes an API address", s.scope)
    } else {
        format!("no member's API answered: {}", unreachable.join("; "))
    }))
}

fn list(ctx: &mut Ctx, topology: bool) -> Result<(), CtlError> {
    let Some(every) = ctx.inv.watch else {
        let s = ctx.snapshot()?;
        out!("{}", list_text(ctx, &s, topology));
        return Ok(());
    };
    // `--watch`: until interrupted (SIGINT ends the process). A read that fails
    // is said and the watch goes on: an etcd election or a failover is what an
    // operator watches for. Each read is bounded as a single `list` is.
    use std::io::IsTerminal as _;
    let clear = !ctx.inv.json && std::io::stdout().is_terminal();
    loop {
        let started = Instant::now();
        let shot = ctx.snapshot();
        let mut text = String::new();
        if clear {
            // The screen cleared and the cursor home, as `watch(1)` does.
            text.push_str("\x1b[H\x1b[2J");
        }
        if !ctx.inv.json {
            text.push_str(&format!(
                "{}  (every {} s; Ctrl-C ends)\n",
                crate::clock::rfc3339_utc(crate::clock::realtime()),
                every.as_secs_f64()
            ));
        }
        match shot {
            Ok(s) => text.push_str(&list_text(ctx, &s, topology)),
            Err(e) if ctx.inv.json => {
                text.push_str(&format!("{}\n", json!({ "error": e.to_string() })));
            }
            Err(e) => text.push_str(&format!("{e}\n")),
        }
        // A reader that went away (`| head`) ends the watch with exit 0 (`out`).
        super::out(&text);
        sleep(every.saturating_sub(started.elapsed()));
    }
}

/// `list`'s or `topology`'s output: a table, or one line of JSON.
fn list_text(ctx: &Ctx, s: &Snapshot, topology: bool) -> String {
    if ctx.inv.json {
        let v = if topology {
            render::topology_json(s)
        } else {
            render::list_json(s)
        };
        format!("{v}\n")
    } else {
        render::list_table(s, topology)
    }
}

/// patronictl's `dsn`: `host=H port=P` of the named member, of the leader
/// (default), of the running replica least behind (`--role replica`), or of the
/// leader else any running member (`--role any`), for `psql "$(tenure ctl dsn)
/// dbname=app"`. From the member keys' `conn_url`; no credentials.
fn dsn(ctx: &mut Ctx, member: Option<String>, role: Option<RoleFilter>) -> Result<(), CtlError> {
    let s = ctx.snapshot()?;
    let rows = render::rows(&s);
    let running = |r: &&render::Row| r.state == "running" && !r.host.is_empty();
    let behind = |r: &&render::Row| match r.lag {
        render::Lag::Leader => 0,
        render::Lag::Bytes(b) => b,
        render::Lag::Unknown => u64::MAX,
    };
    let pick = match (&member, role.unwrap_or(RoleFilter::Primary)) {
        (Some(m), _) => rows
            .iter()
            .find(|r| &r.name == m)
            .ok_or_else(|| CtlError::Failed(format!("no member {m:?} in scope {}", s.scope)))?,
        (None, RoleFilter::Primary) => rows
            .iter()
            .find(|r| r.is_leader)
            .ok_or_else(|| CtlError::Failed(format!("scope {} has no leader now", s.scope)))?,
        (None, RoleFilter::Replica) => rows
            .iter()
            .filter(|r| !r.is_leader)
            .filter(running)
            .min_by_key(behind)
            .ok_or_else(|| {
                CtlError::Failed(format!("scope {} has no running replica now", s.scope))
            })?,
        (None, RoleFilter::Any) => rows
            .iter()
            .find(|r| r.is_leader && !r.host.is_empty())
            .or_else(|| rows.iter().filter(running).min_by_key(behind))
            .ok_or_else(|| {
                CtlError::Failed(format!("scope {} has no running member now", s.scope))
            })?,
    };
    let Some(port) = pick.port.filter(|_| !pick.host.is_empty()) else {
        return Err(CtlError::Failed(format!(
            "member {} publishes no connection address (conn_url)",
            pick.name
        )));
    };
    let text = format!(
        "host={} port={port}",
        crate::pg::conf::conninfo_value(&pick.host)
    );
    if ctx.inv.json {
        print_json(&json!({
            "member": pick.name, "host": pick.host, "port": port, "dsn": text
        }));
    } else {
        outln!("{text}");
    }
    Ok(())
}

fn history(ctx: &mut Ctx) -> Result<(), CtlError> {
    let s = ctx.snapshot()?;
    if ctx.inv.json {
        print_json(&render::history_json(&s.view.history));
    } else {
        out!("{}", render::history_table(&s.view.history));
    }
    Ok(())
}

fn show_config(ctx: &mut Ctx) -> Result<(), CtlError> {
    let s = ctx.snapshot()?;
    let Some(raw) = s.view.config.as_deref() else {
        return Err(CtlError::Failed(format!(
            "there is no config key at {}config (the cluster has not bootstrapped, or its \
             keys were removed)",
            ctx.prefix()
        )));
    };
    match serde_json::from_str::<Value>(raw) {
        Ok(v) if ctx.inv.json => print_json(&v),
        Ok(v) => outln!(
            "{}",
            serde_json::to_string_pretty(&v).unwrap_or_else(|_| raw.to_string())
        ),
        Err(e) => {
            return Err(CtlError::Failed(format!(
                "the config key at {}config is not JSON ({e}): {raw:?}; every agent keeps \
                 its last good configuration",
                ctx.prefix()
            )));
        }
    }
    Ok(())
}

fn version(ctx: &mut Ctx) -> Result<(), CtlError> {
    let s = ctx.snapshot()?;
    let mut members = Vec::new();
    let mut failed = Vec::new();
    let mut names: Vec<(String, String)> = s
        .view
        .members
        .iter()
        .map(|m| (m.name.clone(), m.info.api_url.clone()))
        .collect();
    names.sort();
    for (name, url) in names {
        let answer = api(ctx, &name, &url, "GET", "/patroni", None, API_TIMEOUT).and_then(|r| {
            if r.status != 200 && r.status != 503 {
                return Err(CtlError::Failed(format!(
                    "{name}: GET /patroni answered {}: {}",
                    r.status,
                    server_says(&r.body)
                )));
            }
            serde_json::from_str::<Value>(&r.body)
                .map_err(|e| CtlError::Failed(format!("{name}: GET /patroni: not JSON ({e})")))
        });
        match answer {
            Ok(v) => {
                let ver = v
                    .pointer("/patroni/version")
                    .and_then(Value::as_str)
                    .map(str::to_string);
                let pg = v.get("server_version").and_then(Value::as_u64);
                members.push(json!({
                    "name": name,
                    "version": ver,
                    "server_version": pg,
                    "postgresql": pg.map(render::pg_version_text),
                    "error": null,
                }));
            }
            Err(e) => {
                failed.push(e.to_string());
                members.push(json!({
                    "name": name, "version": null, "server_version": null,
                    "postgresql": null, "error": e.to_string(),
                }));
            }
        }
    }
    if ctx.inv.json {
        print_json(&json!({
            "ctl": env!("CARGO_PKG_VERSION"),
            "ctl_build": VERSION,
            "members": members,
        }));
    } else {
        outln!("tenure ctl {VERSION}");
        for m in &members {
            let name = m["name"].as_str().unwrap_or("?");
            match m["error"].as_str() {
                Some(e) => outln!("{name}: error: {e}"),
                None => outln!(
                    "{name}: tenure {} PostgreSQL {}",
                    m["version"].as_str().unwrap_or("unknown"),
                    m["postgresql"].as_str().unwrap_or("not running")
                ),
            }
        }
    }
    if failed.is_empty() {
        Ok(())
    } else {
        Err(CtlError::Failed(format!(
            "{} member(s) could not be asked",
            failed.len()
        )))
    }
}

/// Wait until the leader key names `want` (or, with `None`, anyone but `old`).
fn wait_for_leader(
    ctx: &mut Ctx,
    old: Option<&str>,
    want: Option<&str>,
) -> Result<Snapshot, CtlError> {
    let t0 = Instant::now();
    loop {
        if let Ok(s) = ctx.snapshot() {
            let now = s.leader_name();
            let done = match want {
                Some(w) => now == Some(w),
                None => now.is_some() && now != old,
            };
            if done {
                return Ok(s);
            }
        }
        if t0.elapsed() >= ctx.inv.timeout {
            return Err(CtlError::Failed(format!(
                "the request was accepted, but after {:.0} s the leader key does not name {} \
                 yet: see `tenure ctl list` and the agents' logs",
                ctx.inv.timeout.as_secs_f64(),
                want.unwrap_or("a new leader")
            )));
        }
        sleep(POLL);
    }
}

fn print_outcome(ctx: &Ctx, action: &str, member: &str, r: &Response) {
    if !ctx.inv.json {
        outln!(
            "{} {action}: {member} answered {}: {}",
            crate::clock::rfc3339_utc(crate::clock::realtime()),
            r.status,
            server_says(&r.body)
        );
    }
}

fn switchover(
    ctx: &mut Ctx,
    leader: Option<String>,
    candidate: Option<String>,
    scheduled: Option<String>,
) -> Result<(), CtlError> {
    let s = ctx.snapshot()?;
    let Some(current) = s.leader_name().map(str::to_string) else {
        return Err(CtlError::Failed(format!(
            "cluster {} has no leader: a switchover needs one (use failover --candidate NAME)",
            s.scope
        )));
    };
    if let Some(l) = &leader
        && *l != current
    {
        return Err(CtlError::Failed(format!(
            "{l} is not the leader of cluster {} (the leader is {current})",
            s.scope
        )));
    }
    let mut candidates: Vec<String> = s
        .view
        .members
        .iter()
        .filter(|m| m.name != current && !m.info.tags.nofailover)
        .map(|m| m.name.clone())
        .collect();
    candidates.sort();
    if candidates.is_empty() {
        return Err(CtlError::Failed(format!(
            "no candidate to switch over to in {}: every other member is absent or has \
             nofailover set",
            s.scope
        )));
    }
    if let Some(c) = &candidate {
        check_candidate(&s, c, &current)?;
    }
    if scheduled.is_some() && s.paused() {
        return Err(CtlError::Failed(
            "cannot schedule a switchover while the cluster is paused (resume first)".into(),
        ));
    }
    if !ctx.inv.json {
        outln!("Current cluster topology");
        out!("{}", render::list_table(&s, false));
    }
    let to = candidate
        .as_deref()
        .map(|c| format!(" to {c}"))
        .unwrap_or_else(|| format!(" to one of {}", candidates.join(", ")));
    match &scheduled {
        Some(at) => confirm(
            ctx,
            &format!(
                "Are you sure you want to schedule a switchover of cluster {} at {at}{to}, \
                 demoting current leader {current}?",
                s.scope
            ),
        )?,
        None => confirm(
            ctx,
            &format!(
                "Are you sure you want to switchover cluster {}{to}, demoting current leader \
                 {current}?",
                s.scope
            ),
        )?,
    }
    let mut body = Map::new();
    body.insert("leader".into(), json!(current));
    if let Some(c) = &candidate {
        body.insert("candidate".into(), json!(c));
    }
    if let Some(at) = &scheduled {
        body.insert("scheduled_at".into(), json!(at));
    }
    let body = Value::Object(body);
    let url = s
        .member(&current)
        .map(|m| m.info.api_url.clone())
        .unwrap_or_default();
    let timeout = ctx.inv.timeout.max(API_TIMEOUT);
    let r = api(
        ctx,
        &current,
        &url,
        "POST",
        "/switchover",
        Some(&body),
        timeout,
    )?;
    if !ok(&r) {
        return Err(CtlError::Failed(format!(
            "switchover refused by {current} ({}): {}",
            r.status,
            server_says(&r.body)
        )));
    }
    print_outcome(ctx, "switchover", &current, &r);
    let after = if scheduled.is_some() {
        None
    } else {
        Some(wait_for_leader(ctx, Some(&current), candidate.as_deref())?)
    };
    if ctx.inv.json {
        print_json(&json!({
            "action": "switchover",
            "leader": current,
            "candidate": candidate,
            "scheduled_at": scheduled,
            "status": r.status,
            "response": body_value(&r.body),
            "new_leader": after.as_ref().and_then(|a| a.leader_name()),
        }));
    } else if let Some(a) = &after {
        out!("{}", render::list_table(a, false));
    }
    Ok(())
}

/// The candidate exists, is not the leader, and may lead.
fn check_candidate(s: &Snapshot, c: &str, leader: &str) -> Result<(), CtlError> {
    let Some(m) = s.member(c) else {
        return Err(unknown_member(s, c));
    };
    if c == leader {
        return Err(CtlError::Failed(format!("{c} is already the leader")));
    }
    if m.info.tags.nofailover {
        return Err(CtlError::Failed(format!(
            "{c} has the nofailover tag: it never takes the leader key"
        )));
    }
    Ok(())
}

fn failover(ctx: &mut Ctx, candidate: String, leader: Option<String>) -> Result<(), CtlError> {
    let s = ctx.snapshot()?;
    let current = s.leader_name().map(str::to_string);
    if let Some(l) = &leader
        && Some(l) != current.as_ref()
    {
        return Err(CtlError::Failed(format!(
            "{l} is not the leader of cluster {} (the leader is {})",
            s.scope,
            current.as_deref().unwrap_or("nobody")
        )));
    }
    check_candidate(&s, &candidate, current.as_deref().unwrap_or(""))?;
    if !ctx.inv.json {
        outln!("Current cluster topology");
        out!("{}", render::list_table(&s, false));
    }
    let demote = current
        .as_deref()
        .map(|l| format!(", demoting current leader {l}"))
        .unwrap_or_default();
    confirm(
        ctx,
        &format!(
            "Are you sure you want to failover cluster {} to {candidate}{demote}?",
            s.scope
        ),
    )?;
    let mut body = Map::new();
    body.insert("candidate".into(), json!(candidate));
    if let Some(l) = &leader {
        body.insert("leader".into(), json!(l));
    }
    let body = Value::Object(body);
    // Patroni's order: the leader's API while there is one, else the candidate's.
    let via = current
        .clone()
        .filter(|l| s.member(l).is_some_and(|m| !m.info.api_url.is_empty()))
        .unwrap_or_else(|| candidate.clone());
    let url = s
        .member(&via)
        .map(|m| m.info.api_url.clone())
        .unwrap_or_default();
    let timeout = ctx.inv.timeout.max(API_TIMEOUT);
    let (via, r, fell_back) = match api(ctx, &via, &url, "POST", "/failover", Some(&body), timeout)
    {
        Ok(r) => (via, r, false),
        // No answer from the leader's API (a crashed host): Patroni's fallback, through
        // the candidate's API (super::fallback).
        Err(CtlError::Failed(why)) if via != candidate => {
            let r = super::fallback::through_candidate(
                ctx, &s, &via, &candidate, &body, &why, timeout,
            )?;
            (candidate.clone(), r, true)
        }
        Err(e) => return Err(e),
    };
    let accepted = ok(&r) || (fell_back && super::fallback::pending(&r));
    if !accepted {
        return Err(CtlError::Failed(format!(
            "failover refused by {via} ({}): {}",
            r.status,
            server_says(&r.body)
        )));
    }
    print_outcome(ctx, "failover", &via, &r);
    let after = wait_for_leader(ctx, current.as_deref(), Some(&candidate))?;
    if ctx.inv.json {
        print_json(&json!({
            "action": "failover",
            "leader": current,
            "candidate": candidate,
            "via": via,
            "status": r.status,
            "response": body_value(&r.body),
            "new_leader": after.leader_name(),
        }));
    } else {
        out!("{}", render::list_table(&after, false));
    }
    Ok(())
}

/// Does a member's status JSON report maintenance mode? (Patroni: `"pause": true`.)
fn reports_pause(v: &Value) -> bool {
    v.get("pause").and_then(Value::as_bool).unwrap_or(false)
}

fn toggle_pause(ctx: &mut Ctx, pause: bool, wait: bool) -> Result<(), CtlError> {
    let s = ctx.snapshot()?;
    if s.paused() == pause {
        return Err(CtlError::Failed(format!(
            "cluster {} is {}",
            s.scope,
            if pause {
                "already paused"
            } else {
                "not paused"
            }
        )));
    }
    let (via, r) = to_any_member(ctx, &s, "PATCH", "/config", &json!({ "pause": pause }))?;
    if !ok(&r) {
        return Err(CtlError::Failed(format!(
            "{via} refused PATCH /config ({}): {}",
            r.status,
            server_says(&r.body)
        )));
    }
    let word = if pause { "paused" } else { "resumed" };
    if !ctx.inv.json {
        outln!("Success: cluster management is {word} (through {via})");
    }
    let mut seen_by = Vec::new();
    if wait {
        let mut last_shown = Vec::new();
        wait_for_members(
            ctx,
            leader_first(&s),
            |v| reports_pause(v) == pause,
            |waiting| {
                let names: Vec<String> = waiting.iter().map(|(n, _)| n.clone()).collect();
                if names != last_shown && !ctx.inv.json {
                    outln!("Waiting for {} to report it", names.join(", "));
                    last_shown = names;
                }
            },
            |name| seen_by.push(name.to_string()),
            &format!("do not report the cluster {word} yet"),
        )?;
        if !ctx.inv.json {
            outln!("Every member reports the cluster {word}");
        }
    }
    if ctx.inv.json {
        print_json(&json!({
            "action": if pause { "pause" } else { "resume" },
            "paused": pause,
            "via": via,
            "status": r.status,
            "waited": wait,
            "reported_by": seen_by,
        }));
    }
    Ok(())
}

/// The members named (all when none), checked to exist; `(name, api_url)`.
fn pick_members(s: &Snapshot, names: &[String]) -> Result<Vec<(String, String)>, CtlError> {
    if names.is_empty() {
        if s.view.members.is_empty() {
            return Err(CtlError::Failed(format!(
                "cluster {} has no members",
                s.scope
            )));
        }
        let mut v: Vec<(String, String)> = s
            .view
            .members
            .iter()
            .map(|m| (m.name.clone(), m.info.api_url.clone()))
            .collect();
        v.sort();
        return Ok(v);
    }
    names
        .iter()
        .map(|n| {
            s.member(n)
                .map(|m| (m.name.clone(), m.info.api_url.clone()))
                .ok_or_else(|| unknown_member(s, n))
        })
        .collect()
}

/// The leader restarted after the replicas (each restart is done before the
/// next is asked for): a replica that restarts after its primary raised
/// `max_connections` or one of the four other settings a hot standby needs as
/// high pauses its replay until its own restart, while one restarted first starts
/// with the new values, or with the primary's (`pg::hotstandby`) when lowering.
pub(super) fn leader_last(members: &mut [(String, String)], leader: Option<&str>) {
    members.sort_by_key(|(n, _)| Some(n.as_str()) == leader);
}

/// Send `method path body` to each member; print a line per member; `Err` when
/// any failed (after all were tried). `judge` turns a status into the line.
fn per_member(
    ctx: &Ctx,
    action: &str,
    members: &[(String, String)],
    (method, path): (&str, &str),
    body: &Value,
    timeout: Duration,
    judge: impl Fn(&str, &Response) -> Result<String, String>,
) -> Result<(), CtlError> {
    let mut results = Vec::new();
    let mut failures = Vec::new();
    for (name, url) in members {
        let (line, status, response) = match api(ctx, name, url, method, path, Some(body), timeout)
        {
            Ok(r) => match judge(name, &r) {
                Ok(l) => (Ok(l), Some(r.status), body_value(&r.body)),
                Err(l) => (Err(l), Some(r.status), body_value(&r.body)),
            },
            Err(e @ CtlError::Auth(_)) => return Err(e),
            Err(e) => (Err(e.to_string()), None, Value::Null),
        };
        match &line {
            Ok(l) if !ctx.inv.json => outln!("{l}"),
            Err(l) if !ctx.inv.json => outln!("Failed: {l}"),
            _ => {}
        }
        if let Err(l) = &line {
            failures.push(l.clone());
        }
        results.push(json!({
            "member": name,
            "ok": line.is_ok(),
            "status": status,
            "response": response,
        }));
    }
    if ctx.inv.json {
        print_json(&json!({ "action": action, "results": results }));
    }
    if failures.is_empty() {
        Ok(())
    } else {
        Err(CtlError::Failed(format!(
            "{action} failed on {} of {} member(s)",
            failures.len(),
            members.len()
        )))
    }
}

fn restart(
    ctx: &mut Ctx,
    names: Vec<String>,
    pending: bool,
    role: Option<RoleFilter>,
    pg_version: Option<String>,
    scheduled: Option<String>,
) -> Result<(), CtlError> {
    let s = ctx.snapshot()?;
    // As the members answer (500 while paused), before the confirmation.
    if scheduled.is_some() && s.paused() {
        return Err(CtlError::Failed(
            "cannot schedule a restart while the cluster is paused (resume first)".into(),
        ));
    }
    let mut members = pick_members(&s, &names)?;
    let leader = s.leader_name();
    match role {
        Some(RoleFilter::Primary) => members.retain(|(n, _)| Some(n.as_str()) == leader),
        Some(RoleFilter::Replica) => members.retain(|(n, _)| Some(n.as_str()) != leader),
        Some(RoleFilter::Any) | None => {}
    }
    if members.is_empty() {
        return Err(CtlError::Failed(
            "no member with that role among those named".into(),
        ));
    }
    leader_last(&mut members, leader);
    let list: Vec<&str> = members.iter().map(|(n, _)| n.as_str()).collect();
    let when = scheduled
        .as_deref()
        .map(|t| format!(" at {t}"))
        .unwrap_or_default();
    confirm(
        ctx,
        &format!(
            "Are you sure you want to restart members {}{when}?",
            list.join(", ")
        ),
    )?;
    let mut body = Map::new();
    if pending {
        body.insert("restart_pending".into(), json!(true));
    }
    match role {
        Some(RoleFilter::Primary) => {
            body.insert("role".into(), json!("primary"));
        }
        Some(RoleFilter::Replica) => {
            body.insert("role".into(), json!("replica"));
        }
        _ => {}
    }
    if let Some(v) = &pg_version {
        body.insert("postgres_version".into(), json!(v));
    }
    if let Some(t) = &scheduled {
        body.insert("schedule".into(), json!(t));
    }
    let timeout = ctx.inv.timeout.max(API_TIMEOUT);
    per_member(
        ctx,
        "restart",
        &members,
        ("POST", "/restart"),
        &Value::Object(body),
        timeout,
        |name, r| match r.status {
            200 => Ok(format!("Success: restart on member {name}")),
            202 => Ok(format!("Success: restart scheduled on member {name}")),
            409 => Err(format!(
                "another restart is already scheduled on member {name} (tenure ctl flush \
                 restart {name} cancels it)"
            )),
            422 => Err(format!(
                "restart for member {name}: {} (its clock decides)",
                server_says(&r.body)
            )),
            code => Err(format!(
                "restart for member {name}, status code={code}, ({})",
                server_says(&r.body)
            )),
        },
    )
}

/// `flush restart [MEMBER...]`: `DELETE /restart` on each member named, or on
/// every member whose key shows a scheduled restart (Patroni's `flush`). A member
/// that answers 404 had none (it ran, or was cancelled, since the read).
fn flush_restart(ctx: &mut Ctx, names: Vec<String>) -> Result<(), CtlError> {
    let s = ctx.snapshot()?;
    let mut members = pick_members(&s, &names)?;
    if names.is_empty() {
        let rows = render::rows(&s);
        let scheduled = |n: &str| {
            rows.iter()
                .any(|r| r.name == n && r.scheduled_restart.is_some())
        };
        members.retain(|(n, _)| scheduled(n));
        if members.is_empty() {
            if ctx.inv.json {
                print_json(&json!({ "action": "flush restart", "results": [] }));
            } else {
                outln!("No scheduled restart on any member of {}", s.scope);
            }
            return Ok(());
        }
    }
    per_member(
        ctx,
        "flush restart",
        &members,
        ("DELETE", "/restart"),
        &json!({}),
        API_TIMEOUT,
        |name, r| match r.status {
            200 => Ok(format!(
                "Success: scheduled restart on member {name} cancelled"
            )),
            404 => Ok(format!("No scheduled restart on member {name}")),
            code => Err(format!(
                "flush restart for member {name}, status code={code}, ({})",
                server_says(&r.body)
            )),
        },
    )
}

/// `flush switchover`: `DELETE /switchover` through the leader's API, else the
/// next member's that answers (any member deletes the request with a
/// compare-and-set on the key as it reads it). Never written here (module rule).
fn flush_switchover(ctx: &mut Ctx) -> Result<(), CtlError> {
    let s = ctx.snapshot()?;
    let Some(at) = s
        .view
        .failover
        .as_ref()
        .and_then(|f| f.scheduled_text.clone())
    else {
        if ctx.inv.json {
            print_json(&json!({ "action": "flush switchover", "deleted": false }));
        } else {
            outln!("No pending scheduled switchover in {}", s.scope);
        }
        return Ok(());
    };
    let mut tried = Vec::new();
    for (name, url) in leader_first(&s) {
        let r = match api(ctx, &name, &url, "DELETE", "/switchover", None, API_TIMEOUT) {
            Ok(r) => r,
            Err(CtlError::Failed(e)) => {
                tried.push(e);
                continue;
            }
            Err(e) => return Err(e),
        };
        let line = match r.status {
            200 => format!(
                "Success: the switchover scheduled at {} was cancelled (by {name})",
                render::printable(&at)
            ),
            404 => format!(
                "No pending scheduled switchover in {} (it is gone since the read)",
                s.scope
            ),
            // That member could not reach etcd: another may.
            503 => {
                tried.push(format!("{name}: {} ({})", r.status, server_says(&r.body)));
                continue;
            }
            409 => {
                return Err(CtlError::Failed(format!(
                    "the failover key changed while {name} deleted it: nothing deleted; look \
                     again (tenure ctl list)"
                )));
            }
            code => {
                return Err(CtlError::Failed(format!(
                    "flush switchover: {name} answered {code} ({})",
                    server_says(&r.body)
                )));
            }
        };
        if ctx.inv.json {
            print_json(&json!({
                "action": "flush switchover",
                "member": name,
                "scheduled_at": at,
                "deleted": r.status == 200,
                "status": r.status,
                "response": body_value(&r.body),
            }));
        } else {
            outln!("{line}");
        }
        return Ok(());
    }
    Err(CtlError::Failed(format!(
        "no member could cancel the switchover scheduled at {at}: {}",
        if tried.is_empty() {
            "no member publishes an api_url".to_string()
        } else {
            tried.join("; ")
        }
    )))
}

fn reload(ctx: &mut Ctx, names: Vec<String>) -> Result<(), CtlError> {
    let s = ctx.snapshot()?;
    let members = pick_members(&s, &names)?;
    per_member(
        ctx,
        "reload",
        &members,
        ("POST", "/reload"),
        &json!({}),
        API_TIMEOUT,
        |name, r| match r.status {
            200 => Ok(format!("No changes to apply on member {name}")),
            202 => Ok(format!(
                "Reload request received for member {name}; it is applied in the agent's next \
                 loop"
            )),
            code => Err(format!(
                "reload for member {name}, status code={code}, ({})",
                server_says(&r.body)
            )),
        },
    )
}

fn reinit(ctx: &mut Ctx, names: Vec<String>, wait: bool) -> Result<(), CtlError> {
    let s = ctx.snapshot()?;
    let members = pick_members(&s, &names)?;
    let list: Vec<&str> = members.iter().map(|(n, _)| n.as_str()).collect();
    confirm(
        ctx,
        &format!(
            "Are you sure you want to reinitialize members {}? Their data directories are \
             moved aside and rebuilt from the leader",
            list.join(", ")
        ),
    )?;
    let force = ctx.inv.force;
    per_member(
        ctx,
        "reinitialize",
        &members,
        ("POST", "/reinitialize"),
        &json!({ "force": force }),
        API_TIMEOUT,
        |name, r| match r.status {
            200 | 202 => Ok(format!("Success: reinitialize for member {name}")),
            code => Err(format!(
                "reinitialize for member {name}, status code={code}, ({})",
                server_says(&r.body)
            )),
        },
    )?;
    if !wait {
        return Ok(());
    }
    let json = ctx.inv.json;
    wait_for_members(
        ctx,
        members,
        |v| v.get("state").and_then(Value::as_str) == Some("running"),
        |_| {},
        |name| {
            if !json {
                outln!("Reinitialize is completed on: {name}");
            }
        },
        "not running yet",
    )?;
    Ok(())
}

/// Poll `GET /patroni` of every member in `waiting` (`(name, api_url)`) every
/// `POLL` until `done` holds for its status, reporting each once through
/// `reached`; `round` sees who is still waited for before each pass. Past
/// `--timeout` the error names those left: "after N s, pg2, pg3 {what}".
fn wait_for_members(
    ctx: &Ctx,
    mut waiting: Vec<(String, String)>,
    done: impl Fn(&Value) -> bool,
    mut round: impl FnMut(&[(String, String)]),
    mut reached: impl FnMut(&str),
    what: &str,
) -> Result<(), CtlError> {
    let t0 = Instant::now();
    while !waiting.is_empty() {
        round(&waiting);
        let mut still = Vec::new();
        for (name, url) in waiting {
            let ok = api(ctx, &name, &url, "GET", "/patroni", None, API_TIMEOUT)
                .ok()
                .and_then(|r| serde_json::from_str::<Value>(&r.body).ok())
                .is_some_and(|v| done(&v));
            if ok {
                reached(&name);
            } else {
                still.push((name, url));
            }
        }
        waiting = still;
        if waiting.is_empty() {
            break;
        }
        if t0.elapsed() >= ctx.inv.timeout {
            let names: Vec<&str> = waiting.iter().map(|(n, _)| n.as_str()).collect();
            return Err(CtlError::Failed(format!(
                "after {:.0} s, {} {what}",
                ctx.inv.timeout.as_secs_f64(),
                names.join(", ")
            )));
        }
        sleep(POLL);
    }
    Ok(())
}

/// A `--set` value: JSON when it parses (`10`, `true`, `null`, `{"a":1}`), else the
/// text as a string (`--set member_slots_ttl=2h`).
pub fn set_value(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.to_string()))
}

/// The parts of a `--set` key: split at the dots, except a PostgreSQL setting's
/// name, which may have one itself (`postgresql.parameters.pg_stat_statements.max`).
pub fn set_path(k: &str) -> Vec<&str> {
    match k.strip_prefix("postgresql.parameters.") {
        Some(name) => vec!["postgresql", "parameters", name],
        None => k.split('.').collect(),
    }
}

/// The patch object for `--set a.b=v ...`: nested objects by the dotted key.
pub fn patch_of(set: &[(String, String)]) -> Map<String, Value> {
    fn insert(map: &mut Map<String, Value>, parts: &[&str], v: Value) {
        match parts {
            [] => {}
            [last] => {
                map.insert(last.to_string(), v);
            }
            [first, rest @ ..] => {
                let slot = map
                    .entry(first.to_string())
                    .or_insert_with(|| Value::Object(Map::new()));
                if !slot.is_object() {
                    *slot = Value::Object(Map::new());
                }
                if let Value::Object(m) = slot {
                    insert(m, rest, v);
                }
            }
        }
    }
    let mut root = Map::new();
    for (k, v) in set {
        insert(&mut root, &set_path(k), set_value(v));
    }
    root
}

/// Patroni's `patch_config`: merge `patch` into `config`; `null` removes a key,
/// objects merge recursively, anything else replaces.
pub fn apply_patch(config: &mut Map<String, Value>, patch: &Map<String, Value>) {
    for (k, v) in patch {
        match v {
            Value::Null => {
                config.remove(k);
            }
            Value::Object(p) => {
                if let Some(Value::Object(c)) = config.get_mut(k) {
                    apply_patch(c, p);
                } else {
                    let mut fresh = Map::new();
                    apply_patch(&mut fresh, p);
                    config.insert(k.clone(), Value::Object(fresh));
                }
            }
            other => {
                config.insert(k.clone(), other.clone());
            }
        }
    }
}

/// DESIGN S6 for the merged configuration, as each member would check it: with
/// its published watchdog timeout `W` (or none), and the `M`, `B`, `P` of the file
/// ctl was given (the agents check again with their own, and so does the API).
pub fn check_timing(
    cfg: &crate::config::Config,
    merged: &str,
    members: &[(String, Option<u32>)],
) -> Result<(), String> {
    if members.is_empty() {
        return cfg.apply_dynamic(merged).map(|_| ());
    }
    for (name, w) in members {
        let r = match w {
            Some(w) => cfg.apply_dynamic_for(merged, Some(*w)),
            None => cfg.apply_dynamic(merged),
        };
        if let Err(e) = r {
            let armed = match w {
                Some(w) => format!("its watchdog W = {w} s"),
                None => "no watchdog".into(),
            };
            return Err(format!("for {name} ({armed}): {e}"));
        }
    }
    Ok(())
}

/// A JSON object from `path` (`-`: stdin), for `--apply` and `--replace`. Errors
/// name the file and, for JSON, the line and column.
fn read_object(path: &std::path::Path, what: &str) -> Result<Map<String, Value>, CtlError> {
    let text = if path.as_os_str() == "-" {
        let mut t = String::new();
        std::io::Read::read_to_string(&mut std::io::stdin(), &mut t)
            .map_err(|e| CtlError::Usage(format!("{what} -: cannot read stdin: {e}")))?;
        t
    } else {
        std::fs::read_to_string(path)
            .map_err(|e| CtlError::Usage(format!("{what} {}: {e}", path.display())))?
    };
    match serde_json::from_str::<Value>(&text) {
        Ok(Value::Object(o)) => Ok(o),
        Ok(other) => Err(CtlError::Usage(format!(
            "{what} {}: expected a JSON object, found {other}",
            path.display()
        ))),
        Err(e) => Err(CtlError::Usage(format!(
            "{what} {}: not JSON: {e}",
            path.display()
        ))),
    }
}

/// The config key in the operator's editor (`$VISUAL`, `$EDITOR`, else `vi`; run
/// through `sh` as git runs it, so `code -w` works): the value as edited.
/// Nothing is sent when the editor fails or the result is not a JSON object.
fn edit_in_editor(current: &Map<String, Value>) -> Result<Map<String, Value>, CtlError> {
    use std::io::IsTerminal;
    use std::os::unix::fs::OpenOptionsExt;
    let chosen = ["VISUAL", "EDITOR"]
        .iter()
        .filter_map(|k| std::env::var(k).ok())
        .find(|e| !e.trim().is_empty());
    // `vi` only for a person at a terminal: a script that ran a bare
    // `edit-config` gets an error, not an editor waiting on no one.
    if chosen.is_none() && !std::io::stdin().is_terminal() {
        return Err(CtlError::Usage(
            "edit-config without --set, --pg, --apply or --replace opens an editor: stdin \
             is not a terminal and neither VISUAL nor EDITOR is set"
                .into(),
        ));
    }
    let editor = chosen.unwrap_or_else(|| "vi".to_string());
    let path = std::env::temp_dir().join(format!(
        "tenure-config-{}-{}.json",
        std::process::id(),
        crate::clock::realtime().as_nanos()
    ));
    let text = serde_json::to_string_pretty(&Value::Object(current.clone()))
        .unwrap_or_else(|_| "{}".into());
    let written = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)
        .and_then(|mut f| f.write_all(format!("{text}\n").as_bytes()));
    if let Err(e) = written {
        return Err(CtlError::Failed(format!("{}: {e}", path.display())));
    }
    let status = std::process::Command::new("/bin/sh")
        .arg("-c")
        .arg(format!("{editor} \"$1\""))
        .arg("sh")
        .arg(&path)
        .status();
    let result = match status {
        Ok(st) if st.success() => match read_object(&path, "the edited value") {
            Ok(o) => Ok(o),
            // The operator's edit is kept for another try.
            Err(CtlError::Usage(e)) => {
                return Err(CtlError::Usage(format!(
                    "{e}: nothing sent; the edit is kept in {}",
                    path.display()
                )));
            }
            Err(e) => Err(e),
        },
        Ok(st) => Err(CtlError::Failed(format!(
            "the editor ({editor}) ended with {st}: nothing sent"
        ))),
        Err(e) => Err(CtlError::Failed(format!(
            "cannot run the editor ({editor}): {e}"
        ))),
    };
    let _ = std::fs::remove_file(&path);
    result
}

/// The JSON merge patch (RFC 7396) that turns `old` into `new`: changed and new
/// keys with their new values, removed keys as `null`, objects compared key by
/// key. (A `null` value in `new` cannot be told from a removal in a merge patch:
/// the whole value is sent with `PUT` where that matters, `--replace` and the
/// editor.)
pub fn diff_patch(old: &Map<String, Value>, new: &Map<String, Value>) -> Map<String, Value> {
    let mut p = Map::new();
    for (k, v) in new {
        match (old.get(k), v) {
            (Some(o), n) if o == n => {}
            (Some(Value::Object(o)), Value::Object(n)) => {
                p.insert(k.clone(), Value::Object(diff_patch(o, n)));
            }
            _ => {
                p.insert(k.clone(), v.clone());
            }
        }
    }
    for k in old.keys() {
        if !new.contains_key(k) {
            p.insert(k.clone(), Value::Null);
        }
    }
    p
}

/// `over` on top of `base`, both merge patches: objects combined key by key,
/// anything else (a `null` removal too) replacing. Not [`apply_patch`], which
/// carries out the removals instead of keeping them.
pub fn combine_patches(base: &mut Map<String, Value>, over: &Map<String, Value>) {
    for (k, v) in over {
        match (base.get_mut(k), v) {
            (Some(Value::Object(b)), Value::Object(o)) => combine_patches(b, o),
            _ => {
                base.insert(k.clone(), v.clone());
            }
        }
    }
}

/// A PostgreSQL setting removed (`null`) under one spelling removes it under every
/// spelling the key holds (`--pg WORK_MEM=null` and the key's `work_mem`):
/// PostgreSQL's names are not case-sensitive.
pub fn remove_every_spelling(patch: &mut Map<String, Value>, current: &Map<String, Value>) {
    let Some(held) = current
        .get("postgresql")
        .and_then(|p| p.get("parameters"))
        .and_then(Value::as_object)
    else {
        return;
    };
    let Some(Value::Object(params)) = patch
        .get_mut("postgresql")
        .and_then(|p| p.get_mut("parameters"))
    else {
        return;
    };
    let removed: Vec<String> = params
        .iter()
        .filter(|(_, v)| v.is_null())
        .map(|(k, _)| k.clone())
        .collect();
    for r in removed {
        for k in held.keys().filter(|k| k.eq_ignore_ascii_case(&r)) {
            params.insert(k.clone(), Value::Null);
        }
    }
}

/// Every leaf a patch sets, as the parts of its path (for `KEY: old -> new`).
pub fn patch_leaves(patch: &Map<String, Value>) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    for (k, v) in patch {
        match v {
            Value::Object(o) if !o.is_empty() => {
                for mut rest in patch_leaves(o) {
                    rest.insert(0, k.clone());
                    out.push(rest);
                }
            }
            _ => out.push(vec![k.clone()]),
        }
    }
    out
}

fn edit_config(
    ctx: &mut Ctx,
    set: Vec<(String, String)>,
    apply: Option<std::path::PathBuf>,
    replace: Option<std::path::PathBuf>,
) -> Result<(), CtlError> {
    let s = ctx.snapshot()?;
    let current = match s.view.config.as_deref() {
        None => Map::new(),
        Some(raw) => match serde_json::from_str::<Value>(raw) {
            Ok(Value::Object(o)) => o,
            _ => Map::new(),
        },
    };
    // The whole new value (`--replace`, the editor: sent with PUT, so an explicit
    // `null` stays one), or a patch (`--set`, `--pg`, `--apply`: PATCH).
    let whole = match &replace {
        Some(f) => Some(read_object(f, "--replace")?),
        None if set.is_empty() && apply.is_none() => Some(edit_in_editor(&current)?),
        None => None,
    };
    let patch = match &whole {
        Some(w) => diff_patch(&current, w),
        None => {
            let mut p = match &apply {
                Some(f) => read_object(f, "--apply")?,
                None => Map::new(),
            };
            // Patches combined, their `null`s kept: a removal must reach the member.
            combine_patches(&mut p, &patch_of(&set));
            remove_every_spelling(&mut p, &current);
            p
        }
    };
    let pg = crate::config::cluster::parse_pg_parameters(patch.get("postgresql"))
        .map_err(CtlError::Usage)?;
    if let Some((name, why)) = pg.ignored.first() {
        return Err(CtlError::Usage(format!(
            "postgresql.parameters {name:?}: {why}"
        )));
    }
    let merged = match &whole {
        Some(w) => w.clone(),
        None => {
            let mut m = current.clone();
            apply_patch(&mut m, &patch);
            m
        }
    };
    if merged == current {
        if ctx.inv.json {
            print_json(&json!({ "action": "edit-config", "changed": false }));
        } else {
            outln!("Not changed");
        }
        return Ok(());
    }
    if let Some(p) = merged.get("pause")
        && !p.is_boolean()
    {
        return Err(CtlError::Timing(format!(
            "pause: expected true or false, found {p}"
        )));
    }
    let members: Vec<(String, Option<u32>)> = s
        .view
        .members
        .iter()
        .map(|m| (m.name.clone(), m.info.watchdog_timeout))
        .collect();
    let merged_text = Value::Object(merged.clone()).to_string();
    check_timing(&ctx.cfg, &merged_text, &members).map_err(|e| {
        CtlError::Timing(format!(
            "{e} (M, B and P from {})",
            ctx.inv.config.display()
        ))
    })?;
    if !ctx.inv.json {
        let (cur, new) = (
            Value::Object(current.clone()),
            Value::Object(merged.clone()),
        );
        for parts in patch_leaves(&patch) {
            // A JSON pointer: `~` and `/` inside a part escaped (RFC 6901).
            let path: String = parts
                .iter()
                .map(|p| format!("/{}", p.replace('~', "~0").replace('/', "~1")))
                .collect();
            let at = |v: &Value| v.pointer(&path).cloned().unwrap_or(Value::Null);
            outln!("{}: {} -> {}", parts.join("."), at(&cur), at(&new));
        }
    }
    confirm(ctx, "Apply these changes?")?;
    let (via, r) = match &whole {
        Some(w) => {
            // PUT stores what it is given over whatever the key holds: refused
            // when the key changed since it was read here (another operator's
            // change while this one was in the editor would be lost). The window
            // left is this read to the member's write, milliseconds.
            let again = ctx.snapshot()?;
            if again.view.config != s.view.config {
                return Err(CtlError::Failed(
                    "the config key changed since it was read here: nothing sent; run \
                     edit-config again"
                        .into(),
                ));
            }
            to_any_member(ctx, &again, "PUT", "/config", &Value::Object(w.clone()))?
        }
        None => to_any_member(ctx, &s, "PATCH", "/config", &Value::Object(patch))?,
    };
    if !ok(&r) {
        return Err(CtlError::Failed(format!(
            "{via} refused the change ({}): {}",
            r.status,
            server_says(&r.body)
        )));
    }
    if ctx.inv.json {
        print_json(&json!({
            "action": "edit-config",
            "changed": true,
            "via": via,
            "status": r.status,
            "config": body_value(&r.body),
        }));
    } else {
        outln!("Configuration changed (through {via})");
    }
    Ok(())
}
