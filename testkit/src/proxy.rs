//! A TCP proxy on `127.0.0.1` in front of a [`RedisServer`] (or any server),
//! with network faults switched on and off by the test: added latency, a
//! black hole, dropped connections, and a move to another server, as a
//! virtual IP follows a failover.
//!
//! It runs on a tokio runtime of its own, on its own thread, so that it keeps
//! forwarding whatever the test's runtime is doing, and stops (closing every
//! connection) when the [`Proxy`] is dropped.

use std::net::{Ipv4Addr, SocketAddr, TcpListener as StdListener};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

use super::RedisServer;

/// What the proxy does to the bytes it forwards.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Forwards at once.
    Pass,
    /// Holds every chunk this long before forwarding it, in each direction.
    /// The next chunk is read once this one is forwarded, so bytes stay in
    /// order and queue up behind a slow one, as on a slow link.
    Latency(Duration),
    /// Accepts connections and holds them open, but forwards nothing in
    /// either direction: a network partition. Bytes are kept, in order, and
    /// delivered once the fault changes, as TCP delivers after a partition
    /// heals.
    BlackHole,
    /// Forwards what clients send and throws away what servers answer:
    /// requests are run and their replies lost. A client's connection is of
    /// no use after it (the replies that follow are taken for the lost
    /// ones): follow it with [`Proxy::drop_connections`].
    DropReplies,
}

/// Which way a pump forwards.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Direction {
    ToServer,
    ToClient,
}

#[derive(Debug, Clone, Copy)]
struct Control {
    fault: Fault,
    /// Bumped by [`Proxy::drop_connections`]: connections opened before close.
    generation: u64,
    /// Where new connections go.
    target: SocketAddr,
}

/// A proxy on a free loopback port, forwarding to one server.
pub struct Proxy {
    addr: SocketAddr,
    control: watch::Sender<Control>,
    accepted: Arc<AtomicUsize>,
    refused: Arc<AtomicUsize>,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl Proxy {
    /// A proxy to `server`'s port; it follows the server across restarts, which
    /// keep the port.
    pub fn in_front_of(server: &RedisServer) -> Self {
        Self::start(server.addr())
    }

    /// A proxy to `target`, passing everything through until told otherwise.
    pub fn start(target: SocketAddr) -> Self {
        let listener =
            StdListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("cannot bind 127.0.0.1:0");
        listener
            .set_nonblocking(true)
            .expect("cannot make the proxy's listener non-blocking");
        let addr = listener.local_addr().expect("bound");
        let (control, controls) = watch::channel(Control {
            fault: Fault::Pass,
            generation: 0,
            target,
        });
        let accepted = Arc::new(AtomicUsize::new(0));
        let refused = Arc::new(AtomicUsize::new(0));
        let (shutdown, stopped) = tokio::sync::oneshot::channel();
        let (counter, to_refuse) = (accepted.clone(), refused.clone());
        let thread = thread::Builder::new()
            .name(format!("proxy-{}", addr.port()))
            .spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("cannot build the proxy's runtime");
                runtime.block_on(async move {
                    let listener =
                        TcpListener::from_std(listener).expect("cannot register the listener");
                    tokio::select! {
                        () = serve(listener, controls, counter, to_refuse) => {}
                        _ = stopped => {}
                    }
                });
                // Dropping the runtime cancels every connection task, which
                // closes their sockets.
            })
            .expect("cannot start the proxy thread");
        Proxy {
            addr,
            control,
            accepted,
            refused,
            shutdown: Some(shutdown),
            thread: Some(thread),
        }
    }

    /// `redis://127.0.0.1:PORT/` of the proxy.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.addr.port())
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Connections accepted so far: a client that reconnects shows up here.
    pub fn accepted(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }

    /// Closes the next `count` connections as soon as they are accepted,
    /// before anything is forwarded, as a server that is starting or a
    /// load balancer without a healthy target does. They count as accepted.
    pub fn refuse_next(&self, count: usize) {
        self.refused.store(count, Ordering::SeqCst);
    }

    /// Applies `fault` to current and future connections.
    pub fn set(&self, fault: Fault) {
        self.control.send_modify(|control| control.fault = fault);
    }

    /// Holds every chunk `delay` before forwarding it.
    pub fn latency(&self, delay: Duration) {
        self.set(Fault::Latency(delay));
    }

    /// Runs requests and loses their replies, see [`Fault::DropReplies`].
    pub fn drop_replies(&self) {
        self.set(Fault::DropReplies);
    }

    /// Forwards nothing, holding connections open.
    pub fn black_hole(&self) {
        self.set(Fault::BlackHole);
    }

    /// Back to forwarding at once; bytes held by a latency or a black hole
    /// are delivered now.
    pub fn heal(&self) {
        self.set(Fault::Pass);
    }

    /// Closes every current connection, as a proxy or a NAT that forgets them
    /// would; new connections are accepted as before.
    pub fn drop_connections(&self) {
        self.control.send_modify(|control| control.generation += 1);
    }

    /// Sends new connections to `target` and closes the current ones, as a
    /// virtual IP moved to a promoted replica would.
    pub fn retarget(&self, target: SocketAddr) {
        self.control.send_modify(|control| {
            control.target = target;
            control.generation += 1;
        });
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
        if let Some(thread) = self.thread.take() {
            // A panic in the proxy thread already failed whatever used it.
            let _ = thread.join();
        }
    }
}

