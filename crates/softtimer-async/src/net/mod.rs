//! Networking on the runtime: UDP (batched, offloaded, paced) and TCP.

pub(crate) mod tcp;
pub(crate) mod udp;
