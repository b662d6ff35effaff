package main

// The attack benchmark (--attack): one legitimate client measures its Lock
// latency while other clients of the same machine attack the cluster, and the
// servers' memory and data are read before, during and after. See
// docs/performance.md, "Under attack".

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bq-lock/bq"
	"github.com/bq-lock/bq/certs"
	"github.com/bq-lock/bq/crypto"
	"github.com/bq-lock/bq/transport"
	"github.com/bq-lock/bq/wire"
	bolt "go.etcd.io/bbolt"
)

// attackOptions are the sizes of the attack benchmark.
type attackOptions struct {
	identities  int           // identities per wave
	concurrency int           // wave identities (and unenrolled attempts) at a time
	baseline    time.Duration // legitimate client alone
	idle        time.Duration // wait after a wave before measuring again
	flood       time.Duration // each flood's length
	unenrolled  int           // connection attempts with unenrolled keys
	legitEvery  time.Duration // the legitimate client starts a cycle at most this often
	refuseWait  time.Duration // an unenrolled attempt waits this long for its refusals
}

func addAttackFlags(fs *flag.FlagSet, a *attackOptions) {
	fs.IntVar(&a.identities, "identities", 10000, "--attack: short-lived identities per wave (--quick: 1000)")
	fs.IntVar(&a.concurrency, "attackers", 64, "--attack: wave identities and unenrolled connection attempts at a time")
	fs.DurationVar(&a.baseline, "baseline", 10*time.Second, "--attack: length of each legitimate-client baseline (--quick: 5s)")
	fs.DurationVar(&a.idle, "idle", 60*time.Second, "--attack: idle time after each wave before measuring the servers again (--quick: 20s)")
	fs.DurationVar(&a.flood, "flood", 20*time.Second, "--attack: length of the lock-name flood and of the message flood (--quick: 10s)")
	fs.IntVar(&a.unenrolled, "unenrolled", 10000, "--attack: connection attempts with unenrolled keys to the closed cluster (--quick: 1000)")
	fs.DurationVar(&a.legitEvery, "legit-every", 25*time.Millisecond, "--attack: the legitimate client starts a Lock+Unlock cycle at most this often (it must stay under client_rate)")
}

// attackDefaults applies --quick to the sizes not given on the command line.
func (a *attackOptions) attackDefaults(quick bool, set func(string) bool) {
	a.refuseWait = 5 * time.Second
	if !quick {
		return
	}
	for _, d := range []struct {
		name string
		f    func()
	}{
		{"identities", func() { a.identities = 1000 }},
		{"baseline", func() { a.baseline = 5 * time.Second }},
		{"idle", func() { a.idle = 20 * time.Second }},
		{"flood", func() { a.flood = 10 * time.Second }},
		{"unenrolled", func() { a.unenrolled = 1000 }},
	} {
		if !set(d.name) {
			d.f()
		}
	}
}

// Phase kinds: an attack phase is compared with its baseline (target a).
const (
	kindBaseline = "baseline"
	kindAttack   = "attack"
	kindAfter    = "after"
)

// attackPhase is one row of the report.
type attackPhase struct {
	Name string
	Kind string
	// Legit is the legitimate client's Lock latencies; Cycles and Errors its
	// completed cycles and failed ones.
	Legit          durations
	Cycles, Errors int
	base           *attackPhase // the baseline an attack phase compares with
	// Done, Refused and Other count the attack's operations (Unit says what).
	Done, Refused, Other int
	Unit                 string
	// memReading is per server, in bytes: live (the minimum of a few
	// scrapes a second apart) for baselines and after a wave, the peak
	// sampled during an attack.
	memReading
	Mem string // "live" or "peak"
	// Refusals is bq_limit_refusals_total per limit, summed over the
	// servers, at the end of the phase (cumulative for the cluster).
	Refusals map[string]float64
	// Seconds is the phase's wall time; SrvCPU and CliCPU the CPU seconds of
	// the servers and of this process in it.
	Seconds, SrvCPU, CliCPU float64
	// Details are the attack's counts by kind (replies, errors, events).
	Details map[string]int
	// Gauges are bq_locks_in_use, bq_active_set_members and
	// bq_verify_cache_misses_total (statements verified), summed over the
	// servers, at the end.
	Gauges map[string]float64
}

func (p *attackPhase) p50() float64 { return p.Legit.ms(.5) }

// ratio is the legitimate Lock p50 over its baseline's.
func (p *attackPhase) ratio() float64 {
	if p.base == nil || len(p.Legit) == 0 {
		return math.NaN()
	}
	return p.p50() / p.base.p50()
}

type attackReport struct {
	env    env
	opts   *options
	phases []*attackPhase
	// stores is what the open cluster's stores hold once it stopped, per
	// server.
	stores []map[string]bucketStat
}

func (r *attackReport) find(name string) *attackPhase {
	for _, p := range r.phases {
		if p.Name == name {
			return p
		}
	}
	return nil
}

// Phase names used by the targets.
const (
	phBaseline   = "baseline (open)"
	phWave1      = "wave 1"
	phAfter1     = "after wave 1"
	phWave2      = "wave 2"
	phAfter2     = "after wave 2"
	phNames      = "lock-name flood"
	phMessages   = "message flood"
	phClosedBase = "baseline (closed)"
	phUnenrolled = "unenrolled keys"
)

