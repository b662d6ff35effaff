package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"math/big"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bq-lock/bq"
	"github.com/bq-lock/bq/internal/testcluster"
)

// An acquire answers the hold with both forms of its token; the next
// holder's token is larger in both; a release answers released; the lock's
// status shows the holder but never its lock_id.
func TestAcquireReleaseTokensGrow(t *testing.T) {
	e := newEnv(t, Config{})
	h1 := e.acquire("deploy", map[string]any{"wait": 5})
	require.Regexp(t, `^h_[A-Za-z0-9_-]{22}$`, h1.LockID)
	require.Equal(t, "exclusive", h1.Mode)
	require.True(t, h1.Valid)
	require.NotNil(t, h1.ValidUntil)
	require.True(t, h1.ValidUntil.After(time.Now()))

	st := e.status("deploy", "")
	require.Len(t, st.Holders, 1)
	require.Equal(t, h1.Token, st.Holders[0].Token)
	raw, _ := json.Marshal(st)
	require.NotContains(t, string(raw), h1.LockID, "a status shows no lock_id")
	var health HealthView
	require.Equal(t, http.StatusOK, e.call("GET", "/v1/health", nil, &health))
	require.Equal(t, "ok", health.Status)
	require.Equal(t, 1, health.Holds)

	var rel HoldView
	require.Equal(t, http.StatusOK, e.call("DELETE", "/v1/holds/"+h1.LockID, nil, &rel))
	require.Equal(t, stateReleased, rel.State)
	require.False(t, rel.Valid)

	h2 := e.acquire("deploy", nil)
	require.NotEqual(t, h1.LockID, h2.LockID)
	i1, _ := new(big.Int).SetString(h1.TokenInt, 10)
	i2, _ := new(big.Int).SetString(h2.TokenInt, 10)
	require.Equal(t, 1, i2.Cmp(i1), "token_int grows: %s then %s", h1.TokenInt, h2.TokenInt)
	require.Greater(t, tokenN(t, h2.Token), tokenN(t, h1.Token))
}

func tokenN(t *testing.T, token string) uint64 {
	var n, tie uint64
	_, err := fmt.Sscanf(token, "%d.%x", &n, &tie)
	require.NoError(t, err)
	return n
}

// Only a hold's lock_id finds it: an unknown one is not found, for GET,
// DELETE and wait alike, and releasing twice answers released twice.
func TestOnlyTheLockIDFindsAHold(t *testing.T) {
	e := newEnv(t, Config{})
	h := e.acquire("x", nil)
	for _, id := range []string{"h_AAAAAAAAAAAAAAAAAAAAAA", h.LockID[:len(h.LockID)-1], "", strings.Repeat("z", 5000)} {
		var body errorBody
		require.Equal(t, http.StatusNotFound, e.call("DELETE", "/v1/holds/"+id, nil, &body), id)
		require.Equal(t, CodeNotFound, body.Error.Code)
	}
	require.Equal(t, http.StatusNotFound, e.call("GET", "/v1/holds/h_AAAAAAAAAAAAAAAAAAAAAA/wait?wait=0", nil, nil))
	var got HoldView
	require.Equal(t, http.StatusOK, e.call("GET", "/v1/holds/"+h.LockID, nil, &got))
	require.Equal(t, stateHeld, got.State)
	require.Equal(t, http.StatusOK, e.call("DELETE", "/v1/holds/"+h.LockID, nil, &got))
	require.Equal(t, http.StatusOK, e.call("DELETE", "/v1/holds/"+h.LockID, nil, &got))
	require.Equal(t, stateReleased, got.State)
}

