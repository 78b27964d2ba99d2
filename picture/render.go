package picture

import (
	"bytes"
	"crypto/sha256"
	_ "embed"
	"encoding/base64"
	"html/template"
	"io"
	"os"
	"time"

	"github.com/probing-mcp/probing-mcp/internal/safefile"
)

// MIMEType is the MCP Apps (SEP-1865) type of the page as a resource.
const MIMEType = "text/html;profile=mcp-app"

//go:embed page.html.tmpl
var pageText string

var pageTmpl = template.Must(template.New("page").Parse(pageText))

// style and script are constants, allowed by their hashes in the page's
// Content-Security-Policy: nothing else runs, nothing is fetched. The
// script reads no job text (only the DOM the template escaped) and marks
// the page rendered, for the browser test. Framed by an MCP Apps host
// (SEP-1865), it says hello as a View does (ui/initialize, then
// initialized and its size once the host answers): the messages carry
// nothing of the job, so they go to any parent ('*').
const style = `
body{font:13px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;margin:0 24px 24px;color:#1d2330;background:#fff}
header{border-bottom:1px solid #dde;padding:8px 0 6px}
h1{font-size:20px;margin:10px 0 4px}h2{font-size:15px;margin:18px 0 4px}h3{font-size:13px;margin:10px 0 2px}
.state{font-size:12px;padding:2px 8px;border-radius:10px;background:#e8eaf0;vertical-align:middle}
.sev-bad{background:#fde2e1;color:#9b1c12}.sev-ok{background:#e2f5e6;color:#1b6b32}.sev-warn{background:#fff2d6;color:#7a5200}
.summary{font-size:14px;margin:4px 0}.why,.from{color:#555;margin:2px 0}
.shows{margin:6px 0;padding-left:18px;color:#4a4a7a}.none{color:#777;font-style:italic}
.legend{color:#555;margin:2px 0 6px}.k{display:inline-block;padding:0 6px;border-radius:4px;border:1px solid #bbb;margin-right:4px}
.k.culprit{background:#fde2e1;border-color:#c0392b}.k.victim{opacity:.55;background:#e8eef8}.k.other{background:#f2f2f2}
.k.cycle{border:1px dashed #d35400;color:#d35400}.k.left{background:#cfe0f5}.k.inside{background:#ffe4a8}
.k.stuck{background:#ffe4a8;border:2px solid #c0392b}.k.never{border:1px dashed #c0392b;color:#c0392b}.k.odd{background:#ffd9b3}
.scroll{overflow-x:auto;max-width:100%;border:1px solid #eef;border-radius:6px;background:#fcfcfe}
svg text{font:12px system-ui,sans-serif;fill:#1d2330}
.node rect{fill:#f2f3f5;stroke:#9aa;stroke-width:1}.node{cursor:pointer}
.node.culprit rect{fill:#fde2e1;stroke:#c0392b;stroke-width:3}.node.victim{opacity:.55}.node.victim rect{fill:#e8eef8}
.node.sel rect{stroke:#2255cc;stroke-width:3}.node.sel{opacity:1}
.nr{font-weight:600}.nw{font-family:ui-monospace,monospace;fill:#9b1c12}
.edge path{fill:none;stroke:#778;stroke-width:1.6}.edge.cycle path{stroke:#d35400;stroke-dasharray:6 3;stroke-width:2}
.edge .el{font-size:11px;fill:#445}.edge.hi path{stroke:#2255cc;stroke-width:3}.edge.lo{opacity:.2}.ah{fill:#778}
.op rect{fill:#cfe0f5;stroke:#7fa3d1}.op.inside rect{fill:#ffe4a8;stroke:#d89b00}.op.stuck rect{stroke:#c0392b;stroke-width:2.5}
.op.never rect{fill:#fff;stroke:#c0392b;stroke-dasharray:4 3}.lo{font-size:11px}.ll{font-weight:600}.lane.victim .ll{fill:#667}
.lane.culprit .ll{fill:#9b1c12}.tk{font-size:11px;fill:#666}.tk.end{text-anchor:end}.nv{stroke:#ccc;stroke-dasharray:2 3}
.bar rect{fill:#f3c98b;stroke:#fff}.bar.odd rect{fill:#ef8a5a}.ft{font-size:11px}
.ev,.dq{padding-left:18px}.ev li,.dq li,.shows li,.summary,.why{overflow-wrap:anywhere}.ev li.head{font-weight:600;margin-top:6px;list-style:square}
.src{display:inline-block;min-width:88px;color:#666;font-size:11px;font-family:ui-monospace,monospace}
footer{margin-top:24px;color:#888;font-size:11px}
`

