//! How a new replica is built: `[postgresql] create_replica_methods` and each
//! method's table, spelt as Patroni spells them (docs "Replica imaging and
//! bootstrap") so its users recognise them: a list of method names tried in order,
//! `basebackup` the built-in one (`pg_basebackup` from the leader, its options in
//! `[postgresql.basebackup]`), every other name a table `[postgresql.<name>]` with
//! a `command`, `no_params`, and any other keys passed to the command as
//! `--key=value`.
//!
//! Owns: parsing and checking those tables into [`CreateReplica`], the argument
//! lists `pg::job` runs. Must never: accept an option that would make
//! `pg_basebackup` write anything but a plain copy into tenure's own directory
//! (tenure sets the directory, the source, the user, the WAL method), accept
//! Patroni's `keep_data` (tenure never restores into a directory holding files,
//! DESIGN §3a) or `no_leader` (not built: a replica is built only from a running
//! leader), or let a value carry a control character into a child's arguments.

use toml::Value;

use super::{ConfigError, Sect, a_type};

/// The shortest `create_replica_timeout` accepted.
const MIN_METHOD_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);

/// The built-in method's name.
pub const BASEBACKUP: &str = "basebackup";

/// The parameters tenure passes to a method unless it sets `no_params`, in
/// Patroni's names.
pub const DEFAULT_PARAMS: &[&str] = &["scope", "datadir", "role", "connstring"];

/// Keys of `[postgresql]` a method may not be named after (its table would be
/// that key).
pub const RESERVED: &[&str] = &[
    "bin_dir",
    "data_dir",
    "listen",
    "connect_address",
    "socket_dir",
    "user",
    "move_aside_unusable",
    "sslmode",
    "hba_clientcert",
    "hba_method",
    "authentication",
    "parameters",
    "pg_hba",
    "create_replica_methods",
    "create_replica_timeout",
];

/// `pg_basebackup` options `[postgresql.basebackup]` may set: each a
/// `--name=value` (or `--name` for a boolean `true`). Everything else
/// `pg_basebackup` takes is tenure's (`--pgdata`, `--host`, `--port`,
/// `--username`, `--wal-method`, `--format`, `--write-recovery-conf`, ...) or
/// would leave something tenure cannot move into place (`--waldir`: a WAL
/// directory outside the copy, which a failed attempt would leave behind).
pub const BASEBACKUP_OPTIONS: &[&str] = &[
    "max-rate",
    "checkpoint",
    "label",
    "verbose",
    "progress",
    "no-verify-checksums",
    "no-manifest",
    "manifest-checksums",
];

/// How this node builds a replica.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CreateReplica {
    /// In the order they are tried; never empty (default: basebackup alone).
    pub methods: Vec<ReplicaMethod>,
    /// `pg_basebackup` options from `[postgresql.basebackup]`, ready as arguments
    /// (`--max-rate=100M`); `--checkpoint` is here when set (tenure's default is
    /// `fast`).
    pub basebackup_args: Vec<String>,
    /// `[postgresql] create_replica_timeout`: the longest one method's run may
    /// take, from its start to its exit; then its process group is killed and the
    /// next method runs. `None` (the default, or 0): no limit.
    pub timeout: Option<std::time::Duration>,
}

impl Default for CreateReplica {
    fn default() -> CreateReplica {
        CreateReplica {
            methods: vec![ReplicaMethod::Basebackup],
            basebackup_args: Vec::new(),
            timeout: None,
        }
    }
}

