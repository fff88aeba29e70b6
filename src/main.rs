//! The `redq` binary: parse configuration, set up logging, run a subcommand.

use clap::Parser;
use redq::config::{Cli, Command, LogFormat, TokenCommand};
use std::io::IsTerminal;
use std::process::ExitCode;

/// glibc's allocator takes a lock that the runtime's threads contend on when
/// every request allocates; mimalloc keeps per-thread heaps.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(err) if !err.use_stderr() => {
            let _ = err.print(); // --help, --version
            return ExitCode::SUCCESS;
        }
        Err(err) => return fail(&first_line(&err.to_string())),
    };
    init_tracing(cli.log_format);
    redq::tls::install_crypto_provider();
    let mut runtime = tokio::runtime::Builder::new_multi_thread();
    if matches!(cli.command, Command::Bench(_)) {
        // The bench's client shares the machine with the server and Redis it
        // measures: on one worker thread it takes at most one core, and its
        // tasks wake each other without crossing threads.
        runtime.worker_threads(1);
    }
    match runtime.enable_all().build() {
        // Spawned, so that the whole command runs on the worker threads.
        Ok(runtime) => runtime
            .block_on(async { tokio::spawn(run(cli.command)).await })
            .unwrap_or_else(|err| fail(&err.to_string())),
        Err(err) => fail(&format!("starting the runtime: {err}")),
    }
}

async fn run(command: Command) -> ExitCode {
    let result = match command {
        Command::Serve(args) => redq::serve(args).await,
        Command::Dev(args) => redq::dev::run(args).await,
        Command::Bench(args) => redq::bench::run(args).await,
        Command::Publish(args) => redq::cli::publish(args).await,
        Command::Subscribe(args) => redq::cli::subscribe(args).await,
        Command::Schedule(args) => redq::cli::schedule(args).await,
        Command::Schedules(args) => redq::cli::schedules(args).await,
        Command::Cancel(args) => redq::cli::cancel(args).await,
        Command::Topics(args) => redq::cli::topics(args).await,
        Command::Stats(args) => redq::cli::stats(args).await,
        Command::Dlq(args) => redq::cli::dlq(args).await,
        Command::Token(TokenCommand::Create(args)) => redq::cli::create_token(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => fail(&err.to_string()),
    }
}

fn fail(reason: &str) -> ExitCode {
    eprintln!("redq: {reason}");
    ExitCode::from(2)
}

/// clap explains errors over several lines; a bad config gets one. A line
/// ending in ':' ("required arguments were not provided:") keeps the indented
/// lines that complete it.
fn first_line(text: &str) -> String {
    let mut lines = text.lines();
    let first = lines.next().unwrap_or(text);
    let mut line = first.strip_prefix("error: ").unwrap_or(first).to_string();
    if line.ends_with(':') {
        let details: Vec<&str> = lines
            .take_while(|l| l.starts_with(' '))
            .map(str::trim)
            .collect();
        if !details.is_empty() {
            line = format!("{line} {}", details.join(", "));
        }
    }
    line
}

fn init_tracing(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal());
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}
