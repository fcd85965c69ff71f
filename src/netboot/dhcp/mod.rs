//! DHCPv4 and DHCPv6 on the provisioning interface: full mode and proxyDHCP.
//!
//! `packet` reads requests, `policy` decides the answer (from the pool in `range`),
//! `server` owns the sockets; `packet6`, `policy6` and `server6` do the same for
//! DHCPv6. `relay` and `relay6` pick the range of a relayed request's subnet and
//! unwrap and wrap DHCPv6 relay messages.

pub mod packet;
pub mod packet6;
pub mod policy;
pub mod policy6;
pub mod range;
pub mod relay;
pub mod relay6;
pub mod server;
pub mod server6;
