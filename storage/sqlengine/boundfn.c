// Bounded versions of the SQLite built-ins whose work grows faster than
// their arguments, registered on the engine's query connections only.
//
// SQLite checks for an interrupt at the end of VM loops, not inside a
// function, nor between the function calls of one straight-line row
// expression. The value-length limit bounds what one linear function
// does; these functions were not linear:
//   replace(X,Y,Z), instr(X,Y)  compared Y at every byte of X: |X|·|Y|
//   trim/ltrim/rtrim(X,Y)       compared every character of Y at every
//                               character trimmed: |X|·|Y|
//   like/glob                   |X|·|pattern|, bounded by
//                               SQLITE_LIMIT_LIKE_PATTERN_LENGTH
// (measured on SQLite: trim of 256 KiB took 91 s, replace of 1 MiB 6.5 s,
// as one VM step). replace and instr here search with memmem, linear;
// trim takes at most MEMQ_TRIM_SET bytes of characters to trim; like and
// glob keep SQLite's matcher (sqlite3_strlike, sqlite3_strglob). Each
// also checks for an interrupt before it starts, so a row of many such
// calls stops at the deadline. Results are SQLite's, byte for byte
// (FuzzBoundedFunctions compares them with the built-ins).
#define _GNU_SOURCE
#include <stdint.h>
#include <string.h>
#include "sqlite_abi.h"
#include "memcap.h"

// MEMQ_TRIM_SET bounds trim's character set: real ones are a few
// characters (" \t\n", "[]", "\"").
#define MEMQ_TRIM_SET 256

static int interrupted(sqlite3_context *ctx) {
	if (memq_is_stopped() || (sqlite3_is_interrupted && sqlite3_is_interrupted(sqlite3_context_db_handle(ctx)))) {
		sqlite3_result_error_code(ctx, SQLITE_INTERRUPT);
		return 1;
	}
	return 0;
}

static void too_big(sqlite3_context *ctx, const char *msg) {
	sqlite3_result_error(ctx, msg, -1);
	sqlite3_result_error_code(ctx, SQLITE_TOOBIG);
}

static void fn_replace(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
	(void)argc;
	if (interrupted(ctx)) return;
	const unsigned char *zStr = sqlite3_value_text(argv[0]);
	if (!zStr) return;
	int nStr = sqlite3_value_bytes(argv[0]);
	const unsigned char *zPattern = sqlite3_value_text(argv[1]);
	if (!zPattern) return;
	if (zPattern[0] == 0) {
		sqlite3_result_text(ctx, (const char *)zStr, nStr, SQLITE_TRANSIENT);
		return;
	}
	int nPattern = sqlite3_value_bytes(argv[1]);
	const unsigned char *zRep = sqlite3_value_text(argv[2]);
	if (!zRep) return;
	int nRep = sqlite3_value_bytes(argv[2]);
	// Leftmost, non-overlapping matches, as SQLite's scan finds them.
	long long count = 0;
	for (long long i = 0; i + nPattern <= nStr;) {
		const unsigned char *m = memmem(zStr + i, (size_t)(nStr - i), zPattern, (size_t)nPattern);
		if (!m) break;
		count++;
		i = (m - zStr) + nPattern;
	}
	long long nOut = (long long)nStr + count * ((long long)nRep - nPattern);
	if (nOut > sqlite3_limit(sqlite3_context_db_handle(ctx), SQLITE_LIMIT_LENGTH, -1)) {
		sqlite3_result_error_toobig(ctx);
		return;
	}
	unsigned char *zOut = sqlite3_malloc64((sqlite3_uint64)nOut + 1);
	if (!zOut) {
		sqlite3_result_error_nomem(ctx);
		return;
	}
	long long i = 0, j = 0;
	while (count > 0) {
		const unsigned char *m = memmem(zStr + i, (size_t)(nStr - i), zPattern, (size_t)nPattern);
		long long at = m - zStr;
		memcpy(zOut + j, zStr + i, (size_t)(at - i));
		j += at - i;
		memcpy(zOut + j, zRep, (size_t)nRep);
		j += nRep;
		i = at + nPattern;
		count--;
	}
	memcpy(zOut + j, zStr + i, (size_t)(nStr - i));
	j += nStr - i;
	zOut[j] = 0;
	sqlite3_result_text(ctx, (const char *)zOut, (int)j, sqlite3_free);
}

