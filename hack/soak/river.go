package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"regexp"
	"strconv"
	"time"

	"github.com/simple-workflow/simple-workflow/hack/internal/peer"
)

// riverSoakDatabase is the database River's soak runs on, in the engine's
// server.
const riverSoakDatabase = "river_soak"

var riverMinuteLine = regexp.MustCompile(`(?m)^river soak \S+: ([0-9.]+) jobs/s`)

var riverVerdictLine = regexp.MustCompile(`river soak verdict: throughput last/first ([0-9.]+)x, pickup p99 first=(\S+) worst minute ([0-9.]+)x first, river_job last/settled (\S+)`)

// soakRiver runs River (hack/riverbench -mode soak) under the load the
// engine just had, on the same server, with as many clients as the engine
// had pollers and as many workers per client as handlers per poller, River
// deleting completed jobs after the same retention; its lines are printed
// as they come, and its verdict returned.
func soakRiver(ctx context.Context, serverURL string, cfg config) (verdict, error) {
	p, err := peer.Build(ctx, serverURL, "riverbench", riverSoakDatabase)
	if err != nil {
		return verdict{}, err
	}
	defer p.Close()
	var out bytes.Buffer
	if _, err := p.Stream(ctx, io.MultiWriter(os.Stdout, &out), "-mode", "soak",
		"-rate", strconv.FormatFloat(cfg.rate, 'f', 0, 64), "-duration", cfg.duration.String(),
		"-interval", cfg.interval.String(), "-retention", cfg.retention.String(),
		"-clients", strconv.Itoa(cfg.pollers), "-workers", strconv.Itoa(cfg.concurrency),
		"-conns", strconv.Itoa(8+2*cfg.pollers)); err != nil {
		return verdict{}, err
	}
	m := riverVerdictLine.FindStringSubmatch(out.String())
	if m == nil {
		return verdict{}, fmt.Errorf("river's soak printed no verdict line")
	}
	v := verdict{sizes: m[4]}
	for _, l := range riverMinuteLine.FindAllStringSubmatch(out.String(), -1) {
		perSecond, _ := strconv.ParseFloat(l[1], 64)
		v.runs += int64(perSecond * cfg.interval.Seconds())
	}
	v.throughput, _ = strconv.ParseFloat(m[1], 64)
	v.worstP99, _ = strconv.ParseFloat(m[3], 64)
	if v.p99First, err = time.ParseDuration(m[2]); err != nil {
		return verdict{}, fmt.Errorf("river's verdict %q: %w", m[0], err)
	}
	return v, nil
}

// printSideBySide prints the engine's and River's verdicts in one table,
// and what a run cost each: the server's processor time, and the rest of
// the machine's (the workers and the producer: the engine's in this
// process, River's in its own).
func printSideBySide(engine, river verdict) {
	if engine.cpu.HasServer() && river.cpu.HasServer() && engine.runs > 0 && river.runs > 0 {
		es, eself, erest := engine.cpu.PerRun(engine.runs)
		rs, rself, rrest := river.cpu.PerRun(river.runs)
		em, _, _ := engine.cpu.Busy()
		rm, _, _ := river.cpu.Busy()
		fmt.Printf("soak CPU per run (engine | river): server %.0f | %.0f µs (%.2fx), workers and producer %.0f | %.0f µs (%.2fx); machine busy %.0f%% | %.0f%%\n",
			es, rs, es/rs, eself+erest, rself+rrest, (eself+erest)/(rself+rrest), 100*em, 100*rm)
	}
	fmt.Printf("soak side by side (engine | river): pickup p99 of minute 1 %s | %s; worst minute's p99 / minute 1 %.2fx | %.2fx; throughput last/first %.2fx | %.2fx; tables last/settled %s | %s\n",
		engine.p99First, river.p99First, engine.worstP99, river.worstP99, engine.throughput, river.throughput,
		engine.sizes, river.sizes)
}
