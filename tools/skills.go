package tools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	mcplib "github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/probing-mcp/probing-mcp/agent"
	"github.com/probing-mcp/probing-mcp/skills"
	"github.com/probing-mcp/probing-mcp/storage/sqlengine"
)

// LoadSkills reads the skill roots afresh on every call, so a team can add
// or edit a playbook without restarting (or rebuilding) the server.
type LoadSkills func() (*skills.Catalog, []skills.Problem)

// DefaultSkills loads the five layered roots: bundled, repo, user,
// project, PROBING_SKILLS_DIR.
func DefaultSkills() (*skills.Catalog, []skills.Problem) {
	return skills.Load(skills.Roots(skills.DefaultRootOptions(skills.Bundled())))
}

// SkillView is one listed skill.
type SkillView struct {
	ID          string   `json:"id"`
	Title       string   `json:"title"`
	Category    string   `json:"category"`
	Description string   `json:"description"`
	Root        string   `json:"root"`
	Shadows     []string `json:"shadows,omitempty"`
	Steps       int      `json:"steps"`
	Entry       bool     `json:"entry,omitempty"`
}

// ListSkillsResult lists the skills and what failed to load.
type ListSkillsResult struct {
	Skills   []SkillView `json:"skills"`
	Problems []string    `json:"problems,omitempty"`
	Omitted  int         `json:"problems_omitted,omitempty"`
}

// ListSkillsParams are the arguments of list_skills.
type ListSkillsParams struct {
	Category string `json:"category,omitempty" jsonschema_description:"Only this category, e.g. triage, distributed, memory"`
}

func listSkills(env *Env) Def {
	tool := mcplib.NewTool("list_skills",
		mcplib.WithToolTitle("List skills"),
		mcplib.WithDescription("Use to find a scripted diagnosis (skill) for a known problem: id, title, category, purpose. Preview one with plan_skill, run it with run_skill."),
		schemas[ListSkillsParams, ListSkillsResult](env),
		hints(true, false, true, false),
	)
	h, call := typed(func(ctx context.Context, p ListSkillsParams) (ListSkillsResult, error) {
		cat, problems := env.Skills()
		res := ListSkillsResult{Skills: []SkillView{}}
		for _, s := range cat.Skills {
			if p.Category != "" && !strings.EqualFold(p.Category, s.Category) {
				continue
			}
			v := SkillView{ID: s.ID, Title: s.Title, Category: s.Category, Description: firstLine(s.Description), Root: s.Root.Label, Entry: s.Entry}
			for _, r := range s.Shadows {
				v.Shadows = append(v.Shadows, r.Label)
			}
			if s.Steps != nil {
				v.Steps = len(s.Steps.Spec.Steps)
			}
			res.Skills = append(res.Skills, v)
		}
		for i, p := range problems {
			if i == maxDQItems {
				res.Omitted = len(problems) - i
				break
			}
			res.Problems = append(res.Problems, p.Error())
		}
		return res, nil
	})
	return Def{ServerTool: server.ServerTool{Tool: tool, Handler: h}, Call: call,
		Summary: "the scripted diagnoses (skills) available, with where each came from",
		Doc:     "The scripted diagnoses (skills) available, with the root each came from (bundled, repo, user, project, env) and which it overrides."}
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(strings.TrimSpace(s), "\n")
	return line
}

// skillByID finds a skill or says which exist.
func skillByID(env *Env, id string) (*skills.Skill, error) {
	cat, _ := env.Skills()
	if s, ok := cat.Get(strings.TrimSpace(id)); ok {
		return s, nil
	}
	var ids []string
	for _, s := range cat.Skills {
		ids = append(ids, s.ID)
	}
	return nil, userErrorf("unknown skill %q; skills here: %s", id, strings.Join(ids, ", "))
}

// SkillParams are the arguments of plan_skill and run_skill.
type SkillParams struct {
	SkillID string            `json:"skill_id" jsonschema:"minLength=1" jsonschema_description:"The skill's id, from list_skills"`
	Params  map[string]string `json:"params,omitempty" jsonschema_description:"Parameter overrides, as text"`
}

// skillBackend runs skill steps against this server: SQL through the
// scope's read-only engine (every node's tables in the whole job, like
// the stacks and the verdict its tool steps read), tool steps through this
// server's read-only tools, called in process, api steps as a GET on the
// lowest-rank live agent of this node.
type skillBackend struct {
	env   *Env
	tools map[string]Call
}

