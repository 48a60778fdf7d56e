//! The adaptive pacer on a simulated clock: long-run rate, the burst limit, catching up after a
//! stall, rate changes, and many flows at once.

use proptest::prelude::*;
use softtimer::{Clock, Instant, SimClock, SoftTimers, TriggerSource};
use softtimer_net::Rate;
use softtimer_net::pacer::{FlowId, FlowPacer, FlowSet, PacerConfig};

const HZ: u64 = 1_000_000_000; // 1 tick = 1 ns

fn rate(text: &str) -> Rate {
    text.parse().unwrap()
}

/// Sends from `flows` (all always backlogged, `size` bytes a packet) at trigger states spaced
/// by `gaps` (ns; repeats the slice) until `until` ns; returns each flow's send times.
fn run(
    clock: &SimClock,
    timers: &mut SoftTimers<FlowId, SimClock>,
    flows: &mut FlowSet,
    size: u64,
    gaps: &[u64],
    until: u64,
) -> Vec<Vec<Instant>> {
    let mut sends = vec![Vec::new(); flows.len()];
    let start = clock.now();
    let mut i = 0;
    while clock.now().saturating_since(start).ticks() < until {
        clock.advance(gaps[i % gaps.len()]);
        i += 1;
        let now = clock.now();
        flows.on_trigger(timers, now, TriggerSource::User, |flow| {
            sends[flow].push(now);
            Some(size)
        });
    }
    sends
}

/// Trigger states every µs for `steps` µs with `backlog` packets of 1,500 bytes to send, after
/// which the flows have nothing; appends each send's time to `sends`.
fn send_backlog(
    clock: &SimClock,
    timers: &mut SoftTimers<FlowId, SimClock>,
    flows: &mut FlowSet,
    mut backlog: u32,
    steps: u32,
    sends: &mut Vec<Instant>,
) {
    for _ in 0..steps {
        clock.advance(1_000);
        let now = clock.now();
        flows.on_trigger(timers, now, TriggerSource::User, |_| {
            if backlog == 0 {
                return None;
            }
            backlog -= 1;
            sends.push(now);
            Some(1500)
        });
    }
}

fn setup(configs: &[PacerConfig]) -> (SimClock, SoftTimers<FlowId, SimClock>, FlowSet) {
    let clock = SimClock::starting_at(5_000, HZ);
    let mut timers = SoftTimers::new(clock.clone()).unwrap();
    let mut flows = FlowSet::new(HZ);
    for &c in configs {
        let f = flows.add(c);
        flows.wake(&mut timers, f, clock.now()).unwrap();
    }
    (clock, timers, flows)
}

/// The rate of a flow's sends: the bytes of all but the last packet over first-to-last.
fn achieved_bps(sends: &[Instant], size: u64) -> f64 {
    let span = sends.last().unwrap().saturating_since(sends[0]).ticks() as f64 / HZ as f64;
    (sends.len() - 1) as f64 * size as f64 * 8.0 / span
}

fn gaps_ns(sends: &[Instant]) -> Vec<u64> {
    sends
        .windows(2)
        .map(|w| w[1].saturating_since(w[0]).ticks())
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    /// With trigger states at irregular intervals (up to 20 µs apart, against a 23.5 µs
    /// target interval: one packet per trigger state can keep up) and a burst rate at least
    /// twice the target, the long-run rate is the target within 0.1 %, and no gap is shorter
    /// than the burst interval.
    #[test]
    fn long_run_rate_is_the_target_and_no_gap_beats_the_burst_rate(
        gaps in proptest::collection::vec(200u64..20_000, 50..400),
        burst_factor in 2u64..8,
    ) {
        let target = rate("500M");
        let burst = Rate::from_bits_per_sec(target.bits_per_sec() * burst_factor).unwrap();
        let (clock, mut timers, mut flows) = setup(&[PacerConfig::new(target, burst).unwrap()]);
        let sends = run(&clock, &mut timers, &mut flows, 1472, &gaps, 200_000_000);
        let achieved = achieved_bps(&sends[0], 1472);
        let error = (achieved - 500e6).abs() / 500e6;
        prop_assert!(error < 0.001, "achieved {achieved} bit/s, {:.4} % off", error * 100.0);
        let burst_gap = burst.ticks_for_bytes(1472, HZ);
        let shortest = gaps_ns(&sends[0]).into_iter().min().unwrap();
        prop_assert!(shortest >= burst_gap, "a gap of {shortest} ns beats the burst interval {burst_gap} ns");
    }
}

/// After a stall with no trigger states, the flow catches up at the burst rate, not faster,
/// and then returns to the target interval with its long-run rate intact.
#[test]
fn catches_up_after_a_stall_at_the_burst_rate_and_not_faster() {
    // 1500 B at 12 Mbit/s: 1 ms a packet; burst 48 Mbit/s: 250 µs a packet.
    let config = PacerConfig::new(rate("12M"), rate("48M")).unwrap();
    let (clock, mut timers, mut flows) = setup(&[config]);
    let mut sends = run(&clock, &mut timers, &mut flows, 1500, &[1_000], 20_000_000);
    clock.advance(9_000_000); // a 9 ms stall: no trigger state at all
    sends[0].extend(run(&clock, &mut timers, &mut flows, 1500, &[1_000], 40_000_000).remove(0));
    let gaps = gaps_ns(&sends[0]);
    let stall = gaps.iter().position(|&g| g > 5_000_000).expect("the stall");
    // Before: the target interval (to the trigger grid of 1 µs).
    assert!(
        gaps[..stall].iter().all(|&g| g == 1_000_000),
        "{:?}",
        &gaps[..stall]
    );
    // After: burst intervals while behind (9 ms behind, gaining 750 µs a packet: 12 of them),
    // then the target interval again.
    let after = &gaps[stall + 1..];
    let bursts = after.iter().take_while(|&&g| g == 250_000).count();
    assert!(
        (11..=13).contains(&bursts),
        "{bursts} burst gaps: {:?}",
        &after[..20]
    );
    assert!(
        after[bursts + 1..].iter().all(|&g| g == 1_000_000),
        "{:?}",
        &after[..bursts + 5]
    );
    assert!(
        after.iter().all(|&g| g >= 250_000),
        "faster than the burst rate"
    );
    // The long run kept the target rate (within one packet).
    let expected = 12e6;
    let achieved = achieved_bps(&sends[0], 1500);
    assert!((achieved - expected).abs() / expected < 0.02, "{achieved}");
}

