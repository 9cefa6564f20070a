//! How a new cluster is made: `[bootstrap] initdb`, initdb's options in
//! Patroni's form (`bootstrap.initdb` of its YAML) so its users recognise them:
//! a list of flags (`"data-checksums"`) and one-key tables (`{ locale =
//! "en_US.UTF-8" }`), or one table of them all. Each becomes `--name` or
//! `--name=value` on initdb's command line. And `post_bootstrap` (Patroni's key;
//! `post_init` its older name): a command run once on the new cluster before
//! anybody else can reach it, with its deadline.
//!
//! Owns: which initdb options an operator may set, checked here (PostgreSQL 15's
//! names and values, and that a named locale is installed on this host), the
//! arguments `pg::job` passes, and the post-bootstrap command and its deadline.
//! Must never: accept an option that is tenure's own
//! (the data directory, the superuser, its password, pg_hba's methods), one that
//! makes a cluster a crash could lose or leave behind (`no-sync`, `no-clean`), a
//! WAL directory outside the data directory (replicas, rewinds and moves aside
//! handle one directory), or let a value carry a control character into initdb's
//! arguments.

use toml::Value;

use super::{ConfigError, Sect, a_type};

/// `[bootstrap]`: what the node that wins the bootstrap lock runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BootstrapConfig {
    /// initdb's options, ready as arguments (`--data-checksums`,
    /// `--encoding=UTF8`), in the order given. Without `[bootstrap] initdb`:
    /// [`DEFAULT_INITDB`].
    pub initdb_args: Vec<String>,
    /// `post_bootstrap` (or `post_init`): the program (absolute) and its fixed
    /// words, run without a shell after the roles are made, with a connection
    /// URL to the new cluster as its last argument.
    pub post_bootstrap: Option<Vec<String>>,
    /// `post_bootstrap_timeout`: the longest that command may run before its
    /// process group is killed and the bootstrap has failed.
    pub post_bootstrap_timeout: std::time::Duration,
}

/// `post_bootstrap_timeout` when not set: a script that makes roles, databases
/// and extensions takes seconds; one that loads data should say how long.
pub const DEFAULT_POST_BOOTSTRAP_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(600);

/// tenure's initdb options when `[bootstrap] initdb` is not set: page checksums
/// and UTF-8. initdb runs with `LC_ALL=C`, so the locale is `C` unless the list
/// names one. A list that is set replaces these (as in Patroni): keep
/// `data-checksums` in it.
pub const DEFAULT_INITDB: &[&str] = &["--data-checksums", "--encoding=UTF8"];

impl Default for BootstrapConfig {
    fn default() -> BootstrapConfig {
        BootstrapConfig {
            initdb_args: DEFAULT_INITDB.iter().map(|s| s.to_string()).collect(),
            post_bootstrap: None,
            post_bootstrap_timeout: DEFAULT_POST_BOOTSTRAP_TIMEOUT,
        }
    }
}

/// initdb's options (PostgreSQL 15) that take no value.
const FLAGS: &[&str] = &["data-checksums", "allow-group-access", "no-locale"];

/// initdb's options (PostgreSQL 15) that take a value.
const VALUED: &[&str] = &[
    "encoding",
    "locale",
    "lc-collate",
    "lc-ctype",
    "lc-messages",
    "lc-monetary",
    "lc-numeric",
    "lc-time",
    "locale-provider",
    "icu-locale",
    "text-search-config",
    "wal-segsize",
];

/// The options that name a libc locale, checked against this host's.
const LIBC_LOCALES: &[&str] = &[
    "locale",
    "lc-collate",
    "lc-ctype",
    "lc-messages",
    "lc-monetary",
    "lc-numeric",
    "lc-time",
];

