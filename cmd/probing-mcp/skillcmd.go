package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/probing-mcp/probing-mcp/mcp"
	"github.com/probing-mcp/probing-mcp/skills"
	"github.com/probing-mcp/probing-mcp/tools"
)

const skillUsage = `Usage:
  probing-mcp skill list [--json]
  probing-mcp skill plan ID [name=value...] [--json]
  probing-mcp skill run ID [name=value...] [--json]
  probing-mcp skill validate [DIR...]        (default: every skill root)
  probing-mcp skill install --agent claude|cursor|codex[,…] [--user]

Scripted diagnoses from the layered skill roots (bundled, repo, user, project, PROBING_SKILLS_DIR),
the same as the MCP tools list_skills, plan_skill and run_skill.
Run "probing-mcp skill SUBCOMMAND --help" for a subcommand's flags.

Examples:
  probing-mcp skill list
  probing-mcp skill run training_hang
  probing-mcp skill install --agent claude
`

// skillAgents are the agents skill install knows (skills.Install's).
var skillAgents = []string{"claude", "cursor", "codex"}

var skillDocs = map[string]cmdDoc{
	"list": {Name: "skill list", Synopsis: "[--json]",
		About:    "List the skills of every root, the root each comes from and what it overrides.",
		Examples: []string{"probing-mcp skill list", "probing-mcp skill list --json"}},
	"plan": {Name: "skill plan", Synopsis: "ID [name=value...] [--json]",
		About: "Show the steps a skill would run with these parameters (SQL bound, tools named), without running them.",
		Examples: []string{"probing-mcp skill plan training_hang",
			"probing-mcp skill plan collective_inflight min_age_s=30 --json"}},
	"run": {Name: "skill run", Synopsis: "ID [name=value...] [--json]",
		About: `Run a skill against this node's job (PROBING_DATA_DIR, PROBING_CTRL_ROOT), as run_skill does,
and print its findings.`,
		Note: "Exit status: 0 when it ran; 1 when it could not, or one of its steps failed; 2 on bad usage.",
		Examples: []string{"probing-mcp skill run training_hang",
			"probing-mcp skill run collective_inflight min_age_s=30",
			"PROBING_DATA_DIR=/dev/shm/probing probing-mcp skill run health_overview --json"}},
	"validate": {Name: "skill validate", Synopsis: "[DIR...]",
		About:    "Parse and check the skills in each DIR (default: every skill root) and list every problem with its file and line.",
		Note:     "Exit status: 0 when no skill has an error (warnings allowed); 1 otherwise.",
		Examples: []string{"probing-mcp skill validate", "probing-mcp skill validate ./my-skills"}},
	"install": {Name: "skill install", Synopsis: "--agent claude|cursor|codex[,...] [--user]",
		About:    "Copy every skill (SKILL.md, steps.yaml) into each agent's skills directory, of this project or (--user) of your home.",
		Examples: []string{"probing-mcp skill install --agent claude", "probing-mcp skill install --agent claude,codex --user"}},
}

