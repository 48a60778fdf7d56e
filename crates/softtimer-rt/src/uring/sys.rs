//! The ring's system interface, and the only `unsafe` code of the io_uring backend: the
//! ring itself (`io-uring`'s queues), the memory the kernel reads or writes while a request
//! is in flight (the send slots, the provided-buffer rings), and the submission entries that
//! point into that memory.
//!
//! The hard part is buffer lifetime across submission and completion. The rule here: every
//! byte an entry points at is owned by [`RingSys`], in allocations that never move (boxed
//! slices and raw allocations made once), and is neither written nor freed while a request
//! that uses it is in flight: a send slot is written only while it is free, a provided buffer
//! is read only between the completion that hands it over and its return to the kernel, and
//! dropping the ring cancels every request and waits for their completions before any memory
//! goes (leaking it, rather than freeing it under the kernel, if they do not come). No entry
//! ever points into a caller's memory: what a caller sends is copied into a slot.
#![allow(unsafe_code)]

use std::cell::UnsafeCell;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::{AsRawFd, RawFd};
use std::time::Duration;

use io_uring::{IoUring, cqueue, opcode, squeue, types};

use super::UringUnavailable;

/// Bytes of control-message space in a send slot (UDP_SEGMENT, IP_TOS or IPV6_TCLASS, and
/// IP_PKTINFO or IPV6_PKTINFO each fit in 32 bytes).
const SEND_CONTROL: usize = 96;
/// Bytes of control-message space a multishot receive asks for per datagram (GRO's segment
/// size, TOS or traffic class, packet info, a timestamp).
pub(crate) const RECV_CONTROL: usize = 128;
/// The name space a multishot receive asks for (a `sockaddr_storage`).
const RECV_NAME: usize = std::mem::size_of::<libc::sockaddr_storage>();
/// `io_uring_recvmsg_out`, which precedes every datagram in a provided buffer.
pub(crate) const RECVMSG_OUT: usize = 16;

/// What a completion belongs to: the kind in the top byte of the user data, an index in the
/// next three, a generation in the low four (so that a completion of a request made for an
/// index since reused is recognised and ignored).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// A readiness poll of a registered descriptor.
    Poll = 1,
    /// A send (or write) from a slot.
    Send = 2,
    /// A multishot receive (or read) of an attached descriptor.
    Recv = 3,
    /// A one-shot poll for writability of an attached socket whose sends were refused.
    Writable = 4,
    /// A cancellation or removal; its completion says nothing the loop needs.
    Cancel = 5,
}

pub(crate) fn user_data(kind: Kind, index: u32, generation: u32) -> u64 {
    ((kind as u64) << 56) | (u64::from(index & 0x00ff_ffff) << 32) | u64::from(generation)
}

pub(crate) fn decode(data: u64) -> Option<(Kind, u32, u32)> {
    let kind = match data >> 56 {
        1 => Kind::Poll,
        2 => Kind::Send,
        3 => Kind::Recv,
        4 => Kind::Writable,
        5 => Kind::Cancel,
        _ => return None,
    };
    Some((kind, ((data >> 32) & 0x00ff_ffff) as u32, data as u32))
}

/// A completion, copied out of the queue.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Completion {
    pub data: u64,
    pub result: i32,
    pub flags: u32,
}

impl Completion {
    /// Whether a multishot request goes on after this completion.
    pub fn more(&self) -> bool {
        cqueue::more(self.flags)
    }

    /// The provided buffer this completion filled.
    pub fn buffer(&self) -> Option<u16> {
        cqueue::buffer_select(self.flags)
    }
}

/// The control-message space of a slot, aligned as `cmsghdr` needs.
#[repr(C, align(8))]
struct SendControl([u8; SEND_CONTROL]);

/// What the kernel reads of a slot's `sendmsg`: the header, its one `iovec`, the destination
/// and the control messages. Written only while the slot is free, through the cell.
#[repr(C)]
struct SendParts {
    hdr: libc::msghdr,
    iov: libc::iovec,
    addr: libc::sockaddr_storage,
    control: SendControl,
}

