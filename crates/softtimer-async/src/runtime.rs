//! The runtime: its loops, how it is built, and the handle that spawns onto it.

use std::future::Future;
use std::io;
use std::marker::PhantomData;
use std::pin::pin;
use std::rc::Rc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, mpsc};
use std::thread::JoinHandle as ThreadHandle;
use std::time::Duration;

use softtimer::{Clock, SimClock, Span, SystemClock};
use softtimer_rt::{DeadlineDesign, LoopConfig};

use crate::blocking::{self, BlockingPool};
use crate::clock::RuntimeClock;
use crate::executor::{self, Enter, LocalLoop, LoopShared};
use crate::precision::Precision;
use crate::task::{JoinHandle, spawn_local_onto, spawn_onto};

/// Builds a [`Runtime`]: how many loops, how precise, pinned or not.
///
/// ```
/// use softtimer_async::{Precision, Runtime};
///
/// let rt = Runtime::builder().threads(2).precision(Precision::Coarse).build().unwrap();
/// let handle = rt.handle();
/// let on_worker = rt.block_on(async move {
///     // Loop 1 runs on a worker thread; loop 0 on this one, inside block_on.
///     handle.spawn_on(1, async { std::thread::current().name().map(String::from) }).await
/// });
/// assert_eq!(on_worker.unwrap().as_deref(), Some("softtimer-async-1"));
/// ```
#[derive(Clone, Debug)]
pub struct Builder {
    threads: usize,
    precision: Precision,
    pin: bool,
    sim: Option<SimClock>,
    config: LoopConfig,
    max_blocking_threads: usize,
    blocking_keep_alive: Duration,
}

impl Default for Builder {
    fn default() -> Self {
        Builder {
            threads: 1,
            precision: Precision::default(),
            pin: true,
            sim: None,
            config: Builder::default_loop_config(),
            max_blocking_threads: blocking::MAX_THREADS,
            blocking_keep_alive: blocking::KEEP_ALIVE,
        }
    }
}

impl Builder {
    /// The loops' configuration a builder starts from (see [`Builder::loop_config`]).
    pub fn default_loop_config() -> LoopConfig {
        LoopConfig {
            // The runtime schedules no deadlines: serve them (never) from the backstop
            // thread rather than keep a watcher thread per loop.
            deadlines: DeadlineDesign::LazyTimerfd,
            ..LoopConfig::default()
        }
    }

    /// Runs `n` independent loops (at least 1; default 1), each with its own facility: loop
    /// 0 on the thread that calls [`Runtime::block_on`], loops 1.. on worker threads named
    /// `softtimer-async-N`. A task stays on the loop it was spawned onto, and so do the
    /// sockets and timers it makes; tasks spawned from outside the loops go to the workers
    /// ([`Handle::spawn`]). Nothing moves work between loops: spread it yourself, with
    /// [`Handle::spawn_on`] and a listener per loop
    /// ([`TcpListener::bind_reuse_port`](crate::TcpListener::bind_reuse_port)).
    pub fn threads(mut self, n: usize) -> Self {
        self.threads = n;
        self
    }

    /// How precisely timers fire (default [`Precision::Calibrated`]).
    pub fn precision(mut self, precision: Precision) -> Self {
        self.precision = precision;
        self
    }

    /// With more than one loop, pin loop `i` to the `i`-th CPU this process may use, when it
    /// may use that many (default on). Loop 0's thread is the one that builds the runtime:
    /// it is pinned from `build` on, and gets back the CPUs it had when the runtime is
    /// dropped. A `std::thread` it starts meanwhile inherits that one CPU, as Linux threads
    /// do (the runtime's blocking pool does not: it runs on the CPUs the caller had); start
    /// such threads before building the runtime, or turn pinning off.
    pub fn pin(mut self, pin: bool) -> Self {
        self.pin = pin;
        self
    }

