package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// profileAPIServer asks the API server for a CPU profile of the next d
// (its /debug/pprof endpoint) and writes it to path; stop waits for it.
func profileAPIServer(ctx context.Context, cfg *rest.Config, path string, d time.Duration) (stop func(), err error) {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("client for the API server's profile: %w", err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		body, err := cs.Discovery().RESTClient().Get().AbsPath("/debug/pprof/profile").
			Param("seconds", strconv.Itoa(int(d.Seconds()))).Timeout(d + 30*time.Second).DoRaw(ctx)
		if err == nil {
			err = os.WriteFile(path, body, 0o644)
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "scalebench: API server profile: %v\n", err)
		}
	}()
	return func() { <-done }, nil
}
