//! `wsfs`: the command line for a wsfs server. Everything lives in
//! `client/src/cli/`; this file only hands over the process.

#[path = "../cli/mod.rs"]
mod cli;

fn main() -> std::process::ExitCode {
    cli::main()
}
