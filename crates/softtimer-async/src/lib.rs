//! # softtimer-async
#![deny(unsafe_code)]
#![warn(missing_docs)]

mod clock;
mod executor;
#[cfg(feature = "hyper")]
pub mod hyper;
mod net;
mod pace;
#[cfg(feature = "quinn")]
pub mod quinn;
mod reactor;
mod runtime;
mod task;
pub mod time;

pub use net::tcp::{TcpListener, TcpStream};
pub use net::udp::UdpSocket;
pub use pace::{Departure, PacedSender};
pub use runtime::{Builder, Handle, Precision, Runtime, RuntimeStats};
pub use task::{JoinError, JoinHandle, spawn, spawn_local};
