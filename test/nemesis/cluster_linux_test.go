package nemesis

import (
	"encoding/json"
	"fmt"
	"math/big"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/bq-lock/bq/certs"
	"github.com/bq-lock/bq/wire"
)

var (
	serverNames = []string{"s0", "s1", "s2", "s3"}
	clientNames = []string{"c0", "c1", "c2"}
)

// lockName is the one lock every scenario takes.
const lockName = "nemesis"

// cluster is a closed bq cluster of four bqserver processes and three
// enrolled clients, each in a namespace of its own, and the fenced resource
// its commands share.
type cluster struct {
	t        *testing.T
	topo     *topo
	res      *resource
	dir      string
	file     string            // cluster.yaml
	identity map[string]string // client → its identity file
	servers  []*proc
}

func newCluster(t *testing.T) *cluster {
	t.Helper()
	return newClusterWith(t)
}

// newClusterWith is newCluster with a namespace more for each of extra, in
// which nothing runs yet (a server the operator adds later, the operator).
func newClusterWith(t *testing.T, extra ...string) *cluster {
	t.Helper()
	tp := newTopo(t, append(append(append([]string{}, serverNames...), clientNames...), extra...)...)
	c := &cluster{t: t, topo: tp, res: newResource(t), identity: map[string]string{}}
	work := t.TempDir()
	c.dir = filepath.Join(work, "cluster")
	c.file = filepath.Join(c.dir, "cluster.yaml")
	var hosts []string
	for _, s := range serverNames {
		hosts = append(hosts, tp.node(s).ip)
	}
	// Each server has a namespace of its own: one port for all would do,
	// but server i listens on 7400+i as everywhere else.
	if out, err := runCmd(time.Minute, bin("bqserver"), "init", "--dir", c.dir, "--servers", "4",
		"--host", strings.Join(hosts, ","), "--port-base", "7400"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, cl := range clientNames {
		c.identity[cl] = filepath.Join(work, cl+".identity")
		if out, err := runCmd(time.Minute, bin("bqserver"), "client", "add", cl, "--dir", c.dir, "--out", c.identity[cl]); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
	}
	for i, s := range serverNames {
		c.servers = append(c.servers, startProc(t, s, tp.node(s).ns, nil, bin("bqserver"), "run", "--dir", c.dir, "--id", fmt.Sprint(i)))
	}
	for _, p := range c.servers {
		// Every server logs the three peers it accepted, each with mutual TLS.
		p.waitFor(30*time.Second, len(serverNames)-1, "accepted server connection")
	}
	return c
}

// lockOpts is one `bqclient lock` with a worker as its command.
type lockOpts struct {
	ttl, timeout time.Duration
	hold         time.Duration // the worker's sleep between its read and its write
	term         string        // obey (default) or ignore
	try          bool          // --try
	shared       bool          // --shared: a reader (docs/protocol.md change 60)
}

// lock starts `bqclient lock nemesis --ttl T [--timeout D] [--try] -- WORKER` in
// client's namespace. The harness records its exit in the history when
// waited for with done.
func (c *cluster) lock(client string, o lockOpts) *proc {
	c.t.Helper()
	p, err := c.start(client, o)
	if err != nil {
		c.t.Fatal(err)
	}
	return p
}

// start is lock for any goroutine: it returns the error.
func (c *cluster) start(client string, o lockOpts) (*proc, error) {
	if o.term == "" {
		o.term = "obey"
	}
	args := []string{bin("bqclient"), "--cluster", c.file, "--identity", c.identity[client], "lock", lockName, "--ttl", o.ttl.String()}
	if o.timeout > 0 {
		args = append(args, "--timeout", o.timeout.String())
	}
	if o.try {
		args = append(args, "--try")
	}
	if o.shared {
		args = append(args, "--shared")
	}
	args = append(args, "--", testBinary())
	return newProc(c.t, client, c.topo.node(client).ns, append([]string{roleEnv + "=worker"}, c.res.env(client, o.hold, o.term)...), args...)
}

// done waits (at most within) for a lock's bqclient to end, records its
// exit in the history and returns its code.
func (c *cluster) done(p *proc, within time.Duration) int {
	c.t.Helper()
	code := p.wait(within)
	c.recordExit(p)
	return code
}

// recordExit appends a reaped bqclient's exit to the history, once.
func (c *cluster) recordExit(p *proc) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.recorded {
		return
	}
	p.recorded = true
	if err := appendLine(c.res.hist, FormatRecord("exit", "", p.exitNS, "client="+p.name, fmt.Sprintf("code=%d", p.code))); err != nil {
		c.t.Errorf("history: %v", err)
	}
}

