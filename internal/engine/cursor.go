package engine

import (
	"encoding/base64"
	"fmt"
	"strings"
	"time"
)

// EncodeCursor names a position in a list of runs ordered by creation: the
// run created at at with id id. ListRuns and the console's run list page
// with it, each in its own direction.
func EncodeCursor(at time.Time, id string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(at.UTC().Format(time.RFC3339Nano) + "|" + id))
}

// errMalformedCursor is DecodeCursor's answer to anything it did not write.
var errMalformedCursor = fmt.Errorf("%w: malformed cursor", ErrInvalid)

// DecodeCursor reads what EncodeCursor wrote; anything else is ErrInvalid.
func DecodeCursor(c string) (time.Time, string, error) {
	raw, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil {
		return time.Time{}, "", errMalformedCursor
	}
	ts, id, ok := strings.Cut(string(raw), "|")
	if !ok || !IsRunID(id) {
		return time.Time{}, "", errMalformedCursor
	}
	at, err := time.Parse(time.RFC3339Nano, ts)
	if err != nil {
		return time.Time{}, "", errMalformedCursor
	}
	return at, id, nil
}

// IsRunID reports whether s has the form of a run's id: a UUID in its
// canonical lowercase form.
func IsRunID(s string) bool {
	return len(s) == 36 && s[8] == '-' && s[13] == '-' && s[18] == '-' && s[23] == '-' &&
		isLowerHex(s[:8]) && isLowerHex(s[9:13]) && isLowerHex(s[14:18]) && isLowerHex(s[19:23]) && isLowerHex(s[24:])
}