// Two callers of one agent want one name: try answers busy, and a blocking
// acquire waits until the first releases, then enters.
func TestCallersOfOneAgentQueueForAName(t *testing.T) {
	e := newEnv(t, Config{})
	h := e.acquire("q", nil)
	var body errorBody
	require.Equal(t, http.StatusConflict, e.call("POST", "/v1/locks/q/acquire", map[string]any{"try": true}, &body))
	require.Equal(t, CodeBusy, body.Error.Code)
	require.Contains(t, body.Error.Message, "another caller of this agent")

	got := make(chan *HoldView, 1)
	go func() {
		var h2 HoldView
		if e.call("POST", "/v1/locks/q/acquire", map[string]any{"wait": 10}, &h2) == http.StatusOK {
			got <- &h2
		}
		close(got)
	}()
	select {
	case <-got:
		t.Fatal("a second caller entered beside the first")
	case <-time.After(300 * time.Millisecond): // a bound, not a wait for an event: the holding goes on regardless
	}
	require.Equal(t, http.StatusOK, e.call("DELETE", "/v1/holds/"+h.LockID, nil, nil))
	h2, ok := <-got
	require.True(t, ok, "the second caller did not enter")
	require.Greater(t, tokenN(t, h2.Token), tokenN(t, h.Token))
}

// A wait that runs out with another client holding answers timeout, and
// says whom it waited for.
func TestAcquireTimeoutSaysWhoHolds(t *testing.T) {
	e := newEnv(t, Config{})
	other := e.dial()
	held, err := other.Mutex("busy").Lock(context.Background())
	require.NoError(t, err)
	var body errorBody
	require.Equal(t, http.StatusConflict, e.call("POST", "/v1/locks/busy/acquire", map[string]any{"wait": "300ms"}, &body))
	require.Equal(t, CodeTimeout, body.Error.Code)
	require.Contains(t, body.Error.WaitingFor, held.Token().String())
	require.Equal(t, http.StatusConflict, e.call("POST", "/v1/locks/busy/acquire", map[string]any{"try": true}, &body))
	require.Equal(t, CodeBusy, body.Error.Code)
	require.NoError(t, held.Unlock(context.Background()))
}

// A hold stream says acquired with the token, pings with valid_until, and
// closing it releases the lock at once: another client enters within a
// second of the close.
func TestClosingAHoldStreamReleasesTheLock(t *testing.T) {
	e := newEnv(t, Config{})
	s := e.stream("POST", "/v1/locks/s/hold", map[string]any{"ping": 0.1})
	require.Equal(t, http.StatusOK, s.status)
	ev := s.next(t)
	require.Equal(t, "acquired", ev.Event)
	require.NotEmpty(t, ev.Hold.Token)
	// A ping carries valid_until.
	for pinged := false; !pinged; {
		select {
		case p := <-s.events:
			pinged = p.Event == "ping" && p.ValidUntil != nil
		case <-time.After(waitTimeout):
			t.Fatal("no ping")
		}
	}
	other := e.dial()
	entered := make(chan time.Time, 1)
	go func() {
		h, err := other.Mutex("s").Lock(context.Background())
		if err == nil {
			entered <- time.Now()
			_ = h.Unlock(context.Background())
		}
	}()
	// The other client waits in the queue before the stream closes.
	require.Eventually(t, func() bool { return len(e.status("s", "").Queue) > 0 }, waitTimeout, 20*time.Millisecond)
	closed := time.Now()
	s.cancel()
	select {
	case at := <-entered:
		require.Less(t, at.Sub(closed), time.Second, "released within a second of the close")
		t.Logf("the waiter entered %v after the stream closed", at.Sub(closed).Round(time.Millisecond))
	case <-time.After(waitTimeout):
		t.Fatal("the other client never entered")
	}
}

