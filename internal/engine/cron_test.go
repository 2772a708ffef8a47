package engine_test

// Cron expressions in the database: workflow.cron_next (the first tick
// strictly after an instant, in a time zone) and workflow.cron_problem (what
// is wrong with an expression or a zone).

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

func utc(s string) time.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t
}

// cronNext calls workflow.cron_next.
func (b *bundle) cronNext(expr, zone string, after time.Time) (time.Time, error) {
	var next time.Time
	err := b.pool.QueryRow(b.ctx, "select workflow.cron_next($1, $2, $3)", expr, zone, after).Scan(&next)
	return next, err
}

// cronTicks lists the ticks of expr in zone in (from, to].
func (b *bundle) cronTicks(t *testing.T, expr, zone string, from, to time.Time) []time.Time {
	t.Helper()
	var out []time.Time
	for at := from; ; {
		next, err := b.cronNext(expr, zone, at)
		if err != nil {
			t.Fatalf("cron_next(%q, %q, %s): %v", expr, zone, at, err)
		}
		if next.After(to) {
			return out
		}
		out = append(out, next.UTC())
		at = next
	}
}

func TestCronNext(t *testing.T) {
	b := setup(t)
	for _, c := range []struct {
		expr, zone, after, want string
	}{
		// Steps, ranges, lists.
		{"*/15 * * * *", "UTC", "2024-01-01T00:07:00Z", "2024-01-01T00:15:00Z"},
		{"*/15 * * * *", "UTC", "2024-01-01T23:45:00Z", "2024-01-02T00:00:00Z"},
		{"1-30/5 * * * *", "UTC", "2024-01-01T00:27:00Z", "2024-01-01T01:01:00Z"},
		{"1-30/5 * * * *", "UTC", "2024-01-01T00:21:00Z", "2024-01-01T00:26:00Z"},
		{"10/20 * * * *", "UTC", "2024-01-01T00:31:00Z", "2024-01-01T00:50:00Z"},
		{"5,10,55 * * * *", "UTC", "2024-01-01T00:10:00Z", "2024-01-01T00:55:00Z"},
		{"0,30 9-17 * * MON-FRI", "UTC", "2024-01-05T17:31:00Z", "2024-01-08T09:00:00Z"},
		{"0 */6 * * *", "UTC", "2024-01-01T06:00:00Z", "2024-01-01T12:00:00Z"},
		{"0 0 1,15 * *", "UTC", "2024-01-01T00:00:00Z", "2024-01-15T00:00:00Z"},
		// Strictly after, and seconds ignored.
		{"0 * * * *", "UTC", "2024-01-01T10:00:00Z", "2024-01-01T11:00:00Z"},
		{"* * * * *", "UTC", "2024-01-01T10:00:30Z", "2024-01-01T10:01:00Z"},
		{"* * * * *", "UTC", "2024-01-01T10:00:59.999Z", "2024-01-01T10:01:00Z"},
		// Names, in any case; 7 is Sunday.
		{"0 0 * JAN,jul *", "UTC", "2024-02-01T00:00:00Z", "2024-07-01T00:00:00Z"},
		{"0 0 1 Feb-Apr *", "UTC", "2024-04-02T00:00:00Z", "2025-02-01T00:00:00Z"},
		{"0 12 * * 7", "UTC", "2024-01-01T00:00:00Z", "2024-01-07T12:00:00Z"},
		{"0 12 * * sun", "UTC", "2024-01-01T00:00:00Z", "2024-01-07T12:00:00Z"},
		{"0 12 * * 5-7", "UTC", "2024-01-06T12:00:00Z", "2024-01-07T12:00:00Z"},
		{"0 12 * * Sat,sun", "UTC", "2024-01-01T00:00:00Z", "2024-01-06T12:00:00Z"},
		// Macros.
		{"@yearly", "UTC", "2024-06-01T00:00:00Z", "2025-01-01T00:00:00Z"},
		{"@annually", "UTC", "2024-06-01T00:00:00Z", "2025-01-01T00:00:00Z"},
		{"@monthly", "UTC", "2024-06-01T00:00:00Z", "2024-07-01T00:00:00Z"},
		{"@weekly", "UTC", "2024-01-03T00:00:00Z", "2024-01-07T00:00:00Z"},
		{"@daily", "UTC", "2024-01-03T10:00:00Z", "2024-01-04T00:00:00Z"},
		{"@midnight", "UTC", "2024-01-03T10:00:00Z", "2024-01-04T00:00:00Z"},
		{"@hourly", "UTC", "2024-01-03T10:00:00Z", "2024-01-03T11:00:00Z"},
		{" @Daily ", "UTC", "2024-01-03T10:00:00Z", "2024-01-04T00:00:00Z"},
		// Day of month or day of week: either, when both are restricted.
		{"0 0 13 * 5", "UTC", "2024-09-01T00:00:00Z", "2024-09-06T00:00:00Z"}, // a Friday
		{"0 0 13 * 5", "UTC", "2024-10-11T00:00:00Z", "2024-10-13T00:00:00Z"}, // the 13th, a Sunday
		{"0 0 1 * MON", "UTC", "2024-04-29T00:00:00Z", "2024-05-01T00:00:00Z"},
		{"0 0 */2 * 1", "UTC", "2024-01-01T00:00:00Z", "2024-01-03T00:00:00Z"}, // */2 restricts: odd days or Mondays
		{"0 0 2 * 1", "UTC", "2024-01-02T00:00:00Z", "2024-01-08T00:00:00Z"},
		// Only the other one when one is *.
		{"0 0 * * 1", "UTC", "2024-01-01T00:00:00Z", "2024-01-08T00:00:00Z"},
		{"0 0 13 * *", "UTC", "2024-09-01T00:00:00Z", "2024-09-13T00:00:00Z"},
		{"0 0 13 * ?", "UTC", "2024-09-01T00:00:00Z", "2024-09-13T00:00:00Z"},
		{"0 0 ? * 1", "UTC", "2024-01-01T00:00:00Z", "2024-01-08T00:00:00Z"},
		// Rare days.
		{"0 0 29 2 *", "UTC", "2024-03-01T00:00:00Z", "2028-02-29T00:00:00Z"},
		{"0 0 29 2 *", "UTC", "2096-03-01T00:00:00Z", "2104-02-29T00:00:00Z"}, // 2100 is no leap year
		{"0 0 29 2 1", "UTC", "2024-03-01T00:00:00Z", "2025-02-03T00:00:00Z"}, // 29 February or a Monday in February
		{"0 0 31 * *", "UTC", "2024-01-31T00:00:00Z", "2024-03-31T00:00:00Z"},
		{"59 23 31 12 *", "UTC", "2024-12-31T23:59:00Z", "2025-12-31T23:59:00Z"},
		// Blanks of any kind between fields.
		{" 0\t0  * *\t*", "UTC", "2024-01-03T10:00:00Z", "2024-01-04T00:00:00Z"},
		// Local wall-clock time of the zone.
		{"0 9 * * *", "Asia/Kolkata", "2024-01-01T00:00:00Z", "2024-01-01T03:30:00Z"},
		{"0 9 * * *", "America/New_York", "2024-01-01T00:00:00Z", "2024-01-01T14:00:00Z"},
		{"0 9 * * *", "America/New_York", "2024-07-01T00:00:00Z", "2024-07-01T13:00:00Z"},
		{"0 0 1 1 *", "Pacific/Kiritimati", "2024-06-01T00:00:00Z", "2024-12-31T10:00:00Z"},
		{"30 0 * * *", "Europe/Berlin", "2024-12-31T23:00:00Z", "2024-12-31T23:30:00Z"},
	} {
		got, err := b.cronNext(c.expr, c.zone, utc(c.after))
		if err != nil {
			t.Errorf("cron_next(%q, %s, %s): %v", c.expr, c.zone, c.after, err)
			continue
		}
		if want := utc(c.want); !got.Equal(want) {
			t.Errorf("cron_next(%q, %s, %s) = %s, want %s", c.expr, c.zone, c.after, got.UTC().Format(time.RFC3339), c.want)
		}
	}
}

