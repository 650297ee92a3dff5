//! The operator's HTTP port (SPEC `OPS-2`, `OPS-3`, `OPS-5`): `/metrics`
//! in Prometheus' OpenMetrics text, `/health` and `/ready` with the JSON
//! bodies etcd's and Kubernetes' probes read, and the status page at `/`
//! with the data it polls at `/api/status`. HTTP/1.1, `GET` only; each
//! connection is a task of its own, their number is bounded, and a
//! client that does not finish its headers in time is cut off.

use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::{
    HeaderValue, ALLOW, AUTHORIZATION, CACHE_CONTROL, CONTENT_SECURITY_POLICY, CONTENT_TYPE, HOST,
    WWW_AUTHENTICATE, X_CONTENT_TYPE_OPTIONS,
};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use leasehold_protocol::auth::same_bytes;
use tokio::net::TcpListener;
use tokio::sync::{watch, Semaphore};
use tracing::debug;

use crate::config::{HTTP_HEADER_TIMEOUT, HTTP_MAX_BUFFER, HTTP_MAX_CONNECTIONS};
use crate::metrics::{Metrics, CONTENT_TYPE as METRICS_CONTENT_TYPE};
use crate::status_page::{Asker, Refused, PAGE_CSS, PAGE_HTML, PAGE_JS};

/// What the port says of the master's health (`OPS-3`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Health {
    /// Whether this process serves clients: as the master, or as a cell's
    /// member that knows its master.
    pub serving: bool,
    /// Why not, when it does not: said to whoever asks, so nothing secret.
    pub reason: String,
}

impl Health {
    /// Serving.
    pub fn serving() -> Health {
        Health {
            serving: true,
            reason: String::new(),
        }
    }

    /// Not serving, because of `reason`.
    pub fn not_serving(reason: impl Into<String>) -> Health {
        Health {
            serving: false,
            reason: reason.into(),
        }
    }
}

/// What the port serves: the master's metrics, its health as the
/// master's tasks keep it, and, given the master, the status page.
#[derive(Debug, Clone)]
pub struct HttpPort {
    metrics: Metrics,
    health: watch::Receiver<Health>,
    /// The master the page asks; `None`: no page, and `/metrics` open.
    asker: Option<Asker>,
    /// Host names answered besides IP addresses and `localhost`.
    hosts: Vec<String>,
    /// On a cell's member, the token `/metrics` needs, if any: the
    /// operator token. A member that follows has no master to ask whose
    /// another token is.
    operator_token: Option<String>,
    /// A cell's member: `/metrics` is open unless it has an operator
    /// token, whatever the page's data needs.
    member: bool,
    /// Whether the Host of a data request is checked (`answers_host`).
    checks_host: bool,
    /// The master's TLS: the port speaks HTTPS with its certificate.
    tls: Option<crate::tls::ServerTls>,
}

impl HttpPort {
    /// A port serving `metrics` and the health `health` watches, without
    /// the status page (`Server::with_http` serves one with it).
    pub fn new(metrics: Metrics, health: watch::Receiver<Health>) -> HttpPort {
        HttpPort {
            metrics,
            health,
            asker: None,
            hosts: Vec::new(),
            operator_token: None,
            member: false,
            checks_host: false,
            tls: None,
        }
    }

    /// The same port, speaking HTTPS with `tls`'s certificate (read again
    /// with it on SIGHUP) if given; a client certificate its client CA
    /// signed names the request's principal, and none is needed
    /// (`OPS-2`).
    pub(crate) fn with_tls(mut self, tls: Option<crate::tls::ServerTls>) -> HttpPort {
        self.tls = tls;
        self
    }

    /// The same port, answering its data to requests for `hosts` too
    /// (besides IP addresses and `localhost`), and to no other.
    pub(crate) fn with_hosts(mut self, hosts: &[String]) -> HttpPort {
        self.hosts = hosts.iter().map(|h| h.to_ascii_lowercase()).collect();
        self.checks_host = true;
        self
    }

