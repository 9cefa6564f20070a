//! `tenure ctl`'s command line, parsed with `lexopt`.
//!
//! Owns: turning the arguments after `ctl` into an [`Invocation`], and the help
//! text. Must never: read a file, touch the network, or accept an option a
//! command does not use (a misplaced `--force` must not go unnoticed).
//!
//! Options may come before or after the command (`tenure ctl --json list` and
//! `tenure ctl list --json` are the same), as patronictl users type them.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

/// The configuration file read when `--config` is not given (the packages
/// install the example next to it).
pub const DEFAULT_CONFIG: &str = "/etc/tenure/tenure.toml";

/// How long `--wait` and the wait after a switchover or failover last by default.
pub const DEFAULT_WAIT: Duration = Duration::from_secs(60);

pub const HELP: &str = "\
tenure ctl: operate a tenure cluster (reads etcd, talks to the members' REST APIs)

Usage:
  tenure ctl [--config FILE] [--json] COMMAND [ARGS]

Commands:
  list                     members, host, role, state, timeline, lag in MB, epoch and
                           the time left on the leader's lease; the leader marked
  topology                 the same as a tree: the leader, then its replicas
  list, topology [-w|--watch SECONDS] [-W]
                           print again every SECONDS (-W: every 2 s) until
                           interrupted; with --json one document a line
  history                  the timeline history (the history key)
  dsn [MEMBER] [--role primary|replica|any]
                           a member's address for libpq (host=... port=...): the
                           leader's by default; a replica's: the running one least
                           behind
  show-config              the dynamic configuration (the config key)
  version                  this program's version and every member's (from its API)
  switchover [--leader NAME] [--candidate NAME] [--scheduled TIME] [--force]
                           planned hand-over from the leader to a replica
  failover --candidate NAME [--force]
                           make NAME the leader, also when no leader exists (the
                           safety checks of an automatic failover still apply)
  pause [--wait]           maintenance mode: no automatic failover, promotion or restart
  resume [--wait]          leave maintenance mode
  restart [MEMBER...] [--pending] [--role primary|replica|any] [--pg-version V]
          [--scheduled TIME] [--force]
                           restart PostgreSQL on MEMBERs (default: every member), now
                           or at TIME
  flush restart [MEMBER...]
                           cancel the scheduled restart on MEMBERs (default: every
                           member whose key shows one)
  flush switchover         cancel the scheduled switchover (flush asks nothing;
                           --force is accepted and does nothing)
  reload [MEMBER...]       reload the agents' configuration (default: every member)
  reinit MEMBER... [--wait] [--force]
                           rebuild MEMBER's data directory from the leader (the old one
                           is moved aside, never deleted)
  edit-config [--set KEY=VALUE...] [--pg NAME=VALUE...] [--apply FILE]
              [--replace FILE] [--force]
                           change the config key; checked here against the timing
                           contract (DESIGN S6) before anything is sent. --pg (-p)
                           sets a PostgreSQL setting on every member
                           (postgresql.parameters.NAME; PostgreSQL checks the value
                           before it is stored; NAME=null removes it). --apply: a
                           JSON merge patch from FILE (- for stdin); --replace: the
                           whole value from FILE; none of them: the value in
                           $VISUAL or $EDITOR (default vi)

Options:
  -c, --config FILE        the node configuration to read etcd endpoints, scope and
                           [api] username/password from (default /etc/tenure/tenure.toml)
      --json               JSON on stdout for scripts instead of tables
      --force              do not ask for confirmation
      --wait               pause/resume: until every member reports it; reinit: until
                           the member runs again
      --timeout SECONDS    how long --wait and the wait after a switchover or failover
                           last (default 60)
  -h, --help               this help

Confirmation: switchover, failover, restart, reinit and edit-config ask on the
terminal unless --force; an answer other than y/yes aborts (exit 5).

Removing the cluster's keys (`patronictl remove`, `etcdctl del --prefix`): the leader
sees its key deleted and fences its PostgreSQL; the first node that finds the
initialize key missing next to its data re-creates it together with the rollback
marker, and no node takes the leader key or promotes until an operator runs
`tenure confirm-epoch --config FILE`. The cluster has no primary until then.