/// A datagram's options beside its bytes: how quinn-udp sends (GSO, ECN, source address).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SendOptions {
    /// The destination, for an unconnected socket.
    pub to: Option<SocketAddr>,
    /// With several datagrams in the bytes, the size of each but the last (GSO,
    /// `UDP_SEGMENT`); ignored when it is not smaller than the bytes.
    pub segment_size: Option<u16>,
    /// The ECN codepoint (the two low bits of the TOS or traffic class).
    pub ecn: Option<u8>,
    /// The local address to send from (`IP_PKTINFO` or `IPV6_PKTINFO`).
    pub src_ip: Option<IpAddr>,
}

/// The ring's memory for in-flight sends, a fixed number of slots that never move.
struct Slots {
    parts: Box<[UnsafeCell<SendParts>]>,
    data: Vec<Vec<u8>>,
}

/// A provided-buffer ring: `count` buffers of `size` bytes in one allocation the kernel
/// writes into, and the ring of entries through which they are handed to it.
pub(crate) struct BufGroup {
    entries: *mut types::BufRingEntry,
    entries_layout: std::alloc::Layout,
    memory: *mut u8,
    memory_layout: std::alloc::Layout,
    pub count: u16,
    pub size: u32,
    /// Our copy of the tail, published to the kernel by [`RingSys::publish`].
    tail: u16,
    /// The multishot receive's header template: only its name and control lengths matter,
    /// and the kernel reads it when the receive is armed.
    msghdr: Box<UnsafeCell<libc::msghdr>>,
}

/// The ring, and the memory its requests use.
pub(crate) struct RingSys {
    ring: IoUring,
    slots: Slots,
    groups: Vec<Option<BufGroup>>,
    sqpoll: bool,
    min_timeout: bool,
    /// Requests whose completion has not been reaped: what `Drop` waits for.
    pub in_flight: usize,
    /// `io_uring_enter` calls made.
    pub enters: u64,
}

fn page_layout(bytes: usize) -> std::alloc::Layout {
    std::alloc::Layout::from_size_align(bytes.max(1).next_multiple_of(4096), 4096)
        .expect("a page-aligned layout")
}

/// Reads `/proc/sys/kernel/io_uring_disabled` (absent before Linux 6.6: 0).
fn disabled_sysctl() -> u8 {
    std::fs::read_to_string("/proc/sys/kernel/io_uring_disabled")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0)
}

impl UringUnavailable {
    /// Why `io_uring_setup` failed with `errno`, given the sysctl's value.
    pub(crate) fn from_setup(errno: i32, disabled: u8) -> UringUnavailable {
        match (errno, disabled) {
            (_, 2) => UringUnavailable::Disabled(2),
            (libc::EPERM, 1) => UringUnavailable::Disabled(1),
            (libc::ENOSYS, _) => UringUnavailable::NoSyscall,
            (libc::EPERM, _) => UringUnavailable::NotPermitted,
            (libc::ENOMEM, _) => UringUnavailable::NoMemory,
            (e, _) => UringUnavailable::Setup(e),
        }
    }
}

