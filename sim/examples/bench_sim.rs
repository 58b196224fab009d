//! The simulator's benchmark without the CLI: prints `flowlab_sim::bench`
//! records as JSON lines (`--quick` for the small sizes). Same numbers as
//! `flowlab bench sim --json`, buildable while other crates are mid-change.

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    match flowlab_sim::bench::bench(quick) {
        Ok(records) => {
            for r in records {
                match serde_json::to_string(&r) {
                    Ok(s) => println!("{s}"),
                    Err(e) => eprintln!("error: {e}"),
                }
            }
        }
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(1);
        }
    }
}