Exit codes:
  0 success
  1 failure: etcd or a member's API unreachable, a member refused the request, a
    wait ran out of time, an unknown member
  2 usage error
  3 invalid configuration file
  4 edit-config: the change breaks the timing contract (S6); nothing was sent
  5 aborted at the confirmation prompt
  6 credentials rejected (401: set [api] username/password) or forbidden (403)
";

/// A parsed `tenure ctl` command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invocation {
    pub config: PathBuf,
    pub json: bool,
    pub force: bool,
    pub timeout: Duration,
    /// `list`/`topology --watch SECONDS` (`-W`: every 2 s): print again every so
    /// often until interrupted.
    pub watch: Option<Duration>,
    pub command: Command,
}

/// What `flush` cancels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FlushTarget {
    Restart,
    Switchover,
}

/// `restart --role`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RoleFilter {
    Primary,
    Replica,
    Any,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    Help,
    List,
    Topology,
    History,
    ShowConfig,
    Version,
    Switchover {
        leader: Option<String>,
        candidate: Option<String>,
        /// RFC 3339 with an offset, as given; `None` = now.
        scheduled: Option<String>,
    },
    Failover {
        candidate: String,
        leader: Option<String>,
    },
    Pause {
        wait: bool,
    },
    Resume {
        wait: bool,
    },
    /// `dsn [MEMBER] [--role primary|replica|any]`: a member's libpq address.
    Dsn {
        member: Option<String>,
        role: Option<RoleFilter>,
    },
    Restart {
        members: Vec<String>,
        pending: bool,
        role: Option<RoleFilter>,
        pg_version: Option<String>,
        /// RFC 3339 with an offset, as given; `None` = now.
        scheduled: Option<String>,
    },
    /// `flush restart [MEMBER...]`, `flush switchover`: cancel what is scheduled.
    Flush {
        target: FlushTarget,
        members: Vec<String>,
    },
    Reload {
        members: Vec<String>,
    },
    Reinit {
        members: Vec<String>,
        wait: bool,
    },
    EditConfig {
        /// `(dotted key, value text)` in the order given.
        set: Vec<(String, String)>,
        /// `--apply FILE` (`-`: stdin): a JSON merge patch, applied before `set`.
        apply: Option<PathBuf>,
        /// `--replace FILE` (`-`: stdin): the whole new value.
        replace: Option<PathBuf>,
    },
}

/// Everything seen on the command line before it is checked against the command.
#[derive(Default)]
struct Seen {
    config: Option<PathBuf>,
    json: bool,
    force: bool,
    wait: bool,
    pending: bool,
    timeout: Option<Duration>,
    watch: Option<Duration>,
    leader: Option<String>,
    candidate: Option<String>,
    scheduled: Option<String>,
    role: Option<RoleFilter>,
    pg_version: Option<String>,
    set: Vec<(String, String)>,
    apply: Option<PathBuf>,
    replace: Option<PathBuf>,
    help: bool,
    /// Options given, by their long name, to refuse those the command does not use.
    given: Vec<&'static str>,
    positional: Vec<String>,
}

fn string(v: OsString, opt: &str) -> Result<String, String> {
    v.into_string()
        .map_err(|v| format!("{opt} {v:?}: not valid UTF-8"))
}

