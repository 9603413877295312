//! `rill kernels`: the kernel classes this CPU runs (what `--kernels` takes).

use anyhow::Result;
use rill_kernels::simd::{cpu_name, CLASS_NAMES};
use rill_kernels::Isa;

#[derive(clap::Args)]
pub struct Args {
    /// Print only the names of the classes this CPU runs, one a line,
    /// slowest first (for scripts: CI runs the tests once per class).
    #[arg(long)]
    available: bool,
}

pub fn run(a: Args) -> Result<()> {
    if a.available {
        for isa in Isa::available() {
            println!("{isa}");
        }
        return Ok(());
    }
    println!("cpu: {}", cpu_name());
    println!("default: {}", Isa::best());
    for name in CLASS_NAMES {
        match Isa::from_name(name).and_then(Isa::require) {
            Ok(isa) => println!("  {:<9} runs here", isa.name()),
            Err(why) => println!("  {name:<9} no: {why}"),
        }
    }
    Ok(())
}
