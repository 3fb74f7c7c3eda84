//! Figures and the results table: each figure is a set of samples (one per
//! run) shown as min / median / max beside its baseline and their ratio.

use std::fmt::Write as _;

/// One measurement per run.
#[derive(Debug, Clone, Default)]
pub struct Samples(Vec<f64>);

impl Samples {
    pub fn push(&mut self, value: f64) {
        self.0.push(value);
    }

    pub fn single(value: f64) -> Self {
        Samples(vec![value])
    }

    fn sorted(&self) -> Vec<f64> {
        let mut v = self.0.clone();
        v.sort_by(f64::total_cmp);
        v
    }

    pub fn min(&self) -> f64 {
        self.sorted().first().copied().unwrap_or(f64::NAN)
    }

    pub fn max(&self) -> f64 {
        self.sorted().last().copied().unwrap_or(f64::NAN)
    }

    /// The middle sample; the mean of the two middle ones for an even count.
    pub fn median(&self) -> f64 {
        let v = self.sorted();
        match v.len() {
            0 => f64::NAN,
            n if n % 2 == 1 => v[n / 2],
            n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
        }
    }
}

/// The value at quantile `q` (0..=1) of sorted samples, by nearest rank.
pub fn percentile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// How a figure compares with its baseline.
#[derive(Debug, Clone, Copy)]
pub enum Target {
    /// A time: wsfs median / baseline median must stay at or under this.
    AtMostTimes(f64),
    /// A throughput: wsfs median / baseline median must reach this share.
    AtLeastShare(f64),
    /// An absolute ceiling on the wsfs median, in the row's unit.
    AtMost(f64),
    /// An absolute floor on the wsfs median, in the row's unit.
    AtLeast(f64),
    /// Printed for information only.
    None,
}

/// One line of the results table.
#[derive(Debug, Clone)]
pub struct Row {
    pub figure: String,
    pub unit: &'static str,
    pub wsfs: Samples,
    /// The baseline's name and its samples, measured in the same runs.
    pub baseline: Option<(String, Samples)>,
    pub target: Target,
}

impl Row {
    pub fn new(figure: impl Into<String>, unit: &'static str, wsfs: Samples) -> Self {
        Row {
            figure: figure.into(),
            unit,
            wsfs,
            baseline: None,
            target: Target::None,
        }
    }

    pub fn baseline(mut self, name: impl Into<String>, samples: Samples) -> Self {
        self.baseline = Some((name.into(), samples));
        self
    }

    pub fn target(mut self, target: Target) -> Self {
        self.target = target;
        self
    }

    fn ratio(&self) -> Option<f64> {
        let (_, base) = self.baseline.as_ref()?;
        Some(self.wsfs.median() / base.median())
    }

    fn ratio_text(&self) -> String {
        match (self.ratio(), self.target) {
            (Some(r), Target::AtLeastShare(_)) => format!("{:.0}%", r * 100.0),
            (Some(r), _) => format!("{r:.2}x"),
            (None, _) => "-".to_string(),
        }
    }

    fn target_text(&self) -> String {
        let verdict = |met: bool| if met { "met" } else { "missed" };
        match (self.target, self.ratio()) {
            (Target::AtMostTimes(t), Some(r)) => format!("<= {t}x ({})", verdict(r <= t)),
            (Target::AtLeastShare(s), Some(r)) => {
                format!(">= {:.0}% ({})", s * 100.0, verdict(r >= s))
            }
            (Target::AtMost(t), _) => {
                let m = self.wsfs.median();
                format!("< {t} {} ({})", self.unit, verdict(m < t))
            }
            (Target::AtLeast(t), _) => {
                let m = self.wsfs.median();
                format!(">= {t} {} ({})", self.unit, verdict(m >= t))
            }
            // Never a verdict without the baseline it is relative to.
            (Target::AtMostTimes(_) | Target::AtLeastShare(_), None) => {
                "no verdict: baseline missing".to_string()
            }
            (Target::None, _) => "-".to_string(),
        }
    }
}

fn number(v: f64, unit: &str) -> String {
    match unit {
        "s" => format!("{v:.3}"),
        "ms" => format!("{v:.3}"),
        "MiB" => format!("{v:.1}"),
        _ => format!("{v:.0}"),
    }
}

fn spread(s: &Samples, unit: &str) -> String {
    if s.0.len() == 1 {
        return format!("{} {unit}", number(s.median(), unit));
    }
    format!(
        "{} / **{}** / {} {unit}",
        number(s.min(), unit),
        number(s.median(), unit),
        number(s.max(), unit)
    )
}

/// The results as a Markdown table, ready to paste into BENCHMARKS.md.
pub fn table(rows: &[Row]) -> String {
    let mut out = String::new();
    out.push_str(
        "| figure | wsfs (min / median / max) | baseline (min / median / max) | ratio | target |\n",
    );
    out.push_str("| --- | --- | --- | --- | --- |\n");
    for row in rows {
        let base = row.baseline.as_ref().map_or("-".to_string(), |(name, s)| {
            format!("{name}: {}", spread(s, row.unit))
        });
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} |",
            row.figure,
            spread(&row.wsfs, row.unit),
            base,
            row.ratio_text(),
            row.target_text()
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_even_count_is_mean_of_middle_pair() {
        let mut s = Samples::default();
        for v in [4.0, 1.0, 3.0, 2.0] {
            s.push(v);
        }
        assert_eq!(s.median(), 2.5);
        assert_eq!(s.min(), 1.0);
        assert_eq!(s.max(), 4.0);
    }

    #[test]
    fn percentile_uses_nearest_rank() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&v, 0.5), 50.0);
        assert_eq!(percentile(&v, 0.99), 99.0);
        assert_eq!(percentile(&v, 1.0), 100.0);
    }
}
