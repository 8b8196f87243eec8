#!/usr/bin/env bash
# Measures the reference kube-apiserver v1.36 + etcd the way BenchmarkStartup measures kplane:
# time from starting both processes (on an existing etcd data dir) to /readyz 200, and their
# resident memory after one idle second. Needs ../shared/reference/build.sh to have run.
# Usage: bench/reference-startup.sh [runs]
set -eu
REF=${REF_DIR:-/tmp/k8s-reference}
RUN=$(mktemp -d /tmp/kplane-ref-startup.XXXX)
RUNS=${1:-5}
EP=23890 AP=26543
openssl genrsa -out "$RUN/sa.key" 2048 2>/dev/null
openssl rsa -in "$RUN/sa.key" -pubout -out "$RUN/sa.pub" 2>/dev/null
echo "reftoken,admin,admin,system:masters" > "$RUN/tokens.csv"

start() {
  "$REF/bin/etcd" --data-dir "$RUN/etcd" --listen-client-urls http://127.0.0.1:$EP --advertise-client-urls http://127.0.0.1:$EP \
    --listen-peer-urls http://127.0.0.1:$((EP+1)) --initial-advertise-peer-urls http://127.0.0.1:$((EP+1)) \
    --initial-cluster default=http://127.0.0.1:$((EP+1)) --log-level error > "$RUN/etcd.log" 2>&1 &
  ETCD=$!
  "$REF/bin/kube-apiserver" --etcd-servers=http://127.0.0.1:$EP --bind-address=127.0.0.1 --advertise-address=127.0.0.1 \
    --secure-port=$AP --cert-dir="$RUN/certs" --token-auth-file="$RUN/tokens.csv" --authorization-mode=AlwaysAllow \
    --service-account-issuer=https://kubernetes.default.svc --service-account-key-file="$RUN/sa.pub" \
    --service-account-signing-key-file="$RUN/sa.key" --service-cluster-ip-range=10.96.0.0/16 \
    --enable-priority-and-fairness=false --disable-admission-plugins=ServiceAccount --v=0 > "$RUN/apiserver.log" 2>&1 &
  API=$!
}
# kube-apiserver drains for a long time on SIGTERM; the measurement only needs it gone.
gone() { while kill -0 "$1" 2>/dev/null && ! grep -q '^State:.*Z' /proc/$1/status 2>/dev/null; do sleep 0.05; done; }
stop() { { kill -9 $API; } 2>/dev/null; gone $API; kill $ETCD 2>/dev/null; gone $ETCD; }
rss() { awk '/VmRSS/ {print $2}' /proc/$1/status; }
ready() { curl -sk -H "Authorization: Bearer reftoken" "https://127.0.0.1:$AP/readyz" 2>/dev/null | grep -qx ok; }

start   # first start creates the data dir and bootstraps
until ready; do sleep 0.1; done
stop
for i in $(seq 1 "$RUNS"); do
  t0=$(date +%s%N)
  start
  until ready; do sleep 0.01; done
  t1=$(date +%s%N)
  sleep 1
  echo "run $i: ready after $(( (t1 - t0) / 1000000 )) ms; RSS kube-apiserver $(( $(rss $API) / 1024 )) MB + etcd $(( $(rss $ETCD) / 1024 )) MB"
  stop
done
rm -rf "$RUN"
