//! A first look at timer lateness and its CPU cost: sequential `sleep(d)` on the runtime at
//! each precision setting, and an `interval`; prints lateness p50/p99/max and CPU per timer.
//!
//! ```sh
//! cargo run --release -p softtimer-async --example sleep_lateness            # the matrix
//! cargo run --release -p softtimer-async --example sleep_lateness -- 2000 calibrated 100
//! ```
//!
//! Arguments (all optional): how many timers per row (default 1000), one precision
//! (`coarse`, `calibrated`, `busy`, a window in µs such as `20`, or a p99 to keep within
//! such as `within-5`), one duration in µs.
//! Pin it (`taskset -c 1 ...`) for numbers worth comparing. The CPU is the process's (the
//! loop thread and the backstop's), divided by the timers.

use std::time::{Duration, Instant};

use softtimer_async::time::{interval, sleep_until};
use softtimer_async::{Precision, Runtime};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let count: usize = args.first().and_then(|a| a.parse().ok()).unwrap_or(1000);
    let precisions = match args.get(1).map(String::as_str) {
        Some("coarse") => vec![Precision::Coarse],
        Some("calibrated") => vec![Precision::Calibrated],
        Some("busy") => vec![Precision::Busy],
        Some(within) if within.starts_with("within-") => {
            match within.trim_start_matches("within-").parse() {
                Ok(us) => vec![Precision::Within(Duration::from_micros(us))],
                Err(_) => {
                    eprintln!("precision: within-N takes N in µs, not {within:?}");
                    std::process::exit(2);
                }
            }
        }
        Some(us) => match us.parse() {
            Ok(us) => vec![Precision::Window(Duration::from_micros(us))],
            Err(_) => {
                eprintln!(
                    "precision: coarse, calibrated, busy, a window in µs or within-N (µs), not {us:?}"
                );
                std::process::exit(2);
            }
        },
        None => vec![
            Precision::Coarse,
            Precision::Calibrated,
            Precision::Window(Duration::from_micros(20)),
            Precision::Within(Duration::from_micros(5)),
            Precision::Busy,
        ],
    };
    let durations: Vec<u64> = match args.get(2).and_then(|a| a.parse().ok()) {
        Some(us) => vec![us],
        None => vec![20, 100, 1000],
    };
    println!(
        "calibrated spin window (this machine's wake-up lateness): {:?}",
        softtimer_rt::wakeup_lateness()
    );
    println!(
        "| precision | timer | count | late p50 µs | late p99 µs | late max µs | CPU µs per timer \
         | parks per timer | blocked parks per timer | busy looks per timer |"
    );
    println!("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |");
    for precision in precisions {
        let rt = Runtime::builder()
            .precision(precision)
            .build()
            .expect("a runtime");
        for &us in &durations {
            let d = Duration::from_micros(us);
            let row = measure(&rt, count, |mut late| async move {
                for _ in 0..count {
                    let deadline = Instant::now() + d;
                    sleep_until(deadline).await;
                    late.push(Instant::now() - deadline);
                }
                late
            });
            print_row(&precision.name(), &format!("sleep({us} µs)"), count, row);
        }
        let d = Duration::from_micros(durations[durations.len() / 2]);
        let row = measure(&rt, count, |mut late| async move {
            let mut ticks = interval(d);
            ticks.tick().await;
            for _ in 0..count {
                let at = ticks.tick().await;
                late.push(Instant::now() - at);
            }
            late
        });
        print_row(
            &precision.name(),
            &format!("interval({} µs)", d.as_micros()),
            count,
            row,
        );
    }
}

struct Row {
    late: Vec<Duration>,
    cpu: Duration,
    parks: u64,
    blocked_parks: u64,
    io_polls: u64,
}

fn measure<F, Fut>(rt: &Runtime, count: usize, body: F) -> Row
where
    F: FnOnce(Vec<Duration>) -> Fut,
    Fut: std::future::Future<Output = Vec<Duration>>,
{
    let before = rt.stats();
    let cpu_before = process_cpu();
    let late = rt.block_on(body(Vec::with_capacity(count)));
    let cpu = process_cpu() - cpu_before;
    Row {
        late,
        cpu,
        parks: rt.stats().parks - before.parks,
        blocked_parks: rt.stats().blocked_parks - before.blocked_parks,
        io_polls: rt.stats().io_polls - before.io_polls,
    }
}

fn print_row(precision: &str, timer: &str, count: usize, mut row: Row) {
    row.late.sort();
    let at = |q: f64| row.late[((row.late.len() - 1) as f64 * q) as usize].as_secs_f64() * 1e6;
    let per = |n: u64| n as f64 / count as f64;
    println!(
        "| {precision} | {timer} | {count} | {:.1} | {:.1} | {:.1} | {:.1} | {:.2} | {:.2} | {:.2} |",
        at(0.5),
        at(0.99),
        at(1.0),
        row.cpu.as_secs_f64() * 1e6 / count as f64,
        per(row.parks),
        per(row.blocked_parks),
        per(row.io_polls),
    );
}

/// CPU time of the whole process (every thread).
fn process_cpu() -> Duration {
    let ts = rustix::time::clock_gettime(rustix::time::ClockId::ProcessCPUTime);
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}
