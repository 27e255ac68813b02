#!/bin/bash
# Side-by-side run of the rows ../shared/bench/sidebyside.sh leaves out: edgereg's
# refresh and watch workloads and route reads, interleaved with the peers' route-read
# (getData) rows, same machine, same sitting; then one storm. Usage, from anywhere:
#   cmd/edgereg/bench/sidebyside-extra.sh EDGEREG_BINARY OUT_DIR [ROUNDS] [PEERS_DIR]
# The storm holds its 10,000 connections (--storm-hold) and reports the node's RSS.
# ROUNDS defaults to 3; PEERS_DIR to ../shared/bench/peers beside the repository. STORM=0 skips the storm;
# DURATION (default 10s) and WARMUP (default 3s; peers keep their 5s) shorten a smoke run.
# OUT_DIR gets every row as JSON and summary.txt: medians and per-round ratios.
# Needs the peers' prerequisites (Debian zookeeper + etcd-server, Go) and python3.
set -u
EDGEREG=$(realpath "$1"); OUT=$(realpath -m "$2"); ROUNDS=${3:-3}
PEERS=$(realpath "${4:-$(dirname "$0")/../../../../shared/bench/peers}")
mkdir -p "$OUT"
(cd "$PEERS" && go build -o "$OUT/peers" .) || exit 1
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
peer() { # system workload tag
  (cd "$work" && "$OUT/peers" -systems "$1" -workloads "$2" -duration "${DURATION:-10s}" -out "$OUT/peer-$3.json" >"$OUT/peer-$3.log" 2>&1)
  grep -E "ops/s" "$OUT/peer-$3.log" | tail -2 | sed "s/^/[$3] /"
}
edge() { # tag args...
  local tag=$1; shift
  (cd "$work" && "$EDGEREG" bench "$@" --progress off -o json >"$OUT/edge-$tag.json" 2>"$OUT/edge-$tag.err")
  python3 - "$OUT/edge-$tag.json" "$tag" <<'PY'
import json,sys
for r in json.load(open(sys.argv[1])):
    keep=("ops_per_sec","topic_routes_per_sec","p50_ms","p99_ms","last_delivery_p99_ms","errors","node_cpu_us_per_op","node_cpu_us_per_topic","redials","redial_causes","node_rss_mib","node_peak_rss_mib")
    print("[%s] edgereg %s: %s" % (sys.argv[2], r.get("workload"), {k:r[k] for k in r if k in keep}))
PY
}
run="--duration ${DURATION:-10s} --warmup ${WARMUP:-3s}"
for r in $(seq 1 "$ROUNDS"); do
  echo "== round $r"
  peer quic w1 "quic-w1-r$r"
  edge "route-long-r$r" route $run
  edge "route-spr-r$r" route --stream-per-request $run
  peer zk w1 "zk-w1-r$r"
  edge "refresh-r$r" refresh $run
  edge "watch-r$r" watch --watchers 1000 --watch-topics 1 --change-rate 20 $run
done
if [ "${STORM:-1}" != 0 ]; then
  echo "== storm"
  edge storm storm --brokers 10000 --broker-topics 100 --storm-hold
fi
python3 - "$OUT" "$ROUNDS" <<'PY' | tee "$OUT/summary.txt"
import json,os,statistics,sys
out,rounds=sys.argv[1],int(sys.argv[2])
def peer(tag,system):
    p=os.path.join(out,"peer-%s.json"%tag)
    if not os.path.exists(p): return None
    for r in json.load(open(p))["results"]:
        if r["system"]==system and r.get("ops_per_sec"): return r
def edge(tag):
    p=os.path.join(out,"edge-%s.json"%tag)
    try: return json.load(open(p))[0]
    except Exception: return None
rows=[]
for i in range(1,rounds+1):
    zk=peer("zk-w1-r%d"%i,"zookeeper"); q=peer("quic-w1-r%d"%i,"quic-limit"); ql=peer("quic-w1-r%d"%i,"quic-limit-longstream")
    rl=edge("route-long-r%d"%i); rs=edge("route-spr-r%d"%i); rf=edge("refresh-r%d"%i); w=edge("watch-r%d"%i)
    def ratio(a,b,ka="ops_per_sec",kb="ops_per_sec"):
        return a[ka]/b[kb] if a and b and a.get(ka) and b.get(kb) else float("nan")
    rows.append({
      "route long / ZK getData ops/s": ratio(rl,zk),
      "route long / bare long-stream ops/s": ratio(rl,ql),
      "route long / bare long-stream server CPU us/op": ratio(rl,ql,"node_cpu_us_per_op","server_cpu_us_per_op"),
      "route per-request / bare per-request ops/s": ratio(rs,q),
      "refresh topic-routes/s / ZK getData ops/s": ratio(rf,zk,"topic_routes_per_sec"),
      "watch p99 ms (every delivery)": w["p99_ms"] if w else float("nan"),
      "watch p99 ms (to the last watcher)": w.get("last_delivery_p99_ms",float("nan")) if w else float("nan"),
      "watch deliveries/s": w["ops_per_sec"] if w else float("nan"),
    })
for k in rows[0]:
    vals=[r[k] for r in rows]
    print("%-50s median %10.2f   rounds %s" % (k, statistics.median(vals), ", ".join("%.2f"%v for v in vals)))
s=edge("storm")
if s: print("storm: %s" % s.get("note"))
PY
