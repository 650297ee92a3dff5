//! Setup calls run again while a cell's master changes under them.

use std::time::{Duration, Instant};

use leasehold::Remedy;

/// Runs a setup call again while the master changes under it, as a client
/// of a cell does with an answer lost to a fail-over: on a loaded machine a
/// new cell's leader can be starved of its heartbeats and another member
/// elected while a run connects its clients. Only for calls that may be
/// repeated (a session whose creation's answer was lost is left to
/// expire), and for at most `patience`.
pub async fn through_failovers<T, F, Fut>(patience: Duration, mut call: F) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, leasehold::ClientError>>,
{
    let started = Instant::now();
    loop {
        let error = match call().await {
            Ok(value) => return Ok(value),
            Err(error) => error,
        };
        let pause = match error.remedy() {
            Remedy::Retry | Remedy::Reconnect | Remedy::OutcomeUnknown => Duration::from_millis(20),
            Remedy::RetryAfter(after) => after,
            _ => return Err(error.into()),
        };
        if started.elapsed() > patience {
            return Err(anyhow::Error::new(error)
                .context(format!("the master did not serve within {patience:?}")));
        }
        tokio::time::sleep(pause).await;
    }
}
