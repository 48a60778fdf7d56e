//! CPU time and CPU placement: what a process or thread used (`clock_gettime`'s CPU clocks,
//! `getrusage` for waited children), pinning a thread or another process to one CPU, and
//! which CPUs a measurement puts its server and its load on.

/// CPU time the calling thread has used, ns.
pub fn thread_cpu_ns() -> u64 {
    let ts = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    (ts.tv_sec as u64) * 1_000_000_000 + ts.tv_nsec as u64
}

/// CPU time (user + system) of the whole process, all its threads, ns.
pub fn process_cpu_ns() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ProcessCPUTime);
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

/// CPU time (user + system) of every child this process has waited for, ns: what
/// `getrusage(RUSAGE_CHILDREN)` reports. Read before and after waiting for one child, the
/// difference is that child's whole CPU time, all its threads included.
pub fn waited_children_cpu_ns() -> u64 {
    // SAFETY: an all-zero `rusage` is a valid value; `getrusage` only writes into it.
    #[allow(unsafe_code)]
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_CHILDREN, &mut usage);
        usage
    };
    let ns = |t: libc::timeval| t.tv_sec as u64 * 1_000_000_000 + t.tv_usec as u64 * 1000;
    ns(usage.ru_utime) + ns(usage.ru_stime)
}

/// The calling thread pinned to one CPU until this is dropped, when its previous affinity
/// comes back (so that a benchmark does not leave the rest of the process on one CPU).
pub struct Pinned {
    /// The CPU, or `None` if the kernel refused.
    pub cpu: Option<usize>,
    previous: Option<rustix::thread::CpuSet>,
}

impl Drop for Pinned {
    fn drop(&mut self) {
        if let Some(set) = &self.previous {
            let _ = rustix::thread::sched_setaffinity(None, set);
        }
    }
}

fn one_cpu(cpu: usize) -> rustix::thread::CpuSet {
    let mut set = rustix::thread::CpuSet::new();
    set.set(cpu);
    set
}

/// The kernel's timer slack for a normal thread, ns: what a program gets unless it asks
/// otherwise, so what a baseline runs with.
pub const STOCK_TIMER_SLACK_NS: u64 = 50_000;

/// The calling thread at the kernel's stock timer slack until this is dropped, when the slack
/// it had comes back. A soft-timer loop sets its thread's slack to 1 ns while it lives, and
/// threads and processes inherit the slack of the thread that starts them: a baseline
/// (tokio, smol, iperf3, nginx) run from such a thread would otherwise block with a precision
/// its own users do not get. Drop it on the thread that made it, before any loop made under
/// it (the slack it gives back is the one it found).
pub struct StockTimerSlack {
    previous: Option<u64>,
    _thread_bound: std::marker::PhantomData<*const ()>,
}

impl Drop for StockTimerSlack {
    fn drop(&mut self) {
        if let Some(ns) = self.previous.and_then(std::num::NonZeroU64::new) {
            let _ = rustix::thread::set_current_timer_slack(Some(ns));
        }
    }
}

/// Puts the calling thread at [`STOCK_TIMER_SLACK_NS`] until the returned guard is dropped.
///
/// ```
/// let before = rustix::thread::current_timer_slack().unwrap();
/// {
///     let _stock = softtimers_tools::cpu::stock_timer_slack();
///     assert_eq!(
///         rustix::thread::current_timer_slack().unwrap(),
///         softtimers_tools::cpu::STOCK_TIMER_SLACK_NS
///     );
/// }
/// assert_eq!(rustix::thread::current_timer_slack().unwrap(), before);
/// ```
#[must_use = "the thread's slack comes back when the guard is dropped"]
pub fn stock_timer_slack() -> StockTimerSlack {
    let previous = rustix::thread::current_timer_slack().ok();
    let _ =
        rustix::thread::set_current_timer_slack(std::num::NonZeroU64::new(STOCK_TIMER_SLACK_NS));
    StockTimerSlack {
        previous,
        _thread_bound: std::marker::PhantomData,
    }
}

