package simpleworkflow

import (
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace"

	"github.com/simple-workflow/simple-workflow/internal/engine"
)

// Defaults of PollerConfig.
const (
	// DefaultLeaseDuration is how long a claimed run stays leased without a
	// heartbeat.
	DefaultLeaseDuration = 30 * time.Second
	// DefaultConcurrency is how many handlers run at once.
	DefaultConcurrency = 10
	// DefaultRuntime is the runtime a Go worker declares.
	DefaultRuntime = "go"
	// DefaultPollInterval is the fallback poll when no notification arrives.
	DefaultPollInterval = time.Second
	// DefaultShutdownGracePeriod is how long in-flight handlers may finish
	// after Run's context ends, before their runs are handed back.
	DefaultShutdownGracePeriod = 20 * time.Second
	// DefaultReapInterval is how often a poller returns runs whose lease
	// expired (their worker died) to the queue and fails runs past their
	// deadline (see PollerConfig.ReapInterval).
	DefaultReapInterval = 5 * time.Second
	// DefaultLogFlushInterval is how often handlers' log lines are sent
	// (see PollerConfig.LogFlushInterval).
	DefaultLogFlushInterval = time.Second
	// DefaultClaimBatchSize caps the runs one claim call takes.
	DefaultClaimBatchSize = 100
	// DefaultNamespace is the namespace a poller serves, and a run belongs
	// to, when none is named.
	DefaultNamespace = engine.DefaultNamespace
)

// PollerConfig configures a Poller. Zero values take the defaults.
type PollerConfig struct {
	// TypePrefixes selects the runs to claim: a run is claimed when its type
	// starts with one of them. Prefixes are literal ('_' and '%' are not
	// wildcards; a trailing '%', as in "billing.%", is accepted and ignored).
	// Empty claims every type.
	TypePrefixes []string
	// LeaseDuration is how long a claimed run stays leased without a
	// heartbeat. Defaults to 30s; at least 1s.
	LeaseDuration time.Duration
	// WorkerID identifies this worker in leases and the audit trail. Defaults
	// to the hostname and process id.
	WorkerID string
	// Runtime is the runtime this worker provides: types registered for
	// another runtime, or disabled, are never claimed. Defaults to "go".
	Runtime string
	// Concurrency is the number of handlers that run at once. Defaults to 10.
	Concurrency int
	// HeartbeatInterval is how often leases are extended (and cancellation
	// checked). Defaults to a third of LeaseDuration.
	HeartbeatInterval time.Duration
	// PollInterval is the fallback poll period; new runs normally wake the
	// poller at once through LISTEN/NOTIFY. Defaults to 1s.
	PollInterval time.Duration
	// ShutdownGracePeriod is how long in-flight handlers may finish once
	// Run's context ends; after it their contexts are cancelled with
	// ErrShuttingDown and their runs handed back. Defaults to 20s.
	ShutdownGracePeriod time.Duration
	// ReapInterval is how often this poller returns runs with expired leases
	// to the queue (pending again, or failed when out of attempts) and fails
	// runs past their deadline. Defaults to 5s; negative disables both.
	//
	// Every poller reaps, although the operator's leader does too: a run
	// whose worker died is claimable again only once something reaps it
	// (claims never take an expired lease), and a poller cannot know whether
	// an operator is running. Deployments without one (Go or Python workers
	// whose schema was installed by Client.Migrate or by hand) rely on their
	// workers alone. Reaping twice is harmless: the database functions lock
	// the runs they reap with FOR UPDATE SKIP LOCKED, so concurrent reapers
	// share the expired runs and each is reaped once (they may queue briefly
	// on the parent of an expired child run, locked in id order). The cost is two calls per poller per interval
	// that, when nothing has expired, read an empty range of a partial index
	// (leased runs by lease end; unfinished runs by deadline). With many
	// workers next to an operator that is always up, a longer interval (or a
	// negative one) cuts that load; a dead worker's runs then wait for the
	// operator's reaping, every 5s.
	ReapInterval time.Duration
	// ClaimBatchSize caps the runs claimed in one call. Defaults to 100.
	ClaimBatchSize int
	// Namespace is the namespace this worker serves: it claims only runs of
	// that namespace's types (its own runs, and runs other namespaces record
	// of types it shares with them). Defaults to "default". The database
	// login must be bound to it as a worker (docs/security.md).
	Namespace string
	// Logger receives one line per transition. Defaults to slog.Default().
	Logger *slog.Logger
	// RunLogLevel is the least level of Task.Logger's records that are
	// kept with the run (every record goes to Logger too). The zero
	// value is slog.LevelInfo.
	RunLogLevel slog.Level
	// LogFlushInterval is how often what handlers logged is sent to the
	// database (and before each outcome and wait). Defaults to 1s.
	LogFlushInterval time.Duration
	// TracerProvider makes the spans of attempts, steps and waits (see
	// docs/traces.md). Defaults to otel.GetTracerProvider(), which makes
	// none until an OpenTelemetry SDK is installed (e.g. by otelsetup).
	TracerProvider trace.TracerProvider
}

