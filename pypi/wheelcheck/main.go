// Command wheelcheck checks built wheels against what their names claim
// (internal/wheelcheck): make wheel runs it on dist/*.whl.
//
//	go run ./pypi/wheelcheck [--version V] [--max-mb 15] WHEEL...
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/probing-mcp/probing-mcp/internal/wheelcheck"
)

func main() {
	version := flag.String("version", "", "the version every wheel must carry (VERSION's)")
	maxMB := flag.Float64("max-mb", 15, "the most a wheel may weigh, in MB (0: no bound)")
	flag.Parse()
	if flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: wheelcheck [--version V] [--max-mb N] WHEEL... (build them with make wheel)")
		os.Exit(2)
	}
	failed := false
	for _, path := range flag.Args() {
		res, err := wheelcheck.Check(path, wheelcheck.Options{Version: *version, MaxBytes: int64(*maxMB * 1e6)})
		if err != nil {
			fmt.Fprintf(os.Stderr, "wheelcheck: %v\n", err)
			failed = true
			continue
		}
		fmt.Println(res.Summary())
		for _, p := range res.Problems {
			fmt.Println("  -", p)
		}
		failed = failed || len(res.Problems) > 0
	}
	if failed {
		os.Exit(1)
	}
}
