//! The same commands against the simulated server and a real
//! `redis-server` (the test kit's), in RESP2 and RESP3: the replies, errors
//! included, must be the same. Expiries are long and only their presence is
//! compared, so the two clocks need not agree.

use lockmacro_sim::{Server, SystemClock};
use lockmacro_testkit::RedisServer;
use redis::Value;

/// Each command as its words; `PTTL` replies are compared by sign only.
const SCRIPT: &[&[&str]] = &[
    &["SET", "s", "v"],
    &["SET", "s", "w", "NX"],
    &["SET", "s", "w", "XX", "GET"],
    &["SET", "s", "x", "NX", "XX"],
    &["SET", "s", "x", "PX", "0"],
    &["SET", "s", "x", "PX", "abc"],
    &["SET", "s", "x", "PX", "100000", "KEEPTTL"],
    &["SET", "s", "x", "PX", "100000"],
    &["SET", "s", "y", "KEEPTTL"],
    &["PTTL", "s"],
    &["SET", "s", "z"],
    &["PTTL", "s"],
    &["PTTL", "missing"],
    &["GET", "missing"],
    &["INCR", "s"],
    &["INCR", "n"],
    &["INCR", "n"],
    &["PEXPIRE", "n", "100000"],
    &["PTTL", "n"],
    &["PEXPIRE", "n", "200000", "NX"],
    &["PEXPIRE", "n", "200000", "GT"],
    &["PEXPIRE", "n", "50000", "GT"],
    &["PEXPIRE", "n", "50000", "LT"],
    &["PEXPIRE", "n", "50000", "NX", "XX"],
    &["PEXPIRE", "n", "50000", "GT", "LT"],
    &["PEXPIRE", "n", "50000", "SOON"],
    &["PEXPIRE", "s", "50000", "XX"],
    &["PEXPIRE", "s", "50000", "GT"],
    &["PEXPIRE", "s", "50000", "LT"],
    &["PTTL", "s"],
    &["PERSIST", "s"],
    &["PEXPIRE", "n", "0"],
    &["EXISTS", "n", "s", "s"],
    &["PEXPIRE", "missing", "10"],
    &["PEXPIRE", "s", "-5"],
    &["TYPE", "s"],
    &["ZADD", "z", "+inf", "kind:2", "5", "a", "7", "b"],
    &["ZADD", "z", "XX", "6", "a", "9", "c"],
    &["ZADD", "z", "NX", "XX", "1", "a"],
    &["ZADD", "z", "x", "a"],
    &["ZSCORE", "z", "a"],
    &["ZSCORE", "z", "kind:2"],
    &["ZSCORE", "z", "nope"],
    &["ZRANGE", "z", "0", "-1", "WITHSCORES"],
    &["ZRANGE", "z", "0", "1"],
    &["ZRANGE", "z", "-inf", "(+inf", "BYSCORE", "LIMIT", "0", "1"],
    &["ZRANGE", "z", "0", "1", "LIMIT", "0", "1"],
    &["ZRANGEBYSCORE", "z", "+inf", "+inf"],
    &["ZRANGEBYSCORE", "z", "(5", "+inf", "WITHSCORES"],
    &["ZCOUNT", "z", "-inf", "(+inf"],
    &["ZCOUNT", "z", "x", "1"],
    &["ZREMRANGEBYSCORE", "z", "-inf", "6"],
    &["ZREM", "z", "b", "nope"],
    &["ZREMRANGEBYSCORE", "z", "+inf", "+inf"],
    &["EXISTS", "z"],
    &["GET", "z"],
    &["RPUSH", "q", "a", "b", "a", "c"],
    &["LPOP", "s"],
    &["LRANGE", "q", "0", "-1"],
    &["LRANGE", "q", "-2", "100"],
    &["LREM", "q", "1", "a"],
    &["LSET", "q", "5", "x"],
    &["LSET", "missing", "0", "x"],
    &["LSET", "q", "-1", "d"],
    &["LINDEX", "q", "0"],
    &["LLEN", "q"],
    &["LPOP", "q"],
    &["LPOP", "missing", "2"],
    &["LPOP", "q", "5"],
    &["EXISTS", "q"],
    &["HSET", "h", "fence", "5", "value", "v"],
    &["HSET", "h", "fence", "6"],
    &["HGET", "h", "fence"],
    &["HMGET", "h", "fence", "nope", "value"],
    &["HGETALL", "h"],
    &["HDEL", "h", "fence", "value"],
    &["EXISTS", "h"],
    &["HGET", "s", "x"],
    &["SCAN", "0", "MATCH", "s*", "COUNT", "100"],
    &["DEL", "s", "missing"],
    &["SET", "e", "v", "EX", "100"],
    &["TTL", "e"],
    &["SET", "e", "v", "EX", "100", "PX", "5"],
    &["SET", "e", "v", "EXAT", "99999999999"],
    &["SET", "e", "v", "PXAT", "99999999999000"],
    &["GETDEL", "e"],
    &["GETDEL", "e"],
    &[
        "EVAL",
        "redis.call('SET', KEYS[1], 'v', 'PXAT', 1000); return redis.call('EXISTS', KEYS[1])",
        "1",
        "past",
    ],
    &[
        "EVAL",
        "redis.call('SET', KEYS[1], 'v'); redis.call('PEXPIRE', KEYS[1], -1); return redis.call('EXISTS', KEYS[1])",
        "1",
        "past",
    ],
    &["MGET", "e", "z2", "n2"],
    &["INCRBY", "n2", "-5"],
    &["DECRBY", "n2", "5"],
    &["DECR", "n2"],
    &["SET", "big", "9223372036854775807"],
    &["INCR", "big"],
    &["ZADD", "z2", "INCR", "2", "m"],
    &["ZADD", "z2", "INCR", "1.5", "m"],
    &["ZADD", "z2", "INCR", "1", "m", "2", "n"],
    &["ZADD", "z2", "GT", "CH", "1", "m", "5", "n"],
    &["ZADD", "z2", "LT", "CH", "1", "m", "5", "o"],
    &["ZADD", "z2", "GT", "LT", "1", "m"],
    &["ZADD", "z2", "NX", "GT", "1", "m"],
    &["ZADD", "z2", "XX", "INCR", "1", "nope"],
    &["ZADD", "z2", "1"],
    &["ZADD", "z2", "nan", "m"],
    &["ZCARD", "z2"],
    &[
        "ZRANGE",
        "z2",
        "+inf",
        "-inf",
        "BYSCORE",
        "REV",
        "WITHSCORES",
    ],
    &["ZRANGE", "z2", "0", "-1", "REV"],
    &[
        "ZRANGE", "z2", "-inf", "+inf", "BYSCORE", "LIMIT", "1", "-1",
    ],
    &[
        "ZRANGEBYSCORE",
        "z2",
        "-inf",
        "+inf",
        "LIMIT",
        "0",
        "2",
        "WITHSCORES",
    ],
    &["ZRANGE", "z2", "5", "10"],
    &["ZRANGE", "nozset", "0", "-1"],
    &["ZREMRANGEBYSCORE", "z2", "(1", "(5"],
    &["ZRANGE", "z2", "0", "-1", "WITHSCORES"],
    &["ZSCORE", "z2", "m"],
    &["RPUSH", "l2", "a"],
    &["LPUSH", "l2", "b", "c"],
    &["LPOP", "l2", "0"],
    &["RPOP", "l2"],
    &["LRANGE", "l2", "5", "10"],
    &["LRANGE", "l2", "-100", "-2"],
    &["LINDEX", "l2", "-1"],
    &["LINDEX", "l2", "9"],
    &["LREM", "l2", "-1", "b"],
    &["LREM", "l2", "0", "zz"],
    &["LLEN", "l2"],
    &["LPOP", "l2", "-1"],
    &["HSET", "h2", "only"],
    &["HEXISTS", "h2", "x"],
    &["HLEN", "h2"],
    &["HGETALL", "nohash"],
    &["HMGET", "nohash", "a"],
    &["SCAN", "0", "TYPE", "list"],
    &["SCAN", "abc"],
    &["SCAN", "0", "COUNT", "0"],
    &["TYPE", "z2"],
    &["TYPE", "l2"],
    &["TYPE", "h"],
    &["GET"],
    &["SET", "k"],
    &["ZSCORE", "z2"],
    &["PING", "hello"],
    &["SELECT", "0"],
    &["SELECT", "x"],
    &["ROLE"],
    &["ECHO", "hi"],
    &["PING"],
    &["WAIT", "0", "0"],
    &["COMMAND", "INFO", "DELIFEQ", "DELEX"],
    &["DELIFEQ", "k", "v"],
    &["EVAL", "return {1, 2.9, 'x', false, nil, 3}", "0"],
    &["EVAL", "return {ok = 'FINE'}", "0"],
    &[
        "EVAL",
        "return redis.error_reply('NOTSHARES held as a lock')",
        "0",
    ],
    &["EVAL", "return redis.call('GET', KEYS[1])", "1", "nothing"],
    &[
        "EVAL",
        "return {redis.call('SET', KEYS[1], ARGV[1]), redis.call('ZADD', 'zz', '+inf', 'm')}",
        "1",
        "k",
        "v",
    ],
    &["EVAL", "return redis.call('ZSCORE', 'zz', 'm')", "0"],
    &["EVAL", "return cjson.encode({v = 'a/b', t = 3})", "0"],
    &[
        "EVAL",
        "local e = cjson.decode('{\"v\":\"x\",\"e\":12.5}') return {e.v, e.e}",
        "0",
    ],
    &["EVAL", "return redis.pcall('LPOP', KEYS[1])", "1", "k"],
    &["EVAL", "return tostring(redis.call('GET', 'nothing'))", "0"],
    &["EVALSHA", "ffffffffffffffffffffffffffffffffffffffff", "0"],
    &["EVAL", "return redis.REDIS_VERSION_NUM >= 0x070000", "0"],
    &["EVAL", "return nosuch", "0"],
    &["EVAL", "x = 1", "0"],
    &["EVAL", "return (", "0"],
    &["EVAL", "local t = nil; return t.x", "0"],
    &["EVAL", "return redis.call('NOSUCH')", "0"],
    &["EVAL", "return redis.call('MULTI')", "0"],
    &["EVAL", "return redis.call()", "0"],
    &["EVAL", "return redis.call('GET', {})", "0"],
    &["EVAL", "return {math.random(100), math.random(100)}", "0"],
    &[
        "EVAL",
        "return string.format('%.14g', 1700000000000.5)",
        "0",
    ],
    &["EVAL", "return tostring(1e15)", "0"],
    &[
        "SCRIPT",
        "EXISTS",
        "ffffffffffffffffffffffffffffffffffffffff",
    ],
    &["EVAL", "return 1", "-1"],
    &["EVAL", "return 1", "3", "a"],
];

