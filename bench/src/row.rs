//! Rows and their targets: what one metric measured, next to its baseline.

/// What a row must reach. `None`: informational.
#[derive(Clone, Copy, Debug)]
pub enum Target {
    None,
    RatioAtMost(f64),
    RatioAtLeast(f64),
    AtMost(f64),
    AtLeast(f64),
    Equals(f64),
    AtMostBaselinePlus(f64),
}

impl Target {
    pub fn met(self, value: f64, baseline: Option<f64>) -> Option<bool> {
        let ratio = baseline.filter(|b| *b != 0.0).map(|b| value / b);
        Some(match self {
            Target::None => return None,
            Target::RatioAtMost(r) => ratio? <= r,
            Target::RatioAtLeast(r) => ratio? >= r,
            Target::AtMost(x) => value <= x,
            Target::AtLeast(x) => value >= x,
            Target::Equals(x) => value == x,
            Target::AtMostBaselinePlus(x) => value <= baseline? + x,
        })
    }

    pub fn describe(self) -> String {
        match self {
            Target::None => "-".into(),
            Target::RatioAtMost(r) => format!("ratio <= {r}"),
            Target::RatioAtLeast(r) => format!("ratio >= {r}"),
            Target::AtMost(x) => format!("<= {x}"),
            Target::AtLeast(x) => format!(">= {x}"),
            Target::Equals(x) => format!("= {x}"),
            Target::AtMostBaselinePlus(x) => format!("<= baseline + {x}"),
        }
    }
}

#[derive(Clone, Debug)]
pub struct Row {
    pub workload: &'static str,
    pub metric: String,
    pub value: f64,
    pub unit: &'static str,
    pub baseline_metric: Option<String>,
    pub baseline_value: Option<f64>,
    pub target: Target,
}

impl Row {
    pub fn new(
        workload: &'static str,
        metric: impl Into<String>,
        value: f64,
        unit: &'static str,
    ) -> Row {
        Row {
            workload,
            metric: metric.into(),
            value,
            unit,
            baseline_metric: None,
            baseline_value: None,
            target: Target::None,
        }
    }

    pub fn vs(mut self, metric: impl Into<String>, value: f64) -> Row {
        self.baseline_metric = Some(metric.into());
        self.baseline_value = Some(value);
        self
    }

    pub fn target(mut self, target: Target) -> Row {
        self.target = target;
        self
    }

    pub fn ratio(&self) -> Option<f64> {
        let b = self.baseline_value?;
        (b != 0.0 && b.is_finite() && self.value.is_finite()).then(|| self.value / b)
    }

    pub fn met(&self) -> Option<bool> {
        if !self.value.is_finite() {
            return match self.target {
                Target::None => None,
                _ => Some(false),
            };
        }
        self.target.met(self.value, self.baseline_value)
    }
}
