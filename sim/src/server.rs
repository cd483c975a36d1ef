//! The server: one shared keyspace, any number of connections over any
//! byte stream (a loopback TCP socket in tests, a simulated network's
//! streams in a simulation).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::{mpsc, watch};

use crate::clock::Clock;
use crate::keyspace::Keyspace;
use crate::reply::Reply;
use crate::resp::{encode, parse_request};
use crate::session::Session;
use crate::state::State;

/// A simulated Redis 7.2 server. Clones share it.
#[derive(Clone)]
pub struct Server {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub(crate) state: Mutex<State>,
    clock: Arc<dyn Clock>,
    /// True while paused: requests are read but not answered.
    pub(crate) paused: watch::Sender<bool>,
    /// Raised to close every connection.
    pub(crate) generation: watch::Sender<u64>,
    /// Counts the requests answered, for [`Server::until`].
    answered: watch::Sender<u64>,
    /// Requests read and held by a pause.
    held: watch::Sender<usize>,
    next_id: AtomicU64,
    /// Requests still to run whose replies are lost (see
    /// [`Server::lose_replies`]).
    pub(crate) lose: AtomicU64,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server").finish_non_exhaustive()
    }
}

impl Server {
    /// A server with no keys, on `clock`.
    pub fn new(clock: impl Clock + 'static) -> Self {
        Server {
            inner: Arc::new(Inner {
                state: Mutex::new(State::default()),
                clock: Arc::new(clock),
                paused: watch::Sender::new(false),
                generation: watch::Sender::new(0),
                held: watch::Sender::new(0),
                answered: watch::Sender::new(0),
                next_id: AtomicU64::new(1),
                lose: AtomicU64::new(0),
            }),
        }
    }

