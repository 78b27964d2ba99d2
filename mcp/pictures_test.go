package mcp

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	mcplib "github.com/mark3labs/mcp-go/mcp"

	"github.com/probing-mcp/probing-mcp/picture"
)

// TestDiagnosePictureLinked: diagnose_hang's answer (no job here: the
// state is unknown) links its page in _meta and nowhere else, and the
// page says what it shows; pages past maxPictures are dropped, oldest
// first, and a dropped one is an error that says so.
func TestDiagnosePictureLinked(t *testing.T) {
	s, _ := testServer(t, false, "")
	c := connect(t, s)
	res, err := call(t, c, "diagnose_hang", map[string]any{})
	if err != nil || res.IsError {
		t.Fatalf("diagnose_hang: %v %+v", err, res)
	}
	ui, _ := res.Meta.AdditionalFields["ui"].(map[string]any)
	uri, _ := ui["resourceUri"].(string)
	if uri != PictureURI+"1" {
		t.Fatalf("_meta %+v, want ui.resourceUri %s1", res.Meta, PictureURI)
	}
	sc, _ := json.Marshal(res.StructuredContent)
	for _, c := range res.Content {
		if tc, ok := c.(mcplib.TextContent); ok && strings.Contains(tc.Text, "ui://") {
			t.Errorf("the text names the page: %s", tc.Text)
		}
	}
	if strings.Contains(string(sc), "ui://") {
		t.Errorf("the structured content names the page")
	}
	rr, err := c.ReadResource(context.Background(), mcplib.ReadResourceRequest{Params: mcplib.ReadResourceParams{URI: uri}})
	if err != nil || len(rr.Contents) != 1 {
		t.Fatalf("read %s: %v %+v", uri, err, rr)
	}
	tc := rr.Contents[0].(mcplib.TextResourceContents)
	if tc.MIMEType != picture.MIMEType || !strings.Contains(tc.Text, "No rank was found") {
		t.Errorf("page %s: %s %.300s", uri, tc.MIMEType, tc.Text)
	}
	v, _ := picturesFor.Load(s)
	ps := v.(*pictureStore)
	for i := 0; i < maxPictures; i++ {
		ps.add("diagnose_hang", picture.Page{Title: "t", State: "unknown"})
	}
	if _, err := ps.get("1"); err == nil || !strings.Contains(err.Error(), "is not kept") {
		t.Errorf("the oldest page past the bound: %v", err)
	}
	if p, err := ps.get("latest"); err != nil || p.id != maxPictures+1 {
		t.Errorf("latest: %v %d", err, p.id)
	}
}