// runAttack runs the attack benchmark and prints its report; on a failure it
// prints what it measured so far.
func runAttack(ctx context.Context, o *options, work string, e env) error {
	if _, err := os.Stat(o.bqserver); err != nil {
		return fmt.Errorf("no bqserver binary (build it: go build -o DIR ./cmd/bqserver, pass --bqserver): %w", err)
	}
	r := &attackReport{env: e, opts: o}
	err := r.run(ctx, work)
	r.env.loadAfter = loadavg()
	if len(r.phases) > 0 {
		r.print(os.Stdout)
	}
	if err != nil {
		return err
	}
	if o.json {
		b, err := json.Marshal(r.json())
		if err != nil {
			return err
		}
		fmt.Println(string(b))
	}
	return nil
}

func (r *attackReport) run(ctx context.Context, work string) error {
	a := r.opts.atk
	logf("attack: starting an open cluster of %d bqserver processes", bqServers)
	b, err := startBQ(r.opts.bqserver, work, "")
	if err != nil {
		return err
	}
	defer b.stop()
	ls, err := b.dial(ctx, 1, "legit", nil)
	if err != nil {
		return fmt.Errorf("legitimate client: %w", err)
	}
	legit := ls[0].(*bqLocker)
	defer legit.Close()

	base, err := r.baseline(ctx, b, legit, phBaseline)
	if err != nil {
		return err
	}
	for w, names := range [][2]string{{phWave1, phAfter1}, {phWave2, phAfter2}} {
		logf("attack: wave %d, %d identities, %d at a time", w+1, a.identities, a.concurrency)
		if _, err := r.attack(ctx, b, legit, base, names[0], "identities", func(ctx context.Context, p *attackPhase) error {
			return wave(ctx, b.cluster, a.identities, a.concurrency, p)
		}); err != nil {
			return err
		}
		logf("attack: idle for %v", a.idle)
		if err := sleep(ctx, a.idle); err != nil {
			return err
		}
		p := &attackPhase{Name: names[1], Kind: kindAfter, Mem: "live"}
		if err := r.finish(ctx, b, p, true); err != nil {
			return err
		}
	}
	logf("attack: lock-name flood by one identity for %v", a.flood)
	if _, err := r.attack(ctx, b, legit, base, phNames, "TryLocks", func(ctx context.Context, p *attackPhase) error {
		return nameFlood(ctx, b.cluster, a.flood, p)
	}); err != nil {
		return err
	}
	logf("attack: message flood (Listen of 4,096 and 100,000 members, GetSet) for %v", a.flood)
	if _, err := r.attack(ctx, b, legit, base, phMessages, "messages", func(ctx context.Context, p *attackPhase) error {
		return messageFlood(ctx, b.cluster, a.flood, p)
	}); err != nil {
		return err
	}
	_ = legit.Close()
	b.stop()
	r.stores, err = storeRecords(b)
	if err != nil {
		return err
	}

	logf("attack: starting a closed cluster")
	cb, err := startCluster(r.opts.bqserver, work, "", clusterOptions{name: "bq-closed", closed: true})
	if err != nil {
		return err
	}
	defer cb.stop()
	closedLegit, err := cb.enroll(ctx, work, "legit")
	if err != nil {
		return err
	}
	defer closedLegit.Close()
	cbase, err := r.baseline(ctx, cb, closedLegit, phClosedBase)
	if err != nil {
		return err
	}
	logf("attack: %d connection attempts with unenrolled keys, %d at a time", a.unenrolled, a.concurrency)
	_, err = r.attack(ctx, cb, closedLegit, cbase, phUnenrolled, "attempts", func(ctx context.Context, p *attackPhase) error {
		return unenrolled(ctx, cb.cluster, a.unenrolled, a.concurrency, a.refuseWait, p)
	})
	return err
}

// baseline measures the legitimate client alone, then the servers' live memory.
func (r *attackReport) baseline(ctx context.Context, b *bqCluster, l *bqLocker, name string) (*attackPhase, error) {
	a := r.opts.atk
	logf("attack: %s, the legitimate client alone for %v", name, a.baseline)
	// Warm up: the first cycles set up the lock at every server.
	for range 20 {
		if err := legitCycle(ctx, l, nil); err != nil {
			return nil, fmt.Errorf("%s: warm-up: %w", name, err)
		}
	}
	p := &attackPhase{Name: name, Kind: kindBaseline, Mem: "live"}
	cpu0, err := cpuNow(b)
	if err != nil {
		return nil, err
	}
	run := startLegit(ctx, l, a.legitEvery)
	err = sleep(ctx, a.baseline)
	run.finish(p)
	if err != nil {
		return nil, err
	}
	p.cpuSince(b, cpu0)
	if p.Errors > 0 {
		return nil, fmt.Errorf("%s: the legitimate client failed %d times alone (last: %v)", name, p.Errors, run.lastErr)
	}
	if err := r.finish(ctx, b, p, true); err != nil {
		return nil, err
	}
	return p, nil
}

