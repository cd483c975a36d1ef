//! Connections opened over streams the service provides: [`Dial`], set with
//! [`RedisConfig::dial`](super::RedisConfig::dial), and the one place every
//! connection of a single server (and of each Redlock master) is opened.

use std::fmt;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, ConnectionInfo, RedisResult};
use tokio::io::{AsyncRead, AsyncWrite};

/// A byte stream to a Redis server, as a [`Dial`] opens it.
pub trait DialedStream: AsyncRead + AsyncWrite + Send + Unpin + 'static {}

impl<T: AsyncRead + AsyncWrite + Send + Unpin + 'static> DialedStream for T {}

/// A stream being opened by a [`Dial`].
pub type Dialing = Pin<Box<dyn Future<Output = io::Result<Box<dyn DialedStream>>> + Send>>;

/// Opens the streams a [`RedisBackend`](super::RedisBackend) talks to its
/// server over, in place of the TCP connections it opens itself: a tunnel,
/// a socket a sidecar hands over, a simulated network in tests.
///
/// The backend still speaks Redis over the stream: the URL's user, password,
/// database and protocol are sent on each new stream, and the stream must
/// reach the server the URL names. It is asked for every connection the
/// backend opens (the command connection, the pub/sub connection of waiters,
/// the connections of the script-free engine's transactions, the one that
/// waits for replicas), and again each time one is opened anew after it
/// dropped. [`RedisConfig::connect_timeout`](super::RedisConfig::connect_timeout)
/// bounds the dial and the handshake after it together.
///
/// Single servers, Redlock masters and [`FencedStore`](crate::FencedStore)
/// take one; a cluster or Sentinel, whose client finds and opens its own
/// connections, refuses a config that has one.
///
/// ```
/// use lockmacro_runtime::RedisConfig;
/// use lockmacro_runtime::backend::{Dial, DialedStream, Dialing};
///
/// /// Every server of the URLs reached through one local port.
/// struct Tunnel;
///
/// impl Dial for Tunnel {
///     fn dial(&self, _address: &str) -> Dialing {
///         Box::pin(async {
///             let stream = tokio::net::TcpStream::connect("127.0.0.1:16379").await?;
///             Ok(Box::new(stream) as Box<dyn DialedStream>)
///         })
///     }
/// }
///
/// let config = RedisConfig::default().dial(Tunnel);
/// # let _ = config;
/// ```
pub trait Dial: Send + Sync + 'static {
    /// A new stream to the server at `address`: `host:port` as the URL
    /// gives it, or the path of a `redis+unix://` URL.
    fn dial(&self, address: &str) -> Dialing;
}

/// A [`Dial`] as [`RedisConfig`] keeps it: shared by its clones.
#[derive(Clone)]
pub(in crate::backend) struct Dialer(pub(in crate::backend) Arc<dyn Dial>);

impl fmt::Debug for Dialer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Dial")
    }
}

/// Where a single server's connections come from: its client, and the
/// config's [`Dial`] when it has one.
#[derive(Clone)]
pub(in crate::backend) struct Endpoint {
    client: redis::Client,
    dial: Option<Dialer>,
    connect_timeout: Duration,
}

impl Endpoint {
    pub(in crate::backend) fn new(
        client: redis::Client,
        dial: Option<Dialer>,
        connect_timeout: Duration,
    ) -> Self {
        Endpoint {
            client,
            dial,
            connect_timeout,
        }
    }

    pub(in crate::backend) fn info(&self) -> &ConnectionInfo {
        self.client.get_connection_info()
    }

    /// The same server and dial, with the connection settings of `info`.
    pub(in crate::backend) fn with_info(&self, info: ConnectionInfo) -> RedisResult<Self> {
        Ok(Endpoint {
            client: redis::Client::open(info)?,
            dial: self.dial.clone(),
            connect_timeout: self.connect_timeout,
        })
    }

    /// A new connection with `config`.
    pub(in crate::backend) async fn open(
        &self,
        config: &AsyncConnectionConfig,
    ) -> RedisResult<MultiplexedConnection> {
        let Some(Dialer(dial)) = &self.dial else {
            return self
                .client
                .get_multiplexed_async_connection_with_config(config)
                .await;
        };
        let address = self.info().addr().to_string();
        let open = async {
            let stream = dial.dial(&address).await?;
            let (conn, driver) = MultiplexedConnection::new_with_config(
                self.info().redis_settings(),
                stream,
                config.clone(),
            )
            .await?;
            tokio::spawn(driver);
            Ok(conn)
        };
        tokio::time::timeout(self.connect_timeout, open)
            .await
            .map_err(|elapsed| io::Error::new(io::ErrorKind::TimedOut, elapsed))?
    }
}
