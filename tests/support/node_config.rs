//! One valid node configuration file for the tests that run the `tenure` binary
//! on a file and nothing else (`config_cli`, `ctl_cli`): its `data_dir` is
//! `<dir>/data` (never created by a refusal), its watchdog off.

use std::path::Path;

/// The file's text: `scope`, one etcd `endpoint`, and `api_extra` (whole lines,
/// each ending in a newline, or empty) appended to the `[api]` section.
pub fn node_config(dir: &Path, scope: &str, endpoint: &str, api_extra: &str) -> String {
    format!(
        r#"
scope = "{scope}"
name = "pg1"
[etcd]
endpoints = ["{endpoint}"]
[timing]
ttl = 30
loop_wait = 2
retry_timeout = 1
safety_margin = 2
demote_budget = 1
[postgresql]
data_dir = "{}/data"
listen = "127.0.0.1:15432"
[postgresql.authentication.superuser]
password = "a"
[postgresql.authentication.replication]
password = "b"
[postgresql.authentication.rewind]
password = "c"
[api]
listen = "127.0.0.1:18008"
{api_extra}[watchdog]
mode = "off"
"#,
        dir.display()
    )
}