/// A new rate takes effect at the next event.
#[test]
fn rate_changes_take_effect_at_the_next_event() {
    let (clock, mut timers, mut flows) = setup(&[PacerConfig::fixed(rate("12M"))]);
    // Sends at 1 µs, 1.001 ms, ..., 9.001 ms; the change comes at 9.5 ms, before the next
    // event (10.001 ms).
    let before = run(&clock, &mut timers, &mut flows, 1500, &[1_000], 9_500_000).remove(0);
    assert!(gaps_ns(&before).iter().all(|&g| g == 1_000_000));
    let last = *before.last().unwrap();
    assert_eq!(clock.now().saturating_since(last).ticks(), 499_000);
    flows
        .set_config(&mut timers, 0, PacerConfig::fixed(rate("24M")))
        .unwrap();
    let after = run(&clock, &mut timers, &mut flows, 1500, &[1_000], 10_000_000).remove(0);
    // The first packet after the change is one new interval (500 µs) after the last one.
    assert_eq!(after[0].saturating_since(last).ticks(), 500_000);
    assert!(gaps_ns(&after).iter().all(|&g| g == 500_000));
    // And slower again.
    let last = *after.last().unwrap();
    flows
        .set_config(&mut timers, 0, PacerConfig::fixed(rate("6M")))
        .unwrap();
    let slow = run(&clock, &mut timers, &mut flows, 1500, &[1_000], 10_000_000).remove(0);
    assert_eq!(slow[0].saturating_since(last).ticks(), 2_000_000);
}

/// A flow with nothing to send ends its train: idle time is not caught up as a burst.
#[test]
fn an_idle_flow_does_not_burst_when_it_resumes() {
    let (clock, mut timers, mut flows) =
        setup(&[PacerConfig::new(rate("12M"), rate("120M")).unwrap()]);
    let mut sends = Vec::new();
    send_backlog(&clock, &mut timers, &mut flows, 5, 20_000, &mut sends);
    assert_eq!(sends.len(), 5);
    assert!(!flows.is_scheduled(0), "an idle flow keeps no event");
    // 20 ms later, 5 more packets: they leave at the target interval, not as a burst.
    let resumed = clock.now();
    flows.wake(&mut timers, 0, resumed).unwrap();
    send_backlog(&clock, &mut timers, &mut flows, 5, 10_000, &mut sends);
    let gaps = gaps_ns(&sends[5..]);
    assert_eq!(gaps, [1_000_000; 4]);
}

/// 10,000 flows at rates from 1 to 10 Mbit/s on one facility, trigger states every µs: each
/// gets its own rate within 1 %.
#[test]
fn ten_thousand_flows_each_get_their_own_rate() {
    let n = 10_000u64;
    let configs: Vec<PacerConfig> = (0..n)
        .map(|i| {
            let target = Rate::from_bits_per_sec(1_000_000 + i * 900).unwrap();
            PacerConfig::new(
                target,
                Rate::from_bits_per_sec(target.bits_per_sec() * 4).unwrap(),
            )
            .unwrap()
        })
        .collect();
    let (clock, mut timers, mut flows) = setup(&configs);
    let sends = run(&clock, &mut timers, &mut flows, 1000, &[1_000], 100_000_000);
    for (i, s) in sends.iter().enumerate() {
        let target = configs[i].target().bits_per_sec() as f64;
        let achieved = achieved_bps(s, 1000);
        assert!(
            (achieved - target).abs() / target < 0.01,
            "flow {i}: {achieved} bit/s against {target}"
        );
    }
}

/// The single-flow rule, directly: on schedule the target interval, behind the burst one.
#[test]
fn flow_pacer_switches_between_target_and_burst_intervals() {
    let hz = 1_000_000;
    let mut pacer = FlowPacer::new(PacerConfig::new(rate("12M"), rate("24M")).unwrap(), hz);
    let t0 = Instant::from_ticks(u64::MAX - 100); // across the wrap
    let next = pacer.on_sent(t0, 1500);
    assert_eq!(next.saturating_since(t0).ticks(), 1000);
    assert!(!pacer.is_behind(next));
    // Sent 100 µs late: the schedule wants 900 µs, the burst limit 500 µs: 900 wins.
    let late = next + softtimer::Span::from_ticks(100);
    assert!(pacer.is_behind(late));
    let n2 = pacer.on_sent(late, 1500);
    assert_eq!(n2.saturating_since(late).ticks(), 900);
    assert_eq!(pacer.next_send(), Some(n2));
    assert!(PacerConfig::new(rate("24M"), rate("12M")).is_err());
}
