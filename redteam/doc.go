// Package redteam is issue 23's red-team suite: each attack a hostile user
// of a shared cluster tried on the whole-job view, run as a test against
// the real probing-mcp binary (built once per run), black-box: the binary
// as a subprocess with its own data dir, spoken to over MCP (stdio or
// HTTP) and the node API, against hostile stores and nodes that are
// in-process fakes (a c10d TCPStore speaking torch's wire protocol, node
// daemons as httptest servers). Two-user attacks run the attacker as uid
// 65534 when the test runs as root, and are skipped with the reason
// otherwise.
//
// Each test states the attack, what it did before (issue 23's numbers) and
// the bound it must stay under: a clear message naming the problem, or a
// data-quality line; peak memory under 512 MB (the subprocess's high-water
// RSS, VmHWM) and its time under the deadline. `go test ./redteam/` runs the fast
// ones (make test, CI); `make redteam` adds the heavy ones (build tag
// redteam).
package redteam