func newSkillBackend(env *Env) *skillBackend {
	b := &skillBackend{env: env, tools: map[string]Call{}}
	for _, d := range All(env) {
		// Skills call read-only tools only, and never themselves.
		if d.Write || strings.HasSuffix(d.Tool.Name, "_skill") || d.Tool.Name == "list_skills" {
			continue
		}
		b.tools[d.Tool.Name] = d.Call
	}
	return b
}

func (b *skillBackend) Query(ctx context.Context, sql string, limit int) (*skills.Table, error) {
	res, err := b.env.scope().Query(ctx, sql, limit)
	if err != nil {
		var qe *sqlengine.Error
		if errors.As(err, &qe) && (qe.Kind == "read_only" || qe.Kind == "multiple" || qe.Kind == "empty") {
			return nil, skills.Refuse(err) // never softened into "skipped"
		}
		return nil, err
	}
	t := &skills.Table{Columns: res.Columns}
	for _, r := range res.Rows {
		t.Rows = append(t.Rows, r.Values())
	}
	if q := res.DataQuality; q != nil && q.NodesAsked > 0 {
		// A whole-job answer: the step says how many nodes it reached.
		return t, &skills.PartialError{NodesQueried: q.NodesAsked, NodesFailed: q.NodesFailed}
	}
	return t, nil
}

// CallTool calls one of this server's read-only tools. Skill arguments are
// text: a value that parses as JSON (a list, a number, true) is passed as
// that JSON value, anything else as a string.
func (b *skillBackend) CallTool(ctx context.Context, name string, args map[string]string) (json.RawMessage, error) {
	call, ok := b.tools[name]
	if !ok {
		return nil, skills.Refuse(fmt.Errorf("tool %s is not available to skills on this server (write tools need PROBING_MCP_ALLOW_WRITE and are never called by skills)", name))
	}
	typedArgs := map[string]any{}
	for k, v := range args {
		var j any
		if err := json.Unmarshal([]byte(v), &j); err == nil {
			typedArgs[k] = j
		} else {
			typedArgs[k] = v
		}
	}
	res, err := call(ctx, typedArgs)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return json.Marshal(res)
}

// ResultText is the text content of a tool result (logs, audits, errors).
func ResultText(res *mcplib.CallToolResult) string {
	var parts []string
	for _, c := range res.Content {
		if t, ok := c.(mcplib.TextContent); ok {
			parts = append(parts, t.Text)
		}
	}
	return strings.Join(parts, "\n")
}

// Get serves api steps: a GET on the lowest-rank live agent of this node.
func (b *skillBackend) Get(ctx context.Context, path string) (string, error) {
	all, err := agent.Discover(b.env.Agents)
	if err != nil {
		return "", err
	}
	live, _ := agent.Select(all, agent.Selection{})
	if len(live) == 0 {
		return "", fmt.Errorf("no live agent on this node to GET %s from", path)
	}
	c, err := agent.NewClient(live[0])
	if err != nil {
		return "", err
	}
	body, err := c.Do(ctx, http.MethodGet, path, nil, "")
	return string(body), err
}

// PeerCount is the scope's other nodes: 0 on a node, so use_global
// resolves to false there unless a skill is told otherwise.
func (b *skillBackend) PeerCount(ctx context.Context) (int, error) { return b.env.scope().Peers(ctx) }

// SkillResources serve skill://{id}: the skill's guidance (SKILL.md) and
// its steps (steps.yaml).
func SkillResources(env *Env) []server.ServerResourceTemplate {
	if env.Skills == nil {
		return nil
	}
	tmpl := mcplib.NewResourceTemplate("skill://{id}", "skill",
		mcplib.WithTemplateDescription("A skill's guidance (SKILL.md) and steps (steps.yaml); ids from list_skills"),
		mcplib.WithTemplateMIMEType("text/markdown"))
	read := func(ctx context.Context, req mcplib.ReadResourceRequest) ([]mcplib.ResourceContents, error) {
		id := strings.TrimPrefix(req.Params.URI, "skill://")
		s, err := skillByID(env, id)
		if err != nil {
			return nil, fmt.Errorf("unknown resource URI: %s", req.Params.URI)
		}
		var out []mcplib.ResourceContents
		md, err := skills.ReadFile(s, "SKILL.md")
		if err == nil {
			out = append(out, mcplib.TextResourceContents{URI: req.Params.URI, MIMEType: "text/markdown", Text: string(md)})
		}
		if y, err := skills.ReadFile(s, "steps.yaml"); err == nil {
			out = append(out, mcplib.TextResourceContents{URI: req.Params.URI + "/steps.yaml", MIMEType: "application/yaml", Text: string(y)})
		}
		if len(out) == 0 {
			return nil, fmt.Errorf("skill %s has no readable files", id)
		}
		return out, nil
	}
	return []server.ServerResourceTemplate{{Template: tmpl, Handler: read}}
}