impl RingSys {
    /// A ring of `entries` submission entries (a power of two) and `slots` send slots;
    /// with `sqpoll`, a kernel thread polls the submission queue, sleeping after `sqpoll`
    /// of no submissions.
    pub(crate) fn new(
        entries: u32,
        slots: usize,
        sqpoll: Option<Duration>,
        files: u32,
    ) -> Result<RingSys, UringUnavailable> {
        let cq = (entries * 16).max(4096);
        let build = |flags: u8| {
            let mut b = IoUring::builder();
            b.setup_cqsize(cq).setup_submit_all();
            if let Some(idle) = sqpoll {
                b.setup_sqpoll(idle.as_millis().clamp(1, 10_000) as u32);
            } else if flags == 2 {
                // Completions of the loop's own requests are posted only when it enters the
                // ring to wait or to look (no interrupt of a computing loop), and the kernel
                // says in the ring's flags when there is such work. `SINGLE_ISSUER` holds:
                // the loop is not `Send`, so the thread that makes the ring is the one that
                // runs it.
                b.setup_single_issuer()
                    .setup_defer_taskrun()
                    .setup_taskrun_flag();
            } else if flags == 1 {
                b.setup_coop_taskrun().setup_taskrun_flag();
            }
            b.build(entries)
        };
        let mut result = build(2);
        if sqpoll.is_none() {
            // Kernels before 6.1 refuse the deferred task work, before 5.19 the cooperative.
            for fallback in [1, 0] {
                match &result {
                    Err(e) if e.raw_os_error() == Some(libc::EINVAL) => result = build(fallback),
                    _ => break,
                }
            }
        }
        let ring = result.map_err(|e| {
            UringUnavailable::from_setup(e.raw_os_error().unwrap_or(0), disabled_sysctl())
        })?;
        if !ring.params().is_feature_ext_arg() {
            return Err(UringUnavailable::Missing(
                "a wait with a timeout (EXT_ARG)",
                "5.11",
            ));
        }
        ring.submitter()
            .register_files_sparse(files)
            .map_err(|_| UringUnavailable::Missing("a sparse table of fixed files", "5.19"))?;
        let min_timeout = ring.params().is_feature_min_timeout();
        // SAFETY: an all-zero `SendParts` is valid: null pointers, zero lengths, an empty
        // address; each is filled in before the slot's first use.
        let zero = || UnsafeCell::new(unsafe { std::mem::zeroed::<SendParts>() });
        Ok(RingSys {
            ring,
            slots: Slots {
                parts: (0..slots).map(|_| zero()).collect(),
                data: (0..slots).map(|_| Vec::new()).collect(),
            },
            groups: Vec::new(),
            sqpoll: sqpoll.is_some(),
            min_timeout,
            in_flight: 0,
            enters: 0,
        })
    }

    /// Whether a kernel thread polls the submission queue.
    pub(crate) fn sqpoll(&self) -> bool {
        self.sqpoll
    }

    /// Puts `fd` in the fixed-file table at `index`: requests on it hold the file, not the
    /// number, so the caller may close its descriptor.
    pub(crate) fn set_file(&self, index: u32, fd: RawFd) -> io::Result<()> {
        self.ring
            .submitter()
            .register_files_update(index, &[fd])
            .map(drop)
    }

    /// Empties `index` in the fixed-file table.
    pub(crate) fn clear_file(&self, index: u32) {
        let _ = self.ring.submitter().register_files_update(index, &[-1]);
    }

    /// Entries waiting in the submission queue.
    pub(crate) fn queued(&mut self) -> usize {
        self.ring.submission().len()
    }

    /// Whether the kernel holds completion work that runs at the loop's next entry into it
    /// (deferred or cooperative task work, flagged in the ring), or completions it could not
    /// post (overflow).
    pub(crate) fn kernel_has_work(&mut self) -> bool {
        let sq = self.ring.submission();
        sq.taskrun() || sq.cq_overflow()
    }

    /// Whether completions wait in the queue.
    pub(crate) fn has_completions(&mut self) -> bool {
        !self.ring.completion().is_empty()
    }

    /// Pushes `entry`, submitting first if the queue is full.
    fn push(&mut self, entry: &squeue::Entry) -> io::Result<()> {
        loop {
            // SAFETY: every entry pushed through here points only at memory this ring owns
            // and keeps, unchanged, until the request completes (the callers below say
            // which), or at no memory at all.
            if unsafe { self.ring.submission().push(entry) }.is_ok() {
                self.in_flight += 1;
                return Ok(());
            }
            self.submit()?;
        }
    }

    /// A readiness poll of `fd` (multishot: a completion at every wake-up) for `events`.
    pub(crate) fn poll(
        &mut self,
        fd: RawFd,
        events: u32,
        multi: bool,
        data: u64,
    ) -> io::Result<()> {
        let entry = opcode::PollAdd::new(types::Fd(fd), events)
            .multi(multi)
            .build()
            .user_data(data);
        self.push(&entry)
    }