/// PostgreSQL 15's encoding names (`common/encnames.c`), as initdb looks them up:
/// lower case, letters and digits only (`UTF-8`, `utf8` and `Unicode` are one
/// name), each with the encoding it names. Written out here rather than asked
/// of a server: a configuration is checked on hosts where none runs yet.
const ENCODING_NAMES: &[(&str, &str)] = &[
    ("abc", "WIN1258"),
    ("alt", "WIN866"),
    ("big5", "BIG5"),
    ("euccn", "EUC_CN"),
    ("eucjis2004", "EUC_JIS_2004"),
    ("eucjp", "EUC_JP"),
    ("euckr", "EUC_KR"),
    ("euctw", "EUC_TW"),
    ("gb18030", "GB18030"),
    ("gbk", "GBK"),
    ("iso88591", "LATIN1"),
    ("iso885910", "LATIN6"),
    ("iso885913", "LATIN7"),
    ("iso885914", "LATIN8"),
    ("iso885915", "LATIN9"),
    ("iso885916", "LATIN10"),
    ("iso88592", "LATIN2"),
    ("iso88593", "LATIN3"),
    ("iso88594", "LATIN4"),
    ("iso88595", "ISO_8859_5"),
    ("iso88596", "ISO_8859_6"),
    ("iso88597", "ISO_8859_7"),
    ("iso88598", "ISO_8859_8"),
    ("iso88599", "LATIN5"),
    ("johab", "JOHAB"),
    ("koi8", "KOI8R"),
    ("koi8r", "KOI8R"),
    ("koi8u", "KOI8U"),
    ("latin1", "LATIN1"),
    ("latin10", "LATIN10"),
    ("latin2", "LATIN2"),
    ("latin3", "LATIN3"),
    ("latin4", "LATIN4"),
    ("latin5", "LATIN5"),
    ("latin6", "LATIN6"),
    ("latin7", "LATIN7"),
    ("latin8", "LATIN8"),
    ("latin9", "LATIN9"),
    ("mskanji", "SJIS"),
    ("muleinternal", "MULE_INTERNAL"),
    ("shiftjis", "SJIS"),
    ("shiftjis2004", "SHIFT_JIS_2004"),
    ("sjis", "SJIS"),
    ("sqlascii", "SQL_ASCII"),
    ("tcvn", "WIN1258"),
    ("tcvn5712", "WIN1258"),
    ("uhc", "UHC"),
    ("unicode", "UTF8"),
    ("utf8", "UTF8"),
    ("vscii", "WIN1258"),
    ("win", "WIN1251"),
    ("win1250", "WIN1250"),
    ("win1251", "WIN1251"),
    ("win1252", "WIN1252"),
    ("win1253", "WIN1253"),
    ("win1254", "WIN1254"),
    ("win1255", "WIN1255"),
    ("win1256", "WIN1256"),
    ("win1257", "WIN1257"),
    ("win1258", "WIN1258"),
    ("win866", "WIN866"),
    ("win874", "WIN874"),
    ("win932", "SJIS"),
    ("win936", "GBK"),
    ("win949", "UHC"),
    ("win950", "BIG5"),
    ("windows1250", "WIN1250"),
    ("windows1251", "WIN1251"),
    ("windows1252", "WIN1252"),
    ("windows1253", "WIN1253"),
    ("windows1254", "WIN1254"),
    ("windows1255", "WIN1255"),
    ("windows1256", "WIN1256"),
    ("windows1257", "WIN1257"),
    ("windows1258", "WIN1258"),
    ("windows866", "WIN866"),
    ("windows874", "WIN874"),
    ("windows932", "SJIS"),
    ("windows936", "GBK"),
    ("windows949", "UHC"),
    ("windows950", "BIG5"),
];

/// Encodings a client may use but a server may not (PostgreSQL refuses them
/// for a database).
const CLIENT_ONLY_ENCODINGS: &[&str] = &[
    "SJIS",
    "BIG5",
    "GBK",
    "UHC",
    "GB18030",
    "JOHAB",
    "SHIFT_JIS_2004",
];

