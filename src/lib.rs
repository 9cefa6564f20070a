//! tenure: lease-based automatic failover for PostgreSQL.
pub mod clock;
pub mod config;
pub mod core;
pub mod dcs;
pub mod demo;
pub mod pg;
pub mod testbed;