    /// A one-shot poll of fixed file `file` for `events`.
    pub(crate) fn poll_fixed(&mut self, file: u32, events: u32, data: u64) -> io::Result<()> {
        let entry = opcode::PollAdd::new(types::Fixed(file), events)
            .build()
            .user_data(data);
        self.push(&entry)
    }

    /// Removes the poll made with user data `target`.
    pub(crate) fn poll_remove(&mut self, target: u64) -> io::Result<()> {
        let entry =
            opcode::PollRemove::new(target)
                .build()
                .user_data(user_data(Kind::Cancel, 0, 0));
        self.push(&entry)
    }

    /// Cancels the request made with user data `target`.
    pub(crate) fn cancel(&mut self, target: u64) -> io::Result<()> {
        let entry = opcode::AsyncCancel::new(target)
            .build()
            .user_data(user_data(Kind::Cancel, 0, 0));
        self.push(&entry)
    }

    /// Copies `parts` (one datagram, or a GSO batch with `options.segment_size`) into free
    /// slot `slot` and prepares its `sendmsg`. The caller owns the slot: it is free (no
    /// request uses it) until [`RingSys::send`] submits it.
    pub(crate) fn fill(&mut self, slot: usize, parts: &[&[u8]], options: &SendOptions) {
        let data = &mut self.slots.data[slot];
        data.clear();
        for part in parts {
            data.extend_from_slice(part);
        }
        let len = data.len();
        let base = data.as_mut_ptr();
        // SAFETY: the slot is free, so no request reads its parts: this is the only access.
        // The pointers written point into the slot's own parts and its data vector, neither
        // of which moves or changes until the request completes (the data vector is written
        // only here, with the slot free again).
        unsafe {
            let p = &mut *self.slots.parts[slot].get();
            p.iov = libc::iovec {
                iov_base: base.cast(),
                iov_len: len,
            };
            p.hdr.msg_iov = &mut p.iov;
            p.hdr.msg_iovlen = 1;
            p.hdr.msg_flags = 0;
            match options.to {
                Some(to) => {
                    p.hdr.msg_namelen = write_sockaddr(&mut p.addr, to);
                    p.hdr.msg_name = (&mut p.addr as *mut libc::sockaddr_storage).cast();
                }
                None => {
                    p.hdr.msg_name = std::ptr::null_mut();
                    p.hdr.msg_namelen = 0;
                }
            }
            let control = encode_control(&mut p.control.0, len, options);
            if control == 0 {
                p.hdr.msg_control = std::ptr::null_mut();
                p.hdr.msg_controllen = 0;
            } else {
                p.hdr.msg_control = p.control.0.as_mut_ptr().cast();
                p.hdr.msg_controllen = control as _;
            }
        }
    }

    /// Bytes in slot `slot`.
    pub(crate) fn slot_len(&self, slot: usize) -> usize {
        self.slots.data[slot].len()
    }

    /// Queues slot `slot`'s prepared message: a non-blocking `sendmsg` on fixed file `file`
    /// (refused with `EAGAIN` rather than waiting, so that it completes when submitted), or
    /// a `write` of its bytes for a descriptor that is not a socket.
    pub(crate) fn send(
        &mut self,
        slot: usize,
        file: u32,
        socket: bool,
        data: u64,
    ) -> io::Result<()> {
        let entry = if socket {
            let hdr = self.slots.parts[slot].get().cast::<libc::msghdr>();
            opcode::SendMsg::new(types::Fixed(file), hdr)
                .flags(libc::MSG_DONTWAIT as u32)
                .build()
        } else {
            let data = &self.slots.data[slot];
            opcode::Write::new(types::Fixed(file), data.as_ptr(), data.len() as u32).build()
        };
        // The entry points at the slot's header (its first field) or its data: the slot's,
        // unchanged until the completion frees it.
        self.push(&entry.user_data(data))
    }

