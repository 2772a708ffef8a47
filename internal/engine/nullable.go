package engine

import (
	"math"
	"time"
)

// The typed queries (package queries) pass SQL's null as a nil pointer; these
// convert between that and the engine's zero values.

// deref is *p, or T's zero value when p is nil (SQL's null).
func deref[T any](p *T) T {
	if p == nil {
		var zero T
		return zero
	}
	return *p
}

// nullIfEmpty is nil (SQL's null) for "", else a pointer to s.
func nullIfEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// millisOrNil is d in whole milliseconds, or nil (SQL's null) when d is not
// positive.
func millisOrNil(d time.Duration) *int64 {
	if d <= 0 {
		return nil
	}
	ms := d.Milliseconds()
	return &ms
}

// int32OrNil is n as an int32, or nil (SQL's null) when n is not positive.
func int32OrNil(n int) *int32 {
	if n <= 0 {
		return nil
	}
	v := clamp32(n)
	return &v
}

// clamp32 is n as an int32, saturated at its bounds: a value out of an
// integer parameter's range reaches the database as one it refuses with
// its own error, never wrapped around into another.
func clamp32(n int) int32 {
	return int32(min(max(n, math.MinInt32), math.MaxInt32))
}

// int32Ptr is *p as an int32 (saturated, as clamp32), or nil.
func int32Ptr(p *int) *int32 {
	if p == nil {
		return nil
	}
	v := clamp32(*p)
	return &v
}

// intPtr is *p as an int, or nil.
func intPtr(p *int32) *int {
	if p == nil {
		return nil
	}
	v := int(*p)
	return &v
}

// retryPolicyOf is the retry policy stored as two delays in milliseconds,
// or nil when neither is set (the run's or schedule's defaults apply).
func retryPolicyOf(baseMS, maxMS *int64) *RetryPolicy {
	if baseMS == nil && maxMS == nil {
		return nil
	}
	rp := &RetryPolicy{}
	if baseMS != nil {
		rp.BaseDelay = time.Duration(*baseMS) * time.Millisecond
	}
	if maxMS != nil {
		rp.MaxDelay = time.Duration(*maxMS) * time.Millisecond
	}
	return rp
}
