// The "memt" SQLite virtual-table module: SQL over MEMT ring files.
//
// The Go side (vtab.go) owns the read protocol (chunk order, generation
// checks, row parsing) and fills a memt_batch with one chunk's payload and
// every row's column offsets. This file serves SQLite's per-row, per-column
// callbacks from that batch in C, so a row costs no Go call at all: only a
// chunk does. go-sqlite3's Go virtual tables pay a cgo round trip per
// column per row, which measured several times slower than a native table
// (docs/BENCHMARKS.md).
#include <stdlib.h>
#include <string.h>
#include "sqlite_abi.h"
#include "memt_vtab.h"
#include "memcap.h"
#include "_cgo_export.h"

typedef struct {
	sqlite3_vtab base;
	long long src;  // Go handle of the source (rings unioned into this table)
	int ncols;      // ring columns, tags excluded
	int tscol;      // column whose range prunes chunks, -1 if none
	int pidcol;     // index of _pid
} memt_vtab;

typedef struct {
	sqlite3_vtab_cursor base;
	long long h;    // Go handle of the scan
	memt_batch b;
	int row;
	int eof;
	sqlite3_int64 rowid;
} memt_cursor;

static int vt_connect(sqlite3 *db, void *aux, int argc, const char *const *argv, sqlite3_vtab **out, char **err) {
	if (argc < 4) {
		*err = sqlite3_mprintf("memt: missing source argument");
		return SQLITE_ERROR;
	}
	long long src = atoll(argv[3]);
	int ncols = 0, tscol = -1;
	char *decl = memtGoSchema(src, &ncols, &tscol);
	if (!decl) {
		*err = sqlite3_mprintf("memt: unknown source %s", argv[3]);
		return SQLITE_ERROR;
	}
	int rc = sqlite3_declare_vtab(db, decl);
	free(decl);
	if (rc != SQLITE_OK) return rc;
	memt_vtab *v = sqlite3_malloc(sizeof(*v));
	if (!v) return SQLITE_NOMEM;
	memset(v, 0, sizeof(*v));
	v->src = src;
	v->ncols = ncols;
	v->tscol = tscol;
	v->pidcol = ncols + 6;
	*out = &v->base;
	return SQLITE_OK;
}

static int vt_disconnect(sqlite3_vtab *p) {
	sqlite3_free(p);
	return SQLITE_OK;
}

// Index plan bits, passed to xFilter as idxNum, with the constraint values
// in argv in this order: ts lower bound, ts upper bound, ts equal, pid.
enum { PLAN_LO = 1, PLAN_HI = 2, PLAN_EQ = 4, PLAN_PID = 8 };

static int vt_best_index(sqlite3_vtab *p, sqlite3_index_info *info) {
	memt_vtab *v = (memt_vtab *)p;
	int lo = -1, hi = -1, eq = -1, pid = -1;
	for (int i = 0; i < info->nConstraint; i++) {
		const struct sqlite3_index_constraint *c = &info->aConstraint[i];
		if (!c->usable) continue;
		if (c->iColumn == v->pidcol && c->op == SQLITE_INDEX_CONSTRAINT_EQ && pid < 0) pid = i;
		if (v->tscol < 0 || c->iColumn != v->tscol) continue;
		switch (c->op) {
		case SQLITE_INDEX_CONSTRAINT_EQ: if (eq < 0) eq = i; break;
		case SQLITE_INDEX_CONSTRAINT_GT:
		case SQLITE_INDEX_CONSTRAINT_GE: if (lo < 0) lo = i; break;
		case SQLITE_INDEX_CONSTRAINT_LT:
		case SQLITE_INDEX_CONSTRAINT_LE: if (hi < 0) hi = i; break;
		}
	}
	int n = 0, plan = 0;
	double cost = 1e6;
	// The constraints only prune whole chunks and files, so SQLite must
	// still check every row (omit stays 0).
	if (lo >= 0) { info->aConstraintUsage[lo].argvIndex = ++n; plan |= PLAN_LO; cost /= 4; }
	if (hi >= 0) { info->aConstraintUsage[hi].argvIndex = ++n; plan |= PLAN_HI; cost /= 4; }
	if (eq >= 0) { info->aConstraintUsage[eq].argvIndex = ++n; plan |= PLAN_EQ; cost /= 100; }
	if (pid >= 0) { info->aConstraintUsage[pid].argvIndex = ++n; plan |= PLAN_PID; cost /= 8; }
	info->idxNum = plan;
	info->estimatedCost = cost;
	info->estimatedRows = (sqlite3_int64)cost;
	return SQLITE_OK;
}