    /// Runs on a simulated clock (for deterministic tests): when no task can run, no
    /// descriptor is ready and no blocking work ([`spawn_blocking`](crate::spawn_blocking),
    /// a name lookup) is queued or running, time jumps to the next due timer. Times are
    /// `std::time::Instant`s that start at the runtime's build and advance with the clock.
    /// So blocking work must not itself wait for the simulated time to move (a closure that
    /// sleeps through `Handle::block_on`, or waits for a task that does): time would wait for
    /// it, and it for time, for ever. One loop only: [`build`](Self::build) refuses it with
    /// [`threads`](Self::threads) above 1.
    pub fn simulated(mut self, clock: SimClock) -> Self {
        self.sim = Some(clock);
        self
    }

    /// The loops' configuration beyond precision (statistics, the backstop's frequency, …);
    /// its spin window is set from [`Builder::precision`]. This replaces the whole
    /// configuration, whose default here differs from [`LoopConfig::default`] in one field:
    /// `deadlines` is [`DeadlineDesign::LazyTimerfd`] (the runtime schedules no deadlines, so
    /// no loop needs a watcher thread). Start from [`Builder::default_loop_config`] to change
    /// one field and keep that.
    ///
    /// ```
    /// use softtimer_async::{Builder, LoopConfig, Runtime};
    ///
    /// let rt = Runtime::builder()
    ///     .loop_config(LoopConfig { stats: true, ..Builder::default_loop_config() })
    ///     .build()
    ///     .unwrap();
    /// rt.block_on(async { softtimer_async::time::sleep(std::time::Duration::ZERO).await });
    /// assert!(rt.trigger_stats().is_some());
    /// ```
    pub fn loop_config(mut self, config: LoopConfig) -> Self {
        self.config = config;
        self
    }

    /// The most threads [`spawn_blocking`](crate::spawn_blocking) work runs on at once
    /// (default 512, as tokio's; at least 1). Work beyond waits in a queue for the next
    /// thread to finish; a thread idle for [`Builder::blocking_keep_alive`] exits.
    ///
    /// ```
    /// use softtimer_async::Runtime;
    ///
    /// let rt = Runtime::builder().max_blocking_threads(4).build().unwrap();
    /// let sum = rt.block_on(async {
    ///     let parts: Vec<_> = (0..8u64)
    ///         .map(|i| softtimer_async::spawn_blocking(move || (i * 1000..(i + 1) * 1000).sum::<u64>()))
    ///         .collect();
    ///     let mut sum = 0;
    ///     for part in parts {
    ///         sum += part.await.unwrap();
    ///     }
    ///     sum
    /// });
    /// assert_eq!(sum, (0..8000).sum::<u64>());
    /// ```
    pub fn max_blocking_threads(mut self, n: usize) -> Self {
        self.max_blocking_threads = n;
        self
    }

    /// How long a thread for [`spawn_blocking`](crate::spawn_blocking) work waits idle for
    /// more before it exits (default 10 s, as tokio's; `Duration::MAX`: never).
    ///
    /// ```
    /// use std::time::{Duration, Instant};
    /// use softtimer_async::Runtime;
    ///
    /// let rt = Runtime::builder()
    ///     .blocking_keep_alive(Duration::from_millis(50))
    ///     .build()
    ///     .unwrap();
    /// rt.block_on(async { softtimer_async::spawn_blocking(|| ()).await.unwrap() });
    /// // The thread leaves once it has been idle 50 ms.
    /// let start = Instant::now();
    /// while rt.stats().blocking_threads > 0 {
    ///     assert!(start.elapsed() < Duration::from_secs(10));
    ///     std::thread::sleep(Duration::from_millis(5));
    /// }
    /// ```
    pub fn blocking_keep_alive(mut self, keep_alive: Duration) -> Self {
        self.blocking_keep_alive = keep_alive;
        self
    }

