//go:build !linux

package memt

import "os"

// reserve: only Linux has fallocate; elsewhere Truncate makes the file.
func reserve(f *os.File, size int64) error { return nil }
