package otelsetup_test

import (
	"context"
	"errors"
	"testing"

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
