//! The io_uring backend of the loop ([`IoBackend::Uring`](crate::IoBackend::Uring)): the
//! bookkeeping above the ring's system interface (`sys.rs`, the backend's only `unsafe`
//! code); `types.rs` holds its public options, counters and errors, `msg.rs` reads what
//! the kernel writes before a received datagram, and `complete.rs` takes each completion in.
//!
//! What it keeps: the descriptors the application registered for readiness (each a
//! `POLL_ADD`: multishot when edge-triggered, one-shot armed again after each report when
//! level-triggered), the descriptors attached for I/O through the ring (each in the
//! fixed-file table, with a multishot receive into a provided-buffer ring if asked, and its
//! sends in slots the ring owns), and what the loop reads after a reap: the readiness to hand
//! out and the datagrams received. Sends are queued and submitted at the loop's next entry
//! into the ring: the wait when it idles next (one `io_uring_enter` for the sends and the
//! wait), else the next pass's look. Each completion reaped is a trigger state.

mod complete;
mod msg;
mod sys;
mod types;

use std::collections::VecDeque;
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::time::Duration;

use softtimer::TriggerSource;

use crate::cx::Ready;
use msg::{parse_control, parse_sockaddr};
pub use sys::SendOptions;
use sys::{Completion, Kind, RECV_CONTROL, RECVMSG_OUT, RingSys, user_data};
pub use types::{Received, RingCounters, RingRecv, RingStats, UringOptions, UringUnavailable};

/// A descriptor attached to the loop's ring ([`LoopCx::attach`](crate::LoopCx::attach)).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RingFd {
    index: u32,
    generation: u32,
}

/// A descriptor registered for readiness.
struct PollEntry {
    fd: RawFd,
    token: u64,
    events: u32,
    generation: u32,
    active: bool,
    /// Multishot (watched until removed: a report per wake-up, as `EPOLLET`), or one-shot.
    multi: bool,
    /// A one-shot poll the ring arms again after each report (level-triggered, as epoll
    /// without `EPOLLET`: armed while the descriptor is still ready, it reports again);
    /// otherwise its owner arms it.
    level: bool,
}

/// A multishot receive's state.
struct RecvState {
    group: u16,
    socket: bool,
    armed: bool,
    /// Times in a row the receive ended without a message (an error, end of file): past
    /// [`RECV_FAILURES`] it is not armed again, instead of failing in a loop.
    failures: u32,
    /// Buffers filled and not yet taken: (buffer id, bytes).
    queue: VecDeque<(u16, u32)>,
}

/// Ends of a receive in a row without a message after which it stays unarmed.
const RECV_FAILURES: u32 = 8;

/// A descriptor attached for I/O through the ring (its fixed-file index is its index).
struct Attached {
    token: u64,
    socket: bool,
    /// Its writes complete when submitted: a socket (sent with `MSG_DONTWAIT`) or a
    /// descriptor in non-blocking mode. A blocking one's write may wait in the kernel for
    /// room, for as long as no one reads.
    prompt: bool,
    generation: u32,
    active: bool,
    /// Detached while sends naming its index were still in the submission queue (with
    /// SQPOLL, or a submit refused for a full completion queue): the index keeps naming its
    /// file, and is not given to another descriptor, until the kernel has taken them.
    retiring: bool,
    recv: Option<RecvState>,
    /// Slots refused with `EAGAIN`, in order, waiting for the socket to have room.
    waiting: VecDeque<u32>,
    writable_armed: bool,
    counters: RingCounters,
}

impl Attached {
    /// Whether this is still the attachment of `generation`.
    #[inline]
    fn is_live(&self, generation: u32) -> bool {
        self.active && self.generation == generation
    }
}

/// The attachment at `index` in `attached`, if it is still the one of `generation` (a
/// completion for a detached descriptor, or for an earlier one at its index, finds none).
#[inline]
fn live_mut(attached: &mut [Attached], index: u32, generation: u32) -> Option<&mut Attached> {
    attached
        .get_mut(index as usize)
        .filter(|a| a.is_live(generation))
}

/// A send slot's owner and what it carries.
#[derive(Clone, Copy, Default)]
struct SlotUse {
    attached: u32,
    generation: u32,
    datagrams: u32,
    /// The bytes queued (every part of the send).
    bytes: u32,
    /// Submitted to a descriptor whose writes complete at once (counted in
    /// `Ring::prompt_outstanding`).
    prompt: bool,
}

