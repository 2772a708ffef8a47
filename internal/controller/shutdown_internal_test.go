package controller

import (
	"context"
	"errors"
	"testing"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"
)

// A reconcile cut short by the manager stopping returns no error (nothing
// to log, nothing to retry here); any other error is returned as it was.
func TestEndOnShutdown(t *testing.T) {
	failed := errors.New("write status: context canceled")
	live := context.Background()
	if _, err := endOnShutdown(live, ctrl.Result{}, failed); !errors.Is(err, failed) {
		t.Fatalf("a running manager must see the error: %v", err)
	}
	if res, err := endOnShutdown(live, ctrl.Result{RequeueAfter: time.Second}, nil); err != nil || res.RequeueAfter != time.Second {
		t.Fatalf("a success must pass through: %v %v", res, err)
	}
	stopping, cancel := context.WithCancel(context.Background())
	cancel()
	if res, err := endOnShutdown(stopping, ctrl.Result{RequeueAfter: time.Second}, failed); err != nil || res != (ctrl.Result{}) {
		t.Fatalf("a stopping manager drops the error: %v %v", res, err)
	}
}