// skillCmd is `probing-mcp skill …`: the same skills and runner as the MCP
// tools list_skills, plan_skill and run_skill.
func skillCmd(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && isHelp(args[0]) {
		fmt.Fprint(stdout, skillUsage)
		return 0
	}
	if len(args) == 0 {
		fmt.Fprint(stderr, skillUsage)
		return 2
	}
	doc, ok := skillDocs[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "probing-mcp skill: unknown subcommand %q: want list, plan, run, validate or install\n\n%s", args[0], skillUsage)
		return 2
	}
	fs := newCommand(doc)
	asJSON := new(bool)
	if args[0] != "validate" && args[0] != "install" {
		fs.BoolVar(asJSON, "json", false, "print JSON")
	}
	agents, user := new(string), new(bool)
	if args[0] == "install" {
		fs.StringVar(agents, "agent", "", "the `agents` to copy the skills for: "+strings.Join(skillAgents, ", ")+" (comma-separated)")
		fs.BoolVar(user, "user", false, "into your home instead of the project")
	}
	pos, code, done := parseCommand(fs, doc, args[1:], true, stdout, stderr)
	if done {
		return code
	}
	if len(pos) > 0 && (args[0] == "list" || args[0] == "install") {
		fmt.Fprintf(stderr, "probing-mcp skill %s: unexpected argument %q (probing-mcp skill %s --help)\n", args[0], pos[0], args[0])
		return 2
	}
	fail := func(err error) int {
		fmt.Fprintf(stderr, "probing-mcp skill %s: %v\n", args[0], err)
		return 1
	}
	switch args[0] {
	case "list":
		cat, problems := tools.DefaultSkills()
		if *asJSON {
			return printJSON(stdout, map[string]any{"skills": cat.Skills, "problems": problemTexts(problems)})
		}
		for _, s := range cat.Skills {
			from := s.Root.Label
			if len(s.Shadows) > 0 {
				var sh []string
				for _, r := range s.Shadows {
					sh = append(sh, r.Label)
				}
				from += " (overrides " + strings.Join(sh, ", ") + ")"
			}
			fmt.Fprintf(stdout, "%-22s %-13s %-30s %s\n", s.ID, s.Category, from, firstLineOf(s.Description))
		}
		for _, p := range problems {
			fmt.Fprintf(stdout, "problem: %s\n", p.Error())
		}
		return 0
	case "validate":
		roots := skills.Roots(skills.DefaultRootOptions(skills.Bundled()))
		if len(pos) > 0 {
			roots = nil
			for _, d := range pos {
				roots = append(roots, skills.Root{Label: "arg", Path: d})
			}
		}
		cat, problems := skills.Load(roots)
		for _, p := range problems {
			fmt.Fprintln(stdout, p.Error())
		}
		fmt.Fprintf(stdout, "%d skill(s) loaded, %d problem(s)\n", len(cat.Skills), len(problems))
		for _, p := range problems {
			if !p.Warning {
				return 1
			}
		}
		return 0
	case "install":
		cat, _ := tools.DefaultSkills()
		cwd, _ := os.Getwd()
		home, _ := os.UserHomeDir()
		var list []string
		for _, a := range strings.Split(*agents, ",") {
			if a = strings.TrimSpace(a); a != "" {
				if err := oneOf("agent", a, skillAgents...); err != nil {
					fmt.Fprintf(stderr, "probing-mcp skill install: %v\n", err)
					return 2
				}
				list = append(list, a)
			}
		}
		if len(list) == 0 {
			fmt.Fprintf(stderr, "probing-mcp skill install: which agent? pass --agent %s (comma-separated for several)\n", strings.Join(skillAgents, "|"))
			return 2
		}
		did, err := skills.Install(cat.Skills, skills.InstallOptions{Agents: list, User: *user, Cwd: cwd, Home: home})
		for _, l := range did {
			fmt.Fprintln(stdout, l)
		}
		if err != nil {
			return fail(err)
		}
		return 0
	case "plan", "run":
		if len(pos) == 0 {
			fmt.Fprintf(stderr, "probing-mcp skill %s: which skill? pass its ID, e.g. probing-mcp skill %s training_hang (probing-mcp skill list lists them)\n", args[0], args[0])
			return 2
		}
		params := map[string]string{}
		for _, kv := range pos[1:] {
			k, v, ok := strings.Cut(kv, "=")
			if !ok {
				fmt.Fprintf(stderr, "probing-mcp skill %s: parameter %q: want name=value\n", args[0], kv)
				return 2
			}
			params[k] = v
		}
		logger, err := leveledLogger(stderr, slog.LevelInfo)
		if err != nil {
			return fail(err)
		}
		cfg, err := mcp.ConfigFromEnv(os.Getenv, versionString(), new(slog.LevelVar), logger)
		if err != nil {
			return fail(err)
		}
		var out any
		if args[0] == "plan" {
			out, err = tools.PlanSkill(&cfg.Env, pos[0], params)
		} else {
			out, err = tools.RunSkill(context.Background(), &cfg.Env, pos[0], params)
		}
		if err != nil {
			return fail(err)
		}
		r, isRun := out.(*skills.RunResult)
		if isRun && !*asJSON {
			if err := r.WriteText(stdout); err != nil {
				return fail(err)
			}
		} else if code := printJSON(stdout, out); code != 0 {
			return code
		}
		// A run whose steps failed exits 1, so scripts can tell.
		if isRun && r.Status == skills.StatusError {
			return 1
		}
		return 0
	}
	return 2 // not reached: skillDocs names every subcommand
}

func printJSON(w io.Writer, v any) int {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return 1
	}
	return 0
}

func problemTexts(ps []skills.Problem) []string {
	out := []string{}
	for _, p := range ps {
		out = append(out, p.Error())
	}
	return out
}

func firstLineOf(s string) string {
	line, _, _ := strings.Cut(strings.TrimSpace(s), "\n")
	return line
}