// The same request_id returns the same hold: a retry after the caller's own
// timeout joins the attempt and gets its hold, and a third gets it again;
// other parameters are a conflict; once released the id is used.
func TestARetriedAcquireReturnsTheSameHold(t *testing.T) {
	e := newEnv(t, Config{})
	other := e.dial()
	held, err := other.Mutex("r").Lock(context.Background())
	require.NoError(t, err)

	body := map[string]any{"request_id": "job-17", "wait": 0.2}
	var eb errorBody
	require.Equal(t, http.StatusConflict, e.call("POST", "/v1/locks/r/acquire", body, &eb))
	require.Equal(t, CodeTimeout, eb.Error.Code)
	require.Contains(t, eb.Error.Message, "goes on")

	// The attempt goes on without its caller: once the other releases, it
	// takes the lock, and the retry gets that hold.
	require.NoError(t, held.Unlock(context.Background()))
	var h1, h2 HoldView
	require.Equal(t, http.StatusOK, e.call("POST", "/v1/locks/r/acquire", map[string]any{"request_id": "job-17", "wait": 10}, &h1))
	require.Equal(t, http.StatusOK, e.call("POST", "/v1/locks/r/acquire", map[string]any{"request_id": "job-17"}, &h2))
	require.Equal(t, h1.LockID, h2.LockID)
	require.Equal(t, h1.Token, h2.Token)
	require.Equal(t, "job-17", h1.RequestID)

	require.Equal(t, http.StatusConflict, e.call("POST", "/v1/locks/r/acquire", map[string]any{"request_id": "job-17", "mode": "shared"}, &eb))
	require.Equal(t, CodeConflict, eb.Error.Code)
	require.Equal(t, "request_id", eb.Error.Field)

	require.Equal(t, http.StatusOK, e.call("DELETE", "/v1/holds/"+h1.LockID, nil, nil))
	require.Equal(t, http.StatusGone, e.call("POST", "/v1/locks/r/acquire", map[string]any{"request_id": "job-17"}, &eb))
	require.Equal(t, CodeRequestUsed, eb.Error.Code)
	require.Equal(t, stateReleased, eb.Error.Hold.State)
	// The same id on another name is another request.
	e.acquire("r2", map[string]any{"request_id": "job-17"})
}

// A hold that an acquire with a request_id took after every caller left is
// released when nobody claims it within the claim window.
func TestAnUnclaimedHoldIsReleased(t *testing.T) {
	e := newEnv(t, Config{ClaimWindow: 300 * time.Millisecond})
	other := e.dial()
	held, err := other.Mutex("u").Lock(context.Background())
	require.NoError(t, err)
	var eb errorBody
	require.Equal(t, http.StatusConflict, e.call("POST", "/v1/locks/u/acquire", map[string]any{"request_id": "a", "wait": 0.1}, &eb))
	require.NoError(t, held.Unlock(context.Background()))
	// The agent takes it for nobody, then gives it back: the other enters.
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	h, err := other.Mutex("u").Lock(ctx)
	require.NoError(t, err, "the unclaimed hold was never released")
	require.NoError(t, h.Unlock(context.Background()))
}

// A hold with a ttl is lost ("expired") at its end, and released.
func TestATTLEndsTheHold(t *testing.T) {
	e := newEnv(t, Config{ReleaseLostAfter: 100 * time.Millisecond})
	h := e.acquire("t", map[string]any{"ttl": 0.5})
	require.NotNil(t, h.Expires)
	var got HoldView
	require.Equal(t, http.StatusOK, e.call("GET", "/v1/holds/"+h.LockID+"/wait?wait=10", nil, &got))
	require.Equal(t, stateLost, got.State)
	require.Equal(t, reasonExpired, got.Reason)
	require.False(t, got.Valid)
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	h2, err := e.dial().Mutex("t").Lock(ctx)
	require.NoError(t, err)
	require.NoError(t, h2.Unlock(context.Background()))
}

// A status long poll answers at once with a new index, waits while the
// index is current, and answers when the lock changes.
func TestStatusLongPollAnswersAChange(t *testing.T) {
	e := newEnv(t, Config{})
	st := e.status("w", "")
	require.Empty(t, st.Holders)
	start := time.Now()
	again := e.status("w", fmt.Sprintf("?index=%d&wait=0.3", st.Index))
	require.Equal(t, st.Index, again.Index, "nothing changed")
	require.GreaterOrEqual(t, time.Since(start), 300*time.Millisecond, "the poll waited")

	// Each answer comes once the state moved on (the acquire passes the
	// doorway and the ticket before it holds): follow the indexes until
	// the holder shows.
	changed := make(chan *LockStatusView, 1)
	go func() {
		index := st.Index
		for {
			var v LockStatusView
			start := time.Now()
			if e.call("GET", fmt.Sprintf("/v1/locks/w?index=%d&wait=30", index), nil, &v) != http.StatusOK || v.Index == index {
				close(changed)
				return
			}
			if time.Since(start) > 20*time.Second {
				close(changed) // an answer with a new index only when the wait ran out: no push woke it
				return
			}
			if index = v.Index; len(v.Holders) > 0 {
				changed <- &v
				return
			}
		}
	}()
	h := e.acquire("w", nil)
	select {
	case v, ok := <-changed:
		require.True(t, ok, "a long poll answered the same index, or failed")
		require.Greater(t, v.Index, st.Index)
		require.Equal(t, h.Token, v.Holders[0].Token)
	case <-time.After(waitTimeout):
		t.Fatal("the long poll did not answer the change")
	}
}

