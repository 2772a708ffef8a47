// Command example-worker is a worker built only from the simple-workflow Go
// SDK. It serves the demo.*.v1 workflow types:
//
//	demo.echo.v1   result = payload
//	demo.sleep.v1  {"seconds": N}: sleeps N seconds, stops promptly when cancelled
//	demo.fail.v1   {"failTimes": N}: fails its first N attempts, then succeeds
//
// Every flag has an environment fallback (shown in -help). Traces are
// exported over OTLP when the standard OTEL_* variables name an endpoint
// (see docs/traces.md). SIGTERM or SIGINT
// stops it gracefully: in-flight runs finish within the grace period or are
// handed back.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/simple-workflow/simple-workflow/pkg/simpleworkflow"
	"github.com/simple-workflow/simple-workflow/pkg/simpleworkflow/otelsetup"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "example-worker:", err)
		os.Exit(1)
	}
}

// options are the command-line settings.
type options struct {
	databaseURL   string
	databaseFile  string
	typePrefixes  string
	namespace     string
	runtime       string
	workerID      string
	concurrency   int
	leaseDuration time.Duration
	gracePeriod   time.Duration
	reapInterval  time.Duration
	migrate       bool
	printVersion  bool
}

// envReader reads the environment fallbacks of flags and keeps the first
// malformed value, so that a typo is an error rather than silently the
// default; an empty value counts as unset.
type envReader struct {
	lookup func(string) (string, bool)
	err    error
}

func (e *envReader) parse(key string, parse func(string) error) {
	if v, ok := e.lookup(key); ok && v != "" && e.err == nil {
		if err := parse(v); err != nil {
			e.err = fmt.Errorf("environment variable %s=%q: %w", key, v, err)
		}
	}
}

func (e *envReader) string(key, def string) string {
	if v, ok := e.lookup(key); ok {
		return v
	}
	return def
}

func (e *envReader) int(key string, def int) int {
	e.parse(key, func(v string) (err error) { def, err = strconv.Atoi(v); return err })
	return def
}

func (e *envReader) duration(key string, def time.Duration) time.Duration {
	e.parse(key, func(v string) (err error) { def, err = time.ParseDuration(v); return err })
	return def
}

func (e *envReader) bool(key string, def bool) bool {
	e.parse(key, func(v string) (err error) { def, err = strconv.ParseBool(v); return err })
	return def
}

func parseFlags(args []string) (options, error) {
	return parseFlagsEnv(args, os.LookupEnv)
}

