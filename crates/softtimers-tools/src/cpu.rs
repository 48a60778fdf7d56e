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
    let previous = rustix::thread::sched_getaffinity(None).ok();
    let cpu = rustix::thread::sched_setaffinity(None, &one_cpu(cpu))
        .ok()
        .map(|()| cpu);
    Pinned { cpu, previous }
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

/// Whether `cpu` is a CPU a thread of this one's may be pinned to: online, and in this
/// thread's affinity (which a `taskset`, a cgroup's `cpuset` or a benchmark may have
/// narrowed; a thread it starts inherits it). An error says which CPUs are allowed.
///
/// ```
/// use softtimers_tools::cpu::{check_pinnable, cpus};
/// assert!(check_pinnable(cpus()).is_err());
/// ```
pub fn check_pinnable(cpu: usize) -> anyhow::Result<()> {
    let online = cpus();
    if cpu >= online {
        anyhow::bail!("CPU {cpu}: this machine has CPUs 0 to {}", online - 1);
    }
    let Ok(set) = rustix::thread::sched_getaffinity(None) else {
        return Ok(());
    };
    if set.is_set(cpu) {
        return Ok(());
    }
    let allowed: Vec<String> = (0..online)
        .filter(|&c| set.is_set(c))
        .map(|c| c.to_string())
        .collect();
    anyhow::bail!(
        "CPU {cpu}: this process may run only on CPU {} (its affinity: taskset, or a cgroup's \
         cpuset)",
        allowed.join(", ")
    )
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

    /// A CPU outside the thread's affinity is refused with the CPUs allowed named: pinning
    /// to it used to fail without a word, and the emulator ran unpinned.
    #[test]
    fn a_cpu_outside_the_affinity_is_refused_with_the_allowed_ones_named() {
        assert!(
            check_pinnable(cpus())
                .unwrap_err()
                .to_string()
                .contains("CPUs 0 to")
        );
        // On a thread of its own: narrowing the affinity of the test's thread would outlive
        // this test on a harness that reuses it.
        std::thread::spawn(|| {
            let pin = pin_to_last_cpu();
            let Some(last) = pin.cpu else { return };
            assert!(check_pinnable(last).is_ok());
            if last > 0 {
                let refused = check_pinnable(0).unwrap_err().to_string();
                assert!(
                    refused.contains(&format!("may run only on CPU {last}")),
                    "{refused}"
                );
            }
        })
        .join()
        .unwrap();
    }
}