    /// Builds the runtime: loop 0 here, the workers on their threads.
    ///
    /// # Errors
    ///
    /// `InvalidInput` for zero threads, and for a simulated clock with more than one; the
    /// error of making a loop (its `epoll`, `eventfd`
    /// or backstop helper) or of starting a worker thread, after the loops already made are
    /// shut down and their threads joined.
    pub fn build(self) -> io::Result<Runtime> {
        if self.threads == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "a runtime needs at least one thread",
            ));
        }
        if self.sim.is_some() && self.threads > 1 {
            // Each idle loop would jump the one clock to its own next timer.
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "a simulated clock runs one loop: loops sharing it would each jump it",
            ));
        }
        let mut config = self.config.clone();
        config.spin_window = self.precision.spin_window(config.interrupt_clock_hz);
        if self.sim.is_some() {
            // Simulated time: no helper thread fires anything behind the test's back.
            config.backstop = false;
        }
        let clock = match &self.sim {
            Some(sim) => RuntimeClock::Sim(sim.clone()),
            None => RuntimeClock::System(SystemClock::new()),
        };
        let cpus = allowed_cpus();
        let pin = self.pin && self.threads > 1 && cpus.len() >= self.threads;
        let caller_cpus = pin
            .then(|| rustix::thread::sched_getaffinity(None).ok())
            .flatten();
        // Blocking work runs where the caller may, not confined to a loop's CPU.
        let blocking = BlockingPool::new(
            self.max_blocking_threads,
            self.blocking_keep_alive,
            caller_cpus,
        );
        if caller_cpus.is_some() {
            pin_current_thread(cpus[0]);
        }
        let local = match LocalLoop::new(0, config.clone(), clock.clone()) {
            Ok(local) => Rc::new(local),
            Err(e) => {
                restore_affinity(caller_cpus.as_ref());
                return Err(io::Error::other(e));
            }
        };
        let mut loops = vec![Arc::clone(&local.shared)];
        let mut workers = Vec::new();
        let mut failure = None;
        for index in 1..self.threads {
            let (tx, rx) = mpsc::channel();
            let (config, clock) = (config.clone(), clock.clone());
            let cpu = pin.then(|| cpus.get(index).copied()).flatten();
            let spawned = std::thread::Builder::new()
                .name(format!("softtimer-async-{index}"))
                .spawn(move || worker(index, cpu, config, clock, tx));
            match spawned {
                Ok(thread) => workers.push(thread),
                Err(e) => {
                    // The runtime made below shuts down and joins the loops already started.
                    failure = Some(e);
                    break;
                }
            }
            match rx.recv() {
                Ok(Ok(shared)) => loops.push(shared),
                Ok(Err(e)) => {
                    failure = Some(io::Error::other(e));
                    break;
                }
                Err(_) => {
                    failure = Some(io::Error::other("a runtime worker thread died starting"));
                    break;
                }
            }
        }
        let inner = Arc::new(HandleInner {
            loops,
            next: AtomicUsize::new(0),
            blocking,
        });
        for shared in &inner.loops {
            let _ = shared.handle.set(Arc::downgrade(&inner));
        }
        inner.blocking.set_runtime(Arc::downgrade(&inner));
        let runtime = Runtime {
            handle: Handle { inner },
            local: Some(local),
            workers,
            caller_cpus,
            _not_send: PhantomData,
        };
        match failure {
            Some(e) => Err(e),
            None => Ok(runtime),
        }
    }
}

fn worker(
    index: usize,
    cpu: Option<usize>,
    config: LoopConfig,
    clock: RuntimeClock,
    started: mpsc::Sender<Result<Arc<LoopShared>, softtimer_rt::RtError>>,
) {
    if let Some(cpu) = cpu {
        pin_current_thread(cpu);
    }
    let local = match LocalLoop::new(index, config, clock) {
        Ok(local) => Rc::new(local),
        Err(e) => {
            let _ = started.send(Err(e));
            return;
        }
    };
    let _ = started.send(Ok(Arc::clone(&local.shared)));
    let enter = Enter::new(&local);
    let shutdown = ShutdownOnExit(Rc::clone(&local));
    let never = pin!(std::future::pending::<()>());
    let _ = local.run(never);
    drop(shutdown);
    drop(enter);
}

/// Shuts a worker's loop down however its thread leaves the loop's run: a panic that
/// escapes the run (a misused context guard caught after a task's poll, a failing epoll)
/// shuts the loop down too, so that its tasks are cancelled on their own thread, its
/// sockets' and timers' waiters hear of it, and what is sent to it afterwards comes back
/// cancelled instead of waiting in a queue nobody drains. While unwinding, the thread may be
/// left in another runtime's context: that is set aside for the shutdown and restored (a
/// task future whose drop panics then aborts the process, as any panic while unwinding).
struct ShutdownOnExit(Rc<LocalLoop>);

