//! DHCPv4 on the provisioning interface: full mode and proxyDHCP.
//!
//! `packet` reads requests, `policy` decides the answer (from the pool in `range`),
//! `server` owns the sockets.

pub mod packet;
pub mod policy;
pub mod range;
pub mod server;
