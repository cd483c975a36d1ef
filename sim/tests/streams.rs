//! The server on an in-memory stream, as a simulated network will hand it
//! one; and the same workload giving the same answers on two servers.

use lockmacro_sim::{ManualClock, Reply, Server};
use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};

/// Reads until `expected` has arrived whole, then compares.
async fn expect(client: &mut DuplexStream, expected: &[u8]) {
    let mut got = vec![0u8; expected.len()];
    client
        .read_exact(&mut got)
        .await
        .expect("the server's reply");
    assert_eq!(
        String::from_utf8_lossy(&got),
        String::from_utf8_lossy(expected)
    );
}

#[tokio::test]
async fn any_stream_pipelined_split_and_inline() {
    let server = Server::new(ManualClock::new(5_000));
    let (mut client, end) = tokio::io::duplex(64);
    let serving = tokio::spawn({
        let server = server.clone();
        async move { server.serve(end).await }
    });
    // Two requests in one write, the second cut in the middle.
    client
        .write_all(b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n*2\r\n$3\r\nGE")
        .await
        .unwrap();
    expect(&mut client, b"+OK\r\n").await;
    client.write_all(b"T\r\n$1\r\nk\r\n").await.unwrap();
    expect(&mut client, b"$1\r\nv\r\n").await;
    client.write_all(b"TIME\r\nHELLO 3\r\n").await.unwrap();
    expect(&mut client, b"*2\r\n$1\r\n5\r\n$1\r\n0\r\n").await;
    expect(&mut client, b"%7\r\n$6\r\nserver\r\n$5\r\nredis\r\n").await;
    // The rest of the map, up to its last field, `modules`: an empty array.
    let mut rest = Vec::new();
    while !rest.ends_with(b"$7\r\nmodules\r\n*0\r\n") {
        rest.push(client.read_u8().await.unwrap());
    }
    client.write_all(b"GET missing\r\n").await.unwrap();
    expect(&mut client, b"_\r\n").await;
    client.write_all(b"*1\r\n+PING\r\n").await.unwrap();
    expect(
        &mut client,
        b"-ERR Protocol error: expected '$', got '+'\r\n",
    )
    .await;
    serving
        .await
        .expect("the server closes a connection that sends what is not RESP");
}

#[tokio::test]
async fn a_resp2_subscriber_is_confirmed_and_limited() {
    let server = Server::new(ManualClock::new(0));
    let (mut client, end) = tokio::io::duplex(1024);
    tokio::spawn({
        let server = server.clone();
        async move { server.serve(end).await }
    });
    client.write_all(b"SUBSCRIBE a b\r\n").await.unwrap();
    expect(&mut client, b"*3\r\n$9\r\nsubscribe\r\n$1\r\na\r\n:1\r\n").await;
    expect(&mut client, b"*3\r\n$9\r\nsubscribe\r\n$1\r\nb\r\n:2\r\n").await;
    client.write_all(b"GET a\r\nPING\r\n").await.unwrap();
    expect(
        &mut client,
        b"-ERR Can't execute 'get': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed in this context\r\n",
    )
    .await;
    expect(&mut client, b"*2\r\n$4\r\npong\r\n$0\r\n\r\n").await;
    assert_eq!(server.call(&["PUBLISH", "b", "hi"]), Reply::Int(1));
    expect(
        &mut client,
        b"*3\r\n$7\r\nmessage\r\n$1\r\nb\r\n$2\r\nhi\r\n",
    )
    .await;
    client.write_all(b"UNSUBSCRIBE\r\n").await.unwrap();
    expect(
        &mut client,
        b"*3\r\n$11\r\nunsubscribe\r\n$1\r\na\r\n:1\r\n",
    )
    .await;
    expect(
        &mut client,
        b"*3\r\n$11\r\nunsubscribe\r\n$1\r\nb\r\n:0\r\n",
    )
    .await;
    client.write_all(b"GET a\r\n").await.unwrap();
    expect(&mut client, b"$-1\r\n").await;
}

/// One workload: scripts drawing random numbers, expiries on the clock, a
/// SCAN, a restart that keeps keys by a seeded generator. Every answer.
fn workload() -> Vec<Reply> {
    let clock = ManualClock::new(1_000);
    let server = Server::new(clock.clone());
    let mut answers = Vec::new();
    for i in 0..40 {
        let key = format!("k{}", (i * 7) % 13);
        answers.push(server.call(&[
            "SET",
            &key,
            &i.to_string(),
            "PX",
            &(100 * (i % 5) + 1).to_string(),
        ]));
        answers.push(server.call(&[
            "EVAL",
            "redis.call('ZADD', 'z', math.random(1000), KEYS[1]) return redis.call('ZRANGE', 'z', 0, -1, 'WITHSCORES')",
            "1",
            &key,
        ]));
        clock.advance_ms(37);
        answers.push(server.call(&["SCAN", "0", "MATCH", "k*", "COUNT", "5"]));
    }
    let mut seed: u64 = 42;
    server.restart_keeping(|_, _| {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        seed >> 63 == 1
    });
    answers.push(server.call(&["KEYS", "*"]));
    answers.push(server.call(&["EVAL", "return math.random(1000)", "0"]));
    answers
}

#[test]
fn the_same_workload_gives_the_same_answers() {
    let first = workload();
    assert_eq!(first, workload());
    assert!(first.iter().all(|reply| !reply.is_error()), "{first:?}");
}

/// `WAIT` for a replica on a server without any blocks its connection for
/// the timeout, on tokio's clock (paused here, as a simulation's is), then
/// answers 0; what the connection sent after it waits too.
#[tokio::test(start_paused = true)]
async fn wait_blocks_for_its_timeout_on_the_runtimes_clock() {
    let server = Server::new(ManualClock::new(0));
    let (mut client, end) = tokio::io::duplex(1024);
    tokio::spawn({
        let server = server.clone();
        async move { server.serve(end).await }
    });
    let start = tokio::time::Instant::now();
    client
        .write_all(b"PING\r\nWAIT 1 1500\r\nPING\r\nWAIT 0 0\r\n")
        .await
        .unwrap();
    expect(&mut client, b"+PONG\r\n").await;
    assert_eq!(
        start.elapsed(),
        std::time::Duration::ZERO,
        "PING's reply went out before the wait"
    );
    expect(&mut client, b":0\r\n+PONG\r\n:0\r\n").await;
    assert_eq!(start.elapsed(), std::time::Duration::from_millis(1500));
}