impl CreateReplica {
    /// The methods' names, in order, for messages.
    pub fn names(&self) -> Vec<&str> {
        self.methods.iter().map(ReplicaMethod::name).collect()
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReplicaMethod {
    /// `pg_basebackup` from the leader.
    Basebackup,
    /// An operator's command (a restore from a backup tool).
    Command(CommandMethod),
}

impl ReplicaMethod {
    pub fn name(&self) -> &str {
        match self {
            ReplicaMethod::Basebackup => BASEBACKUP,
            ReplicaMethod::Command(c) => &c.name,
        }
    }
}

/// `[postgresql.<name>]`: a command that builds a copy of the cluster into the
/// directory tenure gives it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CommandMethod {
    pub name: String,
    /// The program (absolute) and its fixed words; run without a shell.
    pub command: Vec<String>,
    /// `no_params = true`: leave out `--scope`, `--datadir`, `--role`,
    /// `--connstring` (the directory is still in `PGDATA`).
    pub no_params: bool,
    /// The table's other keys as `--key=value`, in key order.
    pub params: Vec<String>,
}

/// A method's name: what Patroni allows in a YAML key that is also a TOML bare key.
fn check_name(name: &str) -> Result<(), String> {
    if name.is_empty()
        || name.len() > 63
        || !name
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'-'))
    {
        return Err(format!(
            "method name {name:?}: expected 1 to 63 of [A-Za-z0-9_-]"
        ));
    }
    if RESERVED.contains(&name) {
        return Err(format!(
            "method name {name:?} is a key of [postgresql] itself; choose another"
        ));
    }
    Ok(())
}

/// A value passed on a command line: a string, number or boolean, one line.
fn arg_value(v: &Value) -> Result<String, String> {
    let s = match v {
        Value::String(s) => s.clone(),
        Value::Integer(i) => i.to_string(),
        Value::Float(x) if x.is_finite() => x.to_string(),
        Value::Boolean(b) => b.to_string(),
        other => {
            return Err(format!(
                "expected a string, number or boolean, found {}",
                a_type(other)
            ));
        }
    };
    if s.chars().any(char::is_control) {
        return Err("must not contain control characters".into());
    }
    Ok(s)
}

/// A key whose value is likely a secret: `pass`, `secret`, `token` or
/// `credential` anywhere in its name, or a word `key` in a name that is not a
/// file's path (pgBackRest's `repo1-s3-key`, `repo1-azure-key`; not
/// `repo1-host-key-file` nor `repo1-s3-key-type`).
fn looks_secret(k: &str) -> bool {
    let k = k.to_ascii_lowercase();
    let path = ["-file", "_file", "-path", "_path", "-type", "_type"]
        .iter()
        .any(|s| k.ends_with(s));
    ["pass", "secret", "token", "credential"]
        .iter()
        .any(|w| k.contains(w))
        || (!path && k.split(['-', '_', '.']).any(|w| w == "key"))
}

/// An option name passed as `--name`: no `=` (it would change what the value
/// is), no leading `-`, nothing a shell or a parser could split.
fn check_option_name(k: &str) -> Result<(), String> {
    if k.is_empty()
        || k.starts_with('-')
        || !k
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'-' | b'.'))
    {
        return Err(format!(
            "{k:?} is not usable as an option name ([A-Za-z0-9_.-]+, not starting with -)"
        ));
    }
    Ok(())
}