/// A locale's character set (`nl_langinfo(CODESET)`) as initdb reads it
/// (PostgreSQL 15's `chklocale.c`, matched ignoring case), with the encoding it
/// is. A character set not listed is one initdb cannot tell: it only warns.
const LOCALE_CODESETS: &[(&str, &str)] = &[
    ("EUC-JP", "EUC_JP"),
    ("eucJP", "EUC_JP"),
    ("IBM-eucJP", "EUC_JP"),
    ("sdeckanji", "EUC_JP"),
    ("CP20932", "EUC_JP"),
    ("EUC-CN", "EUC_CN"),
    ("eucCN", "EUC_CN"),
    ("IBM-eucCN", "EUC_CN"),
    ("GB2312", "EUC_CN"),
    ("dechanzi", "EUC_CN"),
    ("CP20936", "EUC_CN"),
    ("EUC-KR", "EUC_KR"),
    ("eucKR", "EUC_KR"),
    ("IBM-eucKR", "EUC_KR"),
    ("deckorean", "EUC_KR"),
    ("5601", "EUC_KR"),
    ("CP51949", "EUC_KR"),
    ("EUC-TW", "EUC_TW"),
    ("eucTW", "EUC_TW"),
    ("IBM-eucTW", "EUC_TW"),
    ("cns11643", "EUC_TW"),
    ("UTF-8", "UTF8"),
    ("utf8", "UTF8"),
    ("CP65001", "UTF8"),
    ("ISO-8859-1", "LATIN1"),
    ("ISO8859-1", "LATIN1"),
    ("iso88591", "LATIN1"),
    ("CP28591", "LATIN1"),
    ("ISO-8859-2", "LATIN2"),
    ("ISO8859-2", "LATIN2"),
    ("iso88592", "LATIN2"),
    ("CP28592", "LATIN2"),
    ("ISO-8859-3", "LATIN3"),
    ("ISO8859-3", "LATIN3"),
    ("iso88593", "LATIN3"),
    ("CP28593", "LATIN3"),
    ("ISO-8859-4", "LATIN4"),
    ("ISO8859-4", "LATIN4"),
    ("iso88594", "LATIN4"),
    ("CP28594", "LATIN4"),
    ("ISO-8859-9", "LATIN5"),
    ("ISO8859-9", "LATIN5"),
    ("iso88599", "LATIN5"),
    ("CP28599", "LATIN5"),
    ("ISO-8859-10", "LATIN6"),
    ("ISO8859-10", "LATIN6"),
    ("iso885910", "LATIN6"),
    ("ISO-8859-13", "LATIN7"),
    ("ISO8859-13", "LATIN7"),
    ("iso885913", "LATIN7"),
    ("ISO-8859-14", "LATIN8"),
    ("ISO8859-14", "LATIN8"),
    ("iso885914", "LATIN8"),
    ("ISO-8859-15", "LATIN9"),
    ("ISO8859-15", "LATIN9"),
    ("iso885915", "LATIN9"),
    ("CP28605", "LATIN9"),
    ("ISO-8859-16", "LATIN10"),
    ("ISO8859-16", "LATIN10"),
    ("iso885916", "LATIN10"),
    ("KOI8-R", "KOI8R"),
    ("CP20866", "KOI8R"),
    ("KOI8-U", "KOI8U"),
    ("CP21866", "KOI8U"),
    ("CP866", "WIN866"),
    ("CP874", "WIN874"),
    ("CP1250", "WIN1250"),
    ("CP1251", "WIN1251"),
    ("ansi-1251", "WIN1251"),
    ("CP1252", "WIN1252"),
    ("CP1253", "WIN1253"),
    ("CP1254", "WIN1254"),
    ("CP1255", "WIN1255"),
    ("CP1256", "WIN1256"),
    ("CP1257", "WIN1257"),
    ("CP1258", "WIN1258"),
    ("ISO-8859-5", "ISO_8859_5"),
    ("ISO8859-5", "ISO_8859_5"),
    ("iso88595", "ISO_8859_5"),
    ("CP28595", "ISO_8859_5"),
    ("ISO-8859-6", "ISO_8859_6"),
    ("ISO8859-6", "ISO_8859_6"),
    ("iso88596", "ISO_8859_6"),
    ("CP28596", "ISO_8859_6"),
    ("ISO-8859-7", "ISO_8859_7"),
    ("ISO8859-7", "ISO_8859_7"),
    ("iso88597", "ISO_8859_7"),
    ("CP28597", "ISO_8859_7"),
    ("ISO-8859-8", "ISO_8859_8"),
    ("ISO8859-8", "ISO_8859_8"),
    ("iso88598", "ISO_8859_8"),
    ("CP28598", "ISO_8859_8"),
    ("SJIS", "SJIS"),
    ("PCK", "SJIS"),
    ("CP932", "SJIS"),
    ("SHIFT_JIS", "SJIS"),
    ("BIG5", "BIG5"),
    ("BIG5HKSCS", "BIG5"),
    ("Big5-HKSCS", "BIG5"),
    ("CP950", "BIG5"),
    ("GBK", "GBK"),
    ("CP936", "GBK"),
    ("UHC", "UHC"),
    ("CP949", "UHC"),
    ("JOHAB", "JOHAB"),
    ("CP1361", "JOHAB"),
    ("GB18030", "GB18030"),
    ("CP54936", "GB18030"),
    ("SJIS_2004", "SHIFT_JIS_2004"),
    ("US-ASCII", "SQL_ASCII"),
];

