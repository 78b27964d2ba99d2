package agent_test

import (
	"context"
	"os"
	"testing"

	"github.com/probing-mcp/probing-mcp/agent"
	"github.com/probing-mcp/probing-mcp/internal/metrics/metricstest"
)

func stackSource(t *testing.T, source string) float64 {
	return metricstest.Value(t, "probing_mcp_stack_captures_total", map[string]string{"source": source})
}

func agentCalls(t *testing.T, result string) float64 {
	return metricstest.Value(t, "probing_mcp_agent_calls_total", map[string]string{"result": result})
}

// TestStackSourcesAreCounted: a capture the agent answers counts as
// source agent and an ok call; a process without an agent as proc.
func TestStackSourcesAreCounted(t *testing.T) {
	code := "import time\nprint('READY', flush=True)\nwhile True: time.sleep(0.05)\n"
	p := startAgent(t, code)
	srcBefore, okBefore := stackSource(t, "agent"), agentCalls(t, "ok")
	if st := agent.Stacks(context.Background(), p.agent(t), agent.StackOptions{}); st.Source != "agent" {
		t.Fatalf("source %q (%s), want agent", st.Source, st.Err)
	}
	if got := stackSource(t, "agent"); got < srcBefore+1 {
		t.Errorf("stack_captures_total{source=agent}: %v -> %v, want one more", srcBefore, got)
	}
	if got := agentCalls(t, "ok"); got < okBefore+1 {
		t.Errorf("agent_calls_total{result=ok}: %v -> %v, want one more", okBefore, got)
	}

	procBefore := stackSource(t, "proc")
	if st := agent.Stacks(context.Background(), &agent.Agent{PID: os.Getpid()}, agent.StackOptions{}); st.Source != "proc" {
		t.Fatalf("no agent: source %q, want proc", st.Source)
	}
	if got := stackSource(t, "proc"); got < procBefore+1 {
		t.Errorf("stack_captures_total{source=proc}: %v -> %v, want one more", procBefore, got)
	}
}