// Bad input gets a clear error naming the field, and costs nothing.
func TestBadInputIsNamed(t *testing.T) {
	e := newEnv(t, Config{})
	cases := []struct {
		path, body string
		code       int
		field      string
	}{
		{"/v1/locks/x/acquire", `{"mode":"sole"}`, 400, "mode"},
		{"/v1/locks/x/acquire", `{"permits":1}`, 400, "permits"},
		{"/v1/locks/x/acquire", `{"permits":5000}`, 400, "permits"},
		{"/v1/locks/x/acquire", `{"wait":-1}`, 400, "wait"},
		{"/v1/locks/x/acquire", `{"wait":"soon"}`, 400, "wait"},
		{"/v1/locks/x/acquire", `{"wait":"5s","try":true}`, 400, "wait"},
		{"/v1/locks/x/acquire", `{"ttl":"1e9"}`, 400, "ttl"},
		{"/v1/locks/x/acquire", `{"colour":"red"}`, 400, "colour"},
		{"/v1/locks/x/acquire", `{"try":"yes"}`, 400, "try"},
		{"/v1/locks/x/acquire", `{"request_id":"` + strings.Repeat("a", 200) + `"}`, 400, "request_id"},
		{"/v1/locks/x/acquire", `{"ping":1}`, 400, "ping"},
		{"/v1/locks/x/acquire", `{"wait":1}{"wait":2}`, 400, ""},
		{"/v1/locks/x/acquire", `{"wait":`, 400, ""},
		{"/v1/locks/x/acquire", `[1,2]`, 400, ""},
		{"/v1/locks/x/hold", `{"request_id":"a"}`, 400, "request_id"},
		{"/v1/locks/%00/acquire", `{}`, 400, "name"},
		{"/v1/locks/" + strings.Repeat("n", 300) + "/acquire", `{}`, 400, "name"},
		{"/v1/elections/e/campaign", `{"value":"` + strings.Repeat("v", 5000) + `"}`, 400, "value"},
		{"/v1/locks/x/acquire", `{"wait":1,` + strings.Repeat(" ", MaxBody) + `}`, 413, ""},
	}
	for _, c := range cases {
		var body errorBody
		code := e.call("POST", c.path, c.body, &body)
		require.Equal(t, c.code, code, "%s %s", c.path, c.body[:min(len(c.body), 60)])
		require.NotNil(t, body.Error)
		require.Equal(t, c.field, body.Error.Field, "%s %s: %s", c.path, c.body[:min(len(c.body), 60)], body.Error.Message)
		require.NotEmpty(t, body.Error.Message)
	}
	var body errorBody
	require.Equal(t, http.StatusMethodNotAllowed, e.call("GET", "/v1/locks/x/acquire", nil, &body))
	require.Equal(t, http.StatusNotFound, e.call("GET", "/v2/anything", nil, &body))
	require.Equal(t, CodeNotFound, body.Error.Code)
	var health HealthView
	e.call("GET", "/v1/health", nil, &health)
	require.Zero(t, health.Holds, "no bad request left a hold")
}

// Names travel in the path as UTF-8, percent-encoded where a path needs it.
func TestNamesInThePath(t *testing.T) {
	e := newEnv(t, Config{})
	for _, name := range []string{"jobs/nightly", "ünïcödé ✓", "a%b"} {
		var h HoldView
		require.Equal(t, http.StatusOK, e.call("POST", "/v1/locks/"+pathEscape(name)+"/acquire", nil, &h), name)
		require.Equal(t, name, h.Name)
		st := e.status(pathEscape(name), "")
		require.Len(t, st.Holders, 1, name)
		require.Equal(t, name, st.Lock)
	}
}

