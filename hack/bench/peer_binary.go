package main

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/simple-workflow/simple-workflow/hack/internal/peer"
)

// peerBinary is a peer's benchmark, built and run by package peer.
type peerBinary struct{ peer.Binary }

// buildPeer builds hack/<name> and creates its database db.
func buildPeer(ctx context.Context, serverURL, name, db string) (peerBinary, error) {
	b, err := peer.Build(ctx, serverURL, name, db)
	return peerBinary{b}, err
}

// close removes the built binary.
func (p peerBinary) close() { p.Close() }

// run runs the binary with args against its database and returns its
// standard output and standard error.
func (p peerBinary) run(ctx context.Context, args ...string) (stdout, stderr string, err error) {
	return p.Run(ctx, args...)
}

// parsePickup reads a peer's pickup line, matched as p50, p90, p99 and n.
func (p peerBinary) parsePickup(m []string) (pickupResult, error) {
	var res pickupResult
	var err error
	for i, d := range []*time.Duration{&res.p50, &res.p90, &res.p99} {
		if *d, err = time.ParseDuration(m[i+1]); err != nil {
			return pickupResult{}, fmt.Errorf("parse %s pickup line %q: %w", p.Name, m[0], err)
		}
	}
	if res.n, err = strconv.Atoi(m[4]); err != nil {
		return pickupResult{}, fmt.Errorf("parse %s pickup line %q: %w", p.Name, m[0], err)
	}
	return res, nil
}
