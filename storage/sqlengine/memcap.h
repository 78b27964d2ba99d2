// Per-query accounting of SQLite's memory (memcap.c), shared with the Go
// side (memcap.go) and the bounded functions (boundfn.c).
#ifndef PROBING_MEMCAP_H
#define PROBING_MEMCAP_H

typedef struct sqlite3 sqlite3;

// One query's meter. Every SQLite allocation made on a thread that has
// entered it is charged to it, and credited back when freed, on whatever
// thread that happens.
typedef struct memq_owner {
	long long used;     // bytes charged now
	long long peak;     // most bytes charged at once
	long long cap;      // an allocation past this fails (SQLITE_NOMEM)
	long long refused;  // size of the first allocation the cap refused
	int refs;           // 1 for the query, plus one per live allocation
	int exceeded;       // the cap refused an allocation
	int stopped;        // the query's deadline passed: refuse everything
	sqlite3 *db;        // the query's connection, for sqlite3_interrupt
} memq_owner;

// memq_install makes SQLite allocate through the meters and initialises
// SQLite. It must run before SQLite initialises; it returns SQLite's
// code (SQLITE_MISUSE when SQLite was already initialised).
int memq_install(void);
int memq_installed(void);

memq_owner *memq_new(long long cap);
void memq_enter(memq_owner *o); // this thread's allocations count against o
void memq_leave(void);
// memq_stop: the deadline passed. Further allocations of the query fail
// and its connection is interrupted, so straight-line VM code (which
// SQLite checks for interrupts only at loop ends) stops at its next
// allocation instead of running to the end.
void memq_stop(memq_owner *o);
// memq_release: the query is done; o is freed with its last allocation.
void memq_release(memq_owner *o);
memq_owner *memq_current(void);
int memq_exceeded(memq_owner *o);
// memq_charge counts n bytes held outside SQLite for the query (the
// coordinator's Go copy of the nodes' rows) against its cap: 0 when the
// cap (or the deadline) refuses them. memq_uncharge gives them back.
int memq_charge(memq_owner *o, long long n);
void memq_uncharge(memq_owner *o, long long n);
long long memq_peak(memq_owner *o);
long long memq_used(memq_owner *o);
int memq_is_stopped(void);

// memq_attach is called for every new connection (from the memt auto
// extension): one opened inside a query gets the bounded functions and is
// remembered for memq_stop. Other connections are left as they are.
int memq_attach(sqlite3 *db);

// Counted buffers for the virtual table (sqlite3_realloc64/sqlite3_free).
void *memq_realloc(void *p, long long n);
void memq_free(void *p);

long long memq_used_total(void);
// memq_hard_limit sets SQLite's hard heap limit (n >= 0) and returns it.
long long memq_hard_limit(long long n);

// boundfn.c
int memq_register_functions(sqlite3 *db);

#endif
