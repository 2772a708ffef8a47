package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"github.com/simple-workflow/simple-workflow/internal/pgtest"
)

// peerBinary is a peer's benchmark (a Go module of its own under hack/),
// built into a temporary directory, and the database it runs against.
type peerBinary struct {
	name string // hack/<name>
	dir  string // holds the built binary
	bin  string
	url  string
}

// buildPeer builds the module hack/<name> (its dependencies come through the
// Go module proxy on first use) and creates the database db on the server
// of serverURL when it is missing.
func buildPeer(ctx context.Context, serverURL, name, db string) (peerBinary, error) {
	src, err := pgtest.RepoFile(filepath.Join("hack", name))
	if err != nil {
		return peerBinary{}, fmt.Errorf("find hack/%s: %w", name, err)
	}
	dir, err := os.MkdirTemp("", name+"-")
	if err != nil {
		return peerBinary{}, fmt.Errorf("temp dir: %w", err)
	}
	p := peerBinary{name: name, dir: dir, bin: filepath.Join(dir, name)}
	build := exec.CommandContext(ctx, "go", "build", "-o", p.bin, ".")
	build.Dir = src
	if out, err := build.CombinedOutput(); err != nil {
		p.close()
		return peerBinary{}, fmt.Errorf("build hack/%s: %w\n%s", name, err, out)
	}
	if p.url, err = pgtest.WithDatabase(serverURL, db); err != nil {
		p.close()
		return peerBinary{}, err
	}
	if err := createDatabase(ctx, serverURL, db); err != nil {
		p.close()
		return peerBinary{}, err
	}
	return p, nil
}

// close removes the built binary.
func (p peerBinary) close() { _ = os.RemoveAll(p.dir) }

// run runs the binary with args against its database and returns its
// standard output and standard error.
func (p peerBinary) run(ctx context.Context, args ...string) (stdout, stderr string, err error) {
	cmd := exec.CommandContext(ctx, p.bin, args...)
	cmd.Env = append(os.Environ(), "DATABASE_URL="+p.url)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		return "", "", fmt.Errorf("%s %v: %w\n%s", p.name, args, err, errOut.Bytes())
	}
	return out.String(), errOut.String(), nil
}

// parsePickup reads a peer's pickup line, matched as p50, p90, p99 and n.
func (p peerBinary) parsePickup(m []string) (pickupResult, error) {
	var res pickupResult
	var err error
	for i, d := range []*time.Duration{&res.p50, &res.p90, &res.p99} {
		if *d, err = time.ParseDuration(m[i+1]); err != nil {
			return pickupResult{}, fmt.Errorf("parse %s pickup line %q: %w", p.name, m[0], err)
		}
	}
	if res.n, err = strconv.Atoi(m[4]); err != nil {
		return pickupResult{}, fmt.Errorf("parse %s pickup line %q: %w", p.name, m[0], err)
	}
	return res, nil
}
