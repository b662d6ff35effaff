// Command bench measures bq side by side with etcd v3.7 on one machine: an
// uncontended Lock+Unlock, 8 clients contending for one lock, and both
// from 1 to 64 contenders. Run it through ./run, which builds it and
// bqserver; see docs/performance.md.
//
//	bench [--json] [--quick] [--bqserver PATH] [--systems bq,etcd]
//	      [--schemes Ed25519,ML-DSA-44,...]
//	      [--workloads uncontended,contended,scaling,spread,failover,readers,semaphore]
//	      [--servers N] [--spread 16,64,256] [--larger 7] [--profile DIR]
//	bench --attack [--json] [--quick] [attack sizes]
//
// --attack runs only the attack benchmark on bq (attack.go).
//
// It re-executes itself as "bench etcd-member ..." for each etcd member, and
// as "bench candidate ..." for each candidate of the failover workload and
// "bench observer ..." for its observer.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"time"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "etcd-member" {
		os.Exit(etcdMember(os.Args[2:]))
	}
	if len(os.Args) > 1 && os.Args[1] == "candidate" {
		os.Exit(candidateMain(os.Args[2:]))
	}
	if len(os.Args) > 1 && os.Args[1] == "observer" {
		os.Exit(observerMain(os.Args[2:]))
	}
	os.Exit(bench(os.Args[1:]))
}

type options struct {
	json, quick bool
	bqserver    string
	workdir     string
	profile     string
	keep        bool
	systems     map[string]bool
	schemes     []string // bq's signature schemes: the first is "bq", each other one "bq/SCHEME"
	workloads   map[string]bool
	scaling     []int
	spread      []int // clients in the spread workload's rows (each also mixed: over K/4 locks)
	// larger is a second cluster size (0: none) at which the contended and
	// spread workloads run again, as "bq/n=N" and "etcd/n=N" (issue 29.4);
	// largerSpread is its spread rows' K.
	larger       int
	largerSpread []int
	attack       bool
	reconfig     bool // the reconfiguration workload only (reconfig.go)
	reconfigHeld int  // locks held by other clients during it
	atk          attackOptions

	uncontendedWarm, uncontendedOps int
	contenders                      int
	// readers: the readers workload's readers (and one writer); semClients
	// on permits: the semaphore workload's (shared.go).
	readers, semClients, permits int
	failoverRounds               int
	// servers is bq's n (f = ⌊(n-1)/3⌋); etcdMembers etcd's members
	// (default: servers).
	servers, etcdMembers           int
	observePoll                    time.Duration
	warm, contended, step, timeout time.Duration
}

