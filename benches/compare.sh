#!/usr/bin/env bash
# sluice side by side with Redis 7 streams, NATS JetStream and beanstalkd,
# driven by sluice-loadgen with the same workloads (BENCHMARKS.md, "Comparison with other brokers").
#
#   benches/compare.sh            the full run: results into benches/results/,
#                                 the table of medians into BENCHMARKS.md
#   benches/compare.sh --quick    a short smoke run into target/compare-quick/;
#                                 BENCHMARKS.md is left alone
#   benches/compare.sh --no-sqs   without the SQS tables (no moto to install)
#
# Every broker runs on a free loopback port with persistence off, started
# here and stopped here by process id (never the system services), pinned to
# CPU $BROKER_CPU (default 0); the load generator runs on CPU $LOADGEN_CPU
# (default 1). Missing peers are installed from Debian packages (as root).
# Each workload runs against all four brokers, interleaved over three passes;
# the tables quote medians. The comparison of record keeps one batch in
# flight per connection (--window 1); a second throughput table keeps 8, and
# a latency table sends one message at a time. The SQS tables drive sluice's
# SQS door, moto's server (benches/moto-requirements.txt, installed into
# target/venv-moto) and sluice's native door with batches of 10, in one run.
# Environment: BROKER_CPU, LOADGEN_CPU.
set -euo pipefail

usage() {
    sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'
}

QUICK=0
SQS=1
for arg in "$@"; do
    case "$arg" in
        --quick) QUICK=1 ;;
        --no-sqs) SQS=0 ;;
        -h | --help)
            usage
            exit 0
            ;;
        *)
            echo "compare.sh: unknown argument $arg" >&2
            usage >&2
            exit 2
            ;;
    esac
done

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
COMMAND="benches/compare.sh${*:+ $*}"
BROKER_CPU="${BROKER_CPU:-0}"
LOADGEN_CPU="${LOADGEN_CPU:-1}"
STARTED_AT="$(date +%s)"
# The commit measured, taken before the run writes its own results.
COMMIT="$(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
if [[ -n "$(git status --porcelain --untracked-files=no 2>/dev/null)" ]]; then
    COMMIT="$COMMIT (with uncommitted changes)"
fi

log() { printf '[compare] %s\n' "$*" >&2; }
die() {
    printf 'compare.sh: %s\n' "$*" >&2
    exit 1
}

# --- the workloads -----------------------------------------------------------
# The same for every broker: 100-byte bodies, batches of 64, two producer
# and two consumer connections, three interleaved passes.
PASSES=3
COMMON=(--size 100)
TWO=(--producers 2 --consumers 2)
BATCH=64
if ((QUICK)); then
    PASSES=1
    THROUGHPUT_MESSAGES=20000
    REDELIVERY_MESSAGES=4000
    LATENCY_MESSAGES=10000
    SINGLE_MESSAGES=2000
    SQS_DURATION=2s
    OUT="$ROOT/target/compare-quick"
else
    THROUGHPUT_MESSAGES=1000000
    REDELIVERY_MESSAGES=50000
    LATENCY_MESSAGES=100000
    SINGLE_MESSAGES=50000
    SQS_DURATION=10s
    OUT="$ROOT/benches/results"
fi
# The second throughput table: batches in flight per connection.
WINDOW=8
# One message at a time (batches of 1), open loop: the latency of a single
# message through each broker, where batching cannot help anyone.
SINGLE_RATE=5000
# Leases of 1 s, sends paced so leases end spread out, as in service.
REDELIVERY_RATE=5000
REDELIVERY_VISIBILITY=1s
# Open loop at a rate every broker sustains here with room to spare
# (beanstalkd is the slowest: 15,000 to 37,000 messages/s closed loop on the
# shared 2-vCPU VM, and fell behind at 20,000/s), so the latency is not a
# queue that only grows. Redelivery doubles the receives, hence half that.
LATENCY_RATE=10000
# The SQS tables: SQS's batches of at most 10, runs bounded in time (moto
# moves tens of messages a second), and at most 100 messages in flight per
# target (moto's operations walk its queue: a closed loop thousands of
# messages ahead leaves it at a few messages a second). One message at a
# time and redelivery at 20 messages/s, which moto keeps up with.
SQS_BATCH=10
SQS_IN_FLIGHT=100
SQS_RATE=20

