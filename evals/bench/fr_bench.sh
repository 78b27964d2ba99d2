#!/usr/bin/env bash
# Decode + analyse synthetic Flight Recorder dumps (N ranks x 2000 entries,
# tensor-parallel groups of 8, rank 11 never joins default-group collective
# #1550), side by side with torch's fr_trace on the same files.
#
#   evals/bench/fr_bench.sh [RANKS...]        default: 64 256 1024 4096
#
# Environment: PYTHON  an interpreter that can import torch (fr_trace is
#                      skipped, and said so, when it cannot)
#              FR_TRACE_TIMEOUT  seconds allowed to fr_trace per size (900)
#              WORK    where the dumps go (a temp dir; removed afterwards)
# Prints one markdown row per size: wall time (probing-mcp: median of 3
# runs; fr_trace: one run) and peak RSS of each tool,
# the speed-up, and whether both name the same collective and rank.
set -euo pipefail
cd "$(dirname "$0")/../.."
sizes=("${@:-64 256 1024 4096}")
sizes=(${sizes[@]})
PYTHON=${PYTHON:-python3}
TIMEOUT=${FR_TRACE_TIMEOUT:-900}
WORK=${WORK:-$(mktemp -d)}
trap 'rm -rf "$WORK"' EXIT

go build -o bin/probing-mcp ./cmd/probing-mcp
go build -o bin/gendumps ./evals/bench/gendumps
have_torch=0
if "$PYTHON" -c 'import torch.distributed.flight_recorder.fr_trace' 2>/dev/null; then have_torch=1; fi

echo "machine: $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'); $(go version | cut -d' ' -f3)"
[ $have_torch = 1 ] && echo "fr_trace: torch $("$PYTHON" -c 'import torch; print(torch.__version__)' 2>/dev/null)" || echo "fr_trace: torch not importable by $PYTHON, skipped"
echo
echo "| ranks | dump size | probing-mcp wall | probing-mcp peak RSS | fr_trace wall | fr_trace peak RSS | speed-up | same verdict |"
echo "|---|---|---|---|---|---|---|---|"
for n in "${sizes[@]}"; do
	dir="$WORK/fr$n"
	./bin/gendumps -ranks "$n" -entries 2000 -tp 8 -fault missing -fault-rank 11 -fault-seq 1550 -out "$dir"
	size=$(du -sh "$dir" | cut -f1)
	sync
	cat "$dir"/* > /dev/null # warm the page cache for both tools alike
	# probing-mcp: the median of three runs (seconds matter, so noise does)
	for i in 1 2 3; do
		/usr/bin/time -f '%e %M' -o "$WORK/t_ours$i" ./bin/probing-mcp analyze "$dir" --json > "$WORK/ours.json"
	done
	read -r ours_s ours_kb < <(sort -n "$WORK"/t_ours? | sed -n 2p)
	ours=$(python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); p=r["process_groups"][0]; print(p["verdict"], p["collective_seq_id"], ",".join(map(str,p["missing_ranks"])))' "$WORK/ours.json")
	fr_s="-"; fr_kb="-"; speed="-"; same="-"
	if [ $have_torch = 1 ]; then
		if timeout "$TIMEOUT" /usr/bin/time -f '%e %M' -o "$WORK/t_fr" "$PYTHON" -m torch.distributed.flight_recorder.fr_trace -p nccl_trace_rank_ "$dir" > "$WORK/fr.txt" 2>&1; then
			read -r fr_s fr_kb < "$WORK/t_fr"
			theirs=$(python3 - "$WORK/fr.txt" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
m = re.search(r"Not all ranks joining collective, sequence number: (\d+).*?missing ranks: \{([\d, ]*)\}", text, re.S)
print(f"MISSING_RANKS {m.group(1)} {m.group(2).replace(' ', '')}" if m else "none")
PY
)
			speed=$(python3 -c "print(f'{$fr_s/max($ours_s,0.01):.0f}x')")
			[ "$theirs" = "$ours" ] && same="yes ($ours)" || same="NO: ours $ours, fr_trace $theirs"
			fr_s="${fr_s} s"; fr_kb="$((fr_kb / 1024)) MiB"
		else
			fr_s="> ${TIMEOUT} s (stopped)"
		fi
	fi
	echo "| $n | $size | ${ours_s} s | $((ours_kb / 1024)) MiB | $fr_s | $fr_kb | $speed | $same |"
	rm -rf "$dir"
done
