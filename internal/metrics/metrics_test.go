package metrics

import (
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// idle is what the registry held before any test ran: what an idle
// process exposes.
var idle []string

func TestMain(m *testing.M) {
	mfs, err := reg.Gather()
	if err != nil {
		fmt.Fprintln(os.Stderr, "gather:", err)
		os.Exit(1)
	}
	for _, mf := range mfs {
		idle = append(idle, mf.GetName())
	}
	os.Exit(m.Run())
}

func TestIdleProcessShowsOnlyTheStandardCollectors(t *testing.T) {
	if len(idle) == 0 {
		t.Fatal("the idle registry is empty: the process and Go collectors are missing")
	}
	var sawProcess, sawGo bool
	for _, n := range idle {
		switch {
		case strings.HasPrefix(n, Prefix):
			t.Errorf("idle registry shows %s: families must register on first use", n)
		case strings.HasPrefix(n, "process_"):
			sawProcess = true
		case strings.HasPrefix(n, "go_"):
			sawGo = true
		}
	}
	if !sawProcess || !sawGo {
		t.Errorf("idle registry %v: want the process_* and go_* collectors", idle)
	}
}

// scrape fetches the handler's text exposition and parses it.
func scrape(t testing.TB) map[string]*dto.MetricFamily {
	t.Helper()
	rec := httptest.NewRecorder()
	Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, Path, nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("GET %s: %d %s", Path, rec.Code, rec.Body)
	}
	if ct := rec.Header().Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
		t.Fatalf("Content-Type %q: want the text format for a scraper that asks for nothing", ct)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(rec.Body)
	if err != nil {
		t.Fatalf("the exposition does not parse: %v", err)
	}
	return mfs
}

// touchAll calls every helper once.
func touchAll() {
	ObserveOperation("tools/call", "list_processes", "", "tcp", 3*time.Millisecond)
	ObserveOperation("tools/call", "diagnose_hang", "tool_error", "pipe", 2*time.Second)
	SessionStarted()
	SessionEnded()
	RequestStarted()
	RequestDone()
	FanoutCall("10.0.0.1:9781", "", 5*time.Millisecond)
	FanoutCall("10.0.0.2:9781", "timeout", time.Second)
	AgentCall("", time.Millisecond)
	AgentCall("timeout", 2*time.Second)
	StackCapture("faulthandler")
	SQLQuery("", 12, time.Millisecond)
	SQLQuery("read_only", 0, time.Microsecond)
	SQLQuery("sql", 0, time.Microsecond)
	FlightRecorderLoad(1<<20, 40*time.Millisecond, 64<<20, false)
	GPURound(false)
	NVMLError("gpu_is_lost")
	HistoryWrite("diagnoses", false, time.Millisecond)
}

