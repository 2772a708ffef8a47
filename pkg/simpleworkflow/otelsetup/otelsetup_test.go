package otelsetup_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/simple-workflow/simple-workflow/pkg/simpleworkflow/otelsetup"
)

// clearEnv unsets every variable otelsetup reads, for the test's duration.
func clearEnv(t *testing.T) {
	t.Helper()
	for _, k := range []string{"OTEL_SDK_DISABLED", "OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_ENDPOINT",
		"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"} {
		t.Setenv(k, "")
	}
}

// Tracing is off unless an OTLP endpoint is set, and stays off when the
// SDK is disabled or the traces exporter is none.
func TestOffUnlessAskedFor(t *testing.T) {
	ctx := context.Background()
	cases := []struct {
		name string
		env  map[string]string
		on   bool
	}{
		{"nothing set", nil, false},
		{"endpoint", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, true},
		{"traces endpoint", map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces"}, true},
		{"grpc", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, true},
		{"disabled", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_SDK_DISABLED": "TRUE"}, false},
		{"exporter none", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_TRACES_EXPORTER": "none"}, false},
		{"only a protocol", map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			clearEnv(t)
			for k, v := range c.env {
				t.Setenv(k, v)
			}
			if got := otelsetup.Enabled(); got != c.on {
				t.Errorf("Enabled() = %v, want %v", got, c.on)
			}
			tp, err := otelsetup.NewTracerProvider(ctx, "test")
			if err != nil {
				t.Fatal(err)
			}
			if (tp != nil) != c.on {
				t.Errorf("provider %v, want one: %v", tp, c.on)
			}
			if tp != nil {
				_ = tp.Shutdown(ctx)
			}
			shutdown, err := otelsetup.Install(ctx, "test")
			if err != nil || shutdown == nil {
				t.Fatalf("Install: %v", err)
			}
			_ = shutdown(ctx)
		})
	}
}

// A protocol or exporter it cannot build is an error, not silence.
func TestUnsupportedSettings(t *testing.T) {
	for name, env := range map[string]map[string]string{
		"json":            {"OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"},
		"zipkin":          {"OTEL_TRACES_EXPORTER": "zipkin"},
		"traces protocol": {"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "thrift"},
	} {
		t.Run(name, func(t *testing.T) {
			clearEnv(t)
			t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")
			for k, v := range env {
				t.Setenv(k, v)
			}
			if _, err := otelsetup.NewTracerProvider(context.Background(), "test"); !errors.Is(err, otelsetup.ErrUnsupported) {
				t.Errorf("got %v, want ErrUnsupported", err)
			}
		})
	}
}

// serviceNames starts an OTLP/HTTP receiver that answers every export and
// records the service.name of its resources.
func serviceNames(t *testing.T) (url string, names func() []string) {
	t.Helper()
	var (
		mu  sync.Mutex
		got []string
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, _ := io.ReadAll(r.Body)
		var req coltracepb.ExportTraceServiceRequest
		if err := proto.Unmarshal(raw, &req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		mu.Lock()
		for _, rs := range req.GetResourceSpans() {
			for _, kv := range rs.GetResource().GetAttributes() {
				if kv.GetKey() == "service.name" {
					got = append(got, kv.GetValue().GetStringValue())
				}
			}
		}
		mu.Unlock()
		out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(out)
	}))
	t.Cleanup(srv.Close)
	return srv.URL, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), got...)
	}
}

// The service name is the caller's default unless OTEL_SERVICE_NAME says
// otherwise.
func TestServiceName(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct{ env, want string }{{"", "my-worker"}, {"from-env", "from-env"}} {
		clearEnv(t)
		url, names := serviceNames(t)
		t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", url)
		t.Setenv("OTEL_SERVICE_NAME", c.env)
		tp, err := otelsetup.NewTracerProvider(ctx, "my-worker")
		if err != nil || tp == nil {
			t.Fatalf("provider %v, %v", tp, err)
		}
		_, span := tp.Tracer("test").Start(ctx, "one")
		span.End()
		if err := tp.Shutdown(ctx); err != nil {
			t.Fatal(err)
		}
		if got := names(); len(got) != 1 || got[0] != c.want {
			t.Errorf("OTEL_SERVICE_NAME=%q: exported service names %v, want [%s]", c.env, got, c.want)
		}
	}
}
