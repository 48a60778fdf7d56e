//! The io_uring backend end to end: an echo through the ring, a burst larger than the ring,
//! a datagram larger than a provided buffer, GSO and GRO, the trigger state after every
//! completion reaped, other descriptors served through the ring's polls (and the epoll set a
//! handle registers in), and the clear refusal where io_uring is unavailable.
//!
//! Every test that needs the ring says so and passes where the kernel has none (a CI
//! container's seccomp profile), except the refusal test, which makes the kernel refuse.

use std::net::UdpSocket;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::time::{Duration, Instant};

use softtimer::TriggerSource;
use softtimer_rt::{
    EventLoop, Interest, IoBackend, LoopConfig, LoopCx, Ready, RingRecv, RtError, SendOptions,
    StopHandle, UringOptions, UringUnavailable,
};

fn uring_config() -> LoopConfig {
    LoopConfig {
        io_backend: IoBackend::Uring,
        ..LoopConfig::default()
    }
}

/// A loop on the ring, or `None` (with the reason printed) where there is none.
fn ring_loop(config: LoopConfig) -> Option<EventLoop<()>> {
    match EventLoop::new(config, |_, _| {}) {
        Ok(ev) => Some(ev),
        Err(RtError::Uring(why)) => {
            eprintln!("skipped: {why}");
            None
        }
        Err(e) => panic!("loop: {e}"),
    }
}

/// The loop of `config` on io_uring, or a return from the test where the ring is refused
/// (the reason printed).
macro_rules! ring_or_skip {
    ($config:expr) => {
        match ring_loop($config) {
            Some(ev) => ev,
            None => return,
        }
    };
}

/// Stops the loop after `limit` whatever happens, so that no test hangs.
fn deadline(stop: StopHandle, limit: Duration) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        std::thread::sleep(limit);
        stop.stop();
    })
}

