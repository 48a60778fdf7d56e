//! The seed papers' figures the lab puts its own beside: each experiment's section quotes
//! them, and a target says which of them it came from. One place, so that `bench timers`
//! and E1 quote the same Table I without one importing the other.
//!
//! The papers: Aron & Druschel, *Soft timers* (TOCS 2000), "the paper" below; Mogul &
//! Ramakrishnan, *Eliminating receive livelock* (TOCS 1997); Kobayashi, *Transmission timer
//! approach for rate-based pacing TCP* (2004).

/// The paper's Table I, beside which `bench timers` and E1 put their figures.
pub const PAPER_TABLE_I: &str = "The paper's Table I (per-event cost with a null handler, \
    from a web server's slowdown): 8253 timer on a 300 MHz PII 4.45 µs, on a 500 MHz PIII \
    4.36 µs; APIC on the PIII 0.8 µs; soft timers ≈ 0 (no observable slowdown).";

/// The paper's Tables II–III, beside which E2 puts its figures.
pub const PAPER_TABLES_II_III: &str = "The paper (Tables II–III, PIII-500, Flash): every \
    10 µs, APIC 5.1 µs vs soft 3.5 µs per event; every 20 µs, APIC 7.0 µs vs soft 4.3 µs.";

/// The paper's Table IV, beside which E3 puts its figures.
pub const PAPER_TABLE_IV: &str = "The paper (Table IV, 300 MHz PII): ST-Apache max 476, \
    mean 31.52, median 18, stddev 32, 5.3 % > 100 µs, 0.39 % > 150 µs; ST-Apache-compute \
    585 / 31.59 / 18 / 32.1 / 5.3 / 0.43; ST-Flash 1000 / 22.53 / 17 / 20.8 / 1.09 / 0.013; \
    ST-nfs 910 / 2.13 / 2 / 3.3 / 0.021 / 0.011.";

/// The paper's Fig. 3, beside which E4 puts its figures.
pub const PAPER_FIG_3: &str = "The paper (Fig. 3, ST-Apache-compute, 10 s): the medians \
    stay between about 15 and 25 µs in both window sizes, with no long stretch without \
    trigger states.";

/// The paper's Table V and Fig. 4, beside which E5 puts its figures.
pub const PAPER_TABLE_V: &str = "The paper (Table V, ST-Apache): syscalls 47.7 %, ip-output \
    28.8 %, ip-intr 16.5 %, tcpip-others 4.9 %, traps 2.1 %; Fig. 4: leaving out system \
    calls or IP output moves the CDF most.";

/// Kobayashi's Table II, beside which E8 puts its figures.
pub const PAPER_TABLE_II: &str = "Kobayashi (Table II, FreeBSD, 5,000 packets of slow start): \
    no pacing 0.31; software pacing on a 10 ms tick 4.1e-4, on a 1 ms tick 5.9e-6; pacing by \
    the NIC's transmission timer 1.5e-7.";

/// The paper's Tables VI and VII, beside which E6 puts its figures.
pub const PAPER_TABLES_VI_VII: &str = "The paper (Tables VI–VII, Flash / Apache): soft timers \
    2–6 % overhead at average transmit intervals of 13–34 µs; the 8253 timer at 20 µs 28–36 %; \
    the APIC timer at 20 µs 13–19 %, at 10 µs 16–22 %.";

/// The paper's Tables VIII and IX, beside which E7 puts its figures.
pub const PAPER_TABLES_VIII_IX: &str = "The paper (Tables VIII–IX, ST-Apache on a 300 MHz \
    PII): target 40 µs: minimum interval 12 µs gives 40 µs (stddev 34.5), 35 µs gives 65.9 µs \
    (30.1); hardware timer 43.6 µs (26.8). Target 60 µs: 60 µs up to a minimum interval of \
    25 µs, 61 µs at 30, 65.9 µs at 35 (stddev 30–36); hardware timer 63 µs (27.7).";

/// The paper's forwarding figures, beside which E10 and E11 put theirs.
pub const PAPER_FIGS_6: &str = "Mogul and Ramakrishnan (Figs. 6-1, 6-3 to 6-6, a DEC 3000/300 \
    router): the unmodified kernel peaks at 4,700 packets/s and falls toward livelock above \
    it; with screend it degrades above 2,000 packets/s and livelocks at about 6,000. The \
    polling kernel slightly raises the MLFRR and stays flat past it; without a quota it \
    livelocks too; with screend, queue feedback keeps it flat; quotas of 5 to 10 packets work \
    best.";

