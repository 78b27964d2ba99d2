package tracing

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/probing-mcp/probing-mcp/internal/envswitch"
)

// The variables Setup reads. The OTEL_* ones are OpenTelemetry's own (the
// exporters read the endpoint, headers, timeout and TLS ones themselves,
// by the OTLP exporter specification); OTEL_EXPORT_ENABLED is NVIDIA
// Dynamo's gate, so one job's settings switch both on.
const (
	EnvExportEnabled  = "OTEL_EXPORT_ENABLED"
	EnvSDKDisabled    = "OTEL_SDK_DISABLED"
	EnvEndpoint       = "OTEL_EXPORTER_OTLP_ENDPOINT"
	EnvTracesEndpoint = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
	EnvProtocol       = "OTEL_EXPORTER_OTLP_PROTOCOL"
	EnvTracesProtocol = "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"
	EnvHeaders        = "OTEL_EXPORTER_OTLP_HEADERS"
	EnvTracesHeaders  = "OTEL_EXPORTER_OTLP_TRACES_HEADERS"
	EnvServiceName    = "OTEL_SERVICE_NAME"
	EnvTraceArgs      = "PROBING_MCP_TRACE_ARGS"
)

// Protocols an exporter speaks.
const (
	ProtocolGRPC = "grpc"
	ProtocolHTTP = "http/protobuf"
)

// DefaultServiceName is service.name unless OTEL_SERVICE_NAME (or
// OTEL_RESOURCE_ATTRIBUTES) says another.
const DefaultServiceName = "probing-mcp"

// Options shape Setup.
type Options struct {
	// Version is service.version.
	Version string
	// Role is the process's part ("server", "node"), the resource's
	// probing.role: the coordinator and its daemons share a service name.
	Role   string
	Logger *slog.Logger
	// QueueSize bounds the spans waiting for export (default
	// OTEL_BSP_MAX_QUEUE_SIZE, else 2048); past it spans are dropped and
	// counted, never waited for.
	QueueSize int
	// BatchTimeout is the longest a span waits to be sent (default
	// OTEL_BSP_SCHEDULE_DELAY, else 5 s).
	BatchTimeout time.Duration
	// ExportTimeout bounds one batch's export, retries included (default
	// 30 s); the spans of a batch that runs out of it are lost.
	ExportTimeout time.Duration
}

// Config is what the environment asks for.
type Config struct {
	Enabled    bool
	Protocol   string // ProtocolGRPC or ProtocolHTTP
	Endpoint   string // as set ("" for the exporter's default, localhost)
	RecordArgs bool
}

// ConfigFromEnv reads the variables; a value that cannot be meant is an
// error naming the variable and what it takes.
func ConfigFromEnv(getenv func(string) string) (Config, error) {
	var c Config
	var err error
	if c.Enabled, err = envswitch.Parse(EnvExportEnabled, getenv(EnvExportEnabled)); err != nil {
		return c, err
	}
	if c.RecordArgs, err = envswitch.Parse(EnvTraceArgs, getenv(EnvTraceArgs)); err != nil {
		return c, err
	}
	if off, _ := envswitch.Parse(EnvSDKDisabled, getenv(EnvSDKDisabled)); off {
		c.Enabled = false // the specification's kill switch wins
	}
	c.Protocol = ProtocolGRPC
	for _, k := range []string{EnvTracesProtocol, EnvProtocol} {
		v := strings.TrimSpace(getenv(k))
		if v == "" {
			continue
		}
		switch v {
		case ProtocolGRPC, ProtocolHTTP:
			c.Protocol = v
		case "http/json":
			return c, fmt.Errorf("%s=%q: OTLP over JSON is not supported; use grpc or http/protobuf", k, v)
		default:
			return c, fmt.Errorf("%s=%q: want grpc or http/protobuf", k, v)
		}
		break
	}
	for _, k := range []string{EnvTracesEndpoint, EnvEndpoint} {
		v := strings.TrimSpace(getenv(k))
		if v == "" {
			continue
		}
		u, err := url.Parse(v)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return c, fmt.Errorf("%s=%q: want the collector's URL, e.g. http://collector:4317 (grpc) or http://collector:4318 (http/protobuf); https for TLS", k, v)
		}
		if c.Endpoint == "" {
			c.Endpoint = v
		}
	}
	for _, k := range []string{EnvTracesHeaders, EnvHeaders} {
		// Each entry key=value; the values (tokens) are never echoed.
		for i, kv := range strings.Split(getenv(k), ",") {
			if strings.TrimSpace(kv) == "" {
				continue
			}
			if key, _, ok := strings.Cut(kv, "="); !ok || strings.TrimSpace(key) == "" {
				return c, fmt.Errorf("%s: entry %d is not key=value (want e.g. authorization=Bearer%%20TOKEN,x-tenant=a)", k, i+1)
			}
		}
	}
	return c, nil
}