/// The loop's ring and its bookkeeping.
pub(crate) struct Ring {
    sys: RingSys,
    options: UringOptions,
    polls: Vec<PollEntry>,
    attached: Vec<Attached>,
    free_slots: Vec<u32>,
    slot_use: Vec<SlotUse>,
    /// Sends queued or submitted whose completion is not reaped.
    outstanding: usize,
    /// Those of them that post their completion when submitted (to a socket, or to a
    /// descriptor in non-blocking mode), which a wait counts on top of what it waits for. A
    /// write to a blocking descriptor is not counted: it may complete only when its reader
    /// makes room, and a wait that counted on it would hold the loop (and a stop) till then.
    prompt_outstanding: usize,
    /// Readiness to hand out, one per token (flags merged).
    ready: Vec<Ready>,
    /// Receives to arm again (their multishot ended).
    rearm: Vec<u32>,
    /// Entries were queued at the last look and stayed: the next look submits them.
    held: bool,
    /// Indices of [`Attached::retiring`] attachments.
    retiring: Vec<u32>,
    completions: u64,
    slot_waits: u64,
}

fn poll_events(readable: bool, writable: bool) -> u32 {
    let mut events = (libc::POLLRDHUP | libc::POLLERR | libc::POLLHUP) as u32;
    if readable {
        events |= libc::POLLIN as u32;
    }
    if writable {
        events |= libc::POLLOUT as u32;
    }
    events
}

impl Ring {
    pub(crate) fn new(mut options: UringOptions, sqpoll: bool) -> Result<Ring, UringUnavailable> {
        let entries = options.entries.clamp(8, 32768).next_power_of_two();
        let slots = options.send_slots.clamp(1, 1 << 20);
        // An attachment's index names its provided-buffer group too, a 16-bit id.
        let files = options.files.clamp(1, 1 << 16);
        options.files = files;
        let sys = RingSys::new(entries, slots, sqpoll.then_some(options.sqpoll_idle), files)?;
        Ok(Ring {
            sys,
            options,
            polls: Vec::new(),
            attached: Vec::new(),
            free_slots: (0..slots as u32).rev().collect(),
            slot_use: vec![SlotUse::default(); slots],
            outstanding: 0,
            prompt_outstanding: 0,
            ready: Vec::new(),
            rearm: Vec::new(),
            held: false,
            retiring: Vec::new(),
            completions: 0,
            slot_waits: 0,
        })
    }

    pub(crate) fn stats(&self) -> RingStats {
        RingStats {
            enters: self.sys.enters,
            completions: self.completions,
            slot_waits: self.slot_waits,
        }
    }

    /// Whether a kernel thread polls the submission queue.
    pub(crate) fn sqpoll(&self) -> bool {
        self.sys.sqpoll()
    }

    /// Watches `fd`, reported as `token`: edge-triggered with a multishot poll (a report
    /// per wake-up), or level-triggered with a one-shot poll the ring arms again after each
    /// report (submitted at the loop's next entry into the ring, after the report is handled).
    pub(crate) fn watch(
        &mut self,
        fd: RawFd,
        readable: bool,
        writable: bool,
        edge: bool,
        token: u64,
    ) -> io::Result<()> {
        self.unwatch(fd)?;
        self.arm_poll(fd, poll_events(readable, writable), token, edge)?;
        if let Some(p) = self.polls.iter_mut().rfind(|p| p.active && p.fd == fd) {
            p.level = !edge;
        }
        Ok(())
    }

    /// Watches `fd` for reading with a one-shot poll, reported as `token` once; the caller
    /// calls this again after it has read (a poll armed while `fd` is still readable
    /// completes at once: epoll's level-triggered report).
    pub(crate) fn watch_once(&mut self, fd: RawFd, token: u64) -> io::Result<()> {
        let events = poll_events(true, false);
        if let Some(index) = self.polls.iter().position(|p| p.active && p.fd == fd) {
            let p = &self.polls[index];
            let data = user_data(Kind::Poll, index as u32, p.generation);
            return self.sys.poll(fd, events, false, data);
        }
        self.arm_poll(fd, events, token, false)
    }