func pathEscape(s string) string {
	var b strings.Builder
	for _, c := range []byte(s) {
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.' {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String()
}

// The agent's bounds: streams past MaxStreams and holds past MaxHolds are
// refused with too_many_requests, and closing one frees its place.
func TestBoundsRefuseWithTooManyRequests(t *testing.T) {
	e := newEnv(t, Config{MaxStreams: 2, MaxHolds: 3})
	s1 := e.stream("GET", "/v1/elections/b/observe", nil)
	s2 := e.stream("GET", "/v1/elections/b/observe", nil)
	require.Equal(t, http.StatusOK, s1.status)
	require.Equal(t, http.StatusOK, s2.status)
	var body errorBody
	require.Equal(t, http.StatusTooManyRequests, e.call("GET", "/v1/locks/b", nil, &body))
	require.Equal(t, CodeTooMany, body.Error.Code)
	s1.cancel()
	require.Eventually(t, func() bool { return e.a.streams.Load() == 1 }, waitTimeout, 10*time.Millisecond)
	e.status("b", "")
	s2.cancel()

	for i := range 3 {
		e.acquire(fmt.Sprintf("b%d", i), nil)
	}
	require.Equal(t, http.StatusTooManyRequests, e.call("POST", "/v1/locks/b9/acquire", nil, &body))
	require.Equal(t, CodeTooMany, body.Error.Code)
}

// A TCP agent wants the bearer token.
func TestTheTokenIsRequired(t *testing.T) {
	e := newEnvWith(t, testcluster.Start(t, 4, false), Config{}, bq.Config{}, []byte("0123456789abcdef0123"))
	var body errorBody
	require.Equal(t, http.StatusUnauthorized, e.call("GET", "/v1/health", nil, &body))
	require.Equal(t, CodeUnauthorized, body.Error.Code)
	req := e.request(context.Background(), "GET", "/v1/health", nil)
	req.Header.Set("Authorization", "Bearer 0123456789abcdef0124")
	resp, err := e.cl.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	req = e.request(context.Background(), "GET", "/v1/health", nil)
	req.Header.Set("Authorization", "Bearer 0123456789abcdef0123")
	resp, err = e.cl.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
}

// Shutdown ends a hold stream with lost ("agent_stopping") and releases
// its hold; a unary hold is released too.
func TestShutdownSaysLostAndReleases(t *testing.T) {
	e := newEnv(t, Config{ReleaseLostAfter: 100 * time.Millisecond})
	s := e.stream("POST", "/v1/locks/sd/hold", nil)
	require.Equal(t, "acquired", s.next(t).Event)
	e.acquire("sd2", nil)
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	go func() { _ = e.a.Shutdown(ctx) }()
	ev := s.next(t)
	require.Equal(t, stateLost, ev.Event)
	require.Equal(t, reasonAgentStopping, ev.Reason)
	other := e.dial()
	for _, name := range []string{"sd", "sd2"} {
		h, err := other.Mutex(name).Lock(ctx)
		require.NoError(t, err, name)
		require.NoError(t, h.Unlock(ctx))
	}
}

// Leader election: the first campaigner leads; a second waits and leads
// once the first closes its stream; observe sees both; leader answers the
// value; proclaim changes it.
func TestElectionThroughTheAgent(t *testing.T) {
	e := newEnv(t, Config{})
	var eb errorBody
	require.Equal(t, http.StatusNotFound, e.call("GET", "/v1/elections/el/leader", nil, &eb))
	require.Equal(t, CodeNoLeader, eb.Error.Code)
	obs := e.stream("GET", "/v1/elections/el/observe?ping=0.1", nil)

	c1 := e.stream("POST", "/v1/elections/el/campaign", map[string]any{"value": "one"})
	ev := c1.next(t)
	require.Equal(t, "leader", ev.Event)
	require.Equal(t, "leadership", ev.Hold.Kind)
	require.Equal(t, "one", *ev.Hold.Value)
	var l LeaderView
	require.Equal(t, http.StatusOK, e.call("GET", "/v1/elections/el/leader", nil, &l))
	require.Equal(t, "one", l.Value)
	require.Equal(t, ev.Hold.Token, l.Term)

	var pv HoldView
	require.Equal(t, http.StatusOK, e.call("POST", "/v1/elections/el/proclaim", map[string]any{"lock_id": ev.Hold.LockID, "value": "uno"}, &pv))
	require.Equal(t, "uno", *pv.Value)
	require.Equal(t, http.StatusNotFound, e.call("POST", "/v1/elections/other/proclaim", map[string]any{"lock_id": ev.Hold.LockID, "value": "x"}, &eb))

	seen := map[string]bool{}
	for !seen["uno"] {
		o := obs.next(t)
		seen[o.Leader.Value] = true
	}

	// Another identity campaigns and leads once the first resigns.
	e2 := newEnvOn(t, e.tc, Config{}, bq.Config{})
	c2 := e2.stream("POST", "/v1/elections/el/campaign", map[string]any{"value": "two"})
	require.Equal(t, http.StatusOK, e.call("POST", "/v1/elections/el/resign", map[string]any{"lock_id": ev.Hold.LockID}, nil))
	ev2 := c2.next(t)
	require.Equal(t, "leader", ev2.Event)
	require.Greater(t, tokenN(t, ev2.Hold.Token), tokenN(t, ev.Hold.Token))
	for !seen["two"] {
		if o := obs.next(t); o.Leader != nil { // a no_leader may come between the two
			seen[o.Leader.Value] = true
		}
	}
	ev1 := c1.next(t)
	require.Equal(t, stateReleased, ev1.Event)

	// The last leader resigns: observe says so.
	c2.cancel()
	for {
		o := obs.next(t)
		if o.Event == "no_leader" {
			break
		}
		require.Equal(t, "leader", o.Event)
	}
}

// HTTP/2 without TLS (prior knowledge), as curl --http2-prior-knowledge
// speaks it: an acquire, and a hold stream that closing releases.
func TestHTTP2(t *testing.T) {
	e := newEnv(t, Config{})
	var protocols http.Protocols
	protocols.SetUnencryptedHTTP2(true)
	tr := e.cl.Transport.(*http.Transport).Clone()
	tr.Protocols = &protocols
	e.cl = &http.Client{Transport: tr}
	resp, err := e.cl.Get("http://localhost/v1/health")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, 2, resp.ProtoMajor, "spoken over HTTP/2")
	h := e.acquire("h2", nil)
	require.Equal(t, http.StatusOK, e.call("DELETE", "/v1/holds/"+h.LockID, nil, nil))
	s := e.stream("POST", "/v1/locks/h2s/hold", nil)
	ev := s.next(t)
	require.Equal(t, "acquired", ev.Event)
	s.cancel()
	require.Eventually(t, func() bool {
		var v HoldView
		e.call("GET", "/v1/holds/"+ev.Hold.LockID, nil, &v)
		return v.State == stateReleased
	}, waitTimeout, 10*time.Millisecond, "closing an HTTP/2 stream releases")
}

// A hold stream pings each time its valid_until moves on (every lease
// renewal), not only every ping interval: a caller that holds the agent to
// the last valid_until it heard never sees it pass while the hold is
// renewed. With a 2 s TTL the guarantee runs about a second ahead and the
// stream's own interval here is a minute.
func TestAHoldStreamPingsEachRenewal(t *testing.T) {
	e := newEnv(t, Config{})
	s := e.stream("POST", "/v1/locks/renew/hold", map[string]any{"ping": 60})
	ev := s.next(t)
	require.Equal(t, "acquired", ev.Event)
	until := *ev.Hold.ValidUntil
	deadline := time.Now().Add(4 * time.Second)
	pings := 0
	for time.Now().Before(deadline) {
		select {
		case p := <-s.events:
			require.Equal(t, "ping", p.Event)
			require.True(t, p.ValidUntil.After(until), "a ping moves valid_until on")
			until = *p.ValidUntil
			pings++
		case <-time.After(time.Until(until)):
			t.Fatalf("valid_until %v passed with the hold renewed and no ping", until)
		}
	}
	require.GreaterOrEqual(t, pings, 4, "about one ping per renewal (TTL/3)")
}
