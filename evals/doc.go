// Package evals checks the diagnoses end to end against cases with known
// answers: real Flight Recorder dumps of faulty gloo jobs (testdata/fr/real,
// made with torch 2.15) and what torch's own fr_trace concluded about them.
// It holds tests and the benchmark tools under bench/, no library code.
package evals