/// `[postgresql] create_replica_methods` and the tables it names, plus
/// `[postgresql.basebackup]`. The caller lets [`table_keys`] through its
/// unknown-key check.
pub(super) fn parse(pg: &Sect<'_>) -> Result<CreateReplica, ConfigError> {
    let key = "create_replica_methods";
    let names: Vec<String> = match pg.table.get(key) {
        None => vec![BASEBACKUP.to_string()],
        Some(Value::Array(a)) => {
            let mut out: Vec<String> = Vec::with_capacity(a.len());
            for (i, v) in a.iter().enumerate() {
                let Value::String(s) = v else {
                    return Err(pg.wrong(&format!("{key}[{i}]"), "a method name", v));
                };
                check_name(s).map_err(|p| pg.err(&format!("{key}[{i}]"), p))?;
                if out.contains(s) {
                    return Err(pg.err(&format!("{key}[{i}]"), format!("{s:?} is listed twice")));
                }
                out.push(s.clone());
            }
            // Patroni: an empty list means the built-in method.
            if out.is_empty() {
                out.push(BASEBACKUP.to_string());
            }
            out
        }
        Some(v) => return Err(pg.wrong(key, "an array of method names", v)),
    };
    let mut methods = Vec::with_capacity(names.len());
    for name in &names {
        if name == BASEBACKUP {
            methods.push(ReplicaMethod::Basebackup);
            continue;
        }
        if !pg.table.contains_key(name) {
            return Err(pg.err(
                name,
                format!("missing: {key} lists {name:?}, which needs a [postgresql.{name}] table with its command"),
            ));
        }
        methods.push(ReplicaMethod::Command(command_method(
            &pg.sub(name)?,
            name,
        )?));
    }
    let basebackup_args = basebackup_args(&pg.sub(BASEBACKUP)?)?;
    // 0 (or absent): no limit, as before this setting and as Patroni.
    let timeout = match pg.table.get("create_replica_timeout") {
        Some(Value::Integer(0)) => None,
        Some(Value::Float(x)) if *x == 0.0 => None,
        _ => pg.secs("create_replica_timeout")?,
    };
    if let Some(t) = timeout
        && t < MIN_METHOD_TIMEOUT
    {
        return Err(pg.err(
            "create_replica_timeout",
            format!(
                "{} s is less than {} s: a copy killed that soon never finishes (0: no limit)",
                t.as_secs_f64(),
                MIN_METHOD_TIMEOUT.as_secs()
            ),
        ));
    }
    Ok(CreateReplica {
        methods,
        basebackup_args,
        timeout,
    })
}

/// The `[postgresql]` keys the methods' tables take: `create_replica_methods`,
/// `basebackup` and every listed name.
pub(super) fn table_keys(pg: &Sect<'_>) -> Vec<String> {
    let mut keys = vec!["create_replica_methods".to_string(), BASEBACKUP.to_string()];
    if let Some(Value::Array(a)) = pg.table.get("create_replica_methods") {
        for v in a {
            if let Value::String(s) = v
                && !RESERVED.contains(&s.as_str())
            {
                keys.push(s.clone());
            }
        }
    }
    keys
}

fn command_method(s: &Sect<'_>, name: &str) -> Result<CommandMethod, ConfigError> {
    let command = match s.table.get("command") {
        None => return Err(s.err("command", "missing: the program that builds the replica")),
        Some(Value::String(c)) => {
            crate::hooks::parse_command(c).map_err(|p| s.err("command", p))?
        }
        Some(v) => return Err(s.wrong("command", "a string (program and words)", v)),
    };
    let no_params = s.boolean("no_params")?.unwrap_or(false);
    let mut params = Vec::new();
    for (k, v) in s.table {
        match k.as_str() {
            "command" | "no_params" => {}
            "keep_data" => {
                return Err(s.err(
                    k,
                    "not accepted: tenure never restores into a data directory holding files \
                     (DESIGN §3a); every method builds into an empty directory of tenure's \
                     own (<data_dir>.basebackup-tmp), which is moved into place when it \
                     holds a cluster. Remove keep_data (and a --delta restore gains nothing)",
                ));
            }
            "no_leader" | "no_master" => {
                return Err(s.err(
                    k,
                    "not built: tenure builds a replica only while a leader runs (restoring \
                     a cluster with no leader is a bootstrap, not a replica)",
                ));
            }
            p if !no_params && DEFAULT_PARAMS.contains(&p) => {
                return Err(s.err(
                    k,
                    format!(
                        "--{p} is set by tenure (set no_params = true to pass your own \
                         parameters only)"
                    ),
                ));
            }
            _ if looks_secret(k) => {
                return Err(s.err(
                    k,
                    "looks like a secret: a method's keys become its command line, which \
                     every local user can read (ps, /proc); keep it in the tool's own \
                     configuration file (0600)",
                ));
            }
            _ => {
                check_option_name(k).map_err(|p| s.err(k, p))?;
                let val = arg_value(v).map_err(|p| s.err(k, p))?;
                params.push(format!("--{k}={val}"));
            }
        }
    }
    Ok(CommandMethod {
        name: name.to_string(),
        command,
        no_params,
        params,
    })
}

