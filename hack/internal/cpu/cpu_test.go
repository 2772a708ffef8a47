package cpu

import (
	"context"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/simple-workflow/simple-workflow/internal/pgtest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// spin keeps this process's processor busy for d.
func spin(d time.Duration) int {
	n := 0
	for end := time.Now().Add(d); time.Now().Before(end); {
		n++
	}
	return n
}

func TestMeterCountsThisProcessAndTheMachine(t *testing.T) {
	var m Meter
	before, err := m.Read()
	if err != nil {
		t.Fatal(err)
	}
	spin(400 * time.Millisecond)
	after, err := m.Read()
	if err != nil {
		t.Fatal(err)
	}
	u := after.Since(before)
	if u.Self < 250*time.Millisecond {
		t.Errorf("400 ms of spinning counted as %s of this process", u.Self)
	}
	if u.Machine < u.Self/2 {
		t.Errorf("the machine was busy %s while this process alone used %s", u.Machine, u.Self)
	}
	if u.HasServer() {
		t.Errorf("a Meter without a server says it read one")
	}
	if u.Cores < 1 {
		t.Errorf("%d processors", u.Cores)
	}
}

// TestMeterCountsTheServersBackendsExitedOnesToo burns processor time in a
// server process that then disconnects: the server's time must include it
// (the postmaster's count of its children that ended), and this process
// must not be charged for it.
func TestMeterCountsTheServersBackendsExitedOnesToo(t *testing.T) {
	ctx := context.Background()
	pool, url := pgtest.NewPool(t)
	m := ForServer(ctx, pool)
	if m.postmaster == 0 {
		t.Skip("the test server does not run on this machine (or its data directory cannot be read)")
	}
	before, err := m.Read()
	if err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	var pid int
	if err := conn.QueryRow(ctx, "select pg_backend_pid()").Scan(&pid); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for time.Since(start) < 400*time.Millisecond {
		if _, err := conn.Exec(ctx, "select count(*) from generate_series(1, 300000)"); err != nil {
			t.Fatal(err)
		}
	}
	if err := conn.Close(ctx); err != nil {
		t.Fatal(err)
	}
	// Until the backend is gone and the postmaster has collected it.
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := os.Stat("/proc/" + strconv.Itoa(pid)); os.IsNotExist(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("backend %d still there after it disconnected", pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
	after, err := m.Read()
	if err != nil {
		t.Fatal(err)
	}
	u := after.Since(before)
	if !u.HasServer() {
		t.Fatal("the server's time was not read")
	}
	if u.Server < 200*time.Millisecond {
		t.Errorf("a backend that computed for 400 ms and exited counted as %s of the server's", u.Server)
	}
	if u.Self > u.Server {
		t.Errorf("this process (%s) charged more than the server (%s) for the server's work", u.Self, u.Server)
	}
	server, self, rest := u.PerRun(100)
	if server <= 0 || self < 0 || rest < 0 {
		t.Errorf("per run: server %.0f µs, self %.0f µs, rest %.0f µs", server, self, rest)
	}
}
