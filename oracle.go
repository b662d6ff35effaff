package bq

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/bq-lock/bq/crypto"
	"github.com/bq-lock/bq/omega"
	"github.com/bq-lock/bq/wire"
)

// The time-free eventual leader oracle (docs/election.md, "A time-free
// alternative"): an alternative to Election for a fixed set of candidates
// that needs no lease to elect, only that some correct candidate is
// eventually never slower than the others' reads. Each candidate's register
// is the proclamation of a lock only it uses (NAME/ω/<its id>): signed by
// it, kept by the servers while its session lives, read from q servers (the
// newest value whose signature verifies wins: a faulty server can only show
// an older one).

// OmegaConfig is an oracle's candidates.
type OmegaConfig struct {
	// Candidates is Π, the same list at every candidate; its order breaks
	// ties. This client must be in it.
	Candidates []wire.ClientID
	// T is how many candidates may be Byzantine: len(Candidates) ≥ 2T+1.
	T int
	// Pause is the wait between this candidate's rounds (0: 100 ms). The
	// oracle's assumption is about relative speed: the candidate that
	// pauses least is the natural leader.
	Pause time.Duration
}

// Omega is this client's part in a time-free oracle: it runs rounds in the
// background until Stop, and says whom it trusts now.
type Omega struct {
	c      *Client
	name   string
	cfg    OmegaConfig
	core   *omega.Oracle
	self   int
	mu     sync.Mutex // guards leadr, lvls, rounds
	leadr  wire.ClientID
	lvls   []uint64
	rounds uint64
	// changes holds the latest leader not yet received (capacity 1).
	changes chan wire.ClientID
	cancel  context.CancelFunc
	done    chan struct{}
	err     error // why the rounds stopped, once done is closed
}

// omegaRegister is the lock whose proclamation is candidate id's register.
func omegaRegister(name string, id wire.ClientID) string { return name + "/ω/" + id.Hex() }

// StartOmega joins the oracle name as a candidate: it takes its register
// (waiting until it holds it) and runs rounds in the background until Stop
// or ctx ends.
func (c *Client) StartOmega(ctx context.Context, name string, cfg OmegaConfig) (*Omega, error) {
	if err := wire.CheckLockName(omegaRegister(name, c.ID())); err != nil {
		return nil, fmt.Errorf("bq: oracle name %q: %w", name, err)
	}
	c.mu.Lock()
	incarnation := c.bk.Session() // on stable storage: a restart has a higher one
	c.mu.Unlock()
	core, err := omega.New(omega.Config{Candidates: cfg.Candidates, Self: c.ID(), T: cfg.T, Incarnation: incarnation})
	if err != nil {
		return nil, fmt.Errorf("bq: %w", err)
	}
	if cfg.Pause == 0 {
		cfg.Pause = 100 * time.Millisecond
	}
	o := &Omega{c: c, name: name, cfg: cfg, core: core, self: slices.Index(cfg.Candidates, c.ID()), changes: make(chan wire.ClientID, 1), done: make(chan struct{})}
	o.leadr, o.lvls = core.Leader(), core.Levels()
	lead, err := o.write(ctx, nil)
	if err != nil {
		return nil, err
	}
	rctx, cancel := context.WithCancel(context.Background())
	o.cancel = cancel
	go o.run(rctx, lead)
	return o, nil
}

// Leader is the candidate this one trusts now.
func (o *Omega) Leader() wire.ClientID {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.leadr
}

// Levels are the candidates' punishment levels as this one sees them, in
// OmegaConfig order.
func (o *Omega) Levels() []uint64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.lvls)
}

// Rounds is how many rounds this candidate completed.
func (o *Omega) Rounds() uint64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.rounds
}

// Changes delivers the leader each time this candidate's trust moves (only
// the latest, if the receiver is slow).
func (o *Omega) Changes() <-chan wire.ClientID { return o.changes }

// Stop ends the rounds and gives the register up.
func (o *Omega) Stop() error {
	o.cancel()
	<-o.done
	if errors.Is(o.err, context.Canceled) {
		return nil
	}
	return o.err
}

// write proclaims the round's register: in the lead of the register lock,
// taken (again) when there is none or it was lost.
func (o *Omega) write(ctx context.Context, lead *Leadership) (*Leadership, error) {
	b, err := crypto.Marshal(o.core.Next())
	if err != nil {
		return nil, err
	}
	if lead != nil && lead.Err() == nil {
		if err := lead.Proclaim(ctx, string(b)); err == nil || ctx.Err() != nil {
			return lead, err
		}
	}
	return o.c.Election(omegaRegister(o.name, o.c.ID())).Campaign(ctx, string(b))
}

func (o *Omega) run(ctx context.Context, lead *Leadership) {
	defer close(o.done)
	defer func() {
		rctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if lead != nil {
			_ = lead.Resign(rctx)
		}
	}()
	for {
		regs := make([]*omega.Register, len(o.cfg.Candidates))
		for j, cand := range o.cfg.Candidates {
			if j != o.self {
				regs[j] = o.read(ctx, cand)
			}
		}
		if ctx.Err() != nil {
			o.err = ctx.Err()
			return
		}
		o.core.Read(regs)
		o.mu.Lock()
		moved := o.core.Leader() != o.leadr
		o.leadr, o.lvls, o.rounds = o.core.Leader(), o.core.Levels(), o.core.Rounds()
		o.mu.Unlock()
		if moved {
			select { // keep only the latest
			case <-o.changes:
			default:
			}
			o.changes <- o.core.Leader()
		}
		select {
		case <-time.After(o.cfg.Pause):
		case <-ctx.Done():
			o.err = ctx.Err()
			return
		}
		var err error
		if lead, err = o.write(ctx, lead); err != nil {
			o.err = err
			return
		}
	}
}

// read is candidate cand's register as q servers show it (omega.Newest).
func (o *Omega) read(ctx context.Context, cand wire.ClientID) *omega.Register {
	lock := omegaRegister(o.name, cand)
	replies, v, err := o.c.statusReplies(ctx, lock, leaderGrace)
	if err != nil || len(replies) < v.q {
		return nil
	}
	rs := make([]*wire.StatusReply, 0, len(replies))
	for _, r := range replies {
		rs = append(rs, r)
	}
	return omega.Newest(o.c.cluster.ID(), cand, lock, rs)
}