// attack runs f while the legitimate client measures and the servers'
// memory is sampled every second.
func (r *attackReport) attack(ctx context.Context, b *bqCluster, l *bqLocker, base *attackPhase, name, unit string,
	f func(context.Context, *attackPhase) error) (*attackPhase, error) {
	p := &attackPhase{Name: name, Kind: kindAttack, base: base, Unit: unit, Mem: "peak", Details: map[string]int{}}
	cpu0, err := cpuNow(b)
	if err != nil {
		return nil, err
	}
	s := startSampler(b)
	run := startLegit(ctx, l, r.opts.atk.legitEvery)
	err = f(ctx, p)
	run.finish(p)
	p.memReading = s.finish()
	p.cpuSince(b, cpu0)
	if err != nil {
		r.phases = append(r.phases, p)
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	logf("attack: %s: %d %s, %d refused, %d other; legitimate Lock p50 %s ms (×%s), %d errors",
		name, p.Done, unit, p.Refused, p.Other, f3(p.p50()), f3(p.ratio()), p.Errors)
	if err := r.finish(ctx, b, p, false); err != nil {
		return nil, err
	}
	return p, nil
}

// finish reads the phase's end state (after the once-a-second metrics
// snapshot): refusals, gauges, and with live the servers' live memory.
func (r *attackReport) finish(ctx context.Context, b *bqCluster, p *attackPhase, live bool) error {
	r.phases = append(r.phases, p)
	if err := sleep(ctx, publishWait); err != nil {
		return err
	}
	if live {
		var err error
		if p.memReading, err = liveMemory(ctx, b, 3); err != nil {
			return err
		}
	}
	m, err := scrape(b.metrics)
	if err != nil {
		return err
	}
	p.Refusals = map[string]float64{}
	for k, v := range m {
		if l, ok := strings.CutPrefix(k, "bq_limit_refusals_total{"); ok {
			p.Refusals[labelValue(l, "limit")] += v
		}
	}
	p.Gauges = map[string]float64{"locks_in_use": m["bq_locks_in_use"], "active_set_members": m["bq_active_set_members"],
		"statements_verified": m["bq_verify_cache_misses_total"]}
	return nil
}

// labelValue is the value of label in `a="x",b="y"}`.
func labelValue(labels, label string) string {
	for _, l := range strings.Split(strings.TrimSuffix(labels, "}"), ",") {
		if v, ok := strings.CutPrefix(l, label+`="`); ok {
			return strings.TrimSuffix(v, `"`)
		}
	}
	return "?"
}

type cpuReading struct {
	at       time.Time
	srv, cli float64
}

func cpuNow(b *bqCluster) (cpuReading, error) {
	srv, err1 := cpuSum(b.pids())
	cli, err2 := cpuSeconds(0)
	return cpuReading{time.Now(), srv, cli}, errors.Join(err1, err2)
}

func (p *attackPhase) cpuSince(b *bqCluster, r0 cpuReading) {
	r1, err := cpuNow(b)
	if err != nil {
		return
	}
	p.Seconds, p.SrvCPU, p.CliCPU = r1.at.Sub(r0.at).Seconds(), r1.srv-r0.srv, r1.cli-r0.cli
}

// ---------------------------------------------------------------------------
// The legitimate client.

// legitCycle is one Lock+Unlock; lock gets the Lock's latency.
func legitCycle(ctx context.Context, l *bqLocker, lock *time.Duration) error {
	opCtx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	t0 := time.Now()
	if err := l.Lock(opCtx); err != nil {
		return err
	}
	if lock != nil {
		*lock = time.Since(t0)
	}
	return l.Unlock(opCtx)
}

// legitRun is the legitimate client looping Lock+Unlock in the background,
// one cycle started at most every `every`.
type legitRun struct {
	stop    chan struct{}
	done    chan struct{}
	lock    durations
	cycles  int
	errs    int
	lastErr error
}

func startLegit(ctx context.Context, l *bqLocker, every time.Duration) *legitRun {
	r := &legitRun{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(r.done)
		next := time.Now()
		for {
			select {
			case <-r.stop:
				return
			case <-ctx.Done():
				return
			case <-time.After(time.Until(next)):
			}
			next = time.Now().Add(every)
			var d time.Duration
			if err := legitCycle(ctx, l, &d); err != nil {
				if ctx.Err() != nil {
					return
				}
				r.errs++
				r.lastErr = err
				next = time.Now().Add(100 * time.Millisecond)
				continue
			}
			r.lock = append(r.lock, d)
			r.cycles++
		}
	}()
	return r
}

// finish stops the run after its current cycle and records it in p.
func (r *legitRun) finish(p *attackPhase) {
	close(r.stop)
	<-r.done
	p.Legit, p.Cycles, p.Errors = r.lock, r.cycles, r.errs
	if r.errs > 0 {
		logf("attack: %s: the legitimate client failed %d times; last: %v", p.Name, r.errs, r.lastErr)
	}
}

// ---------------------------------------------------------------------------
// The servers' memory and data.

// memReading is one value per server of each: heap in use
// (go_memstats_heap_alloc_bytes), RSS, the data directory's size, and the
// heap goal of the next collection (go_memstats_next_gc_bytes: twice the
// heap marked live by the last one, with the default GOGC=100).
type memReading struct {
	Heap, RSS, Data, Goal []float64
}

// memory reads every server's memory from its metrics, and the size of its
// data directory.
func memory(b *bqCluster) (memReading, error) {
	var r memReading
	client := &http.Client{Timeout: 5 * time.Second}
	for i, u := range b.metrics {
		m := make(map[string]float64)
		resp, err := client.Get(u)
		if err != nil {
			return r, err
		}
		err = parseMetrics(resp.Body, m)
		resp.Body.Close()
		if err != nil {
			return r, fmt.Errorf("%s: %w", u, err)
		}
		var v [3]float64
		for j, name := range []string{"go_memstats_heap_alloc_bytes", "process_resident_memory_bytes", "go_memstats_next_gc_bytes"} {
			var ok bool
			if v[j], ok = m[name]; !ok {
				return r, fmt.Errorf("%s: no %s", u, name)
			}
		}
		d, err := dirSize(filepath.Join(b.dir, fmt.Sprintf("server-%d", i)))
		if err != nil {
			return r, err
		}
		r.Heap, r.RSS, r.Goal, r.Data = append(r.Heap, v[0]), append(r.RSS, v[1]), append(r.Goal, v[2]), append(r.Data, d)
	}
	return r, nil
}

// merge keeps, per server, the smaller (or with larger, the larger) of each
// value; data sizes are always the latest with smaller.
func (r *memReading) merge(x memReading, larger bool) {
	if r.Heap == nil {
		*r = x
		return
	}
	pick := func(a, b float64) float64 {
		if larger {
			return max(a, b)
		}
		return min(a, b)
	}
	for j := range x.Heap {
		r.Heap[j], r.RSS[j], r.Goal[j] = pick(r.Heap[j], x.Heap[j]), pick(r.RSS[j], x.RSS[j]), pick(r.Goal[j], x.Goal[j])
		if larger {
			r.Data[j] = max(r.Data[j], x.Data[j])
		} else {
			r.Data[j] = x.Data[j]
		}
	}
}

// liveMemory is the minimum of k readings a second apart (the heap between
// collections comes closest to what is live), with the last data sizes.
func liveMemory(ctx context.Context, b *bqCluster, k int) (memReading, error) {
	var r memReading
	for i := range k {
		if i > 0 {
			if err := sleep(ctx, time.Second); err != nil {
				return r, err
			}
		}
		x, err := memory(b)
		if err != nil {
			return r, err
		}
		r.merge(x, false)
	}
	return r, nil
}

// sampler keeps the per-server maximum of memory readings taken every second.
type sampler struct {
	stop chan struct{}
	done chan struct{}
	peak memReading
}

func startSampler(b *bqCluster) *sampler {
	s := &sampler{stop: make(chan struct{}), done: make(chan struct{})}
	take := func() {
		if x, err := memory(b); err == nil { // a reading missed under load: the next one counts
			s.peak.merge(x, true)
		}
	}
	go func() {
		defer close(s.done)
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			take()
			select {
			case <-s.stop:
				take()
				return
			case <-t.C:
			}
		}
	}()
	return s
}

