//! The 10,000-task row of `lab async` alone: soft, tokio current_thread and smol in
//! interleaved rounds, printing each runtime's CPU per fire and lateness round by round.
//!
//! `cargo run --release -p softtimers-lab --example many_tasks` (`--quick` for short rounds).
fn main() -> anyhow::Result<()> {
    let quick = std::env::args().any(|a| a == "--quick");
    for row in softtimers_lab::exp::runtimes::sleep::sleep_10k_tasks(quick)? {
        println!(
            "{:?}: CPU per fire {:.0} ns ({:.0} spinning; rounds {:?}), late p50 {:.0} µs, p99 {:.0} µs (rounds {:?}), {:.0} fires/s",
            row.runtime,
            row.cpu_ns_per_op.unwrap_or(f64::NAN),
            row.idle_spin_ns_per_op.unwrap_or(f64::NAN),
            row.cpu_ns_per_op_rounds,
            row.late_p50_us.unwrap_or(f64::NAN),
            row.late_p99_us.unwrap_or(f64::NAN),
            row.late_p99_us_rounds,
            row.ops_per_s.unwrap_or(f64::NAN),
        );
    }
    Ok(())
}
