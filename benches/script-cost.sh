#!/usr/bin/env bash
# Server instructions per cycle of `SET key value NX PX 30000` followed by
# `EVALSHA` of a release script, counted by callgrind on redis-server: the
# difference between 4,000 and 2,000 cycles, divided by 2,000. For
# comparing versions of a release script, or of the acquire's command, on
# the server alone (BENCHMARKS.md, runs 14 and 15).
#
#   bash benches/script-cost.sh SCRIPT.lua [flag] [get]
#
# The script is called with one key and the value (`1 key value`); with
# `flag`, also with the waiters flag's name, as releases sent it before
# run 14; with `get`, the `SET` asks for the old value (`GET`), as obtains
# sent it before run 15. Needs valgrind, redis-server, redis-cli and
# python3.
set -euo pipefail
script=$1
shift
mode=" $* "
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
count() {
    local cycles=$1 port pid sha
    port=$((20000 + RANDOM % 20000))
    valgrind --tool=callgrind --callgrind-out-file="$work/out-$cycles" \
        redis-server --port "$port" --save '' --appendonly no >"$work/log-$cycles" 2>&1 &
    pid=$!
    until redis-cli -p "$port" ping >/dev/null 2>&1; do sleep 0.2; done
    sha=$(redis-cli -p "$port" -x script load <"$script")
    python3 - "$cycles" "$sha" "$mode" >"$work/commands" <<'PY'
import sys
cycles, sha, mode = int(sys.argv[1]), sys.argv[2], sys.argv[3]
def command(*args):
    args = [str(arg).encode() for arg in args]
    return b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in args)
key = "lockmacro:profile:s1"
out = sys.stdout.buffer
for cycle in range(cycles):
    value = "%032x" % (0xABCDEF << 96 | cycle)
    get = ["GET"] if " get " in mode else []
    out.write(command("SET", key, value, "NX", "PX", 30000, *get))
    extra = ["{%s}:waiters" % key] if " flag " in mode else []
    out.write(command("EVALSHA", sha, 1, key, value, *extra))
PY
    redis-cli -p "$port" --pipe <"$work/commands" >/dev/null
    redis-cli -p "$port" shutdown nosave >/dev/null 2>&1 || true
    wait "$pid" || true
    grep -o 'Collected : [0-9]*' "$work/log-$cycles" | grep -o '[0-9]*$'
}
a=$(count 2000)
b=$(count 4000)
echo "$script${*:+ ($*)}: $(((b - a) / 2000)) server instructions per cycle"
