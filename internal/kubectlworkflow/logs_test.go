package kubectlworkflow

import (
	"strings"
	"testing"
	"time"

	logsv1alpha1 "github.com/simple-workflow/simple-workflow/internal/logapi/v1alpha1"
)

// Without the log API (the chart's logAPI off, as here: no APIService),
// logs says so and exits 1; its flags are checked before anything is sent.
func TestLogsWithoutTheLogAPI(t *testing.T) {
	e := newEnv(t)
	e.createRun("order-1", "demo.order.v1")
	r := e.plugin("logs", "order-1", "-n", e.ns)
	wantCode(t, r, 1)
	if r.stdout != "" || r.stderr != "error: "+errLogAPINotServed.Error()+"\n" ||
		!strings.Contains(r.stderr, "logAPI.enabled=true") {
		t.Errorf("logs without the log API: %s", r)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--tail", "0"}, "--tail must be from 1 to 10000"},
		{[]string{"--tail", "10001"}, "--tail must be from 1 to 10000"},
		{[]string{"--attempt", "-1"}, "--attempt must be 1 or more"},
		{[]string{"-o", "name"}, `unable to match a printer suitable for the output format "name", allowed formats are: json,yaml`},
	} {
		r := e.plugin(append([]string{"logs", "order-1", "-n", e.ns}, c.args...)...)
		wantCode(t, r, 1)
		wantIn(t, "stderr of logs "+strings.Join(c.args, " "), r.stderr, c.want, "See 'kubectl workflow logs -h'")
	}
}

func TestWriteLines(t *testing.T) {
	at := time.Date(2026, 11, 23, 14, 0, 2, 5000, time.FixedZone("CET", 3600))
	var b strings.Builder
	err := writeLines(&b, 3, 7, []logsv1alpha1.Line{
		{Attempt: 2, Seq: 4, Time: at, Level: "info", Message: "charged card=visa"},
		{Attempt: 2, Seq: 5, Time: at, Level: "error", Message: "two\nlines"},
		// What a terminal would act on is shown, not done: an escape
		// sequence erasing the line above, a bell, C1, a bidi override.
		{Attempt: 2, Seq: 6, Time: at, Level: "warn", Message: "\x1b[1A\x1b[2Kforged\a\u009b\u202egnp.exe\tok"},
	})
	if err != nil {
		t.Fatal(err)
	}
	want := "[3 earlier lines dropped]\n" +
		"[7 earlier lines kept, not shown: raise --tail]\n" +
		"2026-11-23T13:00:02.000005Z INFO  charged card=visa\n" +
		"2026-11-23T13:00:02.000005Z ERROR two\n    lines\n" +
		"2026-11-23T13:00:02.000005Z WARN  \\x1b[1A\\x1b[2Kforged\\x07\\x9b\\u202egnp.exe\tok\n"
	if b.String() != want {
		t.Errorf("got:\n%s\nwant:\n%s", b.String(), want)
	}
}
