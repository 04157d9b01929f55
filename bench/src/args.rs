//! Command-line arguments.

use crate::workloads::WORKLOADS;
use crate::BoxResult;

pub struct Args {
    pub json: bool,
    pub markdown: bool,
    /// The workloads to run (`--only a,b`); all when empty.
    pub only: Vec<String>,
    /// Server binaries to run the workloads on, one after another (`--server PATH`, given
    /// again for each); empty: the one server of `REDIS_URL` or the harness's default.
    pub servers: Vec<String>,
    /// `--instructions`: run the server under callgrind and report the instructions it
    /// executed per script call (see `callgrind.rs`).
    pub instructions: bool,
}

impl Args {
    /// Whether workload `name` was selected.
    pub fn selects(&self, name: &str) -> bool {
        self.only.is_empty() || self.only.iter().any(|o| o == name)
    }
}

pub fn parse_args() -> BoxResult<Args> {
    let mut args = Args {
        json: false,
        markdown: false,
        only: Vec::new(),
        servers: Vec::new(),
        instructions: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        match a.as_str() {
            "--json" => args.json = true,
            "--markdown" => args.markdown = true,
            "--instructions" => args.instructions = true,
            "--only" => {
                let names = it.next().ok_or("--only needs workload names (a,b,...)")?;
                for name in names.split(',') {
                    if !WORKLOADS.contains(&name) {
                        return Err(format!(
                            "unknown workload {name}; one of {}",
                            WORKLOADS.join(", ")
                        )
                        .into());
                    }
                    args.only.push(name.to_owned());
                }
            }
            "--server" => {
                let binary = it.next().ok_or("--server needs a server binary's path")?;
                args.servers.push(binary);
            }
            "-h" | "--help" => {
                println!(
                    "usage: cargo run --release -p redis-locks-bench [--features cluster] [-- [--json | --markdown] [--only NAME,...] [--server PATH]... [--instructions]]\n\
                     workloads: {} (cluster needs --features cluster)\nREDIS_URL: use that server instead of starting one\n\
                     --server PATH: start that server binary (redis-server, valkey-server ...) and run there; given twice, the workloads run on each in turn\n\
                     --instructions: the server runs under valgrind's callgrind; server_hot adds the instructions per script call (deterministic; every other row is slowed)",
                    WORKLOADS.join(", ")
                );
                std::process::exit(0);
            }
            other => return Err(format!("unknown argument {other} (try --help)").into()),
        }
    }
    Ok(args)
}
