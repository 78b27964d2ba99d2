// Shared between vtab.c and the Go side (vtab.go): the batch of rows the
// Go reader hands to the C virtual table, one ring chunk at a time.
#ifndef PROBING_MEMT_VTAB_H
#define PROBING_MEMT_VTAB_H

// Tag columns appended after a ring's own columns, in this order:
// _host _addr _rank _node_rank _local_rank _role _pid.
#define MEMT_NTAGS 7

typedef struct memt_batch {
	unsigned char *data;  // the chunk payload (C memory, grown by Go)
	long long data_cap;
	int *offs;            // nrows*ncols offsets into data; -1 = NULL
	long long offs_cap;   // in ints
	int nrows;
	int ncols;            // the virtual table's ring columns (tags excluded)
	unsigned char *types; // per column: the MEMT dtype in the current file, 0 = absent
	long long tag_int[4]; // _rank _node_rank _local_rank _pid
	const char *tag_str[3]; // _host _addr _role
	char *err;            // set (malloc'd) by Go when the scan failed
} memt_batch;

int memt_register(void);

#endif
