//! Connection state over the wire: transactions and `WATCH`, pub/sub in
//! both protocols, `HELLO`, and the fault hooks.

use lockmacro_sim::{ManualClock, Server, Value as Stored};
use redis::aio::MultiplexedConnection;
use redis::{AsyncCommands, Value};

async fn connect(url: &str) -> MultiplexedConnection {
    redis::Client::open(url)
        .expect("a valid URL")
        .get_multiplexed_async_connection()
        .await
        .expect("connect")
}

async fn started(clock: &ManualClock) -> (Server, String) {
    let server = Server::new(clock.clone());
    let addr = server.listen().await.expect("listen");
    (server, format!("redis://{addr}/"))
}

/// `WATCH key`, a `MULTI`/`EXEC` that sets `key`: true if it ran.
async fn watched_set(
    conn: &mut MultiplexedConnection,
    key: &str,
    between: impl AsyncFnOnce(),
) -> bool {
    let () = redis::cmd("WATCH")
        .arg(key)
        .query_async(conn)
        .await
        .expect("watch");
    between().await;
    let done: Option<Value> = redis::pipe()
        .atomic()
        .set(key, "mine")
        .query_async(conn)
        .await
        .expect("exec");
    done.is_some()
}

/// Bounds a wait for a state, so that a state never reached fails the test
/// instead of hanging it.
async fn within<T>(wait: impl Future<Output = T>) -> T {
    tokio::time::timeout(std::time::Duration::from_secs(10), wait)
        .await
        .expect("the server never reached the state waited for")
}

#[tokio::test]
async fn exec_aborts_when_a_watched_key_is_written_deleted_or_expires() {
    let clock = ManualClock::new(1_000_000);
    let (server, url) = started(&clock).await;
    let mut a = connect(&url).await;
    let mut b = connect(&url).await;
    assert!(
        watched_set(&mut a, "k", async || {}).await,
        "untouched: EXEC runs"
    );
    assert!(
        !watched_set(&mut a, "k", async || {
            let () = b.set("k", "theirs").await.unwrap();
        })
        .await,
        "written by another connection"
    );
    assert!(
        !watched_set(&mut a, "k", async || {
            let _: i64 = b.del("k").await.unwrap();
        })
        .await,
        "deleted"
    );
    let () = redis::cmd("SET")
        .arg(&["k", "v", "PX", "100"])
        .query_async(&mut a)
        .await
        .unwrap();
    assert!(
        !watched_set(&mut a, "k", async || clock.advance_ms(101)).await,
        "expired after WATCH, as Redis 7 counts it"
    );
    assert!(
        watched_set(&mut a, "gone", async || {
            let _: i64 = b.del("gone").await.unwrap();
        })
        .await,
        "a DEL of a missing key writes nothing"
    );
    assert_eq!(
        server.call(&["GET", "gone"]),
        lockmacro_sim::Reply::bulk("mine")
    );
}

#[tokio::test]
async fn a_bad_command_in_a_transaction_discards_it() {
    let clock = ManualClock::new(0);
    let (_server, url) = started(&clock).await;
    let mut a = connect(&url).await;
    let result: redis::RedisResult<Value> = redis::pipe()
        .atomic()
        .set("k", "v")
        .cmd("NOSUCH")
        .query_async(&mut a)
        .await;
    let err = result.expect_err("EXECABORT");
    assert_eq!(err.code(), Some("EXECABORT"), "{err}");
    let left: Option<String> = a.get("k").await.unwrap();
    assert_eq!(left, None);
}

#[tokio::test]
async fn resp2_subscribers_get_messages_and_resp3_ones_pushes() {
    let clock = ManualClock::new(0);
    let (server, url) = started(&clock).await;
    let client = redis::Client::open(url.as_str()).unwrap();
    let mut pubsub = client.get_async_pubsub().await.expect("a RESP2 subscriber");
    pubsub.subscribe("wake").await.unwrap();
    pubsub.psubscribe("w*").await.unwrap();
    within(server.until_subscriptions(2)).await;
    let mut publisher = connect(&url).await;
    let received: i64 = publisher.publish("wake", "hi").await.unwrap();
    assert_eq!(received, 2, "by the channel and by the pattern");
    // A script publishes too.
    let _: Value = redis::cmd("EVAL")
        .arg(&["return redis.call('PUBLISH', 'wake', 'from a script')", "0"])
        .query_async(&mut publisher)
        .await
        .unwrap();
    let mut messages = pubsub.on_message();
    use futures_util::StreamExt;
    let mut seen = Vec::new();
    for _ in 0..4 {
        let message = messages.next().await.expect("a message");
        seen.push((
            message.get_pattern::<Option<String>>().unwrap(),
            message.get_payload::<String>().unwrap(),
        ));
    }
    assert_eq!(
        seen,
        [
            (None, "hi".to_string()),
            (Some("w*".to_string()), "hi".to_string()),
            (None, "from a script".to_string()),
            (Some("w*".to_string()), "from a script".to_string()),
        ]
    );
    drop(messages);

    let resp3 = redis::Client::open(format!("{url}?protocol=resp3")).unwrap();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let config = redis::AsyncConnectionConfig::new().set_push_sender(tx);
    let mut conn = resp3
        .get_multiplexed_async_connection_with_config(&config)
        .await
        .unwrap();
    conn.subscribe("wake").await.unwrap();
    let _: i64 = publisher.publish("wake", "pushed").await.unwrap();
    loop {
        let push = rx.recv().await.expect("a push");
        if push.kind == redis::PushKind::Message {
            assert_eq!(push.data[1], Value::BulkString(b"pushed".to_vec()));
            break;
        }
    }
    // Still a normal connection while subscribed, in RESP3.
    let pong: String = redis::cmd("PING").query_async(&mut conn).await.unwrap();
    assert_eq!(pong, "PONG");
}

