package main

import (
	"context"
	"errors"

	"github.com/go-logr/logr"
)

// leaderElectionLost is how controller-runtime reports the end of leadership,
// whether the lease was lost or released on purpose at shutdown.
const leaderElectionLost = "leader election lost"

// quietShutdownSink is a logr.LogSink that reports, during a shutdown the
// manager asked for (SIGTERM, Ctrl-C), what the shutdown itself causes as
// the info lines they are, instead of errors with stack traces: the end of
// leadership, and requests cut off by the cancelled context (client-go logs
// a response body it could no longer read). The same errors while the
// manager runs are still errors.
type quietShutdownSink struct {
	logr.LogSink
	stopping func() bool
}

// newQuietShutdownLogger wraps log; stopping reports whether shutdown began.
func newQuietShutdownLogger(log logr.Logger, stopping func() bool) logr.Logger {
	return logr.New(quietShutdownSink{LogSink: log.GetSink(), stopping: stopping})
}

// Error logs err, unless the shutdown caused it.
func (s quietShutdownSink) Error(err error, msg string, kv ...any) {
	switch {
	case err == nil || !s.stopping():
	case err.Error() == leaderElectionLost:
		s.Info(0, "Leadership released on shutdown")
		return
	case errors.Is(err, context.Canceled):
		s.Info(0, msg+" (cut off by the shutdown)", append(kv, "cause", err.Error())...)
		return
	}
	s.LogSink.Error(err, msg, kv...)
}

// WithValues keeps the wrapper around the returned sink.
func (s quietShutdownSink) WithValues(kv ...any) logr.LogSink {
	return quietShutdownSink{LogSink: s.LogSink.WithValues(kv...), stopping: s.stopping}
}

// WithName keeps the wrapper around the returned sink.
func (s quietShutdownSink) WithName(name string) logr.LogSink {
	return quietShutdownSink{LogSink: s.LogSink.WithName(name), stopping: s.stopping}
}

// WithCallDepth keeps the caller's file and line right.
func (s quietShutdownSink) WithCallDepth(depth int) logr.LogSink {
	if cd, ok := s.LogSink.(logr.CallDepthLogSink); ok {
		return quietShutdownSink{LogSink: cd.WithCallDepth(depth), stopping: s.stopping}
	}
	return s
}
