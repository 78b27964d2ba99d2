package mcp

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	mcplib "github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/probing-mcp/probing-mcp/picture"
	"github.com/probing-mcp/probing-mcp/storage/history"
	"github.com/probing-mcp/probing-mcp/tools"
)

// PictureURI is the MCP App resource (SEP-1865) of the page of a
// diagnose_hang or analyze_flight_recorder answer: ui://probing-mcp/
// diagnosis/<n>, or .../latest for the newest. Each such answer links
// its page in the result's _meta (ui.resourceUri); the text and the
// structured content stay what they were, for the clients that render no
// apps.
const (
	PictureURI      = "ui://probing-mcp/diagnosis/"
	pictureTemplate = PictureURI + "{id}"
	// maxPictures pages are kept, per server, newest first; each is a
	// bounded model (picture's bounds), rendered when read.
	maxPictures = 32
	// historyListed is how many of the history's diagnoses the HTTP
	// index lists.
	historyListed = 20
)

// pictureStore keeps this server's newest pages.
type pictureStore struct {
	mu      sync.Mutex
	next    int64
	pages   []storedPicture // oldest first
	history *history.Store
	logger  *slog.Logger
}

type storedPicture struct {
	id   int64
	tool string
	made time.Time
	page picture.Page
}

var picturesFor sync.Map // *server.MCPServer → *pictureStore

// withPictures makes the pages of the diagnosing tools' answers: a tool
// middleware that draws each answer and links it, and the resource
// template that serves them. hist, when set, is listed by the HTTP door.
func withPictures(hist *history.Store, logger *slog.Logger) server.ServerOption {
	return func(s *server.MCPServer) {
		ps := &pictureStore{history: hist, logger: logger}
		picturesFor.Store(s, ps)
		server.WithToolHandlerMiddleware(ps.middleware)(s)
		s.AddResourceTemplate(mcplib.NewResourceTemplate(pictureTemplate, "diagnosis picture",
			mcplib.WithTemplateDescription("The page of a diagnose_hang or analyze_flight_recorder answer (an MCP App): who waits for whom, lanes, stacks"),
			mcplib.WithTemplateMIMEType(picture.MIMEType)), ps.read)
	}
}

// pageOf draws a diagnosing tool's answer; ok is false for any other.
func pageOf(content any) (picture.Page, bool) {
	switch r := content.(type) {
	case tools.DiagnoseHangResult:
		return picture.FromDiagnosis(&r.Report), true
	case tools.AnalyzeFlightRecorderResult:
		if a := r.Analysis(); a != nil {
			return picture.FromFlightRecorder(a), true
		}
	}
	return picture.Page{}, false
}

func (ps *pictureStore) middleware(next server.ToolHandlerFunc) server.ToolHandlerFunc {
	return func(ctx context.Context, req mcplib.CallToolRequest) (*mcplib.CallToolResult, error) {
		res, err := next(ctx, req)
		if err != nil || res == nil || res.IsError {
			return res, err
		}
		ps.link(req.Params.Name, res)
		return res, nil
	}
}

// link draws res and puts its page's URI in res._meta. A picture that
// fails is logged and left out: never a reason to withhold the answer.
func (ps *pictureStore) link(tool string, res *mcplib.CallToolResult) {
	defer func() {
		if p := recover(); p != nil && ps.logger != nil {
			ps.logger.Error("the answer's picture failed; the answer goes without it", "tool", tool, "panic", fmt.Sprint(p))
		}
	}()
	page, ok := pageOf(res.StructuredContent)
	if !ok {
		return
	}
	id := ps.add(tool, page)
	if res.Meta == nil {
		res.Meta = &mcplib.Meta{}
	}
	if res.Meta.AdditionalFields == nil {
		res.Meta.AdditionalFields = map[string]any{}
	}
	res.Meta.AdditionalFields["ui"] = map[string]any{"resourceUri": PictureURI + strconv.FormatInt(id, 10)}
}

func (ps *pictureStore) add(tool string, page picture.Page) int64 {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	ps.next++
	ps.pages = append(ps.pages, storedPicture{id: ps.next, tool: tool, made: time.Now(), page: page})
	if n := len(ps.pages) - maxPictures; n > 0 {
		ps.pages = append(ps.pages[:0], ps.pages[n:]...)
	}
	return ps.next
}

// get is page id ("latest": the newest).
func (ps *pictureStore) get(id string) (storedPicture, error) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if len(ps.pages) == 0 {
		return storedPicture{}, fmt.Errorf("no diagnosis has been drawn by this server yet: call diagnose_hang or analyze_flight_recorder first")
	}
	if id == "latest" {
		return ps.pages[len(ps.pages)-1], nil
	}
	n, err := strconv.ParseInt(id, 10, 64)
	if err != nil || n <= 0 {
		return storedPicture{}, fmt.Errorf("%q is not a diagnosis page: want a number or latest", clipID(id))
	}
	for _, p := range ps.pages {
		if p.id == n {
			return p, nil
		}
	}
	return storedPicture{}, fmt.Errorf("diagnosis page %d is not kept (this server keeps its newest %d; the oldest kept is %d)", n, maxPictures, ps.pages[0].id)
}

func (ps *pictureStore) list() []storedPicture {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	out := make([]storedPicture, len(ps.pages))
	for i, p := range ps.pages {
		out[len(ps.pages)-1-i] = p
	}
	return out
}

func clipID(s string) string {
	if len(s) > 40 {
		return s[:40] + "…"
	}
	return s
}

