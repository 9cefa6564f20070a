//! `tenure demo`: a local cluster (etcd + PostgreSQL + agents) for a walkthrough.
//!
//! STUB: the integrator replaces this module; only the signature is the contract
//! with `main.rs`.

/// Run the demo; `keep`: leave the scratch directories in place afterwards.
pub fn run(keep: bool) -> Result<(), String> {
    let _ = keep;
    Err("not implemented".into())
}
