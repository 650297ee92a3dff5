//! The simulated storage host that lock holders write to: the resource a
//! lock protects. With fencing on, it accepts a write only with a sequencer
//! at least as new as the newest it has seen (Chubby's sequencer check), so
//! a holder that was cut off and superseded cannot write late.
//!
//! Protocol, one line each way: `WRITE <lock> <generation> <client>` is
//! answered `OK` or `STALE <newest>`.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use futures::{SinkExt, StreamExt};
use tokio_util::codec::{Framed, LinesCodec};

use super::trace::{Trace, What};

/// The storage host's name and port.
pub const HOST: &str = "storage";
pub const PORT: u16 = 7272;
const MAX_LINE: usize = 512;

/// Serves writes until the simulation ends.
pub async fn serve(trace: Trace, fencing: bool) -> Result<(), Box<dyn std::error::Error>> {
    let listener =
        turmoil::net::TcpListener::bind((IpAddr::from(Ipv4Addr::UNSPECIFIED), PORT)).await?;
    // Shared by every connection: the host has one disk.
    let newest = std::sync::Arc::new(std::sync::Mutex::new(BTreeMap::<String, u64>::new()));
    loop {
        let (stream, _) = listener.accept().await?;
        let (trace, newest) = (trace.clone(), newest.clone());
        tokio::spawn(async move {
            let mut lines = Framed::new(stream, LinesCodec::new_with_max_length(MAX_LINE));
            while let Some(Ok(line)) = lines.next().await {
                let parts: Vec<&str> = line.split(' ').collect();
                let ["WRITE", lock, generation, client] = parts[..] else {
                    return;
                };
                let Ok(generation) = generation.parse::<u64>() else {
                    return;
                };
                let (accepted, seen) = {
                    let mut newest = newest.lock().unwrap();
                    let seen = newest.get(lock).copied().unwrap_or(0);
                    let accepted = !fencing || generation >= seen;
                    if accepted {
                        newest.insert(lock.to_string(), seen.max(generation));
                    }
                    (accepted, seen)
                };
                trace.push(
                    client,
                    What::Write {
                        lock: lock.to_string(),
                        generation,
                        accepted,
                        newest: seen,
                    },
                );
                let answer = if accepted {
                    "OK".to_string()
                } else {
                    format!("STALE {seen}")
                };
                if lines.send(answer).await.is_err() {
                    return;
                }
            }
        });
    }
}

/// A client's connection to the storage host, made again after a failure.
#[derive(Default)]
pub struct StorageClient {
    conn: Option<Framed<turmoil::net::TcpStream, LinesCodec>>,
}

/// How a write went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Written {
    Accepted,
    Stale,
    /// No answer; it may still arrive and be judged later.
    Unknown,
}

impl StorageClient {
    /// Writes under `lock` with `generation` as its sequencer.
    pub async fn write(&mut self, client: &str, lock: &str, generation: u64) -> Written {
        let attempt = async {
            if self.conn.is_none() {
                let stream = turmoil::net::TcpStream::connect((HOST, PORT)).await.ok()?;
                self.conn = Some(Framed::new(
                    stream,
                    LinesCodec::new_with_max_length(MAX_LINE),
                ));
            }
            let conn = self.conn.as_mut()?;
            conn.send(format!("WRITE {lock} {generation} {client}"))
                .await
                .ok()?;
            let answer = conn.next().await?.ok()?;
            Some(if answer == "OK" {
                Written::Accepted
            } else {
                Written::Stale
            })
        };
        match tokio::time::timeout(Duration::from_secs(1), attempt).await {
            Ok(Some(written)) => written,
            _ => {
                // A late answer on this connection would be taken for the
                // next write's.
                self.conn = None;
                Written::Unknown
            }
        }
    }
}