// read serves resources/read of a page.
func (ps *pictureStore) read(ctx context.Context, req mcplib.ReadResourceRequest) ([]mcplib.ResourceContents, error) {
	id, ok := strings.CutPrefix(req.Params.URI, PictureURI)
	if !ok {
		return nil, fmt.Errorf("%q is not a diagnosis page (%s<n>)", clipID(req.Params.URI), PictureURI)
	}
	p, err := ps.get(id)
	if err != nil {
		return nil, err
	}
	html, err := picture.HTML(p.page, picture.Options{Made: p.made})
	if err != nil {
		return nil, err
	}
	return []mcplib.ResourceContents{mcplib.TextResourceContents{URI: req.Params.URI, MIMEType: picture.MIMEType, Text: string(html)}}, nil
}

// pictureRoutes adds the read-only pages to an HTTP server's routes:
// <base>/diagnoses/ lists this server's newest answers and the history's
// newest diagnoses; <base>/diagnoses/call-<n>.html and <id>.html are
// their pages. Behind the same auth and limits as /mcp.
func pictureRoutes(s *server.MCPServer, extra map[string]http.Handler) map[string]http.Handler {
	v, ok := picturesFor.Load(s)
	if !ok {
		return extra
	}
	out := make(map[string]http.Handler, len(extra)+1)
	for p, h := range extra {
		out[p] = h
	}
	out["/diagnoses/"] = v.(*pictureStore)
	return out
}

// ServeHTTP answers GET (and HEAD) under /diagnoses/.
func (ps *pictureStore) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		writeHTTPError(w, http.StatusMethodNotAllowed, "the diagnoses' pages are read only", "use GET")
		return
	}
	name := r.URL.Path[strings.LastIndex(r.URL.Path, "/diagnoses/")+len("/diagnoses/"):]
	var body bytes.Buffer
	var err error
	switch {
	case name == "":
		err = picture.RenderIndex(&body, ps.index())
	case strings.HasPrefix(name, "call-") && strings.HasSuffix(name, ".html"):
		var p storedPicture
		if p, err = ps.get(strings.TrimSuffix(strings.TrimPrefix(name, "call-"), ".html")); err != nil {
			writeHTTPError(w, http.StatusNotFound, err.Error(), "list them at diagnoses/")
			return
		}
		err = picture.Render(&body, p.page, picture.Options{Made: p.made})
	case strings.HasSuffix(name, ".html"):
		page, made, perr := ps.recorded(strings.TrimSuffix(name, ".html"))
		if perr != nil {
			writeHTTPError(w, http.StatusNotFound, perr.Error(), "list them at diagnoses/")
			return
		}
		err = picture.Render(&body, page, picture.Options{Made: made})
	default:
		writeHTTPError(w, http.StatusNotFound, "no diagnosis page "+strconv.Quote(clipID(name)), "list them at diagnoses/")
		return
	}
	if err != nil {
		writeHTTPError(w, http.StatusInternalServerError, "the page could not be drawn: "+err.Error(), "")
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Content-Security-Policy", picture.CSP())
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Cache-Control", "no-store")
	h.Set("Referrer-Policy", "no-referrer")
	w.WriteHeader(http.StatusOK)
	if r.Method == http.MethodGet {
		_, _ = w.Write(body.Bytes())
	}
}

// recorded is the page of the history's diagnosis id.
func (ps *pictureStore) recorded(id string) (picture.Page, time.Time, error) {
	n, err := strconv.ParseInt(id, 10, 64)
	if err != nil || n <= 0 {
		return picture.Page{}, time.Time{}, fmt.Errorf("no diagnosis page %q: want <history id>.html or call-<n>.html", clipID(id))
	}
	if ps.history == nil {
		return picture.Page{}, time.Time{}, fmt.Errorf("this server keeps no history (PROBING_MCP_HISTORY is off or unavailable)")
	}
	rows, err := ps.history.Diagnoses(history.ListOptions{Limit: 1, BeforeID: n + 1})
	if err != nil {
		return picture.Page{}, time.Time{}, err
	}
	if len(rows) == 0 || rows[0].ID != n {
		return picture.Page{}, time.Time{}, fmt.Errorf("the history has no diagnosis %d", n)
	}
	page, err := picture.FromRecorded(rows[0].Kind, rows[0].Report)
	return page, rows[0].CreatedAt, err
}

// index lists this server's pages, then the history's newest diagnoses.
func (ps *pictureStore) index() []picture.Section {
	mine := picture.Section{Title: "This server's newest answers", Empty: "None yet: call diagnose_hang or analyze_flight_recorder."}
	for _, p := range ps.list() {
		mine.Entries = append(mine.Entries, picture.Entry{Href: "call-" + strconv.FormatInt(p.id, 10) + ".html", Kind: p.tool,
			Made: p.made, State: p.page.State, Summary: p.page.Summary})
	}
	hist := picture.Section{Title: "The history's newest diagnoses", Empty: "This server keeps no history (PROBING_MCP_HISTORY)."}
	if ps.history != nil {
		hist.Empty = "The history holds no diagnosis yet (the watcher's and analyze_flight_recorder's are kept)."
		rows, err := ps.history.Diagnoses(history.ListOptions{Limit: historyListed})
		if err != nil {
			hist.Empty = "The history could not be read: " + err.Error()
		}
		for _, d := range rows {
			hist.Entries = append(hist.Entries, picture.Entry{Href: strconv.FormatInt(d.ID, 10) + ".html", Kind: d.Kind, Made: d.CreatedAt,
				State: "", Summary: d.Verdict})
		}
	}
	return []picture.Section{mine, hist}
}