impl Drop for ShutdownOnExit {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let _shutting_down = Enter::for_shutdown(&self.0);
            self.0.shutdown();
        } else {
            self.0.shutdown();
        }
    }
}

/// The CPUs this thread may run on.
fn allowed_cpus() -> Vec<usize> {
    match rustix::thread::sched_getaffinity(None) {
        Ok(set) => (0..rustix::thread::CpuSet::MAX_CPU)
            .filter(|&c| set.is_set(c))
            .collect(),
        Err(_) => Vec::new(),
    }
}

fn pin_current_thread(cpu: usize) {
    let mut set = rustix::thread::CpuSet::new();
    set.set(cpu);
    let _ = rustix::thread::sched_setaffinity(None, &set);
}

/// Gives this thread back the CPUs it had before the runtime pinned it.
fn restore_affinity(cpus: Option<&rustix::thread::CpuSet>) {
    if let Some(cpus) = cpus {
        let _ = rustix::thread::sched_setaffinity(None, cpus);
    }
}

/// An async runtime whose reactor is the soft-timer event loop (see the crate
/// documentation).
///
/// It has one or more loops ([`Builder::threads`]); loop 0 runs on the thread that calls
/// [`Runtime::block_on`], for as long as that call lasts (as tokio's current-thread runtime
/// does), and is made on the thread that builds the runtime, so the runtime is not `Send`.
/// Dropping it cancels every task, shuts every loop down and joins every thread it started,
/// but for the threads still running a [`spawn_blocking`](crate::spawn_blocking) closure,
/// which exit when it returns (blocking work not started is cancelled);
/// [`Runtime::shutdown_timeout`] waits for those up to a bound. Its timers and sockets still
/// awaited elsewhere after the drop (by another runtime's task, or another executor) are
/// woken: a socket's operation then returns an error, and a timer whose deadline is ahead
/// panics, as tokio's do ([`time`](crate::time), [`net`](crate::net)).
///
/// ```
/// use std::time::{Duration, Instant};
/// use softtimer_async::{Runtime, time};
///
/// let rt = Runtime::new().unwrap();
/// let late = rt.block_on(async {
///     let deadline = Instant::now() + Duration::from_micros(100);
///     time::sleep_until(deadline).await;
///     Instant::now() - deadline
/// });
/// println!("woke {late:?} after the deadline");
/// ```
pub struct Runtime {
    handle: Handle,
    local: Option<Rc<LocalLoop>>,
    workers: Vec<ThreadHandle<()>>,
    /// The CPUs the building thread (loop 0's) had before `build` pinned it.
    caller_cpus: Option<rustix::thread::CpuSet>,
    _not_send: PhantomData<*const ()>,
}

impl Runtime {
    /// A runtime with one loop, on this thread, at the default precision.
    ///
    /// # Errors
    ///
    /// As [`Builder::build`]'s.
    pub fn new() -> io::Result<Runtime> {
        Builder::default().build()
    }

    /// A builder for other shapes.
    pub fn builder() -> Builder {
        Builder::default()
    }

    /// Runs `future` to completion on this thread (loop 0), and loop 0's tasks meanwhile.
    ///
    /// # Panics
    ///
    /// When called from a thread that runs a loop already (inside a task or another
    /// `block_on`): that would block the loop; spawn the future instead.
    pub fn block_on<F: Future>(&self, future: F) -> F::Output {
        let local = self
            .local
            .as_ref()
            .expect("loop 0 lives as long as the runtime");
        let _enter = Enter::new(local);
        let future = pin!(future);
        local
            .run(future)
            .expect("loop 0 is asked to shut down only when the runtime is dropped")
    }

