package membership

import (
	"strings"
	"testing"
)

func TestExpandSlurmNodelist(t *testing.T) {
	cases := map[string]string{
		"node[001-004,007],gpu-a[1-2],login1": "node001 node002 node003 node004 node007 gpu-a1 gpu-a2 login1",
		"a[1-2]b[3-4]":                        "a1b3 a1b4 a2b3 a2b4",
		"n[08-11]":                            "n08 n09 n10 n11",
		"x[9-10]":                             "x9 x10",
		"[1-2]rack":                           "1rack 2rack",
		" solo , duo ":                        "solo duo",
		"":                                    "",
		"r[1,3]-s[0-1]":                       "r1-s0 r1-s1 r3-s0 r3-s1",
	}
	for in, want := range cases {
		got, err := ExpandSlurmNodelist(in, 0)
		if err != nil {
			t.Errorf("%q: %v", in, err)
			continue
		}
		if strings.Join(got, " ") != want {
			t.Errorf("%q: %q, want %q", in, got, want)
		}
	}
	for _, bad := range []string{"n[1-", "n]1[", "n[2-1]", "n[a-b]", "n[[1]]", "n[1-2", "n[]", "n[1-9999999999]"} {
		if _, err := ExpandSlurmNodelist(bad, 0); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
	for _, big := range []string{"n[1-999999999]", "a[1-1000]b[1-1000]c[1-1000]", "a[1-100],b[1-16300]"} {
		if _, err := ExpandSlurmNodelist(big, 0); err == nil || !strings.Contains(err.Error(), "more than 16384") {
			t.Errorf("%q: %v", big, err)
		}
	}
	if _, err := ExpandSlurmNodelist("n[1-5]", 4); err == nil {
		t.Error("max 4 allowed 5")
	}
	if got, err := ExpandSlurmNodelist("n[1-4]", 4); err != nil || len(got) != 4 {
		t.Errorf("max 4: %v %v", got, err)
	}
}

func TestExpandAllocatesNothingForHugeLists(t *testing.T) {
	allocs := testing.AllocsPerRun(10, func() { ExpandSlurmNodelist("n[1-999999999]", 0) })
	if allocs > 20 {
		t.Errorf("%v allocations for a refused list", allocs)
	}
}

func TestFromSlurm(t *testing.T) {
	env := map[string]string{"SLURM_NODELIST": "old[1-9]", "SLURM_JOB_NODELIST": "gpu[01-02]"}
	ns, err := FromSlurm(func(k string) string { return env[k] }, 9781)
	if err != nil || len(ns) != 2 || ns[1].Addr != "gpu02:9781" || ns[1].Host != "gpu02" || ns[1].NodeRank != 1 || ns[1].Source != "slurm" {
		t.Fatalf("%+v %v", ns, err)
	}
	delete(env, "SLURM_JOB_NODELIST")
	if ns, err := FromSlurm(func(k string) string { return env[k] }, 1); err != nil || len(ns) != 9 {
		t.Errorf("fallback: %v %v", len(ns), err)
	}
	if _, err := FromSlurm(func(string) string { return "" }, 1); err == nil || !strings.Contains(err.Error(), "SLURM_JOB_NODELIST") {
		t.Errorf("unset: %v", err)
	}
	if _, err := FromSlurm(func(string) string { return "n[1-" }, 1); err == nil || !strings.Contains(err.Error(), "SLURM_JOB_NODELIST") {
		t.Errorf("bad list: %v", err)
	}
	if _, err := FromSlurm(func(string) string { return "n1" }, 0); err == nil {
		t.Error("port 0 accepted")
	}
}

func FuzzExpandSlurmNodelist(f *testing.F) {
	for _, s := range []string{"node[001-004,007],gpu-a[1-2],login1", "a[1-2]b[3-4]", "n[1-999999999]", "n[", "]", "x[0-0]", "a,b,,c", "[1-3]"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, err := ExpandSlurmNodelist(s, 1000)
		if err != nil {
			return
		}
		if len(got) > 1000 {
			t.Fatalf("%d hosts past the max", len(got))
		}
		for _, h := range got {
			if h == "" {
				t.Fatalf("empty host from %q", s)
			}
			if strings.ContainsAny(h, "[],") {
				t.Fatalf("host %q from %q keeps list syntax", h, s)
			}
		}
		if !strings.ContainsAny(s, "[]") {
			if n := len(strings.FieldsFunc(s, func(r rune) bool { return r == ',' })); len(got) > n {
				t.Fatalf("%q: %d hosts from %d names", s, len(got), n)
			}
		}
	})
}