// Setup starts tracing when the environment asks for it (OTEL_EXPORT_ENABLED
// true) and returns the function that flushes and stops it within its
// context's time (always callable; a no-op when off). An endpoint set
// while export is off is said once: the operator may have forgotten the
// gate.
func Setup(ctx context.Context, opt Options) (shutdown func(context.Context) error, err error) {
	none := func(context.Context) error { return nil }
	if opt.Logger == nil {
		opt.Logger = slog.New(slog.DiscardHandler)
	}
	cfg, err := ConfigFromEnv(os.Getenv)
	if err != nil {
		return none, err
	}
	if !cfg.Enabled {
		if cfg.Endpoint != "" {
			opt.Logger.Info("an OTLP endpoint is set but "+EnvExportEnabled+" is not true: no traces are exported", "endpoint", cfg.Endpoint)
		}
		return none, nil
	}
	exp, err := newExporter(ctx, cfg.Protocol, cfg.Endpoint)
	if err != nil {
		return none, fmt.Errorf("the OTLP trace exporter (%s): %w", cfg.Protocol, err)
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(attribute.String("service.name", DefaultServiceName), attribute.String("service.version", opt.Version)),
		resource.WithAttributes(attribute.String("probing.role", opt.Role)),
		resource.WithHost(), resource.WithProcessPID(), resource.WithTelemetrySDK(),
		resource.WithFromEnv(), // OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES: last, so they win
	)
	if err != nil && res == nil {
		return none, fmt.Errorf("the trace resource: %w", err)
	}
	stop := install(exp, res, opt, cfg.RecordArgs)
	endpoint := cfg.Endpoint
	if endpoint == "" {
		endpoint = map[string]string{ProtocolGRPC: DefaultGRPCEndpoint, ProtocolHTTP: DefaultHTTPEndpoint}[cfg.Protocol]
	}
	opt.Logger.Info("exporting traces over OTLP", "protocol", cfg.Protocol, "endpoint", endpoint, "record_args", cfg.RecordArgs)
	return stop, nil
}

// newExporter makes the OTLP exporter; it reads the endpoint, headers,
// timeout, compression and TLS variables itself. Neither dials here: a
// collector that is down costs nothing until spans are sent.
func newExporter(ctx context.Context, protocol, endpoint string) (sdktrace.SpanExporter, error) {
	if protocol == ProtocolHTTP {
		var opts []otlptracehttp.Option
		if endpoint == "" {
			opts = append(opts, otlptracehttp.WithEndpointURL(DefaultHTTPEndpoint))
		}
		return otlptracehttp.New(ctx, opts...)
	}
	var opts []otlptracegrpc.Option
	if endpoint == "" {
		opts = append(opts, otlptracegrpc.WithEndpointURL(DefaultGRPCEndpoint))
	}
	return otlptracegrpc.New(ctx, opts...)
}

