//! `pace --io uring` and `--io uring-sqpoll`: the soft pacer's datagrams leave through the
//! loop's io_uring instead of a `send` each.
//!
//! The soft-timer handler may run on the loop's backstop thread, which has no ring, so it only
//! stamps the flow's datagram, queues its header and schedules the flow's next: the loop takes
//! the queue at its next pass and copies each datagram into a slot of the ring, and they all
//! leave with the loop's next entry into the ring (the wait it idles in, usually: one
//! `io_uring_enter` carries the pass's sends and the wait). Every send completion reaped is a
//! trigger state.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, Result};
use softtimer::{Fired, SoftTimers, Span};
use softtimer_net::udp::{PacketHeader, realtime_ns};
use softtimer_rt::{EventLoop, LoopConfig, RingRecv, SendOptions};

use super::Run;
use super::sender::{BATCH, Flow, Sender, start_spread, stop_after};

/// A datagram the handler made due, for the loop to send: its header, and what the counters
/// take when it leaves (its send time, and the gap since its flow's previous send).
struct DueDatagram {
    header: [u8; PacketHeader::LEN],
    sent_ns: u64,
    gap_ns: Option<u64>,
}

type Due = Mutex<Vec<DueDatagram>>;

/// Soft timers with the sends through the ring of `options.io`.
pub(super) fn run_ring(run: Run<'_>) -> Result<super::sender::LoopRun> {
    let (options, plan, sender, flows) = (run.options, run.plan, run.sender, run.flows);
    let due: Arc<Due> = Arc::new(Mutex::new(Vec::with_capacity(BATCH)));
    let (s, queue) = (Arc::clone(sender), Arc::clone(&due));
    let handler = move |timers: &mut SoftTimers<Flow>, fired: Fired<Flow>| {
        let mut flow = fired.event;
        let now = fired.now;
        let bytes = s.payload.len() as u64 + PacketHeader::LEN as u64;
        // Counted as sent when the loop hands it to the ring, not here: a handler the
        // backstop thread runs after the loop's last pass queues a datagram that never leaves.
        let sent_ns = realtime_ns();
        let gap_ns = flow
            .last_sent
            .map(|last| now.saturating_since(last).as_nanos(s.hz));
        let header = Sender::header(&flow, sent_ns);
        flow.seq += 1;
        flow.last_sent = Some(now);
        queue
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(DueDatagram {
                header,
                sent_ns,
                gap_ns,
            });
        let next = flow.pacer.on_sent(now, bytes);
        let _ = timers.schedule_at(next, flow);
    };
    let config = LoopConfig {
        io_backend: options.io,
        ..plan.loop_config(options.flows)
    };
    let mut ev: EventLoop<Flow> = EventLoop::new(config, handler)
        .with_context(|| format!("--io {}: the event loop", options.io))?;
    let socket = {
        let mut cx = ev.cx();
        let socket = cx
            .attach(&sender.socket, 1, RingRecv::None)
            .context("attaching the sending socket to the ring")?;
        let per_flow_interval = Span::from_duration(plan.period * options.flows, sender.hz);
        start_spread(&mut cx, flows, per_flow_interval)?;
        socket
    };
    let stopper = stop_after(&mut ev, options.duration);
    let mut sending = Vec::with_capacity(BATCH);
    // Sends what the handler queued: from each pass of the loop, and once more after it
    // stops (what fired at its last trigger states was counted as sent, so it leaves). A
    // datagram the ring could not take (no slot freed within a second, or the ring's own
    // call failed) is a refused send, as one the kernel refuses is on the other paths: the
    // run goes on and its report says how many, with the last error's errno.
    let send_due = |cx: &mut softtimer_rt::LoopCx<'_, Flow>, sending: &mut Vec<DueDatagram>| {
        std::mem::swap(&mut *due.lock().unwrap_or_else(|e| e.into_inner()), sending);
        for d in sending.drain(..) {
            let parts: [&[u8]; 2] = [&d.header, &sender.payload];
            match cx.send_ring(socket, &parts, &SendOptions::default()) {
                Ok(()) => sender.counters.sent(d.sent_ns, d.gap_ns),
                Err(e) => sender.counters.refused(errno_of(&e)),
            }
        }
    };
    let result = ev.run_with(
        |_, _| {},
        |cx, _| {
            send_due(cx, &mut sending);
            false
        },
    );
    let _ = stopper.join();
    result?;
    let flushed = {
        let mut cx = ev.cx();
        send_due(&mut cx, &mut sending);
        // The ring cancels what is in flight when the loop goes: the last sends complete
        // first.
        cx.flush_ring(Duration::from_secs(1))
    };
    let counters = ev.cx().ring_counters(socket).unwrap_or_default();
    sender.counters.unsent(counters.refused, None);
    // Sends the kernel has not confirmed (the wait for them failed, or outlasted its
    // limit) are not counted as sent; the run's report stands, and says why.
    if !matches!(flushed, Ok(true)) {
        let unconfirmed = sender.counters.packets().saturating_sub(counters.sent);
        let errno = match &flushed {
            Err(e) => errno_of(e),
            Ok(_) => Some(rustix::io::Errno::TIME.raw_os_error()),
        };
        sender.counters.unsent(unconfirmed, errno);
        let why = match &flushed {
            Err(e) => e.to_string(),
            Ok(_) => "not all completed within a second".into(),
        };
        eprintln!("pace: the last sends through the ring: {why}; {unconfirmed} counted as unsent");
    }
    // The ring's system calls carry the sends and the waits alike: all count.
    let enters = ev.ring_stats().map_or(0, |s| s.enters);
    sender.counters.calls(enters);
    Ok(super::sender::LoopRun::of(&ev, plan))
}

/// The `errno` of a failed send through the ring, where it has one.
fn errno_of(e: &softtimer_rt::RtError) -> Option<i32> {
    std::error::Error::source(e)
        .and_then(|s| s.downcast_ref::<std::io::Error>())
        .and_then(std::io::Error::raw_os_error)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_send_through_the_ring_keeps_its_errno_where_it_has_one() {
        let io = |source| softtimer_rt::RtError::Io {
            what: "a send through the ring",
            source,
        };
        let no_buffers = io(std::io::Error::from_raw_os_error(
            rustix::io::Errno::NOBUFS.raw_os_error(),
        ));
        assert_eq!(
            errno_of(&no_buffers),
            Some(rustix::io::Errno::NOBUFS.raw_os_error())
        );
        // No slot freed within a second: the ring says EAGAIN.
        let again = rustix::io::Errno::AGAIN.raw_os_error();
        let no_slot = io(std::io::Error::from_raw_os_error(again));
        assert_eq!(errno_of(&no_slot), Some(again));
        // An error of a kind without an errno: none is made up.
        let kind = io(std::io::ErrorKind::Other.into());
        assert_eq!(errno_of(&kind), None);
        assert_eq!(errno_of(&softtimer_rt::RtError::NoRing), None);
    }
}
