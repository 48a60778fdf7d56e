//! The forwarding core: receive UDP datagrams on one side, apply a per-packet policy, send
//! them on the other. A user-space router is built on it (the livelock experiments), and so
//! is a path emulator (a delay, a rate and a queue instead of screening).
//!
//! Both sides are UDP sockets rather than `AF_PACKET`: the kernel's socket receive buffer is
//! then the "interface buffer" of the livelock paper, where excess load is dropped early and
//! counted (`SO_RXQ_OVFL`) at no cost to the router, and the router needs no link-layer
//! handling of its own. A capture socket would see every frame on the link, the router's own
//! included, and would have to drop in user space what a UDP socket never delivers.
//!
//! ```no_run
//! use softtimer_net::forward::Forwarder;
//!
//! // Forward what arrives on port 9000 to 10.0.2.2:9000, 32 datagrams at a time at most.
//! let mut fwd = Forwarder::bind(
//!     "0.0.0.0:9000".parse().unwrap(),
//!     "10.0.2.2:9000".parse().unwrap(),
//!     32,
//! )
//! .unwrap();
//! let took = fwd.take_up_to(32).unwrap(); // non-blocking: 0 when nothing waits
//! let sent = fwd.send_taken(); // every one taken goes on (but one too long), in one sendmmsg
//! assert!(sent <= took);
//! ```

use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::{BorrowedFd, OwnedFd};

use softtimer::{Clock, SystemClock};

use crate::udp::TimestampedReceiver;

/// The largest datagram the forwarder carries (a full Ethernet frame's UDP payload).
pub const MAX_FORWARDED: usize = 1472;

/// What the forwarder counted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ForwardCounters {
    /// Datagrams taken from the receiving socket.
    pub received: u64,
    /// Datagrams the sending socket accepted.
    pub forwarded: u64,
    /// Datagrams the sending socket refused.
    pub send_errors: u64,
    /// Of `received`, datagrams longer than [`MAX_FORWARDED`]: dropped, not sent on cut.
    pub truncated: u64,
}

/// A receiving socket and a sending socket connected to the next hop.
pub struct Forwarder {
    rx: TimestampedReceiver,
    tx: OwnedFd,
    taken: usize,
    counters: ForwardCounters,
}

impl Forwarder {
    /// Binds `listen` (non-blocking, no timestamps) and connects a sending socket to
    /// `next_hop`; takes up to `batch` (1 ..= 1024) datagrams per call.
    pub fn bind(listen: SocketAddr, next_hop: SocketAddr, batch: usize) -> io::Result<Forwarder> {
        let rx = TimestampedReceiver::bind_untimed(listen, batch, MAX_FORWARDED)?;
        let any: SocketAddr = if next_hop.is_ipv4() {
            ([0, 0, 0, 0], 0).into()
        } else {
            (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
        };
        let tx = UdpSocket::bind(any)?;
        tx.connect(next_hop)?;
        Ok(Forwarder {
            rx,
            tx: OwnedFd::from(tx),
            taken: 0,
            counters: ForwardCounters::default(),
        })
    }

    /// The receiving socket (to watch for readiness).
    pub fn receiving_socket(&self) -> BorrowedFd<'_> {
        self.rx.socket()
    }

    /// The receiving socket's address.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.rx.local_addr()
    }

    /// Takes up to `max` waiting datagrams without blocking; `Ok(0)` when none waits. Those
    /// longer than [`MAX_FORWARDED`] are among them, counted in
    /// [`ForwardCounters::truncated`], and are not [`taken`](Forwarder::taken) or sent.
    pub fn take_up_to(&mut self, max: usize) -> io::Result<usize> {
        self.taken = self.rx.recv_up_to(max)?;
        self.counters.received += self.taken as u64;
        let cut = (0..self.taken)
            .filter(|&i| self.rx.get(i).is_some_and(|d| d.truncated))
            .count();
        self.counters.truncated += cut as u64;
        Ok(self.taken)
    }

    /// Datagram `i` of those just taken; `None` past them, and for one that was longer than
    /// [`MAX_FORWARDED`] (a router does not send on a datagram it cut).
    pub fn taken(&self, i: usize) -> Option<&[u8]> {
        (i < self.taken)
            .then(|| self.rx.get(i).filter(|d| !d.truncated).map(|d| d.data))
            .flatten()
    }

    /// Sends every datagram just taken (but those too long) to the next hop (one
    /// `sendmmsg`); returns how many the socket accepted.
    pub fn send_taken(&mut self) -> usize {
        let datagrams: Vec<&[u8]> = (0..self.taken).filter_map(|i| self.taken(i)).collect();
        let sent = send_all(&self.tx, &datagrams);
        self.count_sent(datagrams.len(), sent);
        self.taken = 0;
        sent
    }

    /// Sends `datagrams` (taken earlier and kept, by a queueing stage) to the next hop.
    pub fn send(&mut self, datagrams: &[&[u8]]) -> usize {
        let sent = send_all(&self.tx, datagrams);
        self.count_sent(datagrams.len(), sent);
        sent
    }

    fn count_sent(&mut self, tried: usize, sent: usize) {
        self.counters.forwarded += sent as u64;
        self.counters.send_errors += (tried - sent) as u64;
    }

    /// Datagrams the kernel dropped at the receiving socket (its buffer was full).
    pub fn kernel_drops(&self) -> u64 {
        self.rx.kernel_drops()
    }

    /// What was counted.
    pub fn counters(&self) -> ForwardCounters {
        self.counters
    }

    /// A sender for another thread (a screening stage), on the same connected socket.
    pub fn sender(&self) -> io::Result<Sender> {
        Ok(Sender {
            tx: self.tx.try_clone()?,
        })
    }
}