fn basebackup_args(s: &Sect<'_>) -> Result<Vec<String>, ConfigError> {
    let mut out = Vec::new();
    for (k, v) in s.table {
        if !BASEBACKUP_OPTIONS.contains(&k.as_str()) {
            return Err(s.err(
                k,
                format!(
                    "not a pg_basebackup option tenure passes (allowed: {}); the copy's \
                     directory, source, user, format and WAL method are tenure's",
                    BASEBACKUP_OPTIONS.join(", ")
                ),
            ));
        }
        match (k.as_str(), v) {
            ("verbose" | "progress" | "no-verify-checksums" | "no-manifest", Value::Boolean(b)) => {
                if *b {
                    out.push(format!("--{k}"));
                }
            }
            ("verbose" | "progress" | "no-verify-checksums" | "no-manifest", other) => {
                return Err(s.wrong(k, "true or false", other));
            }
            ("max-rate", v) => {
                let r = arg_value(v).map_err(|p| s.err(k, p))?;
                check_rate(&r).map_err(|p| s.err(k, p))?;
                out.push(format!("--max-rate={r}"));
            }
            ("checkpoint", Value::String(c)) if c == "fast" || c == "spread" => {
                out.push(format!("--checkpoint={c}"));
            }
            ("checkpoint", other) => {
                return Err(s.err(
                    k,
                    format!("expected \"fast\" or \"spread\", found {}", show(other)),
                ));
            }
            ("manifest-checksums", Value::String(c))
                if ["NONE", "CRC32C", "SHA224", "SHA256", "SHA384", "SHA512"]
                    .contains(&c.to_ascii_uppercase().as_str()) =>
            {
                out.push(format!("--manifest-checksums={c}"));
            }
            ("manifest-checksums", other) => {
                return Err(s.err(
                    k,
                    format!(
                        "expected NONE, CRC32C, SHA224, SHA256, SHA384 or SHA512, found {}",
                        show(other)
                    ),
                ));
            }
            (_, v) => {
                // label
                let l = arg_value(v).map_err(|p| s.err(k, p))?;
                out.push(format!("--{k}={l}"));
            }
        }
    }
    Ok(out)
}

fn show(v: &Value) -> String {
    match v {
        Value::String(s) => format!("{s:?}"),
        other => a_type(other).to_string(),
    }
}

