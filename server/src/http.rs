//! The operator's HTTP port (SPEC `OPS-2`, `OPS-3`): `/metrics` in
//! Prometheus' OpenMetrics text, and `/health` and `/ready` with the JSON
//! bodies etcd's and Kubernetes' probes read. HTTP/1.1, `GET` only; each
//! connection is a task of its own, their number is bounded, and a
//! client that does not finish its headers in time is cut off.

use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::{HeaderValue, ALLOW, CONTENT_TYPE};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::{watch, Semaphore};
use tracing::debug;

use crate::config::{HTTP_HEADER_TIMEOUT, HTTP_MAX_BUFFER, HTTP_MAX_CONNECTIONS};
use crate::metrics::{Metrics, CONTENT_TYPE as METRICS_CONTENT_TYPE};

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

/// What the port serves: the master's metrics, and its health as the
/// master's tasks keep it.
#[derive(Debug, Clone)]
pub struct HttpPort {
    pub metrics: Metrics,
    pub health: watch::Receiver<Health>,
}

/// Serves `port` on `listener` until `shutdown` resolves.
///
/// ```no_run
/// # async fn example() -> std::io::Result<()> {
/// use leasehold_server::http::{serve_http, Health, HttpPort};
/// use leasehold_server::Metrics;
///
/// let (_health, watched) = tokio::sync::watch::channel(Health::serving());
/// let port = HttpPort { metrics: Metrics::new(), health: watched };
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
            let service = service_fn(move |request| {
                let port = port.clone();
                async move { Ok::<_, Infallible>(answer(&port, &request)) }
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
            drop(permit);
        });
    }
}

/// The answer to `request`.
fn answer(port: &HttpPort, request: &Request<Incoming>) -> Response<Full<Bytes>> {
    let path = request.uri().path();
    if !matches!(path, "/metrics" | "/health" | "/ready") {
        return text(
            StatusCode::NOT_FOUND,
            "not found: /metrics, /health or /ready\n",
        );
    }
    if request.method() != Method::GET && request.method() != Method::HEAD {
        let mut response = text(StatusCode::METHOD_NOT_ALLOWED, "only GET\n");
        response
            .headers_mut()
            .insert(ALLOW, HeaderValue::from_static("GET, HEAD"));
        return response;
    }
    match path {
        "/metrics" => {
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

fn text(status: StatusCode, body: &'static str) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from_static(body.as_bytes())));
    *response.status_mut() = status;
    response.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}
