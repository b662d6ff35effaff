package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/bq-lock/bq"
	"github.com/bq-lock/bq/cmd/internal/cli"
	"github.com/bq-lock/bq/wire"
)

// exitNoLeader is what `elect NAME --leader` exits with when the election
// has no leader at the moment.
const exitNoLeader = exitBusy

type electOpts struct {
	timeout, ttl    time.Duration
	ttlSet          bool
	leader, observe bool
	asJSON          bool
}

func electCmd(g *globals, std stdio) *cobra.Command {
	var o electOpts
	cmd := &cobra.Command{
		Use:   "elect NAME [VALUE] [flags] [-- CMD [ARGS...]]",
		Short: "Campaign in an election and run CMD while leader; or show its leader",
		Long: `Leader election on the lock NAME (docs/election.md). Candidates lead in the order they
campaigned; the leader's VALUE (an address, say) is signed by it and tied to its term, and
observers believe it only when f+1 of q servers report it.

  elect NAME VALUE -- CMD   campaign; once leader, run CMD with BQ_ELECTION_NAME, BQ_ELECTION_TERM
                            (the term, N.T like a lock token), BQ_ELECTION_TERM_INT and
                            BQ_LEADER_VALUE in its environment; resign when CMD ends and exit with
                            its code. If the lead is about to be lost meanwhile, CMD's process
                            group gets SIGTERM a tenth of --ttl before the lease lapses (SIGKILL
                            half of that later) and bqclient exits 4.
  elect NAME VALUE          campaign; once leader print "leading NAME term=N.T" and lead until
                            Ctrl-C, SIGTERM or the end of stdin.
  elect NAME --leader       print the leader's value and exit; exit 3 when there is no leader.
  elect NAME --observe      print a line per leader (or value) change, in term order, until Ctrl-C.

Terms grow strictly from each leader to the next: have what the leader writes refuse a term
lower than the highest it has seen.`,
		Example: `  bqclient elect scheduler "$(hostname):8080" -- ./scheduler
  bqclient elect scheduler --leader
  bqclient elect scheduler --observe --json`,
		Args: cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			dash := cmd.ArgsLenAtDash()
			pos, argv := args, []string(nil)
			if dash >= 0 {
				pos, argv = args[:dash], args[dash:]
				if len(argv) == 0 {
					return cli.Usagef("nothing to run after --")
				}
			}
			if len(pos) == 0 {
				return cli.Usagef("need an election NAME")
			}
			name := pos[0]
			if err := wire.CheckLockName(name); err != nil {
				return cli.Usagef("bad election name %q: %v", name, err)
			}
			if o.leader && o.observe {
				return cli.Usagef("--leader and --observe exclude each other")
			}
			if err := refuseName(g, name); err != nil {
				return err
			}
			if o.leader || o.observe {
				if len(pos) > 1 || argv != nil {
					return cli.Usagef("--leader and --observe take only NAME")
				}
				return fail(runObserve(g, std, name, o))
			}
			if o.asJSON {
				return cli.Usagef("--json goes with --leader or --observe")
			}
			if len(pos) != 2 {
				return cli.Usagef("need NAME and VALUE to campaign (or --leader, --observe)")
			}
			if len(pos[1]) > wire.MaxProclaimedValue {
				return cli.Usagef("VALUE of %d bytes: the limit is %d", len(pos[1]), wire.MaxProclaimedValue)
			}
			if o.ttl < 100*time.Millisecond {
				return cli.Usagef("--ttl %v is below the minimum 100ms", o.ttl)
			}
			if o.timeout < 0 {
				return cli.Usagef("--timeout %v is negative", o.timeout)
			}
			o.ttlSet = cmd.Flags().Changed("ttl")
			return fail(runElect(g, std, name, pos[1], argv, o))
		},
	}
	f := cmd.Flags()
	f.DurationVar(&o.timeout, "timeout", 0, "give up campaigning after this long: exit 3 if another candidate led, 5 if the cluster did not answer (0: wait for ever); with --leader, 5s")
	f.DurationVar(&o.ttl, "ttl", 10*time.Second, "session lease: a leader that goes silent loses the lead within about this long")
	f.BoolVar(&o.leader, "leader", false, "print the leader's value and exit (3: no leader)")
	f.BoolVar(&o.observe, "observe", false, "print a line per leader change until interrupted")
	f.BoolVar(&o.asJSON, "json", false, "with --leader or --observe: print JSON")
	return cmd
}

