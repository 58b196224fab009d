//! Communication patterns: parameter-server sharding and collectives.

pub mod collective;
pub mod ps;
