package tools

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"time"

	mcplib "github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/probing-mcp/probing-mcp/agent"
)

// SetConfigParams are the arguments of set_config (Probing's names).
type SetConfigParams struct {
	Key   string `json:"key" jsonschema:"minLength=1" jsonschema_description:"Config key (probing. prefix optional): probing.mcp.* are this server's, others the agents' (get_config lists them)"`
	Value string `json:"value" jsonschema_description:"New value, as text"`
	PIDs  []int  `json:"pids,omitempty" jsonschema_description:"Processes whose agent gets the key (default: every live agent here)"`
	Ranks string `json:"ranks,omitempty" jsonschema_description:"Global ranks whose agent gets the key, e.g. 0-3,7"`
}

// SetConfigResult reports the change.
type SetConfigResult struct {
	Status       string `json:"status"`
	Key          string `json:"key"`
	Previous     string `json:"previous"`
	Value        string `json:"value"`
	WriteEnabled bool   `json:"write_enabled"`
	// Processes: one entry per agent written to (agent keys only).
	Processes []ProcessSet `json:"processes,omitempty"`
}

// ProcessSet is one agent's answer to a config write.
type ProcessSet struct {
	PID      int    `json:"pid"`
	Rank     int    `json:"rank"`
	Previous string `json:"previous,omitempty"`
	Value    string `json:"value,omitempty"`
	Error    string `json:"error,omitempty"`
}

// serverKey is a runtime setting of this server that set_config can change.
type serverKey struct {
	get func(env *Env) string
	set func(env *Env, v string) error
}

var serverKeys = map[string]serverKey{
	"probing.mcp.loglevel": {
		get: func(env *Env) string { return strings.ToLower(env.LogLevel.Level().String()) },
		set: func(env *Env, v string) error {
			l, err := ParseLogLevel(v)
			if err != nil {
				return userErrorf("value %q for probing.mcp.loglevel is not one of debug, info, warn, error", v)
			}
			env.LogLevel.Set(l)
			return nil
		},
	},
}

func setConfig(env *Env) Def {
	tool := mcplib.NewTool("set_config",
		mcplib.WithToolTitle("Change a config key"),
		mcplib.WithDescription("Use to change a runtime setting: this server's own ("+strings.Join(sortedServerKeys(), ", ")+
			"), or an agent key (get_config lists them) on the processes named by pids/ranks, else every live agent. Audited."),
		schemas[SetConfigParams, SetConfigResult](env),
		hints(false, false, true, false),
	)
	h, call := typed(func(ctx context.Context, p SetConfigParams) (SetConfigResult, error) {
		key := strings.TrimSpace(p.Key)
		if key == "" || strings.ContainsAny(key, "=;'\"") {
			return SetConfigResult{}, userErrorf("config key %q is empty or contains invalid characters (= ; ' \")", p.Key)
		}
		if !strings.HasPrefix(key, "probing.") {
			key = "probing." + key
		}
		k, ok := serverKeys[key]
		if !ok && strings.HasPrefix(key, "probing.mcp.") {
			return SetConfigResult{}, userErrorf("unknown server key %s; this server has: %s", key, strings.Join(sortedServerKeys(), ", "))
		}
		if !ok {
			return setAgentConfig(ctx, env, key, p)
		}
		if len(p.PIDs) > 0 || p.Ranks != "" {
			return SetConfigResult{}, userErrorf("%s is this server's setting; do not pass pids or ranks with it", key)
		}
		prev := k.get(env)
		if err := k.set(env, p.Value); err != nil {
			return SetConfigResult{}, err
		}
		env.Logger.Info("config changed", "key", key, "from", prev, "to", k.get(env))
		return SetConfigResult{Status: "ok", Key: key, Previous: prev, Value: k.get(env), WriteEnabled: true}, nil
	})
	return Def{ServerTool: server.ServerTool{Tool: tool, Handler: h}, Call: call, Write: true,
		Summary: "change a runtime setting (audited)",
		Doc:     "Change a runtime setting: the server's own (`probing.mcp.loglevel`), or an agent key on the chosen processes. Only registered when writes are allowed; audited."}
}

// ParseLogLevel reads a level name as PROBING_LOGLEVEL spells it: debug,
// info, warn or error (trace, warning and off are accepted as aliases).
func ParseLogLevel(v string) (slog.Level, error) {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "", "info":
		return slog.LevelInfo, nil
	case "trace", "debug":
		return slog.LevelDebug, nil
	case "warn", "warning":
		return slog.LevelWarn, nil
	case "error", "off":
		return slog.LevelError, nil
	}
	return 0, fmt.Errorf("log level %q: want debug, info, warn or error", v)
}

func sortedServerKeys() []string {
	keys := make([]string, 0, len(serverKeys))
	for k := range serverKeys {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// setAgentConfig writes key on the selected agents, each independently:
// one process failing does not stop the others, and each says how it went.
func setAgentConfig(ctx context.Context, env *Env, key string, p SetConfigParams) (SetConfigResult, error) {
	targets, _, err := agentsFor(env, Target{PIDs: p.PIDs, Ranks: p.Ranks})
	if err != nil {
		return SetConfigResult{}, userErrorf("%s is not one of this server's keys (%s), so it goes to the training processes' agents: %v",
			key, strings.Join(sortedServerKeys(), ", "), err)
	}
	res := SetConfigResult{Status: "ok", Key: key, Value: p.Value, WriteEnabled: true}
	results := make(map[int]ProcessSet, len(targets))
	var mu sync.Mutex
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	errs := agent.ForEach(ctx, targets, 16, func(ctx context.Context, a *agent.Agent) error {
		r, err := agent.SetConfig(ctx, a, key, p.Value)
		if err != nil {
			return err
		}
		ps := ProcessSet{PID: a.PID, Rank: a.Rank(), Value: r.Value}
		if r.Previous != nil {
			ps.Previous = *r.Previous
		}
		mu.Lock()
		results[a.PID] = ps
		mu.Unlock()
		return nil
	})
	failed := 0
	for _, a := range targets {
		ps, ok := results[a.PID]
		if !ok {
			ps = ProcessSet{PID: a.PID, Rank: a.Rank(), Error: fmt.Sprint(errs[a.PID])}
			failed++
		}
		res.Processes = append(res.Processes, ps)
	}
	switch {
	case failed == len(targets):
		return res, userErrorf("%s was not set on any process: %s", key, res.Processes[0].Error)
	case failed > 0:
		res.Status = "partial"
	}
	env.Logger.Info("agent config changed", "key", key, "processes", len(targets), "failed", failed)
	return res, nil
}
