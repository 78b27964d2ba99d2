package main

import (
	"flag"
	"fmt"
	"io"

	"github.com/probing-mcp/probing-mcp/agent"
)

// agentCmd is `probing-mcp agent install|uninstall [--python PATH] [--user]`.
func agentCmd(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || (args[0] != "install" && args[0] != "uninstall") {
		fmt.Fprintln(stderr, "Usage: probing-mcp agent install [--python PATH] [--user]\n       probing-mcp agent uninstall [--python PATH]\n\n"+
			"install writes the in-process agent (Python, stdlib only) and a .pth start-up hook into that interpreter's\n"+
			"site-packages; processes then activate it with PROBING=1 (this process), 2 (and children) or a script name.")
		return 2
	}
	fs := flag.NewFlagSet("agent "+args[0], flag.ContinueOnError)
	fs.SetOutput(stderr)
	python := fs.String("python", "python3", "the `interpreter` to install into")
	user := false
	if args[0] == "install" {
		fs.BoolVar(&user, "user", false, "install into the user site-packages (~/.local/lib/pythonX.Y/site-packages)")
	}
	if err := fs.Parse(args[1:]); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "probing-mcp agent %s: unexpected argument %q\n", args[0], fs.Arg(0))
		return 2
	}
	var did []string
	var err error
	if args[0] == "install" {
		did, err = agent.Install(*python, user, versionString())
	} else {
		did, err = agent.Uninstall(*python)
	}
	for _, line := range did {
		fmt.Fprintln(stdout, line)
	}
	if err != nil {
		fmt.Fprintf(stderr, "probing-mcp agent %s: %v\n", args[0], err)
		return 1
	}
	return 0
}
