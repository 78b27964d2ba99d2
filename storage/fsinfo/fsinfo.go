// Package fsinfo tells which file system holds a path, and whether it is a
// network (or otherwise remote) one. The history store asks before it
// picks a journal: SQLite's WAL keeps its index in a shared-memory file
// that every process maps, and network file systems neither share such
// mappings between hosts nor lock them reliably, so a WAL database there
// can be corrupted silently.
package fsinfo

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
)

// kind is what one f_type magic number means.
type kind struct {
	name    string
	network bool
}

// magics maps statfs f_type values (linux/magic.h and the file systems'
// own sources) to names. Network file systems first, then the common
// local ones, named only so that Mode strings and logs say something
// useful.
var magics = map[uint32]kind{
	0x6969:     {"nfs", true},
	0x0BD00BD0: {"lustre", true},
	0xFF534D42: {"cifs", true},
	0xFE534D42: {"smb2", true}, // SMB 2 and 3 (the kernel's smb3 client)
	0x517B:     {"smb", true},
	0x00C36400: {"cephfs", true},
	0x47504653: {"gpfs", true},
	0x19830326: {"beegfs", true},
	0x01021997: {"9p", true},
	0x5346414F: {"afs", true},
	0x7461636F: {"ocfs2", true},
	0x01161970: {"gfs2", true},
	0xAAD7AAEA: {"panfs", true},
	// FUSE counts as network. On training clusters the FUSE mounts are
	// gcsfuse, s3fs, blobfuse and sshfs: object stores and remote hosts
	// with no coherent shared memory and weak or absent POSIX locks. A
	// local FUSE file system wrongly treated as network only loses WAL's
	// speed; the opposite mistake can corrupt the database.
	0x65735546: {"fuse", true},

	0x01021994: {"tmpfs", false},
	0xEF53:     {"ext4", false}, // ext2 and ext3 share the magic
	0x58465342: {"xfs", false},
	0x9123683E: {"btrfs", false},
	0x794C7630: {"overlayfs", false},
	0x2FC12FC1: {"zfs", false},
}

// classify names a statfs magic number. An unknown one is reported as
// "unknown(0x…)" and as local: most exotic file systems are local (or
// FUSE, which has its own magic), and guessing network for all of them
// would cost every unusual host WAL for nothing.
func classify(magic uint32) (name string, network bool) {
	if k, ok := magics[magic]; ok {
		return k.name, k.network
	}
	return fmt.Sprintf("unknown(0x%X)", magic), false
}

// NetworkFS reports the file system that holds path, or the nearest
// existing parent of path when path does not exist yet (a database about to
// be created), and whether it is a network file system. On systems other
// than Linux it reports "unknown" and false.
func NetworkFS(path string) (name string, network bool, err error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", false, fmt.Errorf("fsinfo: %s: %w", path, err)
	}
	for p := abs; ; {
		magic, ok, err := statfsMagic(p)
		switch {
		case err == nil && !ok:
			return "unknown", false, nil
		case err == nil:
			name, network = classify(magic)
			return name, network, nil
		case errors.Is(err, fs.ErrNotExist) || isNotDir(err):
			parent := filepath.Dir(p)
			if parent == p {
				return "", false, fmt.Errorf("fsinfo: %s: no existing parent: %w", path, err)
			}
			p = parent
		default:
			return "", false, fmt.Errorf("fsinfo: statfs %s (for %s): %w", p, path, err)
		}
	}
}
