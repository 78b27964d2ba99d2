// The slice of SQLite's C interface that the memt virtual-table module
// uses, declared from the documented, stable ABI
// (https://sqlite.org/c3ref/module.html and friends).
//
// Why not #include <sqlite3.h>: the SQLite we link is the amalgamation
// compiled inside github.com/mattn/go-sqlite3, whose header lives in the
// module cache, and a system header (libsqlite3-dev) may be absent or of
// another version. The functions are declared weak so that cgo's
// per-package link check passes; in the final binary they resolve to
// go-sqlite3's copy. memt_available() reports whether they did.
#ifndef PROBING_SQLITE_ABI_H
#define PROBING_SQLITE_ABI_H

typedef struct sqlite3 sqlite3;
typedef struct sqlite3_context sqlite3_context;
typedef struct sqlite3_value sqlite3_value;
typedef long long sqlite3_int64;
typedef unsigned long long sqlite3_uint64;
typedef struct sqlite3_vtab sqlite3_vtab;
typedef struct sqlite3_vtab_cursor sqlite3_vtab_cursor;
typedef struct sqlite3_index_info sqlite3_index_info;
typedef struct sqlite3_module sqlite3_module;
typedef struct sqlite3_api_routines sqlite3_api_routines;

struct sqlite3_module {
	int iVersion;
	int (*xCreate)(sqlite3 *, void *, int, const char *const *, sqlite3_vtab **, char **);
	int (*xConnect)(sqlite3 *, void *, int, const char *const *, sqlite3_vtab **, char **);
	int (*xBestIndex)(sqlite3_vtab *, sqlite3_index_info *);
	int (*xDisconnect)(sqlite3_vtab *);
	int (*xDestroy)(sqlite3_vtab *);
	int (*xOpen)(sqlite3_vtab *, sqlite3_vtab_cursor **);
	int (*xClose)(sqlite3_vtab_cursor *);
	int (*xFilter)(sqlite3_vtab_cursor *, int, const char *, int, sqlite3_value **);
	int (*xNext)(sqlite3_vtab_cursor *);
	int (*xEof)(sqlite3_vtab_cursor *);
	int (*xColumn)(sqlite3_vtab_cursor *, sqlite3_context *, int);
	int (*xRowid)(sqlite3_vtab_cursor *, sqlite3_int64 *);
	int (*xUpdate)(sqlite3_vtab *, int, sqlite3_value **, sqlite3_int64 *);
	int (*xBegin)(sqlite3_vtab *);
	int (*xSync)(sqlite3_vtab *);
	int (*xCommit)(sqlite3_vtab *);
	int (*xRollback)(sqlite3_vtab *);
	int (*xFindFunction)(sqlite3_vtab *, int, const char *, void (**)(sqlite3_context *, int, sqlite3_value **), void **);
	int (*xRename)(sqlite3_vtab *, const char *);
};

struct sqlite3_vtab {
	const sqlite3_module *pModule;
	int nRef;
	char *zErrMsg;
};

struct sqlite3_vtab_cursor {
	sqlite3_vtab *pVtab;
};

struct sqlite3_index_constraint {
	int iColumn;
	unsigned char op;
	unsigned char usable;
	int iTermOffset;
};

struct sqlite3_index_orderby {
	int iColumn;
	unsigned char desc;
};

struct sqlite3_index_constraint_usage {
	int argvIndex;
	unsigned char omit;
};

struct sqlite3_index_info {
	int nConstraint;
	struct sqlite3_index_constraint *aConstraint;
	int nOrderBy;
	struct sqlite3_index_orderby *aOrderBy;
	struct sqlite3_index_constraint_usage *aConstraintUsage;
	int idxNum;
	char *idxStr;
	int needToFreeIdxStr;
	int orderByConsumed;
	double estimatedCost;
	sqlite3_int64 estimatedRows;
	int idxFlags;
	sqlite3_uint64 colUsed;
};

typedef struct sqlite3_mem_methods {
	void *(*xMalloc)(int);
	void (*xFree)(void *);
	void *(*xRealloc)(void *, int);
	int (*xSize)(void *);
	int (*xRoundup)(int);
	int (*xInit)(void *);
	void (*xShutdown)(void *);
	void *pAppData;
} sqlite3_mem_methods;

