//! The conversion rules and the `redis` library, against a keyspace.

use super::*;
use crate::commands::{self, Ctx};
use crate::keyspace::Keyspace;

fn eval(
    scripting: &mut Scripting,
    keys: &mut Keyspace,
    body: &str,
    k: &[&str],
    a: &[&str],
) -> Reply {
    let bytes = |items: &[&str]| {
        items
            .iter()
            .map(|s| s.as_bytes().to_vec())
            .collect::<Vec<_>>()
    };
    let mut exec = |args: &[Bytes]| {
        let mut ctx = Ctx {
            keys: &mut *keys,
            now_us: 1_700_000_000_123_456,
            resp3: false,
        };
        commands::run(&mut ctx, args)
            .unwrap_or_else(|| Reply::err("ERR Unknown Redis command called from script"))
    };
    scripting.eval(body.as_bytes(), &bytes(k), &bytes(a), &mut exec)
}

fn run(body: &str) -> Reply {
    eval(&mut Scripting::new(), &mut Keyspace::new(), body, &[], &[])
}

#[test]
fn lua_values_become_replies_as_in_redis() {
    assert_eq!(run("return 3.99"), Reply::Int(3));
    assert_eq!(run("return -3.99"), Reply::Int(-3));
    assert_eq!(run("return 'x'"), Reply::bulk("x"));
    assert_eq!(run("return true"), Reply::Int(1));
    assert_eq!(run("return false"), Reply::Nil);
    assert_eq!(run("return nil"), Reply::Nil);
    assert_eq!(
        run("return {1, 'a', false, nil, 5}"),
        Reply::Array(vec![Reply::Int(1), Reply::bulk("a"), Reply::Nil])
    );
    assert_eq!(run("return {ok = 'FINE'}"), Reply::Status("FINE".into()));
    assert_eq!(run("return {err = 'BAD thing'}"), Reply::err("BAD thing"));
    assert_eq!(
        run("return redis.error_reply('NOTSHARES no')"),
        Reply::err("NOTSHARES no")
    );
    assert_eq!(
        run("return redis.status_reply('PONG')"),
        Reply::Status("PONG".into())
    );
    assert_eq!(
        run("return {1, {2, {ok = 'x'}}}"),
        Reply::Array(vec![
            Reply::Int(1),
            Reply::Array(vec![Reply::Int(2), Reply::Status("x".into())])
        ])
    );
}

#[test]
fn replies_become_lua_values_as_in_redis() {
    let mut keys = Keyspace::new();
    let mut lua = Scripting::new();
    let body = "
      redis.call('SET', KEYS[1], 'v', 'PX', 1000)
      local missing = redis.call('GET', 'nothing')
      local ok = redis.call('SET', KEYS[1], 'w')
      redis.call('ZADD', 'z', '+inf', 'm', 1.5, 'n')
      local score = redis.call('ZSCORE', 'z', 'm')
      local n = redis.call('PTTL', 'nothing')
      return {tostring(missing), type(ok), ok.ok, score, redis.call('ZSCORE', 'z', 'n'), n, type(n)}";
    assert_eq!(
        eval(&mut lua, &mut keys, body, &["k"], &[]),
        Reply::Array(
            ["false", "table", "OK", "inf", "1.5"]
                .iter()
                .map(Reply::bulk)
                .chain([Reply::Int(-2), Reply::bulk("number")])
                .collect()
        )
    );
}

#[test]
fn call_raises_errors_and_pcall_returns_them() {
    let mut keys = Keyspace::new();
    let mut lua = Scripting::new();
    let reply = eval(
        &mut lua,
        &mut keys,
        "redis.call('SET', 'k', 'v'); return redis.call('LPOP', 'k')",
        &[],
        &[],
    );
    let Reply::Error(text) = reply else {
        panic!("{reply:?}")
    };
    assert!(
        text.starts_with(
            "WRONGTYPE Operation against a key holding the wrong kind of value script: "
        ),
        "{text}"
    );
    let reply = eval(
        &mut lua,
        &mut keys,
        "local r = redis.pcall('LPOP', 'k'); return {type(r), r.err}",
        &[],
        &[],
    );
    assert_eq!(
        reply,
        Reply::Array(vec![
            Reply::bulk("table"),
            Reply::bulk("WRONGTYPE Operation against a key holding the wrong kind of value")
        ])
    );
    let reply = eval(
        &mut lua,
        &mut keys,
        "local ok, e = pcall(redis.call, 'LPOP', 'k'); return e.err",
        &[],
        &[],
    );
    assert_eq!(
        reply,
        Reply::bulk("WRONGTYPE Operation against a key holding the wrong kind of value")
    );
    let Reply::Error(text) = run("return nosuch + 1") else {
        panic!()
    };
    assert!(
        text.starts_with(
            "ERR user_script:1: Script attempted to access nonexistent global variable 'nosuch'"
        ),
        "{text}"
    );
    assert!(text.ends_with("on @user_script:1."), "{text}");
    let Reply::Error(text) = run("x = 1") else {
        panic!()
    };
    assert!(
        text.starts_with("ERR user_script:1: Attempt to modify a readonly table"),
        "{text}"
    );
    let Reply::Error(text) = run("return redis.call('GET', {})") else {
        panic!()
    };
    assert!(text.starts_with("ERR Lua redis lib command arguments must be strings or integers"));
    let Reply::Error(text) = run("return (") else {
        panic!()
    };
    assert!(
        text.starts_with("ERR Error compiling script (new function): user_script:1:"),
        "{text}"
    );
}

