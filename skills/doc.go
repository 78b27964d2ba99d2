// Package skills will load scripted diagnoses (Probing-compatible skill
// bundles: SKILL.md plus steps.yaml) from layered skill directories and run
// them over the tools. Nothing is implemented yet: see the "skills" issue.
package skills
