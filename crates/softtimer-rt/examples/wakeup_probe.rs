//! This machine's wake-up floor, as `softtimers info --json` reports it: lateness past a
//! precise `clock_nanosleep` timeout (p50, p90, p99, max) and CPU per wake-up, at normal
//! priority and under `SCHED_FIFO`, and the idle policy's spin window derived from it.
//!
//! `cargo run --release -p softtimer-rt --example wakeup_probe` (`CPU=n` pins it first).
fn main() {
    if let Some(cpu) = std::env::var("CPU")
        .ok()
        .and_then(|c| c.parse::<usize>().ok())
    {
        let mut set = rustix::thread::CpuSet::new();
        set.set(cpu);
        rustix::thread::sched_setaffinity(None, &set).expect("pinning to CPU");
    }
    let probe = softtimer_rt::wakeup_probe();
    println!(
        "{}",
        serde_json::to_string_pretty(&probe).expect("a probe is JSON")
    );
    println!("spin window: {:?}", probe.spin_window());
}
