package controller

import (
	"fmt"
	"strings"
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// MaxConditionMessageBytes bounds every condition message the controllers
// write. The API server refuses a condition message above 32 KiB, and with it
// the whole status write; a few KiB are plenty to say what is wrong.
const MaxConditionMessageBytes = 4 * 1024

// boundMessage shortens msg to at most MaxConditionMessageBytes, cutting at a
// rune boundary and marking the cut.
func boundMessage(msg string) string {
	if len(msg) <= MaxConditionMessageBytes {
		return msg
	}
	const mark = "… (truncated)"
	cut := MaxConditionMessageBytes - len(mark)
	for cut > 0 && !utf8.RuneStart(msg[cut]) {
		cut--
	}
	return msg[:cut] + mark
}

// listWithinBytes joins items with sep, stopping before limit bytes and
// ending with "… and N more" when some are left out. Use it for messages that
// list one entry per problem (conflicts, rejected entries), whose count has
// no bound.
func listWithinBytes(items []string, sep string, limit int) string {
	var b strings.Builder
	for i, it := range items {
		more := fmt.Sprintf("%s… and %d more", sep, len(items)-i)
		n := len(it)
		if i > 0 {
			n += len(sep)
		}
		// Keep room for the "… and N more" tail unless this is the last item.
		room := limit - b.Len()
		if i < len(items)-1 {
			room -= len(more)
		}
		if n > room {
			if i == 0 {
				return fmt.Sprintf("… and %d more", len(items))
			}
			b.WriteString(more)
			return b.String()
		}
		if i > 0 {
			b.WriteString(sep)
		}
		b.WriteString(it)
	}
	return b.String()
}

// setCondition is meta.SetStatusCondition with the message bounded; every
// condition the controllers write goes through it.
func setCondition(conds *[]metav1.Condition, c metav1.Condition) bool {
	c.Message = boundMessage(c.Message)
	return meta.SetStatusCondition(conds, c)
}
