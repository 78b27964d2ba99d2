package main

import (
	"fmt"
	"io"
	"time"

	"github.com/probing-mcp/probing-mcp/picture"
)

// writePage writes a diagnosis' page (--html FILE) and says where on
// stderr; the text answer is printed as without the flag.
func writePage(cmd, path string, p picture.Page, stderr io.Writer) int {
	if err := picture.WriteFile(path, p, picture.Options{Made: time.Now()}); err != nil {
		fmt.Fprintf(stderr, "probing-mcp %s: --html %s: %v\n", cmd, path, err)
		return 1
	}
	fmt.Fprintf(stderr, "probing-mcp %s: page written to %s (open it in a browser)\n", cmd, path)
	return 0
}