func TestExpositionParsesAndFollowsTheConventions(t *testing.T) {
	touchAll()
	mfs := scrape(t)
	want := map[string]dto.MetricType{
		"probing_mcp_server_operation_duration_seconds":     dto.MetricType_HISTOGRAM,
		"probing_mcp_server_active_sessions":                dto.MetricType_GAUGE,
		"probing_mcp_server_sessions_started_total":         dto.MetricType_COUNTER,
		"probing_mcp_server_requests_in_flight":             dto.MetricType_GAUGE,
		"probing_mcp_fanout_calls_total":                    dto.MetricType_COUNTER,
		"probing_mcp_fanout_failures_total":                 dto.MetricType_COUNTER,
		"probing_mcp_fanout_call_duration_seconds":          dto.MetricType_HISTOGRAM,
		"probing_mcp_agent_calls_total":                     dto.MetricType_COUNTER,
		"probing_mcp_agent_call_duration_seconds":           dto.MetricType_HISTOGRAM,
		"probing_mcp_stack_captures_total":                  dto.MetricType_COUNTER,
		"probing_mcp_sql_queries_total":                     dto.MetricType_COUNTER,
		"probing_mcp_sql_refusals_total":                    dto.MetricType_COUNTER,
		"probing_mcp_sql_rows_total":                        dto.MetricType_COUNTER,
		"probing_mcp_sql_query_duration_seconds":            dto.MetricType_HISTOGRAM,
		"probing_mcp_flightrecorder_loads_total":            dto.MetricType_COUNTER,
		"probing_mcp_flightrecorder_load_bytes_total":       dto.MetricType_COUNTER,
		"probing_mcp_flightrecorder_load_duration_seconds":  dto.MetricType_HISTOGRAM,
		"probing_mcp_flightrecorder_load_memory_peak_bytes": dto.MetricType_GAUGE,
		"probing_mcp_gpu_sampler_rounds_total":              dto.MetricType_COUNTER,
		"probing_mcp_gpu_nvml_errors_total":                 dto.MetricType_COUNTER,
		"probing_mcp_history_writes_total":                  dto.MetricType_COUNTER,
		"probing_mcp_history_write_duration_seconds":        dto.MetricType_HISTOGRAM,
		"process_cpu_seconds_total":                         dto.MetricType_COUNTER,
		"go_goroutines":                                     dto.MetricType_GAUGE,
	}
	for name, typ := range want {
		mf, ok := mfs[name]
		if !ok {
			t.Errorf("%s is not exposed", name)
			continue
		}
		if mf.GetType() != typ {
			t.Errorf("%s is a %v, want a %v", name, mf.GetType(), typ)
		}
		if mf.GetHelp() == "" {
			t.Errorf("%s has no help text", name)
		}
	}
	for name, mf := range mfs {
		if strings.HasPrefix(name, "go_") || strings.HasPrefix(name, "process_") || strings.HasPrefix(name, "promhttp_") {
			continue
		}
		if !strings.HasPrefix(name, Prefix) {
			t.Errorf("%s lacks the %s prefix", name, Prefix)
		}
		if _, ok := want[name]; !ok {
			t.Errorf("%s is exposed but not in this test's list: add it (and check its name)", name)
		}
		counter := mf.GetType() == dto.MetricType_COUNTER
		if counter != strings.HasSuffix(name, "_total") {
			t.Errorf("%s: a %v; counters, and only they, end in _total", name, mf.GetType())
		}
		if mf.GetType() == dto.MetricType_HISTOGRAM && !strings.HasSuffix(name, "_seconds") {
			t.Errorf("%s: histograms here measure time, in seconds", name)
		}
	}

	op := mfs["probing_mcp_server_operation_duration_seconds"]
	m := metricWith(t, op, map[string]string{"mcp_method_name": "tools/call", "gen_ai_tool_name": "diagnose_hang",
		"error_type": "tool_error", "network_transport": "pipe"})
	var les []float64
	for _, b := range m.GetHistogram().GetBucket() {
		if !math.IsInf(b.GetUpperBound(), 1) { // the parser adds +Inf
			les = append(les, b.GetUpperBound())
		}
	}
	if !slices.Equal(les, OperationBuckets) {
		t.Errorf("operation buckets %v, want semconv's %v", les, OperationBuckets)
	}
	if got := m.GetHistogram().GetSampleCount(); got < 1 {
		t.Errorf("sample count %d, want at least the one observed", got)
	}
}

// metricWith is mf's metric with exactly these labels.
func metricWith(t *testing.T, mf *dto.MetricFamily, labels map[string]string) *dto.Metric {
	t.Helper()
	for _, m := range mf.GetMetric() {
		got := map[string]string{}
		for _, l := range m.GetLabel() {
			got[l.GetName()] = l.GetValue()
		}
		if len(got) == len(labels) {
			match := true
			for k, v := range labels {
				if got[k] != v {
					match = false
				}
			}
			if match {
				return m
			}
		}
	}
	t.Fatalf("%s has no series %v", mf.GetName(), labels)
	return nil
}

// labelValues are the values of label over mf's series.
func labelValues(mf *dto.MetricFamily, label string) []string {
	var out []string
	for _, m := range mf.GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == label {
				out = append(out, l.GetValue())
			}
		}
	}
	return out
}

