//! The signals that ask a command to stop.

use std::future::Future;

/// Resolves with the signal's name when this process is asked to stop:
/// SIGINT (Ctrl-C), SIGTERM (what systemd, Docker and Kubernetes send) or,
/// with `hangup`, SIGHUP (the terminal went away). A master leaves SIGHUP
/// alone, so `nohup` keeps working for it. The handlers are in place when this
/// returns, not when the future is first polled: a signal sent the moment
/// a command shows signs of life (a master announcing its address, a
/// supervised CMD starting) must be caught, not meet the default action,
/// which would end the process without cleaning up.
#[cfg(unix)]
pub(crate) fn stop_requested(hangup: bool) -> std::io::Result<impl Future<Output = &'static str>> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut interrupt = signal(SignalKind::interrupt())?;
    let mut terminate = signal(SignalKind::terminate())?;
    let mut hangup = hangup.then(|| signal(SignalKind::hangup())).transpose()?;
    Ok(async move {
        let hung_up = async {
            match hangup.as_mut() {
                Some(hangup) => hangup.recv().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = interrupt.recv() => "SIGINT",
            _ = terminate.recv() => "SIGTERM",
            _ = hung_up => "SIGHUP",
        }
    })
}

#[cfg(not(unix))]
pub(crate) fn stop_requested(_hangup: bool) -> std::io::Result<impl Future<Output = &'static str>> {
    Ok(async {
        let _ = tokio::signal::ctrl_c().await;
        "Ctrl-C"
    })
}