    /// The same port, as a cell's member's: the page asks the master it
    /// runs while it is the master and shows what it says of the cell
    /// (`asker`), and `/metrics` needs `token` as a bearer token, if given.
    pub(crate) fn for_member(mut self, asker: Asker, token: Option<&str>) -> HttpPort {
        self.asker = Some(asker);
        self.operator_token = token.map(str::to_string);
        self.member = true;
        self
    }

    /// The same port, with the status page of the master `master`,
    /// answering its data to requests for `hosts` too.
    pub(crate) fn with_master(
        mut self,
        master: crate::master::MasterHandle,
        hosts: &[String],
    ) -> HttpPort {
        self.asker = Some(Asker::new(master));
        self.with_hosts(hosts)
    }

    /// Whether a request for `host` (its Host header) is for this port: an
    /// IP address, `localhost`, or a name it was given. A browser sends the
    /// name in its address bar, so another site's script that made its own
    /// name resolve to this machine (DNS rebinding) names that, and is
    /// refused. No header (a program, not a browser) is answered.
    fn answers_host(&self, host: Option<&str>) -> bool {
        let Some(host) = host else {
            return true;
        };
        let name = match host.strip_prefix('[') {
            Some(v6) => v6.split(']').next().unwrap_or(""),
            None => host.rsplit_once(':').map_or(host, |(name, _)| name),
        };
        name.parse::<std::net::IpAddr>().is_ok()
            || name.eq_ignore_ascii_case("localhost")
            || self.hosts.iter().any(|h| name.eq_ignore_ascii_case(h))
    }
}

/// Serves `port` on `listener` until `shutdown` resolves.
///
/// ```no_run
/// # async fn example() -> std::io::Result<()> {
/// use leasehold_server::http::{serve_http, Health, HttpPort};
/// use leasehold_server::Metrics;
///
/// let (_health, watched) = tokio::sync::watch::channel(Health::serving());
/// let port = HttpPort::new(Metrics::new(), watched);
/// let listener = tokio::net::TcpListener::bind("127.0.0.1:7180").await?;
/// serve_http(listener, port, async {
///     let _ = tokio::signal::ctrl_c().await;
/// })
/// .await;
/// # Ok(())
/// # }
/// ```
pub async fn serve_http(
    listener: TcpListener,
    port: HttpPort,
    shutdown: impl Future<Output = ()> + Send,
) {
    let port = Arc::new(port);
    let room = Arc::new(Semaphore::new(HTTP_MAX_CONNECTIONS));
    tokio::pin!(shutdown);
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = &mut shutdown => return,
        };
        let (stream, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(error) => {
                // Out of descriptors, most likely: wait rather than spin.
                debug!(%error, "accepting an HTTP connection failed");
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                continue;
            }
        };
        // Over the bound, a connection is closed unanswered.
        let Ok(permit) = room.clone().try_acquire_owned() else {
            debug!(%peer, "too many HTTP connections: closed");
            continue;
        };
        let port = port.clone();
        tokio::spawn(async move {
            match port.tls.as_ref().map(crate::tls::ServerTls::http_acceptor) {
                None => serve_connection(stream, None, port, peer).await,
                Some(acceptor) => {
                    match speaks_tls(&stream).await {
                        Some(true) => {}
                        Some(false) => {
                            answer_plaintext(stream).await;
                            drop(permit);
                            return;
                        }
                        // Silent past the headers' time: closed, so a
                        // peer that sends nothing holds a slot no longer.
                        None => {
                            drop(permit);
                            return;
                        }
                    }
                    // The handshake within the time the headers get.
                    let shaken = tokio::time::timeout(HTTP_HEADER_TIMEOUT, acceptor.accept(stream));
                    match shaken.await {
                        Ok(Ok(stream)) => {
                            let certified = stream
                                .get_ref()
                                .1
                                .peer_certificates()
                                .and_then(|certs| certs.first())
                                .and_then(|cert| crate::cert_name::common_name(cert.as_ref()));
                            serve_connection(stream, certified, port, peer).await;
                        }
                        Ok(Err(error)) => debug!(%peer, %error, "HTTPS handshake failed"),
                        Err(_) => debug!(%peer, "HTTPS handshake timed out"),
                    }
                }
            }
            drop(permit);
        });
    }
}

