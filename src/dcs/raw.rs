//! Raw reads for tools outside the loop (`tenure ctl`): values as stored, for the
//! fields the agent does not parse (another writer's `pending_restart`, ...).
//!
//! Owns: a bounded range read under the scope. Must never: write, or be used by
//! the agent's loop (it parses nothing; the loop reads through `read_cluster`).

use etcd_client::GetOptions;
use tokio::runtime::Runtime;

use super::{DcsError, Etcd};
use crate::core::time::Instant;

impl Etcd {
    /// Every key under `<namespace>/<scope>/<suffix>`, as `(key relative to the
    /// scope, value bytes)`, in key order. Bounded by `deadline`.
    pub fn read_raw(
        &mut self,
        rt: &Runtime,
        suffix: &str,
        deadline: Instant,
    ) -> Result<Vec<(String, Vec<u8>)>, DcsError> {
        let key = self.key(suffix);
        let mut kv = self.client.kv_client();
        let resp = self.call(
            rt,
            deadline,
            &format!("read {key}"),
            kv.get(key.clone(), Some(GetOptions::new().with_prefix())),
        )?;
        let prefix = self.prefix.as_bytes();
        Ok(resp
            .kvs()
            .iter()
            .filter_map(|item| {
                let rel = item.key().strip_prefix(prefix)?;
                Some((
                    String::from_utf8_lossy(rel).into_owned(),
                    item.value().to_vec(),
                ))
            })
            .collect())
    }
}