// PlanSkill expands a skill's steps with the parameters, running nothing.
func PlanSkill(env *Env, id string, params map[string]string) (*skills.PlanResult, error) {
	s, err := skillByID(env, id)
	if err != nil {
		return nil, err
	}
	p, err := skills.Plan(s, params, skills.PlanOptions{})
	if err != nil {
		return nil, &UserError{msg: err.Error()}
	}
	return p, nil
}

// RunSkill runs a skill against this server: SQL in the server's scope, tool
// steps through the read-only tools. A step that needs a write tool is
// refused unless writes are allowed.
func RunSkill(ctx context.Context, env *Env, id string, params map[string]string) (*skills.RunResult, error) {
	s, err := skillByID(env, id)
	if err != nil {
		return nil, err
	}
	writes := map[string]bool{}
	for _, d := range All(env) {
		if d.Write {
			writes[d.Tool.Name] = true
		}
	}
	r, err := skills.Run(ctx, s, params, newSkillBackend(env), skills.RunOptions{WriteTools: writes, AllowWrite: env.AllowWrite})
	if err != nil {
		return nil, &UserError{msg: err.Error()}
	}
	return r, nil
}

func planSkill(env *Env) Def {
	tool := mcplib.NewTool("plan_skill",
		mcplib.WithToolTitle("Plan a skill"),
		mcplib.WithDescription("Use to see what a skill would run, running nothing: its parameters and every step expanded (SQL, tool calls), and the steps it would skip."),
		schemas[SkillParams, skills.PlanResult](env),
		hints(true, false, true, false),
	)
	h, call := typed(func(ctx context.Context, p SkillParams) (planAnswer, error) {
		r, err := PlanSkill(env, p.SkillID, p.Params)
		return planAnswer{r}, err
	})
	return Def{ServerTool: server.ServerTool{Tool: tool, Handler: h}, Call: call,
		Summary: "a skill's steps expanded, without running them",
		Doc:     "A skill's steps expanded with the parameters (the SQL, the tool calls), nothing run."}
}

// RunSkillResult documents skills.RunResult for the output schema: step
// rows are objects keyed by column (column order kept), which the schema
// reflector cannot see through the rows' custom encoding.
type RunSkillResult struct {
	SkillID    string            `json:"skill_id"`
	Title      string            `json:"title"`
	Parameters map[string]string `json:"parameters"`
	Steps      []struct {
		StepID      string              `json:"step_id"`
		Title       string              `json:"title"`
		Status      string              `json:"status"`
		RowCount    *int                `json:"row_count,omitempty"`
		Note        string              `json:"note,omitempty"`
		ClusterMeta *skills.ClusterMeta `json:"cluster_meta,omitempty"`
		Columns     []string            `json:"columns,omitempty"`
		Rows        []map[string]any    `json:"rows,omitempty"`
		Text        string              `json:"text,omitempty"`
		View        string              `json:"view,omitempty"`
		Reason      string              `json:"reason,omitempty"`
		Message     string              `json:"message,omitempty"`
		Truncated   bool                `json:"truncated,omitempty"`
		DurationMS  int64               `json:"duration_ms"`
	} `json:"steps"`
	Findings    []skills.Finding   `json:"findings"`
	Summary     string             `json:"summary"`
	NextSteps   []string           `json:"next_steps"`
	Status      string             `json:"status"`
	DataQuality skills.DataQuality `json:"data_quality"`
	Truncated   bool               `json:"truncated,omitempty"`
	DurationMS  int64              `json:"duration_ms"`
}

func runSkill(env *Env) Def {
	tool := mcplib.NewTool("run_skill",
		mcplib.WithToolTitle("Run a skill"),
		mcplib.WithDescription("Use to run a skill from list_skills: each step's status and bounded data, its findings, a summary and next steps."),
		schemas[SkillParams, RunSkillResult](env),
		hints(true, false, false, false),
	)
	h, call := typed(func(ctx context.Context, p SkillParams) (runAnswer, error) {
		r, err := RunSkill(ctx, env, p.SkillID, p.Params)
		return runAnswer{r}, err
	})
	return Def{ServerTool: server.ServerTool{Tool: tool, Handler: h}, Call: call,
		Summary: "run a scripted diagnosis: steps, findings, summary",
		Doc:     "Run a skill: each step's status and bounded data, findings (error/warning/info), summary and next steps."}
}