const script = `(function(){
var errs=0;
try{
var nodes=document.querySelectorAll('#g .node'),edges=document.querySelectorAll('#g .edge');
function focus(id){
nodes.forEach(function(n){n.classList.toggle('sel',n.getAttribute('data-node')===id);});
edges.forEach(function(e){var on=e.getAttribute('data-from')===id||e.getAttribute('data-to')===id;e.classList.toggle('hi',on);e.classList.toggle('lo',!on);});
}
nodes.forEach(function(n){
n.addEventListener('click',function(){focus(n.getAttribute('data-node'));});
n.addEventListener('keydown',function(ev){if(ev.key==='Enter'){focus(n.getAttribute('data-node'));}});
});
}catch(e){errs++;}
var m=document.createElement('div');
m.id='rendered';m.hidden=true;
m.setAttribute('data-nodes',String(document.querySelectorAll('#g .node').length));
m.setAttribute('data-culprits',String(document.querySelectorAll('#g .node.culprit').length));
m.setAttribute('data-errors',String(errs));
document.body.appendChild(m);
window.addEventListener('load',function(){m.setAttribute('data-load-ms',String(Math.round(performance.now())));});
if(window.parent&&window.parent!==window){
var id=1,done=false;
var send=function(msg){try{window.parent.postMessage(msg,'*');}catch(e){}};
var size=function(){send({jsonrpc:'2.0',method:'ui/notifications/size-changed',params:{width:document.documentElement.scrollWidth,height:document.documentElement.scrollHeight}});};
window.addEventListener('message',function(ev){
var d=ev.data;
if(ev.source!==window.parent||done||!d||d.jsonrpc!=='2.0'||d.id!==id){return;}
done=true;
send({jsonrpc:'2.0',method:'ui/notifications/initialized',params:{}});
size();
});
send({jsonrpc:'2.0',id:id,method:'ui/initialize',params:{protocolVersion:'2026-01-26',appInfo:{name:'probing-mcp diagnosis',version:'1'},appCapabilities:{}}});
}
})();`

// severity colours a state: a hang or a Flight Recorder problem is bad,
// a job that moves ok, the rest (slow, paused, unknown) a warning.
func severity(state string) string {
	switch state {
	case "":
		return ""
	case "healthy", "OK":
		return "ok"
	case "slow", "paused", "progressing", "unknown":
		return "warn"
	}
	return "bad"
}

// csp forbids every load: only the page's own style and script run.
var csp = "default-src 'none'; img-src data:; style-src '" + hash(style) + "'; script-src '" + hash(script) + "'; base-uri 'none'; form-action 'none'"

func hash(s string) string {
	h := sha256.Sum256([]byte(s))
	return "sha256-" + base64.StdEncoding.EncodeToString(h[:])
}

// Options are what a page says besides its model.
type Options struct {
	// Made is when the diagnosis was made (zero: not said).
	Made time.Time
}

// Render writes the page: one HTML document, its drawings laid out here.
func Render(w io.Writer, p Page, o Options) error {
	data := struct {
		Page   Page
		CSP    string
		Style  template.CSS
		Script template.JS
		Made   string
		Sev    string
		Graph  *svgGraph
		Lanes  svgLanes
		Flames []svgFlame
	}{Page: p, CSP: csp, Style: template.CSS(style), Script: template.JS(script), Sev: severity(p.State)}
	if !o.Made.IsZero() {
		data.Made = o.Made.UTC().Format("2006-01-02 15:04:05 UTC")
	}
	if len(p.Graph.Nodes) > 0 {
		g := layoutGraph(p.Graph)
		data.Graph = &g
	}
	data.Lanes = layoutLanes(p.Lanes, p.LaneAxis)
	for _, f := range p.Flames {
		data.Flames = append(data.Flames, layoutFlame(f))
	}
	return pageTmpl.Execute(w, data)
}

// HTML is the page as bytes.
func HTML(p Page, o Options) ([]byte, error) {
	var b bytes.Buffer
	if err := Render(&b, p, o); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// WriteFile writes the page to path, a regular file of this user's
// (created 0644, or truncated; never through a symbolic link).
func WriteFile(path string, p Page, o Options) error {
	page, err := HTML(p, o)
	if err != nil {
		return err
	}
	f, err := safefile.Open(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write(page); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
