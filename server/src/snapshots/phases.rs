//! Where a recovery's or a fork's time went, phase by phase, for the one
//! info line each logs: what a slow one is measured by.

use std::time::{Duration, Instant};

/// Phases ended so far, each with the time it took.
pub struct Phases {
    last: Instant,
    spent: Vec<(&'static str, Duration)>,
}

impl Phases {
    pub fn start() -> Self {
        Phases {
            last: Instant::now(),
            spent: Vec::new(),
        }
    }

    /// Ends phase `name` (begun where the last one ended).
    pub fn mark(&mut self, name: &'static str) {
        let now = Instant::now();
        self.spent.push((name, now - self.last));
        self.last = now;
    }
}

impl std::fmt::Display for Phases {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, (name, spent)) in self.spent.iter().enumerate() {
            let sep = if i == 0 { "" } else { ", " };
            write!(f, "{sep}{name} {:.3} s", spent.as_secs_f64())?;
        }
        Ok(())
    }
}
