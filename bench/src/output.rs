//! Output: the readable table, the Markdown table and the JSON lines.

use crate::row::Row;

pub fn fmt_num(v: f64) -> String {
    if !v.is_finite() {
        return "n/a".into();
    }
    if v == v.trunc() && v.abs() < 1e15 {
        return format!("{}", v as i64);
    }
    let a = v.abs();
    if a >= 1000.0 {
        format!("{v:.0}")
    } else if a >= 10.0 {
        format!("{v:.1}")
    } else if a >= 0.1 {
        format!("{v:.3}")
    } else {
        format!("{v:.4}")
    }
}

pub fn json_str(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

pub fn json_num(v: Option<f64>) -> String {
    match v {
        Some(v) if v.is_finite() => {
            if v == v.trunc() && v.abs() < 1e15 {
                format!("{}", v as i64)
            } else {
                format!("{v:.6}")
                    .trim_end_matches('0')
                    .trim_end_matches('.')
                    .to_owned()
            }
        }
        _ => "null".into(),
    }
}

pub fn json_line(r: &Row) -> String {
    format!(
        "{{\"workload\": {}, \"metric\": {}, \"value\": {}, \"unit\": {}, \"baseline_metric\": {}, \"baseline_value\": {}, \"ratio\": {}}}",
        json_str(r.workload),
        json_str(&r.metric),
        json_num(Some(r.value)),
        json_str(r.unit),
        r.baseline_metric
            .as_deref()
            .map(json_str)
            .unwrap_or_else(|| "null".into()),
        json_num(r.baseline_value),
        json_num(r.ratio()),
    )
}

pub fn table_cells(r: &Row) -> [String; 8] {
    let baseline = match (&r.baseline_metric, r.baseline_value) {
        (Some(m), Some(v)) => format!("{m} = {}", fmt_num(v)),
        _ => "-".into(),
    };
    let met = match r.met() {
        Some(true) => "yes",
        Some(false) => "NO",
        None => "-",
    };
    [
        r.workload.to_owned(),
        r.metric.clone(),
        fmt_num(r.value),
        r.unit.to_owned(),
        baseline,
        r.ratio().map(fmt_num).unwrap_or_else(|| "-".into()),
        r.target.describe(),
        met.to_owned(),
    ]
}

pub const HEADERS: [&str; 8] = [
    "workload", "metric", "value", "unit", "baseline", "ratio", "target", "met?",
];

pub fn print_table(rows: &[Row]) {
    let cells: Vec<[String; 8]> = rows.iter().map(table_cells).collect();
    let mut widths = HEADERS.map(str::len);
    for c in &cells {
        for (w, s) in widths.iter_mut().zip(c.iter()) {
            *w = (*w).max(s.len());
        }
    }
    let line = |c: &[String]| {
        let parts: Vec<String> = c
            .iter()
            .zip(widths.iter())
            .enumerate()
            .map(|(i, (s, w))| {
                // Numbers right-aligned, text left-aligned.
                if i == 2 || i == 5 {
                    format!("{s:>w$}")
                } else {
                    format!("{s:<w$}")
                }
            })
            .collect();
        println!("{}", parts.join("  ").trim_end());
    };
    line(&HEADERS.map(String::from));
    let total: usize = widths.iter().sum::<usize>() + 2 * (widths.len() - 1);
    println!("{}", "-".repeat(total));
    for c in &cells {
        line(c);
    }
}

pub fn print_markdown(rows: &[Row]) {
    println!("| {} |", HEADERS.join(" | "));
    println!("|{}|", ["---"; 8].join("|"));
    for r in rows {
        let c = table_cells(r);
        println!("| {} |", c.join(" | "));
    }
}
