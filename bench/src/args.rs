//! Command-line arguments.

use crate::workloads::WORKLOADS;
use crate::BoxResult;

pub struct Args {
    pub json: bool,
    pub markdown: bool,
    pub only: Option<String>,
}

pub fn parse_args() -> BoxResult<Args> {
    let mut args = Args {
        json: false,
        markdown: false,
        only: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        match a.as_str() {
            "--json" => args.json = true,
            "--markdown" => args.markdown = true,
            "--only" => {
                let name = it.next().ok_or("--only needs a workload name")?;
                if !WORKLOADS.contains(&name.as_str()) {
                    return Err(format!(
                        "unknown workload {name}; one of {}",
                        WORKLOADS.join(", ")
                    )
                    .into());
                }
                args.only = Some(name);
            }
            "-h" | "--help" => {
                println!(
                    "usage: cargo run --release -p redis-locks-bench [--features cluster] [-- [--json | --markdown] [--only NAME]]\n\
                     workloads: {} (cluster needs --features cluster)\nREDIS_URL: use that server instead of starting one",
                    WORKLOADS.join(", ")
                );
                std::process::exit(0);
            }
            other => return Err(format!("unknown argument {other} (try --help)").into()),
        }
    }
    Ok(args)
}
