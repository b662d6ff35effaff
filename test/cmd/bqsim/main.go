// Command bqsim runs bq's deterministic simulator (test/sim) over a range of
// seeds and reports every run that breaks an invariant.
//
//	go run ./test/cmd/bqsim -seeds 1000 -byzantine all   # seeds 1..1000, n ∈ {4,7,10} from each seed, every behaviour
//	go run ./test/cmd/bqsim -seeds 200 -n 7 -byzantine stale
//	go run ./test/cmd/bqsim -seed 42 -seeds 1 -v         # replay one run and print its trace
//	go run ./test/cmd/bqsim -seeds 100 -malicious hog+sybil   # every run with these two malicious clients
//	go run ./test/cmd/bqsim -list                        # the catalogue: faulty servers, malicious clients
//
// With -byzantine all, each run gets up to f faulty servers with one or two
// behaviours each and, half the time, one or two malicious clients, all
// drawn from the seed; -n pins the cluster size (default: drawn from the
// seed, n=4:7:10 weighted 6:3:1). A quarter of the runs change the members
// (replace, add, remove, CA rotation) while the clients contend, with
// -elect too (docs/protocol.md change 43; -changes=false leaves them out),
// and half of those vary further: more changes, each client's TTL, a
// holder cut off at a change, faulty copiers and leaked keys (change 47;
// -vary=false replays a seed as drawn before).
// It prints one line per failing run, a line
// "changes: ..." counting the runs with a membership change, then a last
// line "runs=N violations=V first-failing-seed=X" (V counts failing runs; X
// is - if none), and exits with status 1 if any run failed.
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"strings"
	"time"

	"github.com/bq-lock/bq/test/sim"
)