func (s *sampler) finish() memReading {
	close(s.stop)
	<-s.done
	return s.peak
}

// dirSize is the total size of the regular files under dir.
func dirSize(dir string) (float64, error) {
	var sum int64
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil // a file renamed or removed meanwhile
			}
			return err
		}
		if d.Type().IsRegular() {
			if info, err := d.Info(); err == nil {
				sum += info.Size()
			}
		}
		return nil
	})
	return float64(sum), err
}

// ---------------------------------------------------------------------------
// The attacks.

// errorKinds counts error messages with their ids and numbers blanked, so
// that equal causes count together.
type errorKinds struct {
	mu sync.Mutex
	m  map[string]int
}

var idLike = regexp.MustCompile(`[0-9a-f]{8,}|[0-9]+(\.[0-9]+)?(ms|s|µs)?`)

func (e *errorKinds) add(p *attackPhase, prefix string, err error) {
	msg := errorKind(err)
	e.mu.Lock()
	p.Details[prefix+msg]++
	e.mu.Unlock()
}

// errorKind is err's message with ids and numbers blanked, cut to 160 bytes.
func errorKind(err error) string {
	msg := idLike.ReplaceAllString(err.Error(), "#")
	if len(msg) > 160 {
		msg = msg[:160] + "…"
	}
	return msg
}

// wave runs n short-lived identities, conc at a time: each makes a key,
// dials, takes and releases attack/<i mod 100>, and closes.
func wave(ctx context.Context, cl *certs.Cluster, n, conc int, p *attackPhase) error {
	var next, ok, refused, other atomic.Int64
	var ek errorKinds
	var wg sync.WaitGroup
	for range conc {
		wg.Go(func() {
			for ctx.Err() == nil {
				i := next.Add(1) - 1
				if i >= int64(n) {
					return
				}
				err := oneIdentity(ctx, cl, fmt.Sprintf("attack/%d", i%100))
				switch {
				case err == nil:
					ok.Add(1)
				case ctx.Err() != nil:
					return
				case errors.Is(err, bq.ErrRefused):
					refused.Add(1)
					ek.add(p, "refused: ", err)
				default:
					other.Add(1)
					ek.add(p, "error: ", err)
				}
			}
		})
	}
	wg.Wait()
	p.Done, p.Refused, p.Other = int(ok.Load()), int(refused.Load()), int(other.Load())
	return ctx.Err()
}

func oneIdentity(ctx context.Context, cl *certs.Cluster, lock string) error {
	key, err := crypto.GenerateKey(cl.Scheme, rand.Reader)
	if err != nil {
		return err
	}
	dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	c, err := bq.Dial(dctx, bq.Config{Cluster: cl, Identity: key})
	if err != nil {
		return fmt.Errorf("dial: %w", err)
	}
	defer c.Close()
	h, err := c.Mutex(lock).Lock(dctx)
	if err != nil {
		return fmt.Errorf("lock: %w", err)
	}
	if err := h.Unlock(dctx); err != nil {
		return fmt.Errorf("unlock: %w", err)
	}
	return nil
}

// floodOpTimeout bounds one TryLock+Unlock of the lock-name flood: an
// uncontended one takes about 5 ms, and an attempt the servers refuse for
// new_locks_per_minute waits for its Exit until this ends (the servers
// refuse that Exit too: see docs/performance.md, "Under attack").
const floodOpTimeout = 250 * time.Millisecond

// nameFlood is one identity taking fresh lock names as fast as it can.
func nameFlood(ctx context.Context, cl *certs.Cluster, dur time.Duration, p *attackPhase) error {
	key, err := crypto.GenerateKey(cl.Scheme, rand.Reader)
	if err != nil {
		return err
	}
	dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	c, err := bq.Dial(dctx, bq.Config{Cluster: cl, Identity: key})
	cancel()
	if err != nil {
		return fmt.Errorf("dial: %w", err)
	}
	defer c.Close()
	var ek errorKinds
	end := time.Now().Add(dur)
	for i := 0; time.Now().Before(end) && ctx.Err() == nil; i++ {
		opCtx, cancel := context.WithTimeout(ctx, floodOpTimeout)
		h, err := c.Mutex(fmt.Sprintf("flood/%d", i)).TryLock(opCtx)
		if err == nil {
			err = h.Unlock(opCtx)
			if err == nil {
				p.Done++
			}
		}
		cancel()
		switch {
		case err == nil:
		case ctx.Err() != nil:
			return ctx.Err()
		case errors.Is(err, bq.ErrRefused):
			p.Refused++
			ek.add(p, "refused: ", err)
		default:
			p.Other++
			ek.add(p, "error: ", err)
		}
	}
	return ctx.Err()
}

