// A counting SQLite allocator: per-query memory caps.
//
// SQLite has process-wide limits only (sqlite3_hard_heap_limit64), so one
// query could take what all the others and the history store need. This
// allocator, installed with SQLITE_CONFIG_MALLOC before SQLite
// initialises, charges each allocation to the meter the calling thread has
// entered (a C thread-local). The Go side runs a query's whole
// open→run→close on one locked OS thread inside its meter, so everything
// SQLite allocates for that query (page cache of the in-memory databases,
// sorters, ephemeral tables for DISTINCT and GROUP BY, values, the
// virtual table's chunk buffers) is charged to it. Each block's header
// names its meter, so a free on any other thread credits the right one.
// Allocations outside a query (storage/history's connections) carry no
// meter and are not counted.
#include <stdlib.h>
#include <string.h>
#include "sqlite_abi.h"
#include "memcap.h"

// 16 bytes, so blocks keep malloc's 16-byte alignment (SQLite needs 8).
typedef struct {
	memq_owner *o;
	long long n;
} memq_hdr;

static __thread memq_owner *memq_cur;
static int memq_on;

#define LOAD(p) __atomic_load_n((p), __ATOMIC_RELAXED)
#define STORE(p, v) __atomic_store_n((p), (v), __ATOMIC_RELAXED)
#define ADD(p, v) __atomic_add_fetch((p), (v), __ATOMIC_RELAXED)

static int charge(memq_owner *o, long long n) {
	if (LOAD(&o->stopped)) return 0;
	long long u = ADD(&o->used, n);
	if (u > o->cap) {
		ADD(&o->used, -n);
		if (!__atomic_exchange_n(&o->exceeded, 1, __ATOMIC_RELAXED)) STORE(&o->refused, n);
		return 0;
	}
	long long p = LOAD(&o->peak);
	while (u > p && !__atomic_compare_exchange_n(&o->peak, &p, u, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
	}
	return 1;
}

static void unref(memq_owner *o) {
	if (__atomic_sub_fetch(&o->refs, 1, __ATOMIC_ACQ_REL) == 0) free(o);
}

static void *xMalloc(int n) {
	memq_owner *o = memq_cur;
	if (o && !charge(o, n)) return 0;
	memq_hdr *h = malloc(sizeof(*h) + (size_t)n);
	if (!h) {
		if (o) ADD(&o->used, -(long long)n);
		return 0;
	}
	if (o) __atomic_add_fetch(&o->refs, 1, __ATOMIC_RELAXED);
	h->o = o;
	h->n = n;
	return h + 1;
}

static void xFree(void *p) {
	if (!p) return;
	memq_hdr *h = (memq_hdr *)p - 1;
	memq_owner *o = h->o;
	long long n = h->n;
	free(h);
	if (o) {
		ADD(&o->used, -n);
		unref(o);
	}
}

// A block stays charged to the meter it was allocated under, whichever
// thread grows it.
static void *xRealloc(void *p, int n) {
	memq_hdr *h = (memq_hdr *)p - 1;
	memq_owner *o = h->o;
	long long old = h->n, grow = (long long)n - old;
	if (o && grow > 0 && !charge(o, grow)) return 0;
	memq_hdr *nh = realloc(h, sizeof(*nh) + (size_t)n);
	if (!nh) {
		if (o && grow > 0) ADD(&o->used, -grow);
		return 0;
	}
	if (o && grow < 0) ADD(&o->used, grow);
	nh->n = n;
	return nh + 1;
}

static int xSize(void *p) { return p ? (int)((memq_hdr *)p - 1)->n : 0; }
static int xRoundup(int n) { return (n + 7) & ~7; }
static int xInit(void *unused) { (void)unused; return SQLITE_OK; }
static void xShutdown(void *unused) { (void)unused; }

static sqlite3_mem_methods memq_methods = {xMalloc, xFree, xRealloc, xSize, xRoundup, xInit, xShutdown, 0};

int memq_install(void) {
	if (!sqlite3_config || !sqlite3_initialize) return -1;
	int rc = sqlite3_config(SQLITE_CONFIG_MALLOC, &memq_methods);
	if (rc != SQLITE_OK) return rc;
	memq_on = 1;
	// Initialise now, outside any query, so SQLite's global state is not
	// charged to the first query that happens to open a connection.
	return sqlite3_initialize();
}

int memq_installed(void) { return memq_on; }

memq_owner *memq_new(long long cap) {
	memq_owner *o = calloc(1, sizeof(*o));
	if (!o) return 0;
	o->cap = cap;
	o->refs = 1;
	return o;
}

void memq_enter(memq_owner *o) { memq_cur = o; }
void memq_leave(void) { memq_cur = 0; }
memq_owner *memq_current(void) { return memq_cur; }
int memq_exceeded(memq_owner *o) { return LOAD(&o->exceeded); }
long long memq_peak(memq_owner *o) { return LOAD(&o->peak); }
long long memq_used(memq_owner *o) { return LOAD(&o->used); }
int memq_charge(memq_owner *o, long long n) { return charge(o, n); }
void memq_uncharge(memq_owner *o, long long n) { ADD(&o->used, -n); }
int memq_is_stopped(void) { return memq_cur && LOAD(&memq_cur->stopped); }

void memq_stop(memq_owner *o) {
	STORE(&o->stopped, 1);
	sqlite3 *db = __atomic_load_n(&o->db, __ATOMIC_ACQUIRE);
	if (db) sqlite3_interrupt(db);
}

void memq_release(memq_owner *o) {
	__atomic_store_n(&o->db, (sqlite3 *)0, __ATOMIC_RELEASE);
	unref(o);
}

int memq_attach(sqlite3 *db) {
	memq_owner *o = memq_cur;
	if (!o) return SQLITE_OK;
	__atomic_store_n(&o->db, db, __ATOMIC_RELEASE);
	return memq_register_functions(db);
}

void *memq_realloc(void *p, long long n) { return sqlite3_realloc64(p, (sqlite3_uint64)n); }
void memq_free(void *p) { sqlite3_free(p); }

long long memq_used_total(void) { return sqlite3_memory_used ? sqlite3_memory_used() : 0; }

long long memq_hard_limit(long long n) {
	if (!sqlite3_hard_heap_limit64) return 0;
	sqlite3_hard_heap_limit64(n);
	return sqlite3_hard_heap_limit64(-1);
}
