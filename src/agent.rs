//! The agent's loop: wait -> observe -> core -> act, a deadline on every step.
//!
//! STUB: the integrator replaces this module; only the signature is the contract
//! with `main.rs`.

use std::path::Path;

use crate::config::Config;

/// Run the agent with a validated `config` loaded from `path` (kept for reloads).
/// Returns when the agent stops; `Err` says why it could not run.
pub fn run(config: Config, path: &Path) -> Result<(), String> {
    let _ = (config, path);
    Err("not implemented".into())
}