    /// A provided-buffer ring of `count` (a power of two, at most 32768) buffers of `size`
    /// bytes as group `id`, every buffer handed to the kernel.
    pub(crate) fn add_group(&mut self, id: u16, count: u16, size: u32) -> io::Result<()> {
        let entries_layout = page_layout(usize::from(count) * 16);
        let memory_layout =
            std::alloc::Layout::from_size_align(usize::from(count) * size as usize, 64)
                .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
        // SAFETY: both layouts have a non-zero size (count and size are at least 1, and the
        // entries round up to a page); the allocations are freed in `drop_group` with the
        // same layouts, or leaked if the kernel may still use them.
        let (entries, memory) = unsafe {
            (
                std::alloc::alloc_zeroed(entries_layout).cast::<types::BufRingEntry>(),
                std::alloc::alloc(memory_layout),
            )
        };
        if entries.is_null() || memory.is_null() {
            return Err(io::Error::from_raw_os_error(libc::ENOMEM));
        }
        // SAFETY: `entries` is page-aligned, zeroed, `count` entries long, and stays
        // allocated until the group is unregistered.
        let registered = unsafe {
            self.ring
                .submitter()
                .register_buf_ring_with_flags(entries as u64, count, id, 0)
        };
        // SAFETY: an all-zero `msghdr` is valid; only the two lengths are read.
        let mut msghdr: libc::msghdr = unsafe { std::mem::zeroed() };
        msghdr.msg_namelen = RECV_NAME as libc::socklen_t;
        msghdr.msg_controllen = RECV_CONTROL as _;
        let mut group = BufGroup {
            entries,
            entries_layout,
            memory,
            memory_layout,
            count,
            size,
            tail: 0,
            msghdr: Box::new(UnsafeCell::new(msghdr)),
        };
        if let Err(e) = registered {
            // SAFETY: the kernel never saw the memory.
            unsafe { free_group(&group) };
            return Err(e);
        }
        for bid in 0..count {
            group_give(&mut group, bid);
        }
        group_publish(&group);
        let index = usize::from(id);
        if self.groups.len() <= index {
            self.groups.resize_with(index + 1, || None);
        }
        self.groups[index] = Some(group);
        Ok(())
    }

    /// Whether group `id` is registered (a detach whose receive's cancel never completed
    /// leaves its group so).
    pub(crate) fn has_group(&self, id: u16) -> bool {
        self.groups
            .get(usize::from(id))
            .is_some_and(Option::is_some)
    }

    /// Unregisters group `id` and frees its memory. The caller has seen the last completion
    /// of every receive using it.
    pub(crate) fn drop_group(&mut self, id: u16) {
        if let Some(group) = self.groups.get_mut(usize::from(id)).and_then(Option::take) {
            let _ = self.ring.submitter().unregister_buf_ring(id);
            // SAFETY: no receive uses the group (the caller's contract) and the kernel no
            // longer knows its ring.
            unsafe { free_group(&group) };
        }
    }

    /// Arms a multishot receive on fixed file `file` into group `id`'s buffers: `recvmsg`
    /// (a header, the sender's address and control messages before each datagram) on a
    /// socket, `read` on another descriptor.
    pub(crate) fn recv(&mut self, file: u32, id: u16, socket: bool, data: u64) -> io::Result<()> {
        let Some(group) = self.groups.get(usize::from(id)).and_then(Option::as_ref) else {
            return Err(io::Error::from_raw_os_error(libc::ENOENT));
        };
        let entry = if socket {
            // The header template is the group's, boxed: it does not move while the group
            // lives, which outlasts the receive.
            opcode::RecvMsgMulti::new(types::Fixed(file), group.msghdr.get().cast_const(), id)
                .build()
        } else {
            // No length: each read fills one provided buffer (the kernel refuses a length
            // with a multishot read, EINVAL).
            opcode::ReadMulti::new(types::Fixed(file), 0, id).build()
        };
        self.push(&entry.user_data(data))
    }

