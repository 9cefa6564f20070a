//! The text of the files the agent owns around a PostgreSQL data directory:
//! `tenure.conf`, `pg_hba.conf`, the passfile, the role SQL run at bootstrap.
//!
//! Owns: rendering and quoting. Pure functions, no I/O, so every byte the agent
//! writes is unit-tested. Must never: put a password anywhere but the passfile and
//! the bootstrap SQL (which is fed on stdin and never stored in the data dir).

use std::time::Duration;

use crate::config::{PgConfig, PgSsl};

use super::ConnTarget;

/// Settings in `PgConfig.parameters` that would undo what the agent owns. They are
/// refused at construction rather than silently overridden.
pub const AGENT_OWNED: &[&str] = &[
    "listen_addresses",
    "port",
    "unix_socket_directories",
    "unix_socket_permissions",
    "primary_conninfo",
    "primary_slot_name",
    "recovery_target_timeline",
    "synchronous_standby_names",
    "include",
    "include_if_exists",
    "include_dir",
    // A tenure node never ends recovery by itself: a recovery target (which ends
    // it, and with `recovery_target_action = 'promote'` promotes) or a trigger
    // file would make a standby promote without the leader key. `tenure.conf`
    // clears them ([`RECOVERY_CLEARED`]); only `pg_promote()` under a won key ends
    // recovery.
    "recovery_target",
    "recovery_target_action",
    "recovery_target_inclusive",
    "recovery_target_lsn",
    "recovery_target_name",
    "recovery_target_time",
    "recovery_target_xid",
    "promote_trigger_file",
];

/// The recovery settings `tenure.conf` sets empty, after the operator's own and
/// after whatever a copy's `postgresql.conf` (and the files it includes before
/// `tenure.conf`) carries: no recovery target, no trigger file.
pub const RECOVERY_CLEARED: &[&str] = &[
    "recovery_target",
    "recovery_target_lsn",
    "recovery_target_name",
    "recovery_target_time",
    "recovery_target_xid",
    "promote_trigger_file",
];

/// The file, next to `tenure.conf`, that holds `synchronous_standby_names` alone:
/// the core changes it at run time (DESIGN §3a) without touching the standby
/// settings, and a start reads the value last set.
pub const SYNC_CONF: &str = "tenure.sync.conf";

/// The text of [`SYNC_CONF`].
pub fn sync_conf(names: &str) -> String {
    format!(
        "# Written by tenure (synchronous mode, DESIGN §3a). Do not edit.\n\
         synchronous_standby_names = {}\n",
        conf_quote(names)
    )
}

/// The value a [`sync_conf`] text sets (`None`: not such a text). Read once at
/// start-up, so a failed reload before an agent restart is still seen (review 2,
/// finding 9).
pub fn parse_sync_conf(text: &str) -> Option<String> {
    let line = text
        .lines()
        .find_map(|l| l.strip_prefix("synchronous_standby_names = "))?;
    let inner = line.strip_prefix('\'')?.strip_suffix('\'')?;
    let mut out = String::new();
    let mut chars = inner.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => out.push(chars.next()?),
            '\'' => match chars.next() {
                Some('\'') => out.push('\''),
                _ => return None,
            },
            c => out.push(c),
        }
    }
    Some(out)
}

/// The file, next to `tenure.conf`, that holds the cluster-wide PostgreSQL settings
/// of the `config` key's `postgresql.parameters`, as PostgreSQL's own parser
/// accepted them (`paramcheck`). `tenure.conf` includes it after tenure's managed
/// defaults and before the node's own `[postgresql.parameters]`, which win
/// (Patroni's order: local over dynamic).
pub const PARAMS_CONF: &str = "tenure.params.conf";

/// The text of [`PARAMS_CONF`]: one `name = 'value'` line each, in the order given.
pub fn params_conf<'a>(params: impl IntoIterator<Item = &'a (String, String)>) -> String {
    settings_conf(
        "# Written by tenure from the config key's postgresql.parameters (tenure ctl \
         edit-config).\n# Do not edit: changes are overwritten. A node's own \
         [postgresql.parameters] win over these.\n",
        params,
    )
}

/// `header`, then one `name = 'value'` line per setting, in the order given (the
/// shape [`parse_settings_conf`] reads back).
fn settings_conf<'a>(
    header: &str,
    params: impl IntoIterator<Item = &'a (String, String)>,
) -> String {
    let mut s = String::from(header);
    for (k, v) in params {
        s.push_str(k);
        s.push_str(" = ");
        s.push_str(&conf_quote(v));
        s.push('\n');
    }
    s
}

/// The settings a file of [`params_conf`]'s (or [`node_conf`]'s) making holds:
/// `name = 'value'` lines in [`conf_quote`]'s quoting, comments skipped. A line
/// of another shape (a file edited by hand) is left out: the caller judges what
/// it reads, never more.
pub fn parse_settings_conf(text: &str) -> Vec<(String, String)> {
    text.lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .filter_map(|l| {
            let (k, v) = l.split_once(" = ")?;
            let inner = v.strip_prefix('\'')?.strip_suffix('\'')?;
            let mut out = String::with_capacity(inner.len());
            let mut it = inner.chars().peekable();
            while let Some(c) = it.next() {
                match c {
                    '\'' if it.peek() == Some(&'\'') => {
                        it.next();
                        out.push('\'');
                    }
                    '\\' if it.peek() == Some(&'\\') => {
                        it.next();
                        out.push('\\');
                    }
                    // A lone quote or backslash: not what conf_quote writes.
                    '\'' | '\\' => return None,
                    c => out.push(c),
                }
            }
            Some((k.trim().to_string(), out))
        })
        .collect()
}

/// Whether every line of `text` that is not blank or a comment is one
/// [`parse_settings_conf`] reads (a file tenure wrote), each name once.
pub fn settings_conf_is_ours(text: &str) -> bool {
    let lines = text
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.trim_start().starts_with('#'))
        .count();
    let read = parse_settings_conf(text);
    let mut names: Vec<String> = read.iter().map(|(k, _)| k.to_ascii_lowercase()).collect();
    names.sort();
    names.dedup();
    read.len() == lines && names.len() == lines
}

/// The file, next to `tenure.conf`, that holds the node's own
/// `[postgresql.parameters]`: `tenure.conf` includes it after the cluster-wide
/// settings (so the node's own win) and before what tenure owns (which nothing
/// overrides). Its own file so a reload of the agent's configuration rewrites it
/// alone and reloads PostgreSQL, without `tenure.conf`'s standby settings, which
/// need the leader's address. Included with `include`, not `include_if_exists`:
/// written before every `tenure.conf`, so a missing one is an error PostgreSQL
/// names, never settings silently gone.
pub const NODE_CONF: &str = "tenure.node.conf";

