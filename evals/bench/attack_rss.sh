#!/usr/bin/env bash
# Peak memory and time of the issue-9 attack inputs, for two builds side by
# side in the same run (e.g. the commit before the bounds and now):
#   evals/bench/attack_rss.sh OLD_BINARY NEW_BINARY
# Each run is capped at 6 GiB of address space so that an unbounded build
# fails instead of taking the machine; "killed" marks that. Results go to
# docs/BENCHMARKS.md.
set -u
old=${1:?old binary}; new=${2:?new binary}
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
entry='{"process_group": ["0", "default_pg"], "collective_seq_id": 1, "profiling_name": "nccl:all_reduce", "input_sizes": [[4]], "output_sizes": [[4]], "input_dtypes": ["Float"], "output_dtypes": ["Float"], "state": "completed"}'
dump() { printf '{"version": "2.10", "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": "%s"}}, "pg_status": {}, "entries": [%s]}' "$1" "$2"; }
mkdir -p "$work/pgrank" "$work/namerank" "$work/pickle" "$work/empty" "$work/data"
dump "[0, 100000000]" "$entry" > "$work/pgrank/nccl_trace_rank_0"
dump "[0, 1]" "$entry" > "$work/namerank/nccl_trace_rank_100000000"
# Two memoised lists appended to alternately, 192 KB.
python3 - "$work/pickle/nccl_trace_rank_0" <<'PY'
import sys
b = b"\x80\x02]q\x00]q\x010"
while len(b) < 192 << 10:
    b += b"h\x00K\x07a0h\x01K\x07a0"
open(sys.argv[1], "wb").write(b + b".")
PY
python3 - "$work/empty/nccl_trace_rank_0" <<'PY'
import sys
n = 5000000
with open(sys.argv[1], "w") as f:
    f.write('{"version": "2.10", "pg_config": {}, "pg_status": {}, "entries": [' + ",".join(["{}"] * n) + "]}")
PY
run() { # label, binary, args...
  local label=$1 bin=$2; shift 2
  local out; out=$( (ulimit -v 6291456; /usr/bin/time -v "$bin" "$@" >/dev/null 2>"$work/err"; echo "exit $?" >>"$work/err") 2>&1; cat "$work/err")
  local rss wall code
  rss=$(grep 'Maximum resident' <<<"$out" | awk '{print $NF}')
  wall=$(grep 'Elapsed (wall' <<<"$out" | awk '{print $NF}')
  code=$(grep '^exit' <<<"$out" | tail -1 | awk '{print $2}')
  local why
  why=$(awk '/Command (being timed|exited)/{exit} NF{l=$0} END{print l}' "$work/err" | sed 's/^ *//; s/^.*: \([^:]*: [^:]*\)$/\1/' | cut -c1-110)
  [ "$code" -ge 128 ] 2>/dev/null && why="killed"
  grep -q 'out of memory' "$work/err" && why="out of memory at the 6 GiB cap"
  printf '| %s | %s | %s MB | %s | exit %s: %s |\n' "$label" "$(basename "$(dirname "$bin")")" "$((rss / 1024))" "$wall" "$code" "${why//|/\\|}"
}
echo "| input | build | peak RSS | wall | result |"
echo "|---|---|---|---|---|"
for b in "$old" "$new"; do
  run "211-byte JSON dump, pg_config ranks [0, 100000000]" "$b" analyze "$work/pgrank"
  run "file named nccl_trace_rank_100000000" "$b" analyze "$work/namerank"
  run "192 KB pickle, alternating appends" "$b" analyze "$work/pickle"
  run "5 M empty JSON entries (15 MB)" "$b" analyze "$work/empty"
  run "SQL: twelve printf('%.*c',999999999,'x')" "$b" query --data-dir "$work/data" "SELECT $(printf "length(printf('%%.*c',999999999,'x'))+%.0s" {1..11})length(printf('%.*c',999999999,'x'))"
  run "SQL: four randomblob(999999999)" "$b" query --data-dir "$work/data" "SELECT length(randomblob(999999999))+length(randomblob(999999999))+length(randomblob(999999999))+length(randomblob(999999999))"
done