func parseFlags(args []string) (*options, error) {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	o := &options{}
	fs.BoolVar(&o.json, "json", false, "print one JSON object as the last line")
	fs.BoolVar(&o.quick, "quick", false, "shorter runs (contended 3 s; scaling 1, 4, 16)")
	fs.StringVar(&o.bqserver, "bqserver", "", "bqserver binary (default: next to this binary)")
	fs.StringVar(&o.workdir, "workdir", "", "make the run's directory (clusters, logs) inside this one, e.g. /dev/shm/x to take the disk out (default: the system's temporary directory); it is removed at the end")
	fs.StringVar(&o.profile, "profile", "", "write CPU profiles to DIR: each bq server's whole run (bqserver-<i>.pprof) and the bq clients' contended run (bench-clients.pprof)")
	fs.BoolVar(&o.keep, "keep", false, "keep the run's directory (logs, data) at the end; with ./run, give a --workdir outside its temporary directory")
	systems := fs.String("systems", "bq,etcd", "systems to measure")
	schemes := fs.String("schemes", "Ed25519", "bq's signature schemes, comma-separated (Ed25519, ML-DSA-44, Ed25519-Dilithium2): the first is measured as \"bq\", each other one as \"bq/SCHEME\", with the same workloads")
	workloads := fs.String("workloads", "uncontended,contended,scaling,spread,failover,readers,semaphore", "workloads to run, for every system (--quick: without spread; etcd has no semaphore)")
	fs.IntVar(&o.readers, "readers", 8, "readers beside the one writer in the readers workload")
	fs.IntVar(&o.semClients, "semaphore-clients", 8, "clients in the semaphore workload")
	fs.IntVar(&o.permits, "permits", 2, "the semaphore workload's permits")
	fs.IntVar(&o.failoverRounds, "failover-rounds", 20, "kill -9 of the leader in the failover workload (--quick: 5)")
	fs.DurationVar(&o.observePoll, "observe-poll", 0, "bq's observer in the failover workload reads the leader this often instead of Observe (200ms: Observe before it was pushed)")
	scaling := fs.String("scaling", "", "contender counts for the scaling runs (default 1,2,4,8,16,32,64; --quick 1,4,16)")
	spread := fs.String("spread", "", "client counts K for the spread workload: K clients on K locks, then on K/4 (default 16,64,256; --quick 16,64)")
	fs.IntVar(&o.uncontendedOps, "ops", 1000, "measured uncontended Lock+Unlock cycles (--quick: 500)")
	fs.IntVar(&o.contenders, "contenders", 8, "clients in the contended run")
	fs.IntVar(&o.larger, "larger", 7, "run the contended and spread workloads again with this many bq servers and etcd members, reported as bq/n=N and etcd/n=N (0: not; --quick: 0)")
	largerSpread := fs.String("larger-spread", "64", "client counts K of the spread workload at --larger")
	fs.IntVar(&o.servers, "servers", bqServers, "cluster size for every workload: bq's n (f = ⌊(n-1)/3⌋: 7 is f=2) and, unless --etcd-members, etcd's members")
	fs.IntVar(&o.etcdMembers, "etcd-members", 0, "etcd's members (default: --servers; 3 is the setup of the runs before --servers)")
	fs.DurationVar(&o.contended, "duration", 10*time.Second, "contended run length (--quick: 3s)")
	fs.DurationVar(&o.timeout, "timeout", 30*time.Minute, "give up (and clean up) after this long")
	fs.DurationVar(&o.step, "step", 3*time.Second, "length of each scaling run (--quick: 2s)")
	fs.BoolVar(&o.attack, "attack", false, "run only the attack benchmark on bq (attack.go; --timeout default 60m)")
	fs.BoolVar(&o.reconfig, "reconfig", false, "run only the reconfiguration workload on bq (reconfig.go): server replace under --contenders, --duration before and after")
	fs.IntVar(&o.reconfigHeld, "reconfig-held", 1000, "locks held by other clients during --reconfig")
	addAttackFlags(fs, &o.atk)
	err := fs.Parse(args)
	if err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	set := func(name string) bool {
		found := false
		fs.Visit(func(f *flag.Flag) { found = found || f.Name == name })
		return found
	}
	o.uncontendedWarm = 50
	if o.servers < 1 || o.etcdMembers < 0 || o.larger < 0 {
		return nil, fmt.Errorf("bad --servers %d, --etcd-members %d or --larger %d", o.servers, o.etcdMembers, o.larger)
	}
	if o.etcdMembers == 0 {
		o.etcdMembers = o.servers
	}
	if o.attack && (o.servers != bqServers || set("etcd-members")) {
		return nil, fmt.Errorf("--attack always runs n=%d; --servers and --etcd-members are for the workloads", bqServers)
	}
	o.atk.attackDefaults(o.quick, set)
	if o.attack && !set("timeout") {
		o.timeout = time.Hour
	}
	o.warm = 500 * time.Millisecond
	if o.quick {
		if !set("ops") {
			o.uncontendedOps = 500
		}
		if !set("duration") {
			o.contended = 3 * time.Second
		}
		if !set("step") {
			o.step = 2 * time.Second
		}
		if !set("failover-rounds") {
			o.failoverRounds = 5
		}
		if !set("larger") {
			o.larger = 0
		}
	}
	o.systems, o.workloads = csvSet(*systems), csvSet(*workloads)
	if o.quick && !set("workloads") {
		delete(o.workloads, "spread")
	}
	for _, s := range strings.Split(*schemes, ",") {
		if s = strings.TrimSpace(s); s != "" {
			o.schemes = append(o.schemes, s)
		}
	}
	if len(o.schemes) == 0 {
		return nil, fmt.Errorf("bad --schemes %q", *schemes)
	}
	ints := func(flag, s, def, quick string) ([]int, error) {
		if s == "" {
			s = def
			if o.quick {
				s = quick
			}
		}
		var out []int
		for _, f := range strings.Split(s, ",") {
			k, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || k < 1 {
				return nil, fmt.Errorf("bad --%s %q", flag, s)
			}
			out = append(out, k)
		}
		return out, nil
	}
	if o.scaling, err = ints("scaling", *scaling, "1,2,4,8,16,32,64", "1,4,16"); err != nil {
		return nil, err
	}
	if o.spread, err = ints("spread", *spread, "16,64,256", "16,64"); err != nil {
		return nil, err
	}
	if o.largerSpread, err = ints("larger-spread", *largerSpread, "64", "64"); err != nil {
		return nil, err
	}
	if o.bqserver == "" {
		self, err := os.Executable()
		if err != nil {
			return nil, err
		}
		o.bqserver = filepath.Join(filepath.Dir(self), "bqserver")
	}
	return o, nil
}