    fn arm_poll(&mut self, fd: RawFd, events: u32, token: u64, multi: bool) -> io::Result<()> {
        let index = match self.polls.iter().position(|p| !p.active) {
            Some(i) => i,
            None => {
                self.polls.push(PollEntry {
                    fd,
                    token,
                    events,
                    generation: 0,
                    active: false,
                    multi,
                    level: false,
                });
                self.polls.len() - 1
            }
        };
        let p = &mut self.polls[index];
        p.generation = p.generation.wrapping_add(1);
        (p.fd, p.token, p.events, p.active, p.multi, p.level) =
            (fd, token, events, true, multi, false);
        let data = user_data(Kind::Poll, index as u32, p.generation);
        self.sys.poll(fd, events, multi, data)
    }

    /// Stops watching `fd` (nothing if it was not watched).
    pub(crate) fn unwatch(&mut self, fd: RawFd) -> io::Result<()> {
        if let Some(index) = self.polls.iter().position(|p| p.active && p.fd == fd) {
            let p = &mut self.polls[index];
            p.active = false;
            let target = user_data(Kind::Poll, index as u32, p.generation);
            // Its readiness already reaped is not handed out any more.
            let token = p.token;
            self.ready.retain(|r| r.token != token);
            self.sys.poll_remove(target)?;
        }
        Ok(())
    }

