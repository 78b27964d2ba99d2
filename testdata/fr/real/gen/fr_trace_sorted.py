#!/usr/bin/env python3
"""Run torch's fr_trace CLI, but with trace files visited in ascending rank order.

fr_trace's loader takes files in os.walk() order, i.e. the order the file system
lists the directory (hash order on ext4, so it differs between machines), and that
order decides which rank is the "first rank" every comparison starts from, hence
which ranks it names as culprits.  This wrapper only sorts the listing (by the
numeric suffix of the file name) and then calls the unmodified
torch.distributed.flight_recorder.fr_trace.main with the given arguments.

    python fr_trace_sorted.py <trace_dir> [fr_trace options...]
"""

import os
import re
import sys

_real_walk = os.walk


def _rank_key(name):
    m = re.search(r"(\d+)$", name)
    return (name[: m.start()] if m else name, int(m.group(1)) if m else -1, name)


def _sorted_walk(top, *args, **kwargs):
    for root, dirs, files in _real_walk(top, *args, **kwargs):
        dirs.sort()
        files.sort(key=_rank_key)
        yield root, dirs, files


os.walk = _sorted_walk

from torch.distributed.flight_recorder.fr_trace import main  # noqa: E402

if __name__ == "__main__":
    main(sys.argv[1:])