// bigListen is the members of the message flood's largest Listens: 3.4 MB
// encoded, under the 4 MiB frame limit but over the decoder's 16,384
// elements an array.
const bigListen = 100_000

// messageFlood is one raw client (the transport, no SDK) sending to every
// server, as fast as its send queues take them, Listens of 4,096 made-up
// members, then GetSets on fresh names, then Listens of 100,000 members
// (about 3.4 MB each), each for a third of dur.
// It opens a session first and heartbeats it; replies are counted by kind.
func messageFlood(ctx context.Context, cl *certs.Cluster, dur time.Duration, p *attackPhase) error {
	key, err := crypto.GenerateKey(cl.Scheme, rand.Reader)
	if err != nil {
		return err
	}
	tr, err := transport.DialClient(transport.ClientConfig{
		Key: key, Cluster: cl.ID(), Servers: cl.Addresses(), CAPool: cl.CAPool(), IdentifyServer: cl.ServerByCert,
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		return err
	}
	var (
		mu      sync.Mutex
		up      = map[wire.ServerID]bool{}
		allUp   = make(chan struct{})
		upOnce  sync.Once
		drained = make(chan struct{})
	)
	count := func(k string) {
		mu.Lock()
		p.Details[k]++
		mu.Unlock()
	}
	go func() {
		defer close(drained)
		for in := range tr.Inbound() {
			switch in.Kind {
			case transport.EventMessage:
				count("reply " + replyKind(in.Msg))
			case transport.EventConnected:
				count("event connected")
				mu.Lock()
				up[in.From.Server] = true
				n := len(up)
				mu.Unlock()
				if n == len(cl.Servers) {
					upOnce.Do(func() { close(allUp) })
				}
			default:
				count("event " + in.Kind.String())
			}
		}
	}()
	defer func() {
		_ = tr.Close()
		<-drained
	}()
	select {
	case <-allUp:
	case <-time.After(30 * time.Second):
		return errors.New("the raw client did not connect to every server within 30s")
	case <-ctx.Done():
		return ctx.Err()
	}

	members := make([]wire.ClientID, bigListen)
	for i := range members {
		_, _ = rand.Read(members[i][:])
	}
	const session = 1
	servers := slices.Sorted(func(yield func(wire.ServerID) bool) {
		for id := range cl.Addresses() {
			if !yield(id) {
				return
			}
		}
	})
	for _, s := range servers {
		_ = tr.Send(wire.ServerPeer(s), &wire.Message{SessionOpen: &wire.SessionOpen{Session: session, TTLMillis: 10000}})
	}
	fctx, cancel := context.WithTimeout(ctx, dur)
	defer cancel()
	var sent, full, failed atomic.Int64
	var req atomic.Uint64
	var wg sync.WaitGroup
	wg.Go(func() { // heartbeats: the session lives through the flood
		t := time.NewTicker(2 * time.Second)
		defer t.Stop()
		for seq := uint64(1); ; seq++ {
			select {
			case <-fctx.Done():
				return
			case <-t.C:
			}
			for _, s := range servers {
				_ = tr.Send(wire.ServerPeer(s), &wire.Message{Heartbeat: &wire.Heartbeat{Session: session, Seq: seq}})
			}
		}
	})
	// Three equal parts, one kind each: a Listen of 100,000 members always
	// costs the connection (the decoder caps arrays at 16,384 elements), so
	// mixed in it would drop the other kinds queued behind it.
	kinds := []struct {
		name string
		make func(r uint64) *wire.Message
	}{
		{"Listen 4096", func(r uint64) *wire.Message {
			return &wire.Message{Listen: &wire.Listen{Req: r, Lock: "flood/listen", Session: session, Attempt: 1, Members: members[:4096]}}
		}},
		{"GetSet", func(r uint64) *wire.Message {
			return &wire.Message{GetSet: &wire.GetSet{Req: r, Lock: fmt.Sprintf("flood/getset/%d", r)}}
		}},
		{"Listen 100000", func(r uint64) *wire.Message {
			return &wire.Message{Listen: &wire.Listen{Req: r, Lock: "flood/listen", Session: session, Attempt: 1, Members: members}}
		}},
	}
	start := time.Now()
	for k, kind := range kinds {
		end := start.Add(dur * time.Duration(k+1) / time.Duration(len(kinds)))
		var kindSent atomic.Int64
		var kw sync.WaitGroup
		for _, s := range servers {
			kw.Go(func() {
				for fctx.Err() == nil && time.Now().Before(end) {
					err := tr.Send(wire.ServerPeer(s), kind.make(req.Add(1)))
					switch {
					case err == nil:
						sent.Add(1)
						kindSent.Add(1)
					case errors.Is(err, transport.ErrQueueFull):
						full.Add(1)
						time.Sleep(time.Millisecond)
					default:
						failed.Add(1)
						count("send error: " + errorKind(err))
						time.Sleep(time.Millisecond)
					}
				}
			})
		}
		kw.Wait()
		mu.Lock()
		p.Details["sent "+kind.name] = int(kindSent.Load())
		mu.Unlock()
	}
	cancel() // ends the heartbeats
	wg.Wait()
	for _, s := range servers {
		_ = tr.Send(wire.ServerPeer(s), &wire.Message{SessionClose: &wire.SessionClose{Req: req.Add(1), Session: session}})
	}
	// Let the replies to what is in flight arrive.
	if err := sleep(ctx, 2*time.Second); err != nil {
		return err
	}
	mu.Lock()
	defer mu.Unlock()
	p.Details["send queue full (retried)"] = int(full.Load())
	p.Done = int(sent.Load())
	for k, v := range p.Details {
		if strings.HasPrefix(k, "reply error limit") {
			p.Refused += v
		} else if strings.HasPrefix(k, "reply error") || strings.HasPrefix(k, "event bad-input") {
			p.Other += v
		}
	}
	p.Other += int(failed.Load())
	return nil
}

// replyKind names a server's message: its kind, and for an error its code
// and limit.
func replyKind(m *wire.Message) string {
	if e := m.Error; e != nil {
		if e.Limit != nil {
			return fmt.Sprintf("error %s %s", e.Code, e.Limit.Name)
		}
		return fmt.Sprintf("error %s", e.Code)
	}
	s := m.String()
	if i := strings.IndexByte(s, '('); i > 0 {
		s = s[:i]
	}
	return s
}

// unenrolled makes n connection attempts to a closed cluster with fresh
// keys and no admission certificate, conc at a time: each dials every
// server and waits until all of them refused it, or wait.
func unenrolled(ctx context.Context, cl *certs.Cluster, n, conc int, wait time.Duration, p *attackPhase) error {
	var next, all, some, none atomic.Int64
	var mu sync.Mutex
	var wg sync.WaitGroup
	discard := slog.New(slog.DiscardHandler)
	for range conc {
		wg.Go(func() {
			for ctx.Err() == nil {
				if next.Add(1) > int64(n) {
					return
				}
				key, err := crypto.GenerateKey(cl.Scheme, rand.Reader)
				if err != nil {
					return
				}
				tr, err := transport.DialClient(transport.ClientConfig{
					Key: key, Cluster: cl.ID(), Servers: cl.Addresses(), CAPool: cl.CAPool(), IdentifyServer: cl.ServerByCert, Logger: discard,
				})
				if err != nil {
					mu.Lock()
					p.Details["dial error"]++
					mu.Unlock()
					none.Add(1)
					continue
				}
				refused := map[wire.ServerID]bool{}
				codes := map[string]int{}
				timer := time.NewTimer(wait)
			loop:
				for len(refused) < len(cl.Servers) {
					select {
					case in := <-tr.Inbound():
						switch in.Kind {
						case transport.EventRefused:
							refused[in.From.Server] = true
							var re *transport.RefusedError
							if errors.As(in.Err, &re) {
								codes["refusal events: "+re.Code.String()]++
							} else {
								codes["refusal events: other"]++
							}
						case transport.EventConnected:
							codes["connected (admitted!)"]++
						}
					case <-timer.C:
						break loop
					case <-ctx.Done():
						break loop
					}
				}
				timer.Stop()
				_ = tr.Close()
				switch {
				case len(refused) == len(cl.Servers):
					all.Add(1)
				case len(refused) > 0:
					some.Add(1)
				default:
					none.Add(1)
				}
				mu.Lock()
				for k, v := range codes {
					p.Details[k] += v
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	p.Done = int(all.Load() + some.Load() + none.Load())
	p.Refused = int(all.Load())
	p.Other = int(some.Load() + none.Load())
	p.Details["attempts refused by every server"] = int(all.Load())
	p.Details["attempts refused by some servers within the wait"] = int(some.Load())
	p.Details["attempts refused by none within the wait"] = int(none.Load())
	return ctx.Err()
}

// bucketStat is what one bucket of a server's bbolt file holds.
type bucketStat struct {
	Records, Bytes int // keys, and key plus value bytes
}

// storeRecords counts the records of every bucket of each server's bq.db;
// the servers must be stopped (bbolt locks the file).
func storeRecords(b *bqCluster) ([]map[string]bucketStat, error) {
	var out []map[string]bucketStat
	for i := range b.servers {
		path := filepath.Join(b.dir, fmt.Sprintf("server-%d", i), "bq.db")
		db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, Timeout: 5 * time.Second})
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", path, err)
		}
		m := make(map[string]bucketStat)
		err = db.View(func(tx *bolt.Tx) error {
			return tx.ForEach(func(name []byte, bk *bolt.Bucket) error {
				var st bucketStat
				err := bk.ForEach(func(k, v []byte) error {
					st.Records++
					st.Bytes += len(k) + len(v)
					return nil
				})
				m[string(name)] = st
				return err
			})
		})
		_ = db.Close()
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", path, err)
		}
		out = append(out, m)
	}
	return out, nil
}

// ---------------------------------------------------------------------------
// The closed cluster's legitimate client.

// enroll makes an identity for name with "bqserver client add" and dials
// with it, on the lock "legit".
func (b *bqCluster) enroll(ctx context.Context, work, name string) (*bqLocker, error) {
	file := filepath.Join(work, name+".identity")
	out, err := exec.Command(b.bin, "client", "add", name, "--dir", b.dir, "--out", file).CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("bqserver client add: %v\n%s", err, out)
	}
	id, err := certs.LoadIdentity(file)
	if err != nil {
		return nil, err
	}
	dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	c, err := bq.Dial(dctx, bq.Config{Cluster: b.cluster, Identity: id.Key, Admission: id.Admission})
	if err != nil {
		return nil, fmt.Errorf("enrolled client: %w", err)
	}
	return &bqLocker{c: c, m: c.Mutex("legit")}, nil
}

// ---------------------------------------------------------------------------
// The report.

const mb = 1 << 20

// maxOf is the largest value, NaN when empty.
func maxOf(v []float64) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	return slices.Max(v)
}

