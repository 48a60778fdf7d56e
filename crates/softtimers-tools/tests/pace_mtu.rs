//! `pace` across a veth link of a 1500-byte MTU between two namespaces (needs root; says so
//! and passes without it, but fails on CI, which runs as root).

use std::net::{SocketAddr, UdpSocket};
use std::sync::mpsc;
use std::time::Duration;

mod common;

use softtimers_tools::netns::{End, VethLink, spawn_in};
use softtimers_tools::pace::{self, BatchSend, PaceOptions};

/// Datagrams larger than the path's MTU leave (in IP fragments) and arrive, although GSO
/// was asked for: the kernel refuses every send of a segmented socket whose segment does
/// not fit the path, so the sender batches by `sendmmsg` there, and says so.
#[test]
fn datagrams_larger_than_the_mtu_leave_although_gso_was_asked_for() {
    if !common::can_run_paths() {
        return;
    }
    let _serial = common::serial();
    let link = VethLink::create("gsomtu").unwrap();
    let to = SocketAddr::from((link.receiver_addr, 9431));
    let (bound_tx, bound_rx) = mpsc::channel();
    let receiver = spawn_in(link.namespace(End::Receiver), move || {
        let socket = UdpSocket::bind(to).unwrap();
        socket
            .set_read_timeout(Some(Duration::from_millis(500)))
            .unwrap();
        bound_tx.send(()).unwrap();
        let (mut buf, mut received) = (vec![0u8; 65_536], 0u64);
        while let Ok(n) = socket.recv(&mut buf) {
            assert_eq!(n, 8000);
            received += 1;
        }
        received
    })
    .unwrap();
    bound_rx.recv().unwrap();
    let report = spawn_in(link.namespace(End::Sender), move || {
        pace::pace(&PaceOptions {
            size: 8000,
            duration: Duration::from_millis(300),
            per_wakeup: 2,
            batch_send: BatchSend::Gso,
            ..PaceOptions::new(to, "20M".parse().unwrap())
        })
    })
    .unwrap()
    .join()
    .unwrap()
    .unwrap();
    assert_eq!(report.batch_send, BatchSend::Sendmmsg, "{report:?}");
    assert_eq!(report.send_errors, 0, "{report:?}");
    assert!(report.packets > 50, "{report:?}");
    assert_eq!(receiver.join().unwrap(), report.packets);
}
