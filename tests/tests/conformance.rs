//! The conformance harness passes against the real server, and fails the
//! right rules against deliberately broken ones.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use futures::{SinkExt, StreamExt};
use leasehold_protocol::{
    ClientFrame, FrameCodec, Request, Response, Sequencer, ServerFrame, DEFAULT_MAX_FRAME,
};
use leasehold_server::{ServerTls, TlsFiles};
use leasehold_tests::certs::Pki;
use leasehold_tests::conformance::{self, Ctx};
use leasehold_tests::raw::RawTls;
use leasehold_tests::server::{short_lease_config, start, start_on, Setup};
use tokio_util::codec::Framed;

// Every case, the failover ones included: the harness restarts the master
// on its data directory.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_passes_every_conformance_case() {
    passes_every_case("plain", None).await;
}

// TLS-1, TLS-2: every case again, the harness speaking TLS to a master
// that asks for a client certificate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_passes_every_conformance_case_over_mutual_tls() {
    let dir =
        std::env::temp_dir().join(format!("leasehold-conformance-pki-{}", std::process::id()));
    let pki = Pki::new(&dir, "conformance");
    passes_every_case("tls", Some(&pki)).await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// Runs every case against a master of its own, named `name`, speaking
/// mutual TLS with `pki` when given.
async fn passes_every_case(name: &str, pki: Option<&Pki>) {
    let dir = std::env::temp_dir().join(format!(
        "leasehold-conformance-{name}-{}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    let mut master_config = short_lease_config();
    master_config.tls = pki.map(|pki| {
        ServerTls::load(TlsFiles {
            cert: pki.server.cert.clone(),
            key: pki.server.key.clone(),
            client_ca: Some(pki.ca.clone()),
        })
        .unwrap()
    });
    let tls = pki.map(|pki| {
        let client = (pki.client.cert.as_path(), pki.client.key.as_path());
        RawTls::load(&pki.ca, Some(client), "127.0.0.1").unwrap()
    });
    let config = Setup::durable(&dir, master_config);
    let server = start(config.clone()).await;
    let addr = server.addr;
    let running = Arc::new(tokio::sync::Mutex::new(Some(server)));
    let restart: conformance::Restart = {
        let running = running.clone();
        Arc::new(move || {
            let (running, config) = (running.clone(), config.clone());
            Box::pin(async move {
                let mut slot = running.lock().await;
                if let Some(server) = slot.take() {
                    server.shutdown().await.map_err(|e| e.to_string())?;
                }
                *slot = Some(start_on(addr, config).await);
                Ok(())
            })
        })
    };
    let ctx = Ctx {
        addr,
        restart: Some(restart),
        tls,
    };
    let outcomes = conformance::run(&ctx, &conformance::cases(), Duration::from_secs(30)).await;
    let failed: Vec<String> = outcomes
        .iter()
        .filter(|o| o.result.is_err())
        .map(|o| format!("{} {}: {:?}", o.rules.join(","), o.name, o.result))
        .collect();
    assert!(
        failed.is_empty(),
        "failed or skipped cases:\n{}",
        failed.join("\n")
    );
    // The run leaves the server it checked as it found it: no session, no
    // key.
    let client_config = leasehold::ClientConfig {
        tls: pki.map(|pki| {
            leasehold::TlsOptions::new(&pki.ca)
                .client_certificate(&pki.client.cert, &pki.client.key)
        }),
        ..Default::default()
    };
    let client = leasehold::Client::connect_with(addr.to_string(), client_config)
        .await
        .unwrap();
    let sessions = client.list_sessions().await.unwrap();
    assert!(
        sessions.is_empty(),
        "{} sessions left: {sessions:?}",
        sessions.len()
    );
    let keys = client.list("", true).await.unwrap();
    assert!(keys.is_empty(), "{} keys left: {keys:?}", keys.len());
    if let Some(server) = running.lock().await.take() {
        let _ = server.shutdown().await;
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A broken server: a relay that speaks the protocol and rewrites frames on
/// their way, in front of a real master.
async fn broken(
    upstream: SocketAddr,
    to_server: fn(ClientFrame) -> ClientFrame,
    to_client: fn(ServerFrame) -> ServerFrame,
) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let Ok(server) = tokio::net::TcpStream::connect(upstream).await else {
                continue;
            };
            let client = Framed::new(
                client,
                FrameCodec::<ClientFrame, ServerFrame>::new(DEFAULT_MAX_FRAME),
            );
            let server = Framed::new(
                server,
                FrameCodec::<ServerFrame, ClientFrame>::new(DEFAULT_MAX_FRAME),
            );
            let (mut client_tx, mut client_rx) = client.split();
            let (mut server_tx, mut server_rx) = server.split();
            tokio::spawn(async move {
                while let Some(Ok(frame)) = client_rx.next().await {
                    if server_tx.send(to_server(frame)).await.is_err() {
                        break;
                    }
                }
            });
            tokio::spawn(async move {
                while let Some(Ok(frame)) = server_rx.next().await {
                    if client_tx.send(to_client(frame)).await.is_err() {
                        break;
                    }
                }
            });
        }
    });
    addr
}

