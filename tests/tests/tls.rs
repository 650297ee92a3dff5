//! TLS on the client port (SPEC `TLS-1`..`TLS-4`): tried with the library
//! and from outside it, with raw bytes.

use std::path::PathBuf;
use std::time::Duration;

use leasehold::{
    Client, ClientConfig, ClientError, PutOptions, Remedy, SessionOptions, SessionState, TlsOptions,
};
use leasehold_protocol::{ClientFrame, ErrorCode, Hello};
use leasehold_server::{Config, ServerTls, TlsFiles};
use leasehold_tests::certs::{Pair, Pki};
use leasehold_tests::fixture::TempDir;
use leasehold_tests::raw::RawConnection;
use leasehold_tests::server::{start, TestServer};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A directory of its own for each test's certificates, removed with
/// everything in it when the test ends.
fn dir(test: &str) -> TempDir {
    TempDir::new(&format!("tls-{test}"))
}

fn server_tls(pki: &Pki, client_ca: Option<&PathBuf>) -> ServerTls {
    ServerTls::load(TlsFiles {
        cert: pki.server.cert.clone(),
        key: pki.server.key.clone(),
        client_ca: client_ca.cloned(),
    })
    .expect("the test certificates load")
}

async fn tls_master(pki: &Pki, client_ca: Option<&PathBuf>) -> (TestServer, ServerTls) {
    let tls = server_tls(pki, client_ca);
    let config = Config {
        tls: Some(tls.clone()),
        ..Config::default()
    };
    (start(config).await, tls)
}

fn client_config(tls: TlsOptions) -> ClientConfig {
    ClientConfig {
        tls: Some(tls),
        connect_timeout: Duration::from_secs(10),
        ..ClientConfig::default()
    }
}

async fn connect(server: &TestServer, tls: TlsOptions) -> Result<Client, ClientError> {
    Client::connect_with(server.addr.to_string(), client_config(tls)).await
}