static void fn_instr(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
	(void)argc;
	if (interrupted(ctx)) return;
	int typeHaystack = sqlite3_value_type(argv[0]);
	int typeNeedle = sqlite3_value_type(argv[1]);
	if (typeHaystack == SQLITE_NULL || typeNeedle == SQLITE_NULL) return;
	int nHaystack = sqlite3_value_bytes(argv[0]);
	int nNeedle = sqlite3_value_bytes(argv[1]);
	long long N = 1;
	sqlite3_value *pC1 = 0, *pC2 = 0;
	if (nNeedle > 0) {
		const unsigned char *zHaystack, *zNeedle;
		int isText;
		if (typeHaystack == SQLITE_BLOB && typeNeedle == SQLITE_BLOB) {
			zHaystack = sqlite3_value_blob(argv[0]);
			zNeedle = sqlite3_value_blob(argv[1]);
			isText = 0;
		} else if (typeHaystack != SQLITE_BLOB && typeNeedle != SQLITE_BLOB) {
			zHaystack = sqlite3_value_text(argv[0]);
			zNeedle = sqlite3_value_text(argv[1]);
			isText = 1;
		} else {
			pC1 = sqlite3_value_dup(argv[0]);
			zHaystack = pC1 ? sqlite3_value_text(pC1) : 0;
			if (!zHaystack) goto oom;
			nHaystack = sqlite3_value_bytes(pC1);
			pC2 = sqlite3_value_dup(argv[1]);
			zNeedle = pC2 ? sqlite3_value_text(pC2) : 0;
			if (!zNeedle) goto oom;
			nNeedle = sqlite3_value_bytes(pC2);
			isText = 1;
		}
		if (!zNeedle || (nHaystack && !zHaystack)) goto oom;
		// SQLite steps through the haystack one character at a time (a
		// byte for blobs): a match counts only where a step lands, that
		// is at 0 and at every byte that is not a UTF-8 continuation
		// byte. N is the number of the step.
		long long at = -1;
		for (long long i = 0; i + nNeedle <= nHaystack;) {
			const unsigned char *m = memmem(zHaystack + i, (size_t)(nHaystack - i), zNeedle, (size_t)nNeedle);
			if (!m) break;
			long long k = m - zHaystack;
			if (!isText || k == 0 || (zHaystack[k] & 0xc0) != 0x80) {
				at = k;
				break;
			}
			i = k + 1;
		}
		if (at < 0) {
			N = 0;
		} else if (!isText) {
			N = at + 1;
		} else {
			for (long long i = 1; i <= at; i++) N += (zHaystack[i] & 0xc0) != 0x80;
		}
	}
	sqlite3_result_int(ctx, (int)N);
	sqlite3_value_free(pC1);
	sqlite3_value_free(pC2);
	return;
oom:
	sqlite3_result_error_nomem(ctx);
	sqlite3_value_free(pC1);
	sqlite3_value_free(pC2);
}

#define SKIP_UTF8(z)                          \
	{                                         \
		if ((*(z++)) >= 0xc0) {               \
			while ((*z & 0xc0) == 0x80) z++;  \
		}                                     \
	}

