package devenv

import (
	"context"
	"fmt"
	"log/slog"
	"os/exec"
	"sync"
	"syscall"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// ReplicaFollower keeps as many worker processes running as a Deployment's
// spec.replicas asks for: it plays the kubelet for the demo and the e2e
// suite. Stopped processes get SIGTERM (the worker's graceful shutdown),
// then SIGKILL after StopTimeout.
type ReplicaFollower struct {
	Client    client.Client
	Namespace string
	Name      string
	// Command builds the command of replica i (not yet started).
	Command func(i int) *exec.Cmd
	// Interval between looks at the Deployment; 200ms when zero.
	Interval time.Duration
	// StopTimeout before a stopping process is killed; 30s when zero.
	StopTimeout time.Duration
	Log         *slog.Logger

	mu      sync.Mutex
	running []*exec.Cmd
	next    int
	peak    int
}

// Running returns the number of processes running now.
func (f *ReplicaFollower) Running() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.running)
}

// MaxRunning returns the most processes that ran at once.
func (f *ReplicaFollower) MaxRunning() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.peak
}

// Run follows the Deployment until ctx ends, then stops every process.
func (f *ReplicaFollower) Run(ctx context.Context) error {
	interval := f.Interval
	if interval == 0 {
		interval = 200 * time.Millisecond
	}
	defer func() { _ = f.scaleTo(0) }() // every process stopped; Run ends with ctx either way
	for {
		var d appsv1.Deployment
		err := f.Client.Get(ctx, client.ObjectKey{Namespace: f.Namespace, Name: f.Name}, &d)
		switch {
		case err == nil && d.Spec.Replicas != nil:
			if err := f.scaleTo(int(*d.Spec.Replicas)); err != nil && f.Log != nil {
				f.Log.Error("Starting a worker process failed", "error", err)
			}
		case client.IgnoreNotFound(err) == nil:
			_ = f.scaleTo(0)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(interval):
		}
	}
}

func (f *ReplicaFollower) scaleTo(n int) error {
	f.mu.Lock()
	defer func() {
		f.peak = max(f.peak, len(f.running))
		f.mu.Unlock()
	}()
	for len(f.running) < n {
		cmd := f.Command(f.next)
		f.next++
		if err := cmd.Start(); err != nil {
			return fmt.Errorf("start worker: %w", err)
		}
		if f.Log != nil {
			f.Log.Info("Started worker process", "deployment", f.Name, "pid", cmd.Process.Pid)
		}
		f.running = append(f.running, cmd)
	}
	for len(f.running) > n {
		cmd := f.running[len(f.running)-1]
		f.running = f.running[:len(f.running)-1]
		go f.stop(cmd)
	}
	return nil
}

func (f *ReplicaFollower) stop(cmd *exec.Cmd) {
	timeout := f.StopTimeout
	if timeout == 0 {
		timeout = 30 * time.Second
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(timeout):
		_ = cmd.Process.Kill()
		<-done
	}
	if f.Log != nil {
		f.Log.Info("Stopped worker process", "deployment", f.Name, "pid", cmd.Process.Pid)
	}
}