/// `pg_basebackup --max-rate`: a whole number of kB/s, or with a `k` or `M`
/// suffix (32 kB/s to 1 GB/s; pg_basebackup checks the range itself).
fn check_rate(r: &str) -> Result<(), String> {
    let digits = r.strip_suffix(['k', 'M']).unwrap_or(r);
    if digits.is_empty() || !digits.bytes().all(|c| c.is_ascii_digit()) || digits.len() > 10 {
        return Err(format!(
            "expected a rate such as \"100M\", \"512k\" or \"4096\" (kB/s), found {r:?}"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn parse_str(text: &str) -> Result<CreateReplica, String> {
        let root: toml::Table = text.parse().map_err(|e| format!("{e}"))?;
        let sect = Sect {
            file: Path::new("/etc/tenure.toml"),
            prefix: String::new(),
            table: &root,
        };
        let pg = sect.sub("postgresql").map_err(|e| e.to_string())?;
        parse(&pg).map_err(|e| e.to_string())
    }

    /// `[postgresql] create_replica_timeout`: off unless set, 0 off, else seconds.
    #[test]
    fn a_timeout_per_method() {
        assert_eq!(parse_str("[postgresql]\n").unwrap().timeout, None);
        for off in ["0", "0.0"] {
            let c = parse_str(&format!("[postgresql]\ncreate_replica_timeout = {off}\n")).unwrap();
            assert_eq!(c.timeout, None, "{off}");
        }
        let c = parse_str("[postgresql]\ncreate_replica_timeout = 7200\n").unwrap();
        assert_eq!(c.timeout, Some(std::time::Duration::from_secs(7200)));
        for bad in ["-1", "\"2h\"", "100000", "30", "0.001"] {
            let e = parse_str(&format!("[postgresql]\ncreate_replica_timeout = {bad}\n"))
                .expect_err(bad);
            assert!(e.contains("create_replica_timeout"), "{bad}: {e}");
        }
        // Not a method's name: it is a key of [postgresql] itself.
        let e = parse_str("[postgresql]\ncreate_replica_methods = [\"create_replica_timeout\"]\n")
            .expect_err("reserved");
        assert!(e.contains("a key of [postgresql] itself"), "{e}");
    }

    #[test]
    fn default_is_basebackup_alone() {
        let c = parse_str("[postgresql]\n").unwrap();
        assert_eq!(c, CreateReplica::default());
        let c = parse_str("[postgresql]\ncreate_replica_methods = []\n").unwrap();
        assert_eq!(c.names(), vec!["basebackup"]);
    }

    #[test]
    fn a_command_method_with_params_in_key_order() {
        let c = parse_str(
            "[postgresql]\ncreate_replica_methods = [\"pgbackrest\", \"basebackup\"]\n\
             [postgresql.pgbackrest]\ncommand = \"/usr/bin/pgbackrest --stanza=main restore\"\n\
             no_params = true\n\"pg1-path\" = \"/srv/pg.basebackup-tmp\"\nprocess-max = 4\nlog-level-console = \"info\"\n\
             [postgresql.basebackup]\nmax-rate = \"100M\"\ncheckpoint = \"spread\"\nverbose = true\n",
        )
        .unwrap();
        assert_eq!(c.names(), vec!["pgbackrest", "basebackup"]);
        let ReplicaMethod::Command(m) = &c.methods[0] else {
            panic!("{c:?}")
        };
        assert_eq!(
            m.command,
            vec!["/usr/bin/pgbackrest", "--stanza=main", "restore"]
        );
        assert!(m.no_params);
        assert_eq!(
            m.params,
            vec![
                "--log-level-console=info",
                "--pg1-path=/srv/pg.basebackup-tmp",
                "--process-max=4"
            ]
        );
        assert_eq!(
            c.basebackup_args,
            vec!["--checkpoint=spread", "--max-rate=100M", "--verbose"]
        );
    }

    #[test]
    fn bad_input_names_what_is_wrong() {
        let cases: &[(&str, &str)] = &[
            (
                "create_replica_methods = [\"pgbackrest\"]\n",
                "postgresql.pgbackrest: missing",
            ),
            (
                "create_replica_methods = [\"a\", \"a\"]\n[postgresql.a]\ncommand = \"/bin/true\"\n",
                "listed twice",
            ),
            (
                "create_replica_methods = [\"parameters\"]\n",
                "is a key of [postgresql] itself",
            ),
            ("create_replica_methods = [\"a b\"]\n", "[A-Za-z0-9_-]"),
            ("create_replica_methods = \"basebackup\"\n", "an array"),
            ("create_replica_methods = [1]\n", "a method name"),
            (
                "create_replica_methods = [\"x\"]\n[postgresql.x]\nno_params = true\n",
                "postgresql.x.command: missing",
            ),
            (
                "create_replica_methods = [\"x\"]\n[postgresql.x]\ncommand = \"restore.sh\"\n",
                "absolute path",
            ),
            (
                "create_replica_methods = [\"x\"]\n[postgresql.x]\ncommand = \"/bin/x\"\nkeep_data = true\n",
                "never restores into a data directory holding files",
            ),
            (
                "create_replica_methods = [\"x\"]\n[postgresql.x]\ncommand = \"/bin/x\"\nno_leader = 1\n",
                "not built",
            ),
            (
                "create_replica_methods = [\"x\"]\n[postgresql.x]\ncommand = \"/bin/x\"\ndatadir = \"/srv\"\n",
                "--datadir is set by tenure",
            ),
            (
                "create_replica_methods = [\"x\"]\n[postgresql.x]\ncommand = \"/bin/x\"\nopts = [1]\n",
                "postgresql.x.opts: expected a string, number or boolean, found an array",
            ),
            (
                "create_replica_methods = [\"x\"]\n[postgresql.x]\ncommand = \"/bin/x\"\nv = \"a\\nb\"\n",
                "control characters",
            ),
            (
                "create_replica_methods = [\"x\"]\n[postgresql.x]\ncommand = \"/bin/x\"\n\"a=b\" = 1\n",
                "not usable as an option name",
            ),
            (
                "create_replica_methods = [\"x\"]\n[postgresql.x]\ncommand = \"/bin/x\"\n\"repo1-cipher-pass\" = \"s\"\n",
                "postgresql.x.repo1-cipher-pass: looks like a secret",
            ),
            (
                "create_replica_methods = [\"x\"]\n[postgresql.x]\ncommand = \"/bin/x\"\n\"repo1-s3-key\" = \"s\"\n",
                "postgresql.x.repo1-s3-key: looks like a secret",
            ),
            (
                "create_replica_methods = [\"x\"]\n[postgresql.x]\ncommand = \"/bin/x\"\nS3-Key-Secret = \"s\"\n",
                "looks like a secret",
            ),
            (
                "[postgresql.basebackup]\nwaldir = \"/wal\"\n",
                "postgresql.basebackup.waldir: not a pg_basebackup option tenure passes",
            ),
            ("[postgresql.basebackup]\npgdata = \"/x\"\n", "are tenure's"),
            (
                "[postgresql.basebackup]\nmax-rate = \"fast\"\n",
                "expected a rate",
            ),
            (
                "[postgresql.basebackup]\ncheckpoint = \"slow\"\n",
                "expected \"fast\" or \"spread\", found \"slow\"",
            ),
            (
                "[postgresql.basebackup]\nverbose = \"yes\"\n",
                "true or false",
            ),
            (
                "[postgresql.basebackup]\nmanifest-checksums = \"md5\"\n",
                "SHA512",
            ),
        ];
        for (body, want) in cases {
            let text = format!("[postgresql]\n{body}");
            match parse_str(&text) {
                Ok(c) => panic!("{body:?} was accepted: {c:?}"),
                Err(e) => assert!(e.contains(want), "{body:?}: {e} (wanted {want:?})"),
            }
        }
    }

    #[test]
    fn no_params_lets_the_default_names_through_as_the_operator_s() {
        let c = parse_str(
            "[postgresql]\ncreate_replica_methods = [\"x\"]\n[postgresql.x]\n\
             command = \"/bin/x\"\nno_params = true\ndatadir = \"/srv/x\"\n",
        )
        .unwrap();
        let ReplicaMethod::Command(m) = &c.methods[0] else {
            panic!()
        };
        assert_eq!(m.params, vec!["--datadir=/srv/x"]);
    }
}

#[cfg(test)]
mod secret_tests {
    use super::looks_secret;

    /// Review of session 18, L7: pgBackRest's key options are secrets, a key
    /// file's path is not.
    #[test]
    fn secret_like_keys() {
        for k in [
            "repo1-cipher-pass",
            "repo1-s3-key",
            "repo1-s3-key-secret",
            "repo1-azure-key",
            "repo1-gcs-key",
            "api_token",
            "Credential",
        ] {
            assert!(looks_secret(k), "{k}");
        }
        for k in [
            "repo1-host-key-file",
            "pg1-path",
            "stanza",
            "repo1-s3-key-type",
            "keyring",
            "process-max",
        ] {
            assert!(!looks_secret(k), "{k}");
        }
    }
}