    /// Attaches `fd` for I/O through the ring, reported as `token`.
    pub(crate) fn attach(
        &mut self,
        fd: std::os::fd::BorrowedFd<'_>,
        token: u64,
        recv: RingRecv,
    ) -> Result<RingFd, io::Error> {
        let socket = rustix::net::sockopt::socket_type(fd).is_ok();
        let prompt = socket
            || rustix::fs::fcntl_getfl(fd).is_ok_and(|f| f.contains(rustix::fs::OFlags::NONBLOCK));
        let fd = fd.as_raw_fd();
        self.settle_retiring();
        // An index whose buffer group is still registered (its receive's cancel never
        // completed at a detach) is not given out again: its group id is the index's.
        let sys = &self.sys;
        let index = match self
            .attached
            .iter()
            .enumerate()
            .position(|(i, a)| !a.active && !a.retiring && !sys.has_group(i as u16))
        {
            Some(i) => i,
            None if self.attached.len() < self.options.files as usize => {
                self.attached.push(Attached {
                    token,
                    socket,
                    prompt,
                    generation: 0,
                    active: false,
                    retiring: false,
                    recv: None,
                    waiting: VecDeque::new(),
                    writable_armed: false,
                    counters: RingCounters::default(),
                });
                self.attached.len() - 1
            }
            None => return Err(io::Error::from_raw_os_error(libc::EMFILE)),
        };
        self.sys.set_file(index as u32, fd)?;
        let group = index as u16;
        let recv = match recv {
            RingRecv::None => None,
            RingRecv::Datagrams { buffers, size } | RingRecv::Reads { buffers, size } => {
                let datagrams = matches!(recv, RingRecv::Datagrams { .. });
                let buffers = buffers.clamp(1, 32768).next_power_of_two();
                let header = if datagrams {
                    (RECVMSG_OUT + std::mem::size_of::<libc::sockaddr_storage>() + RECV_CONTROL)
                        as u32
                } else {
                    0
                };
                // Checked: a wrapped size would give the kernel buffers too small for what
                // it is told they hold.
                let Some(size) = size.max(1).checked_add(header) else {
                    self.sys.clear_file(index as u32);
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidInput,
                        format!("a receive buffer of {size} bytes is too large"),
                    ));
                };
                if let Err(e) = self.sys.add_group(group, buffers, size) {
                    self.sys.clear_file(index as u32);
                    return Err(e);
                }
                Some(RecvState {
                    group,
                    socket: datagrams,
                    armed: false,
                    failures: 0,
                    queue: VecDeque::new(),
                })
            }
        };
        let a = &mut self.attached[index];
        a.generation = a.generation.wrapping_add(1);
        (a.token, a.socket, a.prompt, a.active, a.recv) = (token, socket, prompt, true, recv);
        a.waiting.clear();
        a.writable_armed = false;
        a.counters = RingCounters::default();
        let handle = RingFd {
            index: index as u32,
            generation: a.generation,
        };
        if self.attached[index].recv.is_some() {
            self.arm_recv(index as u32)?;
        }
        Ok(handle)
    }

    fn live(&self, fd: RingFd) -> Option<usize> {
        let a = self.attached.get(fd.index as usize)?;
        a.is_live(fd.generation).then_some(fd.index as usize)
    }

    fn arm_recv(&mut self, index: u32) -> io::Result<()> {
        let a = &mut self.attached[index as usize];
        let data = user_data(Kind::Recv, index, a.generation);
        if let Some(r) = &mut a.recv
            && !r.armed
        {
            r.armed = true;
            let (group, socket) = (r.group, r.socket);
            return self.sys.recv(index, group, socket, data);
        }
        Ok(())
    }

    /// Detaches: cancels its receive, drops what it received and did not take, and frees its
    /// fixed-file entry. Sends already queued are submitted first and still leave (a send
    /// the kernel takes up holds the file); those waiting for room are counted refused.
    /// Returns the descriptor's counters as it leaves (a write to a descriptor in blocking
    /// mode still waiting in the kernel is not in them).
    pub(crate) fn detach(&mut self, fd: RingFd) -> Option<RingCounters> {
        let index = self.live(fd)?;
        // Queued sends name the file by its index: submitted now, while the index still
        // names this file; the index is cleared (and given to another descriptor) only once
        // the kernel has taken them all (`retire_file`).
        let _ = self.submit();
        // Their completions (a socket's come at once) taken in while it is still attached,
        // so that its counters have them, and one refused for room waits with the others.
        self.reap_all(&mut |_| {});
        let a = &mut self.attached[index];
        a.active = false;
        let (generation, token) = (a.generation, a.token);
        // Nothing more is reported for it (what that reap found included).
        self.ready.retain(|r| r.token != token);
        let a = &mut self.attached[index];
        if std::mem::take(&mut a.writable_armed) {
            // A poll for room that may never come would hold the file open.
            let _ = self
                .sys
                .cancel(user_data(Kind::Writable, index as u32, generation));
        }
        let waiting: Vec<u32> = a.waiting.drain(..).collect();
        let recv = a.recv.take();
        for slot in waiting {
            let u = self.slot_use[slot as usize];
            self.attached[index]
                .counters
                .count_refused(u.datagrams, u.bytes);
            self.free_slots.push(slot);
        }
        if let Some(r) = recv {
            if r.armed {
                let _ = self
                    .sys
                    .cancel(user_data(Kind::Recv, index as u32, generation));
                // The group goes once the receive's last completion is reaped: it may
                // still write into it until then.
                let _ = self.sys.submit();
                let mut last = false;
                let mut scratch = [Completion {
                    data: 0,
                    result: 0,
                    flags: 0,
                }; 32];
                let mine = user_data(Kind::Recv, index as u32, generation);
                for _ in 0..100 {
                    let n = self.sys.reap(&mut scratch);
                    for c in &scratch[..n] {
                        if c.data == mine {
                            // What this receive still took is dropped with its group.
                            last |= !c.more();
                        } else {
                            // Everyone else's completions, other descriptors' receives
                            // included, are handled as the loop would (their datagrams
                            // queued, their buffers and send slots accounted for).
                            self.complete(*c);
                        }
                    }
                    if last {
                        break;
                    }
                    let _ = self.sys.wait(1, Some(Duration::from_millis(10)), None);
                }
                if !last {
                    // Never freed under the kernel: the group stays registered (its memory
                    // goes with the ring, which waits for every request first).
                    self.retire_file(index);
                    return Some(self.attached[index].counters);
                }
            }
            self.sys.drop_group(r.group);
        }
        self.retire_file(index);
        Some(self.attached[index].counters)
    }

    /// Clears a detached descriptor's fixed-file entry, now if the kernel has taken every
    /// queued entry (which may name it), else once it has ([`Ring::settle_retiring`]).
    fn retire_file(&mut self, index: usize) {
        if self.sys.queued() == 0 {
            self.sys.clear_file(index as u32);
        } else {
            self.attached[index].retiring = true;
            self.retiring.push(index as u32);
        }
    }

    /// Clears the entries of descriptors detached with entries still queued, once the
    /// kernel has taken them (their indices are free again from then on).
    fn settle_retiring(&mut self) {
        if self.retiring.is_empty() || self.sys.queued() > 0 {
            return;
        }
        for index in std::mem::take(&mut self.retiring) {
            self.sys.clear_file(index);
            self.attached[index as usize].retiring = false;
        }
    }

    /// Copies a datagram (or a GSO batch) into a slot and queues its send on `fd`. Waits for
    /// a slot when all are in use (submitting what is queued); fails only when none comes
    /// back within a second.
    pub(crate) fn send(
        &mut self,
        fd: RingFd,
        parts: &[&[u8]],
        options: &SendOptions,
        mut on_completion: impl FnMut(TriggerSource),
    ) -> io::Result<()> {
        let index = self
            .live(fd)
            .ok_or_else(|| io::Error::from_raw_os_error(libc::EBADF))?;
        let slot = match self.free_slots.pop() {
            Some(slot) => slot,
            None => self.wait_for_slot(&mut on_completion)?,
        };
        self.sys.fill(slot as usize, parts, options);
        let len = self.sys.slot_len(slot as usize);
        let datagrams = match options.segment_size {
            Some(s) if s > 0 && usize::from(s) < len => len.div_ceil(usize::from(s)) as u32,
            _ => 1,
        };
        let a = &self.attached[index];
        self.slot_use[slot as usize] = SlotUse {
            attached: index as u32,
            generation: a.generation,
            datagrams,
            bytes: u32::try_from(len).unwrap_or(u32::MAX),
            prompt: a.prompt,
        };
        if !a.waiting.is_empty() {
            // Behind the sends waiting for room, in order.
            self.attached[index].waiting.push_back(slot);
            return Ok(());
        }
        let submitted = self.submit_slot(slot);
        if submitted.is_err() {
            // Not submitted: the slot is free again (lost, every later send would wait for
            // one that never comes back).
            self.free_slots.push(slot);
        }
        submitted
    }

    fn submit_slot(&mut self, slot: u32) -> io::Result<()> {
        let u = self.slot_use[slot as usize];
        let socket = self.attached[u.attached as usize].socket;
        let data = user_data(Kind::Send, slot, u.generation);
        self.sys.send(slot as usize, u.attached, socket, data)?;
        self.outstanding += 1;
        self.prompt_outstanding += usize::from(u.prompt);
        Ok(())
    }

    fn wait_for_slot(&mut self, on_completion: &mut impl FnMut(TriggerSource)) -> io::Result<u32> {
        self.slot_waits += 1;
        let give_up = std::time::Instant::now() + Duration::from_secs(1);
        loop {
            self.sys.submit()?;
            self.reap_all(on_completion);
            if let Some(slot) = self.free_slots.pop() {
                return Ok(slot);
            }
            if std::time::Instant::now() >= give_up {
                return Err(io::Error::from_raw_os_error(libc::EAGAIN));
            }
            self.sys.wait(1, Some(Duration::from_millis(10)), None)?;
        }
    }

    /// Submits what is queued and waits, up to `limit`, until every send has completed (those
    /// refused for a full buffer sent again and completed too), each completion reaped a
    /// trigger state; whether they all did.
    pub(crate) fn flush(
        &mut self,
        limit: Duration,
        on_completion: &mut impl FnMut(TriggerSource),
    ) -> io::Result<bool> {
        let give_up = std::time::Instant::now() + limit;
        loop {
            self.submit()?;
            self.reap_all(on_completion);
            if self.outstanding == 0 && self.attached.iter().all(|a| a.waiting.is_empty()) {
                return Ok(true);
            }
            let now = std::time::Instant::now();
            if now >= give_up {
                return Ok(false);
            }
            let wait = (give_up - now).min(Duration::from_millis(10));
            self.sys.wait(1, Some(wait), None)?;
        }
    }

    /// Submits what is queued.
    pub(crate) fn submit(&mut self) -> io::Result<()> {
        self.held = false;
        if self.sys.queued() > 0 || self.sys.kernel_has_work() {
            self.sys.submit()?;
        }
        self.settle_retiring();
        Ok(())
    }

    /// The loop's look at the ring between passes: enters it only when the kernel holds
    /// completion work, or sends are queued and either completions wait (they leave now,
    /// with a pass of work ahead, rather than at the next wait), or they were queued already
    /// at the previous look (a busy loop that never idles holds a send back one pass at most,
    /// so a pass's sends leave in one batch), or the queue is half full; with SQPOLL, queued
    /// entries are always handed over (without a system call while the kernel's thread
    /// polls). A loop that idles after the pass that queued them (a pacer) sends them with
    /// its wait, in the same system call.
    pub(crate) fn look(&mut self) -> io::Result<bool> {
        let queued = self.sys.queued();
        let work = self.sys.kernel_has_work();
        let held = std::mem::replace(&mut self.held, queued > 0);
        if work
            || (queued > 0
                && (held
                    || self.sys.sqpoll()
                    || self.sys.has_completions()
                    || queued >= self.options.entries as usize / 2))
        {
            self.held = false;
            // With SQPOLL and its thread awake, this publishes the tail: no system call.
            let enters = self.sys.enters;
            self.sys.submit()?;
            return Ok(self.sys.enters != enters);
        }
        Ok(false)
    }

    /// Whether anything waits to be reaped (or the kernel holds completion work): a
    /// spinning loop stops to look.
    pub(crate) fn pending(&mut self) -> bool {
        self.sys.has_completions() || self.sys.kernel_has_work()
    }

    /// Submits what is queued and waits, in one `io_uring_enter`, until a completion besides
    /// those of the loop's own sends comes (or [`UringOptions::wait_batch`] of them), or
    /// `timeout` passes.
    pub(crate) fn wait(&mut self, timeout: Option<Duration>) -> io::Result<()> {
        let batch = self.options.wait_batch.max(1) as usize;
        let min_wait = if batch > 1 {
            self.options.min_wait
        } else {
            None
        };
        // Waiting for a batch is bounded only by the kernel's minimum wait: without it (an
        // older kernel, or none asked for) one completion ends the wait, so that a stop or a
        // single datagram is never held behind completions that may not come.
        let batch = if min_wait.is_some() && self.sys.has_min_timeout() {
            batch
        } else {
            1
        };
        self.sys
            .wait(self.prompt_outstanding + batch, timeout, min_wait)
    }

    /// Reaps every completion, calling `on_completion` with each one's trigger source after
    /// it is taken in; arms again the receives whose multishot ended, and hands the buffers
    /// given back to the kernel.
    pub(crate) fn reap_all(&mut self, on_completion: &mut impl FnMut(TriggerSource)) -> usize {
        self.settle_retiring();
        let mut scratch = [Completion {
            data: 0,
            result: 0,
            flags: 0,
        }; 64];
        let mut total = 0;
        loop {
            let n = self.sys.reap(&mut scratch);
            if n == 0 {
                break;
            }
            for c in &scratch[..n] {
                let source = self.complete(*c);
                on_completion(source);
            }
            total += n;
        }
        self.completions += total as u64;
        for index in std::mem::take(&mut self.rearm) {
            if self.attached[index as usize].active {
                let _ = self.arm_recv(index);
            }
        }
        total
    }

    fn push_ready(&mut self, ready: Ready) {
        match self.ready.iter_mut().find(|r| r.token == ready.token) {
            Some(r) => {
                r.readable |= ready.readable;
                r.writable |= ready.writable;
                r.closed |= ready.closed;
                r.hung_up |= ready.hung_up;
            }
            None => self.ready.push(ready),
        }
    }

    /// Moves the readiness to hand out into `out` (emptied first), and a readable event for
    /// every attached descriptor with received messages not yet taken.
    pub(crate) fn take_ready(&mut self, out: &mut Vec<Ready>) {
        out.clear();
        out.append(&mut self.ready);
        for a in &self.attached {
            if a.active
                && a.recv.as_ref().is_some_and(|r| !r.queue.is_empty())
                && !out.iter().any(|r| r.token == a.token)
            {
                out.push(Ready {
                    token: a.token,
                    readable: true,
                    writable: false,
                    closed: false,
                    hung_up: false,
                });
            }
        }
    }

    /// Hands `fd`'s received messages to `f`, oldest first, at most `max`; returns how many.
    /// Their buffers go back to the kernel.
    pub(crate) fn received(
        &mut self,
        fd: RingFd,
        max: usize,
        mut f: impl FnMut(Received<'_>),
    ) -> usize {
        let Some(index) = self.live(fd) else { return 0 };
        let Some(r) = self.attached[index].recv.as_mut() else {
            return 0;
        };
        let (group, socket) = (r.group, r.socket);
        let taken = r.queue.len().min(max);
        let msghdr = self.sys.group_msghdr(group);
        let (mut received, mut truncated, mut malformed) = (0, 0, 0);
        for _ in 0..taken {
            let Some((bid, len)) = self.attached[index]
                .recv
                .as_mut()
                .and_then(|r| r.queue.pop_front())
            else {
                break;
            };
            let parsed = self.sys.take_buffer(group, bid, len as usize, |bytes| {
                if !socket {
                    f(Received {
                        data: bytes,
                        from: None,
                        segment_size: None,
                        ecn: None,
                        dst_ip: None,
                        truncated: false,
                    });
                    return Some(false);
                }
                let hdr = msghdr.as_ref()?;
                let out = io_uring::types::RecvMsgOut::parse(bytes, hdr).ok()?;
                let mut m = Received {
                    data: out.payload_data(),
                    from: parse_sockaddr(out.name_data(), out.incoming_name_len() as usize),
                    segment_size: None,
                    ecn: None,
                    dst_ip: None,
                    truncated: out.is_payload_truncated(),
                };
                parse_control(out.control_data(), &mut m);
                let t = m.truncated;
                f(m);
                Some(t)
            });
            match parsed {
                Some(Some(t)) => {
                    received += 1;
                    truncated += u64::from(t);
                }
                _ => malformed += 1,
            }
        }
        self.sys.publish(group);
        let a = &mut self.attached[index];
        a.counters.received += received;
        a.counters.truncated += truncated;
        a.counters.malformed += malformed;
        if a.recv
            .as_ref()
            .is_some_and(|r| !r.armed && r.failures < RECV_FAILURES)
            && !self.rearm.contains(&(index as u32))
        {
            let _ = self.arm_recv(index as u32);
        }
        taken
    }

    pub(crate) fn counters(&self, fd: RingFd) -> Option<RingCounters> {
        self.live(fd).map(|i| self.attached[i].counters)
    }
}

