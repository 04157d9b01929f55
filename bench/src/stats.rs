//! Medians, percentiles and the merge of a workload's runs into one row per metric.

use std::time::Duration;

use crate::row::Row;

pub fn median(mut v: Vec<f64>) -> f64 {
    v.retain(|x| x.is_finite());
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// One row per metric: the median of the runs' values and of their baselines.
pub fn merge_runs(runs: &[Vec<Row>]) -> Vec<Row> {
    let mut out: Vec<Row> = Vec::new();
    for run in runs {
        for row in run {
            if out.iter().any(|r| r.metric == row.metric) {
                continue;
            }
            let same: Vec<&Row> = runs
                .iter()
                .flat_map(|r| r.iter())
                .filter(|r| r.metric == row.metric)
                .collect();
            let mut merged = row.clone();
            merged.value = median(same.iter().map(|r| r.value).collect());
            if row.baseline_value.is_some() {
                merged.baseline_value = Some(median(
                    same.iter().filter_map(|r| r.baseline_value).collect(),
                ));
            }
            out.push(merged);
        }
    }
    out
}

pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

pub fn pct(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() - 1) as f64 * q).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

pub fn sorted(mut v: Vec<f64>) -> Vec<f64> {
    v.sort_by(f64::total_cmp);
    v
}
