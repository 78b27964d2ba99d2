package main

import (
	"context"
	"encoding/json"
	"flag"
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
`

// skillCmd is `probing-mcp skill …`: the same skills and runner as the MCP
// tools list_skills, plan_skill and run_skill.
func skillCmd(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, skillUsage)
		return 2
	}
	fs := flag.NewFlagSet("skill "+args[0], flag.ContinueOnError)
	fs.SetOutput(stderr)
	asJSON := fs.Bool("json", false, "print JSON")
	agents := fs.String("agent", "", "install: `agents` to copy the skills for (claude, cursor, codex; comma-separated)")
	user := fs.Bool("user", false, "install: into the user's home instead of the project")
	pos, err := parseInterleaved(fs, args[1:])
	if err != nil {
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
				list = append(list, a)
			}
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
			fmt.Fprintf(stderr, "probing-mcp skill %s: which skill? (probing-mcp skill list)\n", args[0])
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
		cfg, err := mcp.ConfigFromEnv(os.Getenv, versionString(), new(slog.LevelVar), slog.New(slog.NewTextHandler(stderr, nil)))
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
	fmt.Fprintf(stderr, "probing-mcp skill: unknown subcommand %q\n\n%s", args[0], skillUsage)
	return 2
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