/// The whole message of an error, its causes included.
fn said(error: &ClientError) -> String {
    let mut text = error.to_string();
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

// TLS-1, TLS-2: a client that trusts the master's CA is served over TLS.
#[tokio::test]
async fn a_client_that_trusts_the_masters_ca_is_served_over_tls() {
    let d = dir("served");
    let pki = Pki::new(&d, "cell");
    let (server, _) = tls_master(&pki, None).await;
    let client = connect(&server, TlsOptions::new(&pki.ca)).await.unwrap();
    let session = client
        .create_session(SessionOptions::new("tls"))
        .await
        .unwrap();
    client
        .put("tls/k", b"v".to_vec(), PutOptions::default())
        .await
        .unwrap();
    let node = client.get("tls/k").await.unwrap().unwrap();
    assert_eq!(node.contents.as_deref(), Some(&b"v"[..]));
    session.close().await.unwrap();
}

// TLS-2: the master's certificate is checked against a name given in
// place of the address's host.
#[tokio::test]
async fn the_certificate_is_checked_against_an_explicit_server_name() {
    let d = dir("name");
    let pki = Pki::new(&d, "cell");
    let (server, _) = tls_master(&pki, None).await;
    let named = TlsOptions::new(&pki.ca).server_name("localhost");
    connect(&server, named).await.expect("localhost is named");
    let wrong = TlsOptions::new(&pki.ca).server_name("lock.example");
    let refused = connect(&server, wrong).await.unwrap_err();
    assert!(
        said(&refused).contains("does not name lock.example"),
        "{}",
        said(&refused)
    );
}

// TLS-2: a master whose certificate another CA signed is refused, and the
// client says why.
#[tokio::test]
async fn a_master_signed_by_another_ca_is_refused_with_the_reason() {
    let d = dir("other-ca");
    let (pki, other) = (Pki::new(&d, "cell"), Pki::new(&d, "other"));
    let (server, _) = tls_master(&pki, None).await;
    let refused = connect(&server, TlsOptions::new(&other.ca))
        .await
        .unwrap_err();
    assert!(
        said(&refused).contains("not signed by the CA given"),
        "{}",
        said(&refused)
    );
    // Trying again cannot mend a certificate.
    assert_eq!(refused.remedy(), Remedy::GiveUp);
}

// TLS-3: a plaintext client on a TLS port is told so, in a Close it can
// read, not left hanging.
#[tokio::test]
async fn a_plaintext_client_on_a_tls_port_is_told_to_use_tls() {
    let d = dir("plaintext-client");
    let pki = Pki::new(&d, "cell");
    let (server, _) = tls_master(&pki, None).await;
    let mut raw = RawConnection::connect(server.addr).await;
    raw.send(ClientFrame::Hello(Hello::current())).await;
    let close = raw.closed_with().await.expect("a Close");
    assert_eq!(close.code, ErrorCode::Malformed);
    assert!(close.message.contains("speaks TLS"), "{close:?}");
    let refused = Client::connect(server.addr.to_string()).await.unwrap_err();
    assert!(said(&refused).contains("speaks TLS"), "{}", said(&refused));
}

// TLS-3: a TLS client on a plaintext port says the server does not speak
// TLS there, at once.
#[tokio::test]
async fn a_tls_client_on_a_plaintext_port_says_the_server_does_not_speak_tls() {
    let d = dir("tls-client");
    let pki = Pki::new(&d, "cell");
    let server = start(Config::default()).await;
    let refused = connect(&server, TlsOptions::new(&pki.ca))
        .await
        .unwrap_err();
    assert!(
        said(&refused).contains("does not speak TLS"),
        "{}",
        said(&refused)
    );
    assert_eq!(refused.remedy(), Remedy::Reconnect);
}

// TLS-1: with a client CA, a client without a certificate, or with one
// another CA signed, is refused; one the client CA signed is served.
#[tokio::test]
async fn with_a_client_ca_only_clients_it_signed_are_served() {
    let d = dir("mutual");
    let (pki, other) = (Pki::new(&d, "cell"), Pki::new(&d, "other"));
    let (server, _) = tls_master(&pki, Some(&pki.ca)).await;
    let without = connect(&server, TlsOptions::new(&pki.ca))
        .await
        .unwrap_err();
    assert!(
        said(&without).contains("client certificate"),
        "{}",
        said(&without)
    );
    let Pair { cert, key } = &other.client;
    let foreign = TlsOptions::new(&pki.ca).client_certificate(cert, key);
    let refused = connect(&server, foreign).await.unwrap_err();
    assert!(
        said(&refused).contains("refused this client's certificate"),
        "{}",
        said(&refused)
    );
    let Pair { cert, key } = &pki.client;
    let signed = TlsOptions::new(&pki.ca).client_certificate(cert, key);
    let client = connect(&server, signed).await.unwrap();
    client
        .put("mutual/k", b"v".to_vec(), PutOptions::default())
        .await
        .unwrap();
}

// TLS-4: new certificates take effect for new connections; connections
// made before go on; a bad file is refused and the old one kept.
#[tokio::test]
async fn a_reload_serves_new_connections_with_the_new_certificate_and_drops_nobody() {
    let d = dir("reload");
    let (first, second) = (Pki::new(&d, "first"), Pki::new(&d, "second"));
    // The master's files are copies that the test replaces.
    let live = TlsFiles {
        cert: d.join("live.pem"),
        key: d.join("live.key"),
        client_ca: None,
    };
    std::fs::copy(&first.server.cert, &live.cert).unwrap();
    std::fs::copy(&first.server.key, &live.key).unwrap();
    let tls = ServerTls::load(live.clone()).unwrap();
    let server = start(Config {
        tls: Some(tls.clone()),
        ..Config::default()
    })
    .await;
    let before = connect(&server, TlsOptions::new(&first.ca)).await.unwrap();
    let session = before
        .create_session(SessionOptions::new("before"))
        .await
        .unwrap();

    std::fs::write(&live.cert, b"not a certificate").unwrap();
    assert!(tls.reload().is_err(), "a bad file is refused");
    connect(&server, TlsOptions::new(&first.ca))
        .await
        .expect("the old certificate stays in force");

    std::fs::copy(&second.server.cert, &live.cert).unwrap();
    std::fs::copy(&second.server.key, &live.key).unwrap();
    tls.reload().unwrap();
    connect(&server, TlsOptions::new(&second.ca))
        .await
        .expect("new connections get the new certificate");
    assert!(connect(&server, TlsOptions::new(&first.ca)).await.is_err());
    before
        .put("reload/k", b"v".to_vec(), PutOptions::default())
        .await
        .expect("the old connection goes on");
    assert_eq!(session.state(), SessionState::Normal);
}

// TLS-3: garbage that starts like a TLS record closes that connection and
// no other.
#[tokio::test]
async fn garbage_instead_of_a_client_hello_closes_only_that_connection() {
    let d = dir("garbage");
    let pki = Pki::new(&d, "cell");
    let (server, _) = tls_master(&pki, None).await;
    let mut stream = tokio::net::TcpStream::connect(server.addr).await.unwrap();
    let mut garbage = vec![22u8, 3, 1, 0, 40];
    garbage.extend(std::iter::repeat_n(0xAB, 40));
    stream.write_all(&garbage).await.unwrap();
    let mut rest = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(30), stream.read_to_end(&mut rest)).await;
    assert!(read.is_ok(), "the connection is closed");
    connect(&server, TlsOptions::new(&pki.ca))
        .await
        .expect("others are served");
}

