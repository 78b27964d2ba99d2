package flightrecorder

import (
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"

	"github.com/probing-mcp/probing-mcp/internal/bytesize"
	"github.com/probing-mcp/probing-mcp/internal/sysmem"
)

// Limits bound what dumps may cost. A dump is an untrusted file: without
// ceilings, a few hundred bytes that name rank 10^8, or a pg_config of a
// million groups, would cost gigabytes. The structures of the analysis
// follow the ranks and groups present, not the largest rank number; the
// ceilings refuse the rest by name. Zero fields take the environment
// variable named below, then the default.
type Limits struct {
	// MaxRanks is the world-size ceiling: every rank number (in a file
	// name, a pg_config, a snapshot) must be below it.
	// PROBING_FR_MAX_RANKS; default 1048576.
	MaxRanks int
	// MaxGroups caps the process groups one dump's pg_config or pg_status
	// may list, and the groups an analysis infers from entries.
	// PROBING_FR_MAX_GROUPS; default 65536.
	MaxGroups int
	// MaxMemberships caps the group memberships (the rank lists' lengths
	// added up) of one dump's pg_config, and of the distinct groups of an
	// analysis. A rank list that several groups share through the pickle
	// memo is charged once per group: the analysis walks it per group.
	// PROBING_FR_MAX_MEMBERSHIPS; default 8388608.
	MaxMemberships int64
	// DecodeBudget is how many bytes of dump files Load decodes at once;
	// decoding costs a small multiple of a file's size, so this bounds the
	// memory of the parallel decode. A file larger than the budget still
	// decodes, alone. PROBING_FR_DECODE_BUDGET (bytes, or with a unit:
	// 256MiB); default 64 MiB.
	DecodeBudget int64
	// MaxMemory is the memory ceiling of a load and of an analysis: the
	// process's memory is measured as they run, and they stop with a
	// MemoryCeilingError past it. PROBING_FR_MAX_MEMORY (bytes, or with
	// a unit: 16GiB); default 3/4 of the memory available (RAM, or the
	// cgroup's limit). Negative: no ceiling.
	MaxMemory    int64
	memorySource string // see MemoryCeilingError.Source
}

// Defaults of Limits. 2^20 ranks is far beyond today's largest jobs (100k+
// GPUs) and a rank index of that size costs 4 MiB; 2^16 groups allows
// thousands of groups per rank.
const (
	DefaultMaxRanks     = 1 << 20
	DefaultMaxGroups    = 1 << 16
	DefaultDecodeBudget = 64 << 20
	// Eight groups spanning the largest world the rank ceiling allows;
	// a real rank is in one world-sized group or a few, and a 16384-rank
	// job's groups add up to a few times its world.
	DefaultMaxMemberships = 8 << 20
)

// The environment variables that set Limits.
const (
	EnvMaxRanks       = "PROBING_FR_MAX_RANKS"
	EnvMaxGroups      = "PROBING_FR_MAX_GROUPS"
	EnvDecodeBudget   = "PROBING_FR_DECODE_BUDGET"
	EnvMaxMemberships = "PROBING_FR_MAX_MEMBERSHIPS"
)

// resolve fills the zero fields from the environment, then the defaults.
// A malformed variable is an error naming it.
func (l Limits) resolve() (Limits, error) {
	if l.MaxRanks <= 0 {
		n, err := envInt(EnvMaxRanks, DefaultMaxRanks)
		if err != nil {
			return l, err
		}
		l.MaxRanks = int(min(n, math.MaxInt32)) // rank positions are int32
	}
	if l.MaxGroups <= 0 {
		n, err := envInt(EnvMaxGroups, DefaultMaxGroups)
		if err != nil {
			return l, err
		}
		l.MaxGroups = int(min(n, math.MaxInt32))
	}
	if l.DecodeBudget <= 0 {
		n, err := envBytes(EnvDecodeBudget, DefaultDecodeBudget)
		if err != nil {
			return l, err
		}
		l.DecodeBudget = n
	}
	if l.MaxMemberships <= 0 {
		n, err := envInt(EnvMaxMemberships, DefaultMaxMemberships)
		if err != nil {
			return l, err
		}
		l.MaxMemberships = n
	}
	return l.resolveMemory()
}

