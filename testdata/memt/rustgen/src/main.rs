//! rustgen: MEMT interop fixtures written and read by the original Probing
//! project's Rust crate, `probing-memtable` (crates.io, pinned in Cargo.toml).
//! Only the crate's public API is used.
//!
//! ```text
//! rustgen write <base_dir> [--hold]
//! rustgen read <file>
//! ```
//!
//! `write` creates rings at `<base_dir>/<pid>/<name>` with
//! `MemTable::shared_in` (the crate's discoverable-file constructor), fills
//! them through `MemTableWriter` (`push_row` and the streaming `row_writer`,
//! with and without dedup), then reads them back with the crate's own
//! discovery and reader (`discover::discover_in` → `MemTableView` →
//! `chunks_logical` → `rows` → `RowCursor`) and writes
//! `<base_dir>/expected.json`. It also checks that what the crate reads back
//! is exactly the tail of what was written, so the rows in `expected.json`
//! are both "what the crate's reader returns" and "what was written minus
//! what the ring overwrote".
//!
//! `shared_in` tables unlink their file on drop, so `write` leaks them on
//! purpose: the files stay on disk after the process exits, as they do when
//! an agent dies. With `--hold` it prints one JSON line (`{"ready":true,…}`)
//! on stdout once everything is written and stays alive (the writer still
//! mapped) until stdin reaches EOF.
//!
//! `read` opens one file read-only (`std::fs::read` + `MemTableView::new`,
//! which runs the crate's `validate_buf`) and prints its JSON object (the
//! same shape as one entry of `expected.json`'s `files`) on stdout. A file
//! the crate rejects prints `{"error":"…"}` and exits with status 2.
//!
//! Cells are JSON strings: integers in decimal, F32/F64 as the hex of their
//! IEEE bits (`0x%08x` / `0x%016x`), Str as the text, Bytes as lowercase hex.

use std::io::Read;
use std::path::Path;
use std::process::ExitCode;

use probing_memtable::discover::discover_in;
use probing_memtable::{DType, MemTable, MemTableView, MemTableWriter, Schema, Value};

/// The pinned crate version (Cargo.toml says `=0.2.5`).
const CRATE_VERSION: &str = "0.2.5";

#[derive(Clone)]
enum Cell {
    U8(u8),
    I32(i32),
    I64(i64),
    F32(f32),
    F64(f64),
    U64(u64),
    U32(u32),
    Str(String),
    Bytes(Vec<u8>),
}

impl Cell {
    fn value(&self) -> Value<'_> {
        match self {
            Cell::U8(v) => Value::U8(*v),
            Cell::I32(v) => Value::I32(*v),
            Cell::I64(v) => Value::I64(*v),
            Cell::F32(v) => Value::F32(*v),
            Cell::F64(v) => Value::F64(*v),
            Cell::U64(v) => Value::U64(*v),
            Cell::U32(v) => Value::U32(*v),
            Cell::Str(v) => Value::Str(v),
            Cell::Bytes(v) => Value::Bytes(v),
        }
    }

    /// The canonical text of the cell (see the module doc).
    fn render(&self) -> String {
        match self {
            Cell::U8(v) => v.to_string(),
            Cell::I32(v) => v.to_string(),
            Cell::I64(v) => v.to_string(),
            Cell::F32(v) => format!("0x{:08x}", v.to_bits()),
            Cell::F64(v) => format!("0x{:016x}", v.to_bits()),
            Cell::U64(v) => v.to_string(),
            Cell::U32(v) => v.to_string(),
            Cell::Str(v) => v.clone(),
            Cell::Bytes(v) => hex(v),
        }
    }
}

struct Spec {
    /// File name: `schema.table`, or a bare name (SQL `memtable.<name>`).
    name: &'static str,
    cols: Vec<(String, DType)>,
    chunk_size: u32,
    num_chunks: u32,
    dedup: bool,
    /// Write even rows through the streaming `row_writer()` (put_* + finish)
    /// and odd rows through `push_row`; otherwise `push_row` only.
    row_writer: bool,
    rows: Vec<Vec<Cell>>,
}