    /// Puts this thread in the runtime's context without running it, as tokio's `enter`,
    /// for as long as the guard lives: sockets made here (`from_std`) register with loop 0,
    /// tasks spawned here ([`spawn`](crate::spawn), [`spawn_local`](crate::spawn_local))
    /// wait in its queue and run in the next [`block_on`](Self::block_on), and
    /// [`Handle::current`] finds the runtime. No task runs until then (on a runtime of
    /// several loops, a task spawned here goes to loop 0 as `block_on`'s do;
    /// [`Handle::spawn_on`] puts it on a worker); a socket call made here is a trigger state
    /// like any other, so a timer due by then fires at it and its task runs in `block_on`.
    /// Inside `block_on` or one of its tasks it changes nothing. Guards of several runtimes
    /// nest: drop them in the reverse order, never inside a `block_on` begun after
    /// them, and never hold one across an `.await` (the task's loop would go on in the
    /// other runtime's context); each of these panics, as tokio's do.
    ///
    /// ```
    /// use softtimer_async::{Runtime, UdpSocket};
    ///
    /// let rt = Runtime::new().unwrap();
    /// let _context = rt.enter();
    /// // Synchronous set-up code, as with tokio's guard.
    /// let socket = UdpSocket::from_std(std::net::UdpSocket::bind("127.0.0.1:0").unwrap()).unwrap();
    /// let task = softtimer_async::spawn(async { 7 });
    /// let seven = rt.block_on(async move {
    ///     let to = socket.local_addr().unwrap();
    ///     socket.send_to(b"hi", to).await.unwrap();
    ///     task.await.unwrap()
    /// });
    /// assert_eq!(seven, 7);
    /// ```
    ///
    /// # Panics
    ///
    /// Its guard panics when dropped out of order (see above), and moves nothing then.
    pub fn enter(&self) -> EnterGuard<'_> {
        let local = self
            .local
            .as_ref()
            .expect("loop 0 lives as long as the runtime");
        EnterGuard {
            _enter: Enter::context(local),
            _runtime: PhantomData,
        }
    }

    /// Spawns `future` (see [`Handle::spawn`]).
    pub fn spawn<F>(&self, future: F) -> JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.handle.spawn(future)
    }

    /// Runs `f` on a thread for blocking work (see [`Handle::spawn_blocking`]).
    pub fn spawn_blocking<F, R>(&self, f: F) -> JoinHandle<R>
    where
        F: FnOnce() -> R + Send + 'static,
        R: Send + 'static,
    {
        self.handle.spawn_blocking(f)
    }

    /// Spawns a future that need not be `Send` onto loop 0 (it runs inside `block_on`).
    pub fn spawn_local<F>(&self, future: F) -> JoinHandle<F::Output>
    where
        F: Future + 'static,
        F::Output: 'static,
    {
        spawn_local_onto(&self.handle.inner.loops[0], future)
    }

    /// A handle to the runtime, for other threads.
    pub fn handle(&self) -> Handle {
        self.handle.clone()
    }

    /// Counters summed over the loops.
    pub fn stats(&self) -> RuntimeStats {
        self.handle.stats()
    }

    /// Loop 0's trigger-state statistics, when [`LoopConfig::stats`] is on.
    pub fn trigger_stats(&self) -> Option<softtimer::TriggerStats> {
        self.local.as_ref()?.event_loop().stats()
    }
}

impl Runtime {
    /// Shuts the runtime down as dropping it does, but waits up to `timeout` for the
    /// [`spawn_blocking`](crate::spawn_blocking) closures that are running to return, and
    /// joins their threads; a closure still running then is left to finish on its thread.
    /// Every task and every queued blocking closure is cancelled either way.
    ///
    /// The bound is on the blocking closures only: cancelling the tasks and joining the
    /// loops' threads come first and take what they take (a task stuck in a blocking call
    /// holds its loop's thread). Called from a task of another runtime, it blocks that
    /// task's loop meanwhile (tokio's panics there).
    ///
    /// ```
    /// use std::sync::atomic::{AtomicBool, Ordering};
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use softtimer_async::Runtime;
    ///
    /// let rt = Runtime::new().unwrap();
    /// let written = Arc::new(AtomicBool::new(false));
    /// let flag = Arc::clone(&written);
    /// let started = rt.block_on(async move {
    ///     let (tx, rx) = std::sync::mpsc::channel();
    ///     drop(softtimer_async::spawn_blocking(move || {
    ///         tx.send(()).unwrap();
    ///         std::thread::sleep(Duration::from_millis(20)); // a file being written
    ///         flag.store(true, Ordering::SeqCst);
    ///     }));
    ///     softtimer_async::spawn_blocking(move || rx.recv().is_ok()).await.unwrap()
    /// });
    /// assert!(started);
    /// rt.shutdown_timeout(Duration::from_secs(10));
    /// assert!(written.load(Ordering::SeqCst));
    /// ```
    pub fn shutdown_timeout(mut self, timeout: Duration) {
        self.shutdown(timeout);
    }

