package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/go-logr/logr/funcr"
)

// A normal shutdown reports the end of leadership as an info line; while
// the manager runs it stays an error, as do other errors at shutdown.
func TestLeadershipEndIsQuietOnlyAtShutdown(t *testing.T) {
	var lines []string
	base := funcr.New(func(prefix, args string) { lines = append(lines, prefix+" "+args) }, funcr.Options{})
	stopping := false
	log := newQuietShutdownLogger(base, func() bool { return stopping }).WithName("manager").WithValues("k", "v")

	log.Error(errors.New(leaderElectionLost), "error received after stop sequence was engaged")
	stopping = true
	log.Error(errors.New(leaderElectionLost), "error received after stop sequence was engaged")
	log.Error(errors.New("something else"), "runnable failed")
	log.Error(fmt.Errorf("read body: %w", context.Canceled), "Unexpected error when reading response body")

	if len(lines) != 4 {
		t.Fatalf("logged %d lines: %q", len(lines), lines)
	}
	if !strings.Contains(lines[0], `"error"="leader election lost"`) {
		t.Fatalf("while running, the end of leadership is an error: %s", lines[0])
	}
	if strings.Contains(lines[1], "error") || !strings.Contains(lines[1], "Leadership released on shutdown") || !strings.Contains(lines[1], `"k"="v"`) {
		t.Fatalf("at shutdown, the end of leadership is an info line: %s", lines[1])
	}
	if !strings.Contains(lines[2], `"error"="something else"`) {
		t.Fatalf("other errors at shutdown stay errors: %s", lines[2])
	}
	if strings.Contains(lines[3], `"error"=`) || !strings.Contains(lines[3], "cut off by the shutdown") ||
		!strings.Contains(lines[3], `"cause"="read body: context canceled"`) {
		t.Fatalf("a request cut off by the shutdown is an info line: %s", lines[3])
	}
}
