// Package evals checks the diagnoses end to end against cases with known
// answers: real Flight Recorder dumps of faulty gloo jobs (testdata/fr/real,
// made with torch 2.15) and what torch's own fr_trace concluded about them;
// and the scored corpus, real jobs that hang on purpose (jobs/: one fault per
// scenario, its truth in the launcher's ready file) diagnosed through
// diagnose_hang by score.py, whose torch-free part TestCorpusTorchFree runs;
// and the scripted agent harness (agent.py, score.py --agent), which replays
// an assistant's investigation of each case as the server's guidance says and
// measures its calls, characters and consistency, run by the TestAgentHarness
// tests. It holds tests, the jobs, the harnesses and the benchmark tools under
// bench/, no library code.
package evals