func main() {
	// Runs allocate a lot and live briefly: collect less often (about 10% faster).
	debug.SetGCPercent(400)
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("bqsim", flag.ContinueOnError)
	fs.SetOutput(stderr)
	seeds := fs.Int("seeds", 100, "number of seeded runs")
	seed := fs.Uint64("seed", 1, "first seed")
	n := fs.Int("n", 0, "servers (f = ⌊(n−1)/3⌋); 0: drawn from each seed among 4, 7, 10")
	byz := fs.String("byzantine", "all", "faulty servers' behaviour: none, all, or a name from -list (join with + to compose)")
	verbose := fs.Bool("v", false, "print every run's full trace (use with -seeds 1)")
	list := fs.Bool("list", false, "list the Byzantine behaviours and exit")
	stats := fs.Bool("stats", false, "print per-run statistics and wall time")
	malicious := fs.String("malicious", "", "malicious clients for every run instead of the drawn ones: names from -list joined with +")
	jobs := fs.Int("j", 1, "runs in parallel (results are printed in seed order either way)")
	elect := fs.Bool("elect", false, "elections on: clients proclaim a value when they enter and client 0 reads every lock's leader, each decision checked (docs/election.md)")
	changes := fs.Bool("changes", true, "membership changes (a member replaced, docs/protocol.md change 43) in a quarter of the runs")
	modes := fs.Bool("modes", true, "readers–writer locks and semaphores in a third of the runs (docs/protocol.md change 60); false replays a seed as drawn before")
	vary := fs.Bool("vary", true, "vary the runs with changes (docs/protocol.md change 47: more changes, each client's TTL, a holder cut off at a change, faulty copiers and leaked keys); false replays a seed as drawn before")
	partial := fs.Bool("partial-opens", true, "in runs with changes, clients whose SessionOpens reach only some members and a holder cut off at a change (docs/protocol.md change 63); false replays a seed as drawn before")
	copyParts := fs.Bool("copy-parts", true, "in half the runs with changes, copies in parts of 512 or 2,048 bytes, so a copier takes a state in several parts (issue 54, item 5); false replays a seed as drawn before")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *list {
		for _, b := range sim.Behaviors() {
			fmt.Fprintf(stdout, "server  %-16s %s\n", b.Name, b.Doc)
		}
		for _, m := range sim.MalClients() {
			fmt.Fprintf(stdout, "client  %-16s %s [%s]\n", m.Name, m.Doc, m.Verdict)
		}
		return 0
	}
	failing, first := 0, "-"
	withChange, changed, changeFailing := 0, 0, 0
	var wall time.Duration
	perN, wallN := map[int]int{}, map[int]time.Duration{}
	generate := func(s uint64) (sim.Scenario, error) {
		sc, err := sim.GenerateCampaign(s, *n, *byz)
		sc.Elect = *elect
		if !*vary {
			sc.NoVariation()
		}
		if !*partial {
			sc.NoPartialOpens()
		}
		if !*copyParts {
			sc.NoSmallCopyParts()
		}
		if !*modes || *elect {
			sc.NoModes() // a leader is one holder: elections run on plain locks
		}
		if !*changes {
			sc.Replace = nil
		}
		if *malicious != "" {
			sc.Malicious = strings.Split(*malicious, "+")
		}
		return sc, err
	}
	if sc, err := generate(*seed); err != nil {
		fmt.Fprintln(stderr, "bqsim:", err)
		return 2
	} else if err := sim.CheckMalicious(sc.Malicious); err != nil {
		fmt.Fprintln(stderr, "bqsim:", err)
		return 2
	}
	if *verbose || *jobs < 1 {
		*jobs = 1
	}
	// Runs are independent and deterministic: -j workers run them, and the
	// results are reported in seed order, so the output does not depend on -j.
	results := make([]chan *sim.Result, *seeds)
	for i := range results {
		results[i] = make(chan *sim.Result, 1)
	}
	next := make(chan int)
	go func() {
		for i := range *seeds {
			next <- i
		}
		close(next)
	}()
	for range *jobs {
		go func() {
			for i := range next {
				sc, _ := generate(*seed + uint64(i))
				opt := sim.RunOptions{}
				if *verbose {
					opt.Trace = stdout
				}
				results[i] <- sim.Run(sc, opt)
			}
		}()
	}
	start := time.Now()
	for i := range *seeds {
		s := *seed + uint64(i)
		res := <-results[i]
		sc := res.Scenario
		wall += res.Wall
		perN[sc.N]++
		wallN[sc.N] += res.Wall
		if *stats {
			st := res.Stats
			fmt.Fprintf(stdout, "seed=%d wall=%v sim=%.1fs lines=%d msgs=%d locks=%d acquired=%d (2-access %d, 3-access %d; shared %d, permits %d, with another in %d) lost=%d failed=%d reads=%d sets=%d resets=%d unheld=%d\n",
				s, res.Wall.Round(time.Millisecond), st.SimTime.Seconds(), st.TraceLines, st.Messages, st.Locks, st.Acquired,
				st.Accesses2, st.Accesses3, st.SharedAcquired, st.PermitsAcquired, st.Together, st.Lost, st.Failed, st.Reads, st.Sets, st.ResetsKnown, st.Unheld)
		}
		if len(sc.Replace) > 0 {
			withChange++
			changed += res.Stats.Changes
			if res.Failed() {
				changeFailing++
			}
		}
		if !res.Failed() {
			continue
		}
		failing++
		if first == "-" {
			first = fmt.Sprint(s)
		}
		fmt.Fprintf(stdout, "FAIL seed=%d n=%d %s (and %d more)\n", s, sc.N, oneLine(res.Violations[0].String()), len(res.Violations)-1)
		if *verbose {
			for _, v := range res.Violations {
				fmt.Fprintln(stdout, "  violation:", v)
			}
			fmt.Fprintln(stdout, "  replay:", res.Replay())
		}
	}
	if *stats && *seeds > 0 {
		fmt.Fprintf(stdout, "mean wall per run: %v; elapsed %v with -j %d\n", (wall / time.Duration(*seeds)).Round(100*time.Microsecond), time.Since(start).Round(time.Millisecond), *jobs)
		for _, k := range []int{4, 7, 10} {
			if perN[k] > 0 {
				fmt.Fprintf(stdout, "n=%d: %d runs, mean wall %v\n", k, perN[k], (wallN[k] / time.Duration(perN[k])).Round(100*time.Microsecond))
			}
		}
	}
	fmt.Fprintf(stdout, "changes: %d runs with a membership change (%d made), %d of them failing\n", withChange, changed, changeFailing)
	fmt.Fprintf(stdout, "runs=%d violations=%d first-failing-seed=%s\n", *seeds, failing, first)
	if failing > 0 {
		return 1
	}
	return 0
}

func oneLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}
