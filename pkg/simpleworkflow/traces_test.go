package simpleworkflow_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/simple-workflow/simple-workflow/pkg/simpleworkflow"
	"github.com/simple-workflow/simple-workflow/pkg/simpleworkflow/otelsetup"
)

// otlpReceiver is an in-process OTLP/HTTP trace receiver: it decodes the
// protobuf export requests posted to /v1/traces and keeps their spans.
type otlpReceiver struct {
	srv *httptest.Server

	mu    sync.Mutex
	spans []*tracepb.Span
}

func newOTLPReceiver(t *testing.T) *otlpReceiver {
	t.Helper()
	r := &otlpReceiver{}
	r.srv = httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *otlpReceiver) serve(w http.ResponseWriter, req *http.Request) {
	if req.Method != http.MethodPost || req.URL.Path != "/v1/traces" {
		http.Error(w, "not found", http.StatusNotFound)
		return
	}
	var body io.Reader = req.Body
	if req.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(req.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		body = zr
	}
	raw, err := io.ReadAll(io.LimitReader(body, 16<<20))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var export coltracepb.ExportTraceServiceRequest
	if err := proto.Unmarshal(raw, &export); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	r.mu.Lock()
	for _, rs := range export.GetResourceSpans() {
		for _, ss := range rs.GetScopeSpans() {
			r.spans = append(r.spans, ss.GetSpans()...)
		}
	}
	r.mu.Unlock()
	out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

// named returns the received spans called name, oldest first.
func (r *otlpReceiver) named(name string) []*tracepb.Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []*tracepb.Span
	for _, s := range r.spans {
		if s.GetName() == name {
			out = append(out, s)
		}
	}
	return out
}

func attr(s *tracepb.Span, key string) *commonpb.AnyValue {
	for _, kv := range s.GetAttributes() {
		if kv.GetKey() == key {
			return kv.GetValue()
		}
	}
	return nil
}

func attrString(s *tracepb.Span, key string) string {
	if v := attr(s, key); v != nil {
		if sv := v.GetStringValue(); sv != "" {
			return sv
		}
		if v.GetValue() != nil {
			return fmt.Sprint(v.GetIntValue(), v.GetBoolValue())
		}
	}
	return ""
}

// tracingFromEnv points the OTEL_* variables at an in-process receiver and
// builds the tracer provider the way a worker's main does.
func tracingFromEnv(t *testing.T) (*otlpReceiver, *sdktrace.TracerProvider) {
	t.Helper()
	recv := newOTLPReceiver(t)
	t.Setenv("OTEL_SDK_DISABLED", "")
	t.Setenv("OTEL_TRACES_EXPORTER", "")
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "")
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", recv.srv.URL)
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "50")
	t.Setenv("OTEL_SERVICE_NAME", "traces-test")
	tp, err := otelsetup.NewTracerProvider(context.Background(), "simpleworkflow-test")
	if err != nil || tp == nil {
		t.Fatalf("tracer provider from the environment: %v, %v", tp, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = tp.Shutdown(ctx)
	})
	return recv, tp
}

func spanHex(id []byte) string { return hex.EncodeToString(id) }

