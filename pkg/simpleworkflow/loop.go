package simpleworkflow

import "context"

// loop is the start and stop of one of a session's loops: the claimer
// (claim.go), the heartbeater and the confirmer (heartbeat.go), the reaper
// (reap.go), the step writer (step_writer.go), the log sender (run_log.go)
// and the completer (outcome_write.go). Each loop is a type of its own that
// holds what only it uses; the session holds what they share, the runs
// this worker holds and their slots. start runs the loop in a goroutine of
// its own, under a context of its own; stop ends that context and waits
// for the loop to return.
type loop struct {
	cancel context.CancelFunc
	done   chan struct{}
}

// start runs run in its own goroutine until stop.
func (l *loop) start(ctx context.Context, run func(context.Context)) {
	ctx, l.cancel = context.WithCancel(ctx)
	l.done = make(chan struct{})
	go func() {
		defer close(l.done)
		run(ctx)
	}()
}

// stop ends the loop's context and waits for it to return; a loop never
// started stops at once.
func (l *loop) stop() {
	if l.cancel == nil {
		return
	}
	l.cancel()
	<-l.done
}
