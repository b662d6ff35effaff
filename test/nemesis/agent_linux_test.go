package nemesis

import (
	"bufio"
	"encoding/json"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// agentEvent is one line of a hold stream, with when the test read it.
type agentEvent struct {
	Event string `json:"event"`
	Hold  *struct {
		Token    string `json:"token"`
		TokenInt string `json:"token_int"`
	} `json:"hold"`
	Reason string `json:"reason"`
	ns     int64
}

// A caller holds the lock through `bqclient agent` (in c0's namespace,
// reached over its Unix socket, which no network cut touches); c1 waits
// behind it; c0 is cut off from every server. The caller's stream says
// lost (lease_lost) before c1 enters, by at least the loss grace: the
// agent's callers hear of a loss as bqclient lock's commands do
// (docs/protocol.md change 68, rule 4, and change 34).
func TestAgentCutOffSaysLostBeforeTheNextEnters(t *testing.T) {
	c := newCluster(t)
	rng := newRand(t)
	sock := filepath.Join(t.TempDir(), "agent.sock")
	const ttl = 3 * time.Second
	agent := startProc(t, "agent", c.topo.node("c0").ns, nil, bin("bqclient"), "--cluster", c.file, "--identity", c.identity["c0"],
		"agent", "--socket", sock, "--ttl", ttl.String())
	agent.waitFor(30*time.Second, 1, "serving on unix:")
	hc := &http.Client{Transport: &http.Transport{Dial: func(string, string) (net.Conn, error) { return net.Dial("unix", sock) }}}

	var margins stats
	for trial := range *trials {
		req, err := http.NewRequest("POST", "http://localhost/v1/locks/"+lockName+"/hold", strings.NewReader(`{"ping": 0.2}`))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatalf("trial %d: the hold stream: %v", trial, err)
		}
		events := make(chan agentEvent, 64)
		go func() {
			defer close(events)
			sc := bufio.NewScanner(resp.Body)
			for sc.Scan() {
				var ev agentEvent
				if json.Unmarshal(sc.Bytes(), &ev) == nil {
					ev.ns = mono()
					events <- ev
				}
			}
		}()
		next := func(kinds ...string) agentEvent {
			deadline := time.After(30 * time.Second)
			for {
				select {
				case ev, ok := <-events:
					if !ok {
						t.Fatalf("trial %d: the stream ended waiting for %v", trial, kinds)
					}
					for _, k := range kinds {
						if ev.Event == k {
							return ev
						}
					}
				case <-deadline:
					t.Fatalf("trial %d: no %v within 30s", trial, kinds)
				}
			}
		}
		acq := next("acquired", "error")
		if acq.Event != "acquired" {
			t.Fatalf("trial %d: the agent did not take the free lock: %+v", trial, acq)
		}
		np := c.lock("c1", lockOpts{ttl: ttl, timeout: 40 * time.Second, hold: 50 * time.Millisecond})
		time.Sleep(500*time.Millisecond + time.Duration(rng.IntN(2500))*time.Millisecond) // a random phase of the lease's renewals
		if np.exited() {
			t.Fatalf("trial %d: c1 ended (exit %d) while the agent's caller held the lock:\n%s", trial, np.code, np.output())
		}
		c.topo.Isolate("c0")
		cut := mono()
		lost := next("lost")
		if lost.Reason != "lease_lost" {
			t.Errorf("trial %d: lost for %q, want lease_lost", trial, lost.Reason)
		}
		ns, ok := c.waitStart("c1", acq.ns, 30*time.Second)
		if !ok {
			t.Fatalf("trial %d: c1 did not enter within 30s of the loss:\n%s", trial, np.output())
		}
		if code := c.done(np, 15*time.Second); code != 0 {
			t.Errorf("trial %d: c1 exited %d:\n%s", trial, code, np.output())
		}
		resp.Body.Close() // the caller has stopped
		c.topo.HealAll()
		margin := time.Duration(ns.NS - lost.ns)
		margins = append(margins, margin)
		t.Logf("trial %d: cut→lost %v, lost→c1 entered %v (token %s then %s)", trial, ms(lost.ns-cut), ms(ns.NS-lost.ns), acq.Hold.TokenInt, ns.Token)
		// Lost comes the loss grace (TTL/10) before the lease lapses, and
		// correct servers hand on only ε·TTL (TTL/10) after the lapse: the
		// caller has at least the grace, whatever the agent's timer lost.
		if grace := ttl / 10; margin < grace {
			t.Errorf("trial %d: the agent's caller heard lost only %v before c1 entered, less than the loss grace %v", trial, margin, grace)
		}
		if !tokenLess(acq.Hold.TokenInt, ns.Token) {
			t.Errorf("trial %d: c1's token %s is not above the agent's %s", trial, ns.Token, acq.Hold.TokenInt)
		}
		if t.Failed() {
			return
		}
	}
	t.Logf("TTL %v, %d trials: the caller heard lost %v before the next client entered", ttl, *trials, margins)
}