/// A reply, with a script error cut before the text that names the script
/// (its hash, and a line number Redis 7.0 and 7.2 tell differently).
fn outcome(command: &[&str], result: redis::RedisResult<Value>) -> String {
    match result {
        Ok(Value::Int(ms)) if command[0] == "PTTL" && ms > 0 => "a positive PTTL".into(),
        Ok(value) => format!("{value:?}"),
        Err(err) => {
            let text = format!(
                "{} {}",
                err.code().unwrap_or("?"),
                err.detail().unwrap_or("")
            );
            text.split(" script: ")
                .next()
                .unwrap_or_default()
                .to_owned()
        }
    }
}

async fn replies(url: &str) -> Vec<String> {
    run(url, SCRIPT).await
}

async fn run(url: &str, script: &[&[&str]]) -> Vec<String> {
    let client = redis::Client::open(url).expect("a valid URL");
    let mut conn = client
        .get_multiplexed_async_connection()
        .await
        .expect("connect");
    let mut out = Vec::new();
    for command in script {
        let mut cmd = redis::cmd(command[0]);
        cmd.arg(&command[1..]);
        out.push(outcome(command, cmd.query_async(&mut conn).await));
    }
    let () = redis::cmd("FLUSHALL")
        .query_async(&mut conn)
        .await
        .expect("flush");
    out
}