impl AsRawFd for Ring {
    fn as_raw_fd(&self) -> RawFd {
        self.sys.as_raw_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::sys::decode;
    use super::*;

    #[test]
    fn user_data_round_trips_and_refuses_foreign_kinds() {
        let d = user_data(Kind::Send, 0x12_3456, 0xdead_beef);
        assert_eq!(decode(d), Some((Kind::Send, 0x12_3456, 0xdead_beef)));
        assert_eq!(decode(0), None);
        assert_eq!(decode(u64::MAX), None);
    }

    /// An index left with its buffer group registered (a detach whose receive's cancel
    /// never completed; made so here by hand) is skipped: the next attach that receives
    /// takes another index, where it used to fail with `EEXIST`.
    #[test]
    fn an_index_whose_group_stayed_registered_is_not_given_out_again() {
        use std::os::fd::AsFd;
        let Ok(mut ring) = Ring::new(UringOptions::default(), false) else {
            eprintln!("io_uring unavailable here: skipped");
            return;
        };
        let recv = RingRecv::Datagrams {
            buffers: 8,
            size: 2048,
        };
        let first = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let fd = ring
            .attach(first.as_fd(), 1, recv)
            .expect("the first attach");
        ring.detach(fd).expect("attached");
        ring.sys
            .add_group(0, 8, 2048)
            .expect("the group of index 0, stranded");
        let second = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let fd = ring
            .attach(second.as_fd(), 2, recv)
            .expect("an attach that receives, at another index");
        assert!(ring.detach(fd).is_some());
    }

    #[test]
    fn setup_errors_say_why() {
        assert_eq!(
            UringUnavailable::from_setup(libc::EPERM, 2),
            UringUnavailable::Disabled(2)
        );
        assert_eq!(
            UringUnavailable::from_setup(libc::EPERM, 1),
            UringUnavailable::Disabled(1)
        );
        assert_eq!(
            UringUnavailable::from_setup(libc::EPERM, 0),
            UringUnavailable::NotPermitted
        );
        assert_eq!(
            UringUnavailable::from_setup(libc::ENOSYS, 0),
            UringUnavailable::NoSyscall
        );
        assert!(
            UringUnavailable::Disabled(2)
                .to_string()
                .contains("kernel.io_uring_disabled")
        );
    }
}
