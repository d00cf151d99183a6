#!/usr/bin/env bash
# Redis streams' memory per 100-byte entry at N entries (default 10,000,000), as
# BENCHMARKS.md compares with sluice's: undelivered, then with every entry
# pending in one consumer group. Starts its own redis-server on a free
# loopback port with persistence off; reads used_memory and used_memory_rss
# (INFO memory) before and after. Usage: benches/redis_memory.sh [N]
set -euo pipefail
N=${1:-10000000}
PORT=${PORT:-$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')}
DIR=$(mktemp -d)
redis-server --port "$PORT" --bind 127.0.0.1 --save '' --appendonly no --dir "$DIR" --daemonize no --loglevel warning > "$DIR/log" 2>&1 &
PID=$!
trap 'kill $PID 2>/dev/null; rm -rf "$DIR"' EXIT
for _ in $(seq 50); do redis-cli -p "$PORT" ping >/dev/null 2>&1 && break; sleep 0.1; done
mem() { redis-cli -p "$PORT" info memory | awk -F: '/^used_memory:/{print $2}' | tr -d '\r'; }
rss() { redis-cli -p "$PORT" info memory | awk -F: '/^used_memory_rss:/{print $2}' | tr -d '\r'; }
echo "redis: $(redis-server --version | cut -d' ' -f3) port $PORT, persistence off; config: $(redis-cli -p "$PORT" config get stream-node-max-entries | tr '\n' ' ') $(redis-cli -p "$PORT" config get stream-node-max-bytes | tr '\n' ' ')"
before=$(mem); before_rss=$(rss)
python3 - "$N" <<'PY' | redis-cli -p "$PORT" --pipe | tail -1
import sys
n = int(sys.argv[1]); body = b"x" * 100
cmd = b"*5\r\n$4\r\nXADD\r\n$1\r\ns\r\n$1\r\n*\r\n$1\r\nf\r\n$100\r\n" + body + b"\r\n"
chunk = cmd * 10000
out = sys.stdout.buffer
for _ in range(n // 10000): out.write(chunk)
out.write(cmd * (n % 10000))
PY
after=$(mem); after_rss=$(rss)
echo "XLEN $(redis-cli -p "$PORT" xlen s)"
python3 -c "b,a,n=$before,$after,$N; print(f'undelivered: used_memory {b} -> {a}: {(a-b)/n:.1f} bytes per entry, {(a-b)/n-100:.1f} over the 100-byte body')"
python3 -c "b,a,n=$before_rss,$after_rss,$N; print(f'undelivered: used_memory_rss {b} -> {a}: {(a-b)/n:.1f} bytes per entry, {(a-b)/n-100:.1f} over the body')"
redis-cli -p "$PORT" xgroup create s g 0 >/dev/null
python3 - "$N" <<'PY' | redis-cli -p "$PORT" --pipe | tail -1
import sys
n = int(sys.argv[1]); count = 1000
cmd = b"*9\r\n$10\r\nXREADGROUP\r\n$5\r\nGROUP\r\n$1\r\ng\r\n$1\r\nc\r\n$5\r\nCOUNT\r\n$4\r\n1000\r\n$7\r\nSTREAMS\r\n$1\r\ns\r\n$1\r\n>\r\n"
sys.stdout.buffer.write(cmd * ((n + count - 1) // count))
PY
pending=$(mem); pending_rss=$(rss)
echo "XPENDING $(redis-cli -p "$PORT" xpending s g | head -1)"
python3 -c "b,a,n=$before,$pending,$N; print(f'every entry pending in a consumer group: used_memory {b} -> {a}: {(a-b)/n:.1f} bytes per entry, {(a-b)/n-100:.1f} over the 100-byte body')"
python3 -c "b,a,n=$before_rss,$pending_rss,$N; print(f'every entry pending: used_memory_rss {b} -> {a}: {(a-b)/n:.1f} bytes per entry, {(a-b)/n-100:.1f} over the body')"
