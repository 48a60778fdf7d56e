//! One completion taken in: what each kind of request the ring carries (a poll, a send, a
//! writability poll for sends waiting for room, a receive, a cancel) leaves behind.

use softtimer::TriggerSource;

use super::sys::{Completion, Kind, decode, user_data};
use super::{RECV_FAILURES, Ring, live_mut};
use crate::cx::Ready;

impl Ring {
    /// Takes one completion in; returns the trigger source it stands for.
    pub(super) fn complete(&mut self, c: Completion) -> TriggerSource {
        let Some((kind, index, generation)) = decode(c.data) else {
            return TriggerSource::Syscall;
        };
        match kind {
            Kind::Poll => {
                let Some(p) = self.polls.get_mut(index as usize) else {
                    return TriggerSource::Syscall;
                };
                if !p.active || p.generation != generation {
                    return TriggerSource::Syscall;
                }
                let token = p.token;
                if c.result >= 0 {
                    let mask = c.result as u32;
                    self.push_ready(Ready {
                        token,
                        readable: mask & libc::POLLIN as u32 != 0,
                        writable: mask & libc::POLLOUT as u32 != 0,
                        closed: mask & (libc::POLLHUP | libc::POLLERR | libc::POLLRDHUP) as u32
                            != 0,
                        hung_up: mask & (libc::POLLHUP | libc::POLLRDHUP) as u32 != 0,
                    });
                }
                if c.result < 0 {
                    // The poll failed (a descriptor closed while registered: EBADF). It is not
                    // armed again, which would fail at once, again and again, and could watch
                    // another file that reuses the number; the application hears of it as a
                    // hang-up and deregisters.
                    self.push_ready(Ready {
                        token,
                        readable: false,
                        writable: false,
                        closed: true,
                        hung_up: true,
                    });
                    return TriggerSource::Syscall;
                }
                let p = &self.polls[index as usize];
                if !c.more() && (p.multi || p.level) {
                    // A multishot poll the kernel ended (an overflow), or a level-triggered
                    // one that reported: watch again.
                    let (fd, events, multi) = (p.fd, p.events, p.multi);
                    let _ = self.sys.poll(fd, events, multi, c.data);
                }
                TriggerSource::Syscall
            }
            Kind::Send => {
                let slot = index;
                let u = self.slot_use[slot as usize];
                self.outstanding = self.outstanding.saturating_sub(1);
                self.prompt_outstanding = self
                    .prompt_outstanding
                    .saturating_sub(usize::from(u.prompt));
                let Some(a) = live_mut(&mut self.attached, u.attached, u.generation) else {
                    self.free_slots.push(slot);
                    return TriggerSource::Send;
                };
                if c.result == -libc::EAGAIN {
                    a.counters.would_block += 1;
                    a.waiting.push_back(slot);
                    if !a.writable_armed {
                        a.writable_armed = true;
                        let data = user_data(Kind::Writable, u.attached, u.generation);
                        let _ = self.sys.poll_fixed(u.attached, libc::POLLOUT as u32, data);
                    }
                    return TriggerSource::Send;
                }
                if c.result >= 0 {
                    a.counters.sent += u64::from(u.datagrams);
                    a.counters.sent_bytes += u64::from(u.bytes);
                } else {
                    a.counters.count_refused(u.datagrams, u.bytes);
                }
                self.free_slots.push(slot);
                TriggerSource::Send
            }
            Kind::Writable => {
                let Some(a) = live_mut(&mut self.attached, index, generation) else {
                    return TriggerSource::Send;
                };
                a.writable_armed = false;
                let waiting: Vec<u32> = a.waiting.drain(..).collect();
                for slot in waiting {
                    if self.submit_slot(slot).is_err() {
                        // Not sent and not to be: counted as refused, never lost silently.
                        let u = self.slot_use[slot as usize];
                        let counters = &mut self.attached[index as usize].counters;
                        counters.count_refused(u.datagrams, u.bytes);
                        self.free_slots.push(slot);
                    }
                }
                TriggerSource::Send
            }
            Kind::Recv => {
                let Some(a) = live_mut(&mut self.attached, index, generation) else {
                    return TriggerSource::Recv;
                };
                let token = a.token;
                let Some(r) = &mut a.recv else {
                    return TriggerSource::Recv;
                };
                match c.buffer() {
                    Some(bid) => {
                        r.queue.push_back((bid, c.result.max(0) as u32));
                        r.failures = 0;
                    }
                    None if c.result != -libc::ENOBUFS => r.failures += 1,
                    None => {}
                }
                if !c.more() {
                    r.armed = false;
                    a.counters.rearmed += 1;
                    // No free buffer: armed again once some are taken; failing again and
                    // again (an error, end of file): stopped, the error kept; otherwise now.
                    if r.failures >= RECV_FAILURES {
                        a.counters.recv_error = Some(c.result);
                    } else if c.result != -libc::ENOBUFS {
                        self.rearm.push(index);
                    }
                }
                if !self.attached[index as usize]
                    .recv
                    .as_ref()
                    .is_none_or(|r| r.queue.is_empty())
                {
                    self.push_ready(Ready {
                        token,
                        readable: true,
                        writable: false,
                        closed: false,
                        hung_up: false,
                    });
                }
                TriggerSource::Recv
            }
            Kind::Cancel => TriggerSource::Syscall,
        }
    }
}