#[tokio::test]
async fn the_simulated_server_answers_as_redis_does() {
    let real = RedisServer::start();
    let sim = Server::new(SystemClock);
    let sim_addr = sim.listen().await.expect("listen");
    for query in ["", "?protocol=resp3"] {
        let expected = replies(&format!("{}{query}", real.url())).await;
        let got = replies(&format!("redis://{sim_addr}/{query}")).await;
        let diffs: Vec<String> = SCRIPT
            .iter()
            .zip(expected.iter().zip(&got))
            .filter(|(_, (e, g))| e != g)
            .map(|(c, (e, g))| format!("{}\n  redis: {e}\n  sim:   {g}", c.join(" ")))
            .collect();
        assert!(diffs.is_empty(), "{query}:\n{}", diffs.join("\n"));
    }
}

/// A user whose ACL has `-@scripting` on Redis, and a server refusing
/// scripts in the simulation: the same refusals, which the runtime reads to
/// go on without scripts.
#[tokio::test]
async fn scripts_are_refused_as_an_acl_refuses_them() {
    const DENIED: &[&[&str]] = &[
        &["SCRIPT", "LOAD", "return 1"],
        &["EVALSHA", "e0e1f9fabfc9d4800c877a703b823ac0578ff8db", "0"],
        &["EVAL", "return 1", "0"],
        &["SET", "k", "v"],
        &["GET", "k"],
    ];
    let real = RedisServer::start();
    let () = real.cmd(&[
        "ACL",
        "SETUSER",
        "locker",
        "on",
        ">pw",
        "~*",
        "&*",
        "+@all",
        "-@scripting",
    ]);
    let sim = Server::new(SystemClock);
    sim.refuse_scripts(true);
    let sim_addr = sim.listen().await.expect("listen");
    for query in ["", "?protocol=resp3"] {
        let real_url = format!("redis://locker:pw@127.0.0.1:{}/{query}", real.port());
        let expected = run(&real_url, DENIED).await;
        let got = run(&format!("redis://locker:pw@{sim_addr}/{query}"), DENIED).await;
        // Redis 7.0 says "this user", 7.2 (which the simulation answers
        // as) names the user; the runtime reads neither, only the command.
        let expected: Vec<String> = expected
            .iter()
            .map(|e| e.replace("NOPERM this user", "NOPERM User locker"))
            .collect();
        assert_eq!(got, expected, "{query}");
    }
}

