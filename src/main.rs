//! The `tenure` binary: parse arguments, load and validate the configuration,
//! then hand over to the agent (or the demo).
//!
//! Owns: the command line and the process exit code. Must never: start anything
//! (PostgreSQL, etcd, the watchdog, a data directory) before the configuration has
//! been fully validated; exit with a code other than the documented ones.
//!
//! Exit codes (stable, for scripts and systemd's `RestartPreventExitStatus=`):
//!   0  success
//!   1  runtime failure (the agent or the demo stopped with an error)
//!   2  usage error (unknown subcommand or flag, missing argument, bad TENURE_LOG)
//!   3  invalid configuration file (unreadable, not TOML, missing/unknown/wrong key)
//!   4  the timing contract (DESIGN S6) is violated

use std::fmt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use tenure::config::{Config, ConfigError, WatchdogMode};

/// Benchmarks only (`--features count-allocs`, issue 13): count every allocation
/// (`tenure::alloc_count`). Never in a shipped build: the feature is off by default.
#[cfg(feature = "count-allocs")]
#[global_allocator]
static COUNTING: tenure::alloc_count::Counting = tenure::alloc_count::Counting;

const USAGE: &str = "\
tenure: lease-based automatic failover for PostgreSQL with no split brain

Usage:
  tenure run --config FILE      run the agent for this host
  tenure check-config FILE      validate FILE and print the timing budget table
  tenure confirm-epoch --config FILE [--epoch N] [--by NAME]
                                after etcd was wiped or restored: delete the rollback
                                marker and allow leading under a smaller epoch than
                                this node's data carries (N defaults to the local
                                PostgreSQL's tenure.epoch row)
  tenure demo [--keep]          run a local demo cluster (--keep: keep its files)
  tenure ctl [--config FILE] COMMAND
                                operate the cluster: list, switchover, pause, ... (exit
                                codes of its own: tenure ctl --help)
  tenure --version              print the version and the git revision
  tenure --help                 print this help

Environment:
  TENURE_LOG=error|warn|info|debug   log level on stderr (default info)

Exit codes:
  0 success, 1 runtime failure, 2 usage error, 3 invalid configuration file,
  4 timing contract (S6) violated
";

/// The version and the git revision it was built from (build.rs: "unknown" outside
/// a git checkout), as `--version` prints it and the start-up line logs it.
const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (git ",
    env!("TENURE_GIT_REV"),
    ")"
);

/// Everything `main_exec` can fail with; each variant maps to one exit code.
#[derive(Debug)]
enum MainError {
    /// Usage error: the text names the offending argument (exit 2).
    Usage(String),
    /// The configuration file is unreadable or invalid (exit 3).
    Config(ConfigError),
    /// The configuration breaks the timing contract (exit 4).
    Timing(ConfigError),
    /// The agent or the demo failed at run time (exit 1).
    Runtime(String),
}

impl MainError {
    fn exit_code(&self) -> u8 {
        match self {
            MainError::Runtime(_) => 1,
            MainError::Usage(_) => 2,
            MainError::Config(_) => 3,
            MainError::Timing(_) => 4,
        }
    }
}

impl From<ConfigError> for MainError {
    fn from(e: ConfigError) -> Self {
        match e {
            ConfigError::Timing { .. } => MainError::Timing(e),
            _ => MainError::Config(e),
        }
    }
}

impl fmt::Display for MainError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MainError::Usage(s) => write!(f, "usage error: {s} (see tenure --help)"),
            MainError::Config(e) => write!(f, "invalid configuration: {e}"),
            MainError::Timing(e) => write!(f, "timing contract violated: {e}"),
            MainError::Runtime(s) => write!(f, "{s}"),
        }
    }
}

/// What the command line asks for.
#[derive(Debug, PartialEq, Eq)]
enum Command {
    Run {
        config: PathBuf,
    },
    CheckConfig {
        config: PathBuf,
    },
    ConfirmEpoch {
        config: PathBuf,
        epoch: Option<i64>,
        by: Option<String>,
    },
    Demo {
        keep: bool,
    },
    Version,
    Help,
}