// withDefaults returns c with every zero value replaced by its default.
func (c PollerConfig) withDefaults() PollerConfig {
	if c.LeaseDuration == 0 {
		c.LeaseDuration = DefaultLeaseDuration
	}
	if c.WorkerID == "" {
		host, err := os.Hostname()
		if err != nil || host == "" {
			host = "worker"
		}
		c.WorkerID = host + "-" + strconv.Itoa(os.Getpid())
	}
	if c.Runtime == "" {
		c.Runtime = DefaultRuntime
	}
	if c.Concurrency == 0 {
		c.Concurrency = DefaultConcurrency
	}
	if c.HeartbeatInterval == 0 {
		c.HeartbeatInterval = c.LeaseDuration / 3
	}
	if c.PollInterval == 0 {
		c.PollInterval = DefaultPollInterval
	}
	if c.ShutdownGracePeriod == 0 {
		c.ShutdownGracePeriod = DefaultShutdownGracePeriod
	}
	if c.ReapInterval == 0 {
		c.ReapInterval = DefaultReapInterval
	}
	if c.ClaimBatchSize == 0 {
		c.ClaimBatchSize = DefaultClaimBatchSize
	}
	if c.Namespace == "" {
		c.Namespace = DefaultNamespace
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.LogFlushInterval == 0 {
		c.LogFlushInterval = DefaultLogFlushInterval
	}
	if c.TracerProvider == nil {
		c.TracerProvider = otel.GetTracerProvider()
	}
	return c
}

// validate reports the first setting that cannot work.
func (c PollerConfig) validate() error {
	switch {
	case c.LeaseDuration < time.Second:
		return fmt.Errorf("%w: lease duration must be at least 1s, got %s", ErrInvalid, c.LeaseDuration)
	case c.Runtime != engine.RuntimeGo && c.Runtime != engine.RuntimePython:
		return fmt.Errorf("%w: runtime must be go or python, got %q", ErrInvalid, c.Runtime)
	case c.Concurrency < 1:
		return fmt.Errorf("%w: concurrency must be at least 1, got %d", ErrInvalid, c.Concurrency)
	case c.HeartbeatInterval <= 0 || c.HeartbeatInterval >= c.LeaseDuration:
		return fmt.Errorf("%w: heartbeat interval must be positive and below the lease duration %s, got %s",
			ErrInvalid, c.LeaseDuration, c.HeartbeatInterval)
	case c.PollInterval < 0:
		return fmt.Errorf("%w: poll interval must not be negative", ErrInvalid)
	case c.ShutdownGracePeriod < 0:
		return fmt.Errorf("%w: shutdown grace period must not be negative", ErrInvalid)
	case c.LogFlushInterval < 0:
		return fmt.Errorf("%w: log flush interval must not be negative", ErrInvalid)
	case c.ClaimBatchSize < 1 || c.ClaimBatchSize > 1000:
		return fmt.Errorf("%w: claim batch size must be between 1 and 1000, got %d", ErrInvalid, c.ClaimBatchSize)
	case len(c.WorkerID) > 200:
		return fmt.Errorf("%w: worker id must be at most 200 characters", ErrInvalid)
	}
	if err := engine.ValidateNamespace(c.Namespace); err != nil {
		return err
	}
	for _, p := range c.TypePrefixes {
		if p == "" || p == "%" {
			return fmt.Errorf("%w: type prefixes must not be empty or %q (leave the list empty to claim every type)", ErrInvalid, "%")
		}
	}
	return nil
}