/// Runs the loop for `limit`, handing what is ready to `on_ready`.
fn run_for(
    ev: &mut EventLoop<()>,
    limit: Duration,
    on_ready: impl FnMut(&mut LoopCx<'_, ()>, Ready),
) {
    let stopper = deadline(ev.stop_handle(), limit);
    ev.run(on_ready).unwrap();
    stopper.join().unwrap();
}

fn bind() -> UdpSocket {
    UdpSocket::bind("127.0.0.1:0").unwrap()
}

/// Datagrams received into `buffers` provided buffers of `size` bytes.
fn datagrams(buffers: u16, size: u32) -> RingRecv {
    RingRecv::Datagrams { buffers, size }
}

#[test]
fn a_udp_echo_runs_through_the_ring() {
    let mut ev = ring_or_skip!(uring_config());
    let server = bind();
    let client = bind();
    client
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let to = server.local_addr().unwrap();
    let fd = ev.cx().attach(&server, 1, datagrams(16, 2048)).unwrap();
    const N: usize = 100;
    let sender = {
        let client = client.try_clone().unwrap();
        std::thread::spawn(move || {
            let mut echoed = Vec::new();
            let mut buf = [0u8; 64];
            for i in 0..N {
                client.send_to(&(i as u32).to_be_bytes(), to).unwrap();
                let (n, _) = client
                    .recv_from(&mut buf)
                    .unwrap_or_else(|e| panic!("reply {i}: {e}"));
                echoed.push(u32::from_be_bytes(buf[..n].try_into().unwrap()));
            }
            echoed
        })
    };
    let limit = deadline(ev.stop_handle(), Duration::from_secs(10));
    let mut echoes = 0;
    ev.run(|cx, ready| {
        assert_eq!(ready.token, 1);
        let mut replies = Vec::new();
        cx.received(fd, usize::MAX, |m| {
            assert!(!m.truncated);
            replies.push((m.data.to_vec(), m.from.unwrap()));
        });
        for (data, from) in replies {
            let options = SendOptions {
                to: Some(from),
                ..SendOptions::default()
            };
            cx.send_ring(fd, &[&data], &options).unwrap();
            echoes += 1;
        }
        if echoes == N {
            cx.stop();
        }
    })
    .unwrap();
    assert_eq!(sender.join().unwrap(), (0..N as u32).collect::<Vec<_>>());
    let counters = ev.cx().ring_counters(fd).unwrap();
    assert_eq!(counters.received, N as u64);
    drop(ev);
    let _ = limit;
}

#[test]
fn a_burst_larger_than_the_ring_is_sent_whole() {
    let config = LoopConfig {
        uring: UringOptions {
            entries: 8,
            send_slots: 16,
            ..UringOptions::default()
        },
        ..uring_config()
    };
    let mut ev = ring_or_skip!(config);
    let rx = bind();
    // Room for the whole burst, so that the receiver's buffer cannot lose any (root may
    // force it past net.core.rmem_max; otherwise the burst is what fits).
    let forced = rustix::net::sockopt::set_socket_recv_buffer_size_force(&rx, 8 << 20).is_ok();
    let burst: usize = if forced { 2000 } else { 150 };
    let tx = bind();
    tx.connect(rx.local_addr().unwrap()).unwrap();
    let fd = ev.cx().attach(&tx, 1, RingRecv::None).unwrap();
    {
        let mut cx = ev.cx();
        for i in 0..burst {
            cx.send_ring(
                fd,
                &[&(i as u32).to_be_bytes(), &[0u8; 60]],
                &SendOptions::default(),
            )
            .unwrap();
        }
    }
    // The loop's own send completions do not end its wait (nothing else is news to it):
    // it reaps them when something else comes, here the stop.
    run_for(&mut ev, Duration::from_millis(300), |_, _| {});
    let counters = ev.cx().ring_counters(fd).unwrap();
    assert_eq!((counters.sent, counters.refused), (burst as u64, 0));
    assert!(
        ev.ring_stats().unwrap().slot_waits > 0,
        "the burst waited for slots"
    );
    rx.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    let mut buf = [0u8; 128];
    for i in 0..burst {
        let n = rx.recv(&mut buf).unwrap();
        assert_eq!(n, 64);
        assert_eq!(
            u32::from_be_bytes(buf[..4].try_into().unwrap()),
            i as u32,
            "in order"
        );
    }
}

#[test]
fn a_datagram_longer_than_a_buffer_arrives_truncated_and_flagged() {
    let mut ev = ring_or_skip!(uring_config());
    let rx = bind();
    let fd = ev.cx().attach(&rx, 3, datagrams(4, 64)).unwrap();
    let tx = bind();
    tx.send_to(&[7u8; 200], rx.local_addr().unwrap()).unwrap();
    tx.send_to(&[8u8; 10], rx.local_addr().unwrap()).unwrap();
    let limit = deadline(ev.stop_handle(), Duration::from_secs(10));
    let mut got = Vec::new();
    ev.run(|cx, _| {
        cx.received(fd, usize::MAX, |m| got.push((m.data.to_vec(), m.truncated)));
        if got.len() == 2 {
            cx.stop();
        }
    })
    .unwrap();
    assert_eq!(got[0], (vec![7u8; 64], true));
    assert_eq!(got[1], (vec![8u8; 10], false));
    let counters = ev.cx().ring_counters(fd).unwrap();
    assert_eq!((counters.received, counters.truncated), (2, 1));
    drop(limit);
}

#[test]
fn a_gso_batch_leaves_as_one_send_and_arrives_whole() {
    let mut ev = ring_or_skip!(uring_config());
    let rx = bind();
    // GRO on the receiver (quinn-udp turns it on where the kernel has it): loopback then
    // hands the GSO batch over as one message.
    let gro = quinn_udp::UdpSocketState::new((&rx).into()).is_ok_and(|s| s.gro_segments() > 1);
    let tx = bind();
    let (rx_fd, tx_fd) = {
        let mut cx = ev.cx();
        let rx_fd = cx.attach(&rx, 1, datagrams(8, 65536)).unwrap();
        (rx_fd, cx.attach(&tx, 2, RingRecv::None).unwrap())
    };
    let batch: Vec<u8> = (0..450u32).map(|i| (i / 100) as u8).collect();
    let options = SendOptions {
        to: Some(rx.local_addr().unwrap()),
        segment_size: Some(100),
        ..SendOptions::default()
    };
    ev.cx().send_ring(tx_fd, &[&batch], &options).unwrap();
    let limit = deadline(ev.stop_handle(), Duration::from_secs(10));
    let mut messages = Vec::new();
    ev.run(|cx, _| {
        cx.received(rx_fd, usize::MAX, |m| {
            messages.push((m.data.to_vec(), m.segment_size))
        });
        if messages.iter().map(|(d, _)| d.len()).sum::<usize>() == 450 {
            cx.stop();
        }
    })
    .unwrap();
    let counters = ev.cx().ring_counters(tx_fd).unwrap();
    assert_eq!(counters.sent, 5, "a GSO send counts its datagrams");
    assert_eq!(counters.sent_bytes, 450, "and its bytes");
    let bytes: Vec<u8> = messages.iter().flat_map(|(d, _)| d.clone()).collect();
    assert_eq!(bytes, batch);
    if gro && messages.len() == 1 {
        assert_eq!(messages[0].1, Some(100), "GRO's segment size is read");
    } else {
        assert_eq!(messages.len(), 5);
    }
    drop(limit);
}

#[test]
fn every_completion_reaped_is_a_trigger_state() {
    let config = LoopConfig {
        stats: true,
        ..uring_config()
    };
    let mut ev = ring_or_skip!(config);
    let rx = bind();
    let tx = bind();
    tx.connect(rx.local_addr().unwrap()).unwrap();
    const K: u64 = 40;
    let (rx_fd, tx_fd) = {
        let mut cx = ev.cx();
        let rx_fd = cx.attach(&rx, 1, datagrams(64, 256)).unwrap();
        let tx_fd = cx.attach(&tx, 2, RingRecv::None).unwrap();
        for i in 0..K {
            cx.send_ring(tx_fd, &[&i.to_be_bytes()], &SendOptions::default())
                .unwrap();
        }
        (rx_fd, tx_fd)
    };
    let limit = deadline(ev.stop_handle(), Duration::from_secs(10));
    ev.run_with(
        |cx, _| {
            cx.received(rx_fd, usize::MAX, |_| {});
        },
        |cx, _| {
            let received = cx.ring_counters(rx_fd).unwrap().received;
            if received == K && cx.ring_counters(tx_fd).unwrap().sent == K {
                cx.stop();
            }
            false
        },
    )
    .unwrap();
    let stats = ev.stats().unwrap();
    // One trigger state per send completion and per datagram received: nothing else in this
    // loop sends or receives.
    assert_eq!(stats.triggers(TriggerSource::Send), K);
    assert_eq!(stats.triggers(TriggerSource::Recv), K);
    assert!(ev.ring_stats().unwrap().completions >= 2 * K);
    drop(limit);
}

/// An eventfd, made non-blocking.
fn eventfd() -> OwnedFd {
    rustix::event::eventfd(
        0,
        rustix::event::EventfdFlags::NONBLOCK | rustix::event::EventfdFlags::CLOEXEC,
    )
    .unwrap()
}

/// An eventfd registered by the loop's callbacks for `interest`, as `token`.
fn registered_eventfd(ev: &mut EventLoop<()>, interest: Interest, token: u64) -> OwnedFd {
    let fd = eventfd();
    ev.cx().register(&fd, interest, token).unwrap();
    fd
}

/// Adds one to an eventfd's count.
fn post(fd: impl AsFd) {
    rustix::io::write(fd, &1u64.to_ne_bytes()).unwrap();
}

#[test]
fn other_descriptors_are_served_through_the_rings_polls_and_the_epoll_set() {
    let mut ev = ring_or_skip!(uring_config());
    // One registered by the loop's callbacks (a multishot poll in the ring), one by a
    // handle from another thread (the epoll set, which the ring polls).
    let direct = registered_eventfd(&mut ev, Interest::READABLE, 5);
    let handled = eventfd();
    ev.handle()
        .register(&handled, Interest::READABLE, 6)
        .unwrap();
    let (d, h) = (direct.try_clone().unwrap(), handled.try_clone().unwrap());
    let writer = std::thread::spawn(move || {
        for _ in 0..3 {
            std::thread::sleep(Duration::from_millis(5));
            post(&d);
            post(&h);
        }
    });
    let limit = deadline(ev.stop_handle(), Duration::from_secs(10));
    let (mut from_direct, mut from_handle) = (0u64, 0u64);
    let started = Instant::now();
    ev.run(|cx, ready| {
        let mut buf = [0u8; 8];
        match ready.token {
            5 => {
                assert!(ready.readable);
                if cx.read(&direct, &mut buf).is_ok() {
                    from_direct += u64::from_ne_bytes(buf);
                }
            }
            6 => {
                if cx.read(&handled, &mut buf).is_ok() {
                    from_handle += u64::from_ne_bytes(buf);
                }
            }
            other => panic!("unexpected token {other}"),
        }
        if from_direct == 3 && from_handle == 3 {
            cx.stop();
        }
    })
    .unwrap();
    writer.join().unwrap();
    assert_eq!((from_direct, from_handle), (3, 3));
    assert!(started.elapsed() < Duration::from_secs(10));
    // Deregistered: a write no longer reaches the loop.
    ev.cx().deregister(&direct).unwrap();
    post(&direct);
    run_for(&mut ev, Duration::from_millis(50), |_, ready| {
        assert_ne!(ready.token, 5, "deregistered")
    });
    drop(limit);
    assert!(direct.as_fd().as_raw_fd() >= 0);
}

#[test]
fn the_epoll_backend_refuses_ring_operations() {
    let mut ev: EventLoop<()> = EventLoop::new(LoopConfig::default(), |_, _| {}).unwrap();
    let socket = bind();
    assert!(matches!(
        ev.cx().attach(&socket, 1, RingRecv::None),
        Err(RtError::NoRing)
    ));
    assert_eq!(ev.io_backend(), IoBackend::Epoll);
}

/// Installs, on the calling thread only, a seccomp filter that makes `io_uring_setup` fail
/// with `ENOSYS`, as a container's default profile does.
#[cfg(target_arch = "x86_64")]
#[allow(unsafe_code)]
fn refuse_io_uring_on_this_thread() -> bool {
    const LD_NR: u16 = (libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16;
    const JEQ: u16 = (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16;
    const RET: u16 = (libc::BPF_RET | libc::BPF_K) as u16;
    let filter = [
        // The system call's number is the first word of `seccomp_data`.
        libc::sock_filter {
            code: LD_NR,
            jt: 0,
            jf: 0,
            k: 0,
        },
        libc::sock_filter {
            code: JEQ,
            jt: 0,
            jf: 1,
            k: libc::SYS_io_uring_setup as u32,
        },
        libc::sock_filter {
            code: RET,
            jt: 0,
            jf: 0,
            k: libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32,
        },
        libc::sock_filter {
            code: RET,
            jt: 0,
            jf: 0,
            k: libc::SECCOMP_RET_ALLOW,
        },
    ];
    let program = libc::sock_fprog {
        len: filter.len() as u16,
        filter: filter.as_ptr().cast_mut(),
    };
    // SAFETY: `program` points at a valid four-instruction filter that outlives the call
    // (the kernel copies it); without TSYNC it applies to this thread only, which the test
    // spawned for it and ends after.
    unsafe {
        libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0
            && libc::prctl(
                libc::PR_SET_SECCOMP,
                libc::SECCOMP_MODE_FILTER,
                &program as *const libc::sock_fprog,
            ) == 0
    }
}

#[cfg(target_arch = "x86_64")]
#[test]
fn where_io_uring_is_refused_the_loop_says_why() {
    let outcome = std::thread::spawn(|| {
        if !refuse_io_uring_on_this_thread() {
            return None;
        }
        Some(EventLoop::<()>::new(uring_config(), |_, _| {}).map(|_| ()))
    })
    .join()
    .unwrap();
    let Some(result) = outcome else {
        eprintln!("skipped: no seccomp here");
        return;
    };
    match result {
        Err(RtError::Uring(UringUnavailable::NoSyscall)) => {}
        // Already refused here for another reason: still a typed refusal.
        Err(RtError::Uring(other)) => eprintln!("refused before the filter: {other}"),
        other => panic!("expected a typed refusal, got {:?}", other.err()),
    }
    let message = RtError::Uring(UringUnavailable::NoSyscall).to_string();
    assert!(
        message.contains("io_uring") && message.contains("seccomp"),
        "{message}"
    );
}

#[test]
fn a_level_triggered_descriptor_is_reported_until_read_and_an_edge_triggered_once() {
    let mut ev = ring_or_skip!(uring_config());
    let level = registered_eventfd(&mut ev, Interest::READABLE, 1);
    let edge = registered_eventfd(&mut ev, Interest::READABLE.edge(), 2);
    post(&level);
    post(&edge);
    let limit = deadline(ev.stop_handle(), Duration::from_secs(10));
    let (mut level_reports, mut edge_reports) = (0, 0);
    ev.run(|cx, ready| {
        match ready.token {
            // Left unread twice: level-triggered, it is reported again; read the third time.
            1 => {
                level_reports += 1;
                if level_reports == 3 {
                    let mut buf = [0u8; 8];
                    cx.read(&level, &mut buf).unwrap();
                }
            }
            // Never read: edge-triggered, it is reported once.
            2 => edge_reports += 1,
            other => panic!("unexpected token {other}"),
        }
        if level_reports == 3 {
            cx.stop();
        }
    })
    .unwrap();
    // A while longer: the level-triggered descriptor, read, is not reported again, and the
    // edge-triggered one, never read, is not either.
    run_for(&mut ev, Duration::from_millis(50), |_, ready| {
        panic!("reported again: token {}", ready.token)
    });
    assert_eq!((level_reports, edge_reports), (3, 1));
    drop(limit);
}

#[test]
fn a_flush_sends_everything_queued_without_running_the_loop() {
    let mut ev = ring_or_skip!(uring_config());
    let rx = bind();
    let tx = bind();
    tx.connect(rx.local_addr().unwrap()).unwrap();
    let mut cx = ev.cx();
    let fd = cx.attach(&tx, 1, RingRecv::None).unwrap();
    for i in 0..50u32 {
        cx.send_ring(fd, &[&i.to_be_bytes()], &SendOptions::default())
            .unwrap();
    }
    assert_eq!(
        cx.ring_counters(fd).unwrap().sent,
        0,
        "queued, not yet sent"
    );
    assert!(cx.flush_ring(Duration::from_secs(5)).unwrap());
    assert_eq!(cx.ring_counters(fd).unwrap().sent, 50);
    rx.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    let mut buf = [0u8; 8];
    for i in 0..50u32 {
        assert_eq!(rx.recv(&mut buf).unwrap(), 4);
        assert_eq!(buf[..4], i.to_be_bytes());
    }
}

#[test]
fn a_descriptor_that_is_not_a_socket_is_read_and_written_through_the_ring() {
    let mut ev = ring_or_skip!(uring_config());
    let (read_end, write_end) = std::io::pipe().unwrap();
    let (rfd, wfd) = {
        let mut cx = ev.cx();
        let reads = RingRecv::Reads {
            buffers: 8,
            size: 64,
        };
        (
            cx.attach(&read_end, 1, reads).unwrap(),
            cx.attach(&write_end, 2, RingRecv::None).unwrap(),
        )
    };
    ev.cx()
        .send_ring(wfd, &[b"through ", b"the ring"], &SendOptions::default())
        .unwrap();
    let limit = deadline(ev.stop_handle(), Duration::from_secs(10));
    let mut got = Vec::new();
    ev.run(|cx, ready| {
        assert_eq!(ready.token, 1);
        cx.received(rfd, usize::MAX, |m| got.extend_from_slice(m.data));
        if got.len() >= 16 {
            cx.stop();
        }
    })
    .unwrap();
    assert_eq!(got, b"through the ring");
    // The writer gone (detached: the ring held its file), the reader meets end of file: its
    // receive stops for good, saying why, instead of being armed again in a loop.
    ev.cx().detach(wfd);
    drop(write_end);
    run_for(&mut ev, Duration::from_millis(100), |cx, _| {
        cx.received(rfd, usize::MAX, |m| assert!(m.data.is_empty()));
    });
    let counters = ev.cx().ring_counters(rfd).unwrap();
    assert_eq!(counters.recv_error, Some(0), "{counters:?}");
    assert!(counters.rearmed <= 8, "{counters:?}");
    drop(limit);
}

#[test]
fn a_busy_loop_that_never_idles_still_sends_within_a_pass() {
    let mut ev = ring_or_skip!(uring_config());
    let rx = bind();
    rx.set_nonblocking(true).unwrap();
    let tx = bind();
    tx.connect(rx.local_addr().unwrap()).unwrap();
    let fd = ev.cx().attach(&tx, 1, RingRecv::None).unwrap();
    let limit = deadline(ev.stop_handle(), Duration::from_secs(10));
    let (mut sent, mut arrived) = (false, false);
    let mut buf = [0u8; 16];
    ev.run_with(
        |_, _| {},
        |cx, _| {
            if !sent {
                cx.send_ring(fd, &[b"busy"], &SendOptions::default())
                    .unwrap();
                sent = true;
            } else if rx.recv(&mut buf).is_ok() {
                arrived = true;
                cx.stop();
            }
            // Always more work: the loop never idles, so never waits in the ring.
            true
        },
    )
    .unwrap();
    drop(limit);
    // Queued in one pass, submitted at the next pass's look: without that, a loop that
    // never idles would hold it until the submission queue filled, and it would not arrive.
    assert!(arrived, "the datagram left without the loop idling");
    assert!(ev.ring_stats().unwrap().enters >= 1);
}

/// Detaching one socket while another's datagrams wait in the completion queue leaves the
/// other's datagrams (and its receive) in place: the detach waits for its own receive's last
/// completion and hands every other completion on.
#[test]
fn a_detach_leaves_other_sockets_received_datagrams_alone() {
    let mut ev = ring_or_skip!(uring_config());
    let (a, b, client) = (bind(), bind(), bind());
    let fa = ev.cx().attach(&a, 1, datagrams(16, 2048)).unwrap();
    let fb = ev.cx().attach(&b, 2, datagrams(16, 2048)).unwrap();
    const N: usize = 5;
    for i in 0..N {
        client.send_to(&[i as u8], b.local_addr().unwrap()).unwrap();
    }
    client.send_to(b"a", a.local_addr().unwrap()).unwrap();
    // The datagrams are in the sockets' buffers before the receives are submitted (by the
    // detach's own submit): their completions wait in the queue as the detach reaps it.
    std::thread::sleep(Duration::from_millis(20));
    ev.cx().detach(fa);
    let mut got = Vec::new();
    run_for(&mut ev, Duration::from_millis(300), |cx, ready| {
        assert_eq!(ready.token, 2);
        cx.received(fb, usize::MAX, |m| got.push(m.data[0]));
        if got.len() == N {
            cx.stop();
        }
    });
    assert_eq!(got, (0..N as u8).collect::<Vec<_>>());
}

/// A write to a descriptor in blocking mode (a pipe no one reads, full) waits in the kernel
/// for room. The loop's waits do not count on its completion, so a stop still ends the run;
/// the write completes once the reader makes room.
#[test]
fn a_write_held_by_a_full_blocking_pipe_does_not_hold_the_loop() {
    use std::io::{Read, Write};
    use std::sync::mpsc;
    let (mut read_end, mut write_end) = std::io::pipe().unwrap();
    // The pipe's capacity (64 KiB with 4 KiB pages, more with larger ones): filled once
    // without blocking, and read out again.
    let flags = rustix::fs::fcntl_getfl(&write_end).unwrap();
    rustix::fs::fcntl_setfl(&write_end, flags | rustix::fs::OFlags::NONBLOCK).unwrap();
    let chunk = [7u8; 4096];
    let mut capacity = 0;
    while let Ok(n) = write_end.write(&chunk) {
        capacity += n;
    }
    rustix::fs::fcntl_setfl(&write_end, flags).unwrap();
    let mut buf = vec![0u8; capacity];
    read_end.read_exact(&mut buf).unwrap();
    // Eight chunks more than it holds: the last writes wait for room.
    let chunks = capacity.div_ceil(4096) + 8;
    let (stop_tx, stop_rx) = mpsc::channel::<Option<StopHandle>>();
    let (done_tx, done_rx) = mpsc::channel::<u64>();
    let looping = std::thread::spawn(move || {
        let Some(mut ev) = ring_loop(uring_config()) else {
            stop_tx.send(None).unwrap();
            return;
        };
        let fd = ev.cx().attach(&write_end, 2, RingRecv::None).unwrap();
        for _ in 0..chunks {
            ev.cx()
                .send_ring(fd, &[&chunk], &SendOptions::default())
                .unwrap();
        }
        stop_tx.send(Some(ev.stop_handle())).unwrap();
        ev.run(|_, _| {}).unwrap();
        done_tx.send(0).unwrap();
        // What waited leaves once the reader makes room.
        assert!(ev.cx().flush_ring(Duration::from_secs(10)).unwrap());
        done_tx
            .send(ev.cx().ring_counters(fd).unwrap().sent)
            .unwrap();
    });
    let Some(stop) = stop_rx.recv().unwrap() else {
        return;
    };
    std::thread::sleep(Duration::from_millis(50));
    stop.stop();
    let stopped = done_rx.recv_timeout(Duration::from_secs(10));
    // Make room either way, so that a failing run ends too.
    let mut read = 0;
    while read < chunks * 4096 {
        read += read_end.read(&mut buf).unwrap();
    }
    assert!(
        stopped.is_ok(),
        "a stop did not end the run while a write waited for room"
    );
    assert_eq!(done_rx.recv().unwrap(), chunks as u64);
    looping.join().unwrap();
}

/// A send the kernel refuses is counted with its bytes, apart from those sent, so that a
/// caller that counted bytes as it queued them can take out those that did not leave.
#[test]
fn a_refused_send_is_counted_with_its_bytes() {
    let mut ev = ring_or_skip!(uring_config());
    // Connected to a port nothing listens on: loopback answers a datagram with a port
    // unreachable, and the socket's next send fails with it. The answer can be late (a
    // loaded host's softirqs) or withheld for a moment (the kernel's ICMP rate limit), so
    // the test sends until one is refused.
    // (On 127.0.0.2, where no other test binds the port it leaves free.)
    let closed = UdpSocket::bind("127.0.0.2:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let tx = bind();
    tx.connect(closed).unwrap();
    const LEN: u64 = 300;
    let mut cx = ev.cx();
    let fd = cx.attach(&tx, 1, RingRecv::None).unwrap();
    let give_up = Instant::now() + Duration::from_secs(10);
    let mut queued = 0;
    loop {
        cx.send_ring(fd, &[&[0u8; LEN as usize]], &SendOptions::default())
            .unwrap();
        queued += 1;
        assert!(cx.flush_ring(Duration::from_secs(5)).unwrap());
        let c = cx.ring_counters(fd).unwrap();
        if c.refused > 0 || Instant::now() > give_up {
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let c = cx.ring_counters(fd).unwrap();
    assert!(c.refused > 0, "no send was refused in 10 s: {c:?}");
    assert_eq!(c.sent + c.refused, queued, "{c:?}");
    assert_eq!(
        (c.sent_bytes, c.refused_bytes),
        (c.sent * LEN, c.refused * LEN),
        "each send counted whole, on its side"
    );
}

/// Sends queued on a descriptor that is then detached leave on it, not on the next
/// descriptor attached at its index, and not lost.
#[test]
fn sends_queued_before_a_detach_leave_on_their_own_socket() {
    let mut ev = ring_or_skip!(uring_config());
    let (rx_a, rx_b) = (bind(), bind());
    let (tx_a, tx_b) = (bind(), bind());
    tx_a.connect(rx_a.local_addr().unwrap()).unwrap();
    tx_b.connect(rx_b.local_addr().unwrap()).unwrap();
    let mut cx = ev.cx();
    let a = cx.attach(&tx_a, 1, RingRecv::None).unwrap();
    for i in 0..5u32 {
        cx.send_ring(a, &[&i.to_be_bytes()], &SendOptions::default())
            .unwrap();
    }
    // Its counters as it leaves: the five submitted at the detach and sent.
    let left = cx.detach(a).unwrap();
    assert_eq!((left.sent, left.refused), (5, 0), "{left:?}");
    let b = cx.attach(&tx_b, 2, RingRecv::None).unwrap();
    cx.send_ring(b, &[b"b"], &SendOptions::default()).unwrap();
    assert!(cx.flush_ring(Duration::from_secs(5)).unwrap());
    let mut buf = [0u8; 8];
    rx_a.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    for i in 0..5u32 {
        assert_eq!(rx_a.recv(&mut buf).unwrap(), 4);
        assert_eq!(buf[..4], i.to_be_bytes());
    }
    rx_b.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    assert_eq!(rx_b.recv(&mut buf).unwrap(), 1);
    assert_eq!(&buf[..1], b"b");
    rx_b.set_nonblocking(true).unwrap();
    assert!(
        rx_b.recv(&mut buf).is_err(),
        "a datagram of A's went out on B"
    );
}

/// A receive buffer too large to describe to the kernel (with the room for its header) is
/// refused with a clear error, not wrapped into a small one.
#[test]
fn a_receive_buffer_too_large_is_refused() {
    let mut ev = ring_or_skip!(uring_config());
    let socket = bind();
    let huge = RingRecv::Datagrams {
        buffers: 1,
        size: u32::MAX,
    };
    let err = ev.cx().attach(&socket, 1, huge).unwrap_err();
    assert!(err.to_string().contains("too large"), "{err}");
    // The index it would have taken is free for the next attachment.
    let fd = ev.cx().attach(&socket, 1, RingRecv::None).unwrap();
    assert!(ev.cx().ring_counters(fd).is_some());
}