/// `WATCH`/`MULTI`/`EXEC` on two connections, as the script-free engine
/// uses them: the same replies from both servers.
#[tokio::test]
async fn transactions_abort_as_redis_aborts_them() {
    async fn transactions(url: &str) -> Vec<String> {
        let client = redis::Client::open(url).expect("a valid URL");
        let mut a = client
            .get_multiplexed_async_connection()
            .await
            .expect("connect");
        let mut b = client
            .get_multiplexed_async_connection()
            .await
            .expect("connect");
        let mut out = Vec::new();
        let exec = async |a: &mut redis::aio::MultiplexedConnection| {
            let result: redis::RedisResult<Value> = redis::pipe()
                .atomic()
                .cmd("SET")
                .arg("k")
                .arg("1")
                .cmd("INCR")
                .arg("k")
                .cmd("GET")
                .arg("k")
                .query_async(a)
                .await;
            outcome(&["EXEC"], result)
        };
        for touch in [
            None,
            Some(["SET", "k", "b"]),
            Some(["DEL", "k", "x"]),
            Some(["DEL", "nothing", "x"]),
        ] {
            let () = redis::cmd("WATCH")
                .arg("k")
                .query_async(&mut a)
                .await
                .expect("watch");
            if let Some(touch) = touch {
                let _: Value = redis::cmd(touch[0])
                    .arg(&touch[1..])
                    .query_async(&mut b)
                    .await
                    .expect("touch");
            }
            out.push(exec(&mut a).await);
        }
        let r: redis::RedisResult<Value> = redis::cmd("EXEC").query_async(&mut a).await;
        out.push(outcome(&["EXEC"], r));
        let r: redis::RedisResult<Value> = redis::cmd("UNWATCH").query_async(&mut a).await;
        out.push(outcome(&["UNWATCH"], r));
        let () = redis::cmd("FLUSHALL")
            .query_async(&mut a)
            .await
            .expect("flush");
        out
    }
    let real = RedisServer::start();
    let sim = Server::new(SystemClock);
    let sim_addr = sim.listen().await.expect("listen");
    for query in ["", "?protocol=resp3"] {
        let expected = transactions(&format!("{}{query}", real.url())).await;
        let got = transactions(&format!("redis://{sim_addr}/{query}")).await;
        assert_eq!(got, expected, "{query}");
    }
}

/// A seeded generator of command sequences: keys from a small set, so that
/// types collide (WRONGTYPE) and containers empty out; the same sequence
/// goes to both servers.
struct Commands(u64);

impl Commands {
    fn next(&mut self, n: usize) -> usize {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((self.0 >> 33) % n as u64) as usize
    }