func csvSet(s string) map[string]bool {
	m := make(map[string]bool)
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			m[f] = true
		}
	}
	return m
}

// logf reports progress on stderr.
func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "bench %s: %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}

func bench(args []string) int {
	o, err := parseFlags(args)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	go func() {
		<-ctx.Done()
		stop() // a second Ctrl-C kills at once (children die with us: Pdeathsig)
	}()

	// Always a fresh directory of our own (inside --workdir if given), so
	// that removing it at the end never touches anything else.
	if o.workdir != "" {
		if err := os.MkdirAll(o.workdir, 0o755); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			return 1
		}
	}
	work, err := os.MkdirTemp(o.workdir, "bq-bench-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 1
	}
	defer func() {
		stopAll(5 * time.Second)
		if o.keep {
			logf("kept %s", work)
		} else {
			_ = os.RemoveAll(work)
		}
	}()

	env := machine()
	logf("machine: %s", env)
	if o.attack {
		if err := runAttack(ctx, o, work, env); err != nil {
			return fail(ctx, "attack", err)
		}
		return 0
	}
	if o.reconfig {
		if err := runReconfig(ctx, o, work, env); err != nil {
			return fail(ctx, "reconfig", err)
		}
		return 0
	}
	res := &results{env: env, opts: o}
	if o.systems["bq"] {
		for i, scheme := range o.schemes {
			name := "bq"
			if i > 0 {
				name = "bq/" + scheme
			}
			r, err := runBQ(ctx, o, work, name, scheme)
			if err != nil {
				return fail(ctx, name, err)
			}
			res.systems = append(res.systems, r)
		}
	}
	if o.systems["etcd"] {
		r, err := runEtcd(ctx, o, work, "etcd")
		if err != nil {
			return fail(ctx, "etcd", err)
		}
		res.systems = append(res.systems, r)
	}
	if lo := o.largerRun(); lo != nil {
		if o.systems["bq"] {
			name := fmt.Sprintf("bq/n=%d", lo.servers)
			r, err := runBQ(ctx, lo, work, name, o.schemes[0])
			if err != nil {
				return fail(ctx, name, err)
			}
			res.systems = append(res.systems, r)
		}
		if o.systems["etcd"] {
			name := fmt.Sprintf("etcd/n=%d", lo.etcdMembers)
			r, err := runEtcd(ctx, lo, work, name)
			if err != nil {
				return fail(ctx, name, err)
			}
			res.systems = append(res.systems, r)
		}
	}
	res.env.loadAfter = loadavg()
	res.print(os.Stdout)
	if o.json {
		b, err := json.Marshal(res.json())
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			return 1
		}
		fmt.Println(string(b))
	}
	return 0
}

func fail(ctx context.Context, sys string, err error) int {
	if errors.Is(ctx.Err(), context.Canceled) {
		fmt.Fprintln(os.Stderr, "bench: interrupted")
		return 130
	}
	fmt.Fprintf(os.Stderr, "bench: %s: %v\n(--keep --workdir DIR keeps the servers' logs)\n", sys, err)
	return 1
}

// largerRun is the options of the run at the second cluster size: the
// contended and spread workloads (those of o's), with --larger servers and
// members and the --larger-spread rows; nil if there is none.
func (o *options) largerRun() *options {
	if o.larger == 0 {
		return nil
	}
	lo := *o
	lo.servers, lo.etcdMembers = o.larger, o.larger
	lo.spread, lo.profile = o.largerSpread, ""
	lo.workloads = map[string]bool{}
	for _, w := range []string{"contended", "spread"} {
		if o.workloads[w] {
			lo.workloads[w] = true
		}
	}
	if len(lo.workloads) == 0 {
		return nil
	}
	return &lo
}