    /// Shuts the runtime down without waiting for running blocking closures: what dropping
    /// it does, spelled out.
    pub fn shutdown_background(self) {
        drop(self);
    }

    fn shutdown(&mut self, blocking: Duration) {
        // Loop 0 lives until the runtime is shut down: gone, it was (`shutdown_timeout`).
        let Some(local) = self.local.take() else {
            return;
        };
        for shared in &self.handle.inner.loops[1..] {
            shared.request_shutdown();
        }
        let enter = Enter::for_shutdown(&local);
        local.shutdown();
        drop(enter);
        for worker in self.workers.drain(..) {
            let _ = worker.join();
        }
        self.handle.inner.blocking.shutdown(blocking);
        restore_affinity(self.caller_cpus.take().as_ref());
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        self.shutdown(Duration::ZERO);
    }
}

/// This thread is in a runtime's context while it lives (see [`Runtime::enter`]).
#[must_use = "the thread leaves the runtime's context when the guard is dropped"]
pub struct EnterGuard<'a> {
    _enter: Enter,
    _runtime: PhantomData<&'a Runtime>,
}

impl std::fmt::Debug for EnterGuard<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EnterGuard").finish_non_exhaustive()
    }
}

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtime")
            .field("threads", &self.handle.threads())
            .finish_non_exhaustive()
    }
}

pub(crate) struct HandleInner {
    pub loops: Vec<Arc<LoopShared>>,
    next: AtomicUsize,
    /// Threads for [`Handle::spawn_blocking`].
    blocking: Arc<BlockingPool>,
}

impl HandleInner {
    /// Whether blocking work is queued or running on the runtime's pool.
    pub(crate) fn blocking_in_flight(&self) -> bool {
        self.blocking.in_flight()
    }

    /// Wakes the loops on a simulated clock (the pool's work has drained: time may jump).
    pub(crate) fn wake_simulated_loops(&self) {
        for shared in &self.loops {
            shared.wake_if_simulated();
        }
    }
}

/// A cloneable, `Send + Sync` handle to a [`Runtime`]: spawns onto its loops from any
/// thread.
#[derive(Clone)]
pub struct Handle {
    pub(crate) inner: Arc<HandleInner>,
}

impl Handle {
    /// The handle of the runtime whose loop this thread runs, or for which it runs blocking
    /// work ([`spawn_blocking`](crate::spawn_blocking)); `None` elsewhere.
    pub fn try_current() -> Option<Handle> {
        let inner = match executor::current_shared() {
            Some(shared) => shared.handle.get()?.upgrade()?,
            None => blocking::pool_runtime()?,
        };
        Some(Handle { inner })
    }

    /// The handle of the runtime whose loop this thread runs, or for which it runs blocking
    /// work.
    ///
    /// # Panics
    ///
    /// Outside a runtime's threads.
    #[track_caller]
    pub fn current() -> Handle {
        Self::try_current()
            .expect("Handle::current called outside a softtimer-async runtime thread")
    }

    /// How many loops the runtime has.
    pub fn threads(&self) -> usize {
        self.inner.loops.len()
    }

    /// The loop a timer or socket made here belongs to: this thread's, when it runs one of
    /// the runtime's loops; otherwise the next in turn (see [`Handle::spawn`]).
    pub(crate) fn loop_here(&self) -> Arc<LoopShared> {
        self.this_threads_loop().unwrap_or_else(|| self.next_loop())
    }