/// The sending half of a [`Forwarder`], for a stage on another thread.
pub struct Sender {
    tx: OwnedFd,
}

impl Sender {
    /// Sends `datagrams` to the next hop; returns how many the socket accepted.
    pub fn send(&self, datagrams: &[&[u8]]) -> usize {
        send_all(&self.tx, datagrams)
    }
}

/// Every datagram to the next hop, without waiting (a full buffer drops, as a router does),
/// on past one the kernel refuses (counted as not sent).
fn send_all(tx: &OwnedFd, datagrams: &[&[u8]]) -> usize {
    let parts: Vec<[io::IoSlice<'_>; 1]> =
        datagrams.iter().map(|d| [io::IoSlice::new(d)]).collect();
    let parts: Vec<&[io::IoSlice<'_>]> = parts.iter().map(|p| &p[..]).collect();
    softtimer_rt::send_all(tx, &parts, false).sent
}

/// Per-packet work of a stated cost: spins `ns` nanoseconds on the clock, as a router's
/// lookup or a screening program would spend them (busy work, not a sleep).
#[derive(Clone, Debug)]
pub struct PacketWork {
    clock: SystemClock,
    ticks: u64,
}

impl PacketWork {
    /// Work of `ns` nanoseconds per packet (0: none).
    pub fn new(ns: u64) -> PacketWork {
        let clock = SystemClock::new();
        let ticks = (u128::from(ns) * u128::from(clock.resolution_hz()) / 1_000_000_000) as u64;
        PacketWork { clock, ticks }
    }

    /// Does the work for `packets` packets.
    pub fn run(&self, packets: usize) {
        if self.ticks == 0 || packets == 0 {
            return;
        }
        let until = self.clock.now().ticks() + self.ticks * packets as u64;
        while self.clock.now().ticks() < until {
            std::hint::spin_loop();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    #[test]
    fn forwards_what_it_takes_and_counts() {
        let sink = UdpSocket::bind("127.0.0.1:0").unwrap();
        sink.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
        let mut fwd = Forwarder::bind(
            "127.0.0.1:0".parse().unwrap(),
            sink.local_addr().unwrap(),
            8,
        )
        .unwrap();
        assert_eq!(fwd.take_up_to(8).unwrap(), 0, "non-blocking when empty");
        let src = UdpSocket::bind("127.0.0.1:0").unwrap();
        for i in 0..5u8 {
            src.send_to(&[i; 18], fwd.local_addr().unwrap()).unwrap();
        }
        std::thread::sleep(Duration::from_millis(20));
        // A quota of 3: three now, two next time.
        assert_eq!(fwd.take_up_to(3).unwrap(), 3);
        assert_eq!(fwd.taken(2), Some(&[2u8; 18][..]));
        assert_eq!(fwd.taken(3), None);
        assert_eq!(fwd.send_taken(), 3);
        assert_eq!(fwd.take_up_to(8).unwrap(), 2);
        let kept: Vec<Vec<u8>> = (0..2).map(|i| fwd.taken(i).unwrap().to_vec()).collect();
        let refs: Vec<&[u8]> = kept.iter().map(|v| v.as_slice()).collect();
        assert_eq!(fwd.sender().unwrap().send(&refs), 2);
        let mut buf = [0u8; 64];
        for i in 0..5u8 {
            let n = sink.recv(&mut buf).unwrap();
            assert_eq!(&buf[..n], &[i; 18]);
        }
        let c = fwd.counters();
        assert_eq!((c.received, c.forwarded, c.send_errors), (5, 3, 0));
        assert_eq!(fwd.kernel_drops(), 0);
    }

    #[test]
    fn a_datagram_too_long_is_dropped_and_counted_not_sent_on_cut() {
        let sink = UdpSocket::bind("127.0.0.1:0").unwrap();
        sink.set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        let mut fwd = Forwarder::bind(
            "127.0.0.1:0".parse().unwrap(),
            sink.local_addr().unwrap(),
            8,
        )
        .unwrap();
        let src = UdpSocket::bind("127.0.0.1:0").unwrap();
        let to = fwd.local_addr().unwrap();
        src.send_to(&[1; 100], to).unwrap();
        src.send_to(&[2; MAX_FORWARDED + 1], to).unwrap();
        src.send_to(&[3; MAX_FORWARDED], to).unwrap();
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(fwd.take_up_to(8).unwrap(), 3);
        assert_eq!(fwd.taken(1), None, "the long one is not handed out cut");
        assert_eq!(fwd.send_taken(), 2);
        let mut buf = [0u8; 4096];
        let n = sink.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], &[1; 100]);
        let n = sink.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], &[3; MAX_FORWARDED]);
        assert!(sink.recv(&mut buf).is_err(), "nothing else arrives");
        let c = fwd.counters();
        assert_eq!(
            (c.received, c.forwarded, c.send_errors, c.truncated),
            (3, 2, 0, 1)
        );
    }

    #[test]
    fn packet_work_takes_its_stated_time() {
        let work = PacketWork::new(20_000);
        let t = Instant::now();
        work.run(50); // 1 ms
        let took = t.elapsed();
        assert!(took >= Duration::from_micros(990), "{took:?}");
        PacketWork::new(0).run(1_000_000); // nothing
    }
}
