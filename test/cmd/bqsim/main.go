// Command bqsim runs bq's deterministic simulator (test/sim) over a range of
// seeds and reports every run that breaks an invariant.
//
//	go run ./test/cmd/bqsim -seeds 1000                  # seeds 1..1000, n=4, Byzantine behaviours at random
//	go run ./test/cmd/bqsim -seeds 200 -n 7 -byzantine stale
//	go run ./test/cmd/bqsim -seed 42 -seeds 1 -v         # replay one run and print its trace
//	go run ./test/cmd/bqsim -list                        # the Byzantine behaviours
//
// It prints one line per failing run, then a last line
// "runs=N violations=V first-failing-seed=X" (V counts failing runs; X is -
// if none), and exits with status 1 if any run failed.
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
	n := fs.Int("n", 4, "servers (f = ⌊(n−1)/3⌋)")
	byz := fs.String("byzantine", "all", "faulty servers' behaviour: none, all, or a name from -list (join with + to compose)")
	verbose := fs.Bool("v", false, "print every run's full trace (use with -seeds 1)")
	list := fs.Bool("list", false, "list the Byzantine behaviours and exit")
	stats := fs.Bool("stats", false, "print per-run statistics and wall time")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *list {
		for _, b := range sim.Behaviors() {
			fmt.Fprintf(stdout, "%-17s %s\n", b.Name, b.Doc)
		}
		return 0
	}
	failing, first := 0, "-"
	var wall time.Duration
	for i := range *seeds {
		s := *seed + uint64(i)
		sc, err := sim.Generate(s, *n, *byz)
		if err != nil {
			fmt.Fprintln(stderr, "bqsim:", err)
			return 2
		}
		opt := sim.RunOptions{}
		if *verbose {
			opt.Trace = stdout
		}
		res := sim.Run(sc, opt)
		wall += res.Wall
		if *stats {
			st := res.Stats
			fmt.Fprintf(stdout, "seed=%d wall=%v sim=%.1fs lines=%d msgs=%d locks=%d acquired=%d (2-access %d, 3-access %d) lost=%d failed=%d reads=%d sets=%d resets=%d\n",
				s, res.Wall.Round(time.Millisecond), st.SimTime.Seconds(), st.TraceLines, st.Messages, st.Locks, st.Acquired,
				st.Accesses2, st.Accesses3, st.Lost, st.Failed, st.Reads, st.Sets, st.ResetsKnown)
		}
		if !res.Failed() {
			continue
		}
		failing++
		if first == "-" {
			first = fmt.Sprint(s)
		}
		fmt.Fprintf(stdout, "FAIL seed=%d %s (and %d more)\n", s, oneLine(res.Violations[0].String()), len(res.Violations)-1)
		if *verbose {
			for _, v := range res.Violations {
				fmt.Fprintln(stdout, "  violation:", v)
			}
			fmt.Fprintln(stdout, "  replay:", res.Replay())
		}
	}
	if *stats && *seeds > 0 {
		fmt.Fprintf(stdout, "mean wall per run: %v\n", (wall / time.Duration(*seeds)).Round(100*time.Microsecond))
	}
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
