//! Progress bars on stderr, and durations for people.

use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};

/// A progress bar labelled `label` on stderr (hidden when stderr is not a terminal).
pub fn progress_bar(label: &str) -> ProgressBar {
    let bar = ProgressBar::new(1000);
    bar.set_style(
        ProgressStyle::with_template("{prefix:>12} [{bar:30}] {percent:>3}% {msg}")
            .expect("static template")
            .progress_chars("=> "),
    );
    bar.set_prefix(label.to_string());
    bar.enable_steady_tick(Duration::from_millis(200));
    bar
}

/// Runs `work` with a progress bar labelled `label`: `work` reports the fraction done and
/// what it is doing; the bar is cleared after.
pub fn with_progress<T>(label: &str, work: impl FnOnce(&mut dyn FnMut(f64, &str)) -> T) -> T {
    let bar = progress_bar(label);
    let result = work(&mut |fraction, message| {
        bar.set_position((fraction.clamp(0.0, 1.0) * 1000.0) as u64);
        bar.set_message(message.to_string());
    });
    bar.finish_and_clear();
    result
}

/// "1 min 05 s", "12 s": a duration for people.
pub fn human_duration(d: Duration) -> String {
    let s = d.as_secs_f64().round() as u64;
    match s {
        0..60 => format!("{s} s"),
        60..3600 => format!("{} min {:02} s", s / 60, s % 60),
        _ => format!("{} h {:02} min", s / 3600, s / 60 % 60),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_for_people() {
        assert_eq!(human_duration(Duration::from_secs(12)), "12 s");
        assert_eq!(human_duration(Duration::from_secs(65)), "1 min 05 s");
        assert_eq!(human_duration(Duration::from_secs(3725)), "1 h 02 min");
    }
}