func perServer(v []float64) string {
	if len(v) == 0 {
		return "-"
	}
	var s []string
	for _, x := range v {
		s = append(s, f1(x/mb))
	}
	return strings.Join(s, "/")
}

func (r *attackReport) print(w io.Writer) {
	a := r.opts.atk
	fmt.Fprintf(w, "\nbq under attack on one machine: nproc=%d, kernel %s, CPU %s\n", r.env.nproc, r.env.kernel, r.env.cpu)
	fmt.Fprintf(w, "load average before %s, after %s; %s; started %s\n", r.env.loadBefore, r.env.loadAfter, r.env.goVersion, r.env.started)
	fmt.Fprintf(w, "n=4 f=1, 4 bqserver processes with their default limits; the attackers and the legitimate client are goroutines of the\n"+
		"bench process on the same 2 cores, all from 127.0.0.1. Waves of %d identities (%d at a time); floods %v; %d unenrolled attempts;\n"+
		"idle %v after each wave. The legitimate client starts a Lock+Unlock on \"legit\" at most every %v.\n",
		a.identities, a.concurrency, a.flood, a.unenrolled, a.idle, a.legitEvery)
	fmt.Fprintf(w, "Memory: the largest of the 4 servers; live = minimum of 3 scrapes 1 s apart, peak = maximum of scrapes every second.\n\n")
	fmt.Fprintf(w, "%-18s %16s %6s %6s %18s %8s %8s %5s %8s %8s %8s %9s\n",
		"phase", "legit Lock p50/p99", "×base", "errs", "attack ops", "refused", "other", "mem", "heap MB", "RSS MB", "data MB", "CPU s/c %")
	for _, p := range r.phases {
		lat, ratio, errs := "-", "-", "-"
		if len(p.Legit) > 0 || p.Errors > 0 {
			lat, errs = pair(p.Legit.ms(.5), p.Legit.ms(.99)), fmt.Sprint(p.Errors)
			ratio = f3(p.ratio())
			if p.Kind == kindBaseline {
				ratio = "1"
			}
		}
		ops, refused, other := "-", "-", "-"
		if p.Kind == kindAttack {
			ops, refused, other = fmt.Sprintf("%d %s", p.Done, p.Unit), fmt.Sprint(p.Refused), fmt.Sprint(p.Other)
		}
		cpu := "-"
		if p.Seconds > 0 {
			cpu = fmt.Sprintf("%.0f/%.0f", 100*p.SrvCPU/p.Seconds, 100*p.CliCPU/p.Seconds)
		}
		fmt.Fprintf(w, "%-18s %16s %6s %6s %18s %8s %8s %5s %8s %8s %8s %9s\n", p.Name, lat, ratio, errs, ops, refused, other, p.Mem,
			f1(maxOf(p.Heap)/mb), f1(maxOf(p.RSS)/mb), f1(maxOf(p.Data)/mb), cpu)
	}
	fmt.Fprintf(w, "\n(CPU: the 4 servers' / the bench process's CPU time over the phase's wall time; 200%% is both cores.)\n")
	fmt.Fprintf(w, "\nper server (s0/s1/s2/s3), MB; GC goal = go_memstats_next_gc_bytes, twice the heap the last collection found live:\n")
	fmt.Fprintf(w, "%-18s %23s %23s %23s %23s\n", "phase", "heap", "GC goal", "RSS", "data")
	for _, p := range r.phases {
		fmt.Fprintf(w, "%-18s %23s %23s %23s %23s\n", p.Name, perServer(p.Heap), perServer(p.Goal), perServer(p.RSS), perServer(p.Data))
	}
	fmt.Fprintf(w, "\nbq_limit_refusals_total by limit, all servers, at the end of each phase (cumulative per cluster); live locks and members:\n")
	for _, p := range r.phases {
		var parts []string
		for _, k := range slices.Sorted(mapsKeys(p.Refusals)) {
			parts = append(parts, fmt.Sprintf("%s=%.0f", k, p.Refusals[k]))
		}
		if len(parts) == 0 {
			parts = []string{"none"}
		}
		fmt.Fprintf(w, "  %-18s %s; locks %.0f, members %.0f, statements verified %.0f\n", p.Name, strings.Join(parts, " "),
			p.Gauges["locks_in_use"], p.Gauges["active_set_members"], p.Gauges["statements_verified"])
	}
	if len(r.stores) > 0 {
		fmt.Fprintf(w, "\nthe open cluster's bq.db once stopped, per bucket: records (KB of keys and values), s0/s1/s2/s3:\n")
		var names []string
		for name := range r.stores[0] {
			names = append(names, name)
		}
		sort.Strings(names)
		for _, name := range names {
			var parts []string
			for _, st := range r.stores {
				parts = append(parts, fmt.Sprintf("%d (%.0f)", st[name].Records, float64(st[name].Bytes)/1024))
			}
			fmt.Fprintf(w, "  %-10s %s\n", name, strings.Join(parts, " / "))
		}
	}
	fmt.Fprintf(w, "\nattack details:\n")
	for _, p := range r.phases {
		if len(p.Details) == 0 {
			continue
		}
		fmt.Fprintf(w, "  %s:\n", p.Name)
		keys := slices.Sorted(mapsKeys(p.Details))
		sort.SliceStable(keys, func(i, j int) bool { return p.Details[keys[i]] > p.Details[keys[j]] })
		for i, k := range keys {
			if i == 12 {
				fmt.Fprintf(w, "    ... %d more kinds\n", len(keys)-i)
				break
			}
			fmt.Fprintf(w, "    %8d  %s\n", p.Details[k], k)
		}
	}
	r.printTargets(w)
}

func mapsKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// targets are the three targets' values: the worst ratio of each.
type attackTargets struct {
	LockRatio, LockRatioPhase string
	lockRatio                 float64
	heapGrowth                float64 // worst (after / baseline − 1) over servers and waves
	heapWhere                 string
	heap2, data2              float64 // worst (after wave 2 / after wave 1 − 1) over servers
	heap2Where, data2Where    string
	complete                  bool
}

func growth(after, before []float64) (worst float64, server int) {
	worst, server = math.NaN(), -1
	for i := range min(len(after), len(before)) {
		g := after[i]/before[i] - 1
		if server < 0 || g > worst {
			worst, server = g, i
		}
	}
	return worst, server
}

func (r *attackReport) targets() attackTargets {
	t := attackTargets{lockRatio: math.NaN(), heapGrowth: math.NaN(), heap2: math.NaN(), data2: math.NaN()}
	attacks := 0
	for _, p := range r.phases {
		if p.Kind != kindAttack {
			continue
		}
		attacks++
		x := p.ratio()
		if math.IsNaN(x) { // the legitimate client got nothing done
			x = math.Inf(1)
		}
		if math.IsNaN(t.lockRatio) || x > t.lockRatio {
			t.lockRatio, t.LockRatioPhase = x, p.Name
		}
	}
	base, a1, a2 := r.find(phBaseline), r.find(phAfter1), r.find(phAfter2)
	if base != nil {
		for _, a := range []*attackPhase{a1, a2} {
			if a == nil {
				continue
			}
			if g, s := growth(a.Heap, base.Heap); s >= 0 && (math.IsNaN(t.heapGrowth) || g > t.heapGrowth) {
				t.heapGrowth, t.heapWhere = g, fmt.Sprintf("%s, server %d", a.Name, s)
			}
		}
	}
	if a1 != nil && a2 != nil {
		var s int
		t.heap2, s = growth(a2.Heap, a1.Heap)
		t.heap2Where = fmt.Sprintf("server %d", s)
		t.data2, s = growth(a2.Data, a1.Data)
		t.data2Where = fmt.Sprintf("server %d", s)
	}
	t.complete = attacks == 5 && a1 != nil && a2 != nil
	return t
}