fn usage(s: impl Into<String>) -> MainError {
    MainError::Usage(s.into())
}

/// Hand-rolled parsing: four subcommands do not need a framework, and every
/// rejection names the argument.
fn parse_args(args: &[String]) -> Result<Command, MainError> {
    let Some(first) = args.first() else {
        return Err(usage("no subcommand given"));
    };
    let rest = &args[1..];
    let no_more = |rest: &[String]| match rest.first() {
        None => Ok(()),
        Some(a) if a.starts_with('-') => Err(usage(format!("unknown flag {a:?}"))),
        Some(a) => Err(usage(format!("unexpected argument {a:?}"))),
    };
    match first.as_str() {
        "--version" | "-V" => no_more(rest).map(|_| Command::Version),
        "--help" | "-h" | "help" => Ok(Command::Help),
        "run" => {
            let mut config = None;
            let mut i = 0;
            while i < rest.len() {
                let a = &rest[i];
                if a == "--config" || a == "-c" {
                    let v = rest
                        .get(i + 1)
                        .ok_or_else(|| usage(format!("{a} needs a FILE")))?;
                    config = Some(PathBuf::from(v));
                    i += 2;
                } else if let Some(v) = a.strip_prefix("--config=") {
                    config = Some(PathBuf::from(v));
                    i += 1;
                } else if a.starts_with('-') {
                    return Err(usage(format!("unknown flag {a:?} for run")));
                } else {
                    return Err(usage(format!(
                        "unexpected argument {a:?} for run (use --config FILE)"
                    )));
                }
            }
            let config = config.ok_or_else(|| usage("run needs --config FILE"))?;
            Ok(Command::Run { config })
        }
        "confirm-epoch" => {
            let (mut config, mut epoch, mut by) = (None, None, None);
            let mut i = 0;
            while i < rest.len() {
                let a = rest[i].as_str();
                let v = || {
                    rest.get(i + 1)
                        .cloned()
                        .ok_or_else(|| usage(format!("{a} needs a value")))
                };
                match a {
                    "--config" | "-c" => config = Some(PathBuf::from(v()?)),
                    "--epoch" => {
                        let t = v()?;
                        epoch = Some(t.parse::<i64>().ok().filter(|e| *e > 0).ok_or_else(|| {
                            usage(format!("--epoch {t:?}: expected a positive integer"))
                        })?)
                    }
                    "--by" => by = Some(v()?),
                    a if a.starts_with('-') => {
                        return Err(usage(format!("unknown flag {a:?} for confirm-epoch")));
                    }
                    a => {
                        return Err(usage(format!(
                            "unexpected argument {a:?} for confirm-epoch"
                        )));
                    }
                }
                i += 2;
            }
            let config = config.ok_or_else(|| usage("confirm-epoch needs --config FILE"))?;
            Ok(Command::ConfirmEpoch { config, epoch, by })
        }
        "check-config" => match rest {
            [] => Err(usage("check-config needs a FILE")),
            [f] if f.starts_with('-') => Err(usage(format!("unknown flag {f:?} for check-config"))),
            [f] => Ok(Command::CheckConfig {
                config: PathBuf::from(f),
            }),
            [_, extra, ..] => Err(usage(format!(
                "unexpected argument {extra:?} for check-config"
            ))),
        },
        "demo" => {
            let mut keep = false;
            for a in rest {
                match a.as_str() {
                    "--keep" => keep = true,
                    a if a.starts_with('-') => {
                        return Err(usage(format!("unknown flag {a:?} for demo")));
                    }
                    a => return Err(usage(format!("unexpected argument {a:?} for demo"))),
                }
            }
            Ok(Command::Demo { keep })
        }
        a if a.starts_with('-') => Err(usage(format!("unknown flag {a:?}"))),
        a => Err(usage(format!("unknown subcommand {a:?}"))),
    }
}