/// Which of the cases covering `rules` fail against `addr` (a broken
/// server may make others hang until their timeout, so only these run).
async fn failing(addr: SocketAddr, rules: &[&str]) -> Vec<&'static str> {
    let mut cases = conformance::cases();
    cases.retain(|c| c.rules.iter().any(|r| rules.contains(r)));
    let outcomes = conformance::run(&Ctx::new(addr), &cases, Duration::from_secs(30)).await;
    outcomes
        .iter()
        .filter(|o| o.failed())
        .map(|o| o.name)
        .collect()
}

fn same(frame: ClientFrame) -> ClientFrame {
    frame
}

fn unchanged(frame: ServerFrame) -> ServerFrame {
    frame
}

// KA-2: a server that answers every KeepAlive at once is caught.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_answers_keepalives_at_once_fails_ka_2() {
    let server = start(short_lease_config()).await;
    fn no_hold(frame: ClientFrame) -> ClientFrame {
        match frame {
            ClientFrame::Request {
                id,
                body: Request::KeepAlive(mut ka),
            } => {
                ka.hold = false;
                ClientFrame::Request {
                    id,
                    body: Request::KeepAlive(ka),
                }
            }
            other => other,
        }
    }
    let addr = broken(server.addr, no_hold, unchanged).await;
    let failed = failing(addr, &["KA-2", "HS-1"]).await;
    assert!(
        failed.contains(&"a_held_keepalive_is_answered_a_margin_before_expiry"),
        "{failed:?}"
    );
    assert!(
        !failed.contains(&"hello_is_answered_with_welcome"),
        "{failed:?}"
    );
}

// LOCK-2: a server that reuses a lock generation is caught.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_reuses_a_lock_generation_fails_lock_2() {
    let server = start(short_lease_config()).await;
    fn generation_one(frame: ServerFrame) -> ServerFrame {
        match frame {
            ServerFrame::Reply {
                id,
                body: Ok(Response::Acquired { index, sequencer }),
            } => {
                let sequencer = match Sequencer::from_bytes(&sequencer) {
                    Some(s) => Sequencer {
                        lock_generation: 1,
                        ..s
                    }
                    .to_bytes(),
                    None => sequencer,
                };
                ServerFrame::Reply {
                    id,
                    body: Ok(Response::Acquired { index, sequencer }),
                }
            }
            other => other,
        }
    }
    let addr = broken(server.addr, same, generation_one).await;
    let failed = failing(addr, &["LOCK-2", "NS-6"]).await;
    assert!(
        failed.contains(&"a_lock_generation_rises_only_when_the_lock_goes_from_free_to_held"),
        "{failed:?}"
    );
    assert!(
        !failed.contains(&"a_put_with_cas_writes_only_at_the_index_it_names"),
        "{failed:?}"
    );
}

// LOCK-4: a master that carries out every release, whichever acquire it
// names, is caught, by the plain case and by the one whose release stalls
// on its way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_carries_out_stale_releases_fails_lock_4() {
    let config = leasehold_server::Config {
        unsafe_unfenced_releases: true,
        ..short_lease_config()
    };
    let server = start(config).await;
    let failed = failing(server.addr, &["LOCK-4"]).await;
    for case in [
        "a_release_naming_an_acquire_older_than_the_holdings_latest_changes_nothing",
        "a_release_delivered_late_on_a_stalled_connection_leaves_a_later_acquire_held",
    ] {
        assert!(failed.contains(&case), "{case} passed: {failed:?}");
    }
    assert!(
        !failed.contains(&"only_a_holder_may_release_a_lock"),
        "{failed:?}"
    );
}