    /// Calls `f` with the bytes the kernel wrote into buffer `bid` of group `id` (`len` of
    /// them), and hands the buffer back to the kernel (published at the next
    /// [`RingSys::publish`]).
    pub(crate) fn take_buffer<R>(
        &mut self,
        id: u16,
        bid: u16,
        len: usize,
        f: impl FnOnce(&[u8]) -> R,
    ) -> Option<R> {
        let group = self
            .groups
            .get_mut(usize::from(id))
            .and_then(Option::as_mut)?;
        if bid >= group.count {
            return None;
        }
        let len = len.min(group.size as usize);
        // SAFETY: the completion handed buffer `bid` to us: the kernel does not write it
        // until we give it back, below, after the last use of the slice.
        let bytes = unsafe {
            std::slice::from_raw_parts(
                group.memory.add(usize::from(bid) * group.size as usize),
                len,
            )
        };
        let out = f(bytes);
        group_give(group, bid);
        Some(out)
    }

    /// Publishes every buffer given back to group `id` since the last publish.
    pub(crate) fn publish(&mut self, id: u16) {
        if let Some(group) = self.groups.get(usize::from(id)).and_then(Option::as_ref) {
            group_publish(group);
        }
    }

    /// The receive header template of group `id`, to parse its buffers.
    pub(crate) fn group_msghdr(&self, id: u16) -> Option<libc::msghdr> {
        let group = self.groups.get(usize::from(id)).and_then(Option::as_ref)?;
        // SAFETY: the template is written once, at creation; the kernel only reads it.
        Some(unsafe { *group.msghdr.get() })
    }

    /// Submits what is queued without waiting (the kernel runs the completion work it holds
    /// too); returns how many entries were submitted.
    pub(crate) fn submit(&mut self) -> io::Result<usize> {
        if self.enters_on_submit() {
            self.enters += 1;
        }
        loop {
            match self.ring.submit() {
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
                Err(e) if e.raw_os_error() == Some(libc::EBUSY) => return Ok(0),
                other => return other,
            }
        }
    }

    /// Whether a submission now makes a system call: always, but with SQPOLL only when its
    /// thread sleeps or completion work waits (as `io-uring`'s `submit` decides).
    fn enters_on_submit(&mut self) -> bool {
        if !self.sqpoll {
            return true;
        }
        let sq = self.ring.submission();
        sq.need_wakeup() || sq.taskrun() || sq.cq_overflow()
    }

    /// Whether the kernel takes a minimum wait (`IORING_FEAT_MIN_TIMEOUT`, Linux 6.12).
    pub(crate) fn has_min_timeout(&self) -> bool {
        self.min_timeout
    }

    /// Submits what is queued and waits until `want` completions are in the queue, or
    /// `timeout` passes (`None`: no limit). With `min_wait` (6.12+), once it has passed the
    /// wait ends at the first completion. An interruption or the timeout end the wait early
    /// and are not errors.
    pub(crate) fn wait(
        &mut self,
        want: usize,
        timeout: Option<Duration>,
        min_wait: Option<Duration>,
    ) -> io::Result<()> {
        self.enters += 1;
        let ts = timeout.map(types::Timespec::from);
        let mut args = types::SubmitArgs::new();
        if let (Some(min), true) = (min_wait, self.min_timeout) {
            args = args.min_wait_usec(min.as_micros().min(u128::from(u32::MAX)) as u32);
        }
        let result = match &ts {
            Some(ts) => self
                .ring
                .submitter()
                .submit_with_args(want, &args.timespec(ts)),
            None => self.ring.submitter().submit_with_args(want, &args),
        };
        match result {
            Ok(_) => Ok(()),
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(libc::ETIME | libc::EINTR | libc::EBUSY)
                ) =>
            {
                Ok(())
            }
            Err(e) => Err(e),
        }
    }

    /// Moves up to `out.len()` completions out of the queue; returns how many.
    pub(crate) fn reap(&mut self, out: &mut [Completion]) -> usize {
        let mut n = 0;
        let mut cq = self.ring.completion();
        for slot in out.iter_mut() {
            let Some(cqe) = cq.next() else { break };
            *slot = Completion {
                data: cqe.user_data(),
                result: cqe.result(),
                flags: cqe.flags(),
            };
            if !cqueue::more(cqe.flags()) {
                self.in_flight = self.in_flight.saturating_sub(1);
            }
            n += 1;
        }
        n
    }

    /// Cancels every request and waits (up to `patience`) for their completions; whether
    /// none is left in flight, so that their memory may go.
    fn quiesce(&mut self, patience: Duration) -> bool {
        let _ = self.ring.submitter().register_sync_cancel(
            Some(types::Timespec::from(patience)),
            types::CancelBuilder::any(),
        );
        let deadline = std::time::Instant::now() + patience;
        let mut scratch = [Completion {
            data: 0,
            result: 0,
            flags: 0,
        }; 64];
        loop {
            while self.reap(&mut scratch) > 0 {}
            if self.in_flight == 0 {
                return true;
            }
            let now = std::time::Instant::now();
            if now >= deadline {
                return false;
            }
            let _ = self.wait(
                1,
                Some((deadline - now).min(Duration::from_millis(10))),
                None,
            );
        }
    }
}

