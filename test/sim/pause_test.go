package sim

import (
	"fmt"
	"testing"
	"time"
)

// TestProcessPauses: a process that stops for longer than the TTL (a GC
// pause, a frozen VM, SIGSTOP) and resumes with its queued messages
// delivered before its timers fire (pause.go). A holder paused past its
// lease loses the lock to the next client and reports the loss before it
// acts again; a waiter paused between receiving the message that lets it in
// and acting on it does not enter without its lease guarantee at that
// instant (PROTOCOL.md §3.3, §5); a server paused past every lease, or all
// of them at once, resets no live session. Checked when written: without the
// lease check at the instant of entry (bakery.Client.decide) the "waiter"
// case enters without the guarantee.
func TestProcessPauses(t *testing.T) {
	const ttl = 2 * time.Second
	for _, tc := range []struct {
		name  string
		fault Fault
	}{
		{"holder", Fault{Kind: FaultPauseClient, Client: -1, At: 400 * time.Millisecond, Dur: 3 * ttl}},
		{"waiter", Fault{Kind: FaultPauseClient, Client: 1, OnMessage: true, At: 250 * time.Millisecond, Dur: 3 * ttl}},
		{"server", Fault{Kind: FaultPauseServer, Server: 0, At: 500 * time.Millisecond, Dur: 3 * ttl}},
		{"every-server", Fault{Kind: FaultPauseServer, Server: -1, At: 500 * time.Millisecond, Dur: 2 * ttl}},
	} {
		for _, n := range []int{4, 7} {
			for seed := uint64(1); seed <= 4; seed++ {
				t.Run(fmt.Sprintf("%s/n=%d/seed=%d", tc.name, n, seed), func(t *testing.T) {
					sc := quietScenario(90+seed, n, RoleLocker, RoleLocker, RoleLocker, RoleTryLocker)
					sc.TTL = ttl
					sc.Faults = []Fault{tc.fault}
					sc.FaultWindow = tc.fault.At + tc.fault.Dur + 100*time.Millisecond
					res := Run(sc, RunOptions{})
					report(t, res, fmt.Sprintf("go test ./test/sim -run 'TestProcessPauses/%s/n=%d/seed=%d' -v", tc.name, n, seed))
					if res.Stats.Pauses == 0 {
						t.Fatal("no pause happened")
					}
					if res.Stats.Acquired < 5 {
						t.Errorf("only %d acquisitions", res.Stats.Acquired)
					}
				})
			}
		}
	}
}