func TestNodeLabelsAreBounded(t *testing.T) {
	// Past the cap every new node is "other"; hostile addresses (invalid
	// UTF-8, a megabyte long) neither panic nor grow a label. The cap is
	// lowered here so that the other tests do not scrape 4096 nodes'
	// histograms.
	if fanoutNodes.max != NodeLabelCap {
		t.Fatalf("the node label cap is %d, want NodeLabelCap (%d)", fanoutNodes.max, NodeLabelCap)
	}
	const lowered = 64
	saved := fanoutNodes
	fanoutNodes = &capped{max: lowered}
	defer func() { fanoutNodes = saved }()
	FanoutCall("\xff\xfe:9781", "refused", time.Millisecond)
	FanoutCall(strings.Repeat("a", 1<<20), "", time.Millisecond)
	for i := range lowered * 10 {
		FanoutCall(fmt.Sprintf("node-%d:9781", i), "unreachable", time.Millisecond)
	}
	FanoutCall("node-0:9781", "made-up-kind", time.Millisecond)
	mfs := scrape(t)
	nodes := labelValues(mfs["probing_mcp_fanout_calls_total"], "node")
	// touchAll's two nodes were admitted under the real cap before.
	if len(nodes) > lowered+1+2 {
		t.Errorf("%d node label values, want at most %d and other", len(nodes), lowered)
	}
	if !slices.Contains(nodes, "other") {
		t.Error(`no node="other" series after more nodes than the cap`)
	}
	for _, n := range nodes {
		if !utf8.ValidString(n) || len(n) > maxLabelBytes {
			t.Errorf("node label %.40q (%d bytes): want valid UTF-8 of at most %d bytes", n, len(n), maxLabelBytes)
		}
	}
	kinds := labelValues(mfs["probing_mcp_fanout_failures_total"], "kind")
	if slices.Contains(kinds, "made-up-kind") || !slices.Contains(kinds, "other") {
		t.Errorf("failure kinds %v: an unknown kind must read other", kinds)
	}
}

func TestEnumLabelsFallBackToOther(t *testing.T) {
	AgentCall("no-such-kind", time.Millisecond)
	StackCapture("carrier-pigeon")
	SQLQuery("made-up", 0, time.Millisecond)
	NVMLError("\xff")
	HistoryWrite("users; DROP TABLE", true, time.Millisecond)
	mfs := scrape(t)
	for name, label := range map[string]string{
		"probing_mcp_agent_calls_total":     "result",
		"probing_mcp_stack_captures_total":  "source",
		"probing_mcp_sql_refusals_total":    "reason",
		"probing_mcp_gpu_nvml_errors_total": "reason",
		"probing_mcp_history_writes_total":  "table",
	} {
		vals := labelValues(mfs[name], label)
		if !slices.Contains(vals, "other") {
			t.Errorf("%s{%s}: %v, want an unknown value counted as other", name, label, vals)
		}
		for _, v := range vals {
			if strings.ContainsAny(v, " ;\uFFFD") || strings.Contains(v, "pigeon") || strings.Contains(v, "made-up") {
				t.Errorf("%s{%s=%q}: a caller's free text became a label", name, label, v)
			}
		}
	}
}

func TestErrorType(t *testing.T) {
	for _, c := range []struct {
		err  error
		want string
	}{
		{nil, ""},
		{errors.New("x"), "*errors.errorString"},
		{fmt.Errorf("a: %w", fmt.Errorf("b: %w", os.ErrDeadlineExceeded)), "*poll.DeadlineExceededError"},
		{fmt.Errorf("wrapped: %w", &os.PathError{Op: "open", Path: "/x", Err: os.ErrNotExist}), "*errors.errorString"},
	} {
		if got := ErrorType(c.err); got != c.want {
			t.Errorf("ErrorType(%v) = %q, want %q", c.err, got, c.want)
		}
	}
}