// fn_trim is SQLite's trimFunc with its character set bounded.
static void fn_trim(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
	if (interrupted(ctx)) return;
	if (sqlite3_value_type(argv[0]) == SQLITE_NULL) return;
	const unsigned char *zIn = sqlite3_value_text(argv[0]);
	if (!zIn) return;
	unsigned int nIn = (unsigned)sqlite3_value_bytes(argv[0]);
	static const unsigned lenOne[] = {1};
	static const unsigned char *const azOne[] = {(const unsigned char *)" "};
	const unsigned *aLen = lenOne;
	const unsigned char *const *azChar = azOne;
	const unsigned char *azSet[MEMQ_TRIM_SET];
	unsigned aSetLen[MEMQ_TRIM_SET];
	int nChar = 1;
	if (argc == 2) {
		const unsigned char *zCharSet = sqlite3_value_text(argv[1]);
		if (!zCharSet) return;
		size_t nSet = strlen((const char *)zCharSet);
		if (nSet > MEMQ_TRIM_SET) {
			char msg[200];
			sqlite3_snprintf(sizeof(msg), msg,
				"the set of characters to trim is %lld bytes, over the %d-byte limit of this engine "
				"(a guard: trimming compares every character of the set at every position); trim fewer characters",
				(long long)nSet, MEMQ_TRIM_SET);
			too_big(ctx, msg);
			return;
		}
		const unsigned char *z = zCharSet;
		for (nChar = 0; *z; nChar++) {
			azSet[nChar] = z;
			SKIP_UTF8(z);
			aSetLen[nChar] = (unsigned)(z - azSet[nChar]);
		}
		aLen = aSetLen;
		azChar = azSet;
	}
	if (nChar > 0) {
		intptr_t flags = (intptr_t)sqlite3_user_data(ctx);
		if (flags & 1) {
			while (nIn > 0) {
				unsigned int len = 0;
				int i;
				for (i = 0; i < nChar; i++) {
					len = aLen[i];
					if (len <= nIn && memcmp(zIn, azChar[i], len) == 0) break;
				}
				if (i >= nChar) break;
				zIn += len;
				nIn -= len;
			}
		}
		if (flags & 2) {
			while (nIn > 0) {
				unsigned int len = 0;
				int i;
				for (i = 0; i < nChar; i++) {
					len = aLen[i];
					if (len <= nIn && memcmp(&zIn[nIn - len], azChar[i], len) == 0) break;
				}
				if (i >= nChar) break;
				nIn -= len;
			}
		}
	}
	sqlite3_result_text(ctx, (const char *)zIn, (int)nIn, SQLITE_TRANSIENT);
}

// sqlite3Utf8Trans1 and utf8_read are SQLite's (sqlite3Utf8Read).
static const unsigned char utf8Trans1[] = {
	0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09, 0x0a, 0x0b, 0x0c, 0x0d, 0x0e, 0x0f,
	0x10, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18, 0x19, 0x1a, 0x1b, 0x1c, 0x1d, 0x1e, 0x1f,
	0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09, 0x0a, 0x0b, 0x0c, 0x0d, 0x0e, 0x0f,
	0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x00, 0x01, 0x02, 0x03, 0x00, 0x01, 0x00, 0x00,
};

static unsigned int utf8_read(const unsigned char **pz) {
	unsigned int c = *((*pz)++);
	if (c >= 0xc0) {
		c = utf8Trans1[c - 0xc0];
		while ((*(*pz) & 0xc0) == 0x80) c = (c << 6) + (0x3f & *((*pz)++));
		if (c < 0x80 || (c & 0xFFFFF800) == 0xD800) c = 0xFFFD;
	}
	return c;
}

// reescape rewrites a LIKE pattern whose escape character is one of the
// wildcards ('%' or '_'), which SQLite's likeFunc then treats as escape
// only, into the same pattern with an escape character the pattern does
// not contain, which sqlite3_strlike takes. out holds 4*strlen(p)+8
// bytes; *esc receives the new escape character.
static void reescape(const unsigned char *p, unsigned int wild, unsigned char *out, unsigned int *esc) {
	// A private-use character the pattern lacks: of n+1 candidates, one is
	// not among the pattern's n characters.
	unsigned int e = 0xE000;
	for (int clash = 1; clash; e++) {
		clash = 0;
		for (const unsigned char *z = p; *z && !clash;) clash = utf8_read(&z) == e;
		if (!clash) break;
	}
	*esc = e;
	unsigned char ebytes[3] = {(unsigned char)(0xE0 | (e >> 12)), (unsigned char)(0x80 | ((e >> 6) & 0x3F)), (unsigned char)(0x80 | (e & 0x3F))};
	while (*p) {
		const unsigned char *start = p;
		unsigned int c = utf8_read(&p);
		if (c == wild) {
			memcpy(out, ebytes, 3);
			out += 3;
			if (!*p) break; // a trailing escape: matches nothing, either way
			start = p;     // the escaped character, copied as it is
			utf8_read(&p);
		}
		memcpy(out, start, (size_t)(p - start));
		out += p - start;
	}
	*out = 0;
}