/// The encoding of a locale's character set, as initdb reads it.
fn codeset_encoding(set: &str) -> Option<&'static str> {
    LOCALE_CODESETS
        .iter()
        .find(|(s, _)| s.eq_ignore_ascii_case(set))
        .map(|(_, enc)| *enc)
}

/// The encoding `name` names, as PostgreSQL reads it (`pg_char_to_encoding`).
fn encoding_named(name: &str) -> Option<&'static str> {
    let key: String = name
        .chars()
        .filter(char::is_ascii_alphanumeric)
        .map(|c| c.to_ascii_lowercase())
        .collect();
    ENCODING_NAMES
        .iter()
        .find(|(n, _)| *n == key)
        .map(|(_, enc)| *enc)
}

/// initdb's other options, and why tenure does not pass them.
fn refused(name: &str) -> Option<&'static str> {
    Some(match name {
        "pgdata" | "D" => "tenure passes its own: [postgresql] data_dir",
        "username" | "U" => "tenure passes its own: [postgresql.authentication.superuser] username",
        "pwfile" | "pwprompt" | "W" => {
            "tenure passes its own: the superuser's password from \
             [postgresql.authentication.superuser]"
        }
        "auth" | "auth-host" | "auth-local" | "A" => {
            "tenure writes pg_hba.conf itself: see [postgresql] pg_hba and hba_method"
        }
        "waldir" | "X" => {
            "a WAL directory outside the data directory is not supported: tenure copies, \
             rewinds and moves aside a replica's data as one directory"
        }
        "no-sync" | "nosync" | "N" | "sync-only" | "S" => {
            "initdb must sync what it writes: a crash after `initialize` named the new \
             cluster would lose it"
        }
        "no-clean" | "n" => "a failed initdb must leave the directory empty for the next attempt",
        "debug" | "d" | "discard-caches" | "show" | "s" | "version" | "V" | "help"
        | "no-instructions" | "L" => "not an option for a production cluster's initdb",
        _ => return None,
    })
}

