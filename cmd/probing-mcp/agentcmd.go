package main

import (
	"fmt"
	"io"
	"os"

	"github.com/probing-mcp/probing-mcp/agent"
)

const agentUsage = `Usage:
  probing-mcp agent install [--python PATH] [--user]
  probing-mcp agent uninstall [--python PATH]

install writes the in-process agent (Python, stdlib only) and a .pth start-up hook into that
interpreter's site-packages; processes then activate it with PROBING=1 (this process), 2 (and
children) or a script name. uninstall removes both. Installed with pip, the agent is already
there: install adds the hook, into the interpreter pip installed probing-mcp with by default.
Run "probing-mcp agent install --help" for a subcommand's flags.

Examples:
  probing-mcp agent install --python $(which python3)
  probing-mcp agent install --python ~/venv/bin/python --user
  probing-mcp agent uninstall --python ~/venv/bin/python
`

var agentDocs = map[string]cmdDoc{
	"install": {Name: "agent install", Synopsis: "[--python PATH] [--user]",
		About: `Install the in-process agent (Python, stdlib only) and a .pth start-up hook into the
interpreter's site-packages, and this binary beside the interpreter (for the node daemon).
Installed with pip, the agent and the binary are there already: only the hook is added, into
the interpreter pip installed probing-mcp with unless --python names another.
A process then activates the agent with PROBING=1 (this process), 2 (and its children) or a
script name; without PROBING the hook costs nothing.`,
		Note: "Exit status: 0 when installed; 1 when it failed; 2 on bad usage.",
		Examples: []string{
			"probing-mcp agent install --python $(which python3)",
			"probing-mcp agent install --python ~/venv/bin/python --user",
			"PROBING=1 torchrun --nproc-per-node 4 train.py   # then: the agent is active in each rank",
		}},
	"uninstall": {Name: "agent uninstall", Synopsis: "[--python PATH]",
		About: "Remove the agent and its .pth hook from the interpreter's site-packages (system and user).",
		Note:  "Exit status: 0 when removed (or nothing was installed); 1 when it failed; 2 on bad usage.",
		Examples: []string{
			"probing-mcp agent uninstall",
			"probing-mcp agent uninstall --python ~/venv/bin/python",
		}},
}

// agentCmd is `probing-mcp agent install|uninstall [--python PATH] [--user]`.
func agentCmd(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && isHelp(args[0]) {
		fmt.Fprint(stdout, agentUsage)
		return 0
	}
	doc, ok := agentDocs[firstArg(args)]
	if !ok {
		if len(args) > 0 {
			fmt.Fprintf(stderr, "probing-mcp agent: unknown subcommand %q: want install or uninstall\n\n", args[0])
		}
		fmt.Fprint(stderr, agentUsage)
		return 2
	}
	fs := newCommand(doc)
	// Run from the wheel, the launcher names the interpreter it came with
	// (pypi/probing_mcp/__main__.py): that environment is the default.
	defPython := "python3"
	if p := os.Getenv("PROBING_MCP_PYTHON"); p != "" {
		defPython = p
	}
	python := fs.String("python", defPython, "the `interpreter` to install into (default: the one pip installed probing-mcp with, else python3)")
	user := false
	if args[0] == "install" {
		fs.BoolVar(&user, "user", false, "install into the user site-packages (~/.local/lib/pythonX.Y/site-packages)")
	}
	pos, code, done := parseCommand(fs, doc, args[1:], true, stdout, stderr)
	if done {
		return code
	}
	if len(pos) > 0 {
		fmt.Fprintf(stderr, "probing-mcp agent %s: unexpected argument %q (the interpreter goes in --python)\n", args[0], pos[0])
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

func firstArg(args []string) string {
	if len(args) == 0 {
		return ""
	}
	return args[0]
}