/// The text of [`NODE_CONF`]: one `name = 'value'` line each, in the order given.
pub fn node_conf<'a>(params: impl IntoIterator<Item = &'a (String, String)>) -> String {
    settings_conf(
        "# Written by tenure from this node's [postgresql.parameters] (its configuration \
         file; a reload of the agent rewrites it).\n# Do not edit: changes are \
         overwritten.\n",
        params,
    )
}

/// The marker line that records which member a standby config follows, so a
/// restarted agent still knows (`PgStatus.following`).
pub const FOLLOWING_MARKER: &str = "# tenure: following ";

/// Split `host:port` (IPv6 as `[::1]:5432`). Errors name what is wrong.
pub fn split_host_port(s: &str) -> Result<(String, u16), String> {
    let (host, port) = s
        .rsplit_once(':')
        .ok_or_else(|| format!("{s:?}: expected host:port"))?;
    let host = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    if host.is_empty() {
        return Err(format!("{s:?}: empty host"));
    }
    // Control characters too: a line break in a host from another member's key
    // would break `tenure.conf` and the passfile (review of bad input, 1).
    if host.contains(['/', ' ', '\'', '"', '\\', '@']) || host.chars().any(char::is_control) {
        return Err(format!("{s:?}: host {host:?} has forbidden characters"));
    }
    let port: u16 = port
        .parse()
        .map_err(|_| format!("{s:?}: port {port:?} is not a number in 1..65535"))?;
    if port == 0 {
        return Err(format!("{s:?}: port 0"));
    }
    Ok((host.to_string(), port))
}

/// A `postgresql.conf` string literal: single quotes, quotes doubled, backslashes
/// doubled (the parser treats `\` as an escape inside quotes).
pub fn conf_quote(v: &str) -> String {
    format!("'{}'", v.replace('\\', "\\\\").replace('\'', "''"))
}

/// A libpq conninfo value: bare when it only has safe characters, else quoted
/// with `\'` and `\\` escapes.
pub fn conninfo_value(v: &str) -> String {
    let safe = !v.is_empty()
        && v.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_./:-".contains(&b));
    if safe {
        v.to_string()
    } else {
        format!("'{}'", v.replace('\\', "\\\\").replace('\'', "\\'"))
    }
}

/// An SQL identifier, always double-quoted.
pub fn sql_ident(v: &str) -> String {
    format!("\"{}\"", v.replace('"', "\"\""))
}

/// An SQL string literal (standard_conforming_strings is on in every supported
/// version, so only quotes need doubling).
pub fn sql_literal(v: &str) -> String {
    format!("'{}'", v.replace('\'', "''"))
}

/// A role name as a `pg_hba.conf` field: double-quoted, which also stops the
/// special words (`all`, `replication`, `+group`) from being read as keywords.
fn hba_role(v: &str) -> String {
    format!("\"{}\"", v.replace('"', "\"\""))
}

/// A passfile field: `:` and `\` escaped with a backslash.
fn pgpass_field(v: &str) -> String {
    v.replace('\\', "\\\\").replace(':', "\\:")
}

/// Whether `name` may be one of a node's own `[postgresql.parameters]`: what a
/// configuration file can hold (`config::cluster::pg_param_name_ok`: `NAME` or
/// `PREFIX.NAME`; `a.b.c` passes `postgres -c` but is a syntax error in a file),
/// in lower case (PostgreSQL's names are case-blind: one spelling each, so two
/// keys cannot name one setting).
pub fn node_param_name_ok(name: &str) -> bool {
    crate::config::cluster::pg_param_name_ok(name) && !name.bytes().any(|b| b.is_ascii_uppercase())
}

/// Check `PgConfig.parameters`: names are plain identifiers and none is a setting
/// the agent owns.
pub fn check_parameters(params: &[(String, String)]) -> Result<(), String> {
    for (name, value) in params {
        if !node_param_name_ok(name) {
            return Err(format!(
                "postgresql parameter name {name:?}: a lower-case NAME or PREFIX.NAME of \
                 a-z, 0-9 and '_', not starting with a digit"
            ));
        }
        if AGENT_OWNED.contains(&name.as_str()) {
            return Err(format!(
                "postgresql parameter {name:?} is set by tenure itself and cannot be overridden"
            ));
        }
        if value.contains(['\n', '\r', '\0']) {
            return Err(format!(
                "postgresql parameter {name:?}: value has a line break"
            ));
        }
    }
    Ok(())
}

/// Standby settings for `tenure.conf`.
pub struct Standby<'a> {
    pub leader: &'a ConnTarget,
    pub passfile: &'a str,
    pub me: &'a str,
}

/// `wal_retrieve_retry_interval` the agent sets unless `[postgresql.parameters]`
/// does (issue 13 item 4): `loop_wait`, at least 100 ms and at most PostgreSQL's own
/// default of 5 s. A standby whose connection attempt failed (its primary just died)
/// waits this long before the next attempt, also after the agent pointed it at the
/// new primary (a reload restarts the WAL receiver, the startup process still waits
/// out the interval): with the default a replica streamed again ~5 s after every
/// failover. The agent re-points a replica at most once per loop, so a shorter
/// interval would only add failed attempts.
pub fn wal_retry_interval(loop_wait: Duration) -> Duration {
    loop_wait.clamp(Duration::from_millis(100), Duration::from_secs(5))
}

/// The full text of `tenure.conf`.
pub fn tenure_conf(cfg: &PgConfig, standby: Option<&Standby<'_>>) -> Result<String, String> {
    tenure_conf_with(cfg, standby, None)
}