// sysResult is everything measured on one system.
type sysResult struct {
	name        string // "bq", "bq/SCHEME", "etcd", or "bq/n=N", "etcd/n=N" (--larger)
	bq          bool   // a bq cluster (its counters are bq's)
	n, f        int    // bq: servers and faults tolerated; etcd: members (f unused)
	uncontended *uncontendedResult
	contended   *contendedResult
	uwindow     window // of the uncontended run
	window      window // of the contended run
	fenceErrors int
	// byID is the contended run's acquisitions per client in ClientID order
	// (the bakery breaks ticket ties by ClientID).
	byID    []int
	scaling []scalingRow
	spread  []spreadRow
	// failover is each measured failover: kill -9 of the leader to the
	// next leader's Campaign returning, and an observer's lag behind it.
	failover failoverResult
	// readers and semaphore are the shared workloads' runs (shared.go).
	readers, semaphore *sharedResult
}

// scalingRow is one run with K contenders.
type scalingRow struct {
	K        int
	R        contendedResult
	W        window
	Accesses map[string]float64 // access deltas over the whole run
	// Step is every metric's delta over the whole run (snapshot counters
	// such as suspicions and resets included).
	Step map[string]float64
}

// runBQ measures a bq cluster signing with scheme, reported as name.
func runBQ(ctx context.Context, o *options, work, name, scheme string) (*sysResult, error) {
	if _, err := os.Stat(o.bqserver); err != nil {
		return nil, fmt.Errorf("no bqserver binary (build it: go build -o DIR ./cmd/bqserver, pass --bqserver): %w", err)
	}
	if o.profile != "" {
		if err := os.MkdirAll(o.profile, 0o755); err != nil {
			return nil, err
		}
	}
	logf("%s: starting %d bqserver processes (%s)", name, o.servers, scheme)
	profile := o.profile
	if name != "bq" {
		profile = "" // one set of profiles per run: the first scheme's
	}
	b, err := startCluster(o.bqserver, work, profile, clusterOptions{name: name, scheme: scheme, servers: o.servers})
	if err != nil {
		return nil, err
	}
	defer b.stop()
	r := &sysResult{name: name, bq: true, n: b.cluster.N, f: b.cluster.F}

	if o.workloads["uncontended"] {
		ls, err := b.dial(ctx, 1, "bench-uncontended", &fence{})
		if err != nil {
			return nil, err
		}
		logf("%s: uncontended, %d+%d Lock+Unlock cycles", name, o.uncontendedWarm, o.uncontendedOps)
		u, w, err := measuredUncontended(ctx, ls[0], o.uncontendedWarm, o.uncontendedOps, b.pids(), b.metrics)
		closeAll(ls)
		if err != nil {
			return nil, err
		}
		r.uncontended, r.uwindow = &u, w
	}
	if o.workloads["contended"] {
		f := &fence{}
		ls, err := b.dial(ctx, o.contenders, "bench-contended", f)
		if err != nil {
			return nil, err
		}
		logf("%s: contended, %d clients for %v", name, o.contenders, o.contended)
		stopProfile, err := profileSelf(profile, "bench-clients.pprof")
		if err != nil {
			closeAll(ls)
			return nil, err
		}
		c, w, err := measured(ctx, ls, o.warm, o.contended, b.pids(), b.metrics)
		stopProfile()
		closeAll(ls)
		if err != nil {
			return nil, err
		}
		r.contended, r.window, r.fenceErrors = &c, w, f.bad
		r.byID = byClientID(ls, c.PerClient)
	}
	if o.workloads["scaling"] {
		for _, k := range o.scaling {
			f := &fence{}
			dial := func() ([]locker, error) { return b.dial(ctx, k, fmt.Sprintf("bench-scaling-%d", k), f) }
			row, err := scalingStep(ctx, o, name, k, dial, b.pids(), b.metrics)
			if err != nil {
				return nil, fmt.Errorf("scaling, %d contenders: %w", k, err)
			}
			r.fenceErrors += f.bad
			r.scaling = append(r.scaling, row)
		}
	}
	if o.workloads["spread"] {
		var fences []*fence
		dial := func(clients, names int, lockOf []int) ([]locker, error) {
			fs := make([]*fence, names)
			for j := range fs {
				fs[j] = &fence{}
			}
			fences = append(fences, fs...)
			return b.dialEach(ctx, clients, func(i int) (string, *fence) {
				return fmt.Sprintf("bench-spread-%d-%d-%d", clients, names, lockOf[i]), fs[lockOf[i]]
			})
		}
		r.spread, err = runSpread(ctx, o, name, dial, b.pids(), b.metrics)
		for _, f := range fences {
			r.fenceErrors += f.bad
		}
		if err != nil {
			return nil, err
		}
	}
	if r.readers, r.semaphore, err = runBQShared(ctx, o, name, b); err != nil {
		return nil, err
	}
	if o.workloads["failover"] && name == "bq" {
		self, err := os.Executable()
		if err != nil {
			return nil, err
		}
		if r.failover, err = bqFailover(ctx, o, work, self, name, b); err != nil {
			return nil, fmt.Errorf("failover: %w", err)
		}
	}
	return r, nil
}