/// The budget table(s) for `check-config`.
fn budget_report(path: &Path, c: &Config) -> String {
    let t = &c.timing;
    let mut out = format!("{}: OK\n\n", path.display());
    let range = tenure::config::watchdog_range(t, t.ttl);
    match (&c.watchdog.mode, range) {
        (WatchdogMode::Off, _) => {
            out += "watchdog mode \"off\":\n";
            out += &tenure::config::budget(t, t.ttl, None).to_string();
        }
        (_, Some((_, hi))) => {
            out += &format!(
                "with a watchdog at the top of its range (W = {hi} s; the agent checks again \
                 with the granted ttl and the W the device reports):\n"
            );
            out += &tenure::config::budget(t, t.ttl, Some(hi)).to_string();
            if c.watchdog.mode == WatchdogMode::Automatic {
                out += "\nwatchdog mode \"automatic\", if no usable device is found:\n";
                out += &tenure::config::budget(t, t.ttl, None).to_string();
            }
        }
        (_, None) => {
            out += "no whole-second watchdog timeout fits this timing; without a watchdog:\n";
            out += &tenure::config::budget(t, t.ttl, None).to_string();
        }
    }
    out += &fence_report(
        c,
        c.watchdog.device.exists(),
        std::env::var_os("WATCHDOG_USEC").is_some(),
    );
    if c.dynamic.synchronous_mode {
        // DESIGN §3a: the winner writes the `sync` key naming itself, sets the names
        // and waits until they held for a loop before it promotes.
        out += &format!(
            "\nsynchronous_mode{}: a failover takes up to {} s more (2 x loop_wait: the sync key \
             naming the winner, then synchronous_standby_names held for a loop); only a listed \
             synchronous standby (up to {} kept) or the last leader may take over\n",
            if c.dynamic.synchronous_mode_strict {
                " (strict)"
            } else {
                ""
            },
            (2 * t.loop_wait).as_secs_f64(),
            c.dynamic.synchronous_node_count
        );
    }
    out
}

/// Which fence a frozen agent meets on this node (as found here: the device,
/// `WATCHDOG_USEC`), and the guardian's numbers (DESIGN §2 "The guardian").
fn fence_report(c: &Config, device: bool, systemd: bool) -> String {
    let w = &c.watchdog;
    let t = &c.timing;
    let dev = w.device.display();
    let mut out = format!(
        "\nfence for a frozen agent (as found here: device {dev} {}, WATCHDOG_USEC {}):\n  ",
        if device { "present" } else { "absent" },
        if systemd { "set" } else { "unset" }
    );
    let range = tenure::config::watchdog_range(t, t.ttl);
    let device_in_use = device && range.is_some() && w.mode != WatchdogMode::Off;
    out += &if w.mode == WatchdogMode::Off {
        "none (watchdog mode \"off\"): a frozen agent leaves its primary writable until it thaws"
            .to_string()
    } else if device_in_use {
        format!("the watchdog device {dev} (if it can be armed; see W above)")
    } else if systemd {
        "systemd's watchdog (WATCHDOG_USEC playing W)".to_string()
    } else if w.guardian_applies(false, false) {
        "the guardian process ([watchdog] guardian)".to_string()
    } else if w.mode == WatchdogMode::Required {
        "none: watchdog mode \"required\" refuses leadership without a device (set \
         [watchdog] guardian = \"allow\" to accept the guardian)"
            .to_string()
    } else {
        "none ([watchdog] guardian = \"off\"): a frozen agent leaves its primary writable until \
         it thaws"
            .to_string()
    };
    out += "\n";
    let mode = match w.guardian {
        tenure::config::GuardianMode::Auto => "auto",
        tenure::config::GuardianMode::Allow => "allow",
        tenure::config::GuardianMode::Off => "off",
    };
    if w.guardian == tenure::config::GuardianMode::Off || w.mode == WatchdogMode::Off {
        out += &format!("  guardian                 off ([watchdog] guardian = \"{mode}\")\n");
        return out;
    }
    // With the guardian there is no device: `F` is the unwatched deadline
    // `min(H, s + ttl - (L_w + R + 1 s))` (docs/timing.md), `G = F - B_g`.
    let f = tenure::config::budget(t, t.ttl, None).fence_deadline;
    let bg = w.guardian_kill_budget;
    out += &format!(
        "  guardian                 [watchdog] guardian = \"{mode}\": used where no device and no \
         WATCHDOG_USEC exist{}\n",
        if w.mode == WatchdogMode::Required && w.guardian != tenure::config::GuardianMode::Allow {
            " (not in required mode: needs \"allow\")"
        } else {
            ""
        }
    );
    out += &format!(
        "  guardian kill budget B_g {} s (<= demote_budget B = {} s)\n",
        bg.as_secs_f64(),
        t.demote_budget.as_secs_f64()
    );
    out += &format!(
        "  guardian deadline G      s + {} s (= F - B_g): a frozen agent's PostgreSQL is SIGKILLed \
         from G and gone by F = s + {} s; an agent that dies while G is pending: at once\n",
        f.saturating_sub(bg).as_secs_f64(),
        f.as_secs_f64()
    );
    out
}