#[test]
fn numbers_go_to_commands_as_redis_prints_them() {
    let mut keys = Keyspace::new();
    let mut lua = Scripting::new();
    let reply = eval(
        &mut lua,
        &mut keys,
        "redis.call('SET', 'a', 1700000000123 + 5); redis.call('SET', 'b', 0.5); return {redis.call('GET', 'a'), redis.call('GET', 'b')}",
        &[],
        &[],
    );
    assert_eq!(
        reply,
        Reply::Array(vec![Reply::bulk("1700000000128"), Reply::bulk("0.5")])
    );
}

#[test]
fn keys_argv_time_and_the_script_cache() {
    let mut keys = Keyspace::new();
    let mut lua = Scripting::new();
    let body = "local t = redis.call('TIME'); return {KEYS[1], ARGV[2], t[1], t[2]}";
    let reply = eval(&mut lua, &mut keys, body, &["k"], &["a", "b"]);
    assert_eq!(
        reply,
        Reply::Array(
            ["k", "b", "1700000000", "123456"]
                .iter()
                .map(Reply::bulk)
                .collect()
        )
    );
    let sha = sha1hex(body.as_bytes());
    assert!(lua.contains(&sha));
    assert_eq!(sha, redis::Script::new(body).get_hash());
    assert_eq!(
        run("return redis.sha1hex('')"),
        Reply::bulk("da39a3ee5e6b4b0d3255bfef95601890afd80709")
    );
    lua.flush();
    let reply = lua.evalsha(&sha, &[], &[], &mut |_| Reply::Nil);
    assert_eq!(
        reply,
        Reply::err("NOSCRIPT No matching script. Please use EVAL.")
    );
}

#[test]
fn cjson_as_the_queue_entries_need_it() {
    assert_eq!(
        run("return cjson.encode({v = 'tok/1'})"),
        Reply::bulk(r#"{"v":"tok\/1"}"#)
    );
    assert_eq!(
        run("return cjson.encode({1, 2.5, 'x'})"),
        Reply::bulk("[1,2.5,\"x\"]")
    );
    assert_eq!(run("return cjson.encode({})"), Reply::bulk("{}"));
    assert_eq!(
        run(
            "local e = cjson.decode('{\"v\":\"a\",\"e\":1700000000000,\"n\":null}'); return {e.v, e.e, tostring(e.n == cjson.null)}"
        ),
        Reply::Array(vec![
            Reply::bulk("a"),
            Reply::Int(1_700_000_000_000),
            Reply::bulk("true")
        ])
    );
    assert_eq!(
        run("local e = cjson.decode(cjson.encode({v = 'x', t = 30000})); return {e.v, e.t}"),
        Reply::Array(vec![Reply::bulk("x"), Reply::Int(30000)])
    );
}

#[test]
fn math_random_goes_on_from_script_to_script_from_the_same_start() {
    let mut keys = Keyspace::new();
    let mut lua = Scripting::new();
    let draw = "return {math.random(100), math.random(100)}";
    let first = eval(&mut lua, &mut keys, draw, &[], &[]);
    assert_eq!(first, Reply::Array(vec![Reply::Int(40), Reply::Int(85)]));
    let second = eval(&mut lua, &mut keys, draw, &[], &[]);
    assert_eq!(second, Reply::Array(vec![Reply::Int(36), Reply::Int(45)]));
    assert_eq!(run(draw), first, "a new server starts the sequence again");
    assert_eq!(
        run("return {string.format('%06d', 42), math.max(3, 7), math.floor(2.7)}"),
        Reply::Array(vec![Reply::bulk("000042"), Reply::Int(7), Reply::Int(2)])
    );
}
