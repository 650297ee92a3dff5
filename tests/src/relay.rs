//! A relay between clients and a master that reads the frames it passes,
//! so a test can hold back the replies it picks and let them through
//! later: replies in an order a real master gives only under some timings
//! (`CONN-2` lets replies come in any order).
//!
//! - [`Relay::hold`]: from now on, replies the test's function picks wait
//!   in the relay; every other frame passes.
//! - [`Relay::pass_held`]: the held replies go on, in the order they came,
//!   and nothing more is held.
//! - [`Relay::acknowledged`]: waits until a client's KeepAlive acknowledges
//!   an event (`EV-2`), which its library does only once it delivered it
//!   (`EV-7`).

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use futures::{SinkExt, StreamExt};
use leasehold_protocol::{
    ClientFrame, FrameCodec, Request, Response, ServerFrame, DEFAULT_MAX_FRAME,
};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio_util::codec::Framed;

/// Which replies to hold back.
pub type Pick = fn(&Response) -> bool;

/// A running relay; dropping it stops accepting (open relays end with
/// their connections).
#[derive(Debug)]
pub struct Relay {
    /// Where clients connect.
    pub addr: SocketAddr,
    holding: Arc<Mutex<Holding>>,
    /// How many replies are held now.
    held: watch::Receiver<usize>,
    /// The highest `acked_seq` any KeepAlive through the relay carried.
    acked: watch::Receiver<u64>,
    accept: tokio::task::JoinHandle<()>,
}

#[derive(Debug)]
struct Holding {
    pick: Option<Pick>,
    /// Held replies, oldest first, each with the way back to its client.
    replies: Vec<(mpsc::UnboundedSender<ServerFrame>, ServerFrame)>,
    count: watch::Sender<usize>,
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

impl Relay {
    /// Starts a relay on 127.0.0.1 to `upstream`.
    pub async fn start(upstream: SocketAddr) -> Relay {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("local address");
        let (count, held) = watch::channel(0);
        let (acks, acked) = watch::channel(0);
        let holding = Arc::new(Mutex::new(Holding {
            pick: None,
            replies: Vec::new(),
            count,
        }));
        let shared = holding.clone();
        let accept = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(server) = TcpStream::connect(upstream).await else {
                    continue;
                };
                relay(client, server, shared.clone(), acks.clone());
            }
        });
        Relay {
            addr,
            holding,
            held,
            acked,
            accept,
        }
    }

    /// Holds back, from now on, every reply `pick` chooses.
    pub fn hold(&self, pick: Pick) {
        self.holding.lock().unwrap().pick = Some(pick);
    }

    /// Waits until at least one reply is held.
    pub async fn held(&self) {
        let mut held = self.held.clone();
        let _ = held.wait_for(|n| *n > 0).await;
    }

    /// Stops holding and sends the held replies on, in the order they came;
    /// returns them.
    pub fn pass_held(&self) -> Vec<Response> {
        let mut holding = self.holding.lock().unwrap();
        holding.pick = None;
        holding.count.send_replace(0);
        let mut passed = Vec::new();
        for (to_client, frame) in std::mem::take(&mut holding.replies) {
            if let ServerFrame::Reply { body: Ok(r), .. } = &frame {
                passed.push(r.clone());
            }
            let _ = to_client.send(frame);
        }
        passed
    }

    /// Waits until a KeepAlive through the relay acknowledges `seq`.
    pub async fn acknowledged(&self, seq: u64) {
        let mut acked = self.acked.clone();
        let _ = acked.wait_for(|a| *a >= seq).await;
    }
}

/// Pumps one connection's frames both ways.
fn relay(
    client: TcpStream,
    server: TcpStream,
    holding: Arc<Mutex<Holding>>,
    acks: watch::Sender<u64>,
) {
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
            if let ClientFrame::Request {
                body: Request::KeepAlive(ka),
                ..
            } = &frame
            {
                acks.send_if_modified(|a| {
                    let newer = ka.acked_seq > *a;
                    *a = (*a).max(ka.acked_seq);
                    newer
                });
            }
            if server_tx.send(frame).await.is_err() {
                break;
            }
        }
    });
    // Replies reach the client through one queue, so a held one can be
    // put back in line later.
    let (to_client, mut queued) = mpsc::unbounded_channel::<ServerFrame>();
    tokio::spawn(async move {
        while let Some(frame) = queued.recv().await {
            if client_tx.send(frame).await.is_err() {
                break;
            }
        }
    });
    tokio::spawn(async move {
        while let Some(Ok(frame)) = server_rx.next().await {
            let mut held = holding.lock().unwrap();
            let picked = match (&frame, held.pick) {
                (
                    ServerFrame::Reply {
                        body: Ok(response), ..
                    },
                    Some(pick),
                ) => pick(response),
                _ => false,
            };
            if picked {
                held.replies.push((to_client.clone(), frame));
                let n = held.replies.len();
                held.count.send_replace(n);
            } else if to_client.send(frame).is_err() {
                break;
            }
        }
    });
}
