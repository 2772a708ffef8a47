// Package cpu reads how much processor time a PostgreSQL server on this
// machine, this process and the whole machine have used, from /proc, so a
// benchmark can say how many microseconds of each one run cost: the profile
// behind a throughput or latency ratio.
package cpu

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// clockTicks is the kernel's USER_HZ: /proc reports times in these (100 on
// every Linux architecture Go supports).
const clockTicks = 100

// Meter reads processor time. The zero Meter reads only this process and the
// machine; one made by ForServer also reads a PostgreSQL server.
type Meter struct {
	postmaster int // 0: the server is not on this machine (or not readable)
}

// Reading is the processor time used up to one moment.
type Reading struct {
	At      time.Time
	Server  time.Duration // the server's processes, the exited ones included
	Self    time.Duration // this process
	Machine time.Duration // every processor of the machine, busy (not idle or waiting on I/O)
	Cores   int
	server  bool
}

// ForServer returns a Meter for the server pool is connected to, when that
// server runs on this machine and its data directory can be read (a
// superuser's connection); otherwise a Meter without the server.
func ForServer(ctx context.Context, pool *pgxpool.Pool) Meter {
	var dir string
	if err := pool.QueryRow(ctx, "select current_setting('data_directory')").Scan(&dir); err != nil {
		return Meter{}
	}
	b, err := os.ReadFile(filepath.Join(dir, "postmaster.pid"))
	if err != nil {
		return Meter{}
	}
	first, _, _ := strings.Cut(string(b), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(first))
	if err != nil {
		return Meter{}
	}
	return Meter{postmaster: pid}
}

// Read returns the processor time used so far.
func (m Meter) Read() (Reading, error) {
	r := Reading{At: time.Now(), server: m.postmaster != 0}
	self, err := procTimes("self")
	if err != nil {
		return r, err
	}
	r.Self = self.own
	if r.Machine, r.Cores, err = machineBusy(); err != nil {
		return r, err
	}
	if m.postmaster != 0 {
		if r.Server, err = treeTime(m.postmaster); err != nil {
			return r, err
		}
	}
	return r, nil
}

// Use is the processor time used between two readings.
type Use struct {
	Elapsed               time.Duration
	Server, Self, Machine time.Duration
	Cores                 int
	hasServer             bool
}

// Since returns the use from an earlier reading to r.
func (r Reading) Since(earlier Reading) Use {
	return Use{Elapsed: r.At.Sub(earlier.At), Server: r.Server - earlier.Server, Self: r.Self - earlier.Self,
		Machine: r.Machine - earlier.Machine, Cores: r.Cores, hasServer: r.server && earlier.server}
}

// PerRun returns microseconds per run of the server, this process and the
// rest of the machine (busy time neither the server nor this process used,
// never below zero), over n runs.
func (u Use) PerRun(n int64) (server, self, rest float64) {
	if n <= 0 {
		return 0, 0, 0
	}
	us := func(d time.Duration) float64 { return float64(d.Microseconds()) / float64(n) }
	// The machine's and the processes' times are counted in ticks by
	// different means: what is left can come out a few ticks below zero.
	return us(u.Server), us(u.Self), us(max(u.Machine-u.Server-u.Self, 0))
}

// Busy returns the share of the machine's processors that were busy, and of
// that the server's and this process's, each as a share of all processors.
func (u Use) Busy() (machine, server, self float64) {
	all := u.Elapsed.Seconds() * float64(max(u.Cores, 1))
	if all <= 0 {
		return 0, 0, 0
	}
	return u.Machine.Seconds() / all, u.Server.Seconds() / all, u.Self.Seconds() / all
}

// HasServer reports whether the server's time was read.
func (u Use) HasServer() bool { return u.hasServer }

// String gives the shares of the machine, e.g. "machine 92% (server 61%, this process 27%)".
func (u Use) String() string {
	machine, server, self := u.Busy()
	if !u.hasServer {
		return fmt.Sprintf("machine %.0f%% (this process %.0f%%)", 100*machine, 100*self)
	}
	return fmt.Sprintf("machine %.0f%% (server %.0f%%, this process %.0f%%)", 100*machine, 100*server, 100*self)
}

type times struct {
	ppid     int
	own      time.Duration // utime + stime
	children time.Duration // cutime + cstime: children that exited and were waited for
}

// procTimes reads /proc/<pid>/stat.
func procTimes(pid string) (times, error) {
	b, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return times{}, fmt.Errorf("read the times of process %s: %w", pid, err)
	}
	// The command name (field 2) may hold spaces: the fields after it
	// start past its closing parenthesis.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return times{}, fmt.Errorf("process %s: unexpected stat %q", pid, s)
	}
	f := strings.Fields(s[i+1:])
	// f[0] is field 3 (state): ppid is field 4, utime..cstime fields 14-17.
	if len(f) < 15 {
		return times{}, fmt.Errorf("process %s: short stat %q", pid, s)
	}
	n := func(k int) int64 { v, _ := strconv.ParseInt(f[k-3], 10, 64); return v }
	tick := time.Second / clockTicks
	return times{ppid: int(n(4)), own: time.Duration(n(14)+n(15)) * tick,
		children: time.Duration(n(16)+n(17)) * tick}, nil
}

// treeTime returns the time of the postmaster, its live children and its
// children that exited (a backend that disconnected, an autovacuum worker
// that finished).
func treeTime(postmaster int) (time.Duration, error) {
	pm, err := procTimes(strconv.Itoa(postmaster))
	if err != nil {
		return 0, err
	}
	total := pm.own + pm.children
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, fmt.Errorf("list processes: %w", err)
	}
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		t, err := procTimes(e.Name())
		if err != nil || t.ppid != postmaster {
			continue // gone meanwhile, or not the server's
		}
		total += t.own
	}
	return total, nil
}

// machineBusy reads the busy time of every processor from /proc/stat (user,
// nice, system, irq and softirq; not idle, I/O wait or time stolen by a
// hypervisor) and the number of processors.
func machineBusy() (time.Duration, int, error) {
	f, err := os.Open("/proc/stat")
	if err != nil {
		return 0, 0, fmt.Errorf("read /proc/stat: %w", err)
	}
	defer f.Close()
	var busy time.Duration
	cores := 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) == 0 || !strings.HasPrefix(fields[0], "cpu") {
			continue
		}
		if fields[0] != "cpu" {
			cores++
			continue
		}
		// cpu user nice system idle iowait irq softirq steal ...
		for _, k := range []int{1, 2, 3, 6, 7} {
			if k < len(fields) {
				v, _ := strconv.ParseInt(fields[k], 10, 64)
				busy += time.Duration(v) * (time.Second / clockTicks)
			}
		}
	}
	return busy, cores, sc.Err()
}
