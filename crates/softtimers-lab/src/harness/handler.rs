//! The event handlers of a server run: the null handler and Section 5.1's synthetic one,
//! each re-arming its event by its own schedule, async-signal-safe.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use serde::{Deserialize, Serialize};
use softtimer::{Fired, SoftTimers, Span};

use super::{Setup, TimerSource};

/// The event handler.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum HandlerKind {
    /// Does nothing but re-arm.
    Null,
    /// Touches 50 cache lines, a different set each call, cycling over 4 pages (Section
    /// 5.1's synthetic handler), then re-arms.
    Synthetic,
}

/// The synthetic handler's memory: 4 pages of 64 cache lines.
struct Synthetic {
    words: Vec<AtomicU64>,
    cursor: AtomicUsize,
}

const LINES: usize = 4 * 4096 / 64;
const WORDS_PER_LINE: usize = 8;

impl Synthetic {
    fn new() -> Self {
        Synthetic {
            words: (0..LINES * WORDS_PER_LINE)
                .map(|_| AtomicU64::new(0))
                .collect(),
            cursor: AtomicUsize::new(0),
        }
    }
    /// Writes one word in each of 50 consecutive lines (wrapping over the 4 pages).
    fn touch(&self) {
        let start = self.cursor.load(Ordering::Relaxed);
        for k in 0..50 {
            let word = &self.words[((start + k) % LINES) * WORDS_PER_LINE];
            word.store(word.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
        }
        self.cursor.store((start + 50) % LINES, Ordering::Relaxed);
    }
}

/// The handler for `setup`: runs the synthetic work if asked, then re-arms its event at its
/// own schedule (so that late firings do not stretch the period), at the next tick for
/// "every trigger state", or with a deadline. It allocates nothing and takes no lock (the
/// facility has room reserved; the synthetic memory is preallocated atomics), so it is
/// async-signal-safe. Its own closure type, for the loop to box once.
pub(crate) fn make_handler(
    setup: &Setup,
    interval: Span,
    deadline: Option<Span>,
) -> impl Fn(&mut SoftTimers<()>, Fired<()>) + Send + Sync + 'static {
    let synthetic = (setup.handler == HandlerKind::Synthetic).then(|| Arc::new(Synthetic::new()));
    let every = setup.source == TimerSource::Soft && setup.interval_us == 0;
    move |timers: &mut SoftTimers<()>, ev: Fired<()>| {
        if let Some(s) = &synthetic {
            s.touch();
        }
        if every {
            let _ = timers.schedule_at(ev.now, ());
            return;
        }
        let next = ev.due + interval;
        match deadline {
            Some(d) => {
                let t = next
                    .saturating_since(ev.now)
                    .saturating_sub(Span::from_ticks(1));
                let _ = timers.schedule_with_deadline_from(ev.now, t, t + d, ());
            }
            None => {
                let _ = timers.schedule_at(next, ());
            }
        }
    }
}
