package main

import (
	"strings"
	"testing"
	"time"
)

// The Lease timings default to controller-runtime's, are flags with an
// environment fallback, and timings client-go would refuse are refused at
// start-up in the flags' own words.
func TestLeaderElectionTiming(t *testing.T) {
	base := map[string]string{"DATABASE_URL": "postgres://x"}
	o, err := parseFlags(nil, envMap(base))
	if err != nil || o.leaderElection != defaultLeaderElectionTiming() ||
		o.leaderElection.leaseDuration != 15*time.Second || o.leaderElection.retryPeriod != 2*time.Second {
		t.Fatalf("defaults: %+v %v", o.leaderElection, err)
	}
	o, err = parseFlags([]string{"--leader-election-retry-period=500ms"}, envMap(map[string]string{
		"DATABASE_URL": "postgres://x", "LEADER_ELECTION_LEASE_DURATION": "8s", "LEADER_ELECTION_RENEW_DEADLINE": "5s"}))
	want := leaderElectionTiming{leaseDuration: 8 * time.Second, renewDeadline: 5 * time.Second, retryPeriod: 500 * time.Millisecond}
	if err != nil || o.leaderElection != want {
		t.Fatalf("flags and environment: %+v %v", o.leaderElection, err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--leader-election-lease-duration=0s"}, "must be positive"},
		{[]string{"--leader-election-retry-period=-1s"}, "must be positive"},
		{[]string{"--leader-election-lease-duration=1500ms"}, "whole number of seconds"},
		{[]string{"--leader-election-lease-duration=10s", "--leader-election-renew-deadline=10s"}, "shorter than --leader-election-lease-duration"},
		{[]string{"--leader-election-renew-deadline=2400ms"}, "more than 1.2 times --leader-election-retry-period"},
	} {
		_, err := parseFlags(c.args, envMap(base))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: got %v, want an error containing %q", c.args, err, c.want)
		}
	}
}

// A malformed environment value is refused with the variable's name rather
// than silently replaced by the default; an empty one counts as unset.
func TestMalformedEnvironmentIsAnError(t *testing.T) {
	for key, value := range map[string]string{
		"LEADER_ELECT": "yes please", "RETENTION": "a week", "KUBE_API_QPS": "fast",
		"KUBE_API_BURST": "1e3", "LEADER_ELECTION_LEASE_DURATION": "15",
	} {
		_, err := parseFlags(nil, envMap(map[string]string{"DATABASE_URL": "postgres://x", key: value}))
		if err == nil || !strings.Contains(err.Error(), key) {
			t.Errorf("%s=%q: got %v, want an error naming the variable", key, value, err)
		}
	}
	o, err := parseFlags(nil, envMap(map[string]string{"DATABASE_URL": "postgres://x", "RETENTION": "", "LEADER_ELECT": ""}))
	if err != nil || o.retention != 7*24*time.Hour || o.leaderElect {
		t.Fatalf("empty values must count as unset: %+v %v", o, err)
	}
	if o, err := parseFlags([]string{"--version"}, envMap(map[string]string{"RETENTION": "a week"})); err != nil || !o.printVersion {
		t.Fatalf("--version must answer whatever the environment holds: %v", err)
	}
}