/// Whether the first byte from `stream` starts a TLS handshake record
/// (22), waiting for it as long as headers may take; `None` if none came.
async fn speaks_tls(stream: &tokio::net::TcpStream) -> Option<bool> {
    let mut first = [0u8; 1];
    match tokio::time::timeout(HTTP_HEADER_TIMEOUT, stream.peek(&mut first)).await {
        Ok(Ok(1)) => Some(first[0] == 22),
        _ => None,
    }
}

/// Tells a plaintext HTTP client at the HTTPS port what to use instead,
/// as the client port tells a plaintext client (`OPS-2`), reading its
/// request first so that the answer is not lost to a reset.
async fn answer_plaintext(mut stream: tokio::net::TcpStream) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let body = "this port speaks HTTPS: use https://\n";
    let answer = format!(
        "HTTP/1.1 400 Bad Request\r\ncontent-type: text/plain; charset=utf-8\r\n\
         content-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    let mut request = vec![0u8; HTTP_MAX_BUFFER];
    let _ = tokio::time::timeout(HTTP_HEADER_TIMEOUT, stream.read(&mut request)).await;
    let _ = stream.write_all(answer.as_bytes()).await;
    let _ = stream.shutdown().await;
    // What else it sent is read and dropped, for a moment, so that its
    // close is not a reset that loses the answer.
    let _ = tokio::time::timeout(std::time::Duration::from_millis(500), async {
        while matches!(stream.read(&mut request).await, Ok(n) if n > 0) {}
    })
    .await;
}

/// Serves HTTP/1.1 on one connection from `peer`, whose client
/// certificate named `certified`, if any.
async fn serve_connection<S>(
    stream: S,
    certified: Option<String>,
    port: Arc<HttpPort>,
    peer: std::net::SocketAddr,
) where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let certified = Arc::new(certified);
    let service = service_fn(move |request| {
        let (port, certified) = (port.clone(), certified.clone());
        async move {
            let answer = answer(&port, &request, peer.ip(), certified.as_deref()).await;
            Ok::<_, Infallible>(answer)
        }
    });
    let served = http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(HTTP_HEADER_TIMEOUT)
        .max_buf_size(HTTP_MAX_BUFFER)
        .keep_alive(true)
        .serve_connection(TokioIo::new(stream), service)
        .await;
    if let Err(error) = served {
        debug!(%peer, %error, "HTTP connection ended");
    }
}