func TestCronProblem(t *testing.T) {
	b := setup(t)
	problem := func(expr, zone string) string {
		t.Helper()
		var p *string
		if err := b.pool.QueryRow(b.ctx, "select workflow.cron_problem($1, $2)", expr, zone).Scan(&p); err != nil {
			t.Fatalf("cron_problem(%q, %q): %v", expr, zone, err)
		}
		if p == nil {
			return ""
		}
		return *p
	}
	for _, expr := range []string{"* * * * *", "0 0 29 2 *", "*/1 * * * *", "0-59/59 0-23/23 1-31/31 1-12/12 0-7/7", "@hourly", "0 0 * * 7"} {
		if p := problem(expr, "UTC"); p != "" {
			t.Errorf("cron_problem(%q) = %q, want none", expr, p)
		}
	}
	for _, c := range []struct{ expr, zone, want string }{
		{"61 * * * *", "UTC", "minute field 61 is out of range 0-59"},
		{"* 24 * * *", "UTC", "hour field 24 is out of range 0-23"},
		{"* * 0 * *", "UTC", "day-of-month field 0 is out of range 1-31"},
		{"* * * 13 *", "UTC", "month field 13 is out of range 1-12"},
		{"* * * * 8", "UTC", "day-of-week field 8 is out of range 0-7"},
		{"0 0 30 2 *", "UTC", "never fires"},
		{"0 0 31 4,6,9,11 *", "UTC", "never fires"},
		{"* * * *", "UTC", "5 fields"},
		{"* * * * * *", "UTC", "5 fields (minute hour day-of-month month day-of-week), got 6"},
		{"", "UTC", "cron expression is empty"},
		{"   ", "UTC", "cron expression is empty"},
		{"@every 5m", "UTC", "unknown macro @every 5m"},
		{"CRON_TZ=UTC 0 0 * * *", "UTC", "time zone is not part of the cron expression"},
		{"*/0 * * * *", "UTC", "minute field step 0 is out of range 1-60"},
		{"*/99999999999999999999 * * * *", "UTC", "minute field step 99999999999999999999 is out of range 1-60"},
		{"99999999999 * * * *", "UTC", "minute field 99999999999 is out of range 0-59"},
		{"*/x * * * *", "UTC", "minute field step x is not a number"},
		{"5/ * * * *", "UTC", "minute field item 5/ has no step after /"},
		{"1/2/3 * * * *", "UTC", "more than one /"},
		{"30-10 * * * *", "UTC", "minute field range 30-10 runs backwards"},
		{"1-2-3 * * * *", "UTC", "minute field item 1-2-3 is not a value"},
		{"1,,2 * * * *", "UTC", "minute field 1,,2 has an empty item"},
		{"a * * * *", "UTC", "minute field value a is not a number"},
		{"? * * * *", "UTC", "minute field value ? is not a number"},
		{"* * * FOO *", "UTC", "month field value FOO is neither a number nor a name (JAN-DEC)"},
		{"* * * * FRIDAY", "UTC", "day-of-week field value FRIDAY is neither a number nor a name (SUN-SAT)"},
		{"* * * * *", "Mars/Base", "unknown time zone Mars/Base"},
		{"* * * * *", "../../etc/passwd", "unknown time zone ../../etc/passwd"},
		{"* * * * *", "utc", "unknown time zone utc"},
		{"* * * * *", "PST", "unknown time zone PST"},
		{"* * * * *", "UTC+3", "unknown time zone UTC+3"},
		{"* * * * *", "", "time zone is missing"},
		{"* * * * *", strings.Repeat("A", 200), "unknown time zone " + strings.Repeat("A", 80)},
		{strings.Repeat("1,", 5000) + "1 * * * *", "UTC", "cron expression is 10009 characters; at most 1024 are allowed"},
		{"\x01\x02 ☃ ;drop table x", "UTC", "minute field value \x01\x02 is not a number"},
		{"\x01 ☃ ;drop table x y", "UTC", "5 fields (minute hour day-of-month month day-of-week), got 6"},
		{"☃ * * * *", "UTC", "minute field value ☃ is not a number"},
	} {
		if p := problem(c.expr, c.zone); !strings.Contains(p, c.want) {
			t.Errorf("cron_problem(%.60q, %.60q) = %q, want it to say %q", c.expr, c.zone, p, c.want)
		}
	}

	// cron_next refuses what cron_problem names, with the reason.
	for _, c := range []struct{ expr, zone, want string }{
		{"61 * * * *", "UTC", "minute field 61 is out of range 0-59"},
		{"0 0 30 2 *", "UTC", "never fires"},
		{"* * * * *", "Mars/Base", "Mars/Base"},
	} {
		_, err := b.cronNext(c.expr, c.zone, utc("2024-01-01T00:00:00Z"))
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "SW001" || !strings.Contains(pgErr.Message, c.want) {
			t.Errorf("cron_next(%q, %q): %v, want SW001 saying %q", c.expr, c.zone, err, c.want)
		}
	}
}