/// [`tenure_conf`], with `wal_retrieve_retry_interval` set to `wal_retry` (see
/// [`wal_retry_interval`]) before the free-form parameters, which may override it.
pub fn tenure_conf_with(
    cfg: &PgConfig,
    standby: Option<&Standby<'_>>,
    wal_retry: Option<Duration>,
) -> Result<String, String> {
    let (host, port) = split_host_port(&cfg.listen).map_err(|e| format!("listen: {e}"))?;
    let socket_dir = cfg
        .socket_dir
        .to_str()
        .ok_or_else(|| format!("socket_dir {} is not valid UTF-8", cfg.socket_dir.display()))?;
    let mut s = String::new();
    s.push_str("# Written by tenure before every start and after every basebackup or rewind.\n");
    s.push_str("# Do not edit: changes are overwritten. Extra settings go in tenure's config.\n");
    if let Some(sb) = standby {
        s.push_str(FOLLOWING_MARKER);
        s.push_str(&sb.leader.name.replace(['\n', '\r'], " "));
        s.push('\n');
    }
    let mut set = |k: &str, v: String| {
        s.push_str(k);
        s.push_str(" = ");
        s.push_str(&v);
        s.push('\n');
    };
    set("listen_addresses", conf_quote(&host));
    set("port", port.to_string());
    set("unix_socket_directories", conf_quote(socket_dir));
    set("unix_socket_permissions", "0700".into());
    set("wal_level", "replica".into());
    set("hot_standby", "on".into());
    // pg_rewind needs hint bits WAL-logged (checksums also do it; both are on).
    set("wal_log_hints", "on".into());
    set("full_page_writes", "on".into());
    set("max_wal_senders", "10".into());
    set("max_replication_slots", "10".into());
    // Rewind after an immediate fence: the target's own crash recovery may recycle
    // WAL the rewind needs (DESIGN §3a); keep enough around.
    set("wal_keep_size", conf_quote("256MB"));
    set("max_slot_wal_keep_size", conf_quote("1GB"));
    set("hot_standby_feedback", "on".into());
    // A standby reports its positions at least every second (PostgreSQL's
    // default is 10 s): a commit already waiting when the synchronous names
    // change (a lost or lagging standby swapped) is released only at the new
    // standby's next reply, and `pg_stat_replication`'s positions, which the
    // synchronous catch-up and `maximum_lag_on_syncnode` judge, are that fresh.
    set("wal_receiver_status_interval", conf_quote("1s"));
    // A managed default: before the free-form parameters, so an operator's own
    // value (a later line) wins.
    if let Some(d) = wal_retry {
        set(
            "wal_retrieve_retry_interval",
            conf_quote(&format!("{}ms", d.as_millis())),
        );
    }
    // The cluster-wide settings: over tenure's managed defaults, under the node's
    // own parameters (the lines after it win).
    set("include_if_exists", conf_quote(PARAMS_CONF));
    // The node's own (`node_conf`), over the cluster-wide ones.
    set("include", conf_quote(NODE_CONF));
    for k in RECOVERY_CLEARED {
        set(k, conf_quote(""));
    }
    // Standby settings come last, after the free-form parameters, so nothing can
    // override them (check_parameters also refuses those names).
    if let Some(sb) = standby {
        set("primary_conninfo", conf_quote(&primary_conninfo(cfg, sb)));
        set("primary_slot_name", conf_quote(&super::slot_name(sb.me)));
        set("recovery_target_timeline", conf_quote("latest"));
    }
    // Last, so the free-form parameters cannot override it either.
    set("include_if_exists", conf_quote(SYNC_CONF));
    Ok(s)
}

/// `primary_conninfo` for a standby. Never a password: libpq reads it from the
/// passfile (DESIGN §3a).
pub fn primary_conninfo(cfg: &PgConfig, sb: &Standby<'_>) -> String {
    format!(
        "host={} port={} user={} passfile={} application_name={}{}",
        conninfo_value(&sb.leader.host),
        sb.leader.port,
        conninfo_value(&cfg.replication_user),
        conninfo_value(sb.passfile),
        conninfo_value(sb.me),
        ssl_conninfo(&cfg.replication_ssl),
    )
}

/// libpq's TCP settings for a copy from another member (pg_basebackup, pg_rewind):
/// a source whose host died or was cut off while it sent is given up in about
/// 40 s (10 s idle, then 6 probes 5 s apart; 60 s for data sent and never
/// acknowledged), not the kernel's 2 h of keepalive defaults. A source that lives
/// but is busy (a checkpoint before the copy, a `max-rate`) answers the probes
/// from its kernel: only a host silent that long ends the copy, so a short
/// network blip or a VM's pause does not restart a long one. Without them a
/// build whose source crashed held the node's job for hours after a new leader
/// was elected.
pub const COPY_KEEPALIVES: &str = "keepalives=1 keepalives_idle=10 keepalives_interval=5 keepalives_count=6 tcp_user_timeout=60000";

/// `--source-server` for pg_rewind.
pub fn rewind_conninfo(cfg: &PgConfig, source: &ConnTarget, passfile: &str) -> String {
    format!(
        "host={} port={} user={} dbname=postgres passfile={} connect_timeout=10 {COPY_KEEPALIVES} application_name=tenure-rewind{}",
        conninfo_value(&source.host),
        source.port,
        conninfo_value(&cfg.rewind_user),
        conninfo_value(passfile),
        ssl_conninfo(&cfg.rewind_ssl),
    )
}

/// The connection string a replica method gets as `--connstring` (Patroni's
/// parameter): the source member as the replication role, no password (the
/// method's `PGPASSFILE` has it), the role's TLS settings.
pub fn replica_connstring(cfg: &PgConfig, source: &ConnTarget) -> String {
    format!(
        "host={} port={} user={} dbname=postgres{}",
        conninfo_value(&source.host),
        source.port,
        conninfo_value(&cfg.replication_user),
        ssl_conninfo(&cfg.replication_ssl),
    )
}

/// Settings `postgresql.auto.conf` must not carry besides [`AGENT_OWNED`] (which
/// holds the recovery targets a restore may leave there: with
/// `recovery_target_action = 'promote'` the replica would promote itself without
/// the leader key): PostgreSQL reads that file after `postgresql.conf` and the
/// `tenure.conf` it includes, so anything there overrides tenure.
pub const AUTO_CONF_REFUSED: &[&str] = &["standby_mode"];

/// The parameter name a line of a configuration file sets, lower-cased, read as
/// PostgreSQL's lexer (guc-file.l) reads it: after blanks (space, tab, CR, FF), a
/// letter, `_` or a byte >= 0x80, then those or digits, and one `.`-qualified
/// part; whatever follows ends the name (`port+5433` sets `port`). `None` for a
/// comment or a blank line.
fn setting_name(line: &[u8]) -> Option<String> {
    let letter = |b: u8| b.is_ascii_alphabetic() || b == b'_' || b >= 0x80;
    let t = match line
        .iter()
        .position(|b| !matches!(b, b' ' | b'\t' | b'\r' | 0x0c))
    {
        Some(i) => &line[i..],
        None => return None,
    };
    let id = |s: &[u8]| -> usize {
        if s.first().is_some_and(|&b| letter(b)) {
            s.iter()
                .position(|&b| !(letter(b) || b.is_ascii_digit()))
                .unwrap_or(s.len())
        } else {
            0
        }
    };
    let mut n = id(t);
    if n == 0 {
        return None;
    }
    if t.get(n) == Some(&b'.') {
        let m = id(&t[n + 1..]);
        if m > 0 {
            n += 1 + m;
        }
    }
    Some(String::from_utf8_lossy(&t[..n]).to_ascii_lowercase())
}