#define SQLITE_OK 0
#define SQLITE_ERROR 1
#define SQLITE_NOMEM 7
#define SQLITE_INTERRUPT 9
#define SQLITE_TOOBIG 18
#define SQLITE_INTEGER 1
#define SQLITE_FLOAT 2
#define SQLITE_TEXT 3
#define SQLITE_BLOB 4
#define SQLITE_NULL 5
#define SQLITE_UTF8 1
#define SQLITE_DETERMINISTIC 0x000000800
#define SQLITE_INNOCUOUS 0x000200000
#define SQLITE_CONFIG_MALLOC 4
#define SQLITE_LIMIT_LENGTH 0
#define SQLITE_LIMIT_LIKE_PATTERN_LENGTH 8
#define SQLITE_INDEX_CONSTRAINT_EQ 2
#define SQLITE_INDEX_CONSTRAINT_GT 4
#define SQLITE_INDEX_CONSTRAINT_LE 8
#define SQLITE_INDEX_CONSTRAINT_LT 16
#define SQLITE_INDEX_CONSTRAINT_GE 32
#define SQLITE_TRANSIENT ((void (*)(void *))-1)

#define WEAK __attribute__((weak))
extern int sqlite3_auto_extension(void (*)(void)) WEAK;
extern int sqlite3_create_module_v2(sqlite3 *, const char *, const sqlite3_module *, void *, void (*)(void *)) WEAK;
extern int sqlite3_declare_vtab(sqlite3 *, const char *) WEAK;
extern void *sqlite3_malloc(int) WEAK;
extern void sqlite3_free(void *) WEAK;
extern char *sqlite3_mprintf(const char *, ...) WEAK;
extern void sqlite3_result_null(sqlite3_context *) WEAK;
extern void sqlite3_result_int64(sqlite3_context *, sqlite3_int64) WEAK;
extern void sqlite3_result_double(sqlite3_context *, double) WEAK;
extern void sqlite3_result_text(sqlite3_context *, const char *, int, void (*)(void *)) WEAK;
extern void sqlite3_result_blob(sqlite3_context *, const void *, int, void (*)(void *)) WEAK;
extern int sqlite3_value_type(sqlite3_value *) WEAK;
extern sqlite3_int64 sqlite3_value_int64(sqlite3_value *) WEAK;
extern double sqlite3_value_double(sqlite3_value *) WEAK;

// The allocator (memcap.c) and the bounded functions (boundfn.c).
extern int sqlite3_config(int, ...) WEAK;
extern int sqlite3_initialize(void) WEAK;
extern void *sqlite3_malloc64(sqlite3_uint64) WEAK;
extern void *sqlite3_realloc64(void *, sqlite3_uint64) WEAK;
extern sqlite3_int64 sqlite3_memory_used(void) WEAK;
extern sqlite3_int64 sqlite3_hard_heap_limit64(sqlite3_int64) WEAK;
extern void sqlite3_interrupt(sqlite3 *) WEAK;
extern int sqlite3_is_interrupted(sqlite3 *) WEAK;
extern int sqlite3_limit(sqlite3 *, int, int) WEAK;
extern int sqlite3_create_function_v2(sqlite3 *, const char *, int, int, void *,
	void (*)(sqlite3_context *, int, sqlite3_value **), void (*)(sqlite3_context *, int, sqlite3_value **),
	void (*)(sqlite3_context *), void (*)(void *)) WEAK;
extern sqlite3 *sqlite3_context_db_handle(sqlite3_context *) WEAK;
extern void *sqlite3_user_data(sqlite3_context *) WEAK;
extern const unsigned char *sqlite3_value_text(sqlite3_value *) WEAK;
extern const void *sqlite3_value_blob(sqlite3_value *) WEAK;
extern int sqlite3_value_bytes(sqlite3_value *) WEAK;
extern sqlite3_value *sqlite3_value_dup(const sqlite3_value *) WEAK;
extern void sqlite3_value_free(sqlite3_value *) WEAK;
extern void sqlite3_result_int(sqlite3_context *, int) WEAK;
extern void sqlite3_result_error(sqlite3_context *, const char *, int) WEAK;
extern void sqlite3_result_error_code(sqlite3_context *, int) WEAK;
extern void sqlite3_result_error_nomem(sqlite3_context *) WEAK;
extern void sqlite3_result_error_toobig(sqlite3_context *) WEAK;
extern char *sqlite3_snprintf(int, char *, const char *, ...) WEAK;
extern int sqlite3_strlike(const char *, const char *, unsigned int) WEAK;
extern int sqlite3_strglob(const char *, const char *) WEAK;

#endif