/// The answer to `request`, from `peer`, whose client certificate named
/// `certified`, if any.
async fn answer(
    port: &HttpPort,
    request: &Request<Incoming>,
    peer: std::net::IpAddr,
    certified: Option<&str>,
) -> Response<Full<Bytes>> {
    let path = request.uri().path();
    let page =
        port.asker.is_some() && matches!(path, "/" | "/status.css" | "/status.js" | "/api/status");
    if !page && !matches!(path, "/metrics" | "/health" | "/ready") {
        return text(
            StatusCode::NOT_FOUND,
            match port.asker {
                Some(_) => "not found: /, /api/status, /metrics, /health or /ready\n",
                None => "not found: /metrics, /health or /ready\n",
            },
        );
    }
    if request.method() != Method::GET && request.method() != Method::HEAD {
        let mut response = text(StatusCode::METHOD_NOT_ALLOWED, "only GET\n");
        response
            .headers_mut()
            .insert(ALLOW, HeaderValue::from_static("GET, HEAD"));
        return response;
    }
    let data = matches!(path, "/api/status" | "/metrics");
    let host = request
        .headers()
        .get(HOST)
        .map(|v| v.to_str().unwrap_or("\u{fffd}"));
    if data && port.checks_host && !port.answers_host(host) {
        return text(
            StatusCode::MISDIRECTED_REQUEST,
            "this port answers its data for an IP address or localhost; give serve \
             --http-host NAME to answer for NAME too\n",
        );
    }
    let bearer = request
        .headers()
        .get(AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim);
    match path {
        "/" => asset(PAGE_HTML, "text/html; charset=utf-8"),
        "/status.css" => asset(PAGE_CSS, "text/css; charset=utf-8"),
        "/status.js" => asset(PAGE_JS, "text/javascript; charset=utf-8"),
        "/api/status" => {
            let Some(asker) = &port.asker else {
                return text(StatusCode::NOT_FOUND, "not found\n");
            };
            // A member that follows says what `cell status` says, to
            // anyone, as its client port does (`CELL-8`).
            let status = match asker.master_now() {
                None => Ok(serde_json::json!({
                    "identity": null,
                    "cell": asker.cell(),
                    "master": null,
                })),
                Some(_) => match asker.caller(peer, certified, bearer).await {
                    Ok((caller, identity)) => asker.status(&caller, &identity).await,
                    Err(refused) => Err(refused),
                },
            };
            match status {
                Ok(body) => {
                    let mut response = Response::new(Full::new(Bytes::from(format!("{body}\n"))));
                    let headers = response.headers_mut();
                    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
                    headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
                    response
                }
                Err(refused) => refusal(refused),
            }
        }
        "/metrics" => {
            if port.member {
                if let Some(token) = &port.operator_token {
                    let proven = bearer.is_some_and(|b| same_bytes(b.as_bytes(), token.as_bytes()));
                    if !proven {
                        return refusal(Refused::Unauthenticated(
                            "a member's metrics need the operator token as a bearer token".into(),
                        ));
                    }
                }
            } else if let Some(asker) = &port.asker {
                if let Err(refused) = asker.may_read_metrics(peer, certified, bearer).await {
                    return refusal(refused);
                }
            }
            let mut response = Response::new(Full::new(Bytes::from(port.metrics.encode())));
            response
                .headers_mut()
                .insert(CONTENT_TYPE, HeaderValue::from_static(METRICS_CONTENT_TYPE));
            response
        }
        // Alive and able to serve, as a probe asks (`OPS-3`); a single
        // master is ready whenever it is healthy.
        _ => {
            let health = port.health.borrow().clone();
            let status = if health.serving {
                StatusCode::OK
            } else {
                StatusCode::SERVICE_UNAVAILABLE
            };
            let body = serde_json::json!({
                "health": if health.serving { "true" } else { "false" },
                "reason": health.reason,
            });
            let mut response = Response::new(Full::new(Bytes::from(format!("{body}\n"))));
            *response.status_mut() = status;
            response
                .headers_mut()
                .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
            response
        }
    }
}

/// A file of the status page. Its policy lets it load nothing but itself,
/// so that no key or name a client chose can run as script.
fn asset(body: &'static str, content_type: &'static str) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from_static(body.as_bytes())));
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(
        CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; \
             form-action 'none'; frame-ancestors 'none'",
        ),
    );
    headers.insert(X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    response
}

/// A request the master's data is not shown to: why, in a line that
/// repeats nothing the request sent.
fn refusal(refused: Refused) -> Response<Full<Bytes>> {
    let (status, why) = match refused {
        Refused::Unauthenticated(why) => (StatusCode::UNAUTHORIZED, why),
        Refused::Unavailable(why) => (StatusCode::SERVICE_UNAVAILABLE, why),
    };
    let mut response = Response::new(Full::new(Bytes::from(format!("{why}\n"))));
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    if status == StatusCode::UNAUTHORIZED {
        headers.insert(
            WWW_AUTHENTICATE,
            HeaderValue::from_static("Bearer realm=\"leasehold\""),
        );
    }
    response
}

fn text(status: StatusCode, body: &'static str) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from_static(body.as_bytes())));
    *response.status_mut() = status;
    response.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}
