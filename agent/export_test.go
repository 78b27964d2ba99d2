package agent

import "github.com/probing-mcp/probing-mcp/stacks"

// SetSelfExecutable makes Install place path instead of the running
// binary, so that a test can install a fake probing-mcp that records how
// the agent starts it; it returns the undo. Not for parallel tests.
func SetSelfExecutable(path string) (undo func()) {
	old := selfExecutable
	selfExecutable = func() (string, error) { return path, nil }
	return func() { selfExecutable = old }
}

// SetMainOnCPU decides what the timeout retry reads of a process's main
// thread (a fake agent served by the test process has the Go runtime's);
// it returns the undo. Not for parallel tests.
func SetMainOnCPU(f func([]stacks.Thread) bool) (undo func()) {
	old := mainOnCPU
	mainOnCPU = f
	return func() { mainOnCPU = old }
}
