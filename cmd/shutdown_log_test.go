package main

import (
	"errors"
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

	if len(lines) != 3 {
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
}

// The manager takes --kubeconfig like every controller-runtime manager, and
// says which file it could not load.
func TestKubeconfigFlag(t *testing.T) {
	o, err := parseFlags([]string{"--kubeconfig=/nowhere/kubeconfig"}, envMap(map[string]string{"DATABASE_URL": "postgres://x"}))
	if err != nil || o.kubeconfig != "/nowhere/kubeconfig" {
		t.Fatalf("--kubeconfig not taken: %+v %v", o, err)
	}
	if _, err := restConfig(o.kubeconfig); err == nil || !strings.Contains(err.Error(), "/nowhere/kubeconfig") {
		t.Fatalf("a missing kubeconfig must be named in the error: %v", err)
	}
	o, err = parseFlags(nil, envMap(map[string]string{"DATABASE_URL": "postgres://x", "KUBECONFIG": "/env/kubeconfig"}))
	if err != nil || o.kubeconfig != "/env/kubeconfig" {
		t.Fatalf("KUBECONFIG not taken: %+v %v", o, err)
	}
}
