package engine_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/simple-workflow/simple-workflow/internal/engine"
)

// logLines makes n lines "<prefix> i" at info.
func logLines(prefix string, from, n int) []engine.LogLine {
	out := make([]engine.LogLine, n)
	for i := range out {
		out[i] = engine.LogLine{At: time.Now(), Level: engine.LogInfo, Message: fmt.Sprintf("%s %d", prefix, from+i)}
	}
	return out
}

// appendLogs sends logs as worker and fails the test on an error.
func (b *bundle) appendLogs(t *testing.T, worker string, logs ...engine.AttemptLog) []string {
	t.Helper()
	lost, err := b.eng.AppendRunLogs(b.ctx, worker, logs)
	if err != nil {
		t.Fatalf("append run logs: %v", err)
	}
	return lost
}

// messages reads a run's whole log as its messages.
func (b *bundle) messages(t *testing.T, eng *engine.Engine, id string) []string {
	t.Helper()
	lines, err := eng.RunLogs(b.ctx, id, 0, 0, 10000)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]string, len(lines))
	for i, l := range lines {
		out[i] = l.Message
	}
	return out
}

func (b *bundle) setLogLimits(t *testing.T, lines, bytes int) {
	t.Helper()
	if _, err := b.pool.Exec(b.ctx, "update workflow.workflow_settings set max_log_lines = $1, max_log_bytes = $2",
		lines, bytes); err != nil {
		t.Fatal(err)
	}
}

