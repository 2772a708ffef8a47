package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/simple-workflow/simple-workflow/internal/pgtest"
)

// peerBinary is a peer's benchmark (a Go module of its own under hack/),
// built into a temporary directory, and the database it runs against.
type peerBinary struct {
	dir string // holds the built binary
	bin string
	url string
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
	p := peerBinary{dir: dir, bin: filepath.Join(dir, name)}
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