// The specification's default endpoints, plain text: the Go exporters'
// own defaults would try TLS to a local collector, which seldom has it.
const (
	DefaultGRPCEndpoint = "http://localhost:4317"
	DefaultHTTPEndpoint = "http://localhost:4318/v1/traces"
)

// install makes exp the destination of every span: a batch processor with
// a bounded queue behind the drop counter, the global provider set (a
// library's spans join ours), and returns the shutdown.
func install(exp sdktrace.SpanExporter, res *resource.Resource, opt Options, recordArgs bool) func(context.Context) error {
	if opt.QueueSize <= 0 {
		opt.QueueSize = envInt("OTEL_BSP_MAX_QUEUE_SIZE", 2048)
	}
	if opt.BatchTimeout <= 0 {
		opt.BatchTimeout = time.Duration(envInt("OTEL_BSP_SCHEDULE_DELAY", 5000)) * time.Millisecond
	}
	if opt.ExportTimeout <= 0 {
		opt.ExportTimeout = 30 * time.Second
	}
	d := &dropCounter{max: int64(opt.QueueSize), logger: opt.Logger}
	bsp := sdktrace.NewBatchSpanProcessor(&countingExporter{SpanExporter: exp, d: d},
		sdktrace.WithMaxQueueSize(opt.QueueSize),
		sdktrace.WithMaxExportBatchSize(min(512, opt.QueueSize)),
		sdktrace.WithBatchTimeout(opt.BatchTimeout),
		sdktrace.WithExportTimeout(opt.ExportTimeout))
	popts := []sdktrace.TracerProviderOption{sdktrace.WithSpanProcessor(&countingProcessor{SpanProcessor: bsp, d: d})}
	if res != nil {
		popts = append(popts, sdktrace.WithResource(res))
	}
	tp := sdktrace.NewTracerProvider(popts...) // the sampler: OTEL_TRACES_SAMPLER, else parent-based always-on
	prevProvider := otel.GetTracerProvider()
	otel.SetTracerProvider(tp)
	otel.SetErrorHandler(otelErrors(opt.Logger))
	lastDrops.Store(d)
	cur.Store(&state{tracer: tp.Tracer(scope), recordArgs: recordArgs, logger: opt.Logger})
	var once sync.Once
	return func(ctx context.Context) error {
		var err error
		once.Do(func() {
			cur.Store(nil)
			err = tp.Shutdown(ctx)
			d.close(err)
			otel.SetTracerProvider(prevProvider)
			if n := d.dropped.Load(); n > 0 {
				opt.Logger.Warn("trace spans dropped in all", "dropped_total", n)
			}
		})
		return err
	}
}

// envInt is a positive integer variable of the batch processor's, or def
// when it is unset or not one (the SDK ignores such values the same way).
func envInt(name string, def int) int {
	if n, err := strconv.Atoi(strings.TrimSpace(os.Getenv(name))); err == nil && n > 0 {
		return n
	}
	return def
}

// Use installs exp as Setup would (for tests and benchmarks: an in-memory
// exporter, or an OTLP one to a test receiver), and returns the shutdown.
func Use(exp sdktrace.SpanExporter, opt Options, recordArgs bool) func(context.Context) error {
	if opt.Logger == nil {
		opt.Logger = slog.New(slog.DiscardHandler)
	}
	res, _ := resource.New(context.Background(), resource.WithAttributes(
		attribute.String("service.name", DefaultServiceName), attribute.String("probing.role", opt.Role)))
	return install(exp, res, opt, recordArgs)
}

// otelErrors takes the SDK's own errors (an export that failed, a bad
// variable) to the log at debug level: a lost export is already counted
// and warned about (dropCounter), and a collector that stays down must
// not fill the log.
func otelErrors(l *slog.Logger) otel.ErrorHandler {
	return otel.ErrorHandlerFunc(func(err error) {
		if err != nil && !errors.Is(err, context.Canceled) {
			l.Debug("OpenTelemetry", "err", clip(err.Error(), maxDesc))
		}
	})
}