/// `[bootstrap]`: its keys, `initdb`, then the post-bootstrap command.
pub(super) fn parse(b: &Sect<'_>) -> Result<BootstrapConfig, ConfigError> {
    b.only(&[
        "initdb",
        "post_bootstrap",
        "post_init",
        "post_bootstrap_timeout",
    ])?;
    let mut cfg = BootstrapConfig {
        initdb_args: initdb_args(b)?,
        ..BootstrapConfig::default()
    };
    let post = match (b.nonempty("post_bootstrap")?, b.nonempty("post_init")?) {
        (Some(_), Some(_)) => {
            return Err(b.err(
                "post_init",
                "post_init is post_bootstrap's older name: set one of them",
            ));
        }
        (Some(s), None) => Some(("post_bootstrap", s)),
        (None, Some(s)) => Some(("post_init", s)),
        (None, None) => None,
    };
    if let Some((k, s)) = post {
        cfg.post_bootstrap = Some(crate::hooks::parse_command(&s).map_err(|p| b.err(k, p))?);
    }
    if let Some(t) = b.secs("post_bootstrap_timeout")? {
        if cfg.post_bootstrap.is_none() {
            return Err(b.err(
                "post_bootstrap_timeout",
                "has no effect without post_bootstrap",
            ));
        }
        cfg.post_bootstrap_timeout = t;
    }
    Ok(cfg)
}

/// `initdb`, as arguments; tenure's defaults when it is not set.
fn initdb_args(b: &Sect<'_>) -> Result<Vec<String>, ConfigError> {
    let Some(v) = b.table.get("initdb") else {
        return Ok(BootstrapConfig::default().initdb_args);
    };
    let mut opts: Vec<(String, Option<String>)> = Vec::new();
    match v {
        // Patroni's list: "flag" or { name = value }.
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                let at = |p: String| b.err("initdb", format!("entry {}: {p}", i + 1));
                match item {
                    Value::String(s) => opts.push((s.clone(), None)),
                    Value::Table(t) if t.len() == 1 => {
                        let Some((k, v)) = t.iter().next() else {
                            continue;
                        };
                        let value = option_value(k, v).map_err(at)?;
                        opts.push((k.clone(), value));
                    }
                    Value::Table(t) => {
                        return Err(at(format!(
                            "a table holds one option, found {} ({})",
                            t.len(),
                            t.keys().cloned().collect::<Vec<_>>().join(", ")
                        )));
                    }
                    other => {
                        return Err(at(format!(
                            "expected an option's name (\"data-checksums\") or a one-key \
                             table ({{ locale = \"C.UTF-8\" }}), found {}",
                            a_type(other)
                        )));
                    }
                }
            }
        }
        // Patroni's other form: one table of them all (`[bootstrap.initdb]`).
        Value::Table(t) => {
            for (k, v) in t {
                let value = option_value(k, v).map_err(|p| b.err(&format!("initdb.{k}"), p))?;
                opts.push((k.clone(), value));
            }
        }
        other => return Err(b.wrong("initdb", "a list of initdb options", other)),
    }
    let mut seen: Vec<&str> = Vec::new();
    let mut args = Vec::new();
    for (name, value) in &opts {
        check_option(name, value.as_deref()).map_err(|p| b.err("initdb", p))?;
        if seen.contains(&name.as_str()) {
            return Err(b.err("initdb", format!("{name} is given twice")));
        }
        seen.push(name);
        args.push(match value {
            Some(v) => format!("--{name}={v}"),
            None => format!("--{name}"),
        });
    }
    let has = |n: &str| seen.contains(&n);
    if has("icu-locale")
        && !opts
            .iter()
            .any(|(n, v)| n == "locale-provider" && v.as_deref() == Some("icu"))
    {
        return Err(b.err(
            "initdb",
            "icu-locale needs { locale-provider = \"icu\" } (initdb refuses it otherwise)",
        ));
    }
    if opts
        .iter()
        .any(|(n, v)| n == "locale-provider" && v.as_deref() == Some("icu"))
        && !has("icu-locale")
    {
        return Err(b.err(
            "initdb",
            "locale-provider = \"icu\" needs icu-locale (PostgreSQL 15's initdb refuses it \
             otherwise)",
        ));
    }
    if has("no-locale") && LIBC_LOCALES.iter().any(|l| has(l)) {
        return Err(b.err(
            "initdb",
            "no-locale is locale = \"C\": not together with locale or lc-*",
        ));
    }
    // initdb picks the encoding from the locale's: for C (initdb runs with
    // LC_ALL=C) that is SQL_ASCII, a choice nobody makes on purpose and nobody can
    // undo without a dump. A Patroni list such as ["data-checksums"] relied on a
    // UTF-8 environment; here such a list gets UTF8 (review of 5f50b75, M1). A
    // named locale keeps deciding its own encoding.
    let value = |n: &str| {
        opts.iter()
            .find(|(k, _)| k == n)
            .and_then(|(_, v)| v.as_deref())
    };
    // initdb checks the encoding against the collation's locale too: UTF8 is
    // added only where both accept it (review of d918f33, M1).
    let ctype = value("lc-ctype").or(value("locale")).unwrap_or("C");
    let collate = value("lc-collate").or(value("locale")).unwrap_or("C");
    let c = |l: &str| matches!(l, "C" | "POSIX");
    let utf8 = |l: &str| {
        let l = l.to_ascii_lowercase();
        l.ends_with(".utf-8") || l.ends_with(".utf8")
    };
    if !has("encoding") && c(ctype) && (c(collate) || utf8(collate)) {
        args.push("--encoding=UTF8".into());
    }
    // initdb refuses an encoding that is not the character set of the ctype's
    // and the collation's locale (but for C and POSIX, and SQL_ASCII either
    // way): refused here, so `check-config` says it, not a failed bootstrap
    // whose directory is then held.
    if let Some(enc) = value("encoding").and_then(encoding_named) {
        let named = |opt: &'static str| {
            if has(opt) { opt } else { "locale" }
        };
        for (what, locale) in [(named("lc-ctype"), ctype), (named("lc-collate"), collate)] {
            if c(locale) || enc == "SQL_ASCII" {
                continue;
            }
            let Some(set) = locale_codeset(locale) else {
                continue;
            };
            match codeset_encoding(&set) {
                Some(theirs) if theirs != enc && theirs != "SQL_ASCII" => {
                    let fix = if CLIENT_ONLY_ENCODINGS.contains(&theirs) {
                        format!(
                            "{theirs} is for clients only, so no server encoding fits \
                             \"{locale}\": choose another locale"
                        )
                    } else {
                        format!("name encoding {theirs}, or a locale of {enc}")
                    };
                    return Err(b.err(
                        "initdb",
                        format!(
                            "encoding {enc} does not match {what} = \"{locale}\", whose \
                             character set is {set} (initdb refuses the pair: {fix})"
                        ),
                    ));
                }
                // The locale's own encoding; or a character set initdb cannot
                // tell, which it only warns of.
                _ => {}
            }
        }
    }
    Ok(args)
}

