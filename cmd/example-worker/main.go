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
	runtime       string
	workerID      string
	concurrency   int
	leaseDuration time.Duration
	gracePeriod   time.Duration
	reapInterval  time.Duration
	migrate       bool
	printVersion  bool
}

func envString(key, def string) string {
	if v, ok := os.LookupEnv(key); ok {
		return v
	}
	return def
}

func envInt(key string, def int) int {
	if v, ok := os.LookupEnv(key); ok {
		if n, err := strconv.Atoi(v); err == nil {
			return n
		}
	}
	return def
}

func envDuration(key string, def time.Duration) time.Duration {
	if v, ok := os.LookupEnv(key); ok {
		if d, err := time.ParseDuration(v); err == nil {
			return d
		}
	}
	return def
}

func envBool(key string, def bool) bool {
	if v, ok := os.LookupEnv(key); ok {
		if b, err := strconv.ParseBool(v); err == nil {
			return b
		}
	}
	return def
}

func parseFlags(args []string) (options, error) {
	host, _ := os.Hostname()
	var o options
	fs := flag.NewFlagSet("example-worker", flag.ContinueOnError)
	// No default shown for the URL: it may hold a password (-help prints defaults).
	fs.StringVar(&o.databaseURL, "database-url", "", "Postgres URL (env DATABASE_URL)")
	fs.StringVar(&o.databaseFile, "database-url-file", envString("DATABASE_URL_FILE", ""), "file holding the Postgres URL, e.g. a mounted Secret (env DATABASE_URL_FILE)")
	fs.StringVar(&o.typePrefixes, "type-prefixes", envString("TYPE_PREFIXES", "demo."), "comma-separated type prefixes to claim (env TYPE_PREFIXES)")
	fs.StringVar(&o.runtime, "runtime", envString("RUNTIME", "go"), "runtime this worker declares (env RUNTIME)")
	fs.StringVar(&o.workerID, "worker-id", envString("WORKER_ID", host), "worker id recorded in leases (env WORKER_ID)")
	fs.IntVar(&o.concurrency, "concurrency", envInt("CONCURRENCY", simpleworkflow.DefaultConcurrency), "handlers run at once (env CONCURRENCY)")
	fs.DurationVar(&o.leaseDuration, "lease-duration", envDuration("LEASE_DURATION", simpleworkflow.DefaultLeaseDuration), "lease length without heartbeat (env LEASE_DURATION)")
	fs.DurationVar(&o.gracePeriod, "shutdown-grace-period", envDuration("SHUTDOWN_GRACE_PERIOD", simpleworkflow.DefaultShutdownGracePeriod), "time in-flight runs may finish after SIGTERM (env SHUTDOWN_GRACE_PERIOD)")
	fs.DurationVar(&o.reapInterval, "reap-interval", envDuration("REAP_INTERVAL", simpleworkflow.DefaultReapInterval), "how often expired leases are reclaimed (env REAP_INTERVAL)")
	fs.BoolVar(&o.migrate, "migrate", envBool("MIGRATE", false), "apply the schema migrations before starting (env MIGRATE)")
	fs.BoolVar(&o.printVersion, "version", false, "print the version and exit")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if o.printVersion {
		return o, nil
	}
	if o.databaseURL == "" {
		o.databaseURL = envString("DATABASE_URL", "")
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
	if err := registerDemoHandlers(poller, client.Pool()); err != nil {
		return err
	}
	return poller.Run(ctx)
}
