package controller

import (
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// A WorkflowRegistry with hundreds of conflicts could not
// write its status, the condition message being above the API server's
// 32 KiB. Every condition message is bounded, a list saying how many entries
// it left out.
func TestConditionMessagesAreBounded(t *testing.T) {
	items := make([]string, 1000)
	for i := range items {
		items[i] = fmt.Sprintf("workflow type content.thumbnail%d.v1 is owned by WorkflowRegistry media/thumbs-%d", i, i)
	}
	msg := "conflicts: " + listWithinBytes(items, "; ", MaxConditionMessageBytes-len("conflicts: "))
	if len(msg) > MaxConditionMessageBytes {
		t.Fatalf("message is %d bytes, above %d", len(msg), MaxConditionMessageBytes)
	}
	if !strings.HasPrefix(msg, "conflicts: "+items[0]+"; "+items[1]) {
		t.Fatalf("message does not start with the first entries: %.200s", msg)
	}
	written := strings.Count(msg, "is owned by")
	if want := fmt.Sprintf("; … and %d more", len(items)-written); !strings.HasSuffix(msg, want) {
		t.Fatalf("message ends %q, want the suffix %q", msg[len(msg)-40:], want)
	}
	if got := listWithinBytes(items[:2], "; ", MaxConditionMessageBytes); got != items[0]+"; "+items[1] {
		t.Fatalf("short list changed: %q", got)
	}
	if got := listWithinBytes([]string{strings.Repeat("y", 50000)}, "; ", MaxConditionMessageBytes); got != "… and 1 more" {
		t.Fatalf("one huge entry: %.100q", got)
	}

	var conds []metav1.Condition
	setCondition(&conds, metav1.Condition{Type: "Ready", Status: metav1.ConditionFalse, Reason: "Conflict",
		Message: strings.Repeat("é", 40000)})
	m := conds[0].Message
	if len(m) > MaxConditionMessageBytes || !strings.HasSuffix(m, "… (truncated)") || !strings.HasPrefix(m, "éé") {
		t.Fatalf("condition message of %d bytes ends %q", len(m), m[len(m)-20:])
	}
	if !utf8.ValidString(m) {
		t.Fatal("the cut split a character")
	}
}
