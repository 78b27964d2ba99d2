"""The schemas of the agent's ring tables, and their ring sizes.

Every table is a MEMT v5 ring named ``python.<table>`` (tables.py writes
them) with a leading ``timestamp`` I64 column (µs since the epoch) as
Probing's Python ``@table`` rings have: the time the row was recorded (for
comm_collective, when the call was entered; for queued rows not the later
moment the flusher wrote them).

Tables with a fixed schema (contract §3.2; ``group_seq`` is our extension):

  python.comm_collective        collectives.py (torch.distributed wrappers)
  python.torch_step_timing      steptiming.py  (optimizer step hooks)
  python.trace_event            spans.py       (span / event API)
  python.torch_nccl_flight_record, python.torch_nccl_pg_status   fr.py

Any other table gets its dtypes from its first row (contract §4.9,
tables.infer_schema).

Ring sizes: torch_step_timing 2 MiB (Probing's explicit size); the others
PROBING_TABLE_DEFAULT_MB MiB when that variable is set, else the modest
defaults in DEFAULT_CAPACITY below (Probing's own default of 20 MiB a table
is used for tables we do not know). 8 chunks each. tmpfs pages are only
allocated as rows are written, so an unused ring costs a few KiB.

Declarations only: it imports the dtype codes (memtfmt.py) and nothing else.
"""

from .memtfmt import F64, I64, STR

# (name, dtype, default used when a dict row lacks the column)

_STEP = [("micro_step", I64, 0), ("local_step", I64, 0), ("global_step", I64, 0), ("micro_batches", I64, 1)]
_WHO = [("rank", I64, -1), ("world_size", I64, -1)]

SCHEMAS = {
    "comm_collective": [("timestamp", I64, 0)] + _STEP + _WHO + [
        ("role", STR, ""), ("op", STR, ""), ("group_rank", I64, 0), ("group_size", I64, 0),
        ("participate_ranks", STR, ""), ("tensor_shape", STR, ""), ("tensor_dtype", STR, ""),
        ("bytes", I64, 0), ("duration_ms", F64, -1.0), ("async_op", I64, 0),
        # extensions: per-process-group count of wrapped calls, 1-based
        # (per direction and peer for point-to-point calls), and the peer's
        # global rank of a point-to-point call (-1 otherwise)
        ("group_seq", I64, 0), ("peer", I64, -1),
    ],
    "torch_step_timing": [("timestamp", I64, 0)] + _STEP + _WHO + [
        ("role", STR, ""), ("step_duration_sec", F64, -1.0), ("is_shadow", I64, 0), ("sampled", I64, 1),
        ("shadow_normal", I64, 0), ("shadow_baseline", I64, 0), ("sample_rate", F64, 1.0),
        ("sample_mode", STR, ""),
    ],
    "trace_event": [
        ("timestamp", I64, 0), ("record_type", STR, ""), ("trace_id", I64, 0), ("span_id", I64, 0),
        ("name", STR, ""), ("time", I64, 0), ("thread_id", I64, 0), ("parent_id", I64, -1),
        ("phase", STR, ""), ("location", STR, ""), ("attributes", STR, ""), ("event_attributes", STR, ""),
    ],
    "torch_nccl_flight_record": [
        ("timestamp", I64, 0), ("snapshot_id", I64, 0), ("rank", I64, -1), ("world_size", I64, -1),
        ("record_id", I64, -1), ("pg_id", STR, ""), ("pg_name", STR, ""), ("pg_desc", STR, ""),
        ("collective_seq_id", I64, -1), ("p2p_seq_id", I64, -1), ("op_id", I64, -1),
        ("profiling_name", STR, ""), ("state", STR, ""), ("input_sizes", STR, ""), ("input_dtypes", STR, ""),
        ("output_sizes", STR, ""), ("output_dtypes", STR, ""), ("time_created_ns", I64, -1),
        ("time_discovered_started_ns", I64, -1), ("time_discovered_completed_ns", I64, -1),
        ("duration_ns", I64, -1), ("timeout_ms", I64, -1), ("retired", I64, 0), ("is_p2p", I64, 0),
        ("frames", STR, ""), ("top_frame", STR, ""),
    ],
    "torch_nccl_pg_status": [
        ("timestamp", I64, 0), ("snapshot_id", I64, 0), ("rank", I64, -1), ("world_size", I64, -1),
        ("pg_id", STR, ""), ("pg_name", STR, ""), ("pg_desc", STR, ""), ("ranks", STR, ""),
        ("last_enqueued_collective", I64, -1), ("last_started_collective", I64, -1),
        ("last_completed_collective", I64, -1),
    ],
}

# Ring capacity (bytes) when PROBING_TABLE_DEFAULT_MB is not set.
DEFAULT_CAPACITY = {
    "comm_collective": 8 << 20,          # ~60k rows of ~140 bytes
    "trace_event": 4 << 20,
    "torch_nccl_flight_record": 8 << 20,  # a 2000-entry snapshot with stacks is 2-4 MiB
    "torch_nccl_pg_status": 1 << 20,
}
