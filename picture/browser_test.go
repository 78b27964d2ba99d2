package picture

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// chromium is Debian's headless browser, or "" (the test skips, naming
// how to install it).
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Skip("Chromium not installed: apt-get install -y chromium (make test installs it where it can)")
	return ""
}

// browsed is what the browser made of a page.
type browsed struct {
	dom     string
	console []string // console messages: script errors, CSP refusals
	marker  map[string]string
}

var (
	markerRe = regexp.MustCompile(`<div id="rendered"[^>]*>`)
	attrRe   = regexp.MustCompile(`data-([a-z-]+)="([^"]*)"`)
)

// browse loads file in headless Chromium as a person's browser would,
// keeps a screenshot beside it, and returns the rendered DOM and the
// console's lines. Its own profile dir: nothing shared with another run.
func browse(t *testing.T, bin, file, png string) browsed {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "--headless", "--disable-gpu", "--no-sandbox", "--no-first-run",
		"--user-data-dir="+t.TempDir(), "--enable-logging=stderr", "--v=0", "--hide-scrollbars",
		"--window-size=1400,1000", "--screenshot="+png, "--dump-dom", "file://"+file)
	cmd.Dir = t.TempDir() // chromium may write next to its working dir
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("chromium on %s: %v\n%s", file, err, stderr.String())
	}
	b := browsed{dom: string(out), marker: map[string]string{}}
	for _, l := range strings.Split(stderr.String(), "\n") {
		if strings.Contains(l, ":CONSOLE") || strings.Contains(l, "Uncaught") {
			b.console = append(b.console, l)
		}
	}
	if m := markerRe.FindString(b.dom); m != "" {
		for _, a := range attrRe.FindAllStringSubmatch(m, -1) {
			b.marker[a[1]] = a[2]
		}
	}
	return b
}

// TestInBrowser loads every case's page in headless Chromium and checks
// the rendered DOM: the page's script ran to its end without an error,
// the culprit node is there and highlighted, the browser logged nothing
// (no script error, no load the policy refused), and it loaded within a
// second. The screenshots are kept (the log says where).
func TestInBrowser(t *testing.T) {
	bin := chromium(t)
	dir := artifactDir(t)
	t.Logf("pages and screenshots in %s", dir)
	t.Run("control", func(t *testing.T) {
		// A page whose script fails and that asks for a network load:
		// the checks below must see both.
		f := filepath.Join(t.TempDir(), "bad.html")
		bad := `<!DOCTYPE html><html><head><meta http-equiv="Content-Security-Policy" content="default-src 'none'; script-src 'unsafe-inline'"></head><body><img src="http://192.0.2.1/x.png"><script>null.x()</script></body></html>`
		if err := os.WriteFile(f, []byte(bad), 0o644); err != nil {
			t.Fatal(err)
		}
		b := browse(t, bin, f, filepath.Join(t.TempDir(), "bad.png"))
		if len(b.console) < 2 {
			t.Fatalf("a failing script and a refused load left %d console lines: %q", len(b.console), b.console)
		}
	})
	for _, c := range cases() {
		t.Run(c.name, func(t *testing.T) {
			page, err := HTML(c.page(t), Options{})
			if err != nil {
				t.Fatal(err)
			}
			f := filepath.Join(dir, c.name+".html")
			if err := os.WriteFile(f, page, 0o644); err != nil {
				t.Fatal(err)
			}
			png := filepath.Join(dir, c.name+".png")
			b := browse(t, bin, f, png)
			if len(b.console) > 0 {
				t.Errorf("the browser logged:\n%s", strings.Join(b.console, "\n"))
			}
			if b.marker["errors"] != "0" {
				t.Fatalf("the page's script did not run to its end: marker %v", b.marker)
			}
			culprits, _ := strconv.Atoi(b.marker["culprits"])
			if c.culprit != (culprits > 0) || !strings.Contains(b.dom, `class="node culprit"`) == c.culprit {
				t.Errorf("culprit nodes rendered: %d, want some: %v", culprits, c.culprit)
			}
			if ms, err := strconv.Atoi(b.marker["load-ms"]); err != nil || ms > 1000 {
				t.Errorf("load: %q ms (want under a second)", b.marker["load-ms"])
			} else {
				t.Logf("%s: %d bytes, loaded in %d ms, screenshot %s", c.name, len(page), ms, png)
			}
			if st, err := os.Stat(png); err != nil || st.Size() == 0 {
				t.Errorf("no screenshot: %v", err)
			}
		})
	}
}

// hostPage plays an MCP Apps host: it frames the page sandboxed as hosts
// do and answers its ui/initialize, recording what the page said.
const hostPage = `<!DOCTYPE html><html><body><div id="host"></div>
<script>
window.addEventListener('message',function(ev){var d=ev.data,log=document.getElementById('host');
if(d.method==='ui/initialize'){log.setAttribute('data-init',d.params.protocolVersion);ev.source.postMessage({jsonrpc:'2.0',id:d.id,result:{protocolVersion:d.params.protocolVersion,hostInfo:{name:'test',version:'0'},hostCapabilities:{},hostContext:{}}},'*');}
if(d.method==='ui/notifications/initialized'){log.setAttribute('data-initialized','1');}
if(d.method==='ui/notifications/size-changed'){log.setAttribute('data-height',String(d.params.height));}
});
</script>
<iframe sandbox="allow-scripts" src="page.html" width="1200" height="600"></iframe>
</body></html>`

// TestMCPAppHandshake: framed by a host, the page says hello as an MCP
// App (ui/initialize with the extension's version, then initialized and
// its height once answered), under its own policy.
func TestMCPAppHandshake(t *testing.T) {
	bin := chromium(t)
	dir := t.TempDir()
	page, err := HTML(diagnosed(stalledJob(8, 3, "all_reduce", "load_batch")), Options{})
	if err != nil {
		t.Fatal(err)
	}
	for name, body := range map[string][]byte{"page.html": page, "host.html": []byte(hostPage)} {
		if err := os.WriteFile(filepath.Join(dir, name), body, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// Site isolation off: the framed page runs in the host's renderer, so
	// the virtual time budget covers its messages and the dump sees the
	// whole exchange, however busy the machine (with the frame in a
	// process of its own it raced the dump).
	cmd := exec.CommandContext(ctx, bin, "--headless", "--disable-gpu", "--no-sandbox", "--no-first-run",
		"--user-data-dir="+t.TempDir(), "--enable-logging=stderr", "--v=0", "--allow-file-access-from-files",
		"--disable-site-isolation-trials", "--disable-features=IsolateOrigins,site-per-process",
		"--virtual-time-budget=5000", "--dump-dom", "file://"+filepath.Join(dir, "host.html"))
	cmd.Dir = t.TempDir()
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("chromium: %v\n%s", err, stderr.String())
	}
	host := regexp.MustCompile(`<div id="host"[^>]*>`).FindString(string(out))
	for _, want := range []string{`data-init="2026-01-26"`, `data-initialized="1"`, `data-height="`} {
		if !strings.Contains(host, want) {
			t.Errorf("the host saw %q, want %s", host, want)
		}
	}
	for _, l := range strings.Split(stderr.String(), "\n") {
		if strings.Contains(l, ":CONSOLE") {
			t.Errorf("the browser logged: %s", l)
		}
	}
}
