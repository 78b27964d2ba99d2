package skills

import "io/fs"

// The types mirror Probing's steps.yaml, SKILL.md front matter and
// catalog.yaml (contract §6.1–§6.2, §6.8) field for field; the few
// extensions of this dialect are marked. Each value remembers its line so a
// later check (a rule, a template) can still name where it came from.

// Root is one skill directory layer. Bundled roots read from FS; the others
// from Path on disk.
type Root struct {
	Label string // bundled, repo, user, project, env
	Path  string // directory on disk; for bundled, a description of the FS
	FS    fs.FS  `json:"-"`
}

// Skill is one loaded skill: SKILL.md and, when present, steps.yaml.
type Skill struct {
	ID          string
	Title       string
	Category    string
	Description string
	Priority    int
	Entry       bool
	Catalogued  bool // listed in some root's catalog.yaml
	Keywords    []string
	Guidance    string       // SKILL.md body, for agents
	Front       *FrontMatter // nil without SKILL.md
	Steps       *StepsFile   // nil for a guide-only skill without steps.yaml
	Root        Root         // the root it was loaded from
	Shadows     []Root       // lower roots holding the same id, lowest first
	Dir         string       // the skill directory, for messages
}

// FrontMatter is SKILL.md's YAML header (§6.1).
type FrontMatter struct {
	Name        string
	Description string
	Category    string
	Tables      []string
	Tags        []string
	Keywords    Keywords
	Parameters  []Parameter // only name, type and default are meaningful
}

// Keywords are routing words by language.
type Keywords struct {
	En []string
	Zh []string
}

// StepsFile is steps.yaml (§6.2).
type StepsFile struct {
	File       string // path used in messages
	APIVersion string
	Kind       string
	Metadata   Metadata
	Spec       Spec
}

// Metadata is steps.yaml's metadata block.
type Metadata struct {
	ID       string
	Title    string
	TitleEn  string
	Category string
	Docs     string // trimmed
	Tags     []string
	Triggers Keywords // metadata.triggers.keywords
}

// Spec is steps.yaml's spec block.
type Spec struct {
	Parameters      []Parameter
	RequiresTables  []string // spec.requires.any_tables: reported, not enforced
	Steps           []Step
	Variables       []Variable // in file order; they must not chain
	Rules           []Rule     // spec.interpretation.rules
	SummaryTemplate string     // trimmed
	NextSteps       []string
	// VerdictStep (spec.interpretation.verdict_step, an extension) names
	// a tool step that calls diagnose_hang: the run's findings and summary
	// are that diagnosis, so a skill never names a rank by its own rules.
	VerdictStep string
}

// ParamType is a parameter's declared type.
type ParamType string

const (
	TypeString  ParamType = "string" // the default
	TypeInteger ParamType = "integer"
	TypeNumber  ParamType = "number"
	TypeBoolean ParamType = "boolean"
	// Extensions of this dialect.
	TypeEnum  ParamType = "enum"  // one of Choices
	TypeRanks ParamType = "ranks" // a rank set "0-3,7", rendered "0,1,2,3,7"
)

// Parameter is one spec.parameters[] entry.
type Parameter struct {
	Name        string
	Type        ParamType
	Default     string // canonical text; "" with HasDefault false when absent
	HasDefault  bool
	Description string
	Required    bool     // extension: no default, the caller must give one
	Choices     []string // extension: for enum
	Line        int
}

// StepType is a step's kind.
type StepType string

const (
	StepSQL    StepType = "sql" // the default
	StepAPI    StepType = "api"
	StepUI     StepType = "ui"
	StepConfig StepType = "config"
	StepTool   StepType = "tool" // extension: call one of this server's tools
)

// Step is one spec.steps[] entry.
type Step struct {
	ID           string
	Title        string
	Type         StepType
	SQL          string
	Tool         string            // extension: tool name, for tool steps
	Args         map[string]string // extension: tool arguments (templates)
	Method       string            // api: GET only
	Path         string
	View         string
	Action       string
	OnEmpty      string // skip (default), warn, abort
	EmptyMessage string
	When         string // "", "always", or containing "use_global"
	Cluster      bool
	Platform     string // "", linux, macos, windows
	Line         int
	SQLLine      int // line of the sql value, for template errors
}

// Variable is one spec.variables entry: a name and its template.
type Variable struct {
	Name     string
	Template string
	Line     int
}

// Severity of a finding, as Probing names them.
type Severity string

const (
	SeverityError   Severity = "error"
	SeverityWarning Severity = "warning"
	SeverityInfo    Severity = "info" // the default
)

// Rule is one interpretation rule, its `when` parsed at load.
type Rule struct {
	ID       string
	When     string
	Cond     *Cond
	Severity Severity
	Message  string
	Line     int
}

// Category is one catalog.yaml category.
type Category struct {
	ID          string
	Label       string
	Description string
}

// CatalogEntry is one catalog.yaml skills[] entry.
type CatalogEntry struct {
	ID          string
	Category    string
	Priority    int
	Entry       bool
	Description string
	Tables      []string
	Pages       []string
	Related     []string
	Path        string
	File        string
	Line        int
}

// CatalogFile is one root's catalog.yaml.
type CatalogFile struct {
	File       string
	Categories []Category
	Skills     []CatalogEntry
}