/// `postgresql.auto.conf` (any bytes: PostgreSQL takes non-UTF-8 values), with
/// every line that sets one of [`AUTO_CONF_REFUSED`] or [`AGENT_OWNED`]
/// commented out (kept, so the operator sees what was there): the new text and
/// the names, or `None` when nothing had to change.
pub fn sanitize_auto_conf(text: &[u8]) -> Option<(Vec<u8>, Vec<String>)> {
    let mut out = Vec::with_capacity(text.len() + 128);
    let mut removed: Vec<String> = Vec::new();
    for line in text.split_inclusive(|&b| b == b'\n') {
        let refused = setting_name(line).filter(|name| {
            AUTO_CONF_REFUSED.contains(&name.as_str()) || AGENT_OWNED.contains(&name.as_str())
        });
        match refused {
            Some(name) => {
                out.extend_from_slice(
                    b"# removed by tenure (settings tenure owns, recovery targets): ",
                );
                out.extend_from_slice(line);
                if !line.ends_with(b"\n") {
                    out.push(b'\n');
                }
                if !removed.contains(&name) {
                    removed.push(name);
                }
            }
            None => out.extend_from_slice(line),
        }
    }
    (!removed.is_empty()).then_some((out, removed))
}

/// ` sslmode=... sslrootcert=...`: a role's TLS settings as conninfo pairs, each
/// value quoted as libpq reads it (a path with a space or a quote stays one value).
fn ssl_conninfo(ssl: &PgSsl) -> String {
    let mut s = String::new();
    for (k, v) in ssl.conninfo_params() {
        s.push(' ');
        s.push_str(k);
        s.push('=');
        s.push_str(&conninfo_value(&v));
    }
    s
}

/// `pg_hba.conf`: trust on the socket (its directory is 0700, only the PostgreSQL
/// OS user and root reach it), passwords over TCP — over TLS only (`hostssl`) when
/// the server side is on (`[postgresql.parameters] ssl = on`, issue 12), and with a
/// client certificate too when `[postgresql] hba_clientcert` says so, or the
/// certificate alone (`cert`, no password) with `[postgresql] hba_method = "cert"`.
pub fn pg_hba(cfg: &PgConfig, hosts: &[String]) -> String {
    // `cert` is valid only on `hostssl` lines: PostgreSQL refuses a `host ... cert`
    // line and then loads no pg_hba.conf at all. The config refuses `cert` without
    // ssl = on; this keeps the file loadable if that check ever moved (review L3).
    let host = if cfg.hba_cert || crate::config::server_ssl_on(&cfg.parameters) {
        "hostssl"
    } else {
        "host"
    };
    let repl = hba_role(&cfg.replication_user);
    let admins = format!(
        "{},{}",
        hba_role(&cfg.superuser),
        hba_role(&cfg.rewind_user)
    );
    // `[postgresql] hba_clientcert`: a client certificate as well as the password
    // (config/pgssl.rs checks ssl = on, ssl_ca_file and each role's certificate).
    // `cert` verifies the certificate in full itself (the config refuses a
    // clientcert= beside it).
    let (method, opt) = if cfg.hba_cert {
        ("cert", String::new())
    } else {
        let opt = cfg
            .hba_clientcert
            .as_deref()
            .map(|v| format!(" clientcert={v}"))
            .unwrap_or_default();
        ("scram-sha-256", opt)
    };
    let mut s = String::from(
        "# Written by tenure: one entry per member address (DESIGN §3a), rewritten when\n\
         # the members change. Do not edit: add lines with postgresql.pg_hba instead.\n",
    );
    s.push_str("local all all trust\n");
    for h in hosts {
        let Some(addr) = hba_address(h) else {
            continue;
        };
        s.push_str(&format!("{host} replication {repl} {addr} {method}{opt}\n"));
        s.push_str(&format!("{host} all {admins} {addr} {method}{opt}\n"));
    }
    if !cfg.pg_hba.is_empty() {
        s.push_str("# postgresql.pg_hba\n");
        for line in &cfg.pg_hba {
            s.push_str(line);
            s.push('\n');
        }
    }
    s
}

/// A member's host as a `pg_hba.conf` address field: an IP literal as a host
/// route (`/32`, `/128`), a host name as it is (PostgreSQL resolves it). `None`
/// for anything that could break the line (the caller skips it).
fn hba_address(host: &str) -> Option<String> {
    match host.parse::<std::net::IpAddr>() {
        Ok(std::net::IpAddr::V4(a)) => Some(format!("{a}/32")),
        Ok(std::net::IpAddr::V6(a)) => Some(format!("{a}/128")),
        Err(_) => {
            let ok = !host.is_empty()
                && host
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-');
            ok.then(|| host.to_string())
        }
    }
}

/// The passfile: replication and rewind passwords for any host; a role without
/// one (`hba_method = "cert"` lets them be left out) gets no line.
pub fn pgpass(cfg: &PgConfig) -> String {
    let mut s = String::new();
    for (user, pw) in [
        (&cfg.replication_user, &cfg.replication_password),
        (&cfg.rewind_user, &cfg.rewind_password),
    ] {
        if !pw.is_empty() {
            s.push_str(&format!(
                "*:*:*:{}:{}\n",
                pgpass_field(user),
                pgpass_field(pw)
            ));
        }
    }
    s
}

/// ` PASSWORD '...'`, or nothing for a role left without one (an empty password
/// is PostgreSQL's "no password" too, with a notice).
fn password_clause(pw: &str) -> String {
    if pw.is_empty() {
        String::new()
    } else {
        format!(" PASSWORD {}", sql_literal(pw))
    }
}