async fn serve(
    listener: TcpListener,
    controls: watch::Receiver<Control>,
    accepted: Arc<AtomicUsize>,
    refused: Arc<AtomicUsize>,
) {
    let mut connections = tokio::task::JoinSet::new();
    loop {
        tokio::select! {
            incoming = listener.accept() => {
                let Ok((client, _)) = incoming else { continue };
                accepted.fetch_add(1, Ordering::SeqCst);
                let refuse = refused
                    .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |left| left.checked_sub(1))
                    .is_ok();
                if refuse {
                    drop(client);
                    continue;
                }
                connections.spawn(connection(client, controls.clone()));
            }
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
}

/// Forwards one connection both ways until either side closes it or it is
/// dropped by [`Proxy::drop_connections`].
async fn connection(client: TcpStream, mut controls: watch::Receiver<Control>) {
    let Control {
        generation, target, ..
    } = *controls.borrow_and_update();
    // The upstream connection is made at once even in a black hole: the
    // client cannot tell, and the held bytes have somewhere to go on heal.
    let Ok(upstream) = TcpStream::connect(target).await else {
        return;
    };
    let _ = client.set_nodelay(true);
    let _ = upstream.set_nodelay(true);
    let (client_read, client_write) = client.into_split();
    let (upstream_read, upstream_write) = upstream.into_split();
    let (to_server, to_client) = (controls.clone(), controls.clone());
    let dropped = async {
        while controls.changed().await.is_ok() {
            if controls.borrow().generation != generation {
                return;
            }
        }
        // The proxy is shutting down.
    };
    tokio::select! {
        () = pump(client_read, upstream_write, to_server, Direction::ToServer) => {}
        () = pump(upstream_read, client_write, to_client, Direction::ToClient) => {}
        () = dropped => {}
    }
}

async fn pump(
    mut from: OwnedReadHalf,
    mut to: OwnedWriteHalf,
    mut controls: watch::Receiver<Control>,
    direction: Direction,
) {
    let mut buffer = vec![0; 16 * 1024];
    loop {
        let n = match from.read(&mut buffer).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        let mut lost = false;
        loop {
            let fault = controls.borrow_and_update().fault;
            match fault {
                Fault::Pass => break,
                Fault::DropReplies => {
                    lost = direction == Direction::ToClient;
                    break;
                }
                // A change of fault (a heal) applies to the bytes already
                // held too.
                Fault::Latency(delay) => tokio::select! {
                    () = tokio::time::sleep(delay) => break,
                    changed = controls.changed() => if changed.is_err() {
                        return;
                    },
                },
                Fault::BlackHole => {
                    if controls.changed().await.is_err() {
                        return;
                    }
                }
            }
        }
        if !lost && to.write_all(&buffer[..n]).await.is_err() {
            return;
        }
    }
}
