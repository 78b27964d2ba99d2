// Package skills loads scripted diagnoses: skill bundles compatible with
// Probing's (contract §6), a directory per skill holding SKILL.md (YAML front
// matter plus guidance for agents) and an optional steps.yaml (parameters,
// steps, variables, interpretation rules, summary, next steps), with an
// optional catalog.yaml per root.
//
// It is a domain package: it parses, validates, layers and expands, and
// evaluates rules over results it is given; it runs nothing and imports no
// MCP code. The runner (tools) executes the ExpandedSteps.
//
//   - decode.go: YAML as yaml.Node with limits (1 MiB per file, alias and
//     nesting budgets) and strict fields: an unknown key at any level is
//     `<file>:<line>: unknown field "x" in <where> (known: …)`.
//   - parse.go: steps.yaml, SKILL.md front matter, catalog.yaml.
//   - template.go: typed parameters, Probing's derived variables, and the
//     injection policy (string parameters only inside '…' in SQL).
//   - rule.go: the `when` grammar, parsed at load, evaluated over evidence.
//   - roots.go, loader.go: the five layered roots and Load.
package skills
