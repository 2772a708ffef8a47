package simpleworkflow

import (
	"context"
	"errors"
	"time"
)

// withRetry calls f until it succeeds, ctx ends, five attempts failed, or f
// reports invalid input (which a retry cannot fix).
func withRetry[T any](ctx context.Context, f func(context.Context) (T, error)) (T, error) {
	var (
		out T
		err error
	)
	delay := 100 * time.Millisecond
	for i := range 5 {
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		out, err = f(cctx)
		cancel()
		if err == nil || ctx.Err() != nil || i == 4 || errors.Is(err, ErrInvalid) {
			return out, err
		}
		select {
		case <-ctx.Done():
			return out, err
		case <-time.After(delay):
		}
		delay *= 2
	}
	return out, err
}
