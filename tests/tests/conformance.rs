//! The conformance harness passes against the real server.

use std::time::Duration;

use leasehold_tests::conformance::{self, Ctx};
use leasehold_tests::server::{short_lease_config, start};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_passes_every_conformance_case() {
    let server = start(short_lease_config()).await;
    let ctx = Ctx { addr: server.addr };
    let outcomes = conformance::run(&ctx, &conformance::cases(), Duration::from_secs(30)).await;
    let failed: Vec<String> = outcomes
        .iter()
        .filter_map(|o| {
            o.result
                .as_ref()
                .err()
                .map(|e| format!("{} {}: {e}", o.rules.join(","), o.name))
        })
        .collect();
    assert!(failed.is_empty(), "failed cases:\n{}", failed.join("\n"));
}