impl Drop for RingSys {
    fn drop(&mut self) {
        if self.quiesce(Duration::from_secs(1)) {
            for id in 0..self.groups.len() {
                self.drop_group(id as u16);
            }
        } else {
            // A request the kernel did not give back may still write into a provided
            // buffer or read a slot: leak the memory rather than free it under the kernel.
            std::mem::forget(std::mem::take(&mut self.groups));
            std::mem::forget(std::mem::take(&mut self.slots.data));
            std::mem::forget(std::mem::replace(&mut self.slots.parts, Box::new([])));
        }
    }
}

/// Frees a group's two allocations.
///
/// # Safety
///
/// The kernel must not use them: never registered, or unregistered with no receive left.
unsafe fn free_group(group: &BufGroup) {
    // SAFETY: allocated in `add_group` with these very layouts (the caller's contract covers
    // the kernel's side).
    unsafe {
        std::alloc::dealloc(group.entries.cast(), group.entries_layout);
        std::alloc::dealloc(group.memory, group.memory_layout);
    }
}

/// Writes buffer `bid` into the next entry of the group's ring (not yet published).
fn group_give(group: &mut BufGroup, bid: u16) {
    let mask = group.count - 1;
    // SAFETY: `tail & mask` indexes one of the `count` entries; the kernel reads entries only
    // up to the published tail, which this one is past until `group_publish`.
    unsafe {
        let entry = &mut *group.entries.add(usize::from(group.tail & mask));
        entry.set_addr(group.memory.add(usize::from(bid) * group.size as usize) as u64);
        entry.set_len(group.size);
        entry.set_bid(bid);
    }
    group.tail = group.tail.wrapping_add(1);
}

/// Publishes the group's tail: the entries written before it become the kernel's.
fn group_publish(group: &BufGroup) {
    // SAFETY: the tail field lies in the first entry of the ring (the kernel's layout), which
    // is allocated and aligned for a u16; the kernel reads it with acquire semantics, so a
    // release store orders the entries written before it.
    unsafe {
        let tail = types::BufRingEntry::tail(group.entries).cast_mut();
        (*tail.cast::<std::sync::atomic::AtomicU16>())
            .store(group.tail, std::sync::atomic::Ordering::Release);
    }
}

/// Writes `to` as a `sockaddr_in` or `sockaddr_in6` into `storage`; returns its length.
fn write_sockaddr(storage: &mut libc::sockaddr_storage, to: SocketAddr) -> libc::socklen_t {
    let ptr = (storage as *mut libc::sockaddr_storage).cast::<u8>();
    match to {
        SocketAddr::V4(a) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: a.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from_ne_bytes(a.ip().octets()),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: `sockaddr_storage` is larger than and aligned for `sockaddr_in`.
            unsafe { ptr.cast::<libc::sockaddr_in>().write(sin) };
            std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t
        }
        SocketAddr::V6(a) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: a.port().to_be(),
                sin6_flowinfo: a.flowinfo(),
                sin6_addr: libc::in6_addr {
                    s6_addr: a.ip().octets(),
                },
                sin6_scope_id: a.scope_id(),
            };
            // SAFETY: `sockaddr_storage` is larger than and aligned for `sockaddr_in6`.
            unsafe { ptr.cast::<libc::sockaddr_in6>().write(sin6) };
            std::mem::size_of::<libc::sockaddr_in6>() as libc::socklen_t
        }
    }
}

