//! `redq bench`: load generators that talk gRPC to a running server and print
//! what they measured. Benchmarks, not tests: they assert nothing.

mod delayed;

use crate::cli;
use crate::config::{BenchArgs, BenchScenario};
use crate::server::BoxError;
use std::time::Duration;

pub async fn run(args: BenchArgs) -> Result<(), BoxError> {
    let client = cli::queue_client(cli::connect(&args.server).await?);
    match args.scenario {
        BenchScenario::Delayed => delayed::run(client, &args).await,
    }
}

/// A topic name no earlier run used, so each run starts from a clean topic.
fn fresh_topic(scenario: &str) -> String {
    let suffix = uuid::Uuid::new_v4().simple().to_string();
    format!("bench-{scenario}-{}", &suffix[..8])
}

/// Latency figures of one run, in milliseconds.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Percentiles {
    p50: f64,
    p99: f64,
    max: f64,
}

impl Percentiles {
    /// Nearest-rank percentiles; None for no samples.
    fn of(samples: &mut [Duration]) -> Option<Self> {
        if samples.is_empty() {
            return None;
        }
        samples.sort_unstable();
        let at = |q: f64| {
            let rank = ((q * samples.len() as f64).ceil() as usize).clamp(1, samples.len());
            samples[rank - 1].as_secs_f64() * 1000.0
        };
        Some(Self {
            p50: at(0.50),
            p99: at(0.99),
            max: at(1.0),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_use_nearest_rank() {
        let mut samples: Vec<Duration> = (1..=100).rev().map(Duration::from_millis).collect();
        let p = Percentiles::of(&mut samples).unwrap();
        assert_eq!((p.p50, p.p99, p.max), (50.0, 99.0, 100.0));
        assert_eq!(Percentiles::of(&mut []), None);
    }
}