// parseFlagsEnv parses args with the environment read through lookup.
func parseFlagsEnv(args []string, lookup func(string) (string, bool)) (options, error) {
	host, _ := os.Hostname()
	env := &envReader{lookup: lookup}
	var o options
	fs := flag.NewFlagSet("example-worker", flag.ContinueOnError)
	// No default shown for the URL: it may hold a password (-help prints defaults).
	fs.StringVar(&o.databaseURL, "database-url", "", "Postgres URL (env DATABASE_URL)")
	fs.StringVar(&o.databaseFile, "database-url-file", env.string("DATABASE_URL_FILE", ""), "file holding the Postgres URL, e.g. a mounted Secret (env DATABASE_URL_FILE)")
	fs.StringVar(&o.typePrefixes, "type-prefixes", env.string("TYPE_PREFIXES", "demo."), "comma-separated type prefixes to claim (env TYPE_PREFIXES)")
	fs.StringVar(&o.namespace, "namespace", env.string("NAMESPACE", simpleworkflow.DefaultNamespace), "namespace whose runs this worker claims; its database login must be bound to it as a worker (env NAMESPACE)")
	fs.StringVar(&o.runtime, "runtime", env.string("RUNTIME", "go"), "runtime this worker declares (env RUNTIME)")
	fs.StringVar(&o.workerID, "worker-id", env.string("WORKER_ID", host), "worker id recorded in leases (env WORKER_ID)")
	fs.IntVar(&o.concurrency, "concurrency", env.int("CONCURRENCY", simpleworkflow.DefaultConcurrency), "handlers run at once (env CONCURRENCY)")
	fs.DurationVar(&o.leaseDuration, "lease-duration", env.duration("LEASE_DURATION", simpleworkflow.DefaultLeaseDuration), "lease length without heartbeat (env LEASE_DURATION)")
	fs.DurationVar(&o.gracePeriod, "shutdown-grace-period", env.duration("SHUTDOWN_GRACE_PERIOD", simpleworkflow.DefaultShutdownGracePeriod), "time in-flight runs may finish after SIGTERM (env SHUTDOWN_GRACE_PERIOD)")
	fs.DurationVar(&o.reapInterval, "reap-interval", env.duration("REAP_INTERVAL", simpleworkflow.DefaultReapInterval), "how often expired leases are reclaimed (env REAP_INTERVAL)")
	fs.BoolVar(&o.migrate, "migrate", env.bool("MIGRATE", false), "apply the schema migrations before starting (env MIGRATE)")
	fs.BoolVar(&o.printVersion, "version", false, "print the version and exit")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if o.printVersion {
		return o, nil
	}
	if env.err != nil {
		return o, env.err
	}
	if o.databaseURL == "" {
		o.databaseURL = env.string("DATABASE_URL", "")
	}
	if o.databaseURL == "" && o.databaseFile != "" {
		b, err := os.ReadFile(o.databaseFile)
		if err != nil {
			return o, fmt.Errorf("read --database-url-file: %w", err)
		}
		o.databaseURL = strings.TrimSpace(string(b))
	}
	if o.databaseURL == "" {
		return o, errors.New("--database-url, --database-url-file or DATABASE_URL is required")
	}
	return o, nil
}

func splitPrefixes(s string) []string {
	var out []string
	for p := range strings.SplitSeq(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

func run() error {
	o, err := parseFlags(os.Args[1:])
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if o.printVersion {
		fmt.Printf("example-worker %s (revision %s)\n", version, revision)
		return nil
	}
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	log.Info("Starting example-worker", "version", version, "revision", revision)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	shutdownTracing, err := otelsetup.Install(ctx, "example-worker")
	if err != nil {
		return fmt.Errorf("tracing: %w", err)
	}
	if otelsetup.Enabled() {
		log.Info("Exporting traces over OTLP")
	}
	defer func() {
		// A fresh context: ctx has ended by now, and the spans not yet
		// exported still deserve their chance.
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := shutdownTracing(fctx); err != nil {
			log.Warn("Flushing traces failed", "error", err)
		}
	}()

	client, err := simpleworkflow.Connect(ctx, o.databaseURL)
	if err != nil {
		return err
	}
	defer client.Close()
	if o.migrate {
		if err := client.Migrate(ctx); err != nil {
			return fmt.Errorf("migrate: %w", err)
		}
	}
	poller, err := simpleworkflow.NewPoller(client, simpleworkflow.PollerConfig{
		TypePrefixes:        splitPrefixes(o.typePrefixes),
		Namespace:           o.namespace,
		LeaseDuration:       o.leaseDuration,
		WorkerID:            o.workerID,
		Runtime:             o.runtime,
		Concurrency:         o.concurrency,
		ShutdownGracePeriod: o.gracePeriod,
		ReapInterval:        o.reapInterval,
		Logger:              log,
	})
	if err != nil {
		return err
	}
	if _, err := client.Pool().Exec(ctx, counterDDL); err != nil {
		log.Warn("Cannot create the demo step counter table; demo.order.v1 runs with counters will fail", "error", err)
	}
	if _, err := client.Pool().Exec(ctx, transferDDL); err != nil {
		log.Warn("Cannot create the demo transfer table; demo.transfer.v1 runs will fail", "error", err)
	}
	if err := registerDemoHandlers(poller, client.Pool()); err != nil {
		return err
	}
	return poller.Run(ctx)
}