/// Appends one control message of `level`, `kind` and `payload` at `at`; returns the offset
/// after it (`CMSG_SPACE`).
fn push_cmsg(buf: &mut [u8], at: usize, level: i32, kind: i32, payload: &[u8]) -> usize {
    let header = std::mem::size_of::<libc::cmsghdr>();
    let len = header + payload.len();
    let space = header + payload.len().next_multiple_of(std::mem::size_of::<usize>());
    let cmsg = libc::cmsghdr {
        cmsg_len: len as _,
        cmsg_level: level,
        cmsg_type: kind,
    };
    // SAFETY: `cmsghdr` is plain data; its bytes are copied into the buffer, which the
    // callers size for every message they push.
    let raw =
        unsafe { std::slice::from_raw_parts((&cmsg as *const libc::cmsghdr).cast::<u8>(), header) };
    buf[at..at + header].copy_from_slice(raw);
    buf[at + header..at + len].copy_from_slice(payload);
    buf[at + len..at + space].fill(0);
    at + space
}

/// Encodes a datagram's options as quinn-udp does (TOS or traffic class with its ECN bits,
/// `UDP_SEGMENT` when several segments, packet info for the source); returns the bytes used.
fn encode_control(buf: &mut [u8; SEND_CONTROL], len: usize, options: &SendOptions) -> usize {
    let mut at = 0;
    if let Some(ecn) = options.ecn {
        let v4 = options.to.is_none_or(|to| match to {
            SocketAddr::V4(_) => true,
            SocketAddr::V6(a) => a.ip().to_ipv4_mapped().is_some(),
        });
        let tos = libc::c_int::from(ecn & 3).to_ne_bytes();
        at = if v4 {
            push_cmsg(buf, at, libc::IPPROTO_IP, libc::IP_TOS, &tos)
        } else {
            push_cmsg(buf, at, libc::IPPROTO_IPV6, libc::IPV6_TCLASS, &tos)
        };
    }
    if let Some(segment) = options
        .segment_size
        .filter(|&s| s > 0 && usize::from(s) < len)
    {
        at = push_cmsg(
            buf,
            at,
            libc::SOL_UDP,
            libc::UDP_SEGMENT,
            &segment.to_ne_bytes(),
        );
    }
    match options.src_ip {
        Some(IpAddr::V4(ip)) => {
            let info = libc::in_pktinfo {
                ipi_ifindex: 0,
                ipi_spec_dst: libc::in_addr {
                    s_addr: u32::from_ne_bytes(ip.octets()),
                },
                ipi_addr: libc::in_addr { s_addr: 0 },
            };
            // SAFETY: `in_pktinfo` is plain data, read as its bytes.
            let raw = unsafe {
                std::slice::from_raw_parts(
                    (&info as *const libc::in_pktinfo).cast::<u8>(),
                    std::mem::size_of::<libc::in_pktinfo>(),
                )
            };
            at = push_cmsg(buf, at, libc::IPPROTO_IP, libc::IP_PKTINFO, raw);
        }
        Some(IpAddr::V6(ip)) => {
            let info = libc::in6_pktinfo {
                ipi6_addr: libc::in6_addr {
                    s6_addr: ip.octets(),
                },
                ipi6_ifindex: 0,
            };
            // SAFETY: `in6_pktinfo` is plain data, read as its bytes.
            let raw = unsafe {
                std::slice::from_raw_parts(
                    (&info as *const libc::in6_pktinfo).cast::<u8>(),
                    std::mem::size_of::<libc::in6_pktinfo>(),
                )
            };
            at = push_cmsg(buf, at, libc::IPPROTO_IPV6, libc::IPV6_PKTINFO, raw);
        }
        None => {}
    }
    at
}

impl AsRawFd for RingSys {
    fn as_raw_fd(&self) -> RawFd {
        self.ring.as_raw_fd()
    }
}