/// Parse the arguments after `ctl`. `Err` is a usage error naming the argument.
pub fn parse<I>(args: I) -> Result<Invocation, String>
where
    I: IntoIterator,
    I::Item: Into<OsString>,
{
    use lexopt::prelude::*;
    let mut p = lexopt::Parser::from_args(args);
    let mut s = Seen::default();
    loop {
        let arg = match p.next() {
            Ok(Some(a)) => a,
            Ok(None) => break,
            Err(e) => return Err(e.to_string()),
        };
        let value = |p: &mut lexopt::Parser, name: &str| -> Result<String, String> {
            let v = p.value().map_err(|_| format!("{name} needs a value"))?;
            string(v, name)
        };
        match arg {
            Short('c') | Long("config") => {
                s.config = Some(PathBuf::from(value(&mut p, "--config")?))
            }
            Long("json") => s.json = true,
            Long("force") => {
                s.force = true;
                s.given.push("--force");
            }
            Long("wait") => {
                s.wait = true;
                s.given.push("--wait");
            }
            Long("pending") => {
                s.pending = true;
                s.given.push("--pending");
            }
            Long("timeout") => {
                let t = value(&mut p, "--timeout")?;
                let secs = t
                    .parse::<f64>()
                    .ok()
                    .filter(|x| x.is_finite() && *x > 0.0 && *x <= 86_400.0)
                    .ok_or_else(|| {
                        format!("--timeout {t:?}: expected a number of seconds (0 < t <= 86400)")
                    })?;
                s.timeout = Some(Duration::from_secs_f64(secs));
                s.given.push("--timeout");
            }
            // patronictl's `list -w TIME` and `-W` (every 2 s).
            Short('w') | Long("watch") => {
                let t = value(&mut p, "--watch")?;
                let secs = t
                    .parse::<f64>()
                    .ok()
                    .filter(|x| x.is_finite() && *x >= 0.1 && *x <= 3600.0)
                    .ok_or_else(|| {
                        format!("--watch {t:?}: expected a number of seconds (0.1 to 3600)")
                    })?;
                s.watch = Some(Duration::from_secs_f64(secs));
                s.given.push("--watch");
            }
            Short('W') => {
                s.watch = Some(Duration::from_secs(2));
                s.given.push("--watch");
            }
            // Patroni 4 calls it --leader (--primary, and --master before 3.0).
            Long("leader") | Long("primary") | Long("master") => {
                s.leader = Some(value(&mut p, "--leader")?);
                s.given.push("--leader");
            }
            Long("candidate") => {
                s.candidate = Some(value(&mut p, "--candidate")?);
                s.given.push("--candidate");
            }
            Long("scheduled") => {
                let t = value(&mut p, "--scheduled")?;
                s.scheduled = if t == "now" {
                    None
                } else {
                    check_timestamp(&t)?;
                    Some(t)
                };
                s.given.push("--scheduled");
            }
            Short('r') | Long("role") => {
                let r = value(&mut p, "--role")?;
                s.role = Some(match r.as_str() {
                    "primary" | "leader" | "master" => RoleFilter::Primary,
                    "replica" => RoleFilter::Replica,
                    "any" => RoleFilter::Any,
                    _ => {
                        return Err(format!("--role {r:?}: expected primary, replica or any"));
                    }
                });
                s.given.push("--role");
            }
            Long("pg-version") => {
                let v = value(&mut p, "--pg-version")?;
                check_pg_version(&v)?;
                s.pg_version = Some(v);
                s.given.push("--pg-version");
            }
            Short('s') | Long("set") => {
                let kv = value(&mut p, "--set")?;
                s.set.push(split_set(&kv)?);
                s.given.push("--set");
            }
            Long("apply") => {
                s.apply = Some(PathBuf::from(value(&mut p, "--apply")?));
                s.given.push("--apply");
            }
            Long("replace") => {
                s.replace = Some(PathBuf::from(value(&mut p, "--replace")?));
                s.given.push("--replace");
            }
            // patronictl's `-p`/`--pg NAME=VALUE`: `--set postgresql.parameters.NAME=VALUE`.
            Short('p') | Long("pg") => {
                let kv = value(&mut p, "--pg")?;
                s.set.push(pg_setting(&kv)?);
                s.given.push("--pg");
            }
            Short('h') | Long("help") => s.help = true,
            Value(v) => s.positional.push(string(v, "argument")?),
            other => return Err(other.unexpected().to_string()),
        }
    }
    build(s)
}

