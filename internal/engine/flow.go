package engine

import (
	"fmt"
	"time"
)

// FlowLimits are a workflow type's flow limits, kept by the claim in the
// database (workflow.flow_admit): how many of its runs may be leased at
// once, in all and per concurrency key, and how many may start per window
// of RatePeriod, for the type or for each key. A run held back waits: it is
// neither failed nor charged an attempt. Nil fields set no limit.
type FlowLimits struct {
	// MaxLeased caps the runs of the type leased at once (1 to 100,000).
	MaxLeased *int32
	// MaxLeasedPerKey caps the runs of one concurrency key leased at once
	// (1 to 100,000).
	MaxLeasedPerKey *int32
	// RateLimit is how many runs may start in each window of RatePeriod
	// (1 to 1,000,000); windows are aligned to the Unix epoch.
	RateLimit *int32
	// RatePeriod is the rate window's length (1 ms to 24 h); set with
	// RateLimit.
	RatePeriod time.Duration
	// RatePerKey applies RateLimit to each concurrency key instead of the
	// whole type.
	RatePerKey bool
}

// Limited reports whether any limit is set.
func (f FlowLimits) Limited() bool {
	return f.MaxLeased != nil || f.MaxLeasedPerKey != nil || f.RateLimit != nil
}

// Validate says what is wrong with the limits, wrapping ErrInvalid.
func (f FlowLimits) Validate() error {
	in := func(p *int32, lo, hi int32) bool { return p == nil || (*p >= lo && *p <= hi) }
	switch {
	case !in(f.MaxLeased, 1, 100000):
		return fmt.Errorf("%w: maxLeased must be between 1 and 100000, got %d", ErrInvalid, *f.MaxLeased)
	case !in(f.MaxLeasedPerKey, 1, 100000):
		return fmt.Errorf("%w: maxLeasedPerKey must be between 1 and 100000, got %d", ErrInvalid, *f.MaxLeasedPerKey)
	case !in(f.RateLimit, 1, 1000000):
		return fmt.Errorf("%w: rate limit must be between 1 and 1000000 starts, got %d", ErrInvalid, *f.RateLimit)
	case (f.RateLimit == nil) != (f.RatePeriod == 0):
		return fmt.Errorf("%w: a rate limit needs both a count and a period", ErrInvalid)
	case f.RateLimit != nil && (f.RatePeriod < time.Millisecond || f.RatePeriod > 24*time.Hour):
		return fmt.Errorf("%w: rate period must be between 1ms and 24h, got %s", ErrInvalid, f.RatePeriod)
	case f.RatePerKey && f.RateLimit == nil:
		return fmt.Errorf("%w: a rate per key needs a rate limit", ErrInvalid)
	}
	return nil
}

// ratePeriodMs is the rate period in milliseconds for the database, or nil.
func ratePeriodMs(f FlowLimits) *int64 {
	if f.RateLimit == nil {
		return nil
	}
	ms := f.RatePeriod.Milliseconds()
	return &ms
}
