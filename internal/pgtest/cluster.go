package pgtest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Cluster is a throwaway Postgres cluster of a test's own, started with
// hack/pg.sh, which the test may crash-restart or freeze without disturbing
// anyone else.
type Cluster struct {
	// URL connects to the cluster's postgres database as its superuser.
	URL    string
	script string
	dir    string
}

// StartCluster starts a cluster whose data and socket live in a new
// directory under the system's temporary directory. It is stopped by Stop,
// or by the script when this process exits.
func StartCluster(ctx context.Context) (*Cluster, error) {
	script, err := RepoFile("hack/pg.sh")
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "simple-workflow-pg-")
	if err != nil {
		return nil, fmt.Errorf("temp dir: %w", err)
	}
	c := &Cluster{script: script, dir: filepath.Join(dir, "pg")}
	cmd := exec.CommandContext(ctx, "bash", script, "start", c.dir, "--watch", strconv.Itoa(os.Getpid()))
	cmd.Env = append(os.Environ(), "PG_FSYNC="+envOr("PG_FSYNC", "off"))
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("start postgres with %s: %w", script, err)
	}
	c.URL = strings.TrimSpace(string(out))
	return c, nil
}

// Restart crash-restarts the server (pg_ctl restart -m immediate) on the
// same port: every connection is cut and in-flight transactions are lost.
func (c *Cluster) Restart(ctx context.Context) error { return c.script1(ctx, "restart", c.dir) }

// Halt stops the server (its files stay): connections are refused until
// Resume.
func (c *Cluster) Halt(ctx context.Context) error { return c.script1(ctx, "halt", c.dir) }

// Resume starts a halted server again on its port.
func (c *Cluster) Resume(ctx context.Context) error { return c.script1(ctx, "resume", c.dir) }

// Pause freezes every server process for d, then lets them go on.
func (c *Cluster) Pause(ctx context.Context, d time.Duration) error {
	return c.script1(ctx, "pause", c.dir, strconv.Itoa(int(d.Round(time.Second)/time.Second)))
}

// Stop stops the server and removes its files.
func (c *Cluster) Stop() {
	_ = c.script1(context.Background(), "stop", c.dir)
	_ = os.RemoveAll(filepath.Dir(c.dir))
}

func (c *Cluster) script1(ctx context.Context, args ...string) error {
	out, err := exec.CommandContext(ctx, "bash", append([]string{c.script}, args...)...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("pg.sh %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return nil
}