/// Pins the calling thread to `cpu` until the returned guard is dropped.
pub fn pin_to(cpu: usize) -> Pinned {
    try_pin_to(cpu).unwrap_or_else(|_| Pinned {
        cpu: None,
        previous: None,
    })
}

/// [`pin_to`], with the kernel's refusal as an error: for a CPU a user named (`path
/// --cpu`), which a cgroup's `cpuset` may not allow.
pub fn try_pin_to(cpu: usize) -> std::io::Result<Pinned> {
    let previous = rustix::thread::sched_getaffinity(None).ok();
    rustix::thread::sched_setaffinity(None, &one_cpu(cpu))?;
    Ok(Pinned {
        cpu: Some(cpu),
        previous,
    })
}

/// Pins the calling thread to the last CPU it may run on (the first is busiest with
/// interrupts on small VMs) until the returned guard is dropped.
pub fn pin_to_last_cpu() -> Pinned {
    let allowed = rustix::thread::sched_getaffinity(None).ok();
    let last = allowed.as_ref().and_then(|set| {
        (0..rustix::thread::CpuSet::MAX_CPU)
            .rev()
            .find(|&c| set.is_set(c))
    });
    match last {
        Some(cpu) => pin_to(cpu),
        None => Pinned {
            cpu: None,
            previous: allowed,
        },
    }
}

/// Pins another process (a child: wrk, nginx) to `cpu`; false if the kernel refused.
pub fn pin_process(pid: u32, cpu: usize) -> bool {
    i32::try_from(pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
        .is_some_and(|pid| rustix::thread::sched_setaffinity(Some(pid), &one_cpu(cpu)).is_ok())
}

/// CPUs online (not this thread's affinity, which a benchmark may have narrowed).
pub fn cpus() -> usize {
    std::fs::read_to_string("/sys/devices/system/cpu/online")
        .ok()
        .and_then(|s| {
            s.trim()
                .split(',')
                .filter_map(|r| r.split('-').next_back()?.parse::<usize>().ok())
                .max()
        })
        .map_or_else(
            || std::thread::available_parallelism().map_or(1, |n| n.get()),
            |m| m + 1,
        )
}

/// The CPU the server under test runs on: the last one.
pub fn server_cpu() -> usize {
    cpus().saturating_sub(1)
}

/// The CPU load generators run on.
pub const CLIENT_CPU: usize = 0;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pinning_restores_the_previous_affinity() {
        let before = rustix::thread::sched_getaffinity(None).unwrap();
        {
            let pin = pin_to_last_cpu();
            if let Some(cpu) = pin.cpu {
                let now = rustix::thread::sched_getaffinity(None).unwrap();
                assert_eq!(now.count(), 1);
                assert!(now.is_set(cpu));
            }
        }
        let after = rustix::thread::sched_getaffinity(None).unwrap();
        assert_eq!(before, after);
    }

    /// A CPU the kernel will not pin to is an error, with the kernel's reason: `path --cpu`
    /// used to run its emulator unpinned without a word.
    #[test]
    fn a_cpu_the_kernel_refuses_is_an_error() {
        std::thread::spawn(|| {
            let before = rustix::thread::sched_getaffinity(None).unwrap();
            let offline = rustix::thread::CpuSet::MAX_CPU - 1;
            assert!(offline >= cpus(), "a CPU that is not online");
            assert!(try_pin_to(offline).is_err());
            assert_eq!(rustix::thread::sched_getaffinity(None).unwrap(), before);
            let allowed = (0..cpus()).find(|&c| before.is_set(c)).unwrap();
            let pinned = try_pin_to(allowed).unwrap();
            assert_eq!(pinned.cpu, Some(allowed));
        })
        .join()
        .unwrap();
    }
}
