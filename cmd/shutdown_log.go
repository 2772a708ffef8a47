package main

import (
	"github.com/go-logr/logr"
)

// leaderElectionLost is how controller-runtime reports the end of leadership,
// whether the lease was lost or released on purpose at shutdown.
const leaderElectionLost = "leader election lost"

// quietShutdownSink is a logr.LogSink that reports the end of leadership
// during a shutdown the manager asked for (SIGTERM, Ctrl-C) as the info line
// it is, instead of an error with a stack trace. An end of leadership while
// the manager runs is still an error.
type quietShutdownSink struct {
	logr.LogSink
	stopping func() bool
}

// newQuietShutdownLogger wraps log; stopping reports whether shutdown began.
func newQuietShutdownLogger(log logr.Logger, stopping func() bool) logr.Logger {
	return logr.New(quietShutdownSink{LogSink: log.GetSink(), stopping: stopping})
}

// Error logs err, unless it is the end of leadership during shutdown.
func (s quietShutdownSink) Error(err error, msg string, kv ...any) {
	if err != nil && err.Error() == leaderElectionLost && s.stopping() {
		s.LogSink.Info(0, "Leadership released on shutdown")
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