func TestCappedKeepsAdmittedValues(t *testing.T) {
	c := &capped{max: 2}
	if c.value("a") != "a" || c.value("b") != "b" || c.value("c") != "other" || c.value("a") != "a" {
		t.Errorf("capped of 2: want a, b admitted, c other, a still a")
	}
}

// heapInUse is the live heap after a collection.
func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// TestScrapeStormDoesNotGrowMemory: scrapers on scrapeInFlight keep-alive
// connections at once, a thousand scrapes (a second's worth at 1000 a
// second; half that under the race detector), leave the live heap where
// the warm-up left it. A 503 (a scrape past promhttp's timeout on a
// loaded machine) is an answer too; anything else is not.
func TestScrapeStormDoesNotGrowMemory(t *testing.T) {
	touchAll()
	srv := httptest.NewServer(Handler())
	defer srv.Close()
	var ok atomic.Int64
	storm := func(perWorker int) {
		var wg sync.WaitGroup
		for range scrapeInFlight {
			wg.Go(func() {
				c := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}}
				defer c.CloseIdleConnections()
				for range perWorker {
					resp, err := c.Get(srv.URL + Path)
					if err != nil {
						t.Error(err)
						return
					}
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					switch resp.StatusCode {
					case http.StatusOK:
						ok.Add(1)
					case http.StatusServiceUnavailable:
					default:
						t.Errorf("scrape: %d", resp.StatusCode)
						return
					}
				}
			})
		}
		wg.Wait()
	}
	storm(50) // warm: pools, buffers, connections
	before := heapInUse()
	storm(stormScrapes)
	after := heapInUse()
	if ok.Load() == 0 {
		t.Fatal("no scrape succeeded")
	}
	const slack = 1 << 20 // a leak of 1 KiB a scrape shows
	if after > before+slack {
		t.Errorf("live heap grew from %d to %d bytes over %d scrapes: want under %d bytes of growth", before, after, stormScrapes*scrapeInFlight, slack)
	}
	t.Logf("live heap %d -> %d bytes over %d scrapes (%d answered 200)", before, after, stormScrapes*scrapeInFlight, ok.Load())
}

// blocker is a collector that holds every scrape inside Collect until
// released.
type blocker struct{ entered, release chan struct{} }

func (b *blocker) Describe(chan<- *prometheus.Desc) {} // unchecked
func (b *blocker) Collect(chan<- prometheus.Metric) {
	b.entered <- struct{}{}
	<-b.release
}

func TestScrapesInFlightAreBounded(t *testing.T) {
	// scrapeInFlight scrapes held inside the registry, one more is
	// answered 503 at once instead of piling up.
	b := &blocker{entered: make(chan struct{}), release: make(chan struct{})}
	reg.MustRegister(b)
	h := Handler()
	done := make(chan int, scrapeInFlight)
	for range scrapeInFlight {
		go func() {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, Path, nil))
			done <- rec.Code
		}()
	}
	for range scrapeInFlight {
		<-b.entered
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, Path, nil))
	close(b.release)
	for range scrapeInFlight {
		if code := <-done; code != http.StatusOK {
			t.Errorf("a held scrape ended %d, want 200", code)
		}
	}
	reg.Unregister(b)
	if rec.Code != http.StatusServiceUnavailable {
		t.Errorf("scrape %d while %d were in flight: %d, want 503", scrapeInFlight+1, scrapeInFlight, rec.Code)
	}
}

func BenchmarkObserveOperation(b *testing.B) {
	for b.Loop() {
		ObserveOperation("tools/call", "list_processes", "", "tcp", 3*time.Millisecond)
	}
}

func BenchmarkFanoutCall(b *testing.B) {
	for b.Loop() {
		FanoutCall("10.0.0.1:9781", "", 5*time.Millisecond)
	}
}

func BenchmarkScrape(b *testing.B) {
	touchAll()
	h := Handler()
	for b.Loop() {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, Path, nil))
	}
}