    fn pick<'a>(&mut self, from: &[&'a str]) -> &'a str {
        from[self.next(from.len())]
    }

    /// A key of the kind `prefix` names, or one in ten times any key, so
    /// that types collide now and then.
    fn key(&mut self, prefix: &str) -> String {
        let prefix = if self.next(10) == 0 {
            self.pick(&["s", "z", "h", "l"])
        } else {
            prefix
        };
        format!("{prefix}{}", self.next(2))
    }

    fn command(&mut self) -> Vec<String> {
        const KEYS: &[&str] = &["s0", "s1", "z0", "h0", "l0"];
        const MEMBERS: &[&str] = &["m", "n", "o", "kind:2", "writing"];
        const SCORES: &[&str] = &["1", "2.5", "-3", "+inf", "-inf", "(2", "x", "1e3"];
        const COUNTS: &[&str] = &["0", "1", "-1", "2", "-2", "10"];
        let kind = self.next(29);
        let key = self.key(match kind {
            10..=17 => "z",
            18..=21 | 27 => "h",
            22..=26 => "l",
            _ => "s",
        });
        let member = self.pick(MEMBERS).to_string();
        let score = self.pick(SCORES).to_string();
        let count = self.pick(COUNTS).to_string();
        let words: Vec<String> = match kind {
            0 => vec!["SET".into(), key, member],
            1 => {
                let option = self.pick(&["NX", "XX", "GET", "KEEPTTL"]);
                vec!["SET".into(), key, member, option.into()]
            }
            2 => vec![
                "SET".into(),
                key,
                count,
                "PX".into(),
                "100000".into(),
                "NX".into(),
            ],
            3 => vec!["GET".into(), key],
            4 => vec!["DEL".into(), key, self.pick(KEYS).into()],
            5 => vec!["EXISTS".into(), key],
            6 => vec!["INCR".into(), key],
            7 => vec![
                "PEXPIRE".into(),
                key,
                self.pick(&["100000", "0", "-1"]).into(),
            ],
            8 => vec!["PERSIST".into(), key],
            9 => vec!["TYPE".into(), key],
            10 => vec!["ZADD".into(), key, score, member],
            11 => {
                let flag = self.pick(&["XX", "NX", "GT", "LT", "CH", "INCR"]);
                vec!["ZADD".into(), key, flag.into(), score, member]
            }
            12 => vec!["ZSCORE".into(), key, member],
            13 => vec!["ZREM".into(), key, member],
            14 => vec![
                "ZRANGE".into(),
                key,
                count.clone(),
                self.pick(COUNTS).into(),
                "WITHSCORES".into(),
            ],
            15 => vec!["ZRANGEBYSCORE".into(), key, score, self.pick(SCORES).into()],
            16 => vec![
                "ZREMRANGEBYSCORE".into(),
                key,
                score,
                self.pick(SCORES).into(),
            ],
            17 => vec!["ZCOUNT".into(), key, score, self.pick(SCORES).into()],
            18 => vec!["HSET".into(), key, member, count],
            19 => vec!["HGET".into(), key, member],
            20 => vec!["HDEL".into(), key, member],
            21 => vec!["HMGET".into(), key, member, self.pick(MEMBERS).into()],
            22 => vec!["RPUSH".into(), key, member],
            23 => vec!["LPOP".into(), key],
            24 => vec!["LRANGE".into(), key, count, self.pick(COUNTS).into()],
            25 => vec!["LREM".into(), key, count, member],
            26 => vec!["LSET".into(), key, count, member],
            27 => vec!["HGETALL".into(), key],
            _ => vec!["LLEN".into(), key],
        };
        // One in three through a script, whose conversion rules then apply
        // both ways (an error becomes a table, then an error reply again).
        if self.next(3) == 0 {
            let script = "return redis.pcall(unpack(ARGV))".to_string();
            return [vec!["EVAL".into(), script, "0".into()], words].concat();
        }
        words
    }
}

/// Thousands of seeded random commands, the same replies from both servers.
#[tokio::test]
async fn random_command_sequences_get_the_same_replies() {
    let real = RedisServer::start();
    let sim = Server::new(SystemClock);
    let sim_addr = sim.listen().await.expect("listen");
    let connect = async |url: String| {
        redis::Client::open(url)
            .expect("a valid URL")
            .get_multiplexed_async_connection()
            .await
            .expect("connect")
    };
    let mut redis = connect(real.url()).await;
    let mut simulated = connect(format!("redis://{sim_addr}/")).await;
    for seed in 0..8 {
        let mut commands = Commands(seed);
        for step in 0..400 {
            let words = commands.command();
            let words: Vec<&str> = words.iter().map(String::as_str).collect();
            let mut cmd = redis::cmd(words[0]);
            cmd.arg(&words[1..]);
            let expected = outcome(&words, cmd.query_async(&mut redis).await);
            let got = outcome(&words, cmd.query_async(&mut simulated).await);
            assert_eq!(
                got,
                expected,
                "seed {seed}, step {step}: {}",
                words.join(" ")
            );
        }
        let () = redis::cmd("FLUSHALL")
            .query_async(&mut redis)
            .await
            .expect("flush");
        let () = redis::cmd("FLUSHALL")
            .query_async(&mut simulated)
            .await
            .expect("flush");
    }
}
