package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// Notification channels raised by the schema's triggers.
const (
	// ChannelRunCreated carries the type of newly inserted runs, as
	// "namespace/type" (the namespace whose workers run the type; see
	// SplitWakePayload): at most one notification per type and committing
	// transaction, sent at commit. Only
	// one committing transaction per type notifies at a time (so producers
	// are not serialised by NOTIFY); the others leave it to that one, whose
	// notification may therefore arrive just before their runs are visible.
	// A listener that claims on a notification claims again WakeFollowUp
	// after the last one, as the SDKs' pollers do.
	ChannelRunCreated = "workflow_run_created"
	// ChannelRunCancelled carries the id of a run that was just cancelled.
	ChannelRunCancelled = "workflow_run_cancelled"
	// ChannelRunChanged carries the id of a run mirrored from a Kubernetes
	// object (or of the DAG run whose step changed) whenever its status,
	// attempt, holder or wait changes; SourcesOf tells its object. Not the
	// object's name: any database login may LISTEN.
	ChannelRunChanged = "workflow_run_changed"
)

// SplitWakePayload splits a ChannelRunCreated payload into the namespace
// whose workers run the type and the type. A payload without a namespace
// (a NOTIFY sent by hand, or by a schema older than version 8) gives an
// empty namespace: it concerns the type in every namespace.
func SplitWakePayload(payload string) (namespace, workflowType string) {
	if ns, typ, ok := strings.Cut(payload, "/"); ok {
		return ns, typ
	}
	return "", payload
}

// WakeFollowUp is how long after a ChannelRunCreated notification a worker
// claims once more, for runs whose transactions committed right after the
// notifying one (their producers did not notify; see ChannelRunCreated).
const WakeFollowUp = 50 * time.Millisecond

// Notification is one message received on a channel.
type Notification struct {
	Channel string
	Payload string
}

// ListenConfig configures Listen.
type ListenConfig struct {
	// Channels to LISTEN on.
	Channels []string
	// OnNotify is called for each notification, from the listening goroutine.
	OnNotify func(Notification)
	// OnConnect is called after every (re)connection once LISTEN is in
	// place, so the caller can catch up on anything it may have missed.
	OnConnect func()
	// Logger receives connection errors; nil discards them.
	Logger *slog.Logger
	// MaxBackoff caps the delay between reconnection attempts. Defaults to 5s.
	MaxBackoff time.Duration
}

// Listen holds a dedicated connection that LISTENs on the configured channels
// and calls OnNotify for each notification until ctx ends. When the
// connection drops it reconnects by itself with capped exponential backoff.
// It returns ctx's error.
func (e *Engine) Listen(ctx context.Context, cfg ListenConfig) error {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	maxBackoff := cfg.MaxBackoff
	if maxBackoff <= 0 {
		maxBackoff = 5 * time.Second
	}
	backoff := 50 * time.Millisecond
	for {
		err := e.listenOnce(ctx, cfg)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		log.Warn("Listen connection lost; reconnecting", "error", err, "backoff", backoff)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(backoff):
		}
		if err != nil && !errors.Is(err, errConnectedThenLost) {
			backoff = min(backoff*2, maxBackoff)
		} else {
			backoff = 50 * time.Millisecond
		}
	}
}

// errConnectedThenLost marks a connection that worked for a while before it
// failed, so the next attempt starts without backoff.
var errConnectedThenLost = errors.New("listen connection lost")

func (e *Engine) listenOnce(ctx context.Context, cfg ListenConfig) error {
	conn, err := pgx.ConnectConfig(ctx, e.pool.Config().ConnConfig.Copy())
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	for _, ch := range cfg.Channels {
		if _, err := conn.Exec(ctx, "listen "+pgx.Identifier{ch}.Sanitize()); err != nil {
			return fmt.Errorf("listen %s: %w", ch, err)
		}
	}
	if cfg.OnConnect != nil {
		cfg.OnConnect()
	}
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return fmt.Errorf("%w: %w", errConnectedThenLost, err)
		}
		if cfg.OnNotify != nil {
			cfg.OnNotify(Notification{Channel: n.Channel, Payload: n.Payload})
		}
	}
}