    /// The loop this thread runs, when it is one of this runtime's.
    pub(crate) fn this_threads_loop(&self) -> Option<Arc<LoopShared>> {
        let mine = |here: *const LoopShared| {
            self.inner
                .loops
                .iter()
                .find(|l| Arc::as_ptr(l) == here)
                .cloned()
        };
        // A loop thread or a runtime's context: the loop is named by a pointer compare (a
        // timer made per request, as hyper's is, takes this path); otherwise the loop
        // serving a `Handle::block_on` thread, if any.
        match executor::current_ptr() {
            here if here.is_null() => {
                crate::foreign::shared().and_then(|shared| mine(Arc::as_ptr(&shared)))
            }
            here => mine(here),
        }
    }

    /// The runtime's time (see [`crate::time::now`]), read without a thread-local: the
    /// system clock's, or the simulated clock's of a runtime on one (which has one loop).
    #[cfg(any(feature = "quinn", feature = "hyper"))]
    pub(crate) fn now(&self) -> std::time::Instant {
        self.inner.loops[0].time.now()
    }

    /// The worker loops in turn; loop 0 where it is the only one. Loop 0 runs only inside
    /// `block_on`, so work sent from outside goes where a thread always runs it.
    pub(crate) fn next_loop(&self) -> Arc<LoopShared> {
        let loops = &self.inner.loops;
        let n = self.inner.next.fetch_add(1, Ordering::Relaxed);
        let index = match loops.len() {
            1 => 0,
            len => 1 + n % (len - 1),
        };
        Arc::clone(&loops[index])
    }