/// The paper's Fig. 7-1, beside which E12 puts its figures.
pub const PAPER_FIG_7_1: &str = "Mogul and Ramakrishnan (Fig. 7-1): with a cycle limit, the \
    compute-bound process keeps a stable share of the CPU as the input rate grows, somewhat \
    below what the threshold implies (about 94 % with no load; less under flood); without \
    the limit it made no measurable progress.";

/// The paper's Table XIII, beside which E13 puts its figures.
pub const PAPER_TABLE_XIII: &str = "The paper (Table XIII, PIII-500, Flash): 1000 µs: 1 % \
    overhead, 0 % fired; 100 µs: 1.1 %, 0.006 %; 50 µs: 1.3 %, 0.4 %; 20 µs: 2.1 %, 10 %; \
    10 µs: 4.6 %, 26.3 %.";

/// A row of the paper's Table X: packets, regular TCP's and rate-based clocking's ms.
pub type PaperRow = (u64, f64, f64);

/// The soft-timers paper's Table X (50 Mbit/s, RTT 100 ms): transfer size in packets,
/// response time with regular TCP and with rate-based clocking, ms.
pub const PAPER_TABLE_X: [PaperRow; 5] = [
    (5, 496.0, 101.2),
    (100, 1145.0, 123.7),
    (1000, 1714.0, 340.0),
    (10_000, 3867.0, 2500.0),
    (100_000, 25432.0, 24863.0),
];

// Anchors: where a target comes from, as its row in a targets table names it.

/// The soft-timers paper's Table I (cost per event, a web server's slowdown).
pub const ANCHOR_TABLE_I: &str = "soft-timers paper, Table I";
/// The soft-timers paper's Table IV (trigger-state intervals).
pub const ANCHOR_TABLE_IV: &str = "soft-timers paper, Table IV";
/// The soft-timers paper's Tables VI–VII (the overhead of rate-based clocking).
pub const ANCHOR_TABLES_VI_VII: &str = "soft-timers paper, Tables VI–VII";
/// The soft-timers paper's Tables VIII–IX (the transmission process under load).
pub const ANCHOR_TABLES_VIII_IX: &str = "soft-timers paper, Tables VIII–IX";
/// The soft-timers paper's Table X (response time after idle).
pub const ANCHOR_TABLE_X: &str = "soft-timers paper, Table X";
/// The soft-timers paper's Table XII (soft-timer network polling).
pub const ANCHOR_TABLE_XII: &str = "soft-timers paper, Table XII";
/// The soft-timers paper's Table XIII (deadlines).
pub const ANCHOR_TABLE_XIII: &str = "soft-timers paper, Table XIII";
/// Kobayashi's Table II (burstiness of a paced slow start).
pub const ANCHOR_KOBAYASHI_TABLE_II: &str = "Kobayashi, Table II";
/// The livelock paper's forwarding figures without livelock (polling).
pub const ANCHOR_FIGS_6_3_6_4: &str = "livelock paper, Figs. 6-3, 6-4";
/// The livelock paper's unmodified kernel (Fig. 6-1).
pub const ANCHOR_FIG_6_1: &str = "livelock paper, Fig. 6-1";
/// The livelock paper's Fig. 7-1 (CPU left to a user process).
pub const ANCHOR_FIG_7_1: &str = "livelock paper, Fig. 7-1";
/// Stock quinn on tokio, the QUIC baseline.
pub const ANCHOR_STOCK_QUINN: &str = "stock quinn 0.11 on tokio";
/// `iperf3 -u`, the paced-sender baseline.
pub const ANCHOR_IPERF3: &str = "iperf3 -u";
/// A periodic `timerfd` at the same interval, the hardware-timer baseline.
pub const ANCHOR_TIMERFD: &str = "a periodic timerfd";
/// The timer queues `bench core` compares with.
pub const ANCHOR_HEAPS: &str = "BinaryHeap, BTreeMap, tokio's DelayQueue";
/// One read of the measurement clock.
pub const ANCHOR_CLOCK_READ: &str = "one clock read";
/// The emulated path's own configuration (its rate, its delay).
pub const ANCHOR_PATH: &str = "the configured path";
/// The project's own goal, with no outside figure to compare.
pub const ANCHOR_DESIGN: &str = "design target";