// window is what the counters say about a contended run's measured window:
// CPU seconds of the servers and of this process, and metric deltas.
type window struct {
	ServerCPU, ClientCPU float64
	Metrics              map[string]float64
}

// measure runs run, reading the CPU time of pids and of this process and
// the metrics at urls at the two instants it calls back.
func measure(pids []int, urls []string, run func(atStart, atEnd func()) error) (window, error) {
	type reading struct {
		srv, cli float64
		m        map[string]float64
		err      error
	}
	var r0, r1 reading
	read := func(r *reading) func() {
		return func() {
			var err1, err2, err3 error
			r.srv, err1 = cpuSum(pids)
			r.cli, err2 = cpuSeconds(0)
			if len(urls) > 0 {
				r.m, err3 = scrape(urls)
			}
			r.err = errors.Join(err1, err2, err3)
		}
	}
	err := run(read(&r0), read(&r1))
	if err == nil {
		err = errors.Join(r0.err, r1.err)
	}
	return window{ServerCPU: r1.srv - r0.srv, ClientCPU: r1.cli - r0.cli, Metrics: delta(r0.m, r1.m)}, err
}

// measured runs the contended workload under measure.
func measured(ctx context.Context, ls []locker, warm, dur time.Duration, pids []int, urls []string) (contendedResult, window, error) {
	var res contendedResult
	w, err := measure(pids, urls, func(atStart, atEnd func()) error {
		var err error
		res, err = contended(ctx, ls, warm, dur, atStart, atEnd)
		return err
	})
	return res, w, err
}

// measuredUncontended runs the uncontended workload under measure.
func measuredUncontended(ctx context.Context, l locker, warm, n int, pids []int, urls []string) (uncontendedResult, window, error) {
	var res uncontendedResult
	w, err := measure(pids, urls, func(atStart, atEnd func()) error {
		var err error
		res, err = uncontended(ctx, l, warm, n, atStart, atEnd)
		return err
	})
	return res, w, err
}

// profileSelf profiles this process's CPU (the bq clients) into dir/name
// until the returned function is called; without dir it does nothing.
func profileSelf(dir, name string) (func(), error) {
	if dir == "" {
		return func() {}, nil
	}
	f, err := os.Create(filepath.Join(dir, name))
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		_ = f.Close()
		return nil, err
	}
	return func() { pprof.StopCPUProfile(); _ = f.Close() }, nil
}

// publishWait outlasts the servers' once-a-second metrics snapshot.
const publishWait = 1100 * time.Millisecond

// scalingStep runs k contenders (dial opens them) for o.step and reads the
// servers' counters.
func scalingStep(ctx context.Context, o *options, name string, k int, dial func() ([]locker, error), pids []int, metrics []string) (scalingRow, error) {
	row := scalingRow{K: k}
	ls, err := dial()
	if err != nil {
		return row, err
	}
	defer closeAll(ls)
	logf("%s: scaling, %d contenders for %v", name, k, stepFor(o.step, k))
	if err := sleep(ctx, publishWait); err != nil {
		return row, err
	}
	before, err := scrape(metrics)
	if err != nil {
		return row, err
	}
	row.R, row.W, err = measured(ctx, ls, o.warm, stepFor(o.step, k), pids, metrics)
	if err != nil {
		return row, err
	}
	if err := sleep(ctx, publishWait); err != nil {
		return row, err
	}
	after, err := scrape(metrics)
	if err != nil {
		return row, err
	}
	row.Step = delta(before, after)
	row.Accesses = make(map[string]float64)
	for key, v := range row.Step {
		if kind, ok := strings.CutPrefix(key, `bq_accesses_total{kind="`); ok {
			row.Accesses[strings.TrimSuffix(kind, `"}`)] = v
		}
	}
	return row, nil
}

