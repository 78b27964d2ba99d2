package tools

import (
	"encoding/json"
	"fmt"
	"reflect"
	"sync"

	"github.com/invopop/jsonschema"
	mcplib "github.com/mark3labs/mcp-go/mcp"
)

// Schemas are reflected from the Params and Result structs with
// invopop/jsonschema rather than mcp-go's reflection, because clients
// differ in what they accept: mcp-go writes an optional value as a type
// array (["null","array"]), which the MCP Inspector 0.15 turns into a text
// box that sends a string, and which strict validators flag. Here every
// property has one type; required follows the json tags (no omitempty:
// required); enums and bounds come from `jsonschema:"…"` tags and the text
// from `jsonschema_description:"…"`.

// reflector is shared: invopop's Reflector is stateless between calls.
var reflector = &jsonschema.Reflector{
	// One self-contained object per tool: clients resolve no $refs.
	DoNotReference: true,
	ExpandedStruct: true,
	Anonymous:      true,
}

// schemaCache holds each type's schema: a tool is built once per server,
// but tests build many servers.
var schemaCache sync.Map // reflect.Type+mode → json.RawMessage

type schemaKey struct {
	t     reflect.Type
	input bool
}

// schemaJSON reflects t. An input schema refuses unknown properties (and
// typed refuses them too, naming the valid ones); an output schema lets a
// newer server add fields.
func schemaJSON(t reflect.Type, input bool) json.RawMessage {
	k := schemaKey{t, input}
	if v, ok := schemaCache.Load(k); ok {
		return v.(json.RawMessage)
	}
	r := *reflector
	r.AllowAdditionalProperties = !input
	s := r.ReflectFromType(t)
	s.Version = "" // no $schema: clients assume draft 2020-12 for MCP
	b, err := json.Marshal(s)
	if err != nil {
		// A Params struct that cannot be described is a programming
		// error caught by every test that builds the tools.
		panic(fmt.Sprintf("schema of %v: %v", t, err))
	}
	v, _ := schemaCache.LoadOrStore(k, json.RawMessage(b))
	return v.(json.RawMessage)
}

// schemas sets a tool's input schema from P and, when the server lists
// them (env.OutputSchemas), its output schema from R. Output schemas are
// left out by default: they were 62% of tools/list and the model reads the
// text content, not the schema of the structured one.
func schemas[P, R any](env *Env) mcplib.ToolOption {
	in := schemaJSON(reflect.TypeFor[P](), true)
	var out json.RawMessage
	if env != nil && env.OutputSchemas {
		out = schemaJSON(reflect.TypeFor[R](), false)
	}
	return func(t *mcplib.Tool) {
		t.InputSchema = mcplib.ToolInputSchema{}
		t.RawInputSchema = in
		t.OutputSchema = mcplib.ToolOutputSchema{}
		t.RawOutputSchema = out
	}
}

// OutputSchema is R's reflected output schema, for the tests that check a
// result against what a client told to validate would accept.
func OutputSchema[R any]() json.RawMessage { return schemaJSON(reflect.TypeFor[R](), false) }