/// What the one-shot commands print, through one checked write (`| head` ends
/// the process quietly; never `print!`'s panic).
fn say(text: &str) {
    tenure::ctl::stdout_or_exit("tenure", text);
}

/// `println!` through [`say`].
macro_rules! sayln {
    ($($t:tt)*) => {
        say(&format!("{}\n", format_args!($($t)*)))
    };
}

fn main_exec() -> Result<(), MainError> {
    let args: Vec<String> = std::env::args_os()
        .skip(1)
        .map(|a| {
            a.into_string()
                .map_err(|a| usage(format!("argument {a:?} is not valid UTF-8")))
        })
        .collect::<Result<_, _>>()?;
    match parse_args(&args)? {
        Command::Help => {
            say(USAGE);
            Ok(())
        }
        Command::Version => {
            say(&format!("tenure {VERSION}\n"));
            Ok(())
        }
        Command::CheckConfig { config } => {
            let c = Config::load(&config)?;
            if let Some(w) = tenure::config::readable_secret_warning(&config) {
                say(&format!("warning: {w}\n"));
            }
            say(&budget_report(&config, &c));
            let now = tenure::clock::realtime().as_secs() as i64;
            say(&tenure::certs::report(&c.certs, now));
            Ok(())
        }
        Command::Run { config } => {
            // INVARIANT: nothing is started before the file is fully validated.
            let c = Config::load(&config)?;
            let level = tenure::logging::level_from_env().map_err(MainError::Usage)?;
            tenure::logging::init(level, &c.log).map_err(MainError::Runtime)?;
            tenure::events::set_identity(&c.scope, &c.name);
            if let Some(w) = tenure::config::readable_secret_warning(&config) {
                log::warn!("{w}");
            }
            log::info!(
                "tenure {VERSION} starting: scope {}, member {}, config {}",
                c.scope,
                c.name,
                config.display()
            );
            tenure::agent::run(c, &config).map_err(|e| MainError::Runtime(format!("agent: {e}")))
        }
        Command::ConfirmEpoch { config, epoch, by } => {
            let c = Config::load(&config)?;
            let by = by
                .or_else(|| std::env::var("SUDO_USER").ok())
                .or_else(|| std::env::var("USER").ok())
                .unwrap_or_else(|| "operator".into());
            let (n, cleared) = tenure::agent::confirm_epoch(&c, epoch, &by)
                .map_err(|e| MainError::Runtime(format!("confirm-epoch: {e}")))?;
            match cleared {
                Some(m) => match &m.parse_error {
                    None => sayln!(
                        "rollback marker {} deleted (written by {} at {}: {}; revision {} seen, \
                         {} found)",
                        m.key,
                        m.by,
                        m.at,
                        m.reason,
                        m.seen_revision,
                        m.found_revision
                    ),
                    Some(e) => {
                        sayln!("rollback marker {} deleted (it did not parse: {e})", m.key)
                    }
                },
                None => sayln!("no rollback marker was set"),
            }
            sayln!(
                "confirm_epoch written: nodes whose data carries an epoch up to {n} may now lead \
                 under a smaller leader-key epoch"
            );
            Ok(())
        }
        Command::Demo { keep } => {
            let level = tenure::logging::level_from_env().map_err(MainError::Usage)?;
            // The demo's agents log for themselves; the demo itself to stderr only.
            let stderr_only = tenure::logging::LogConfig {
                syslog: false,
                ..Default::default()
            };
            tenure::logging::init(level, &stderr_only).map_err(MainError::Runtime)?;
            tenure::demo::run(keep).map_err(|e| MainError::Runtime(format!("demo: {e}")))
        }
    }
}