#[tokio::test]
async fn hello_switches_the_protocol_and_names_redis_7_2() {
    let clock = ManualClock::new(0);
    let (_server, url) = started(&clock).await;
    let mut conn = connect(&url).await;
    let hello: Value = redis::cmd("HELLO")
        .arg(3)
        .query_async(&mut conn)
        .await
        .unwrap();
    let Value::Map(fields) = hello else {
        panic!("a RESP3 map: {hello:?}")
    };
    assert!(fields.contains(&(
        Value::BulkString(b"version".to_vec()),
        Value::BulkString(lockmacro_sim::VERSION.as_bytes().to_vec())
    )));
    let err = redis::cmd("HELLO")
        .arg(4)
        .query_async::<Value>(&mut conn)
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some("NOPROTO"));
}

#[tokio::test]
async fn a_paused_server_answers_once_resumed_in_order() {
    let clock = ManualClock::new(0);
    let (server, url) = started(&clock).await;
    let mut conn = connect(&url).await;
    server.pause();
    let mut queued = conn.clone();
    let calls = tokio::spawn(async move {
        let () = queued.set("k", "1").await.unwrap();
        let n: i64 = queued.incr("k", 1).await.unwrap();
        n
    });
    within(server.until_held(1)).await;
    assert_eq!(
        server.call(&["EXISTS", "k"]),
        lockmacro_sim::Reply::Int(0),
        "nothing ran while paused"
    );
    server.resume();
    assert_eq!(calls.await.unwrap(), 2);
    let n: i64 = conn.get("k").await.unwrap();
    assert_eq!(n, 2);
}

#[tokio::test]
async fn dropped_connections_and_restarts() {
    let clock = ManualClock::new(0);
    let (server, url) = started(&clock).await;
    let mut conn = connect(&url).await;
    for key in ["a", "b", "c", "d"] {
        let () = conn.set(key, key).await.unwrap();
    }
    let sha: String = redis::cmd("SCRIPT")
        .arg(&["LOAD", "return 1"])
        .query_async(&mut conn)
        .await
        .unwrap();
    server.drop_connections();
    assert!(
        redis::cmd("PING")
            .query_async::<String>(&mut conn)
            .await
            .is_err(),
        "the connection was closed"
    );
    let conn = connect(&url).await;
    let kept: Vec<u8> = vec![1, 0, 1, 0];
    let mut decisions = kept.into_iter();
    server.restart_keeping(|_, value| {
        assert!(matches!(value, Stored::Str(_)));
        decisions.next() == Some(1)
    });
    let mut conn2 = connect(&url).await;
    let left: Vec<String> = redis::cmd("KEYS")
        .arg("*")
        .query_async(&mut conn2)
        .await
        .unwrap();
    assert_eq!(
        left,
        ["a", "c"],
        "the keys the predicate kept, asked in key order"
    );
    let err = redis::cmd("EVALSHA")
        .arg(&[sha.as_str(), "0"])
        .query_async::<Value>(&mut conn2)
        .await
        .unwrap_err();
    assert_eq!(
        err.code(),
        Some("NOSCRIPT"),
        "a restart forgets the scripts"
    );
    drop(conn);
    server.restart();
    assert_eq!(server.with_keyspace(|keys| keys.len()), 0);
}

/// A lost reply: the request runs, its connection closes unanswered, and
/// the next request (on a new connection) is answered again.
#[tokio::test]
async fn a_lost_reply_runs_the_request_and_drops_its_connection() {
    let (server, url) = started(&ManualClock::new(1_000)).await;
    let mut conn = connect(&url).await;
    server.lose_replies(1);
    let lost: redis::RedisResult<()> = conn.set("key", "written").await;
    assert!(
        lost.as_ref()
            .is_err_and(|err| err.is_connection_dropped() || err.is_unrecoverable_error()),
        "the reply was not lost: {lost:?}"
    );
    assert_eq!(
        server.call(&["GET", "key"]),
        lockmacro_sim::Reply::bulk("written")
    );
    let mut again = connect(&url).await;
    let value: String = again.get("key").await.expect("answered again");
    assert_eq!(value, "written");
}
