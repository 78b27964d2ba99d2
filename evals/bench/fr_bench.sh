#!/usr/bin/env bash
# Decode + analyse synthetic Flight Recorder dumps (N ranks x 2000 entries,
# tensor-parallel groups of 8, rank 11 never joins default-group collective
# #1550), side by side with torch's fr_trace on the same files.
#
#   evals/bench/fr_bench.sh [RANKS...]        default: 64 256 1024 4096
#
# Environment: PYTHON  an interpreter that can import torch (fr_trace is
#                      skipped, and said so, when it cannot)
#              STACKS  "py", "cpp" or "py cpp" (default): the stacks each
#                      entry records: 3 Python frames, or C++ stacks as
#                      TORCH_NCCL_TRACE_CPP_STACK=1 writes them (17 native
#                      frames under 7 Python ones, memoised as torch does)
#              FR_TRACE_TIMEOUT  seconds allowed to fr_trace per size (900)
#              FR_TRACE_MAX_RANKS  sizes above it skip fr_trace (4096: it
#                      held 17 GB at 4096 ranks and would not fit beyond)
#              WORK    where the dumps go (a temp dir; removed afterwards)
# Prints one markdown row per size and stack kind: wall time (probing-mcp:
# median of 3 runs; fr_trace: one run) and peak RSS of each tool, the
# speed-up, our verdict (the injected fault is MISSING_RANKS #1550, rank
# 11), and whether fr_trace names the same collective and rank.
set -euo pipefail
cd "$(dirname "$0")/../.."
sizes=("${@:-64 256 1024 4096}")
sizes=(${sizes[@]})
PYTHON=${PYTHON:-python3}
TIMEOUT=${FR_TRACE_TIMEOUT:-900}
FR_MAX=${FR_TRACE_MAX_RANKS:-4096}
stacks=(${STACKS:-py cpp})
WORK=${WORK:-$(mktemp -d)}
trap 'rm -rf "$WORK"' EXIT

go build -o bin/probing-mcp ./cmd/probing-mcp
go build -o bin/gendumps ./evals/bench/gendumps
have_torch=0
if "$PYTHON" -c 'import torch.distributed.flight_recorder.fr_trace' 2>/dev/null; then have_torch=1; fi

echo "machine: $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'); $(go version | cut -d' ' -f3)"
[ $have_torch = 1 ] && echo "fr_trace: torch $("$PYTHON" -c 'import torch; print(torch.__version__)' 2>/dev/null)" || echo "fr_trace: torch not importable by $PYTHON, skipped"
echo
echo "| ranks | stacks | dump size | probing-mcp wall | probing-mcp peak RSS | our verdict | fr_trace wall | fr_trace peak RSS | speed-up | same verdict |"
echo "|---|---|---|---|---|---|---|---|---|---|"
for n in "${sizes[@]}"; do
for st in "${stacks[@]}"; do
	dir="$WORK/fr$n$st"
	cpp=false
	[ "$st" = cpp ] && cpp=true
	./bin/gendumps -ranks "$n" -entries 2000 -tp 8 -fault missing -fault-rank 11 -fault-seq 1550 -cpp-stack=$cpp -out "$dir"
	size=$(du -sh "$dir" | cut -f1)
	sync
	cat "$dir"/* > /dev/null # warm the page cache for both tools alike
	# probing-mcp: the median of three runs (seconds matter, so noise does)
	for i in 1 2 3; do
		/usr/bin/time -f '%e %M' -o "$WORK/t_ours$i" ./bin/probing-mcp analyze "$dir" --json > "$WORK/ours.json"
	done
	read -r ours_s ours_kb < <(sort -n "$WORK"/t_ours? | sed -n 2p)
	ours=$(python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); p=r["process_groups"][0]; print(p["verdict"], p["collective_seq_id"], ",".join(map(str,p["missing_ranks"])))' "$WORK/ours.json")
	expected="MISSING_RANKS 1550 11"
	[ "$ours" = "$expected" ] && verdict="right ($ours)" || verdict="WRONG: $ours, want $expected"
	fr_s="-"; fr_kb="-"; speed="-"; same="-"
	if [ $have_torch = 1 ] && [ "$n" -gt "$FR_MAX" ]; then
		fr_s="not run (over FR_TRACE_MAX_RANKS=$FR_MAX)"
	elif [ $have_torch = 1 ]; then
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
	echo "| $n | $st | $size | ${ours_s} s | $((ours_kb / 1024)) MiB | $verdict | $fr_s | $fr_kb | $speed | $same |"
	rm -rf "$dir"
done
done
