package redteam

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The attacker of the two-user tests is uid 65534 (nobody): this test
// binary, copied where that user can run it, started with
// SysProcAttr.Credential and a role.

const (
	attackerUID = 65534
	roleEnv     = "PROBING_REDTEAM_ROLE"
)

// helperRole is what the test binary does when started as the attacker.
func helperRole(role string) int {
	switch role {
	case "whoami":
		fmt.Println(os.Geteuid())
		return 0
	case "http":
		// PROBING_REDTEAM_URL with method and body: prints the status
		// line and the body.
		req, err := http.NewRequest(os.Getenv("PROBING_REDTEAM_METHOD"), os.Getenv("PROBING_REDTEAM_URL"), strings.NewReader(os.Getenv("PROBING_REDTEAM_BODY")))
		if err != nil {
			fmt.Println("error", err)
			return 1
		}
		req.Header.Set("Content-Type", "application/json")
		res, err := (&http.Client{Timeout: 60 * time.Second}).Do(req)
		if err != nil {
			fmt.Println("error", err)
			return 1
		}
		b, _ := io.ReadAll(io.LimitReader(res.Body, 1<<20))
		fmt.Printf("%d %s\n", res.StatusCode, b)
		return 0
	case "flock":
		// Holds a shared flock on PROBING_REDTEAM_PATH until stdin ends
		// (an older 0644 lock file anyone can open for reading).
		f, err := os.Open(os.Getenv("PROBING_REDTEAM_PATH"))
		if err != nil {
			fmt.Println("error", err)
			return 1
		}
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_SH|syscall.LOCK_NB); err != nil {
			fmt.Println("error", err)
			return 1
		}
		fmt.Println("held")
		io.Copy(io.Discard, os.Stdin)
		return 0
	}
	fmt.Fprintf(os.Stderr, "unknown role %q\n", role)
	return 2
}

var (
	attackerOnce sync.Once
	attackerBin  string
	attackerWhy  string
	attackerDir  string // removed when the package's tests end
)

// attacker returns this test binary where uid 65534 can run it, or skips
// the test with the reason: not root, or that uid cannot be used here.
func attacker(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skipf("two-user attack: needs root to act as uid %d beside the server's user (running as uid %d)", attackerUID, os.Geteuid())
	}
	attackerOnce.Do(func() {
		self, err := os.Executable()
		if err != nil {
			attackerWhy = err.Error()
			return
		}
		dir, err := os.MkdirTemp("", "probing-mcp-redteam-attacker-")
		if err != nil {
			attackerWhy = err.Error()
			return
		}
		attackerDir = dir
		os.Chmod(dir, 0o755)
		b, err := os.ReadFile(self)
		if err == nil {
			err = os.WriteFile(filepath.Join(dir, "redteam.test"), b, 0o755)
		}
		if err != nil {
			attackerWhy = err.Error()
			return
		}
		attackerBin = filepath.Join(dir, "redteam.test")
		out, err := asAttacker(attackerBin, "whoami").Output()
		if err != nil || strings.TrimSpace(string(out)) != fmt.Sprint(attackerUID) {
			attackerWhy = fmt.Sprintf("a process cannot run as uid %d here (%v, %q)", attackerUID, err, out)
			attackerBin = ""
		}
	})
	if attackerBin == "" {
		t.Skipf("two-user attack: %s", attackerWhy)
	}
	return attackerBin
}

// asAttacker is the test binary in role, as uid 65534.
func asAttacker(bin, role string, env ...string) *exec.Cmd {
	c := exec.Command(bin, "-test.run=^$")
	c.Env = append([]string{"PATH=/usr/bin:/bin", roleEnv + "=" + role}, env...)
	c.Dir = "/"
	c.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: attackerUID, Gid: attackerUID}}
	return c
}

// holdFlock has the attacker hold a flock on path until the test ends.
func holdFlock(t *testing.T, path string) {
	t.Helper()
	c := asAttacker(attacker(t), "flock", "PROBING_REDTEAM_PATH="+path)
	in, _ := c.StdinPipe()
	out, _ := c.StdoutPipe()
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { in.Close(); c.Wait() })
	line, _ := bufio.NewReader(out).ReadString('\n')
	if strings.TrimSpace(line) != "held" {
		t.Fatalf("the attacker could not lock %s: %q", path, line)
	}
}

// attackerRequest makes one HTTP request as uid 65534; it returns the
// status and the body.
func attackerRequest(t *testing.T, method, url, body string) (int, string) {
	t.Helper()
	out, err := asAttacker(attacker(t), "http", "PROBING_REDTEAM_METHOD="+method, "PROBING_REDTEAM_URL="+url, "PROBING_REDTEAM_BODY="+body).Output()
	var code int
	var rest string
	if _, serr := fmt.Sscanf(string(out), "%d", &code); serr != nil || err != nil {
		t.Fatalf("the attacker's request %s %s: %v: %s", method, url, err, out)
	}
	_, rest, _ = strings.Cut(strings.TrimSpace(string(out)), " ")
	return code, rest
}

// chownAttacker gives paths to the attacker (not following links), as if
// it had made them.
func chownAttacker(t *testing.T, paths ...string) {
	t.Helper()
	for _, p := range paths {
		if err := os.Lchown(p, attackerUID, attackerUID); err != nil {
			t.Fatal(err)
		}
	}
}
