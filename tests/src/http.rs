//! Plain HTTP/1.1 requests to an operator's HTTP port, as a scraper or a
//! probe sends them, and reading figures out of Prometheus text.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// An HTTP response: its status code, its headers in lower case, its body.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub headers: String,
    pub body: String,
}

/// `GET path`, with `bearer` as its bearer token if given.
pub async fn get(addr: SocketAddr, path: &str, bearer: Option<&str>) -> Answer {
    get_for(addr, &addr.to_string(), path, bearer).await
}

/// `GET path` naming `host` in its Host header; at most 10 s.
pub async fn get_for(addr: SocketAddr, host: &str, path: &str, bearer: Option<&str>) -> Answer {
    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    get_over(stream, host, path, bearer).await.unwrap()
}

/// `GET path` over HTTPS as `tls` speaks it (its roots, and its client
/// certificate if it has one); `Err` with the reason if the handshake
/// fails.
pub async fn get_tls(
    addr: SocketAddr,
    tls: &crate::raw::RawTls,
    path: &str,
    bearer: Option<&str>,
) -> Result<Answer, String> {
    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let stream = tls
        .connector
        .connect(tls.name.clone(), stream)
        .await
        .map_err(|e| e.to_string())?;
    get_over(stream, &addr.to_string(), path, bearer).await
}

/// `GET path` over `stream`, naming `host`; at most 10 s. `Err` with the
/// reason if the stream fails before anything is read.
pub async fn get_over<S>(
    mut stream: S,
    host: &str,
    path: &str,
    bearer: Option<&str>,
) -> Result<Answer, String>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let auth = bearer.map_or(String::new(), |t| format!("Authorization: Bearer {t}\r\n"));
    let request = format!("GET {path} HTTP/1.1\r\nHost: {host}\r\n{auth}Connection: close\r\n\r\n");
    stream
        .write_all(request.as_bytes())
        .await
        .map_err(|e| e.to_string())?;
    let mut raw = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut raw))
        .await
        .expect("an answer within 10 s");
    // A TLS peer that closes without close_notify ends the read in an
    // error after the whole answer: what arrived is the answer.
    if let (true, Err(e)) = (raw.is_empty(), read) {
        return Err(e.to_string());
    }
    let raw = String::from_utf8_lossy(&raw).to_string();
    let (head, body) = raw.split_once("\r\n\r\n").unwrap_or((&raw, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    Ok(Answer {
        status,
        headers: head.to_lowercase(),
        body: body.to_string(),
    })
}

/// The value of the sample `name` (with its labels, as written) in
/// Prometheus text.
pub fn sample(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
}
