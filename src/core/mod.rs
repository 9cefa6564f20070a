//! The HA decision core.
pub mod model;
pub mod time;