# --- tools and peers ---------------------------------------------------------
find_bin() {
    local name="$1" dir
    if command -v "$name" >/dev/null 2>&1; then
        command -v "$name"
        return 0
    fi
    for dir in /usr/sbin /usr/bin /usr/local/sbin /usr/local/bin; do
        if [[ -x "$dir/$name" ]]; then
            echo "$dir/$name"
            return 0
        fi
    done
    return 1
}

missing=()
for bin in redis-server nats-server beanstalkd taskset lscpu; do
    find_bin "$bin" >/dev/null || missing+=("$bin")
done
if ((${#missing[@]})); then
    ((EUID == 0)) || die "missing ${missing[*]}; run as root to install them with apt-get"
    command -v apt-get >/dev/null || die "missing ${missing[*]} and no apt-get to install them"
    log "installing the peers from Debian packages (missing: ${missing[*]})"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends \
        redis-server redis-tools nats-server beanstalkd util-linux >/dev/null
fi
REDIS_SERVER="$(find_bin redis-server)"

MOTO_VENV="$ROOT/target/venv-moto"
if ((SQS)) && [[ ! -x "$MOTO_VENV/bin/moto_server" ]]; then
    if ! python3 -c "import ensurepip, venv" 2>/dev/null; then
        ((EUID == 0)) || die "python3 with venv is missing; run as root to install it, or pass --no-sqs"
        log "installing python3-venv from Debian packages"
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
            python3 python3-venv >/dev/null
    fi
    log "installing moto's server into $MOTO_VENV (benches/moto-requirements.txt)"
    python3 -m venv "$MOTO_VENV"
    "$MOTO_VENV/bin/pip" install --quiet -r benches/moto-requirements.txt
fi
NATS_SERVER="$(find_bin nats-server)"
BEANSTALKD="$(find_bin beanstalkd)"

CPUS="$(nproc --all)"
((CPUS >= 2)) || die "needs two CPUs (broker on one, load generator on the other); found $CPUS"

log "building sluice-server and sluice-loadgen (release)"
cargo build --release --locked -q \
    -p sluice-broker --bin sluice-server \
    -p sluice-loadgen --bin sluice-loadgen
SLUICE_SERVER="$ROOT/target/release/sluice-server"
LOADGEN="$ROOT/target/release/sluice-loadgen"

# --- brokers -------------------------------------------------------------------
WORK="$(mktemp -d "${TMPDIR:-/tmp}/sluice-compare.XXXXXX")"
PIDS=()
cleanup() {
    local pid
    for pid in "${PIDS[@]}"; do
        kill "$pid" 2>/dev/null || true
    done
    for pid in "${PIDS[@]}"; do
        wait "$pid" 2>/dev/null || true
    done
    rm -rf "$WORK"
}
trap cleanup EXIT

port_taken() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# A loopback port nothing listens on, from the ephemeral range's neighbour.
free_port() {
    local port tries
    for ((tries = 0; tries < 200; tries++)); do
        port=$((20000 + RANDOM % 30000))
        if ! port_taken "$port"; then
            echo "$port"
            return 0
        fi
    done
    die "no free loopback port found"
}

# start NAME PORT COMMAND...: runs the command pinned to the broker CPU and
# waits (at most 15 s) until the port accepts connections.
start() {
    local name="$1" port="$2" i
    shift 2
    taskset -c "$BROKER_CPU" "$@" >"$WORK/$name.log" 2>&1 &
    local pid=$!
    PIDS+=("$pid")
    for ((i = 0; i < 300; i++)); do
        kill -0 "$pid" 2>/dev/null || {
            cat "$WORK/$name.log" >&2
            die "$name exited at start"
        }
        if port_taken "$port"; then
            log "$name on 127.0.0.1:$port (pid $pid, CPU $BROKER_CPU)"
            return 0
        fi
        sleep 0.05
    done
    die "$name did not listen on 127.0.0.1:$port within 15 s"
}

SLUICE_PORT="$(free_port)"
start sluice "$SLUICE_PORT" "$SLUICE_SERVER" --listen "127.0.0.1:$SLUICE_PORT" \
    --shards 1 --metrics-addr off --sqs-listen off
REDIS_PORT="$(free_port)"
mkdir -p "$WORK/redis"
start redis "$REDIS_PORT" "$REDIS_SERVER" --port "$REDIS_PORT" --bind 127.0.0.1 \
    --save '' --appendonly no --dir "$WORK/redis" --daemonize no
NATS_PORT="$(free_port)"
mkdir -p "$WORK/nats"
start nats "$NATS_PORT" "$NATS_SERVER" -js -a 127.0.0.1 -p "$NATS_PORT" -sd "$WORK/nats"
BEANSTALKD_PORT="$(free_port)"
start beanstalkd "$BEANSTALKD_PORT" "$BEANSTALKD" -l 127.0.0.1 -p "$BEANSTALKD_PORT"

TARGETS=(
    --target "sluice://127.0.0.1:$SLUICE_PORT"
    --target "redis://127.0.0.1:$REDIS_PORT"
    --target "nats://127.0.0.1:$NATS_PORT"
    --target "beanstalkd://127.0.0.1:$BEANSTALKD_PORT"
)
if ((SQS)); then
    # A sluice of its own for the SQS tables: its SQS door and its native
    # door, the same process.
    SQS_NATIVE_PORT="$(free_port)"
    SQS_DOOR_PORT="$(free_port)"
    while [[ "$SQS_DOOR_PORT" == "$SQS_NATIVE_PORT" ]]; do
        SQS_DOOR_PORT="$(free_port)"
    done
    start sluice-sqs "$SQS_DOOR_PORT" "$SLUICE_SERVER" --listen "127.0.0.1:$SQS_NATIVE_PORT" \
        --sqs-listen "127.0.0.1:$SQS_DOOR_PORT" --shards 1 --metrics-addr off
    MOTO_PORT="$(free_port)"
    start moto "$MOTO_PORT" "$MOTO_VENV/bin/moto_server" -H 127.0.0.1 -p "$MOTO_PORT"
    SQS_TARGETS=(
        --target "sqs://127.0.0.1:$SQS_DOOR_PORT"
        --target "sqs://127.0.0.1:$MOTO_PORT"
        --target "sluice://127.0.0.1:$SQS_NATIVE_PORT"
    )
fi

# --- runs ----------------------------------------------------------------------
mkdir -p "$OUT"
FAILED=()
declare -A RUN_COMMAND

# run NAME WORKLOAD ARGS...: one workload over every broker of RUN_TARGETS;
# NAME names the result files.
RUN_TARGETS=("${TARGETS[@]}")
run() {
    local wl="$1" workload="$2"
    shift 2
    rm -rf "$OUT/hgrm-$wl"
    local args=("$workload" "${RUN_TARGETS[@]}" --passes "$PASSES" "${COMMON[@]}" "$@"
        --json "$OUT/$wl.json" --hgrm "$OUT/hgrm-$wl" --plot "$OUT/$wl.svg"
        --markdown "$WORK/$wl.md" --quiet)
    local shown="taskset -c $LOADGEN_CPU target/release/sluice-loadgen ${args[*]}"
    shown="${shown//"$WORK"/\$TMP}"
    RUN_COMMAND[$wl]="${shown//"$ROOT"\//}"
    log "$wl: ${RUN_COMMAND[$wl]}"
    local rc=0
    taskset -c "$LOADGEN_CPU" "$LOADGEN" "${args[@]}" >"$OUT/$wl.txt" 2>&1 || rc=$?
    grep -A 20 '^summary' "$OUT/$wl.txt" >&2 || true
    if ((rc != 0)); then
        log "$wl: sluice-loadgen exited $rc (see $OUT/$wl.txt)"
        FAILED+=("$wl (exit $rc)")
    fi
}

run throughput throughput "${TWO[@]}" --batch "$BATCH" --messages "$THROUGHPUT_MESSAGES"
run redelivery redelivery "${TWO[@]}" --batch "$BATCH" --messages "$REDELIVERY_MESSAGES" \
    --rate "$REDELIVERY_RATE" --visibility-timeout "$REDELIVERY_VISIBILITY"
run latency latency "${TWO[@]}" --batch "$BATCH" --messages "$LATENCY_MESSAGES" --rate "$LATENCY_RATE"
run "throughput-window$WINDOW" throughput "${TWO[@]}" --batch "$BATCH" --window "$WINDOW" \
    --messages "$THROUGHPUT_MESSAGES"
run latency-single latency "${TWO[@]}" --batch 1 --messages "$SINGLE_MESSAGES" --rate "$SINGLE_RATE"

SQS_WORKLOADS=()
if ((SQS)); then
    SQS_WORKLOADS=(sqs-throughput sqs-latency-single sqs-redelivery)
    RUN_TARGETS=("${SQS_TARGETS[@]}")
    run sqs-throughput throughput "${TWO[@]}" --batch "$SQS_BATCH" --duration "$SQS_DURATION" \
        --in-flight-max "$SQS_IN_FLIGHT"
    run sqs-latency-single latency --producers 1 --consumers 1 --batch 1 --window 1 \
        --rate "$SQS_RATE" --duration "$SQS_DURATION"
    # Redelivery over the two SQS servers (the native door's is above).
    RUN_TARGETS=("${SQS_TARGETS[@]:0:4}")
    run sqs-redelivery redelivery --producers 1 --consumers 1 --batch "$SQS_BATCH" \
        --rate "$SQS_RATE" --duration "$SQS_DURATION" --visibility-timeout "$REDELIVERY_VISIBILITY"
fi

# Redis's own tool on the same path (XADD pipelined 64 deep, two
# connections, 100-byte field), as a check on the Redis adapter.
SANITY=""
if REDIS_BENCHMARK="$(find_bin redis-benchmark)"; then
    body="$(printf '%*s' 100 '' | tr ' ' x)"
    n=$((QUICK ? 100000 : 1000000))
    line="$(taskset -c "$LOADGEN_CPU" "$REDIS_BENCHMARK" -p "$REDIS_PORT" -c 2 -P 64 -n "$n" -q \
        XADD compare_sanity '*' d "$body" 2>&1 | tr '\r' '\n' |
        sed -n 's/.*: \([0-9.]* requests per second\).*/\1/p' | tail -1 || true)"
    SANITY="redis-benchmark -c 2 -P 64 -n $n XADD (100-byte field), same pinning: ${line:-no figure}"
    log "$SANITY"
fi

# --- the report ------------------------------------------------------------------
ELAPSED=$(($(date +%s) - STARTED_AT))
MODEL="$(lscpu | sed -n 's/^Model name:[[:space:]]*//p' | head -1)"
versions="$("$SLUICE_SERVER" --version 2>/dev/null | head -1); $("$REDIS_SERVER" --version | cut -d' ' -f1-3); nats-server $("$NATS_SERVER" --version 2>&1 | sed 's/^nats-server: //'); $("$BEANSTALKD" -v 2>&1 | head -1)"

REPORT="$WORK/report.md"
{
    echo "Generated by \`$COMMAND\` on $(date -u '+%Y-%m-%d %H:%M UTC') in ${ELAPSED} s."
    echo
    echo "- commit: $COMMIT"
    echo "- machine: ${MODEL:-unknown CPU}, $CPUS CPUs, $(uname -sr); brokers pinned to CPU $BROKER_CPU, sluice-loadgen to CPU $LOADGEN_CPU"
    echo "- brokers: $versions; persistence off (Redis \`--save '' --appendonly no\`, JetStream memory storage, beanstalkd without \`-b\`), sluice \`--shards 1 --metrics-addr off\`"
    echo "- every workload: 100-byte bodies, batches of $BATCH (1 for the one-message-at-a-time latency), one batch in flight per connection (--window 1) but in the window-$WINDOW table, 2 producer + 2 consumer connections, $PASSES interleaved passes; medians over the passes; ratios are sluice against each peer"
    [[ -n "$SANITY" ]] && echo "- peer sanity check: $SANITY"
    ((${#FAILED[@]})) && echo "- **failed runs**: ${FAILED[*]}"
    if ((SQS)); then
        echo "- SQS tables: \`sqs://127.0.0.1:$SQS_DOOR_PORT\` is sluice's SQS door and \`sluice://127.0.0.1:$SQS_NATIVE_PORT\` its native door (one \`sluice-server --shards 1\`), \`sqs://127.0.0.1:$MOTO_PORT\` moto's server ($("$MOTO_VENV/bin/python" -c 'import moto; print("moto", moto.__version__)' 2>/dev/null || echo moto), \`moto_server\`), all on CPU $BROKER_CPU; batches of $SQS_BATCH (1 one message at a time), at most $SQS_IN_FLIGHT messages in flight in the throughput table, $SQS_DURATION of sending a pass; ratios are the SQS door against each"
    fi
    for wl in throughput redelivery latency "throughput-window$WINDOW" latency-single "${SQS_WORKLOADS[@]}"; do
        echo
        case "$wl" in
            throughput) echo "### Throughput: send + receive + delete, closed loop, $THROUGHPUT_MESSAGES messages" ;;
            redelivery) echo "### Redelivery: every message left once, $REDELIVERY_VISIBILITY visibility timeout, sent at $REDELIVERY_RATE/s, $REDELIVERY_MESSAGES messages" ;;
            latency) echo "### Latency: open loop at $LATENCY_RATE messages/s, $LATENCY_MESSAGES messages, from the intended send time" ;;
            throughput-window*) echo "### Throughput with $WINDOW batches in flight per connection: closed loop, $THROUGHPUT_MESSAGES messages" ;;
            latency-single) echo "### Latency one message at a time: open loop at $SINGLE_RATE messages/s, batches of 1, $SINGLE_MESSAGES messages, from the intended send time" ;;
            sqs-throughput) echo "### The SQS API, throughput: send + receive + delete, batches of $SQS_BATCH, closed loop, at most $SQS_IN_FLIGHT in flight, $SQS_DURATION a pass" ;;
            sqs-latency-single) echo "### The SQS API, one message at a time: 1 producer + 1 consumer, batches of 1, $SQS_RATE messages/s, $SQS_DURATION a pass, send to receive" ;;
            sqs-redelivery) echo "### The SQS API, redelivery: every message left once, $REDELIVERY_VISIBILITY visibility timeout, 1 producer + 1 consumer, $SQS_RATE messages/s, $SQS_DURATION a pass" ;;
        esac
        echo
        echo "\`${RUN_COMMAND[$wl]}\`"
        echo
        if [[ -s "$WORK/$wl.md" ]]; then
            cat "$WORK/$wl.md"
        else
            echo "(no table: the run failed, see \`$wl.txt\`)"
        fi
        echo
        rel="${OUT#"$ROOT"/}"
        echo "Plot: [$rel/$wl.svg]($rel/$wl.svg); per pass: [$rel/$wl.json]($rel/$wl.json), [$rel/$wl.txt]($rel/$wl.txt), \`$rel/hgrm-$wl/\`."
    done
} >"$REPORT"
cp "$REPORT" "$OUT/report.md"

if ((QUICK)); then
    log "quick run: results in $OUT (BENCHMARKS.md untouched)"
else
    BEGIN='<!-- compare:begin -->'
    END='<!-- compare:end -->'
    if ! grep -qF "$BEGIN" BENCHMARKS.md; then
        printf '\n## Comparison with other brokers\n\n%s\n%s\n' "$BEGIN" "$END" >>BENCHMARKS.md
    fi
    awk -v begin="$BEGIN" -v end="$END" -v report="$REPORT" '
        $0 == begin { print; while ((getline line < report) > 0) print line; skip = 1; next }
        $0 == end { skip = 0 }
        !skip { print }
    ' BENCHMARKS.md >"$WORK/BENCHMARKS.md"
    cp "$WORK/BENCHMARKS.md" BENCHMARKS.md
    log "results in $OUT; table written into BENCHMARKS.md"
fi
log "done in ${ELAPSED} s"
((${#FAILED[@]} == 0)) || die "failed: ${FAILED[*]}"
