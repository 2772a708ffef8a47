package cpu

import (
	"context"
	"os"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/simple-workflow/simple-workflow/internal/pgtest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// rusageSelf returns this process's processor time as getrusage counts it:
// a source independent of /proc's per-process times.
func rusageSelf(t *testing.T) time.Duration {
	t.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// spin keeps this process's processor busy until it has used d more of it
// (however long that takes on a loaded machine).
func spin(t *testing.T, d time.Duration) {
	t.Helper()
	end := rusageSelf(t) + d
	for n := 0; rusageSelf(t) < end; n++ {
		for i := 0; i < 100000; i++ {
			n ^= i
		}
	}
}

func TestMeterCountsThisProcessAndTheMachine(t *testing.T) {
	var m Meter
	before, err := m.Read()
	if err != nil {
		t.Fatal(err)
	}
	r0 := rusageSelf(t)
	spin(t, 300*time.Millisecond)
	used := rusageSelf(t) - r0
	after, err := m.Read()
	if err != nil {
		t.Fatal(err)
	}
	u := after.Since(before)
	// /proc counts in ticks of 10 ms: a few may fall either side.
	if diff := u.Self - used; diff < -50*time.Millisecond || diff > 50*time.Millisecond {
		t.Errorf("this process used %s (getrusage), the meter counted %s", used, u.Self)
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
	// The backend computes until it has used 300 ms of processor time by
	// its own count, read just before it disconnects.
	var backend times
	for backend.own < 300*time.Millisecond {
		if _, err := conn.Exec(ctx, "select count(*) from generate_series(1, 300000)"); err != nil {
			t.Fatal(err)
		}
		if backend, err = procTimes(strconv.Itoa(pid)); err != nil {
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
	if u.Server < backend.own-20*time.Millisecond {
		t.Errorf("a backend that used %s and exited counted as %s of the server's", backend.own, u.Server)
	}
	if u.Self > u.Server {
		t.Errorf("this process (%s) charged more than the server (%s) for the server's work", u.Self, u.Server)
	}
	server, self, rest := u.PerRun(100)
	if server <= 0 || self < 0 || rest < 0 {
		t.Errorf("per run: server %.0f µs, self %.0f µs, rest %.0f µs", server, self, rest)
	}
}