// fn_like is SQLite's likeFunc (user data 1: LIKE, 0: GLOB) over
// sqlite3_strlike and sqlite3_strglob, which run the same matcher.
static void fn_like(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
	if (interrupted(ctx)) return;
	int isLike = sqlite3_user_data(ctx) != 0;
	int nPat = sqlite3_value_bytes(argv[0]);
	int limit = sqlite3_limit(sqlite3_context_db_handle(ctx), SQLITE_LIMIT_LIKE_PATTERN_LENGTH, -1);
	if (nPat > limit) {
		char msg[240];
		sqlite3_snprintf(sizeof(msg), msg,
			"%s pattern of %d bytes is over the %d-byte limit of this engine (a guard: matching costs the "
			"pattern's length at every character); use shorter patterns joined with AND, or instr()",
			isLike ? "LIKE" : "GLOB", nPat, limit);
		too_big(ctx, msg);
		return;
	}
	unsigned int escape = 0;
	if (argc == 3) {
		const unsigned char *zEsc = sqlite3_value_text(argv[2]);
		if (!zEsc) return;
		int n = 0;
		for (const unsigned char *z = zEsc; *z; n++) SKIP_UTF8(z);
		if (n != 1) {
			sqlite3_result_error(ctx, "ESCAPE expression must be a single character", -1);
			return;
		}
		escape = utf8_read(&zEsc);
	}
	const unsigned char *zB = sqlite3_value_text(argv[0]);
	const unsigned char *zA = sqlite3_value_text(argv[1]);
	if (zA && zB) {
		unsigned char *rewritten = 0;
		if (escape == '%' || escape == '_') {
			// SQLite then turns that wildcard off; sqlite3_strlike
			// cannot, so the pattern gets another escape character.
			rewritten = sqlite3_malloc64(4 * (sqlite3_uint64)strlen((const char *)zB) + 8);
			if (!rewritten) {
				sqlite3_result_error_nomem(ctx);
				return;
			}
			reescape(zB, escape, rewritten, &escape);
			zB = rewritten;
		}
		int nomatch = isLike ? sqlite3_strlike((const char *)zB, (const char *)zA, escape)
		                     : sqlite3_strglob((const char *)zB, (const char *)zA);
		sqlite3_free(rewritten);
		sqlite3_result_int(ctx, nomatch == 0);
	}
}

int memq_register_functions(sqlite3 *db) {
	if (!sqlite3_create_function_v2 || !sqlite3_strlike || !sqlite3_strglob) return SQLITE_ERROR;
	static const struct {
		const char *name;
		int nArg;
		intptr_t data;
		void (*fn)(sqlite3_context *, int, sqlite3_value **);
	} fns[] = {
		{"replace", 3, 0, fn_replace},
		{"instr", 2, 0, fn_instr},
		{"ltrim", 1, 1, fn_trim}, {"ltrim", 2, 1, fn_trim},
		{"rtrim", 1, 2, fn_trim}, {"rtrim", 2, 2, fn_trim},
		{"trim", 1, 3, fn_trim}, {"trim", 2, 3, fn_trim},
		{"like", 2, 1, fn_like}, {"like", 3, 1, fn_like},
		{"glob", 2, 0, fn_like},
	};
	for (size_t i = 0; i < sizeof(fns) / sizeof(fns[0]); i++) {
		int rc = sqlite3_create_function_v2(db, fns[i].name, fns[i].nArg, SQLITE_UTF8 | SQLITE_DETERMINISTIC | SQLITE_INNOCUOUS,
			(void *)fns[i].data, fns[i].fn, 0, 0, 0);
		if (rc != SQLITE_OK) return rc;
	}
	return SQLITE_OK;
}
