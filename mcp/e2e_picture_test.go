package mcp_test

import (
	"encoding/json"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/probing-mcp/probing-mcp/mcp"
)

// pictureTemplate is the pages' resource template.
const pictureTemplate = mcp.PictureURI + "{id}"

// resourceURI is the MCP App link of a call's result (_meta.ui.resourceUri).
func resourceURI(c e2eCall) string {
	ui, _ := c.Meta["ui"].(map[string]any)
	s, _ := ui["resourceUri"].(string)
	return s
}

// TestE2EStdioPictureApp: through the official Python client, an
// analyze_flight_recorder answer links its page in the result's _meta
// (its text and structured content carry no trace of it), and the page
// reads back as an MCP App resource (text/html;profile=mcp-app) with the
// culprit node highlighted; diagnose_hang's answer (no job here) links
// its own, the newest (latest); an unknown page is an error that says
// which are kept.
func TestE2EStdioPictureApp(t *testing.T) {
	t.Parallel()
	h := e2eSetup(t)
	env := h.serverEnv(t, "PROBING_ALLOWED_FILE_DIRS="+h.fr(""))
	args := slices.Concat(
		e2eArgs("analyze_flight_recorder", map[string]any{"paths": []string{h.fr("missing_rank")}}),
		e2eArgs("diagnose_hang", map[string]any{}),
		[]string{"--read", mcp.PictureURI + "1", "--read", mcp.PictureURI + "latest", "--read", mcp.PictureURI + "999", "--read", mcp.PictureURI + "abc"},
	)
	out := h.stdio(t, env, "stdio-list", args...)
	out.mustOK(t)
	if len(out.Calls) != 2 || out.Calls[0].IsError || out.Calls[1].IsError {
		t.Fatalf("calls: %+v", out.Calls)
	}
	// diagnose_hang with no job here: its page says there is nothing to
	// draw, and is the newest.
	if got := resourceURI(out.Calls[1]); got != mcp.PictureURI+"2" {
		t.Errorf("diagnose_hang's _meta %v, want ui.resourceUri %s2", out.Calls[1].Meta, mcp.PictureURI)
	}
	c := out.Calls[0]
	if got := resourceURI(c); got != mcp.PictureURI+"1" {
		t.Errorf("result _meta %v, want ui.resourceUri %s", c.Meta, mcp.PictureURI+"1")
	}
	if strings.Contains(c.Text, "ui://") || strings.Contains(string(c.StructuredContent), "ui://") || strings.Contains(string(c.StructuredContent), `"analysis"`) {
		t.Errorf("the page's link leaked into the text or the structured content")
	}
	var tmpl bool
	for _, rt := range out.Templates {
		tmpl = tmpl || rt.URITemplate == pictureTemplate && rt.MIMEType == "text/html;profile=mcp-app"
	}
	if !tmpl {
		t.Errorf("no %s template of type text/html;profile=mcp-app in %+v", pictureTemplate, out.Templates)
	}
	if len(out.Reads) != 4 {
		t.Fatalf("%d reads", len(out.Reads))
	}
	for i, want := range []string{`class="node culprit"`, "No rank was found"} {
		r := out.Reads[i]
		if r.Error != nil || len(r.Contents) != 1 {
			t.Fatalf("read %s: %+v", r.URI, r)
		}
		p := r.Contents[0]
		if p.MIMEType != "text/html;profile=mcp-app" || !strings.HasPrefix(p.Text, "<!DOCTYPE html>") || !strings.Contains(p.Text, want) {
			t.Errorf("read %s: %s, want %q in %.200s", r.URI, p.MIMEType, want, p.Text)
		}
	}
	if e := out.Reads[2].Error; e == nil || !strings.Contains(e.Message, "is not kept") {
		t.Errorf("read of an unknown page: %+v, want an error saying which are kept", out.Reads[2])
	}
	if e := out.Reads[3].Error; e == nil || !strings.Contains(e.Message, "want a number or latest") {
		t.Errorf("read of a bad id: %+v, want an error saying what an id is", out.Reads[3])
	}
}

// TestE2EHTTPPictures: serve --http with a token serves the diagnoses'
// pages read only, behind the same token as /mcp: the index lists this
// server's answer and the history's diagnosis, each page is HTML under a
// policy that forbids loads, a write is refused, an unknown page is 404.
func TestE2EHTTPPictures(t *testing.T) {
	t.Parallel()
	h := e2eSetup(t)
	const token = "s3cret-pictures"
	srv := h.startHTTP(t, h.serverEnv(t, "PROBING_AUTH_TOKEN="+token, "PROBING_ALLOWED_FILE_DIRS="+h.fr("")))
	out := h.http(t, srv.url, "http-call", slices.Concat([]string{"--header", "Authorization: Bearer " + token},
		e2eArgs("analyze_flight_recorder", map[string]any{"paths": []string{h.fr("subgroup_missing")}}))...)
	out.mustOK(t)
	if len(out.Calls) != 1 || out.Calls[0].IsError || resourceURI(out.Calls[0]) != mcp.PictureURI+"1" {
		t.Fatalf("calls: %+v", out.Calls)
	}
	var sc struct {
		HistoryID int64 `json:"history_id"`
	}
	if err := json.Unmarshal(out.Calls[0].StructuredContent, &sc); err != nil || sc.HistoryID == 0 {
		t.Fatalf("no history id in the answer: %v %s", err, out.Calls[0].StructuredContent)
	}
	bearer := "Bearer " + token
	if resp, _ := httpDo(t, http.MethodGet, srv.base+"/diagnoses/", "", ""); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("GET /diagnoses/ without the token: %d, want 401", resp.StatusCode)
	}
	resp, index := httpDo(t, http.MethodGet, srv.base+"/diagnoses/", bearer, "")
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") {
		t.Fatalf("GET /diagnoses/: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	hist := regexp.MustCompile(`href="([0-9]+)\.html"`).FindStringSubmatch(index)
	if !strings.Contains(index, `href="call-1.html"`) || hist == nil || hist[1] != itoa64(sc.HistoryID) {
		t.Fatalf("the index does not link this server's answer and history row %d:\n%s", sc.HistoryID, index)
	}
	for _, page := range []string{"call-1.html", hist[1] + ".html"} {
		resp, body := httpDo(t, http.MethodGet, srv.base+"/diagnoses/"+page, bearer, "")
		if resp.StatusCode != http.StatusOK || !strings.Contains(resp.Header.Get("Content-Security-Policy"), "default-src 'none'") ||
			resp.Header.Get("X-Content-Type-Options") != "nosniff" || !strings.Contains(body, `class="node culprit"`) {
			t.Errorf("GET %s: %d, CSP %q, %.300s", page, resp.StatusCode, resp.Header.Get("Content-Security-Policy"), body)
		}
	}
	if resp, _ := httpDo(t, http.MethodPost, srv.base+"/diagnoses/call-1.html", bearer, "{}"); resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST a page: %d, want 405", resp.StatusCode)
	}
	for _, page := range []string{"999999.html", "call-77.html", "x.txt", "..%2f..%2fetc%2fpasswd"} {
		if resp, body := httpDo(t, http.MethodGet, srv.base+"/diagnoses/"+page, bearer, ""); resp.StatusCode != http.StatusNotFound {
			t.Errorf("GET %s: %d %.200s, want 404", page, resp.StatusCode, body)
		}
	}
}

func itoa64(n int64) string { b, _ := json.Marshal(n); return string(b) }
