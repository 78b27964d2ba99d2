// Package skills loads scripted diagnoses: skill bundles compatible with
// Probing's (contract §6), a directory per skill holding SKILL.md (YAML front
// matter plus guidance for agents) and an optional steps.yaml (parameters,
// steps, variables, interpretation rules, summary, next steps), with an
// optional catalog.yaml per root.
//
// It is a domain package with no MCP imports: it parses, validates, layers
// and expands skills, runs their steps against a Backend the caller
// supplies (tools implements it over the SQL engine, the server's read-only
// tools and the agents; the CLI uses the same), and evaluates rules over
// the evidence.
//
//   - decode.go: YAML as yaml.Node with limits (1 MiB per file, alias and
//     nesting budgets) and strict fields: an unknown key at any level is
//     `<file>:<line>: unknown field "x" in <where> (known: …)`.
//   - parse.go: steps.yaml, SKILL.md front matter, catalog.yaml.
//   - template.go: typed parameters, Probing's derived variables, and the
//     injection policy (string parameters only inside '…' in SQL).
//   - rule.go: the `when` grammar, parsed at load, evaluated over evidence.
//   - roots.go, loader.go: the five layered roots and Load.
//   - run.go, plan.go: Run (steps, evidence, findings, summary, bounded
//     result) and Plan (expanded steps, nothing run); render.go: text.
//   - bundled/, bundled.go: the eight skills embedded in the binary.
//   - install.go: copying skills into Claude/Cursor/Codex skill dirs.
package skills
