#!/usr/bin/env bash
# Stop exactly what infra/up.sh started in STATE_DIR: the weed PID recorded in stack.env (only if that
# PID is still this stack's weed), and PostgreSQL on the recorded data directory (pg_ctl stop -m fast
# as its OS user, then SIGKILL to the recorded postmaster PID if it is still alive). Idempotent: a
# stack that is already stopped, or a state dir that never held one, is fine. Data stays on disk.
#
# Usage: infra/down.sh [STATE_DIR]     (default ./.icegres-stack)
set -euo pipefail

STATE_ARG=${1:-./.icegres-stack}
if [ ! -d "$STATE_ARG" ]; then
  echo "infra/down.sh: no state dir $STATE_ARG; nothing to stop"
  exit 0
fi
STATE=$(cd "$STATE_ARG" && pwd)
ENV_FILE="$STATE/stack.env"
WEED_DIR="$STATE/weed"
PG_DATA="$STATE/pg/data"
PG_BIN=/usr/lib/postgresql/15/bin
PG_OS_USER=postgres
WEED_PID=""
PG_PID=""
PG_STOPPED=0

env_value() { # KEY -> value from stack.env ('' if absent)
  [ -f "$ENV_FILE" ] || return 0
  sed -n "s/^$1='\{0,1\}\([^']*\)'\{0,1\}$/\1/p" "$ENV_FILE" | tail -1
}
WEED_PID=$(env_value STACK_WEED_PID)
[ -n "$WEED_PID" ] || WEED_PID=$(cat "$WEED_DIR/weed.pid" 2>/dev/null || true)
PG_DATA=$(env_value STACK_PG_DATA | grep . || echo "$PG_DATA")
PG_BIN=$(env_value STACK_PG_BIN | grep . || echo "$PG_BIN")
PG_OS_USER=$(env_value STACK_PG_OS_USER | grep . || echo "$PG_OS_USER")
PG_PID=$(env_value STACK_PG_PID)

alive() { # a zombie (exited, not yet reaped by the parent that restarted it) counts as gone
  kill -0 "$1" 2>/dev/null && [ "$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null)" != Z ]
}
wait_gone() { # pid tenths-of-a-second
  for _ in $(seq "$2"); do alive "$1" || return 0; sleep 0.1; done
  ! alive "$1"
}

# ---------------------------------------------------------------- SeaweedFS
is_our_weed() { # the PID is alive and is weed serving this state dir (guards against PID reuse)
  [ -r "/proc/$1/cmdline" ] && tr '\0' '\n' <"/proc/$1/cmdline" | grep -qxF -- "-dir=$WEED_DIR/data"
}
if [ -n "$WEED_PID" ] && is_our_weed "$WEED_PID"; then
  kill -TERM "$WEED_PID" 2>/dev/null || true
  if ! wait_gone "$WEED_PID" 150; then
    echo "infra/down.sh: weed PID $WEED_PID ignored SIGTERM for 15s; sending SIGKILL" >&2
    kill -KILL "$WEED_PID" 2>/dev/null || true
    wait_gone "$WEED_PID" 50 || echo "infra/down.sh: weed PID $WEED_PID is still alive" >&2
  fi
  echo "stopped SeaweedFS (PID $WEED_PID)"
fi
rm -f "$WEED_DIR/weed.pid"
# weed mini hard-codes its gRPC unix sockets as /tmp/seaweedfs-<component>-grpc-<port>.sock and leaves
# some behind when it is killed: remove the ones named after this stack's ports, once weed is gone.
if [ -z "$WEED_PID" ] || ! is_our_weed "$WEED_PID"; then
  for pair in $(env_value STACK_WEED_PORTS); do
    case "$pair" in
      *_grpc=*) rm -f "/tmp/seaweedfs-${pair%%_grpc=*}-grpc-${pair#*=}.sock" ;;
    esac
  done
fi

# ---------------------------------------------------------------- PostgreSQL
if [ -f "$PG_DATA/postmaster.pid" ]; then
  live_pid=$(head -1 "$PG_DATA/postmaster.pid")
  if kill -0 "$live_pid" 2>/dev/null; then
    [ -n "$PG_PID" ] || PG_PID=$live_pid
    PG_STOPPED=1
    stop_cmd=(env -i PATH="$PG_BIN:/usr/bin:/bin" LC_ALL=C.UTF-8 "$PG_BIN/pg_ctl" stop -D "$PG_DATA" -m fast -w -t 20)
    if [ "$(id -u)" -eq 0 ]; then
      (cd "$(dirname "$PG_DATA")" && runuser -u "$PG_OS_USER" -- "${stop_cmd[@]}" >/dev/null 2>&1) || true
    else
      (cd "$(dirname "$PG_DATA")" && "${stop_cmd[@]}" >/dev/null 2>&1) || true
    fi
  fi
fi
if [ -n "$PG_PID" ] && kill -0 "$PG_PID" 2>/dev/null \
   && [ "$(tr '\0' '\n' <"/proc/$PG_PID/cmdline" 2>/dev/null | head -1)" = "$PG_BIN/postgres" ]; then
  echo "infra/down.sh: postgres PID $PG_PID survived pg_ctl stop; sending SIGKILL" >&2
  kill -KILL "$PG_PID" 2>/dev/null || true
  wait_gone "$PG_PID" 50 || true
  PG_STOPPED=1
fi
[ "$PG_STOPPED" = 1 ] && echo "stopped PostgreSQL (PID $PG_PID)"
exit 0