// An attempt is a consumer span linked to the producer's span, with the
// run's attributes; its durable step, its sleep and the handler's own spans
// are its children; a parked attempt and a resumed one each get a span; a
// failing attempt has error status, retrying then final. Everything goes
// through the OTLP exporter configured by OTEL_* to an in-process receiver.
func TestTracesOverOTLP(t *testing.T) {
	b := setup(t)
	recv, tp := tracingFromEnv(t)

	flow := func(ctx context.Context, task *simpleworkflow.Task) (json.RawMessage, error) {
		n, err := simpleworkflow.Step(ctx, task, "compute", func(context.Context) (int, error) { return 41, nil })
		if err != nil {
			return nil, err
		}
		_, own := trace.SpanFromContext(ctx).TracerProvider().Tracer("handler").Start(ctx, "handler work")
		own.End()
		if err := task.Sleep(ctx, "nap", 50*time.Millisecond); err != nil {
			return nil, err
		}
		return simpleworkflow.JSONResult(map[string]any{"n": n + 1, "traceparent": task.TraceParent})
	}
	failing := func(context.Context, *simpleworkflow.Task) (json.RawMessage, error) {
		return nil, errTest
	}
	b.startPoller(t, simpleworkflow.PollerConfig{TypePrefixes: []string{"otel."}, WorkerID: "traced-worker",
		TracerProvider: tp, PollInterval: 50 * time.Millisecond},
		map[string]simpleworkflow.HandlerFunc{"otel.flow.v1": flow, "otel.fail.v1": failing})

	pctx, producer := tp.Tracer("producer").Start(b.ctx, "produce", trace.WithSpanKind(trace.SpanKindProducer))
	flowRun, err := b.client.Create(pctx, "otel.flow.v1", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	failRun, err := b.client.Create(pctx, "otel.fail.v1", nil, &simpleworkflow.CreateOptions{
		MaxAttempts: 2, RetryPolicy: &simpleworkflow.RetryPolicy{BaseDelay: time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	producer.End()
	psc := producer.SpanContext()
	wantTP := fmt.Sprintf("00-%s-%s-01", psc.TraceID(), psc.SpanID())

	done := b.waitStatus(t, flowRun.ID, simpleworkflow.StatusSucceeded, time.Minute)
	var result struct {
		TraceParent string `json:"traceparent"`
	}
	if err := json.Unmarshal(done.Result, &result); err != nil || result.TraceParent != wantTP || done.TraceParent != wantTP {
		t.Errorf("stored traceparent %q, handler saw %q (%v), want %q", done.TraceParent, result.TraceParent, err, wantTP)
	}
	b.waitStatus(t, failRun.ID, simpleworkflow.StatusFailed, time.Minute)

	attemptName := "simpleworkflow.attempt otel.flow.v1"
	waitFor(t, 30*time.Second, "the flow's spans", func() (bool, error) {
		_ = tp.ForceFlush(b.ctx)
		return len(recv.named(attemptName)) >= 2 && len(recv.named("simpleworkflow.sleep nap")) >= 2 &&
			len(recv.named("simpleworkflow.attempt otel.fail.v1")) >= 2, nil
	})

	attempts := recv.named(attemptName)
	byID := map[string]*tracepb.Span{}
	outcomes := map[string]bool{}
	for _, a := range attempts {
		byID[spanHex(a.GetSpanId())] = a
		outcomes[attrString(a, "simpleworkflow.outcome")] = true
		if a.GetKind() != tracepb.Span_SPAN_KIND_CONSUMER {
			t.Errorf("attempt span kind %v, want consumer", a.GetKind())
		}
		if spanHex(a.GetTraceId()) == psc.TraceID().String() || len(a.GetParentSpanId()) != 0 {
			t.Errorf("an attempt span starts a trace of its own (parent %x)", a.GetParentSpanId())
		}
		links := a.GetLinks()
		if len(links) != 1 || spanHex(links[0].GetTraceId()) != psc.TraceID().String() ||
			spanHex(links[0].GetSpanId()) != psc.SpanID().String() {
			t.Errorf("attempt links %v, want the producer's span %s/%s", links, psc.TraceID(), psc.SpanID())
		}
		for key, want := range map[string]string{
			"simpleworkflow.run.id":      flowRun.ID,
			"simpleworkflow.run.type":    "otel.flow.v1",
			"simpleworkflow.worker.id":   "traced-worker",
			"messaging.system":           "simpleworkflow",
			"messaging.destination.name": "otel.flow.v1",
		} {
			if got := attrString(a, key); got != want {
				t.Errorf("attempt attribute %s = %q, want %q", key, got, want)
			}
		}
		if v := attr(a, "simpleworkflow.run.attempt"); v == nil || v.GetIntValue() < 1 {
			t.Errorf("attempt attribute simpleworkflow.run.attempt = %v, want a positive number", v)
		}
		// The fence the run's row keeps, never the token itself.
		if v := attr(a, "simpleworkflow.lease.fence"); v == nil || v.GetIntValue() == 0 {
			t.Errorf("attempt attribute simpleworkflow.lease.fence = %v, want the lease's fence", v)
		}
		if v := attr(a, "simpleworkflow.lease.token"); v != nil {
			t.Errorf("a span carries the lease token %v", v)
		}
	}
	if !outcomes[simpleworkflow.OutcomeParked] || !outcomes[simpleworkflow.OutcomeSucceeded] {
		t.Errorf("attempt outcomes %v, want parked and succeeded", outcomes)
	}

	// Children of an attempt: in its trace, with it as parent.
	childOf := func(name string) []*tracepb.Span {
		t.Helper()
		spans := recv.named(name)
		if len(spans) == 0 {
			t.Fatalf("no %q span", name)
		}
		for _, s := range spans {
			parent := byID[spanHex(s.GetParentSpanId())]
			if parent == nil || !bytes.Equal(parent.GetTraceId(), s.GetTraceId()) {
				t.Errorf("%q span's parent %x is not an attempt span", name, s.GetParentSpanId())
			}
		}
		return spans
	}
	steps := childOf("simpleworkflow.step compute")
	replayed := 0
	for _, s := range steps {
		if attr(s, "simpleworkflow.step.replayed").GetBoolValue() {
			replayed++
		}
	}
	if len(steps) != 2 || replayed != 1 {
		t.Errorf("%d step spans, %d replayed; want one run and one replayed", len(steps), replayed)
	}
	sleeps := childOf("simpleworkflow.sleep nap")
	parked := 0
	for _, s := range sleeps {
		if attr(s, "simpleworkflow.step.parked").GetBoolValue() {
			parked++
			if attrString(s, "simpleworkflow.step.wake_at") == "" {
				t.Error("a parked sleep's span has no wake_at")
			}
		}
	}
	if parked != 1 {
		t.Errorf("%d parked sleep spans, want 1", parked)
	}
	childOf("handler work")

	// The failing run: error status with the handler's error, retrying then
	// failed for good.
	fails := recv.named("simpleworkflow.attempt otel.fail.v1")
	var ends []string
	for _, f := range fails {
		if f.GetStatus().GetCode() != tracepb.Status_STATUS_CODE_ERROR || !strings.Contains(f.GetStatus().GetMessage(), errTest.Error()) {
			t.Errorf("failing attempt status %v, want error %q", f.GetStatus(), errTest)
		}
		ends = append(ends, fmt.Sprintf("%s/retry=%v", attrString(f, "simpleworkflow.outcome"), attr(f, "simpleworkflow.retry").GetBoolValue()))
		if len(f.GetLinks()) != 1 || spanHex(f.GetLinks()[0].GetSpanId()) != psc.SpanID().String() {
			t.Errorf("failing attempt links %v", f.GetLinks())
		}
	}
	if strings.Join(ends, " ") != "retrying/retry=true failed/retry=false" && strings.Join(ends, " ") != "failed/retry=false retrying/retry=true" {
		t.Errorf("failing attempts ended %v, want one retrying and one failed", ends)
	}
}

// The client stores the caller's span context, unless the caller gives a
// traceparent of its own; a malformed one is refused before anything is
// written.
func TestClientStoresTraceParent(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tp := sdktrace.NewTracerProvider()
	defer func() { _ = tp.Shutdown(context.Background()) }()
	ctx, span := tp.Tracer("producer").Start(b.ctx, "produce")
	defer span.End()
	sc := span.SpanContext()
	want := fmt.Sprintf("00-%s-%s-01", sc.TraceID(), sc.SpanID())

	res, err := b.client.Create(ctx, "tpc.job.v1", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	many, err := b.client.CreateMany(ctx, []simpleworkflow.NewRun{{Type: "tpc.job.v1"}, {Type: "tpc.job.v1"}})
	if err != nil {
		t.Fatal(err)
	}
	const own = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00"
	explicit, err := b.client.Create(ctx, "tpc.job.v1", nil, &simpleworkflow.CreateOptions{TraceParent: own})
	if err != nil {
		t.Fatal(err)
	}
	bare, err := b.client.Create(b.ctx, "tpc.job.v1", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	for id, wantTP := range map[string]string{res.ID: want, many[0].ID: want, many[1].ID: want, explicit.ID: own, bare.ID: ""} {
		r, err := b.client.Get(b.ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if r.TraceParent != wantTP {
			t.Errorf("run %s: traceparent %q, want %q", id, r.TraceParent, wantTP)
		}
	}
	_, err = b.client.Create(ctx, "tpc.job.v1", nil, &simpleworkflow.CreateOptions{TraceParent: strings.ToUpper(own)})
	if !errors.Is(err, simpleworkflow.ErrInvalid) || !strings.Contains(err.Error(), "W3C traceparent") {
		t.Errorf("uppercase traceparent: %v, want ErrInvalid", err)
	}
}
