//! A set of descriptors the application polls on its own schedule: the user-space form of a
//! network interface whose interrupts can be switched off (soft-timer network polling).

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use rustix::event::epoll;
use softtimer::{Clock, TriggerSource};

use crate::cx::{Interest, LoopCx, Ready};
use crate::error::RtError;

/// Descriptors kept in an epoll instance of their own, so that the loop sees them only when
/// the application wants an "interrupt".
///
/// Register the set itself with the loop ([`LoopCx::register`], it is [`AsFd`]) and a
/// readiness event of any member wakes the loop, once per pass, under the set's token: that
/// is the interrupt. Deregister it ([`LoopCx::deregister`]) and the members' readiness no
/// longer reaches the loop; the application takes it with [`PollSet::poll`], a non-blocking
/// `epoll_wait` on the set, when it chooses (at a soft-timer event): that is polling. A
/// member's token is the application's own, as with the loop.
///
/// ```
/// use std::net::UdpSocket;
/// use softtimer_rt::{EventLoop, Interest, LoopConfig, PollSet};
///
/// let mut ev: EventLoop<()> = EventLoop::new(LoopConfig::default(), |_, _| {}).unwrap();
/// let mut set = PollSet::new(64).unwrap();
/// let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
/// socket.set_nonblocking(true).unwrap();
/// set.add(&socket, Interest::READABLE, 7).unwrap();
/// UdpSocket::bind("127.0.0.1:0")
///     .unwrap()
///     .send_to(b"hi", socket.local_addr().unwrap())
///     .unwrap();
/// std::thread::sleep(std::time::Duration::from_millis(10));
/// // Not registered with the loop: only a poll sees the datagram.
/// let mut ready = Vec::new();
/// assert_eq!(set.poll(&mut ev.cx(), &mut ready).unwrap(), 1);
/// assert_eq!(ready[0].token, 7);
/// ```
pub struct PollSet {
    epoll: OwnedFd,
    events: Vec<epoll::Event>,
}

impl PollSet {
    /// An empty set; one poll reports at most `batch` ready members (at least 1).
    pub fn new(batch: usize) -> Result<PollSet, RtError> {
        let epoll = epoll::create(epoll::CreateFlags::CLOEXEC)
            .map_err(|e| RtError::from(("epoll_create", e)))?;
        Ok(PollSet {
            epoll,
            events: Vec::with_capacity(batch.max(1)),
        })
    }

    /// Adds `fd`, watched for `interest` (level-triggered), reported as `token`.
    pub fn add(&self, fd: impl AsFd, interest: Interest, token: u64) -> Result<(), RtError> {
        self.watch(fd, interest, token, true)
    }

    /// Changes what member `fd` is watched for.
    pub fn modify(&self, fd: impl AsFd, interest: Interest, token: u64) -> Result<(), RtError> {
        self.watch(fd, interest, token, false)
    }

    /// Removes member `fd`.
    pub fn delete(&self, fd: impl AsFd) -> Result<(), RtError> {
        epoll::delete(&self.epoll, fd).map_err(|e| RtError::from(("epoll_ctl", e)))
    }

    fn watch(
        &self,
        fd: impl AsFd,
        interest: Interest,
        token: u64,
        add: bool,
    ) -> Result<(), RtError> {
        use std::os::fd::AsRawFd;
        let raw = fd.as_fd().as_raw_fd();
        let (data, flags) = (
            epoll::EventData::new_u64(token),
            interest.flags() | epoll::EventFlags::RDHUP,
        );
        let result = if add {
            epoll::add(&self.epoll, fd, data, flags)
        } else {
            epoll::modify(&self.epoll, fd, data, flags)
        };
        result.map_err(|e| RtError::Register {
            fd: raw,
            source: e.into(),
        })
    }

    /// Polls the set without blocking: replaces `ready` with the members ready now (at most
    /// the batch size) and returns how many. A trigger state tagged `syscall` follows.
    pub fn poll<E, C: Clock>(
        &mut self,
        cx: &mut LoopCx<'_, E, C>,
        ready: &mut Vec<Ready>,
    ) -> io::Result<usize> {
        self.events.clear();
        let result = epoll::wait(
            &self.epoll,
            rustix::buffer::spare_capacity(&mut self.events),
            Some(&rustix::time::Timespec {
                tv_sec: 0,
                tv_nsec: 0,
            }),
        );
        cx.trigger(TriggerSource::Syscall);
        ready.clear();
        match result {
            Ok(_) | Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
        ready.extend(
            self.events
                .iter()
                .map(|event| Ready::new(event.data.u64(), *event)),
        );
        Ok(ready.len())
    }
}

impl AsFd for PollSet {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.epoll.as_fd()
    }
}
