#!/bin/sh
# Writes one Redis pod's redis.conf and sentinel.conf (the init container of redis-sentinel.yaml; the
# ConfigMap duet-redis-scripts holds this file). The primary is the one the other Sentinels name, or
# the first pod when none answers (the set's first start). The defaults are the StatefulSet's names;
# tests/deploy/test_sentinel.py runs this script on loopback addresses with its own.
set -eu
self="${REDIS_SELF:-$(hostname).duet-redis}"
peers="${REDIS_PEERS:-duet-redis-0.duet-redis duet-redis-1.duet-redis duet-redis-2.duet-redis}"
port="${REDIS_PORT:-6379}"
sentinel_port="${SENTINEL_PORT:-26379}"
config="${CONFIG_DIR:-/config}"
primary=""
for peer in $peers; do
  [ "$peer" = "$self" ] && continue
  primary=$(redis-cli -h "$peer" -p "$sentinel_port" --no-auth-warning sentinel get-master-addr-by-name mymaster 2>/dev/null | head -n 1) || true
  [ -n "$primary" ] && break
done
[ -n "$primary" ] || primary="${peers%% *}"
{
  [ -z "${REDIS_BIND:-}" ] || printf 'bind %s\n' "$REDIS_BIND"
  printf 'port %s\ndir %s\nappendonly yes\nmaxmemory 512mb\nmaxmemory-policy volatile-ttl\n' "$port" "${DATA_DIR:-/data}"
  printf 'requirepass "%s"\nmasterauth "%s"\n' "$REDIS_PASSWORD" "$REDIS_PASSWORD"
  printf 'replica-announce-ip %s\n' "$self"
  [ "$primary" = "$self" ] || printf 'replicaof %s %s\n' "$primary" "$port"
} > "$config/redis.conf"
{
  [ -z "${REDIS_BIND:-}" ] || printf 'bind %s\n' "$REDIS_BIND"
  printf 'port %s\ndir %s\nsentinel resolve-hostnames yes\nsentinel announce-hostnames yes\n' "$sentinel_port" "$config"
  printf 'sentinel announce-ip %s\nrequirepass "%s"\n' "$self" "$REDIS_PASSWORD"
  printf 'sentinel monitor mymaster %s %s 2\n' "$primary" "$port"
  printf 'sentinel auth-pass mymaster "%s"\n' "$REDIS_PASSWORD"
  printf 'sentinel down-after-milliseconds mymaster %s\n' "${SENTINEL_DOWN_AFTER_MS:-5000}"
  printf 'sentinel failover-timeout mymaster 60000\nsentinel parallel-syncs mymaster 1\n'
} > "$config/sentinel.conf"