// stepFor lengthens the window for many contenders, so that each still
// gets several turns: step up to 16, ×2 at 32, ×4 at 64.
func stepFor(step time.Duration, k int) time.Duration {
	return step * time.Duration(max(1, k/16))
}

func sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-time.After(d):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// runEtcd measures an etcd cluster of o.etcdMembers members, reported as
// name ("etcd", or "etcd/n=N" at --larger, in a directory of its own).
func runEtcd(ctx context.Context, o *options, work, name string) (*sysResult, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	if name != "etcd" {
		work = filepath.Join(work, strings.ReplaceAll(name, "/", "-"))
		if err := os.MkdirAll(work, 0o755); err != nil {
			return nil, err
		}
	}
	logf("%s: starting %d members", name, o.etcdMembers)
	e, err := startEtcd(self, work, o.etcdMembers)
	if err != nil {
		return nil, err
	}
	defer e.stop()
	r := &sysResult{name: name, n: len(e.members)}
	if o.workloads["uncontended"] {
		ls, err := e.dial(ctx, 1, etcdLockKey+"-uncontended")
		if err != nil {
			return nil, err
		}
		logf("%s: uncontended, %d+%d Lock+Unlock cycles", name, o.uncontendedWarm, o.uncontendedOps)
		u, w, err := measuredUncontended(ctx, ls[0], o.uncontendedWarm, o.uncontendedOps, e.pids(), e.metrics())
		closeAll(ls)
		if err != nil {
			return nil, err
		}
		r.uncontended, r.uwindow = &u, w
	}
	if o.workloads["contended"] {
		ls, err := e.dial(ctx, o.contenders, etcdLockKey)
		if err != nil {
			return nil, err
		}
		logf("%s: contended, %d clients for %v", name, o.contenders, o.contended)
		c, w, err := measured(ctx, ls, o.warm, o.contended, e.pids(), e.metrics())
		closeAll(ls)
		if err != nil {
			return nil, err
		}
		r.contended, r.window = &c, w
	}
	if o.workloads["scaling"] {
		for _, k := range o.scaling {
			dial := func() ([]locker, error) { return e.dial(ctx, k, fmt.Sprintf("%s-scaling-%d", etcdLockKey, k)) }
			row, err := scalingStep(ctx, o, name, k, dial, e.pids(), e.metrics())
			if err != nil {
				return nil, fmt.Errorf("scaling, %d contenders: %w", k, err)
			}
			r.scaling = append(r.scaling, row)
		}
	}
	if o.workloads["spread"] {
		dial := func(clients, names int, lockOf []int) ([]locker, error) {
			return e.dialEach(ctx, clients, func(i int) string {
				return fmt.Sprintf("%s-spread-%d-%d-%d", etcdLockKey, clients, names, lockOf[i])
			})
		}
		if r.spread, err = runSpread(ctx, o, name, dial, e.pids(), e.metrics()); err != nil {
			return nil, err
		}
	}
	if o.workloads["readers"] {
		if r.readers, err = runEtcdReaders(ctx, o, name, e); err != nil {
			return nil, err
		}
	}
	if o.workloads["failover"] {
		if r.failover, err = etcdFailover(ctx, o, work, self, e); err != nil {
			return nil, fmt.Errorf("failover: %w", err)
		}
	}
	return r, nil
}

// env describes the machine and its load.
type env struct {
	nproc              int
	kernel, cpu        string
	loadBefore         string
	loadAfter          string
	goVersion, started string
}

func (e env) String() string {
	return fmt.Sprintf("nproc=%d kernel=%s cpu=%q load=%s go=%s", e.nproc, e.kernel, e.cpu, e.loadBefore, e.goVersion)
}

func machine() env {
	e := env{nproc: runtime.NumCPU(), goVersion: runtime.Version(), loadBefore: loadavg(), started: time.Now().UTC().Format(time.RFC3339)}
	if out, err := exec.Command("uname", "-r").Output(); err == nil {
		e.kernel = strings.TrimSpace(string(out))
	}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				e.cpu = strings.TrimSpace(v)
				break
			}
		}
	}
	return e
}

func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}