    pub(crate) fn state(&self) -> MutexGuard<'_, State> {
        // A panic while the state was held is a bug in this crate; the
        // state itself is still whole (each command completes or panics
        // before it writes), so go on.
        self.inner
            .state
            .lock()
            .unwrap_or_else(|poison| poison.into_inner())
    }

    /// Looks at or changes the keys behind the clients' backs, as a
    /// simulation's checks do (a pause does not stop it).
    pub fn with_keyspace<R>(&self, f: impl FnOnce(&mut Keyspace) -> R) -> R {
        let mut state = self.state();
        let now_ms = self.inner.clock.now_us() / 1000;
        state.keys.expire_due(now_ms);
        f(&mut state.keys)
    }

    /// Waits until the server has at least `n` subscriptions (channels and
    /// patterns, all connections): a waiter listens for wake-ups.
    pub async fn until_subscriptions(&self, n: usize) {
        let mut count = self.state().pubsub.watch_count();
        let _ = count.wait_for(|count| *count >= n).await;
    }

    /// Waits until `ready` is true of the keys, looking again after each
    /// request the server answers: a test waits for a state (a waiter
    /// queued) instead of polling on a timer.
    pub async fn until(&self, mut ready: impl FnMut(&Keyspace) -> bool) {
        let mut answered = self.inner.answered.subscribe();
        loop {
            answered.borrow_and_update();
            if self.with_keyspace(|keys| ready(keys)) {
                return;
            }
            if answered.changed().await.is_err() {
                return;
            }
        }
    }

    /// Waits until at least `n` requests are held by a pause: a test knows
    /// they arrived before it resumes the server.
    pub async fn until_held(&self, n: usize) {
        let mut held = self.inner.held.subscribe();
        let _ = held.wait_for(|held| *held >= n).await;
    }

    /// Waits while the server is paused; false once its connections are to
    /// close.
    async fn running(
        &self,
        paused: &mut watch::Receiver<bool>,
        generation: &mut watch::Receiver<u64>,
    ) -> bool {
        if !*paused.borrow() {
            return true;
        }
        self.inner.held.send_modify(|held| *held += 1);
        let running = tokio::select! {
            biased;
            _ = generation.changed() => false,
            result = paused.wait_for(|paused| !paused) => result.is_ok(),
        };
        self.inner.held.send_modify(|held| *held -= 1);
        running
    }

    /// Runs one command as a connection speaking RESP2 would, without a
    /// connection and whether or not the server is paused: for a
    /// simulation's checks and for tests.
    /// Subscriptions need a connection: they are refused here.
    pub fn call(&self, args: &[&str]) -> Reply {
        let args: Vec<Vec<u8>> = args.iter().map(|a| a.as_bytes().to_vec()).collect();
        if args.first().is_some_and(|name| {
            [&b"SUBSCRIBE"[..], b"PSUBSCRIBE"]
                .iter()
                .any(|sub| name.eq_ignore_ascii_case(sub))
        }) {
            return Reply::err("ERR a subscription needs a connection");
        }
        let (mailbox, _) = mpsc::unbounded_channel();
        let mut session = Session::new(0, mailbox);
        let now = self.inner.clock.now_us();
        let mut replies = session.handle(&mut self.state(), now, &args);
        replies.remove(0)
    }

    /// Listens on 127.0.0.1 on a free port, serving each connection on its
    /// own task, until the runtime stops; answers the address.
    pub async fn listen(&self) -> std::io::Result<SocketAddr> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let server = self.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let _ = stream.set_nodelay(true);
                let server = server.clone();
                tokio::spawn(async move { server.serve(stream).await });
            }
        });
        Ok(addr)
    }

    /// Serves one client on `stream` until it closes, sends `QUIT`, sends
    /// what is not RESP, or the server drops its connections.
    pub async fn serve<S: AsyncRead + AsyncWrite>(&self, stream: S) {
        let id = self.inner.next_id.fetch_add(1, Ordering::Relaxed);
        let (mailbox, mut messages) = mpsc::unbounded_channel();
        let mut session = Session::new(id, mailbox);
        let (mut reader, mut writer) = tokio::io::split(stream);
        let mut generation = self.inner.generation.subscribe();
        generation.borrow_and_update();
        let mut paused = self.inner.paused.subscribe();
        let mut input = Vec::new();
        let mut chunk = vec![0u8; 16 * 1024];
        'connection: loop {
            let mut output = Vec::new();
            tokio::select! {
                biased;
                _ = generation.changed() => break,
                message = messages.recv() => {
                    let Some(message) = message else { break };
                    if !self.running(&mut paused, &mut generation).await {
                        break;
                    }
                    encode(&message, session.resp3, &mut output);
                }
                read = reader.read(&mut chunk) => {
                    let n = match read {
                        Ok(0) | Err(_) => break,
                        Ok(n) => n,
                    };
                    input.extend_from_slice(&chunk[..n]);
                    let mut used = 0;
                    loop {
                        match parse_request(&input[used..]) {
                            Ok(None) => break,
                            Err(err) => {
                                let reply = Reply::err(format!("ERR Protocol error: {}", err.0));
                                encode(&reply, session.resp3, &mut output);
                                let _ = writer.write_all(&output).await;
                                break 'connection;
                            }
                            Ok(Some((args, n))) => {
                                used += n;
                                if args.is_empty() {
                                    continue;
                                }
                                if !self.running(&mut paused, &mut generation).await {
                                    break 'connection;
                                }
                                if let Some(wait) = crate::state::blocks_for(&args)
                                    && session.queued_len().is_none()
                                {
                                    // Replies so far go out first, as Redis
                                    // writes them before the client blocks.
                                    if writer.write_all(&output).await.is_err() {
                                        break 'connection;
                                    }
                                    output.clear();
                                    if !block(wait, &mut generation).await {
                                        break 'connection;
                                    }
                                }
                                let now = self.inner.clock.now_us();
                                for reply in session.handle(&mut self.state(), now, &args) {
                                    encode(&reply, session.resp3, &mut output);
                                }
                                self.inner.answered.send_modify(|n| *n += 1);
                                if self.reply_lost() {
                                    break 'connection;
                                }
                                if session.closing {
                                    let _ = writer.write_all(&output).await;
                                    break 'connection;
                                }
                            }
                        }
                    }
                    input.drain(..used);
                }
            }
            if writer.write_all(&output).await.is_err() {
                break;
            }
        }
        session.leave(&mut self.state());
        let _ = writer.shutdown().await;
    }
}

/// Blocks a connection for `wait` (None: until it is dropped), on tokio's
/// clock, which a simulation drives; false if the server dropped its
/// connections meanwhile.
async fn block(wait: Option<std::time::Duration>, generation: &mut watch::Receiver<u64>) -> bool {
    let sleep = async {
        match wait {
            Some(wait) => tokio::time::sleep(wait).await,
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        biased;
        _ = generation.changed() => false,
        () = sleep => true,
    }
}