/// A one-key table's value: a string or a whole number (`wal-segsize = 32`);
/// `true` for a flag (`data-checksums = true`, the table form's way to name one).
fn option_value(name: &str, v: &Value) -> Result<Option<String>, String> {
    match v {
        Value::String(s) => Ok(Some(s.clone())),
        Value::Integer(i) => Ok(Some(i.to_string())),
        Value::Boolean(true) if FLAGS.contains(&name) => Ok(None),
        Value::Boolean(_) if FLAGS.contains(&name) => {
            Err(format!("{name} = false: leave a flag out to not set it"))
        }
        other => Err(format!(
            "{name}: expected a string or a whole number, found {}",
            a_type(other)
        )),
    }
}

/// One option against PostgreSQL 15's initdb and tenure's rules.
fn check_option(name: &str, value: Option<&str>) -> Result<(), String> {
    if let Some(n) = name.strip_prefix("--").or_else(|| name.strip_prefix('-')) {
        return Err(format!(
            "\"{}\": write the option's name without the leading dashes (\"{}\")",
            name.escape_debug(),
            n.escape_debug()
        ));
    }
    if let Some(why) = refused(name) {
        return Err(format!("{name} is not accepted: {why}"));
    }
    let flag = FLAGS.contains(&name);
    if !flag && !VALUED.contains(&name) {
        return Err(format!(
            "unknown initdb option \"{}\" (PostgreSQL 15's that tenure passes: {}, {})",
            name.escape_debug(),
            FLAGS.join(", "),
            VALUED.join(", ")
        ));
    }
    match (flag, value) {
        (true, Some(v)) => {
            return Err(format!(
                "{name} takes no value, found \"{}\": name it alone (\"{name}\")",
                v.escape_debug()
            ));
        }
        (false, None) => {
            return Err(format!("{name} needs a value: {{ {name} = \"...\" }}"));
        }
        (true, None) => return Ok(()),
        (false, Some(_)) => {}
    }
    let v = value.unwrap_or_default();
    if v.is_empty() || v.len() > 255 || !v.bytes().all(|c| c.is_ascii_graphic()) {
        return Err(format!(
            "{name} = \"{}\": expected 1 to 255 printable ASCII characters, no spaces",
            v.escape_debug()
        ));
    }
    match name {
        "wal-segsize" => {
            let ok = v
                .parse::<u32>()
                .is_ok_and(|n| (1..=1024).contains(&n) && n.is_power_of_two());
            if !ok {
                return Err(format!(
                    "wal-segsize = {v}: expected megabytes, a power of two from 1 to 1024"
                ));
            }
        }
        "encoding" => match encoding_named(v) {
            None => {
                return Err(format!(
                    "encoding = \"{v}\": PostgreSQL has no such encoding (UTF8, LATIN1 to \
                     LATIN10, WIN1250 to WIN1258, EUC_JP, SQL_ASCII, ...)"
                ));
            }
            Some(enc) if CLIENT_ONLY_ENCODINGS.contains(&enc) => {
                return Err(format!(
                    "encoding = \"{v}\": {enc} is an encoding for clients only; a server's \
                     databases cannot use it"
                ));
            }
            Some(_) => {}
        },
        "locale-provider" if v != "libc" && v != "icu" => {
            return Err(format!("locale-provider = \"{v}\": expected libc or icu"));
        }
        n if LIBC_LOCALES.contains(&n) && !locale_installed(v) => {
            return Err(format!(
                "{name} = \"{v}\": no such locale on this host (`locale -a` lists the \
                 installed ones; every member needs it, replicas too)"
            ));
        }
        _ => {}
    }
    Ok(())
}

