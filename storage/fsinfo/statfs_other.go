//go:build !linux

package fsinfo

import "os"

// statfsMagic only checks that p exists: f_type is a Linux notion (the
// BSDs and macOS name the type instead), so elsewhere the file system is
// "unknown" and taken as local.
func statfsMagic(p string) (magic uint32, ok bool, err error) {
	_, err = os.Stat(p)
	return 0, false, err
}

func isNotDir(err error) bool { return false }
