//! Unix signals as futures: `ctrl_c()` for a server's graceful shutdown, and a [`Signal`]
//! stream for any catchable signal.
//!
//! How a signal reaches a task: the first listener of a signal installs a process-wide
//! handler (through `signal-hook-registry`, so it coexists with other libraries' handlers)
//! that bumps the signal's generation counter and writes to the signal's eventfd, both
//! async-signal-safe. Each listener watches its own duplicate of that eventfd in its loop's
//! epoll set, edge-triggered, and compares the generation with the one it saw last. The
//! eventfd's counter is never read: Linux's eventfd wakes its waiters on every write and
//! epoll queues an edge-triggered item again on each wake (mio's eventfd waker relies on
//! the same), so every signal reaches every loop that is not already holding an
//! undelivered one. Signals delivered while nobody reads coalesce into one, as the kernel's
//! own pending signals do.
//!
//! Once a signal has a listener, its default action (for `SIGINT` and `SIGTERM`, ending the
//! process) no longer happens, and an ignored signal (a `nohup`'d `SIGHUP`) is no longer
//! ignored, for the rest of the process's life, as with tokio's signals.
#![allow(unsafe_code)] // one call: installing the handler (see its SAFETY comment)

use std::collections::HashMap;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::task::{Context, Poll};

use rustix::event::{EventfdFlags, eventfd};

use crate::reactor::{Direction, Registration, wait_fn};

/// A catchable signal, by number.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SignalKind(i32);

impl SignalKind {
    /// `SIGINT`: Ctrl-C at the terminal.
    pub const fn interrupt() -> Self {
        SignalKind(libc::SIGINT)
    }

    /// `SIGTERM`: a polite request to stop (what `kill` and service managers send).
    pub const fn terminate() -> Self {
        SignalKind(libc::SIGTERM)
    }

    /// `SIGHUP`: the terminal went away, or (by convention) reload the configuration.
    pub const fn hangup() -> Self {
        SignalKind(libc::SIGHUP)
    }

    /// `SIGQUIT`.
    pub const fn quit() -> Self {
        SignalKind(libc::SIGQUIT)
    }

    /// `SIGUSR1`.
    pub const fn user_defined1() -> Self {
        SignalKind(libc::SIGUSR1)
    }

    /// `SIGUSR2`.
    pub const fn user_defined2() -> Self {
        SignalKind(libc::SIGUSR2)
    }

    /// `SIGCHLD`: a child process stopped or ended.
    pub const fn child() -> Self {
        SignalKind(libc::SIGCHLD)
    }

    /// Any signal by its number; [`signal`] refuses those that cannot be caught (and the
    /// real-time signals the C library keeps for itself).
    pub const fn from_raw(number: i32) -> Self {
        SignalKind(number)
    }

    /// The signal's number.
    pub const fn as_raw(self) -> i32 {
        self.0
    }
}

/// One signal's process-wide state: what its handler updates.
struct Slot {
    generation: AtomicU64,
    eventfd: OwnedFd,
}

/// The slot of `kind`, installing its handler the first time, and the generation a new
/// listener starts from: the slot's as it is now, or 0 for a slot made here, so that a
/// signal that comes between the handler's install and the listener's making is the first
/// listener's first delivery, not lost (the handler replaced the signal's default action).
fn slot(kind: SignalKind) -> io::Result<(Arc<Slot>, u64)> {
    static SLOTS: OnceLock<Mutex<HashMap<i32, Arc<Slot>>>> = OnceLock::new();
    let mut slots = SLOTS
        .get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    if let Some(slot) = slots.get(&kind.0) {
        return Ok((Arc::clone(slot), slot.generation.load(Ordering::SeqCst)));
    }
    let number = kind.0;
    // 32 up to SIGRTMIN are the C library's own (its threads' cancellation and setxid).
    let reserved = (32..libc::SIGRTMIN()).contains(&number);
    if number <= 0
        || number > libc::SIGRTMAX()
        || reserved
        || signal_hook_registry::FORBIDDEN.contains(&number)
    {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("signal {number} cannot be caught"),
        ));
    }
    let slot = Arc::new(Slot {
        generation: AtomicU64::new(0),
        eventfd: eventfd(0, EventfdFlags::NONBLOCK | EventfdFlags::CLOEXEC)?,
    });
    let in_handler = Arc::clone(&slot);
    // SAFETY: the action only does what a signal handler may: an atomic add and a `write`
    // system call (rustix calls the kernel directly: no lock, no allocation), through an
    // `Arc` it only dereferences; it cannot panic. Installed, it (and its `Arc`) stays for
    // the rest of the process; refused, it is dropped.
    unsafe {
        signal_hook_registry::register(number, move || {
            in_handler.generation.fetch_add(1, Ordering::SeqCst);
            let _ = rustix::io::write(&in_handler.eventfd, &1u64.to_ne_bytes());
        })
    }?;
    slots.insert(number, Arc::clone(&slot));
    Ok((slot, 0))
}

