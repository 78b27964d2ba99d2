package tools

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"strings"

	mcplib "github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
)

// SetConfigParams are the arguments of set_config (Probing's names).
type SetConfigParams struct {
	Key   string `json:"key" jsonschema:"Config key, with or without the probing. prefix, e.g. probing.mcp.loglevel"`
	Value string `json:"value" jsonschema:"New value, as text"`
}

// SetConfigResult reports the change.
type SetConfigResult struct {
	Status       string `json:"status"`
	Key          string `json:"key"`
	Previous     string `json:"previous"`
	Value        string `json:"value"`
	WriteEnabled bool   `json:"write_enabled"`
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
		mcplib.WithDescription("Change a runtime config key. Supported keys: "+strings.Join(sortedServerKeys(), ", ")+
			" (this server's own settings). Every call is written to the audit log."),
		mcplib.WithInputSchema[SetConfigParams](),
		mcplib.WithOutputSchema[SetConfigResult](),
		hints(false, false, true, false),
	)
	h := typed(func(ctx context.Context, p SetConfigParams) (SetConfigResult, error) {
		key := strings.TrimSpace(p.Key)
		if key == "" || strings.ContainsAny(key, "=;'\"") {
			return SetConfigResult{}, userErrorf("config key %q is empty or contains invalid characters (= ; ' \")", p.Key)
		}
		if !strings.HasPrefix(key, "probing.") {
			key = "probing." + key
		}
		k, ok := serverKeys[key]
		if !ok {
			return SetConfigResult{}, userErrorf("unknown config key %s; supported: %s", key, strings.Join(sortedServerKeys(), ", "))
		}
		prev := k.get(env)
		if err := k.set(env, p.Value); err != nil {
			return SetConfigResult{}, err
		}
		env.Logger.Info("config changed", "key", key, "from", prev, "to", k.get(env))
		return SetConfigResult{Status: "ok", Key: key, Previous: prev, Value: k.get(env), WriteEnabled: true}, nil
	})
	return Def{ServerTool: server.ServerTool{Tool: tool, Handler: h}, Write: true,
		Summary: "change a runtime setting (audited)"}
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