static int vt_open(sqlite3_vtab *p, sqlite3_vtab_cursor **out) {
	memt_vtab *v = (memt_vtab *)p;
	memt_cursor *c = sqlite3_malloc(sizeof(*c));
	if (!c) return SQLITE_NOMEM;
	memset(c, 0, sizeof(*c));
	c->b.ncols = v->ncols;
	c->h = memtGoOpen(v->src);
	if (!c->h) {
		sqlite3_free(c);
		return SQLITE_ERROR;
	}
	c->eof = 1;
	*out = &c->base;
	return SQLITE_OK;
}

static int vt_close(sqlite3_vtab_cursor *cur) {
	memt_cursor *c = (memt_cursor *)cur;
	memtGoClose(c->h, &c->b);
	// The chunk buffers are SQLite memory, charged to the query.
	sqlite3_free(c->b.data);
	sqlite3_free(c->b.offs);
	free(c->b.err);
	sqlite3_free(c);
	return SQLITE_OK;
}

// fetch moves to the next batch that has rows.
static int fetch(memt_cursor *c) {
	for (;;) {
		int rc = memtGoNext(c->h, &c->b);
		if (rc < 0) {
			sqlite3_vtab *v = c->base.pVtab;
			sqlite3_free(v->zErrMsg);
			v->zErrMsg = sqlite3_mprintf("%s", c->b.err ? c->b.err : "memt: scan failed");
			c->eof = 1;
			return SQLITE_ERROR;
		}
		if (rc == 0) {
			c->eof = 1;
			return SQLITE_OK;
		}
		if (c->b.nrows > 0) {
			c->row = 0;
			return SQLITE_OK;
		}
	}
}

static int bound(sqlite3_value *v, int up, long long *out) {
	switch (sqlite3_value_type(v)) {
	case SQLITE_INTEGER:
		*out = sqlite3_value_int64(v);
		return 1;
	case SQLITE_FLOAT: {
		double d = sqlite3_value_double(v);
		if (d != d || d > 9.2e18 || d < -9.2e18) return 0;
		long long i = (long long)d;
		if (up && (double)i < d) i++;
		if (!up && (double)i > d) i--;
		*out = i;
		return 1;
	}
	}
	return 0; // text, blob, NULL: no pruning, SQLite compares rows itself
}

static int vt_filter(sqlite3_vtab_cursor *cur, int plan, const char *idx, int argc, sqlite3_value **argv) {
	memt_cursor *c = (memt_cursor *)cur;
	int flags = 0, k = 0;
	long long lo = 0, hi = 0, pid = 0, x;
	if ((plan & PLAN_LO) && k < argc) { if (bound(argv[k], 0, &x)) { flags |= PLAN_LO; lo = x; } k++; }
	if ((plan & PLAN_HI) && k < argc) { if (bound(argv[k], 1, &x)) { flags |= PLAN_HI; hi = x; } k++; }
	if ((plan & PLAN_EQ) && k < argc) {
		long long a, b;
		if (bound(argv[k], 0, &a) && bound(argv[k], 1, &b)) {
			if (!(flags & PLAN_LO) || a > lo) lo = a;
			if (!(flags & PLAN_HI) || b < hi) hi = b;
			flags |= PLAN_LO | PLAN_HI;
		}
		k++;
	}
	if ((plan & PLAN_PID) && k < argc) {
		if (sqlite3_value_type(argv[k]) == SQLITE_INTEGER) { flags |= PLAN_PID; pid = sqlite3_value_int64(argv[k]); }
		k++;
	}
	memtGoFilter(c->h, flags, lo, hi, pid);
	c->eof = 0;
	c->rowid = 0;
	c->b.nrows = 0;
	return fetch(c);
}

static int vt_next(sqlite3_vtab_cursor *cur) {
	memt_cursor *c = (memt_cursor *)cur;
	c->rowid++;
	if (++c->row < c->b.nrows) return SQLITE_OK;
	return fetch(c);
}