// runElect campaigns for name with value and leads until CMD ends (or, with
// no CMD, until a signal or the end of stdin).
func runElect(g *globals, std stdio, name, value string, argv []string, o electOpts) error {
	sigCtx, sigs, stop := signals()
	defer stop()
	ctx := sigCtx
	if o.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(sigCtx, o.timeout)
		defer cancel()
	}
	unlockIdentity, err := lockIdentity(ctx, g.identity, false, std.err)
	if err != nil {
		return err
	}
	defer unlockIdentity()
	c, err := dial(ctx, g, &o.ttl, o.ttlSet, std.err)
	if err != nil {
		return timedOut(err, o.timeout)
	}
	l, err := c.Election(name).Campaign(ctx, value)
	if err != nil {
		leave(c)
		return timedOut(err, o.timeout)
	}
	if len(argv) > 0 {
		env := append(os.Environ(), "BQ_ELECTION_NAME="+name, "BQ_ELECTION_TERM="+l.Term().String(),
			"BQ_ELECTION_TERM_INT="+l.Term().Integer(), "BQ_LEADER_VALUE="+value)
		code, err := runWhileHeld(l, "elect", "lead of "+name+" lost", env, argv, o.ttl, sigs, std.err)
		if err != nil {
			leave(c)
			return err
		}
		if code == exitLost {
			leave(c)
			return &failure{Code: exitLost}
		}
		if rerr := resign(c, l, name); rerr != nil && code == exitOK {
			return rerr
		}
		if code != exitOK {
			return &failure{Code: code}
		}
		return nil
	}
	fmt.Fprintf(std.out, "leading %s term=%s\n", name, l.Term())
	if lost := holdUntil(sigCtx, std.in, l); lost {
		leave(c)
		return &failure{Code: exitLost, Msg: fmt.Sprintf("lead of %s lost: %s", name, lostReason(l))}
	}
	if err := resign(c, l, name); err != nil {
		return err
	}
	fmt.Fprintf(std.out, "resigned %s\n", name)
	return nil
}

// resign gives up l and closes c, within releaseBudget.
func resign(c *bq.Client, l *bq.Leadership, name string) error {
	ctx, cancel := context.WithTimeout(context.Background(), releaseBudget)
	defer cancel()
	err := l.Resign(ctx)
	leave(c)
	if err != nil {
		return fmt.Errorf("resigning %s: %w", name, err)
	}
	return nil
}

// leaderJSON is one leader in --json output.
type leaderJSON struct {
	Election string `json:"election"`
	Leader   bool   `json:"leader"`
	Term     string `json:"term,omitempty"`
	TermInt  string `json:"term_int,omitempty"`
	Holder   string `json:"holder,omitempty"`
	Rev      uint64 `json:"rev,omitempty"`
	Value    string `json:"value,omitempty"`
	Reason   string `json:"reason,omitempty"`
}

func toJSON(name string, l *bq.Leader) leaderJSON {
	return leaderJSON{Election: name, Leader: true, Term: l.Term.String(), TermInt: l.Term.Integer(), Holder: l.Client.Hex(), Rev: l.Rev, Value: l.Value}
}

// runObserve prints the leader once (--leader) or every change (--observe),
// as an observer of this identity, like status.
func runObserve(g *globals, std stdio, name string, o electOpts) error {
	sigCtx, _, stop := signals()
	defer stop()
	ctx := sigCtx
	timeout := o.timeout
	if o.leader && timeout == 0 {
		timeout = 5 * time.Second
	}
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(sigCtx, timeout)
		defer cancel()
	}
	c, err := dialObserver(ctx, g)
	if err != nil {
		return timedOut(err, timeout)
	}
	defer leave(c)
	e := c.Election(name)
	enc := json.NewEncoder(std.out)
	if o.leader {
		l, err := e.Leader(ctx)
		if errors.Is(err, bq.ErrNoLeader) {
			if o.asJSON {
				_ = enc.Encode(leaderJSON{Election: name, Reason: trimBQ(err.Error())})
			}
			return &failure{Code: exitNoLeader, Msg: trimBQ(err.Error())}
		}
		if err != nil {
			return timedOut(err, timeout)
		}
		if o.asJSON {
			return enc.Encode(toJSON(name, l))
		}
		fmt.Fprintln(std.out, l.Value)
		return nil
	}
	for l := range e.Observe(ctx) {
		if o.asJSON {
			if err := enc.Encode(toJSON(name, &l)); err != nil {
				return err
			}
			continue
		}
		fmt.Fprintf(std.out, "term=%s holder=%s rev=%d value=%q\n", l.Term, l.Client.Hex()[:16], l.Rev, l.Value)
	}
	return nil // Ctrl-C, SIGTERM or --timeout end an observer normally
}
