package engine

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"time"
	"unicode/utf8"
)

// typePattern is the workflow type format, the same as the database's
// workflow_run_type_format constraint.
var typePattern = regexp.MustCompile(`^[a-z0-9_]+(\.[a-z0-9_]+)*\.v[0-9]+$`)

// Limits enforced on a run's fields, in Go and in the schema.
const (
	// MaxTypeLength is the longest workflow type accepted.
	MaxTypeLength = 253
	// MaxIdempotencyKeyLength is the longest idempotency key accepted.
	MaxIdempotencyKeyLength = 512
	// MaxAttemptsLimit is the largest max_attempts accepted.
	MaxAttemptsLimit = 1000
	// DefaultMaxAttempts is used when a run does not say.
	DefaultMaxAttempts = 3
	// DefaultPriority is used when a run does not say; lower runs first.
	DefaultPriority = 100
)

// typeRule is the sentence of the rule workflow_run_type_format, which the
// database says itself (workflow.sql, the rules a caller can break);
// ValidateType says it before the round trip.
const typeRule = "type must be dot-separated lowercase segments of letters, digits and underscores " +
	"ending in a version such as .v1 (for example content.thumbnail.v1), at most 253 characters"

// ValidateType reports whether t is a well-formed versioned workflow type.
func ValidateType(t string) error {
	if len(t) > MaxTypeLength || !typePattern.MatchString(t) {
		return fmt.Errorf("%w: type %q: %s", ErrInvalid, t, typeRule)
	}
	return nil
}

// ValidatePayload reports whether p is a JSON object. An empty payload is
// accepted and means {}.
func ValidatePayload(p []byte) error {
	p = bytes.TrimSpace(p)
	if len(p) == 0 {
		return nil
	}
	if !json.Valid(p) {
		return fmt.Errorf("%w: payload is not valid JSON", ErrInvalid)
	}
	if p[0] != '{' {
		return fmt.Errorf("%w: payload must be a JSON object", ErrInvalid)
	}
	return nil
}

// Validate checks the parameters before they reach the database, so that bad
// input gets a specific error and nothing is written.
func (p CreateParams) Validate() error {
	if err := ValidateType(p.Type); err != nil {
		return err
	}
	if err := ValidatePayload(p.Payload); err != nil {
		return err
	}
	if p.MaxAttempts < 0 || p.MaxAttempts > MaxAttemptsLimit {
		return fmt.Errorf("%w: max attempts must be between 1 and %d, got %d", ErrInvalid, MaxAttemptsLimit, p.MaxAttempts)
	}
	if len(p.IdempotencyKey) > MaxIdempotencyKeyLength {
		return fmt.Errorf("%w: idempotency key is %d characters, at most %d are allowed",
			ErrInvalid, len(p.IdempotencyKey), MaxIdempotencyKeyLength)
	}
	if k := p.IdempotencyKey; strings.ContainsRune(k, 0) || !utf8.ValidString(k) {
		return fmt.Errorf("%w: idempotency key must be UTF-8 text without NUL characters", ErrInvalid)
	}
	if err := ValidateConcurrencyKey(p.ConcurrencyKey); err != nil {
		return err
	}
	if err := ValidateNamespace(p.Namespace); err != nil {
		return err
	}
	if err := ValidateNamespace(p.TypeNamespace); err != nil {
		return fmt.Errorf("type namespace: %w", err)
	}
	if rp := p.RetryPolicy; rp != nil {
		if rp.BaseDelay < 0 || rp.MaxDelay < 0 {
			return fmt.Errorf("%w: retry delays must not be negative", ErrInvalid)
		}
		if rp.BaseDelay > 0 && rp.BaseDelay < time.Millisecond {
			return fmt.Errorf("%w: retry base delay must be at least 1ms", ErrInvalid)
		}
		if rp.BaseDelay > 0 && rp.MaxDelay > 0 && rp.MaxDelay < rp.BaseDelay {
			return fmt.Errorf("%w: retry max delay %s is below the base delay %s", ErrInvalid, rp.MaxDelay, rp.BaseDelay)
		}
	}
	if p.Deadline < 0 || (p.Deadline > 0 && p.Deadline < time.Millisecond) {
		return fmt.Errorf("%w: deadline must be at least 1ms, got %s", ErrInvalid, p.Deadline)
	}
	if err := ValidateTraceParent(p.TraceParent); err != nil {
		return err
	}
	if p.Deadline > 0 && p.DeadlineAt != nil {
		return fmt.Errorf("%w: give a deadline as a duration or as an instant, not both", ErrInvalid)
	}
	return nil
}

// ValidateStepName checks a step or signal name: 1 to 128 characters of
// letters, digits and . _ : -.
func ValidateStepName(name string) error {
	if len(name) == 0 || len(name) > MaxStepNameLength {
		return fmt.Errorf("%w: step name must be 1 to %d characters, got %d", ErrInvalid, MaxStepNameLength, len(name))
	}
	for _, c := range name {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == ':' || c == '-') {
			return fmt.Errorf("%w: step name %q may contain only letters, digits and . _ : -", ErrInvalid, name)
		}
	}
	return nil
}

// MaxConcurrencyKeyLength is the most characters a concurrency key may have.
const MaxConcurrencyKeyLength = 255

// ValidateConcurrencyKey reports whether k is empty (no key) or a key the
// database accepts: 1 to 255 characters of UTF-8 text without NUL.
func ValidateConcurrencyKey(k string) error {
	if utf8.RuneCountInString(k) > MaxConcurrencyKeyLength {
		return fmt.Errorf("%w: concurrency key is %d characters, at most %d are allowed",
			ErrInvalid, utf8.RuneCountInString(k), MaxConcurrencyKeyLength)
	}
	if strings.ContainsRune(k, 0) || !utf8.ValidString(k) {
		return fmt.Errorf("%w: concurrency key must be UTF-8 text without NUL characters", ErrInvalid)
	}
	return nil
}