    /// Spawns `future`: onto this thread's loop when called from one of the runtime's loop
    /// threads (a task stays on its thread), or onto loop 0 from a thread in the runtime's
    /// context ([`Runtime::enter`]), where it waits for `block_on`; otherwise onto the
    /// worker loops (1..) in turn,
    /// which always run, as tokio's multi-thread runtime runs spawned tasks on its workers
    /// rather than in `block_on`; with one loop, onto loop 0, which runs inside `block_on`.
    pub fn spawn<F>(&self, future: F) -> JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        spawn_onto(&self.loop_here(), future)
    }

    /// Spawns `future` onto loop `index` (modulo the number of loops).
    pub fn spawn_on<F>(&self, index: usize, future: F) -> JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        let shared = &self.inner.loops[index % self.inner.loops.len()];
        spawn_onto(shared, future)
    }

    /// Runs `future` to completion on the calling thread, which runs none of the runtime's
    /// loops: a blocking task ([`spawn_blocking`](crate::spawn_blocking)), a thread of the
    /// program's own, a destructor that runs on such a thread (one that runs on a loop's
    /// thread, in a task or in the runtime's shutdown, is refused: see below). The future is in the runtime's context: its timers and
    /// sockets belong to a worker loop (the next in turn, as [`Handle::spawn`] picks), which
    /// serves them from its own thread while this one sleeps between wakes, and what it
    /// spawns goes to that loop.
    ///
    /// On a runtime of one loop, the serving loop is loop 0, which runs only inside
    /// [`Runtime::block_on`]: until a thread runs it, the future's sockets wait for
    /// readiness and its spawned tasks wait to run (as with tokio's `current_thread`
    /// runtime), and its timers fire from the loop's backstop, up to the backstop's interval
    /// late.
    ///
    /// ```
    /// use std::time::Duration;
    /// use softtimer_async::{Handle, Runtime};
    ///
    /// let rt = Runtime::builder().threads(2).build().unwrap();
    /// let waited = rt.block_on(rt.spawn_blocking(|| {
    ///     // Synchronous code on a blocking thread, calling async code.
    ///     Handle::current().block_on(async {
    ///         let t = std::time::Instant::now();
    ///         softtimer_async::time::sleep(Duration::from_micros(200)).await;
    ///         t.elapsed()
    ///     })
    /// }));
    /// assert!(waited.unwrap() >= Duration::from_micros(200));
    /// ```
    ///
    /// # Panics
    ///
    /// On a thread that runs a loop or is in a runtime's context (inside a task,
    /// [`Runtime::block_on`], [`Runtime::enter`]'s guard, or another `Handle::block_on`):
    /// blocking there would stop that loop; await the future, or spawn it. And, as in a
    /// task, where the future awaits a timer after the runtime has been dropped.
    #[track_caller]
    pub fn block_on<F: Future>(&self, future: F) -> F::Output {
        assert!(
            executor::current_shared().is_none(),
            "softtimer-async: Handle::block_on called on a thread that runs a loop or is in a \
             runtime's context (a task, block_on, an enter guard, or another \
             Handle::block_on); await the future or spawn it instead"
        );
        crate::foreign::block_on(self.next_loop(), future)
    }

    /// Runs `f` on one of the runtime's threads for blocking work (see
    /// [`spawn_blocking`](crate::spawn_blocking)), from any thread. After the runtime is
    /// dropped, `f` is cancelled (the handle reports a cancelled task).
    ///
    /// # Panics
    ///
    /// When no thread can be started for `f` and none of the pool's is alive to take it.
    ///
    /// ```
    /// use softtimer_async::Runtime;
    ///
    /// let rt = Runtime::new().unwrap();
    /// let handle = rt.handle();
    /// let answer = handle.spawn_blocking(|| 6 * 7);
    /// assert_eq!(rt.block_on(answer).unwrap(), 42);
    /// ```
    pub fn spawn_blocking<F, R>(&self, f: F) -> JoinHandle<R>
    where
        F: FnOnce() -> R + Send + 'static,
        R: Send + 'static,
    {
        blocking::spawn_on_pool(&self.inner.blocking, f)
    }

    /// Soft events pending, summed over the loops (timers armed, paced departures queued).
    pub fn pending_timers(&self) -> usize {
        self.inner.loops.iter().map(|l| l.timers.pending()).sum()
    }

    /// Counters summed over the loops.
    pub fn stats(&self) -> RuntimeStats {
        let mut stats = RuntimeStats::default();
        for l in &self.inner.loops {
            let c = &l.counters;
            let get = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
            stats.polls += get(&c.polls);
            stats.io_polls += get(&c.io_polls);
            stats.parks += get(&c.parks);
            stats.blocked_parks += get(&c.blocked_parks);
            stats.remote_wakes += get(&c.remote_wakes);
            stats.early_fires += get(&c.early_fires);
            let spin = Span::from_ticks(get(&c.idle_spin_ticks));
            stats.idle_spin += l.time.clock().duration(spin);
        }
        stats.blocking_threads = self.inner.blocking.threads();
        stats
    }
}

impl std::fmt::Debug for Handle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Handle")
            .field("threads", &self.threads())
            .finish()
    }
}

/// What a runtime's loops counted: the design's costs as counts, and the time they spent
/// spinning.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RuntimeStats {
    /// Polls of tasks and of `block_on`'s future (each followed by a trigger state).
    pub polls: u64,
    /// Non-blocking looks at the descriptors while tasks kept a loop busy.
    pub io_polls: u64,
    /// Times a loop had nothing to run and carried out its idle policy.
    pub parks: u64,
    /// Parks that blocked in `epoll_wait`.
    pub blocked_parks: u64,
    /// Tasks woken from another thread (or the backstop thread).
    pub remote_wakes: u64,
    /// Timers whose soft event fired before their `std::time::Instant` deadline (the TSC's
    /// rate against `CLOCK_MONOTONIC`) and were armed again for the rest.
    pub early_fires: u64,
    /// Time the loops spent spinning in their idle policy, with nothing to run: for a timer
    /// due within the spin window, and for the few µs after a wake-up that came a hair
    /// early. Measured on the loops' clock from the start to the end of each spin, so a
    /// thread descheduled mid-spin counts that time too. A spin is charged as CPU time, but
    /// it is waiting, not any task's work: a program with other work does that work there
    /// instead.
    pub idle_spin: Duration,
    /// Threads alive in the pool for [`spawn_blocking`](crate::spawn_blocking) work, busy
    /// or idle (not a count: the number now).
    pub blocking_threads: usize,
}