/// SQL for single-user mode (one statement per line: a newline ends a command
/// there). Creates the replication and rewind roles with the grants pg_rewind
/// needs (PostgreSQL 15 docs, "pg_rewind": the non-superuser role).
pub fn bootstrap_sql(cfg: &PgConfig) -> String {
    let one_line = |s: &str| s.replace(['\n', '\r'], " ");
    let su = sql_ident(&cfg.superuser);
    let repl = sql_ident(&cfg.replication_user);
    let rw = sql_ident(&cfg.rewind_user);
    let lines = [
        format!(
            "ALTER ROLE {su} WITH PASSWORD {};",
            sql_literal(&cfg.superuser_password)
        ),
        format!(
            "CREATE ROLE {repl} WITH REPLICATION LOGIN{};",
            password_clause(&cfg.replication_password)
        ),
        format!(
            "CREATE ROLE {rw} WITH LOGIN{};",
            password_clause(&cfg.rewind_password)
        ),
        format!("GRANT EXECUTE ON FUNCTION pg_catalog.pg_ls_dir(text, boolean, boolean) TO {rw};"),
        format!("GRANT EXECUTE ON FUNCTION pg_catalog.pg_stat_file(text, boolean) TO {rw};"),
        format!("GRANT EXECUTE ON FUNCTION pg_catalog.pg_read_binary_file(text) TO {rw};"),
        format!(
            "GRANT EXECUTE ON FUNCTION pg_catalog.pg_read_binary_file(text, bigint, bigint, boolean) TO {rw};"
        ),
        // The rewind job checkpoints the source first (see job.rs): pg_checkpoint
        // is the PostgreSQL 15 role that allows CHECKPOINT without superuser.
        format!("GRANT pg_checkpoint TO {rw};"),
    ];
    let mut s = String::new();
    for l in lines {
        s.push_str(&one_line(&l));
        s.push('\n');
    }
    s
}

/// The member a `tenure.conf` text says it follows.
pub fn parse_following(text: &str) -> Option<String> {
    text.lines()
        .find_map(|l| l.strip_prefix(FOLLOWING_MARKER))
        .map(|n| n.trim().to_string())
        .filter(|n| !n.is_empty())
}

/// Whether `postgresql.conf` already includes `tenure.conf` (an active line).
pub fn has_include(postgresql_conf: &str) -> bool {
    postgresql_conf.lines().any(|l| {
        let l = l.trim();
        l.starts_with("include") && !l.starts_with("include_") && l.contains("'tenure.conf'")
    })
}

/// Whether `include 'tenure.conf'` is the last setting of `postgresql.conf`
/// (blank lines and comments after it are fine): a setting after it would
/// override what tenure owns.
pub fn include_is_last(postgresql_conf: &str) -> bool {
    let mut last_setting = None;
    for l in postgresql_conf.lines() {
        let l = l.trim();
        if !l.is_empty() && !l.starts_with('#') {
            last_setting = Some(l);
        }
    }
    last_setting.is_some_and(has_include)
}