/// A stream of one signal's deliveries, received on the loop of the thread that made it
/// ([`signal`]).
#[derive(Debug)]
pub struct Signal {
    slot: Arc<Slot>,
    seen: u64,
    reg: Registration,
    /// This listener's duplicate of the signal's eventfd, watched by `reg`.
    fd: OwnedFd,
}

impl std::fmt::Debug for Slot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Slot")
            .field("generation", &self.generation.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

/// Listens for `kind` from now on: each [`Signal::recv`] completes once the signal has come
/// since the last (or since this call). Every listener of a signal sees it. A `Signal`
/// polled after its runtime is gone returns `None` (no loop watches its descriptor any
/// more), as tokio's does.
///
/// ```no_run
/// use softtimer_async::{Runtime, signal::{SignalKind, signal}};
///
/// let rt = Runtime::new().unwrap();
/// rt.block_on(async {
///     let mut hangups = signal(SignalKind::hangup()).unwrap();
///     while hangups.recv().await.is_some() {
///         println!("reloading the configuration");
///     }
/// });
/// ```
///
/// # Errors
///
/// `InvalidInput` for a signal that cannot be caught (`SIGKILL`, `SIGSTOP`, `SIGSEGV`,
/// `SIGILL`, `SIGFPE`), one the C library keeps (32 up to `SIGRTMIN`) or a number that is
/// no signal; the system's error when no eventfd can be made (the handler, if installed by
/// then, stays); an error outside a runtime thread, before anything is installed.
pub fn signal(kind: SignalKind) -> io::Result<Signal> {
    // Before the handler is installed: a listener refused for want of a runtime changes
    // nothing.
    let shared = crate::executor::context_shared().ok_or_else(crate::reactor::no_runtime)?;
    let (slot, seen) = slot(kind)?;
    let fd = slot.eventfd.try_clone()?;
    // Readability only: an eventfd is always writable.
    let reg = Registration::new_read_only(shared, fd.as_fd())?;
    Ok(Signal {
        slot,
        seen,
        reg,
        fd,
    })
}

impl Signal {
    /// Waits for the next delivery: `Some(())`, or `None` once the runtime the listener was
    /// made on has shut down (a signal stream does not end otherwise), as tokio's.
    pub async fn recv(&mut self) -> Option<()> {
        wait_fn(|cx| self.poll_recv(cx)).await
    }

    /// [`recv`](Signal::recv) as a poll.
    pub fn poll_recv(&mut self, cx: &mut Context<'_>) -> Poll<Option<()>> {
        let (slot, seen) = (&self.slot, &mut self.seen);
        self.reg
            .poll_io(Direction::Read, cx, || {
                let now = slot.generation.load(Ordering::SeqCst);
                if now == *seen {
                    // Nothing since: wait for the next edge of the eventfd.
                    return Err(io::ErrorKind::WouldBlock.into());
                }
                *seen = now;
                Ok(())
            })
            .map(|r| r.ok())
    }
}

impl Drop for Signal {
    fn drop(&mut self) {
        // The duplicate shares the eventfd's open file, which stays open: closing it would
        // not take it out of the epoll set.
        let _ = self.reg.shared().timers.deregister(self.fd.as_fd());
    }
}

/// Completes at the next Ctrl-C (`SIGINT`). From its first poll on (when it installs the
/// handler), Ctrl-C no longer ends the process: the program decides (usually, a graceful
/// shutdown). A Ctrl-C between two `ctrl_c()` futures is seen by neither: to catch every
/// one, keep a [`signal`] listener. Each `ctrl_c()` makes its own listener (a descriptor
/// registered with the loop, a few system calls): in a loop that selects on it for every
/// packet, make one `signal(SignalKind::interrupt())` before the loop and select on its
/// `recv()` instead, which is cancel-safe and costs nothing while no signal comes.
///
/// ```no_run
/// use softtimer_async::{Runtime, TcpListener, signal};
///
/// let rt = Runtime::new().unwrap();
/// rt.block_on(async {
///     let listener = TcpListener::bind("127.0.0.1:8080").await.unwrap();
///     let serve = softtimer_async::spawn_local(async move {
///         while let Ok((_stream, _peer)) = listener.accept().await { /* … */ }
///     });
///     signal::ctrl_c().await.unwrap();
///     // Stop accepting; the runtime's drop after `block_on` cancels what is left.
///     serve.abort();
/// });
/// ```
///
/// # Errors
///
/// As [`signal`]'s.
pub async fn ctrl_c() -> io::Result<()> {
    signal(SignalKind::interrupt())?.recv().await;
    Ok(())
}