fn build(mut s: Seen) -> Result<Invocation, String> {
    let config = s
        .config
        .take()
        .unwrap_or_else(|| PathBuf::from(DEFAULT_CONFIG));
    let mut pos = std::mem::take(&mut s.positional).into_iter();
    let verb = pos.next();
    let rest: Vec<String> = pos.collect();
    let done = |command: Command, s: &Seen| Invocation {
        config: config.clone(),
        json: s.json,
        force: s.force,
        timeout: s.timeout.unwrap_or(DEFAULT_WAIT),
        watch: s.watch,
        command,
    };
    if s.help || verb.as_deref() == Some("help") {
        return Ok(done(Command::Help, &s));
    }
    let Some(verb) = verb else {
        return Err("no command given (list, switchover, pause, ...)".into());
    };
    let no_args = |rest: &[String]| match rest.first() {
        Some(a) => Err(format!("unexpected argument {a:?} for {verb}")),
        None => Ok(()),
    };
    let (command, allowed): (Command, &[&str]) = match verb.as_str() {
        "list" => (no_args(&rest).map(|_| Command::List)?, &["--watch"]),
        "topology" => (no_args(&rest).map(|_| Command::Topology)?, &["--watch"]),
        "history" => (no_args(&rest).map(|_| Command::History)?, &[]),
        "show-config" => (no_args(&rest).map(|_| Command::ShowConfig)?, &[]),
        "version" => (no_args(&rest).map(|_| Command::Version)?, &[]),
        "switchover" => {
            no_args(&rest)?;
            (
                Command::Switchover {
                    leader: s.leader.clone(),
                    candidate: s.candidate.clone(),
                    scheduled: s.scheduled.clone(),
                },
                &[
                    "--leader",
                    "--candidate",
                    "--scheduled",
                    "--force",
                    "--timeout",
                ],
            )
        }
        "failover" => {
            no_args(&rest)?;
            let candidate = s.candidate.clone().ok_or_else(|| {
                "failover needs --candidate NAME (a failover is always to a named member)"
                    .to_string()
            })?;
            (
                Command::Failover {
                    candidate,
                    leader: s.leader.clone(),
                },
                &["--candidate", "--leader", "--force", "--timeout"],
            )
        }
        "pause" => {
            no_args(&rest)?;
            (Command::Pause { wait: s.wait }, &["--wait", "--timeout"])
        }
        "resume" => {
            no_args(&rest)?;
            (Command::Resume { wait: s.wait }, &["--wait", "--timeout"])
        }
        "dsn" => {
            if rest.len() > 1 {
                return Err(format!(
                    "unexpected argument {:?} (dsn takes one MEMBER)",
                    rest[1]
                ));
            }
            if !rest.is_empty() && s.role.is_some() {
                return Err("dsn: name a MEMBER or a --role, not both".into());
            }
            (
                Command::Dsn {
                    member: rest.first().cloned(),
                    role: s.role,
                },
                &["--role"],
            )
        }
        "restart" => (
            Command::Restart {
                members: rest.clone(),
                pending: s.pending,
                role: s.role,
                pg_version: s.pg_version.clone(),
                scheduled: s.scheduled.clone(),
            },
            &[
                "--pending",
                "--role",
                "--pg-version",
                "--scheduled",
                "--force",
            ],
        ),
        // Cancelling is the safe direction: no confirmation. `--force` is taken
        // and does nothing, as patronictl's scripts pass it.
        "flush" => {
            let (target, members) = match rest.split_first() {
                Some((t, m)) if t == "restart" => (FlushTarget::Restart, m.to_vec()),
                Some((t, m)) if t == "switchover" => {
                    if let Some(a) = m.first() {
                        return Err(format!(
                            "unexpected argument {a:?} for flush switchover (a cluster has \
                             one switchover request)"
                        ));
                    }
                    (FlushTarget::Switchover, Vec::new())
                }
                Some((t, _)) => {
                    return Err(format!("flush {t:?}: expected restart or switchover"));
                }
                None => return Err("flush needs what to cancel: restart or switchover".into()),
            };
            (Command::Flush { target, members }, &["--force"])
        }
        "reload" => (
            Command::Reload {
                members: rest.clone(),
            },
            &["--force"],
        ),
        "reinit" => {
            if rest.is_empty() {
                return Err("reinit needs the MEMBER to rebuild".into());
            }
            (
                Command::Reinit {
                    members: rest.clone(),
                    wait: s.wait,
                },
                &["--wait", "--force", "--timeout"],
            )
        }
        "edit-config" => {
            no_args(&rest)?;
            if s.replace.is_some() && (!s.set.is_empty() || s.apply.is_some()) {
                return Err(
                    "--replace takes the whole value: not with --set, --pg or --apply".into(),
                );
            }
            // None of them: the value in an editor ($VISUAL, $EDITOR, vi).
            (
                Command::EditConfig {
                    set: s.set.clone(),
                    apply: s.apply.clone(),
                    replace: s.replace.clone(),
                },
                &["--set", "--pg", "--apply", "--replace", "--force"],
            )
        }
        other => return Err(format!("unknown command {other:?}")),
    };
    if let Some(bad) = s.given.iter().find(|g| !allowed.contains(g)) {
        return Err(format!("{bad} does not apply to {verb}"));
    }
    Ok(done(command, &s))
}