// resolved is resolve for callers that cannot fail: a malformed variable
// gives the default, and the error is returned for a data-quality note.
func (l Limits) resolved() (Limits, error) {
	r, err := l.resolve()
	if err != nil {
		var err2 error
		r, err2 = Limits{MaxRanks: max(l.MaxRanks, DefaultMaxRanks), MaxGroups: max(l.MaxGroups, DefaultMaxGroups),
			DecodeBudget: max(l.DecodeBudget, DefaultDecodeBudget), MaxMemberships: max(l.MaxMemberships, DefaultMaxMemberships),
			MaxMemory: l.MaxMemory}.resolve()
		if err2 != nil { // PROBING_FR_MAX_MEMORY is malformed: the default share
			r.MaxMemory, r.memorySource = int64(float64(sysmem.Available())*DefaultMemoryShare), "default"
		}
	}
	return r, err
}

func envInt(name string, def int64) (int64, error) {
	v := strings.TrimSpace(os.Getenv(name))
	if v == "" {
		return def, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("%s=%q is not a positive integer", name, v)
	}
	return n, nil
}

func envBytes(name string, def int64) (int64, error) {
	v := strings.TrimSpace(os.Getenv(name))
	if v == "" {
		return def, nil
	}
	n, ok := bytesize.Parse(v)
	if !ok {
		return 0, fmt.Errorf("%s=%q is not a positive size in bytes (e.g. 268435456 or 256MiB)", name, v)
	}
	return n, nil
}

// rankCeilingError is the refusal of one rank number.
func (l Limits) rankCeilingError(what string, rank int64) error {
	return fmt.Errorf("%s %d is over the ceiling of %d ranks (set %s higher for a larger job)", what, rank, l.MaxRanks, EnvMaxRanks)
}

// checkRank refuses a rank number outside [0, MaxRanks).
func (l Limits) checkRank(what string, rank int64) error {
	if rank < 0 {
		return fmt.Errorf("%s %d is negative", what, rank)
	}
	if rank >= int64(l.MaxRanks) {
		return l.rankCeilingError(what, rank)
	}
	return nil
}

// checkGroups refuses a list of more than MaxGroups process groups.
func (l Limits) checkGroups(n int) error {
	if n > l.MaxGroups {
		return fmt.Errorf("%d process groups, over the ceiling of %d (set %s higher if a job really has that many)", n, l.MaxGroups, EnvMaxGroups)
	}
	return nil
}

// chargeMemberships refuses a pg_config whose rank lists, added up group
// by group, pass MaxMemberships. A list written once and named by many
// groups through the pickle memo costs a few bytes per group to write but
// a walk per group to analyse, so it is charged per group.
func (l Limits) chargeMemberships(total int64, groups int) error {
	if total > l.MaxMemberships {
		return fmt.Errorf("its %d groups name %d members in all (a rank list shared by several groups counts once per group), over the ceiling of %d memberships (set %s higher if a job really has that many)",
			groups, total, l.MaxMemberships, EnvMaxMemberships)
	}
	return nil
}

// checkListLength refuses a rank list longer than the world can be: it
// names some rank twice, and parsing it would be work for nothing.
func (l Limits) checkListLength(n int) error {
	if n > l.MaxRanks {
		return fmt.Errorf("ranks: a list of %d items, more than the ceiling of %d ranks (set %s higher for a larger job)", n, l.MaxRanks, EnvMaxRanks)
	}
	return nil
}

// ResolveLimits fills the zero fields of l as Load does (PROBING_FR_*,
// then the defaults); a malformed variable is an error naming it.
func ResolveLimits(l Limits) (Limits, error) { return l.resolve() }