// Daylight saving in both directions, in a zone west and one east of UTC:
// a tick that does not exist fires once, when the gap ends; a tick that
// exists twice fires once, at its first occurrence.
func TestCronDaylightSaving(t *testing.T) {
	b := setup(t)
	check := func(name, expr, zone, from, to string, want ...string) {
		t.Helper()
		got := b.cronTicks(t, expr, zone, utc(from), utc(to))
		var gotS []string
		for _, g := range got {
			gotS = append(gotS, g.Format(time.RFC3339))
		}
		if strings.Join(gotS, " ") != strings.Join(want, " ") {
			t.Errorf("%s: %q in %s over (%s, %s]:\n got  %v\n want %v", name, expr, zone, from, to, gotS, want)
		}
	}
	// America/New_York: 2024-03-10 02:00 EST -> 03:00 EDT (07:00Z);
	// 2024-11-03 02:00 EDT -> 01:00 EST (06:00Z).
	check("New York, spring forward, daily 02:30", "30 2 * * *", "America/New_York",
		"2024-03-08T12:00:00Z", "2024-03-12T00:00:00Z",
		"2024-03-09T07:30:00Z", // 02:30 EST
		"2024-03-10T07:00:00Z", // no 02:30: 03:00 EDT, when the gap ends
		"2024-03-11T06:30:00Z") // 02:30 EDT
	check("New York, fall back, daily 01:30", "30 1 * * *", "America/New_York",
		"2024-11-01T12:00:00Z", "2024-11-05T00:00:00Z",
		"2024-11-02T05:30:00Z", // 01:30 EDT
		"2024-11-03T05:30:00Z", // 01:30 EDT, the first of two
		"2024-11-04T06:30:00Z") // 01:30 EST
	check("New York, fall back, daily 02:30", "30 2 * * *", "America/New_York",
		"2024-11-01T12:00:00Z", "2024-11-05T00:00:00Z",
		"2024-11-02T06:30:00Z", "2024-11-03T07:30:00Z", "2024-11-04T07:30:00Z")
	check("New York, spring forward, hourly", "0 * * * *", "America/New_York",
		"2024-03-10T04:30:00Z", "2024-03-10T09:30:00Z",
		"2024-03-10T05:00:00Z", // 00:00 EST
		"2024-03-10T06:00:00Z", // 01:00 EST
		"2024-03-10T07:00:00Z", // 03:00 EDT (02:00 does not exist and lands here too: once)
		"2024-03-10T08:00:00Z", "2024-03-10T09:00:00Z")
	check("New York, fall back, hourly", "0 * * * *", "America/New_York",
		"2024-11-03T03:30:00Z", "2024-11-03T08:30:00Z",
		"2024-11-03T04:00:00Z", // 00:00 EDT
		"2024-11-03T05:00:00Z", // 01:00 EDT, once: not again at 01:00 EST (06:00Z)
		"2024-11-03T07:00:00Z", // 02:00 EST
		"2024-11-03T08:00:00Z")
	check("New York, spring forward, every 20 minutes", "*/20 * * * *", "America/New_York",
		"2024-03-10T06:30:00Z", "2024-03-10T07:30:00Z",
		"2024-03-10T06:40:00Z", "2024-03-10T07:00:00Z", "2024-03-10T07:20:00Z")
	check("New York, fall back, every 20 minutes", "*/20 * * * *", "America/New_York",
		"2024-11-03T05:30:00Z", "2024-11-03T07:30:00Z",
		"2024-11-03T05:40:00Z", "2024-11-03T07:00:00Z", "2024-11-03T07:20:00Z")
	// Europe/Berlin: 2024-03-31 02:00 CET -> 03:00 CEST (01:00Z);
	// 2024-10-27 03:00 CEST -> 02:00 CET (01:00Z).
	check("Berlin, spring forward, daily 02:30", "30 2 * * *", "Europe/Berlin",
		"2024-03-29T12:00:00Z", "2024-04-02T00:00:00Z",
		"2024-03-30T01:30:00Z", // 02:30 CET
		"2024-03-31T01:00:00Z", // no 02:30: 03:00 CEST
		"2024-04-01T00:30:00Z") // 02:30 CEST
	check("Berlin, fall back, daily 02:30", "30 2 * * *", "Europe/Berlin",
		"2024-10-25T12:00:00Z", "2024-10-29T00:00:00Z",
		"2024-10-26T00:30:00Z", // 02:30 CEST
		"2024-10-27T00:30:00Z", // 02:30 CEST, the first of two
		"2024-10-28T01:30:00Z") // 02:30 CET
	check("Berlin, fall back, hourly", "0 * * * *", "Europe/Berlin",
		"2024-10-26T22:30:00Z", "2024-10-27T03:30:00Z",
		"2024-10-26T23:00:00Z", // 01:00 CEST
		"2024-10-27T00:00:00Z", // 02:00 CEST, once
		"2024-10-27T02:00:00Z", // 03:00 CET
		"2024-10-27T03:00:00Z")
	// A half-hour shift (Lord Howe Island: 02:00 -> 02:30 in spring, 02:00 -> 01:30 in autumn).
	check("Lord Howe, spring forward, daily 02:15", "15 2 * * *", "Australia/Lord_Howe",
		"2024-10-05T00:00:00Z", "2024-10-07T00:00:00Z",
		"2024-10-05T15:30:00Z", // 6 October: no 02:15, so 02:30 +11, when the gap ends
		"2024-10-06T15:15:00Z") // 02:15 +11
	check("Lord Howe, fall back, daily 01:45", "45 1 * * *", "Australia/Lord_Howe",
		"2024-04-05T00:00:00Z", "2024-04-08T00:00:00Z",
		"2024-04-05T14:45:00Z", // 01:45 +11
		"2024-04-06T14:45:00Z", // 01:45 +11, the first of two
		"2024-04-07T15:15:00Z") // 01:45 +10:30
}

// cron_next does not scan minute by minute: 10,000 calls of an expression
// whose next tick is months away stay cheap.
func TestCronNextCost(t *testing.T) {
	b := setup(t)
	for _, expr := range []string{"0 0 29 2 1", "0 0 29 2 *", "*/5 * * * *"} {
		start := time.Now()
		var n int
		if err := b.pool.QueryRow(b.ctx, `select count(workflow.cron_next($1, 'Europe/Berlin',
				timestamptz '2024-03-01 00:00Z' + i * interval '17 minutes'))
			from generate_series(1, 10000) i`, expr).Scan(&n); err != nil {
			t.Fatal(err)
		}
		took := time.Since(start)
		t.Logf("10,000 calls of cron_next(%q): %s (%s each)", expr, took.Round(time.Millisecond), (took / 10000).Round(time.Microsecond))
		if took > 20*time.Second {
			t.Errorf("10,000 calls of cron_next(%q) took %s, want well under 20 s", expr, took)
		}
	}
}
