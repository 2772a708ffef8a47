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

// joinBounded joins items with sep after prefix, stopping before the
// message would pass MaxConditionMessageBytes and saying how many items were
// left out ("… and N more"). Use it for messages that list one entry per
// problem (conflicts, rejected entries), whose count has no bound.
func joinBounded(prefix string, items []string, sep string) string {
	var b strings.Builder
	b.WriteString(prefix)
	for i, it := range items {
		more := fmt.Sprintf("%s… and %d more", sep, len(items)-i)
		add := it
		if i > 0 {
			add = sep + it
		}
		// Keep room for the "… and N more" of the items not yet written.
		room := MaxConditionMessageBytes - b.Len()
		if i < len(items)-1 {
			room -= len(more)
		}
		if len(add) > room {
			if i == 0 {
				more = fmt.Sprintf("… and %d more", len(items))
			}
			b.WriteString(more)
			return boundMessage(b.String())
		}
		b.WriteString(add)
	}
	return boundMessage(b.String())
}

// setCondition is meta.SetStatusCondition with the message bounded; every
// condition the controllers write goes through it.
func setCondition(conds *[]metav1.Condition, c metav1.Condition) bool {
	c.Message = boundMessage(c.Message)
	return meta.SetStatusCondition(conds, c)
}