static int vt_eof(sqlite3_vtab_cursor *cur) { return ((memt_cursor *)cur)->eof; }

static unsigned int le32(const unsigned char *p) { unsigned int v; memcpy(&v, p, 4); return v; }
static unsigned long long le64(const unsigned char *p) { unsigned long long v; memcpy(&v, p, 8); return v; }

static int vt_column(sqlite3_vtab_cursor *cur, sqlite3_context *ctx, int col) {
	memt_cursor *c = (memt_cursor *)cur;
	memt_batch *b = &c->b;
	if (col >= b->ncols) {
		const char *s = 0;
		switch (col - b->ncols) {
		case 0: s = b->tag_str[0]; break;
		case 1: s = b->tag_str[1]; break;
		case 2: sqlite3_result_int64(ctx, b->tag_int[0]); return SQLITE_OK;
		case 3: sqlite3_result_int64(ctx, b->tag_int[1]); return SQLITE_OK;
		case 4: sqlite3_result_int64(ctx, b->tag_int[2]); return SQLITE_OK;
		case 5: s = b->tag_str[2]; break;
		case 6: sqlite3_result_int64(ctx, b->tag_int[3]); return SQLITE_OK;
		default: sqlite3_result_null(ctx); return SQLITE_OK;
		}
		sqlite3_result_text(ctx, s ? s : "", -1, SQLITE_TRANSIENT);
		return SQLITE_OK;
	}
	int o = b->offs[(long long)c->row * b->ncols + col];
	if (o < 0) {
		sqlite3_result_null(ctx);
		return SQLITE_OK;
	}
	const unsigned char *p = b->data + o;
	switch (b->types[col]) {
	case 1: sqlite3_result_int64(ctx, p[0]); break;                                  // U8
	case 2: sqlite3_result_int64(ctx, (int)le32(p)); break;                          // I32
	case 3: sqlite3_result_int64(ctx, (long long)le64(p)); break;                    // I64
	case 4: { float f; memcpy(&f, p, 4); sqlite3_result_double(ctx, f); break; }     // F32
	case 5: { double d; memcpy(&d, p, 8); sqlite3_result_double(ctx, d); break; }    // F64
	case 6: {                                                                        // U64
		unsigned long long u = le64(p);
		// SQLite has no unsigned type: values past INT64_MAX become REAL
		// rather than negative integers.
		if (u > 0x7fffffffffffffffULL) sqlite3_result_double(ctx, (double)u);
		else sqlite3_result_int64(ctx, (long long)u);
		break;
	}
	case 7: sqlite3_result_int64(ctx, (long long)le32(p)); break;                    // U32
	case 8: sqlite3_result_text(ctx, (const char *)p + 4, (int)le32(p), SQLITE_TRANSIENT); break;  // Str
	case 9: sqlite3_result_blob(ctx, p + 4, (int)le32(p), SQLITE_TRANSIENT); break;  // Bytes
	default: sqlite3_result_null(ctx);
	}
	return SQLITE_OK;
}

static int vt_rowid(sqlite3_vtab_cursor *cur, sqlite3_int64 *out) {
	*out = ((memt_cursor *)cur)->rowid;
	return SQLITE_OK;
}

static const sqlite3_module memt_module = {
	1,
	vt_connect, vt_connect, vt_best_index, vt_disconnect, vt_disconnect,
	vt_open, vt_close, vt_filter, vt_next, vt_eof, vt_column, vt_rowid,
	0, 0, 0, 0, 0, 0, 0,
};

static int memt_entry(sqlite3 *db, char **err, const sqlite3_api_routines *api) {
	(void)err;
	(void)api;
	int rc = sqlite3_create_module_v2(db, "memt", &memt_module, 0, 0);
	if (rc != SQLITE_OK) return rc;
	return memq_attach(db);
}

// memt_register makes every SQLite connection opened from now on know the
// module. It returns -1 when the SQLite symbols did not resolve.
int memt_register(void) {
	if (!sqlite3_auto_extension || !sqlite3_create_module_v2 || !sqlite3_declare_vtab) return -1;
	return sqlite3_auto_extension((void (*)(void))memt_entry);
}
