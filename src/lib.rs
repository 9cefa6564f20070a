//! tenure: lease-based automatic failover for PostgreSQL.
pub mod agent;
pub mod api;
pub mod clock;
pub mod config;
pub mod core;
pub mod ctl;
pub mod dcs;
pub mod demo;
pub mod events;
pub mod guardian;
pub mod hooks;
pub mod logging;
pub mod metrics;
pub mod pg;
pub mod testbed;
pub mod tls;
pub mod watchdog;