// TLS-3, CONN-10: a TLS handshake that never finishes is cut at the
// handshake timeout.
#[tokio::test]
async fn a_handshake_that_never_finishes_is_cut_at_the_handshake_timeout() {
    let d = dir("stalled");
    let pki = Pki::new(&d, "cell");
    let server = start(Config {
        tls: Some(server_tls(&pki, None)),
        handshake_timeout: Duration::from_millis(300),
        ..Config::default()
    })
    .await;
    let mut stream = tokio::net::TcpStream::connect(server.addr).await.unwrap();
    stream.write_all(&[22, 3, 1]).await.unwrap();
    let mut rest = Vec::new();
    // Far beyond the timeout, so that a loaded machine does not fail it.
    let read = tokio::time::timeout(Duration::from_secs(30), stream.read_to_end(&mut rest)).await;
    assert!(read.is_ok(), "still open after 30 s");
}

// ID-1: the client certificate's common name is the connection's
// principal, and the rules apply to it.
#[tokio::test]
async fn a_client_certificates_name_is_its_principal_and_rules_apply_to_it() {
    let d = dir("principal");
    let pki = Pki::new(&d, "acl");
    let tls = server_tls(&pki, Some(&pki.ca));
    let config = Config {
        tls: Some(tls),
        operator_token: Some("operator-token-of-tls-tests".into()),
        ..Config::default()
    };
    let server = start(config).await;
    let Pair { cert, key } = &pki.client;
    let as_client = TlsOptions::new(&pki.ca).client_certificate(cert, key);
    let operator = Client::connect_with(
        server.addr.to_string(),
        ClientConfig {
            token: Some("operator-token-of-tls-tests".into()),
            ..client_config(as_client.clone())
        },
    )
    .await
    .unwrap();
    operator
        .set_rule("pub/ acl-client read".parse().unwrap())
        .await
        .unwrap();
    operator.set_access_control(true).await.unwrap();
    operator
        .put("pub/a", b"1".to_vec(), PutOptions::default())
        .await
        .unwrap();

    let client = connect(&server, as_client).await.unwrap();
    let identity = client.who_am_i().await.unwrap();
    assert_eq!(identity.principal.as_deref(), Some("acl-client"));
    assert_eq!(identity.via, leasehold::Via::Certificate);
    assert!(client.get("pub/a").await.unwrap().is_some());
    let refused = client
        .put("pub/a", b"2".to_vec(), PutOptions::default())
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Some(ErrorCode::PermissionDenied));
    assert!(said(&refused).contains("acl-client"), "{}", said(&refused));
}