/// `f` on locale `name` as the C library here has it (`newlocale(3)`), or `None`
/// if it does not know the locale. The one place a locale object is made and
/// freed.
fn with_locale<T>(name: &str, f: impl FnOnce(libc::locale_t) -> T) -> Option<T> {
    let c = std::ffi::CString::new(name).ok()?;
    // SAFETY: `c` is a valid NUL-terminated string that outlives the call;
    // newlocale(3) with a null base allocates a new locale object or returns
    // null, and reads nothing else of ours.
    let loc = unsafe { libc::newlocale(libc::LC_ALL_MASK, c.as_ptr(), std::ptr::null_mut()) };
    if loc.is_null() {
        return None;
    }
    let out = f(loc);
    // SAFETY: `loc` came from newlocale above, is not null, and is freed once,
    // after `f`, which cannot keep it (a `locale_t` it copied would dangle, and
    // no caller copies it).
    unsafe { libc::freelocale(loc) };
    Some(out)
}

/// The character set of locale `name` here (`nl_langinfo(CODESET)`, as initdb
/// asks it), if the C library knows the locale.
fn locale_codeset(name: &str) -> Option<String> {
    with_locale(name, |loc| {
        // SAFETY: `loc` is a valid locale object for the whole call; the
        // returned string belongs to it and is copied out before it is freed.
        unsafe {
            let p = libc::nl_langinfo_l(libc::CODESET, loc);
            (!p.is_null()).then(|| std::ffi::CStr::from_ptr(p).to_string_lossy().into_owned())
        }
    })
    .flatten()
}

/// Whether the C library here knows locale `name`: initdb's own test (it sets
/// the locale and fails on an unknown one), made at configuration time so a
/// missing locale is refused by `check-config`, not at the cluster's birth.
fn locale_installed(name: &str) -> bool {
    with_locale(name, |_| ()).is_some()
}
