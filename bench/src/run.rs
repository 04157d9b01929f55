//! The driver: every selected workload, [`RUNS`] times, merged and printed.

use std::time::Instant;

use crate::args::Args;
use crate::env::Env;
use crate::output::{json_line, print_markdown, print_table};
use crate::probe::{machine, server_version};
use crate::stats::merge_runs;
use crate::workloads::multi_node::{prepare, Extra};
use crate::workloads::server_cost::server_cost_summary;
use crate::workloads::server_hot::cold_next_to_hot;
use crate::workloads::{run_once, WORKLOADS};
use crate::BoxResult;

/// Runs per workload; each row is the median of the runs.
pub const RUNS: usize = 3;

pub async fn bench(args: &Args, url: &str) -> BoxResult<()> {
    let prefix = format!("rlbench{}", std::process::id());
    let env = Env::connect(url, &prefix).await?;
    let version = server_version(&env.raw).await;
    eprintln!(
        "bench: {} | {version} at {url} | PING baseline on the locks' own connection",
        machine()
    );
    let started = Instant::now();
    let mut rows = Vec::new();
    let mut extra = Extra::default();
    for &w in WORKLOADS {
        if !args.selects(w) {
            continue;
        }
        let t = Instant::now();
        if !prepare(w, &env, &mut extra).await? {
            continue;
        }
        let mut runs = Vec::new();
        for run in 0..RUNS {
            runs.push(run_once(&env, &extra, w, run).await?);
        }
        let mut merged = merge_runs(&runs);
        if w == "server_cost" {
            if let Some(summary) = server_cost_summary(&merged) {
                merged.push(summary);
            }
        }
        if w == "server_hot" {
            let side_by_side = cold_next_to_hot(&rows, &merged);
            merged.extend(side_by_side);
        }
        eprintln!("bench: {w} done in {:.1} s", t.elapsed().as_secs_f64());
        if args.json {
            for r in &merged {
                println!("{}", json_line(r));
            }
        }
        rows.extend(merged);
    }
    let total = started.elapsed().as_secs_f64();
    if !args.json {
        println!(
            "machine: {} | {version} | {RUNS} runs per workload, medians shown\n",
            machine()
        );
        if args.markdown {
            print_markdown(&rows);
        } else {
            print_table(&rows);
        }
        let missed: Vec<String> = rows
            .iter()
            .filter(|r| r.met() == Some(false))
            .map(|r| format!("{}/{}", r.workload, r.metric))
            .collect();
        println!(
            "\ntargets met: {} of {}; missed: {}",
            rows.iter().filter(|r| r.met() == Some(true)).count(),
            rows.iter().filter(|r| r.met().is_some()).count(),
            if missed.is_empty() {
                "none".to_owned()
            } else {
                missed.join(", ")
            }
        );
        println!("total: {total:.1} s");
    }
    eprintln!("bench: total {total:.1} s");
    Ok(())
}
