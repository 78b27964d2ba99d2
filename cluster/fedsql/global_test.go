package fedsql

import "testing"

func TestUnGlobal(t *testing.T) {
	for in, want := range map[string]string{
		"SELECT * FROM global.python.comm_collective":                       "SELECT * FROM python.comm_collective",
		"select a from GLOBAL.nccl.coll_perf g join global.python.x y on 1": "select a from nccl.coll_perf g join python.x y on 1",
		"SELECT 'global.python.x' FROM python.x":                            "SELECT 'global.python.x' FROM python.x",
		`SELECT "global.x" FROM python.x`:                                   `SELECT "global.x" FROM python.x`,
		"SELECT myglobal.x FROM python.x":                                   "SELECT myglobal.x FROM python.x",
		"SELECT 'it''s global.x' FROM global.python.x":                      "SELECT 'it''s global.x' FROM python.x",
		"SELECT 1 FROM python.x WHERE s = 'unterminated global.":            "SELECT 1 FROM python.x WHERE s = 'unterminated global.",
		"global.": "global.",
	} {
		if got := unGlobal(in); got != want {
			t.Errorf("unGlobal(%q) = %q, want %q", in, got, want)
		}
	}
}
