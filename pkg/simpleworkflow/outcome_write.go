package simpleworkflow

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/simple-workflow/simple-workflow/internal/engine"
)

// cleanedNote marks a text that was changed so that Postgres can store it.
const cleanedNote = " [cleaned: NUL bytes removed, invalid UTF-8 replaced]"

// cleanText returns s as Postgres text can hold it: without NUL bytes and
// with invalid UTF-8 replaced, saying so at its end when it changed.
func cleanText(s string) string {
	if strings.IndexByte(s, 0) < 0 && strings.ToValidUTF8(s, "") == s {
		return s
	}
	return strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "") + cleanedNote
}

// writeCompletions records successful attempts. A batch that the database
// refuses as invalid (a result it cannot store, such as one holding \u0000)
// is written row by row, so only the bad row is affected: that run fails
// for good, saying why, instead of being executed again.
func (s *session) writeCompletions(ctx context.Context, cs []engine.Completion) ([]engine.Completed, []engine.Failure, error) {
	done, err := withRetry(ctx, func(ctx context.Context) ([]engine.Completed, error) {
		return s.eng.CompleteRuns(ctx, s.cfg.WorkerID, cs)
	})
	if err == nil || !errors.Is(err, ErrInvalid) {
		return done, nil, err
	}
	done = done[:0]
	var unstorable []engine.Failure
	for _, c := range cs {
		one, err := withRetry(ctx, func(ctx context.Context) ([]engine.Completed, error) {
			return s.eng.CompleteRuns(ctx, s.cfg.WorkerID, []engine.Completion{c})
		})
		switch {
		case errors.Is(err, ErrInvalid):
			unstorable = append(unstorable, engine.Failure{LeaseRef: c.LeaseRef,
				Error: cleanText(fmt.Sprintf("the handler's result could not be stored: %v", err))})
		case err != nil:
			return done, unstorable, err
		default:
			done = append(done, one...)
		}
	}
	return done, unstorable, nil
}

// writeFailures records failed attempts, row by row when the database
// refuses the batch as invalid; a row still refused is recorded with a
// replacement message.
func (s *session) writeFailures(ctx context.Context, fs []engine.Failure) ([]engine.FailResult, error) {
	for i := range fs {
		fs[i].Error = cleanText(fs[i].Error)
	}
	res, err := withRetry(ctx, func(ctx context.Context) ([]engine.FailResult, error) {
		return s.eng.FailRuns(ctx, s.cfg.WorkerID, fs)
	})
	if err == nil || !errors.Is(err, ErrInvalid) {
		return res, err
	}
	res = res[:0]
	for _, f := range fs {
		one, err := withRetry(ctx, func(ctx context.Context) ([]engine.FailResult, error) {
			return s.eng.FailRuns(ctx, s.cfg.WorkerID, []engine.Failure{f})
		})
		if errors.Is(err, ErrInvalid) {
			f.Error = fmt.Sprintf("the handler's error could not be stored: %v", err)
			one, err = withRetry(ctx, func(ctx context.Context) ([]engine.FailResult, error) {
				return s.eng.FailRuns(ctx, s.cfg.WorkerID, []engine.Failure{f})
			})
		}
		if err != nil {
			return res, err
		}
		res = append(res, one...)
	}
	return res, nil
}
