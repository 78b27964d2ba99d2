package agent

// SetSelfExecutable makes Install place path instead of the running
// binary, so that a test can install a fake probing-mcp that records how
// the agent starts it; it returns the undo. Not for parallel tests.
func SetSelfExecutable(path string) (undo func()) {
	old := selfExecutable
	selfExecutable = func() (string, error) { return path, nil }
	return func() { selfExecutable = old }
}
