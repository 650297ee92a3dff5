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
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let auth = bearer.map_or(String::new(), |t| format!("Authorization: Bearer {t}\r\n"));
    let request = format!("GET {path} HTTP/1.1\r\nHost: {host}\r\n{auth}Connection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut raw = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut raw))
        .await
        .expect("an answer within 10 s")
        .unwrap();
    let raw = String::from_utf8_lossy(&raw).to_string();
    let (head, body) = raw.split_once("\r\n\r\n").unwrap_or((&raw, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    Answer {
        status,
        headers: head.to_lowercase(),
        body: body.to_string(),
    }
}

/// The value of the sample `name` (with its labels, as written) in
/// Prometheus text.
pub fn sample(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
}
