package sim

import (
	"fmt"
	"testing"
	"time"

	"github.com/bq-lock/bq/bakery"
)

// docs/protocol.md change 29: servers ack an Exit before it is durable. A
// whole-cluster crash at the instant a holder's Unlock returns can lose the
// Exit at every server (none had a commit since), and the restarted servers
// show the holder's Ticket again. The holder stays alive but takes the lock
// no more, so no new attempt of its own supersedes that Ticket: only its
// SDK's resend of the Exit on reconnect lets the other client, which starts
// after the restart, take the lock (the liveness checker, and this test).
func TestWholeClusterCrashRightAfterExit(t *testing.T) {
	for seed := uint64(1); seed <= 32; seed++ {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			sc := quietScenario(900+seed, 4, RoleLocker, RoleLocker)
			sc.FaultWindow = 3 * time.Second
			var crashedAt time.Duration
			script := func(w *World) {
				w.Retire(1)
				w.OnClientEvent = func(c int, ev bakery.Event) {
					if crashedAt != 0 || c != 0 || ev.Kind != bakery.Released {
						return
					}
					crashedAt = w.now
					w.Retire(0)
					for i := range sc.N {
						w.crashServer(i)
					}
					w.after(300*time.Millisecond, func() {
						for i := range sc.N {
							w.restartServer(i)
						}
						w.after(200*time.Millisecond, func() { w.Rehire(1) })
					})
				}
			}
			res := Run(sc, RunOptions{Script: script})
			report(t, res, fmt.Sprintf("go test ./test/sim -run 'TestWholeClusterCrashRightAfterExit/seed=%d' -v", seed))
			if crashedAt == 0 {
				t.Fatal("c0 never released the lock")
			}
			after := 0
			for _, h := range res.Holds {
				if h.Client == 1 && h.From.At > crashedAt {
					after++
				}
			}
			if after == 0 {
				t.Errorf("c1 never held the lock after the crash at %v", crashedAt)
			}
			t.Logf("crash at %v; c1 held %d times after", crashedAt, after)
		})
	}
}
