// Package otelsetup builds an OpenTelemetry tracer provider from the
// standard OTEL_* environment variables, for a worker (or any process) that
// wants its spans exported over OTLP. Nothing is built when the environment
// names no OTLP endpoint: tracing is off unless asked for.
//
// The variables read here decide whether to trace and how to export:
//
//	OTEL_SDK_DISABLED=true                 off, whatever else is set
//	OTEL_TRACES_EXPORTER                   "otlp" (the default) or "none"
//	OTEL_EXPORTER_OTLP_ENDPOINT            on, when set (or the next one)
//	OTEL_EXPORTER_OTLP_TRACES_ENDPOINT     on, when set
//	OTEL_EXPORTER_OTLP_TRACES_PROTOCOL     "http/protobuf" (the default) or
//	OTEL_EXPORTER_OTLP_PROTOCOL            "grpc"
//
// The exporters and the SDK read the rest themselves: headers, timeouts,
// compression, certificates (OTEL_EXPORTER_OTLP_*), the sampler
// (OTEL_TRACES_SAMPLER, OTEL_TRACES_SAMPLER_ARG), the batch processor
// (OTEL_BSP_*) and the resource (OTEL_SERVICE_NAME,
// OTEL_RESOURCE_ATTRIBUTES).
package otelsetup

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// The protocols OTEL_EXPORTER_OTLP_PROTOCOL may name.
const (
	ProtocolHTTPProtobuf = "http/protobuf"
	ProtocolGRPC         = "grpc"
)

// ErrUnsupported is wrapped by the error about a setting this package
// cannot honour (an exporter or protocol it does not build).
var ErrUnsupported = errors.New("unsupported OpenTelemetry setting")

// Enabled reports whether the environment asks for traces exported over
// OTLP: an OTLP endpoint is set, the SDK is not disabled, and the traces
// exporter is not "none".
func Enabled() bool {
	if strings.EqualFold(strings.TrimSpace(os.Getenv("OTEL_SDK_DISABLED")), "true") {
		return false
	}
	if strings.EqualFold(strings.TrimSpace(os.Getenv("OTEL_TRACES_EXPORTER")), "none") {
		return false
	}
	return strings.TrimSpace(os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT")) != "" ||
		strings.TrimSpace(os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")) != ""
}

// protocol is the OTLP protocol the environment names for traces.
func protocol() (string, error) {
	p := strings.TrimSpace(os.Getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"))
	if p == "" {
		p = strings.TrimSpace(os.Getenv("OTEL_EXPORTER_OTLP_PROTOCOL"))
	}
	switch p {
	case "", ProtocolHTTPProtobuf:
		return ProtocolHTTPProtobuf, nil
	case ProtocolGRPC:
		return ProtocolGRPC, nil
	}
	return "", fmt.Errorf("%w: OTLP protocol %q (use %s or %s)", ErrUnsupported, p, ProtocolHTTPProtobuf, ProtocolGRPC)
}

// NewTracerProvider returns a tracer provider exporting over OTLP as the
// environment says, or nil (and no error) when Enabled is false. The
// resource's service.name is OTEL_SERVICE_NAME (or service.name in
// OTEL_RESOURCE_ATTRIBUTES) when set, else serviceName. The caller owns the
// provider: pass it where spans are made (e.g. PollerConfig.TracerProvider)
// and call its Shutdown before exiting, which flushes the spans not yet
// exported.
func NewTracerProvider(ctx context.Context, serviceName string) (*sdktrace.TracerProvider, error) {
	if !Enabled() {
		return nil, nil
	}
	if e := strings.TrimSpace(os.Getenv("OTEL_TRACES_EXPORTER")); e != "" && !strings.EqualFold(e, "otlp") {
		return nil, fmt.Errorf("%w: OTEL_TRACES_EXPORTER=%q (use otlp or none)", ErrUnsupported, e)
	}
	proto, err := protocol()
	if err != nil {
		return nil, err
	}
	var exporter sdktrace.SpanExporter
	switch proto {
	case ProtocolGRPC:
		exporter, err = otlptracegrpc.New(ctx)
	default:
		exporter, err = otlptracehttp.New(ctx)
	}
	if err != nil {
		return nil, fmt.Errorf("OTLP %s trace exporter: %w", proto, err)
	}
	// Later resources win: the SDK's defaults, then serviceName, then
	// OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES.
	res := resource.Default()
	for _, r := range []*resource.Resource{
		resource.NewSchemaless(attribute.String("service.name", serviceName)),
		resource.Environment(),
	} {
		merged, err := resource.Merge(res, r)
		if err != nil {
			return nil, fmt.Errorf("trace resource: %w", err)
		}
		res = merged
	}
	return sdktrace.NewTracerProvider(sdktrace.WithBatcher(exporter), sdktrace.WithResource(res)), nil
}

// Install is NewTracerProvider for a process's main: when tracing is on, it
// makes the provider the global one (otel.SetTracerProvider) and W3C Trace
// Context with Baggage the global propagator, and returns the provider's
// Shutdown; when it is off, it changes nothing and returns a no-op. Call
// the returned function before exiting, with a context bounding the flush.
func Install(ctx context.Context, serviceName string) (shutdown func(context.Context) error, err error) {
	tp, err := NewTracerProvider(ctx, serviceName)
	if err != nil {
		return nil, err
	}
	if tp == nil {
		return func(context.Context) error { return nil }, nil
	}
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	return tp.Shutdown, nil
}