fn dtype_name(d: DType) -> &'static str {
    match d {
        DType::U8 => "U8",
        DType::I32 => "I32",
        DType::I64 => "I64",
        DType::F32 => "F32",
        DType::F64 => "F64",
        DType::U64 => "U64",
        DType::U32 => "U32",
        DType::Str => "Str",
        DType::Bytes => "Bytes",
    }
}

fn hex(b: &[u8]) -> String {
    let mut s = String::with_capacity(b.len() * 2);
    for x in b {
        s.push_str(&format!("{x:02x}"));
    }
    s
}

fn json_str(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for ch in s.chars() {
        match ch {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

// ── the tables ────────────────────────────────────────────────────────

/// Every dtype, edge values, strings that repeat inside a chunk (dedup
/// back-references, including to the empty string and to a 300-byte
/// string), an out-of-order and a negative timestamp. Dedup on; rows go
/// through both write paths. Sized not to wrap.
fn types_spec() -> Spec {
    let long = "0123456789abcdefghijklmnopqrstuvwxyz".repeat(9)[..300].to_string();
    let strs: Vec<String> = vec![
        "".into(),
        "héllo wörld".into(),
        "日本語テキスト".into(),
        "emoji 🚀🔥".into(),
        "nul\0byte".into(),
        "tab\tnl\nret\r".into(),
        "quote\"back\\slash</script>".into(),
        "repeat-A".into(),
        "repeat-A".into(),
        "".into(),
        long,
    ];
    let bytes: Vec<Vec<u8>> = vec![
        vec![],
        vec![0xff, 0xfe, 0x00],
        vec![0x00],
        vec![0x80, 0x81, 0xc3],
        b"plain ascii".to_vec(),
        vec![1, 2, 3],
        vec![1, 2, 3],
        (0..=255u8).collect(),
    ];
    let f32s = [
        0.0f32,
        -0.0,
        1.5,
        f32::from_bits(1), // smallest subnormal
        f32::MAX,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::from_bits(0x7fc0_0001), // quiet NaN with payload
        f32::from_bits(0x7f80_0001), // signalling NaN
        0.1,
        f32::MIN_POSITIVE,
        -3.25,
        f32::from_bits(0xffc0_0000), // negative quiet NaN
    ];
    let f64s = [
        0.0f64,
        -0.0,
        5e-324,
        1e300,
        9007199254740993.0,
        f64::from_bits(0x7ff8_0000_0000_0001), // quiet NaN with payload
        f64::from_bits(0x7ff0_0000_0000_0001), // signalling NaN
        f64::NEG_INFINITY,
        f64::INFINITY,
        0.1,
        -1.7976931348623157e308,
    ];
    let u64s = [
        0u64,
        u64::MAX,
        1 << 63,
        (1 << 63) + 5,
        1 << 40,
        12345678901234567890,
        i64::MAX as u64,
    ];
    let i64s = [i64::MIN, i64::MAX, -1, 0, 1 << 53, -(1 << 53) - 1];
    let i32s = [i32::MIN, i32::MAX, -1, 0, 7];
    let u32s = [u32::MAX, 0, 1 << 31, 42];
    let u8s = [0u8, 255, 128, 1];

    let mut rows = Vec::new();
    for i in 0..44usize {
        let mut ts = 1_760_000_000_000_000i64 + (i as i64) * 1000;
        if i % 7 == 3 {
            ts -= 5_500; // out of order inside its chunk
        }
        if i == 5 {
            ts = -42;
        }
        rows.push(vec![
            Cell::I64(ts),
            Cell::U8(u8s[i % u8s.len()]),
            Cell::I32(i32s[i % i32s.len()]),
            Cell::I64(i64s[i % i64s.len()]),
            Cell::F32(f32s[i % f32s.len()]),
            Cell::F64(f64s[i % f64s.len()]),
            Cell::U64(u64s[i % u64s.len()]),
            Cell::U32(u32s[i % u32s.len()]),
            Cell::Str(strs[i % strs.len()].clone()),
            Cell::Bytes(bytes[i % bytes.len()].clone()),
        ]);
    }
    Spec {
        name: "python.interop_types",
        cols: [
            ("timestamp", DType::I64),
            ("u8", DType::U8),
            ("i32", DType::I32),
            ("i64", DType::I64),
            ("f32", DType::F32),
            ("f64", DType::F64),
            ("u64", DType::U64),
            ("u32", DType::U32),
            ("s", DType::Str),
            ("b", DType::Bytes),
        ]
        .iter()
        .map(|(n, d)| (n.to_string(), *d))
        .collect(),
        chunk_size: 2048,
        num_chunks: 4,
        dedup: true,
        row_writer: true,
        rows,
    }
}

/// An NCCL-style table (ns `ts`, U64 hashes above i64::MAX), no dedup, in a
/// 4 × 256-byte ring that wraps many times.
fn nccl_wrap_spec() -> Spec {
    let funcs = [
        "AllReduce",
        "AllGather",
        "ReduceScatter",
        "Broadcast",
        "Send",
        "Recv",
    ];
    let rows = (0..120u64)
        .map(|i| {
            vec![
                Cell::I64(1_760_000_000_000_000_000 + (i as i64) * 1500),
                Cell::I32((i % 8) as i32),
                Cell::U64(0xdead_beef_cafe_f00d ^ (i / 32)),
                Cell::Str(funcs[(i % 6) as usize].to_string()),
                Cell::U64(i),
                Cell::U64((1u64 << 20) << (i % 6)),
            ]
        })
        .collect();
    Spec {
        name: "nccl.interop_wrap",
        cols: [
            ("ts", DType::I64),
            ("rank", DType::I32),
            ("comm_hash", DType::U64),
            ("coll_func", DType::Str),
            ("seq", DType::U64),
            ("trans_bytes", DType::U64),
        ]
        .iter()
        .map(|(n, d)| (n.to_string(), *d))
        .collect(),
        chunk_size: 256,
        num_chunks: 4,
        dedup: false,
        row_writer: false,
        rows,
    }
}

/// Dedup in a ring that wraps (the dedup map is reset per chunk), with the
/// timestamp in the second column.
fn dedup_wrap_spec() -> Spec {
    let names = ["forward", "backward", "optimizer.step", "数据加载"];
    let rows = (0..90i64)
        .map(|i| {
            vec![
                Cell::I64(i),
                Cell::I64(1_760_000_000_000_000 + i * 250),
                Cell::Str(names[(i % 4) as usize].to_string()),
                Cell::Str(if i % 5 == 0 {
                    "checkpoint saved".into()
                } else {
                    String::new()
                }),
                Cell::Bytes(vec![(i % 3) as u8; 4]),
            ]
        })
        .collect();
    Spec {
        name: "python.interop_dedup_wrap",
        cols: [
            ("step", DType::I64),
            ("timestamp", DType::I64),
            ("name", DType::Str),
            ("note", DType::Str),
            ("blob", DType::Bytes),
        ]
        .iter()
        .map(|(n, d)| (n.to_string(), *d))
        .collect(),
        chunk_size: 512,
        num_chunks: 3,
        dedup: true,
        row_writer: false,
        rows,
    }
}

/// No designated timestamp (`timestamp` is F64, `ts` is I32), a 60-byte
/// column name (stored truncated to 54 bytes), a non-ASCII name, and a
/// 55-byte name whose truncation to 54 bytes cuts a UTF-8 sequence in half.
fn plain_spec() -> Spec {
    let long_ascii = "c".repeat(60);
    let cut_utf8 = format!("{}é", "n".repeat(53));
    let rows = (0..6i64)
        .map(|i| {
            vec![
                Cell::F64(1.76e9 + i as f64 / 4.0),
                Cell::I32(i as i32 - 3),
                Cell::I64(i * 1_000_003),
                Cell::U8(i as u8),
                Cell::Str(format!("größe {i}")),
                Cell::U32(i as u32),
            ]
        })
        .collect();
    Spec {
        name: "interop_plain",
        cols: vec![
            ("timestamp".into(), DType::F64),
            ("ts".into(), DType::I32),
            ("id".into(), DType::I64),
            (long_ascii, DType::U8),
            ("größe_μs".into(), DType::Str),
            (cut_utf8, DType::U32),
        ],
        chunk_size: 256,
        num_chunks: 2,
        dedup: false,
        row_writer: false,
        rows,
    }
}

// ── writing ───────────────────────────────────────────────────────────

fn put_streaming(w: &mut MemTableWriter<'_>, row: &[Cell]) -> bool {
    let mut rw = w.row_writer();
    for c in row {
        match c {
            Cell::U8(v) => rw.put_u8(*v),
            Cell::I32(v) => rw.put_i32(*v),
            Cell::I64(v) => rw.put_i64(*v),
            Cell::F32(v) => rw.put_f32(*v),
            Cell::F64(v) => rw.put_f64(*v),
            Cell::U64(v) => rw.put_u64(*v),
            Cell::U32(v) => rw.put_u32(*v),
            Cell::Str(v) => rw.put_str(v),
            Cell::Bytes(v) => rw.put_bytes(v),
        };
    }
    rw.finish()
}

fn write_table(base: &Path, spec: &Spec) -> Result<MemTable, String> {
    let mut schema = Schema::new();
    for (n, d) in &spec.cols {
        schema = schema.col(n, *d);
    }
    let mut t = MemTable::shared_in(base, spec.name, &schema, spec.chunk_size, spec.num_chunks)
        .map_err(|e| format!("{}: shared_in: {e}", spec.name))?;
    {
        let mut w = MemTableWriter::new(t.as_bytes_mut())
            .map_err(|e| format!("{}: MemTableWriter::new: {e}", spec.name))?;
        if spec.dedup {
            w = w.dedup();
        }
        for (i, row) in spec.rows.iter().enumerate() {
            if spec.row_writer && i % 2 == 0 {
                // The streaming writer does not advance by itself.
                if !put_streaming(&mut w, row) {
                    w.advance_chunk();
                    if !put_streaming(&mut w, row) {
                        return Err(format!("{}: row {i} does not fit in a chunk", spec.name));
                    }
                }
            } else {
                let vals: Vec<Value<'_>> = row.iter().map(Cell::value).collect();
                w.push_row(&vals);
            }
        }
    }
    Ok(t)
}

// ── reading (the crate's reader) ──────────────────────────────────────

struct ReadOut {
    json: String,
    rows: Vec<Vec<String>>,
    chunks_recycled: u64,
}

fn u16_at(b: &[u8], off: usize) -> u16 {
    u16::from_le_bytes([b[off], b[off + 1]])
}

fn u32_at(b: &[u8], off: usize) -> u32 {
    u32::from_le_bytes(b[off..off + 4].try_into().unwrap())
}

/// Everything the crate's reader says about one ring, as a JSON object
/// left open (no closing brace) so that callers can add fields.
fn read_view(v: &MemTableView<'_>, file: &str, file_size: usize) -> ReadOut {
    let raw = v.as_bytes();
    let schema = v.schema();
    let dtypes: Vec<DType> = schema.cols.iter().map(|c| c.dtype).collect();

    let mut rows: Vec<Vec<String>> = Vec::new();
    let order = v.chunks_logical();
    for &chunk in &order {
        let it = v.rows(chunk);
        for row in it {
            let mut c = row.cursor();
            let cells = dtypes
                .iter()
                .map(|d| match d {
                    DType::U8 => c.next_u8().to_string(),
                    DType::I32 => c.next_i32().to_string(),
                    DType::I64 => c.next_i64().to_string(),
                    DType::F32 => format!("0x{:08x}", c.next_f32().to_bits()),
                    DType::F64 => format!("0x{:016x}", c.next_f64().to_bits()),
                    DType::U64 => c.next_u64().to_string(),
                    DType::U32 => c.next_u32().to_string(),
                    DType::Str => c.next_str().to_string(),
                    DType::Bytes => hex(c.next_bytes()),
                })
                .collect();
            rows.push(cells);
        }
    }

    let mut chunks = Vec::new();
    let mut recycled = 0u64;
    for i in 0..v.num_chunks() {
        let g = v.chunk_generation(i);
        recycled += g.saturating_sub(1);
        let ts = match v.chunk_ts_range(i) {
            Some((lo, hi)) => format!("[\"{lo}\",\"{hi}\"]"),
            None => "null".into(),
        };
        chunks.push(format!(
            "{{\"index\":{i},\"generation\":{g},\"state\":{},\"used\":{},\"row_count\":{},\"ts_range\":{ts}}}",
            v.chunk_state(i),
            v.chunk_used(i),
            v.num_rows(i)
        ));
    }

    let cols: Vec<String> = (0..v.num_cols())
        .map(|i| {
            let d = v.col_dtype(i).expect("validated dtype");
            format!(
                "{{\"name\":{},\"dtype\":\"{}\",\"code\":{},\"elem_size\":{}}}",
                json_str(v.col_name(i)),
                dtype_name(d),
                d as u32,
                v.col_elem_size(i)
            )
        })
        .collect();
    let rows_json: Vec<String> = rows
        .iter()
        .map(|r| {
            format!(
                "[{}]",
                r.iter().map(|c| json_str(c)).collect::<Vec<_>>().join(",")
            )
        })
        .collect();

    let flags = u32_at(raw, 12);
    let json = format!(
        concat!(
            "{{\"file\":{},\"version\":{},\"header_size\":{},\"flags\":{},\"dedup\":{},",
            "\"ts_col\":{},\"num_cols\":{},\"num_chunks\":{},\"chunk_size\":{},\"data_offset\":{},",
            "\"file_size\":{},\"write_chunk\":{},\"refcount\":{},\"creator_pid\":{},",
            "\"creator_start_time\":{},\"columns\":[{}],\"chunks\":[{}],\"logical_order\":{:?},",
            "\"rows\":[\n{}\n]"
        ),
        json_str(file),
        u16_at(raw, 4),
        u16_at(raw, 6),
        flags,
        flags & 1 != 0,
        v.ts_col().map(|i| i + 1).unwrap_or(0),
        v.num_cols(),
        v.num_chunks(),
        v.chunk_size(),
        v.data_offset(),
        file_size,
        v.write_chunk(),
        v.refcount(),
        v.creator_pid(),
        v.creator_start_time(),
        cols.join(","),
        chunks.join(","),
        order,
        rows_json.join(",\n"),
    );
    ReadOut {
        json,
        rows,
        chunks_recycled: recycled,
    }
}

fn cmd_write(base: &Path, hold: bool) -> Result<(), String> {
    std::fs::create_dir_all(base).map_err(|e| format!("{}: {e}", base.display()))?;
    let pid = std::process::id();
    let specs = vec![
        types_spec(),
        nccl_wrap_spec(),
        dedup_wrap_spec(),
        plain_spec(),
    ];
    let mut tables = Vec::new();
    for s in &specs {
        tables.push(write_table(base, s)?);
    }

    // Read back through the crate's discovery (validate_buf on each file).
    let found = discover_in(base).map_err(|e| format!("discover_in: {e}"))?;
    let mut files = Vec::new();
    for s in &specs {
        let d = found
            .iter()
            .find(|d| d.pid() == pid && d.name() == s.name)
            .ok_or_else(|| {
                format!(
                    "{}: discover_in did not find it (or it did not validate)",
                    s.name
                )
            })?;
        let view = d.view().map_err(|e| format!("{}: view: {e}", s.name))?;
        let rel = format!("{pid}/{}", s.name);
        let out = read_view(&view, &rel, d.as_bytes().len());

        // Self-check: the crate reads back exactly the newest rows written.
        let written: Vec<Vec<String>> = s
            .rows
            .iter()
            .map(|r| r.iter().map(Cell::render).collect())
            .collect();
        let n = out.rows.len();
        if n == 0 || n > written.len() || out.rows[..] != written[written.len() - n..] {
            return Err(format!(
                "{}: the crate read {n} rows that are not the last {n} of the {} written",
                s.name,
                written.len()
            ));
        }
        let cols_note = s
            .cols
            .iter()
            .map(|(name, _)| json_str(name))
            .collect::<Vec<_>>()
            .join(",");
        files.push(format!(
            "{},\"schema_written\":[{cols_note}],\"write_path\":\"{}\",\"alive_at_read\":{},\"rows_written\":{},\"rows_live\":{n},\"rows_overwritten\":{},\"chunks_recycled\":{}}}",
            out.json,
            if s.row_writer { "row_writer (even rows) + push_row (odd rows)" } else { "push_row" },
            d.is_alive(),
            written.len(),
            written.len() - n,
            out.chunks_recycled,
        ));
    }

    let doc = format!(
        concat!(
            "{{\"format\":1,\"kind\":\"probing-memtable\",\"generator\":\"testdata/memt/rustgen\",",
            "\"crate\":\"probing-memtable\",\"crate_version\":\"{}\",\"pid\":{},",
            "\"note\":\"cells are strings: ints decimal, F32/F64 hex IEEE bits, Str text, Bytes hex; rows are in the crate reader's order (chunks_logical, then row order); there are no ring counters in this format, so rows_overwritten and chunks_recycled are the generator's counts (written minus read back; sum of generation-1 over chunks)\",",
            "\"files\":[\n{}\n]}}\n"
        ),
        CRATE_VERSION,
        pid,
        files.join(",\n")
    );
    let path = base.join("expected.json");
    std::fs::write(&path, doc).map_err(|e| format!("{}: {e}", path.display()))?;

    if hold {
        println!(
            "{{\"ready\":true,\"pid\":{pid},\"dir\":{},\"files\":[{}]}}",
            json_str(&base.join(pid.to_string()).to_string_lossy()),
            specs
                .iter()
                .map(|s| json_str(s.name))
                .collect::<Vec<_>>()
                .join(",")
        );
        let mut sink = Vec::new();
        let _ = std::io::stdin().read_to_end(&mut sink);
    }
    // Keep the files: a dropped shared_in table unlinks its file.
    for t in tables {
        std::mem::forget(t);
    }
    Ok(())
}

fn cmd_read(path: &Path) -> Result<String, String> {
    let buf = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let view = MemTableView::new(&buf).map_err(|e| format!("{}: {e}", path.display()))?;
    let out = read_view(&view, &path.to_string_lossy(), buf.len());
    Ok(format!("{}}}", out.json))
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    match args.get(1).map(String::as_str) {
        Some("write") if args.len() >= 3 => {
            let hold = args[3..].iter().any(|a| a == "--hold");
            match cmd_write(Path::new(&args[2]), hold) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("rustgen write: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        Some("read") if args.len() == 3 => match cmd_read(Path::new(&args[2])) {
            Ok(j) => {
                println!("{j}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                println!("{{\"error\":{}}}", json_str(&e));
                ExitCode::from(2)
            }
        },
        _ => {
            eprintln!("usage: rustgen write <base_dir> [--hold] | rustgen read <file>");
            ExitCode::from(64)
        }
    }
}
