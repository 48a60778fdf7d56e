//! The loop's wait with an io_uring backend: the ring's look or wait, every completion
//! reaped as a trigger state, and the readiness found handed out as epoll's events are.

use std::os::fd::{AsRawFd, OwnedFd};
use std::time::Duration;

use rustix::event::epoll;
use softtimer::Clock;

use super::{EPOLL_TOKEN, EventLoop, STOP_TOKEN, TIMERFD_TOKEN};
use crate::config::LoopConfig;
use crate::error::RtError;
use crate::timerfd::timespec;
use crate::uring::{Ring, RingStats};

/// The ring of a loop whose backend is io_uring (`None` for epoll), watching the stop
/// eventfd, the baseline's timerfd if there is one, and the epoll set the loop's descriptors
/// are registered in.
pub(super) fn build_ring(
    config: &LoopConfig,
    stop_fd: &OwnedFd,
    timerfd: Option<&OwnedFd>,
    epoll: &OwnedFd,
) -> Result<Option<Box<Ring>>, RtError> {
    if !config.io_backend.is_uring() {
        return Ok(None);
    }
    let sqpoll = config.io_backend == crate::IoBackend::UringSqpoll;
    let mut ring = Ring::new(config.uring, sqpoll)?;
    ring.watch(stop_fd.as_raw_fd(), true, false, true, STOP_TOKEN)
        .map_err(RtError::io("a poll of the stop eventfd"))?;
    if let Some(fd) = timerfd {
        ring.watch(fd.as_raw_fd(), true, false, true, TIMERFD_TOKEN)
            .map_err(RtError::io("a poll of the baseline's timerfd"))?;
    }
    ring.watch_once(epoll.as_raw_fd(), EPOLL_TOKEN)
        .map_err(RtError::io("a poll of the epoll set"))?;
    Ok(Some(Box::new(ring)))
}

/// Events taken from the epoll set at once.
const EPOLL_BATCH: usize = 64;

impl<E: Send + 'static, C: Clock + Clone + Send + Sync + 'static> EventLoop<E, C> {
    /// What the loop's ring did (`None`: the epoll backend).
    pub fn ring_stats(&self) -> Option<RingStats> {
        self.core.ring.as_ref().map(|r| r.stats())
    }

    /// The loop's I/O backend.
    pub fn io_backend(&self) -> crate::IoBackend {
        match &self.core.ring {
            None => crate::IoBackend::Epoll,
            Some(ring) if ring.sqpoll() => crate::IoBackend::UringSqpoll,
            Some(_) => crate::IoBackend::Uring,
        }
    }

    pub(super) fn ring_wait(&mut self, timeout: Option<Duration>) -> Result<(), RtError> {
        let Some(ring) = self.core.ring.as_deref_mut() else {
            return Ok(());
        };
        match timeout {
            Some(Duration::ZERO) => ring.look().map(drop),
            timeout => ring.wait(timeout),
        }
        .map_err(RtError::io("io_uring_enter"))?;
        self.core.reap_ring();
        let mut ready = std::mem::take(&mut self.ring_ready);
        if let Some(ring) = self.core.ring.as_deref_mut() {
            ring.take_ready(&mut ready);
        }
        for r in ready.drain(..) {
            if r.token == EPOLL_TOKEN {
                // Descriptors a LoopHandle registered in the epoll set: take its events,
                // and watch the set again (a one-shot poll, so that what stays ready is
                // reported again, as epoll reports it).
                self.epoll_events()?;
                continue;
            }
            let mut flags = epoll::EventFlags::empty();
            flags.set(epoll::EventFlags::IN, r.readable);
            flags.set(epoll::EventFlags::OUT, r.writable);
            // A hang-up as a hang-up, an error alone as an error (`Ready::new` tells them
            // apart again).
            flags.set(epoll::EventFlags::RDHUP, r.hung_up);
            flags.set(epoll::EventFlags::ERR, r.closed && !r.hung_up);
            self.events.push(epoll::Event {
                flags,
                data: epoll::EventData::new_u64(r.token),
            });
        }
        self.ring_ready = ready;
        Ok(())
    }

    /// With an io_uring backend: the epoll set's events, after the ring's poll of it fired.
    fn epoll_events(&mut self) -> Result<(), RtError> {
        // Appended to what the ring's reap put there: epoll writes into the spare capacity.
        self.events.reserve(EPOLL_BATCH);
        match epoll::wait(
            &*self.core.epoll,
            rustix::buffer::spare_capacity(&mut self.events),
            Some(&timespec(Duration::ZERO)),
        ) {
            Ok(_) | Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(("epoll_wait", e).into()),
        }
        if let Some(ring) = self.core.ring.as_deref_mut() {
            ring.watch_once(self.core.epoll.as_raw_fd(), EPOLL_TOKEN)
                .map_err(RtError::io("a poll of the epoll set"))?;
        }
        Ok(())
    }
}