// A handler's lines are kept per attempt, in order, for the worker holding
// the attempt's lease alone; read back after a cursor; a later attempt's
// lines come after the earlier attempt's.
func TestRunLogsKeepEachAttemptsLinesInOrder(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := b.create(t, engine.CreateParams{Type: "logs.v1", MaxAttempts: 3})
	c := b.claim(t, "w1", []string{"logs."}, 1)[0]
	if lost := b.appendLogs(t, "w1", engine.AttemptLog{LeaseRef: c.Ref(), Lines: logLines("one", 1, 3)}); len(lost) != 0 {
		t.Fatalf("lost %v", lost)
	}
	b.appendLogs(t, "w1", engine.AttemptLog{LeaseRef: c.Ref(), Lines: logLines("one", 4, 2)})
	// Another worker, or a wrong token: nothing kept.
	forged := c.Ref()
	forged.Token++
	if lost := b.appendLogs(t, "w1", engine.AttemptLog{LeaseRef: forged, Lines: logLines("forged", 1, 1)}); len(lost) != 1 {
		t.Fatalf("a forged token's lines: lost %v, want the run", lost)
	}
	if lost := b.appendLogs(t, "w2", engine.AttemptLog{LeaseRef: c.Ref(), Lines: logLines("other", 1, 1)}); len(lost) != 1 {
		t.Fatalf("another worker's lines: lost %v, want the run", lost)
	}
	if _, err := b.eng.FailRuns(b.ctx, "w1", []engine.Failure{{LeaseRef: c.Ref(), Error: "again", Retryable: true}}); err != nil {
		t.Fatal(err)
	}
	// The attempt ended: its lines are no longer taken.
	if lost := b.appendLogs(t, "w1", engine.AttemptLog{LeaseRef: c.Ref(), Lines: logLines("late", 1, 1)}); len(lost) != 1 {
		t.Fatalf("lines after the attempt ended: lost %v, want the run", lost)
	}
	b.advanceClock(t, time.Hour)
	c2 := b.claim(t, "w2", []string{"logs."}, 1)[0]
	b.appendLogs(t, "w2", engine.AttemptLog{LeaseRef: c2.Ref(), Lines: logLines("two", 1, 1)})
	if _, err := b.eng.CompleteRuns(b.ctx, "w2", []engine.Completion{{LeaseRef: c2.Ref()}}); err != nil {
		t.Fatal(err)
	}
	// The attempt that ended the run may still say what it did; the one
	// before it may not.
	if lost := b.appendLogs(t, "w2", engine.AttemptLog{LeaseRef: c2.Ref(), Lines: logLines("two", 2, 1)}); len(lost) != 0 {
		t.Fatalf("the last attempt's lines after it succeeded: lost %v", lost)
	}
	if lost := b.appendLogs(t, "w1", engine.AttemptLog{LeaseRef: c.Ref(), Lines: logLines("late", 2, 1)}); len(lost) != 1 {
		t.Fatalf("an earlier attempt's lines after the run ended: lost %v, want the run", lost)
	}

	want := []string{"one 1", "one 2", "one 3", "one 4", "one 5", "two 1", "two 2"}
	if got := b.messages(t, b.eng, id); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("log %q, want %q", got, want)
	}
	lines, err := b.eng.RunLogs(b.ctx, id, 1, 4, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(lines) != 3 || lines[0].Message != "one 5" || lines[1].Attempt != 2 || lines[1].Seq != 1 {
		t.Fatalf("after line 1/4: %+v", lines)
	}
	sum, err := b.eng.RunLogAttempts(b.ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if len(sum) != 2 || sum[0].Lines != 5 || sum[0].Dropped != 0 || sum[1].Lines != 2 || sum[1].FirstSeq != 1 {
		t.Fatalf("attempts %+v", sum)
	}
}

// An attempt keeps the newest lines within the owner's limits (lines and
// octets, the namespace's own when set), and says how many it dropped,
// the worker's own drops included; a message over 8 KiB is cut. A
// hostile handler's flood (tens of thousands of lines) leaves a
// bystander's log, and the bystander's namespace limits, as they were.
func TestRunLogsKeepTheNewestLinesWithinTheLimits(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.setLogLimits(t, 5, 1<<20)
	hostile := b.create(t, engine.CreateParams{Type: "flood.v1", Namespace: "team-a"})
	bystander := b.create(t, engine.CreateParams{Type: "calm.v1", Namespace: "team-b"})
	if _, err := b.pool.Exec(b.ctx, `insert into workflow.workflow_namespace_settings (namespace, max_log_lines)
		values ('team-b', 50)`); err != nil {
		t.Fatal(err)
	}
	h := b.claimIn(t, "team-a", "w", []string{"flood."}, 1)[0]
	y := b.claimIn(t, "team-b", "w", []string{"calm."}, 1)[0]
	b.appendLogs(t, "w", engine.AttemptLog{LeaseRef: y.Ref(), Lines: logLines("calm", 1, 20)})

	b.appendLogs(t, "w", engine.AttemptLog{LeaseRef: h.Ref(), Lines: logLines("flood", 1, 3)})
	b.appendLogs(t, "w", engine.AttemptLog{LeaseRef: h.Ref(), Lines: logLines("flood", 4, 3)})
	if got := b.messages(t, b.eng, hostile); strings.Join(got, ",") != "flood 2,flood 3,flood 4,flood 5,flood 6" {
		t.Fatalf("kept %q, want the newest five", got)
	}
	// The worker dropped lines after those kept: what was kept goes too,
	// so the log keeps the newest lines without a gap.
	b.appendLogs(t, "w", engine.AttemptLog{LeaseRef: h.Ref(), Lines: logLines("flood", 7, 1), Dropped: 10})
	if got := b.messages(t, b.eng, hostile); strings.Join(got, ",") != "flood 7" {
		t.Fatalf("after the worker dropped lines: kept %q, want flood 7 alone", got)
	}
	for i := range 4 {
		b.appendLogs(t, "w", engine.AttemptLog{LeaseRef: h.Ref(), Lines: logLines("x", i*engine.MaxLogLinesPerCall,
			engine.MaxLogLinesPerCall)})
	}
	got := b.messages(t, b.eng, hostile)
	if len(got) != 5 || got[4] != fmt.Sprintf("x %d", 4*engine.MaxLogLinesPerCall-1) {
		t.Fatalf("after the flood: kept %q", got)
	}
	sum, err := b.eng.RunLogAttempts(b.ctx, hostile)
	if err != nil {
		t.Fatal(err)
	}
	if want := int64(7 + 10 + 4*engine.MaxLogLinesPerCall - 5); len(sum) != 1 || sum[0].Dropped != want || sum[0].Lines != 5 {
		t.Fatalf("attempts %+v, want 5 lines kept and %d dropped", sum, want)
	}
	if lines, err := b.eng.RunLogs(b.ctx, hostile, 0, 0, 10); err != nil || len(lines) != 5 || lines[0].Seq != sum[0].FirstSeq ||
		lines[4].Seq != sum[0].FirstSeq+4 {
		t.Fatalf("the kept lines' numbers: %+v (%v), want %d to %d", lines, err, sum[0].FirstSeq, sum[0].FirstSeq+4)
	}
	if got := b.messages(t, b.eng, bystander); len(got) != 20 || got[0] != "calm 1" {
		t.Fatalf("the bystander's log: %q", got)
	}
	b.appendLogs(t, "w", engine.AttemptLog{LeaseRef: y.Ref(), Lines: logLines("calm", 21, 40)})
	if got := b.messages(t, b.eng, bystander); len(got) != 50 || got[0] != "calm 11" {
		t.Fatalf("the bystander's log, by its namespace's limit of 50: %d lines from %q", len(got), got[0])
	}

	// A call whose own older lines do not fit drops what was kept before
	// it too: no older line outlives a newer one.
	b.setLogLimits(t, 1000, 100)
	b.appendLogs(t, "w", engine.AttemptLog{LeaseRef: y.Ref(), Lines: logLines("start", 0, 1)})
	b.appendLogs(t, "w", engine.AttemptLog{LeaseRef: y.Ref(), Lines: []engine.LogLine{
		{At: time.Now(), Level: engine.LogInfo, Message: strings.Repeat("B", 98)},
		{At: time.Now(), Level: engine.LogInfo, Message: "end"},
	}})
	if got := b.messages(t, b.eng, bystander); strings.Join(got, ",") != "end" {
		t.Fatalf("by 100 octets: kept %q, want end alone", got)
	}
	b.setLogLimits(t, 1000, 1<<20)

	// By octets: 1 KiB keeps the newest lines that fit.
	b.setLogLimits(t, 1000, 1024)
	big := strings.Repeat("é", 200) // 400 octets
	b.appendLogs(t, "w", engine.AttemptLog{LeaseRef: h.Ref(), Lines: []engine.LogLine{
		{At: time.Now(), Level: engine.LogWarn, Message: "a" + big},
		{At: time.Now(), Level: engine.LogWarn, Message: "b" + big},
		{At: time.Now(), Level: engine.LogError, Message: "c" + big},
	}})
	got = b.messages(t, b.eng, hostile)
	if len(got) != 2 || got[0][0] != 'b' || got[1][0] != 'c' {
		t.Fatalf("by octets: kept %d lines, want b and c (a does not fit, and what came before it goes)", len(got))
	}
	b.appendLogs(t, "w", engine.AttemptLog{LeaseRef: h.Ref(), Lines: []engine.LogLine{
		{At: time.Now(), Level: engine.LogWarn, Message: "d" + big},
	}})
	got = b.messages(t, b.eng, hostile)
	if len(got) != 2 || got[0][0] != 'c' || got[1][0] != 'd' {
		t.Fatalf("by octets: kept %d lines, want c and d", len(got))
	}
	// A huge message is cut, and says so.
	b.setLogLimits(t, 1000, 1<<20)
	b.appendLogs(t, "w", engine.AttemptLog{LeaseRef: h.Ref(), Lines: []engine.LogLine{
		{At: time.Now(), Level: engine.LogInfo, Message: strings.Repeat("z", 1<<20)},
	}})
	got = b.messages(t, b.eng, hostile)
	if last := got[len(got)-1]; len(last) > engine.MaxLogMessageBytes || !strings.HasSuffix(last, "[cut: 1048576 bytes]") {
		t.Fatalf("a 1 MiB message kept as %d octets ending %q", len(last), last[max(0, len(last)-30):])
	}
	// Zero keeps nothing, counted.
	b.setLogLimits(t, 0, 0)
	b.appendLogs(t, "w", engine.AttemptLog{LeaseRef: h.Ref(), Lines: logLines("none", 1, 3)})
	if got := b.messages(t, b.eng, hostile); len(got) != 0 {
		t.Fatalf("limit 0 kept %q", got)
	}
}

// What the database refuses is refused whole and clearly: a NUL byte, a
// level it does not know, a line of a run the call does not name, too
// many lines; a limit above the ceiling. Nothing of the call is kept.
func TestRunLogsRefuseMalformedCalls(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := b.create(t, engine.CreateParams{Type: "bad.v1"})
	c := b.claim(t, "w", []string{"bad."}, 1)[0]
	for name, l := range map[string]engine.AttemptLog{
		"NUL":       {LeaseRef: c.Ref(), Lines: []engine.LogLine{{At: time.Now(), Level: engine.LogInfo, Message: "a\x00b"}}},
		"level":     {LeaseRef: c.Ref(), Lines: []engine.LogLine{{At: time.Now(), Level: "fatal", Message: "x"}}},
		"too many":  {LeaseRef: c.Ref(), Lines: logLines("n", 0, engine.MaxLogLinesPerCall+1)},
		"negative":  {LeaseRef: c.Ref(), Lines: logLines("n", 0, 1), Dropped: -1},
		"twice":     {LeaseRef: c.Ref(), Lines: logLines("n", 0, 1)},
		"bad utf-8": {LeaseRef: c.Ref(), Lines: []engine.LogLine{{At: time.Now(), Level: engine.LogInfo, Message: "\xff\xfe"}}},
	} {
		logs := []engine.AttemptLog{l}
		if name == "twice" {
			logs = append(logs, l)
		}
		if _, err := b.eng.AppendRunLogs(b.ctx, "w", logs); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if _, err := b.pool.Exec(b.ctx, `select workflow.append_run_logs('w', array[$1::uuid], array[$2::bigint],
		array[0::bigint], array[gen_random_uuid()], array[now()], array['info'], array['x'])`, id, c.Ref().Token); err == nil {
		t.Error("a line of a run the call does not name: accepted")
	}
	if got := b.messages(t, b.eng, id); len(got) != 0 {
		t.Fatalf("refused calls kept %q", got)
	}
	for _, sql := range []string{
		"update workflow.workflow_settings set max_log_lines = 100001",
		"update workflow.workflow_settings set max_log_bytes = 16777217",
		"insert into workflow.workflow_namespace_settings (namespace, max_log_lines) values ('team-a', -1)",
		"insert into workflow.workflow_namespace_settings (namespace, max_log_bytes) values ('Team A', 1)",
	} {
		if _, err := b.pool.Exec(b.ctx, sql); err == nil {
			t.Errorf("%s: accepted", sql)
		}
	}
}

// Logs belong to their run's namespace: a worker login serving team-b
// cannot add to team-a's run, a reader or producer of team-b reads none of
// it, one of team-a reads it all; and the log leaves with its run, by
// retention as by a delete.
func TestRunLogsStayInTheirNamespaceAndLeaveWithTheRun(t *testing.T) {
	t.Parallel()
	b := setupRoles(t)
	a := b.teamRun(t, "team-a", "job.v1")
	bystander := b.teamRun(t, "team-a", "job.v1")
	ca := b.claimIn(t, "team-a", "w", []string{"job."}, 2)
	for _, c := range ca {
		b.appendLogs(t, "w", engine.AttemptLog{LeaseRef: c.Ref(), Lines: logLines(c.ID, 1, 2)})
	}
	workerB := b.tenantLogin(t, engine.RoleWorker, "team-b")
	lost, err := workerB.eng.AppendRunLogs(b.ctx, "w", []engine.AttemptLog{{LeaseRef: ca[0].Ref(), Lines: logLines("intruder", 1, 1)}})
	if err != nil || len(lost) != 1 {
		// Even knowing the token, a login writes only to the runs of the
		// namespaces it works for.
		t.Fatalf("team-b's worker with team-a's token: lost %v, %v; want the run refused", lost, err)
	}
	for _, role := range []string{engine.RoleReader, engine.RoleProducer} {
		other := b.tenantLogin(t, role, "team-b")
		if got := b.messages(t, other.eng, a); len(got) != 0 {
			t.Fatalf("a %s of team-b read team-a's log: %q", role, got)
		}
		sum, err := other.eng.RunLogAttempts(b.ctx, a)
		if err != nil || len(sum) != 0 {
			t.Fatalf("a %s of team-b read team-a's log summary: %+v, %v", role, sum, err)
		}
		mine := b.tenantLogin(t, role, "team-a")
		if got := b.messages(t, mine.eng, a); len(got) != 2 {
			t.Fatalf("a %s of team-a read %q of its run's log", role, got)
		}
	}
	if _, err := b.pool.Exec(b.ctx, "delete from workflow.workflow_run where id = $1", a); err != nil {
		t.Fatal(err)
	}
	var left int
	if err := b.pool.QueryRow(b.ctx, `select (select count(*) from workflow.workflow_run_log where run_id = $1)
		+ (select count(*) from workflow.workflow_run_log_attempt where run_id = $1)`, a).Scan(&left); err != nil || left != 0 {
		t.Fatalf("a deleted run's log: %d rows left (%v)", left, err)
	}
	if got := b.messages(t, b.eng, bystander); len(got) != 2 {
		t.Fatalf("the bystander's log after its neighbour's delete: %q", got)
	}
	for _, c := range ca {
		if c.ID == bystander {
			if _, err := b.eng.CompleteRuns(b.ctx, "w", []engine.Completion{{LeaseRef: c.Ref()}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	b.advanceClock(t, 2*time.Hour)
	if _, err := b.eng.DeleteFinishedRuns(b.ctx, time.Hour, 100); err != nil {
		t.Fatal(err)
	}
	if err := b.pool.QueryRow(b.ctx, `select count(*) from workflow.workflow_run_log where run_id = $1`,
		bystander).Scan(&left); err != nil || left != 0 {
		t.Fatalf("retention left %d lines of a deleted run (%v)", left, err)
	}
}

// A delete of a run and its worker's last lines, at once: the lines wait
// for the delete and are refused; none outlives the run.
func TestRunLogsDoNotOutliveADeleteOfTheirRun(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := b.create(t, engine.CreateParams{Type: "gone.v1"})
	c := b.claim(t, "w", []string{"gone."}, 1)[0]
	if _, err := b.eng.CompleteRuns(b.ctx, "w", []engine.Completion{{LeaseRef: c.Ref()}}); err != nil {
		t.Fatal(err)
	}
	tx, err := b.pool.Begin(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(b.ctx) }()
	if _, err := tx.Exec(b.ctx, "delete from workflow.workflow_run where id = $1", id); err != nil {
		t.Fatal(err)
	}
	type answer struct {
		lost []string
		err  error
	}
	done := make(chan answer, 1)
	go func() {
		lost, err := b.eng.AppendRunLogs(b.ctx, "w", []engine.AttemptLog{{LeaseRef: c.Ref(), Lines: logLines("last", 1, 2)}})
		done <- answer{lost, err}
	}()
	// The append waits for the delete's lock.
	deadline := time.Now().Add(10 * time.Second)
	for {
		var waiting int
		if err := b.pool.QueryRow(b.ctx, `select count(*) from pg_stat_activity
			where wait_event_type = 'Lock' and query like '%append_run_logs%'`).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting > 0 {
			break
		}
		select {
		case a := <-done:
			t.Fatalf("the append did not wait for the delete: %v %v", a.lost, a.err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("the append never waited for the delete")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := tx.Commit(b.ctx); err != nil {
		t.Fatal(err)
	}
	a := <-done
	if a.err != nil || len(a.lost) != 1 {
		t.Fatalf("the append after the delete: lost %v, %v; want the run refused", a.lost, a.err)
	}
	var left int
	if err := b.pool.QueryRow(b.ctx, `select (select count(*) from workflow.workflow_run_log where run_id = $1)
		+ (select count(*) from workflow.workflow_run_log_attempt where run_id = $1)`, id).Scan(&left); err != nil || left != 0 {
		t.Fatalf("%d log rows outlive their run (%v)", left, err)
	}
}
