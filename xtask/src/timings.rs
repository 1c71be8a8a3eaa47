//! A small wall-clock ledger printed at the end of `start` and `test`.

use std::time::{Duration, Instant};

#[derive(Debug, Default)]
pub struct Timings {
    rows: Vec<(String, String)>,
}

impl Timings {
    pub fn record(&mut self, what: impl Into<String>, took: Duration) {
        self.rows.push((what.into(), format_duration(took)));
    }

    pub fn note(&mut self, what: impl Into<String>, note: impl Into<String>) {
        self.rows.push((what.into(), note.into()));
    }

    /// Records the time since `since` and returns it.
    pub fn since(&mut self, what: impl Into<String>, since: Instant) -> Duration {
        let took = since.elapsed();
        self.record(what, took);
        took
    }

    pub fn print(&self, title: &str) {
        let width = self.rows.iter().map(|(w, _)| w.len()).max().unwrap_or(0);
        eprintln!("== {title}");
        for (what, value) in &self.rows {
            eprintln!("  {what:<width$}  {value}");
        }
    }
}

pub fn format_duration(d: Duration) -> String {
    let secs = d.as_secs_f64();
    if secs >= 60.0 {
        format!("{}m {:04.1}s", (secs / 60.0).floor(), secs % 60.0)
    } else {
        format!("{secs:.1}s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_seconds_and_minutes() {
        assert_eq!(format_duration(Duration::from_millis(1234)), "1.2s");
        assert_eq!(format_duration(Duration::from_secs(83)), "1m 23.0s");
    }
}