// waitStart waits for a start record of client after (mono ns) and returns it.
func (c *cluster) waitStart(client string, after int64, within time.Duration) (Record, bool) {
	deadline := time.Now().Add(within)
	for {
		for _, s := range c.res.starts() {
			if s.Client == client && s.NS > after {
				return s, true
			}
		}
		if time.Now().After(deadline) {
			return Record{}, false
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// holder is the client whose command started last and has not ended, or "".
func (c *cluster) holder() string {
	hist, err := ParseHistory(strings.NewReader(readFile(c.res.hist)))
	if err != nil {
		return ""
	}
	open := map[string]bool{}
	last := ""
	for _, r := range hist {
		switch r.Kind {
		case "start":
			open[r.Client+" "+r.Token], last = true, r.Client+" "+r.Token
		case "end", "dead":
			delete(open, r.Client+" "+r.Token)
		}
	}
	if open[last] {
		return strings.Fields(last)[0]
	}
	return ""
}

// requireClean fails the test if the checker found a fault; it returns the report.
func (c *cluster) requireClean() Report {
	c.t.Helper()
	rep := c.res.check()
	if !rep.OK() {
		c.t.Errorf("the checker found faults:\n%v", rep)
	}
	return rep
}

// tokenLess compares two decimal tokens.
func tokenLess(a, b string) bool {
	x, _ := new(big.Int).SetString(a, 10)
	y, _ := new(big.Int).SetString(b, 10)
	return x.Cmp(y) < 0
}

// stats is p50 and min (and max) of a list of durations.
type stats []time.Duration

func (s stats) String() string {
	if len(s) == 0 {
		return "none"
	}
	d := append(stats{}, s...)
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	r := func(x time.Duration) time.Duration { return x.Round(time.Millisecond) }
	return fmt.Sprintf("p50 %v, min %v, max %v (n=%d)", r(d[len(d)/2]), r(d[0]), r(d[len(d)-1]), len(d))
}

func ms(ns int64) time.Duration { return time.Duration(ns).Round(time.Millisecond) }

// lockStatus is what `bqclient status nemesis --json` says (the fields the
// scenarios read).
type lockStatus struct {
	Reachable int `json:"reachable"`
	Lock      *struct {
		Holders   []statusMember `json:"holders"`
		Queue     []statusMember `json:"queue"`
		Suspected []struct {
			Client     string `json:"client"`
			ReportedBy int    `json:"reported_by"`
		} `json:"suspected"`
	} `json:"lock"`
}

// statusMember is one holder or waiter in a lockStatus.
type statusMember struct {
	Client     string `json:"client"`
	Phase      string `json:"phase"`
	ReportedBy int    `json:"reported_by"`
}

// member is client id's entry among the lock's holders and queue, if any.
func (s lockStatus) member(id string) (statusMember, bool) {
	if s.Lock == nil {
		return statusMember{}, false
	}
	for _, m := range append(append([]statusMember{}, s.Lock.Holders...), s.Lock.Queue...) {
		if m.Client == id {
			return m, true
		}
	}
	return statusMember{}, false
}

// suspectedBy is how many servers suspect client id.
func (s lockStatus) suspectedBy(id string) int {
	if s.Lock == nil {
		return 0
	}
	for _, f := range s.Lock.Suspected {
		if f.Client == id {
			return f.ReportedBy
		}
	}
	return 0
}

// status runs `bqclient status nemesis --json` as from (a client) in its
// namespace: every server that from reaches answers.
func (c *cluster) status(from string) (lockStatus, error) {
	var st lockStatus
	out, err := runCmd(30*time.Second, "ip", "netns", "exec", c.topo.node(from).ns,
		bin("bqclient"), "--cluster", c.file, "--identity", c.identity[from], "status", lockName, "--json")
	if err != nil {
		return st, err
	}
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		return st, fmt.Errorf("bqclient status --json: %v: %s", err, out)
	}
	return st, nil
}

// clientID is client's id in hex, as status shows it.
func (c *cluster) clientID(client string) string {
	c.t.Helper()
	id, err := certs.LoadIdentity(c.identity[client])
	if err != nil {
		c.t.Fatal(err)
	}
	return wire.ClientID(id.Key.Public.ID).Hex()
}

// waitStatus polls status as from until cond holds (failing the test after
// within) and returns the status that satisfied it.
func (c *cluster) waitStatus(from string, within time.Duration, what string, cond func(lockStatus) bool) lockStatus {
	c.t.Helper()
	deadline := time.Now().Add(within)
	var last lockStatus
	var lastErr error
	for time.Now().Before(deadline) {
		st, err := c.status(from)
		if err == nil && cond(st) {
			return st
		}
		last, lastErr = st, err
		time.Sleep(100 * time.Millisecond)
	}
	b, _ := json.Marshal(last)
	c.t.Fatalf("the status as %s never showed %s within %v; last: %s (err %v)", from, what, within, b, lastErr)
	return last
}
