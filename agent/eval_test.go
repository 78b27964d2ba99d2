package agent_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/probing-mcp/probing-mcp/agent"
)

// The server's switch is enough: a job started without PROBING_ALLOW_EVAL
// serves eval on its peer-checked control socket.
func TestEvalServedWithoutTheJobOptingIn(t *testing.T) {
	p := startAgent(t, "secret = 41\n"+idle, "PROBING_ALLOW_EVAL=")
	a := p.agent(t)
	if !a.Identity.EvalAllowed || agent.EvalRefusal(a) != "" {
		t.Fatalf("identity of a job without PROBING_ALLOW_EVAL: eval_allowed=%v, refusal %q", a.Identity.EvalAllowed, agent.EvalRefusal(a))
	}
	r, err := agent.Eval(context.Background(), a, "print(secret + 1)", 5*time.Second)
	if err != nil || r.Status != "ok" || strings.TrimSpace(r.Output) != "42" {
		t.Fatalf("eval in a job without PROBING_ALLOW_EVAL: %+v %v", r, err)
	}
}

// PROBING_ALLOW_EVAL=0 is the job's opt-out, read from the identity before
// any call: the socket is not even dialled.
func TestEvalOptOutRefusedFromTheIdentity(t *testing.T) {
	p := startAgent(t, idle, "PROBING_ALLOW_EVAL=0")
	a := p.agent(t)
	if a.Identity.EvalAllowed {
		t.Fatal("PROBING_ALLOW_EVAL=0 must give eval_allowed false")
	}
	unreachable := *a
	unreachable.Socket = "/nonexistent/probing-mcp-test.sock"
	_, err := agent.Eval(context.Background(), &unreachable, "1+1", 5*time.Second)
	var ae *agent.Error
	if !errors.As(err, &ae) || ae.Kind != "denied" || !strings.Contains(ae.Msg, "opted out") || !strings.Contains(ae.Msg, "PROBING_ALLOW_EVAL") {
		t.Fatalf("an opted-out job: want a denial naming PROBING_ALLOW_EVAL without a call, got %v", err)
	}
	// The agent itself refuses too, with its own reason.
	c, err := agent.NewClient(a)
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Do(context.Background(), "POST", "/apis/pythonext/eval", []byte("1+1"), "text/plain")
	if !errors.As(err, &ae) || ae.Status != 403 || !strings.Contains(ae.Msg, "PROBING_ALLOW_EVAL=0") {
		t.Fatalf("the agent of an opted-out job: want 403 naming PROBING_ALLOW_EVAL=0, got %v", err)
	}
}

// An agent from before 0.2.0 says eval_allowed=false when the job lacked
// PROBING_ALLOW_EVAL=1: the error says that, and how to get the new agent.
func TestEvalOlderAgentNamesItsRule(t *testing.T) {
	a := &agent.Agent{PID: 4242, Kind: agent.KindOurs, Alive: true, Socket: "/nonexistent/probing-mcp-test.sock",
		Identity: &agent.Identity{Agent: "probing-mcp", AgentVersion: "0.1.0", PID: 4242}}
	_, err := agent.Eval(context.Background(), a, "1+1", time.Second)
	if err == nil || !strings.Contains(err.Error(), "pid 4242: its agent (probing-mcp 0.1.0)") ||
		!strings.Contains(err.Error(), "PROBING_ALLOW_EVAL=1") || !strings.Contains(err.Error(), "probing-mcp agent install") {
		t.Fatalf("an older agent: %v", err)
	}
	for _, v := range []string{"0.2.0", "0.10.1", "1.0", "dev", ""} {
		a.Identity.AgentVersion = v
		if why := agent.EvalRefusal(a); !strings.Contains(why, "opted out") {
			t.Errorf("agent %q with eval_allowed false: %q", v, why)
		}
	}
	a.Identity.EvalAllowed = true
	if why := agent.EvalRefusal(a); why != "" {
		t.Errorf("eval_allowed true: %q", why)
	}
	a.Kind, a.Identity.EvalAllowed = agent.KindProbing, false
	if why := agent.EvalRefusal(a); why != "" {
		t.Errorf("the original Probing agent has no such field: %q", why)
	}
}

func TestEvalCodeSizeChecked(t *testing.T) {
	a := &agent.Agent{PID: 4242, Kind: agent.KindOurs, Socket: "/nonexistent/probing-mcp-test.sock"}
	_, err := agent.Eval(context.Background(), a, strings.Repeat("#", agent.MaxEvalCode+1), time.Second)
	if err == nil || !strings.Contains(err.Error(), "at most 4194304") {
		t.Fatalf("oversized code: %v", err)
	}
}
