package picture

import (
	"html/template"
	"io"
	"time"
)

// Entry is one diagnosis in an index of pages.
type Entry struct {
	// Href is the page's link, relative to the index.
	Href    string
	Kind    string
	Made    time.Time
	State   string
	Summary string
}

var indexTmpl = template.Must(template.New("index").Parse(`<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{{.CSP}}">
<title>probing-mcp: diagnoses</title><style>{{.Style}}</style></head>
<body><header><h1>Diagnoses</h1><p class="from">Read only: this server's newest answers, then the history's newest diagnoses. Each page is self-contained.</p></header>
{{- range .Sections}}
<section><h2>{{.Title}}</h2>
{{- if .Entries}}<ul class="ev">{{range .Entries}}<li><a href="{{.Href}}">{{.Made}}</a> <span class="src">{{.Kind}}</span> {{if .State}}<span class="state sev-{{.Sev}}">{{.State}}</span>{{end}} {{.Summary}}</li>{{end}}</ul>
{{- else}}<p class="none">{{.Empty}}</p>{{end}}
</section>
{{- end}}
</body></html>
`))

// Section is a titled list of an index.
type Section struct {
	Title, Empty string
	Entries      []Entry
}

// RenderIndex writes a page listing diagnoses' pages, newest first: job
// text (the summaries) clipped and escaped like the pages'.
func RenderIndex(w io.Writer, sections []Section) error {
	type row struct{ Href, Kind, Made, State, Sev, Summary string }
	type sec struct {
		Title, Empty string
		Entries      []row
	}
	data := struct {
		CSP      string
		Style    template.CSS
		Sections []sec
	}{CSP: indexCSP, Style: template.CSS(style)}
	for _, s := range sections {
		out := sec{Title: s.Title, Empty: s.Empty}
		for _, e := range s.Entries {
			out.Entries = append(out.Entries, row{Href: e.Href, Kind: clip(e.Kind, 40), Made: e.Made.UTC().Format("2006-01-02 15:04:05 UTC"),
				State: clip(e.State, 40), Sev: severity(e.State), Summary: clip(e.Summary, 2*MaxText)})
		}
		data.Sections = append(data.Sections, out)
	}
	return indexTmpl.Execute(w, data)
}

// indexCSP: the index runs no script at all.
var indexCSP = "default-src 'none'; style-src '" + hash(style) + "'; base-uri 'none'; form-action 'none'"

// CSP is the pages' Content-Security-Policy, for a server to send as a
// header too.
func CSP() string { return csp }