/// The line appended to `postgresql.conf`.
pub const INCLUDE_LINE: &str = "include 'tenure.conf'\t# added by tenure: settings tenure owns\n";

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    /// The leader a standby config follows in these tests.
    fn pg1() -> ConnTarget {
        ConnTarget {
            name: "pg-1".into(),
            host: "10.0.0.1".into(),
            port: 5432,
        }
    }

    fn cfg() -> PgConfig {
        PgConfig {
            bin_dir: PathBuf::from("/usr/lib/postgresql/15/bin"),
            data_dir: PathBuf::from("/d/data"),
            listen: "127.0.0.1:5433".into(),
            connect_address: "127.0.0.1:5433".into(),
            socket_dir: PathBuf::from("/d/sock"),
            user: Some("postgres".into()),
            superuser: "postgres".into(),
            superuser_password: "su'pw".into(),
            replication_user: "replicator".into(),
            replication_password: "re:pl\\pw".into(),
            rewind_user: "rewinder".into(),
            rewind_password: "rw".into(),
            parameters: vec![("shared_buffers".into(), "32MB".into())],
            move_aside_unusable: false,
            replication_ssl: PgSsl::default(),
            rewind_ssl: PgSsl::default(),
            hba_clientcert: None,
            hba_cert: false,
            create_replica: Default::default(),
            bootstrap: Default::default(),
            pg_hba: vec!["hostssl all app 10.0.0.0/8 scram-sha-256".into()],
        }
    }

    #[test]
    fn host_port() {
        assert_eq!(
            split_host_port("127.0.0.1:5432"),
            Ok(("127.0.0.1".into(), 5432))
        );
        assert_eq!(split_host_port("[::1]:5"), Ok(("::1".into(), 5)));
        assert!(split_host_port("127.0.0.1").is_err());
        assert!(split_host_port(":5432").is_err());
        assert!(split_host_port("h:0").is_err());
        assert!(split_host_port("h:99999").is_err());
        assert!(split_host_port("h x:1").is_err());
    }

    #[test]
    fn primary_config_has_no_standby_settings() {
        let t = tenure_conf(&cfg(), None).unwrap();
        assert!(t.contains("listen_addresses = '127.0.0.1'\n"));
        assert!(t.contains("port = 5433\n"));
        assert!(t.contains("unix_socket_directories = '/d/sock'\n"));
        assert!(t.contains("unix_socket_permissions = 0700\n"));
        assert!(t.contains("wal_log_hints = on\n"));
        assert!(t.contains("wal_keep_size = '256MB'\n"));
        assert!(t.contains("max_slot_wal_keep_size = '1GB'\n"));
        assert!(t.contains("hot_standby_feedback = on\n"));
        assert!(t.contains("wal_receiver_status_interval = '1s'\n"));
        // The node's own settings are in their own file, which it includes.
        assert!(!t.contains("shared_buffers"), "{t}");
        assert!(t.contains("include = 'tenure.node.conf'\n"), "{t}");
        assert_eq!(
            node_conf(&cfg().parameters),
            "# Written by tenure from this node's [postgresql.parameters] (its \
             configuration file; a reload of the agent rewrites it).\n# Do not edit: \
             changes are overwritten.\nshared_buffers = '32MB'\n"
        );
        assert!(!t.contains("primary_conninfo"));
        assert_eq!(parse_following(&t), None);
    }

    #[test]
    fn standby_config_follows_without_password() {
        let leader = pg1();
        let sb = Standby {
            leader: &leader,
            passfile: "/d/my pass",
            me: "Pg-2",
        };
        let t = tenure_conf(&cfg(), Some(&sb)).unwrap();
        assert!(t.contains(
            "primary_conninfo = 'host=10.0.0.1 port=5432 user=replicator \
             passfile=''/d/my pass'' application_name=Pg-2 sslmode=prefer'\n"
        ));
        assert!(t.contains(&format!(
            "primary_slot_name = '{}'\n",
            super::super::slot_name("Pg-2")
        )));
        // synchronous_standby_names comes from tenure.sync.conf, included last.
        assert!(
            t.ends_with("include_if_exists = 'tenure.sync.conf'\n"),
            "{t}"
        );
        for v in ["", "*", "\"pg-2\"", "FIRST 2 (\"a'b\", \"c\\\\d\")"] {
            assert_eq!(parse_sync_conf(&sync_conf(v)).as_deref(), Some(v), "{v}");
        }
        assert_eq!(parse_sync_conf("# nothing\n"), None);
        assert_eq!(parse_sync_conf("synchronous_standby_names = 'a'b'\n"), None);
        assert_eq!(
            sync_conf("\"pg-2\""),
            "# Written by tenure (synchronous mode, DESIGN §3a). Do not edit.\nsynchronous_standby_names = '\"pg-2\"'\n"
        );
        assert!(t.contains("recovery_target_timeline = 'latest'\n"));
        assert!(!t.contains("re:pl"), "no password in the config: {t}");
        assert_eq!(parse_following(&t), Some("pg-1".into()));
        // Standby settings come after the free-form parameters.
        assert!(t.find("'tenure.node.conf'").unwrap() < t.find("primary_conninfo").unwrap());
    }

    /// Issue 12: every TLS key reaches `primary_conninfo` and pg_rewind's
    /// conninfo, quoted so that a path with a space or a quote stays one value
    /// (libpq: `\'` inside single quotes), and the conninfo as a whole quoted again
    /// for `postgresql.conf`.
    #[test]
    fn tls_settings_reach_the_conninfos_quoted() {
        let mut c = cfg();
        c.replication_ssl = PgSsl {
            sslmode: "verify-full".into(),
            sslrootcert: Some(PathBuf::from("/etc/pg ssl/it's/root.crt")),
            sslcert: Some(PathBuf::from("/c/repl.crt")),
            sslkey: Some(PathBuf::from("/c/repl.key")),
            sslcrl: Some(PathBuf::from("/c/ca.crl")),
            sslcrldir: Some(PathBuf::from("/c/crl.d")),
        };
        c.rewind_ssl = PgSsl {
            sslmode: "verify-ca".into(),
            sslrootcert: Some(PathBuf::from("/c/root.crt")),
            ..PgSsl::default()
        };
        let leader = pg1();
        let sb = Standby {
            leader: &leader,
            passfile: "/d/pgpass",
            me: "pg-2",
        };
        let ci = primary_conninfo(&c, &sb);
        assert_eq!(
            ci,
            "host=10.0.0.1 port=5432 user=replicator passfile=/d/pgpass application_name=pg-2 \
             sslmode=verify-full sslrootcert='/etc/pg ssl/it\\'s/root.crt' \
             sslcert=/c/repl.crt sslkey=/c/repl.key sslcrl=/c/ca.crl sslcrldir=/c/crl.d"
        );
        let t = tenure_conf(&c, Some(&sb)).unwrap();
        assert!(
            t.contains("sslrootcert=''/etc/pg ssl/it\\\\''s/root.crt'' sslcert="),
            "{t}"
        );
        let rw = rewind_conninfo(&c, &leader, "/d/pgpass");
        assert!(rw.contains(" keepalives_idle=10 "), "{rw}");
        assert!(
            rw.ends_with(" sslmode=verify-ca sslrootcert=/c/root.crt"),
            "{rw}"
        );
        assert!(
            !rw.contains("repl.key"),
            "the rewind role has its own: {rw}"
        );
    }

    /// Issue 12: with the server side on, the member lines are hostssl.
    #[test]
    fn hba_is_hostssl_when_the_server_side_is_on() {
        let hosts = vec!["10.1.2.3".to_string()];
        let mut c = cfg();
        c.parameters.push(("ssl".into(), "on".into()));
        let h = pg_hba(&c, &hosts);
        assert!(
            h.contains("hostssl replication \"replicator\" 10.1.2.3/32 scram-sha-256\n"),
            "{h}"
        );
        assert!(
            h.contains("hostssl all \"postgres\",\"rewinder\" 10.1.2.3/32 scram-sha-256\n"),
            "{h}"
        );
        assert!(!h.lines().any(|l| l.starts_with("host ")), "{h}");
        c.parameters.retain(|(k, _)| k != "ssl");
        c.parameters.push(("ssl".into(), "off".into()));
        assert!(pg_hba(&c, &hosts).contains("\nhost replication "));
    }

    /// `[postgresql] hba_clientcert`: both member lines require a certificate too;
    /// the local line and the operator's own lines are left as they are.
    #[test]
    fn hba_clientcert_goes_on_both_member_lines() {
        let hosts = vec!["10.1.2.3".to_string(), "db4.example".to_string()];
        let mut c = cfg();
        c.parameters.push(("ssl".into(), "on".into()));
        c.pg_hba = vec!["hostssl all app 10.0.0.0/8 scram-sha-256".into()];
        c.hba_clientcert = Some("verify-full".into());
        let h = pg_hba(&c, &hosts);
        for want in [
            "hostssl replication \"replicator\" 10.1.2.3/32 scram-sha-256 clientcert=verify-full\n",
            "hostssl all \"postgres\",\"rewinder\" 10.1.2.3/32 scram-sha-256 clientcert=verify-full\n",
            "hostssl replication \"replicator\" db4.example scram-sha-256 clientcert=verify-full\n",
            "local all all trust\n",
            "hostssl all app 10.0.0.0/8 scram-sha-256\n",
        ] {
            assert!(h.contains(want), "{want} in {h}");
        }
        assert_eq!(h.matches("clientcert=").count(), 4, "{h}");
        c.hba_clientcert = Some("verify-ca".into());
        assert_eq!(
            pg_hba(&c, &hosts)
                .matches(" clientcert=verify-ca\n")
                .count(),
            4
        );
    }

    /// `[postgresql] hba_method = "cert"`: both member lines authenticate by the
    /// certificate alone; no clientcert= (cert verifies in full); a role left
    /// without a password gets no passfile line and no PASSWORD at bootstrap.
    #[test]
    fn cert_method_on_both_member_lines_and_no_password() {
        let hosts = vec!["10.1.2.3".to_string()];
        let mut c = cfg();
        c.parameters.push(("ssl".into(), "on".into()));
        c.pg_hba = vec!["hostssl all app 10.0.0.0/8 scram-sha-256".into()];
        c.hba_cert = true;
        let h = pg_hba(&c, &hosts);
        for want in [
            "hostssl replication \"replicator\" 10.1.2.3/32 cert\n",
            "hostssl all \"postgres\",\"rewinder\" 10.1.2.3/32 cert\n",
            "local all all trust\n",
            "hostssl all app 10.0.0.0/8 scram-sha-256\n",
        ] {
            assert!(h.contains(want), "{want} in {h}");
        }
        assert!(!h.contains("clientcert="), "{h}");
        // Never `host ... cert` (PostgreSQL would load no pg_hba.conf), even if
        // the config's ssl = on check were bypassed.
        c.parameters.retain(|(k, _)| k != "ssl");
        let h = pg_hba(&c, &hosts);
        assert!(
            h.contains("hostssl replication \"replicator\" 10.1.2.3/32 cert\n")
                && !h.contains("\nhost "),
            "{h}"
        );
        c.replication_password.clear();
        assert_eq!(pgpass(&c), "*:*:*:rewinder:rw\n");
        let sql = bootstrap_sql(&c);
        assert!(
            sql.contains("CREATE ROLE \"replicator\" WITH REPLICATION LOGIN;\n"),
            "{sql}"
        );
        assert!(
            sql.contains("CREATE ROLE \"rewinder\" WITH LOGIN PASSWORD 'rw';\n"),
            "{sql}"
        );
        c.rewind_password.clear();
        assert_eq!(pgpass(&c), "");
        assert!(bootstrap_sql(&c).contains("CREATE ROLE \"rewinder\" WITH LOGIN;\n"));
    }

    #[test]
    fn wal_retrieve_retry_interval_is_managed_and_overridable() {
        // loop_wait, clamped to [100 ms, 5 s].
        assert_eq!(
            wal_retry_interval(Duration::from_millis(500)),
            Duration::from_millis(500)
        );
        assert_eq!(
            wal_retry_interval(Duration::from_millis(20)),
            Duration::from_millis(100)
        );
        assert_eq!(
            wal_retry_interval(Duration::from_secs(10)),
            Duration::from_secs(5)
        );
        let lw = Some(Duration::from_millis(500));
        let t = tenure_conf_with(&cfg(), None, lw).unwrap();
        assert!(t.contains("wal_retrieve_retry_interval = '500ms'\n"), "{t}");
        assert!(!tenure_conf(&cfg(), None).unwrap().contains("wal_retrieve"));
        // An operator's value comes later in the file: PostgreSQL takes the last.
        let mut c = cfg();
        c.parameters
            .push(("wal_retrieve_retry_interval".into(), "5s".into()));
        let t = tenure_conf_with(&c, None, lw).unwrap();
        let ours = t.find("wal_retrieve_retry_interval = '500ms'").unwrap();
        let theirs = t.find("include = 'tenure.node.conf'").unwrap();
        assert!(ours < theirs, "{t}");
        assert!(node_conf(&c.parameters).contains("wal_retrieve_retry_interval = '5s'\n"));
    }

    /// The cluster-wide settings' file is read after tenure's managed defaults
    /// (which it may override) and before the node's own parameters and what
    /// tenure owns (which override it): PostgreSQL takes the last line.
    #[test]
    fn cluster_wide_settings_sit_between_managed_defaults_and_the_nodes_own() {
        let mut c = cfg();
        c.parameters.push(("work_mem".into(), "8MB".into()));
        let leader = pg1();
        let sb = Standby {
            leader: &leader,
            passfile: "/p",
            me: "pg-2",
        };
        let t = tenure_conf_with(&c, Some(&sb), Some(Duration::from_millis(500))).unwrap();
        let at = |s: &str| t.find(s).unwrap_or_else(|| panic!("{s} not in {t}"));
        let include = at("include_if_exists = 'tenure.params.conf'\n");
        for before in [
            "max_wal_senders = ",
            "wal_keep_size = ",
            "wal_retrieve_retry_interval = ",
        ] {
            assert!(at(before) < include, "{before}: {t}");
        }
        for after in [
            "include = 'tenure.node.conf'\n",
            "recovery_target = ",
            "primary_conninfo = ",
            "'tenure.sync.conf'",
        ] {
            assert!(include < at(after), "{after}: {t}");
        }
        assert_eq!(
            params_conf(&[
                ("log_line_prefix".to_string(), "%m 'x' \\".to_string()),
                ("work_mem".to_string(), "8MB".to_string()),
            ]),
            "# Written by tenure from the config key's postgresql.parameters (tenure ctl \
             edit-config).\n# Do not edit: changes are overwritten. A node's own \
             [postgresql.parameters] win over these.\n\
             log_line_prefix = '%m ''x'' \\\\'\nwork_mem = '8MB'\n"
        );
    }

    #[test]
    fn settings_files_read_back_as_written() {
        let params = vec![
            ("log_line_prefix".to_string(), "%m 'x' \\ y".to_string()),
            ("work_mem".to_string(), "8MB".to_string()),
            ("search_path".to_string(), String::new()),
        ];
        assert_eq!(parse_settings_conf(&params_conf(&params)), params);
        assert_eq!(parse_settings_conf(&node_conf(&params)), params);
        // Another shape is left out, never guessed at, and the file is not one
        // of tenure's.
        let hand = "a = 1\nb = 'x'y'\nc = 'ok'\n# d = 'no'\n";
        assert_eq!(
            parse_settings_conf(hand),
            vec![("c".to_string(), "ok".to_string())]
        );
        assert!(!settings_conf_is_ours(hand));
        assert!(!settings_conf_is_ours("c = 'a'\nC = 'b'\n"));
        assert!(settings_conf_is_ours(&params_conf(&params)));
        assert!(settings_conf_is_ours(""));
    }

    #[test]
    fn parameters_are_checked() {
        assert!(check_parameters(&[("work_mem".into(), "4MB".into())]).is_ok());
        assert!(check_parameters(&[("port".into(), "1".into())]).is_err());
        assert!(check_parameters(&[("primary_conninfo".into(), "x".into())]).is_err());
        assert!(check_parameters(&[("a b".into(), "1".into())]).is_err());
        assert!(check_parameters(&[("a".into(), "1\nport = 2".into())]).is_err());
    }

    #[test]
    fn quoting() {
        assert_eq!(conf_quote(r"a'b\c"), r"'a''b\\c'");
        assert_eq!(conninfo_value("x y'"), r"'x y\''");
        assert_eq!(conninfo_value(""), "''");
        assert_eq!(sql_ident("a\"b"), "\"a\"\"b\"");
        assert_eq!(sql_literal("it's"), "'it''s'");
    }

    #[test]
    fn hba_and_pgpass() {
        let hosts: Vec<String> = ["10.1.2.3", "fd00::7", "db-2.example", "bad host"]
            .iter()
            .map(|h| h.to_string())
            .collect();
        let h = pg_hba(&cfg(), &hosts);
        assert!(h.contains("local all all trust\n"));
        // One entry per member address, never the whole world.
        assert!(h.contains("host replication \"replicator\" 10.1.2.3/32 scram-sha-256\n"));
        assert!(h.contains("host all \"postgres\",\"rewinder\" 10.1.2.3/32 scram-sha-256\n"));
        assert!(h.contains("host replication \"replicator\" fd00::7/128 scram-sha-256\n"));
        assert!(h.contains("host replication \"replicator\" db-2.example scram-sha-256\n"));
        assert!(!h.contains("bad host"), "{h}");
        assert!(!h.contains("0.0.0.0/0") && !h.contains("::/0"), "{h}");
        // The operator's lines come last.
        assert!(
            h.ends_with("hostssl all app 10.0.0.0/8 scram-sha-256\n"),
            "{h}"
        );
        assert_eq!(
            pg_hba(&cfg(), &[])
                .lines()
                .filter(|l| l.starts_with("host "))
                .count(),
            0
        );
        let p = pgpass(&cfg());
        assert_eq!(p, "*:*:*:replicator:re\\:pl\\\\pw\n*:*:*:rewinder:rw\n");
    }

    #[test]
    fn bootstrap_sql_one_statement_per_line() {
        let s = bootstrap_sql(&cfg());
        assert!(s.contains("ALTER ROLE \"postgres\" WITH PASSWORD 'su''pw';\n"));
        assert!(s.contains("CREATE ROLE \"replicator\" WITH REPLICATION LOGIN PASSWORD"));
        assert!(
            s.contains("pg_read_binary_file(text, bigint, bigint, boolean) TO \"rewinder\";\n")
        );
        assert!(s.contains("GRANT pg_checkpoint TO \"rewinder\";\n"));
        assert!(s.lines().all(|l| l.ends_with(';')));
    }

    #[test]
    fn include_detection() {
        assert!(!has_include("# include 'tenure.conf'\n"));
        assert!(!has_include("include_dir 'conf.d'\n"));
        assert!(has_include("x = 1\ninclude 'tenure.conf'\n"));
        assert!(has_include(INCLUDE_LINE));
    }

    /// Review of session 18, L8: a setting after the include would override
    /// tenure.conf; comments and blank lines after it would not.
    #[test]
    fn the_include_must_be_the_last_setting() {
        assert!(include_is_last(&format!("x = 1\n{INCLUDE_LINE}")));
        assert!(include_is_last(&format!(
            "x = 1\n{INCLUDE_LINE}\n# a comment\n   \n"
        )));
        assert!(!include_is_last(&format!(
            "{INCLUDE_LINE}recovery_target_action = 'promote'\n"
        )));
        assert!(!include_is_last(&format!(
            "{INCLUDE_LINE}include_dir 'conf.d'\n"
        )));
        assert!(!include_is_last("x = 1\n"));
        assert!(!include_is_last(""));
    }

    /// A restore that asks for a recovery target (pgBackRest `--type=immediate
    /// --target-action=promote` writes these) must not reach the new replica: it
    /// would promote itself without the leader key. Lines are read as
    /// PostgreSQL's lexer reads them (review L1), in any bytes (review M2).
    #[test]
    fn sanitize_auto_conf_comments_out_recovery_targets_and_owned_settings() {
        let text: &[u8] = b"# Do not edit this file manually!\n\
              restore_command = 'pgbackrest --stanza=main archive-get %f \"%p\"'\n\
              recovery_target = 'immediate'\n\
              Recovery_Target_Action='promote'\n\
              \tprimary_conninfo = 'host=10.0.0.9'\n\
              port 5433\n\
              work_mem = '64MB'\n\
              log_line_prefix = '\xe9 '\n\
              recovery_target_timeline_x = 'y'\n\
              \r\x0c recovery_target_lsn\r= '0/1'\n\
              port+5499\n\
              include_dir 'conf.d'\n\
              promote_trigger_file = '/tmp/go'\n\
              myext.port = 1\n\
              recovery_target_xid = '7'";
        let (out, removed) = sanitize_auto_conf(text).unwrap();
        assert_eq!(
            removed,
            vec![
                "recovery_target",
                "recovery_target_action",
                "primary_conninfo",
                "port",
                "recovery_target_lsn",
                "include_dir",
                "promote_trigger_file",
                "recovery_target_xid"
            ]
        );
        let out = String::from_utf8_lossy(&out).to_string();
        let kept: Vec<&str> = out.lines().filter(|l| !l.starts_with('#')).collect();
        assert_eq!(
            kept,
            vec![
                "restore_command = 'pgbackrest --stanza=main archive-get %f \"%p\"'",
                "work_mem = '64MB'",
                "log_line_prefix = '\u{fffd} '",
                "recovery_target_timeline_x = 'y'",
                "myext.port = 1",
            ]
        );
        assert!(out.contains("# removed by tenure (settings tenure owns, recovery targets): recovery_target = 'immediate'\n"));
        assert!(out.ends_with("recovery_target_xid = '7'\n"), "{out}");
        // Nothing to change: None, and the file is left as it is.
        assert_eq!(
            sanitize_auto_conf(b"restore_command = 'x'\nwork_mem = 1\n"),
            None
        );
        assert_eq!(sanitize_auto_conf(b""), None);
        assert_eq!(sanitize_auto_conf(b"# port = 1\n   \n"), None);
    }

    /// Review M1: no recovery target or trigger file reaches a node through the
    /// operator's parameters, and `tenure.conf` clears whatever a copy's own
    /// `postgresql.conf` set before it.
    #[test]
    fn recovery_targets_are_refused_and_cleared() {
        for name in [
            "recovery_target",
            "recovery_target_action",
            "recovery_target_time",
            "promote_trigger_file",
            "include_dir",
        ] {
            let e = check_parameters(&[(name.into(), "x".into())]).unwrap_err();
            assert!(e.contains("set by tenure itself"), "{name}: {e}");
        }
        let text = tenure_conf_with(&cfg(), None, None).unwrap();
        for name in RECOVERY_CLEARED {
            assert!(
                text.contains(&format!("\n{name} = ''\n")),
                "{name}:\n{text}"
            );
        }
    }

    #[test]
    fn replica_connstring_has_no_password_and_quotes_values() {
        let mut c = cfg();
        c.replication_user = "rep user".into();
        let t = ConnTarget {
            name: "n2".into(),
            host: "10.0.0.2".into(),
            port: 5433,
        };
        let s = replica_connstring(&c, &t);
        assert!(
            s.starts_with("host=10.0.0.2 port=5433 user='rep user' dbname=postgres"),
            "{s}"
        );
        assert!(!s.contains("password"), "{s}");
    }
}
