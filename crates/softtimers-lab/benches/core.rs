//! Criterion benchmarks of the facility against the baselines (the same queues as
//! `softtimers bench core`), and of the handler representations.
//!
//! `cargo bench -p softtimers-lab --bench core` (all), or with a filter, e.g.
//! `cargo bench -p softtimers-lab --bench core -- handler`.

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use softtimer::{Clock, SimClock, SoftTimers, Span, SystemClock, TriggerSource};
use softtimers_lab::baselines::{self, TimerQueue};

const SIZES: [usize; 2] = [1_000, 1_000_000];

fn prefill(q: &mut dyn TimerQueue, n: usize, hz: u64) {
    // 10^4 … 10^5 s ahead: never due while measuring, even after the simulated clock has
    // moved 2 ms for each of tens of thousands of schedule_fire batches.
    for i in 0..n as u64 {
        q.schedule(10_000 * hz + (i * 7_919 % 100_000) * hz, i);
    }
}

/// Delays log-spread over 1 µs … 1 s, cycled through by the benchmarks.
fn delays(hz: u64) -> Vec<u64> {
    let micro = Span::from_micros(1, hz).ticks();
    (0..4096u64)
        .map(|i| micro << ((i * 2_654_435_761) % 20))
        .collect()
}

fn trigger(c: &mut Criterion) {
    let system = SystemClock::new();
    let mut group = c.benchmark_group("trigger_nothing_due");
    group.bench_function("clock_read", |b| b.iter(|| system.now_unordered()));
    for n in SIZES {
        for mut q in baselines::real(system, None) {
            prefill(q.as_mut(), n, system.resolution_hz());
            group.bench_with_input(BenchmarkId::new(q.name(), n), &n, |b, _| {
                b.iter(|| black_box(q.poll()))
            });
        }
    }
    group.finish();
}

fn schedule_cancel(c: &mut Criterion) {
    let mut group = c.benchmark_group("schedule_then_cancel");
    let clock = SimClock::new(2_000_000_000);
    let ds = delays(clock.resolution_hz());
    for n in SIZES {
        for mut q in baselines::simulated(&clock, None) {
            prefill(q.as_mut(), n, clock.resolution_hz());
            let mut i = 0;
            group.bench_with_input(BenchmarkId::new(q.name(), n), &n, |b, _| {
                b.iter(|| {
                    i = (i + 1) & 4095;
                    let h = q.schedule(ds[i], i as u64);
                    q.cancel(h);
                })
            });
        }
    }
    group.finish();
}

fn schedule_fire(c: &mut Criterion) {
    let mut group = c.benchmark_group("schedule_fire");
    let clock = SimClock::new(2_000_000_000);
    let micro = Span::from_micros(1, clock.resolution_hz()).ticks();
    for n in SIZES {
        for mut q in baselines::simulated(&clock, None) {
            prefill(q.as_mut(), n, clock.resolution_hz());
            group.bench_with_input(BenchmarkId::new(q.name(), n), &n, |b, _| {
                b.iter_custom(|iters| {
                    fire_batches(iters, &clock, 2_000 * micro, &mut q, |j| j, |_| {})
                })
            });
        }
    }
    group.finish();
}

/// The handler representation: a generic payload the dispatch function matches on (what
/// the facility is built for), a boxed closure (an allocation per event), and a function
/// pointer with a context word.
fn handler(c: &mut Criterion) {
    let mut group = c.benchmark_group("handler_schedule_fire");
    let clock = SimClock::new(2_000_000_000);
    let advance = 101 * Span::from_micros(1, clock.resolution_hz()).ticks();
    let mut sink = 0u64;

    #[derive(Clone, Copy)]
    enum Payload {
        Count(u64),
    }
    let mut generic: SoftTimers<Payload, SimClock> = SoftTimers::new(clock.clone()).unwrap();
    let make = Payload::Count;
    let mut call = |ev| match ev {
        Payload::Count(x) => sink = sink.wrapping_add(x),
    };
    group.bench_function("generic_payload", |b| {
        b.iter_custom(|iters| fire_batches(iters, &clock, advance, &mut generic, make, &mut call))
    });

    type Boxed = Box<dyn FnOnce(&mut u64)>;
    let mut boxed: SoftTimers<Boxed, SimClock> = SoftTimers::new(clock.clone()).unwrap();
    let make = |j| Box::new(move |s: &mut u64| *s = s.wrapping_add(j)) as Boxed;
    let mut call = |f: Boxed| f(&mut sink);
    group.bench_function("boxed_closure", |b| {
        b.iter_custom(|iters| fire_batches(iters, &clock, advance, &mut boxed, make, &mut call))
    });

    type FnPtr = (fn(&mut u64, u64), u64);
    fn add(s: &mut u64, x: u64) {
        *s = s.wrapping_add(x);
    }
    let mut fn_ptr: SoftTimers<FnPtr, SimClock> = SoftTimers::new(clock.clone()).unwrap();
    let make = |j| (add as fn(&mut u64, u64), j);
    let mut call = |(f, x): FnPtr| f(&mut sink, x);
    group.bench_function("fn_pointer_and_context", |b| {
        b.iter_custom(|iters| fire_batches(iters, &clock, advance, &mut fn_ptr, make, &mut call))
    });
    group.finish();
    black_box(sink);
}

/// What [`fire_batches`] drives: the facility or a baseline queue.
trait Batched<E> {
    fn put(&mut self, delay_ticks: u64, event: E);
    /// Fires what is due, handing each event to `run`; how many fired.
    fn fire(&mut self, run: &mut impl FnMut(E)) -> u64;
}

impl<E> Batched<E> for SoftTimers<E, SimClock> {
    fn put(&mut self, delay_ticks: u64, event: E) {
        self.schedule_soft_event(Span::from_ticks(delay_ticks), event)
            .unwrap();
    }
    fn fire(&mut self, run: &mut impl FnMut(E)) -> u64 {
        self.trigger(TriggerSource::User, |_, ev| run(ev.event)) as u64
    }
}

impl Batched<u64> for Box<dyn TimerQueue> {
    fn put(&mut self, delay_ticks: u64, event: u64) {
        TimerQueue::schedule(self.as_mut(), delay_ticks, event);
    }
    fn fire(&mut self, _run: &mut impl FnMut(u64)) -> u64 {
        self.poll() as u64
    }
}

/// Schedules `iters` events 1–100 µs ahead in batches of 1,000 (`make` builds the j-th),
/// moves the clock `advance` ticks past them, fires each batch (handing each event to
/// `run`), and returns the time taken.
fn fire_batches<E>(
    iters: u64,
    clock: &SimClock,
    advance: u64,
    timers: &mut impl Batched<E>,
    mut make: impl FnMut(u64) -> E,
    mut run: impl FnMut(E),
) -> Duration {
    let micro = Span::from_micros(1, clock.resolution_hz()).ticks();
    let mut total = Duration::ZERO;
    let mut left = iters;
    while left > 0 {
        let batch = left.min(1_000);
        let start = Instant::now();
        for j in 0..batch {
            timers.put(micro + (j * 97) % (100 * micro), make(j));
        }
        clock.advance(advance);
        assert_eq!(timers.fire(&mut run), batch);
        total += start.elapsed();
        left -= batch;
    }
    total
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(30).warm_up_time(Duration::from_millis(300)).measurement_time(Duration::from_secs(2));
    targets = trigger, schedule_cancel, schedule_fire, handler
}
criterion_main!(benches);