func (r *attackReport) printTargets(w io.Writer) {
	t := r.targets()
	fmt.Fprintf(w, "\ntargets:\n")
	var ratios []string
	for _, p := range r.phases {
		if p.Kind == kindAttack {
			ratios = append(ratios, fmt.Sprintf("%s %s", p.Name, f3(p.ratio())))
		}
	}
	fmt.Fprintf(w, "  (a) legitimate Lock p50 under every attack ≤ 2 × its baseline: worst %s (%s): %s\n      (%s)\n",
		f3(t.lockRatio), t.LockRatioPhase, met(t.lockRatio <= 2 && t.complete), strings.Join(ratios, ", "))
	fmt.Fprintf(w, "  (b) live heap %v after a wave ≤ baseline + 20%%: worst %+.1f%% (%s): %s\n",
		r.opts.atk.idle, 100*t.heapGrowth, t.heapWhere, met(t.heapGrowth <= 0.2 && t.complete))
	fmt.Fprintf(w, "  (c) second wave grows heap and data ≤ 10%%: heap %+.1f%% (%s), data %+.1f%% (%s): %s\n",
		100*t.heap2, t.heap2Where, 100*t.data2, t.data2Where, met(t.heap2 <= 0.1 && t.data2 <= 0.1 && t.complete))
	if !t.complete {
		fmt.Fprintf(w, "  (the run did not complete: a target is met only by a complete run)\n")
	}
}

func (r *attackReport) json() map[string]any {
	var phases []map[string]any
	for _, p := range r.phases {
		x := map[string]any{
			"phase": p.Name, "kind": p.Kind, "memory": p.Mem,
			"legit_cycles": p.Cycles, "legit_errors": p.Errors,
			"legit_lock_p50_ms": jnum(p.Legit.ms(.5)), "legit_lock_p99_ms": jnum(p.Legit.ms(.99)),
			"heap_bytes": p.Heap, "rss_bytes": p.RSS, "data_bytes": p.Data, "gc_goal_bytes": p.Goal,
			"limit_refusals": p.Refusals, "gauges": p.Gauges,
			"seconds": jnum(p.Seconds), "server_cpu_s": jnum(p.SrvCPU), "client_cpu_s": jnum(p.CliCPU),
		}
		if p.Kind == kindAttack {
			x["ratio_to_baseline"] = jnum(p.ratio())
			x["done"], x["refused"], x["other"], x["unit"] = p.Done, p.Refused, p.Other, p.Unit
			x["details"] = p.Details
		}
		phases = append(phases, x)
	}
	t := r.targets()
	a := r.opts.atk
	return map[string]any{"attack": map[string]any{
		"identities": a.identities, "concurrency": a.concurrency, "flood_s": a.flood.Seconds(), "idle_s": a.idle.Seconds(),
		"unenrolled": a.unenrolled, "legit_every_ms": a.legitEvery.Milliseconds(),
		"phases": phases, "open_cluster_stores": r.stores,
		"targets": map[string]any{
			"lock_p50_ratio_max": jnum(t.lockRatio), "lock_p50_ratio_met": t.lockRatio <= 2 && t.complete,
			"heap_growth_after": jnum(t.heapGrowth), "heap_growth_after_met": t.heapGrowth <= 0.2 && t.complete,
			"second_wave_heap_growth": jnum(t.heap2), "second_wave_data_growth": jnum(t.data2),
			"second_wave_met": t.heap2 <= 0.1 && t.data2 <= 0.1 && t.complete,
		},
	}}
}