/// `--pg NAME=VALUE`: `("postgresql.parameters.name", VALUE as a JSON string)`.
/// The name lower-cased (PostgreSQL's names are not case-sensitive: `WORK_MEM`
/// replaces the key's `work_mem`) and checked as PostgreSQL's files read names;
/// the value trimmed and kept a string, as PostgreSQL reads every value (`true`
/// stays `true`, `1e3` stays `1e3`), except `null`, which removes the setting.
fn pg_setting(kv: &str) -> Result<(String, String), String> {
    let (name, v) = kv
        .split_once('=')
        .ok_or_else(|| format!("--pg {kv:?}: expected NAME=VALUE"))?;
    let v = v.trim();
    // A removal takes any name another writer left (the form is not checked;
    // every spelling the key holds goes: `verbs::remove_every_spelling`).
    let name = name.trim().to_ascii_lowercase();
    if name.is_empty() || (v != "null" && !crate::config::cluster::pg_param_name_ok(&name)) {
        return Err(format!(
            "--pg {kv:?}: {name:?} is not a PostgreSQL parameter name (NAME or PREFIX.NAME \
             of letters, digits and '_')"
        ));
    }
    let value = if v == "null" {
        "null".to_string()
    } else {
        serde_json::Value::String(v.to_string()).to_string()
    };
    Ok((format!("postgresql.parameters.{name}"), value))
}

/// The most parts a `--set` key may have (`slots.barman.type` has 3).
const MAX_SET_DEPTH: usize = 16;

/// `KEY=VALUE`; the key is dotted (`slots.barman.type`).
fn split_set(kv: &str) -> Result<(String, String), String> {
    let (k, v) = kv
        .split_once('=')
        .ok_or_else(|| format!("--set {kv:?}: expected KEY=VALUE"))?;
    let k = k.trim();
    if k.is_empty() || k.split('.').any(str::is_empty) {
        return Err(format!(
            "--set {kv:?}: the key is empty or has an empty part"
        ));
    }
    // Of the config key's `postgresql` section the agents read `parameters`
    // alone (the cluster-wide PostgreSQL settings): anything else there would be
    // stored to do nothing, and is refused. `null` still removes what another
    // writer left there.
    let pg_part = k == "postgresql" || k.starts_with("postgresql.");
    if pg_part
        && !(k == "postgresql.parameters" || k.starts_with("postgresql.parameters."))
        && v.trim() != "null"
    {
        return Err(format!(
            "--set {kv:?}: of the config key's postgresql section tenure reads only \
             postgresql.parameters (--pg NAME=VALUE); a node's other PostgreSQL settings \
             are in its configuration file"
        ));
    }
    // The patch is built and applied by recursion, a level a part (review of
    // bad input, finding 5: 20,000 parts overflowed the stack).
    let parts = k.split('.').count();
    if parts > MAX_SET_DEPTH {
        return Err(format!(
            "--set: the key has {parts} parts, more than the {MAX_SET_DEPTH} any setting has"
        ));
    }
    Ok((k.to_string(), v.to_string()))
}

/// RFC 3339 with an explicit offset: `2026-12-01T10:30[:00][.5](Z|+01:00)`. A time
/// without an offset is refused rather than guessed (the members' clocks decide
/// when it happens, and their time zone may not be ours).
pub fn check_timestamp(t: &str) -> Result<(), String> {
    // The agents parse it with the same function (`clock::parse_timestamp`).
    crate::clock::parse_timestamp(t).map(|_| ()).map_err(|_| {
        format!(
            "--scheduled {t:?}: expected \"now\" or an RFC 3339 time with an offset, e.g. \
             2026-12-01T10:30:00+01:00 or 2026-12-01T09:30:00Z"
        )
    })
}

/// `--pg-version 15.4` (or `9.6.24`): what the members accept, checked by the
/// same function they use (review of bad input, finding 8: `15` passed here and
/// every member answered 400).
fn check_pg_version(v: &str) -> Result<(), String> {
    crate::api::mgmt::manage::postgres_version_to_int(v)
        .map(|_| ())
        .map_err(|e| format!("--pg-version {v:?}: {e} (e.g. 15.4)"))
}