fn main() -> ExitCode {
    // The resolver child the agent re-executes itself as (src/resolve.rs): before
    // anything else, so it reads no config and opens no log.
    if std::env::args_os()
        .nth(1)
        .is_some_and(|a| a == tenure::resolve::SUBCOMMAND)
    {
        return tenure::resolve::child_main(std::env::args_os().skip(2));
    }
    if std::env::args_os()
        .nth(1)
        .is_some_and(|a| a == tenure::resolve::SRV_SUBCOMMAND)
    {
        return tenure::resolve::srv_child_main(std::env::args_os().skip(2));
    }
    // `tenure ctl` has its own parser, help and exit codes (src/ctl).
    if std::env::args_os().nth(1).is_some_and(|a| a == "ctl") {
        return ExitCode::from(tenure::ctl::main(std::env::args_os().skip(2)));
    }
    match main_exec() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tenure: {e}");
            ExitCode::from(e.exit_code())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(args: &[&str]) -> Result<Command, MainError> {
        let v: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        parse_args(&v)
    }

    fn usage_text(args: &[&str]) -> String {
        match p(args) {
            Err(MainError::Usage(s)) => s,
            other => panic!("{args:?}: {other:?}"),
        }
    }

    #[test]
    fn commands() {
        assert_eq!(
            p(&["run", "--config", "a.toml"]).ok(),
            Some(Command::Run {
                config: "a.toml".into()
            })
        );
        assert_eq!(
            p(&["run", "--config=a.toml"]).ok(),
            Some(Command::Run {
                config: "a.toml".into()
            })
        );
        assert_eq!(
            p(&["check-config", "a.toml"]).ok(),
            Some(Command::CheckConfig {
                config: "a.toml".into()
            })
        );
        assert_eq!(p(&["demo"]).ok(), Some(Command::Demo { keep: false }));
        assert_eq!(
            p(&["demo", "--keep"]).ok(),
            Some(Command::Demo { keep: true })
        );
        assert_eq!(p(&["--version"]).ok(), Some(Command::Version));
        assert_eq!(
            p(&[
                "confirm-epoch",
                "--config",
                "a.toml",
                "--epoch",
                "9",
                "--by",
                "al"
            ])
            .ok(),
            Some(Command::ConfirmEpoch {
                config: "a.toml".into(),
                epoch: Some(9),
                by: Some("al".into())
            })
        );
        assert!(usage_text(&["confirm-epoch"]).contains("--config"));
        assert!(usage_text(&["confirm-epoch", "-c", "a", "--epoch", "x"]).contains("\"x\""));
        assert!(usage_text(&["confirm-epoch", "-c", "a", "--epoch"]).contains("needs a value"));
        assert_eq!(p(&["--help"]).ok(), Some(Command::Help));
    }

    #[test]
    fn usage_errors_name_the_argument() {
        assert!(usage_text(&[]).contains("no subcommand"));
        assert!(usage_text(&["frobnicate"]).contains("\"frobnicate\""));
        assert!(usage_text(&["--frob"]).contains("\"--frob\""));
        assert!(usage_text(&["run"]).contains("--config"));
        assert!(usage_text(&["run", "--config"]).contains("needs a FILE"));
        assert!(usage_text(&["run", "--conf", "x"]).contains("\"--conf\""));
        assert!(usage_text(&["run", "x.toml"]).contains("\"x.toml\""));
        assert!(usage_text(&["check-config"]).contains("needs a FILE"));
        assert!(usage_text(&["check-config", "a", "b"]).contains("\"b\""));
        assert!(usage_text(&["demo", "--kept"]).contains("\"--kept\""));
        assert!(usage_text(&["--version", "x"]).contains("\"x\""));
    }
}
