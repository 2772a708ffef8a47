package engine

import (
	"fmt"
	"strings"
)

// TraceParentLength is the length of a version-00 W3C traceparent.
const TraceParentLength = 55

// traceParentRule is the rule of the workflow_run_traceparent_format
// constraint, in words.
const traceParentRule = "traceparent must be a W3C traceparent: 00-<32 lowercase hex trace id>-<16 lowercase hex parent id>-<2 hex flags>, neither id all zeros"

// ValidateTraceParent reports whether tp is empty (no trace context) or a
// version-00 W3C traceparent the database accepts: 00-<trace id>-<parent
// id>-<flags> in lowercase hex, neither id all zeros. It is the rule of the
// workflow_run_traceparent_format constraint.
func ValidateTraceParent(tp string) error {
	if tp == "" {
		return nil
	}
	if !validTraceParent(tp) {
		shown := tp
		if len(shown) > 80 {
			shown = shown[:80] + "..."
		}
		return fmt.Errorf("%w: traceparent %q: %s", ErrInvalid, shown, traceParentRule)
	}
	return nil
}

func validTraceParent(tp string) bool {
	if len(tp) != TraceParentLength || tp[0:3] != "00-" || tp[35] != '-' || tp[52] != '-' {
		return false
	}
	traceID, spanID, flags := tp[3:35], tp[36:52], tp[53:55]
	return isLowerHex(traceID) && isLowerHex(spanID) && isLowerHex(flags) &&
		strings.Trim(traceID, "0") != "" && strings.Trim(spanID, "0") != ""
}

// isLowerHex reports whether s is made of lowercase hexadecimal digits only.
func isLowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}
