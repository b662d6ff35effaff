package bq_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/bq-lock/bq"
)

// These examples need a running cluster, such as `go run ./cmd/bqserver dev`,
// whose cluster file they name. They have no Output comment (what they print
// names client ids and tokens, which differ every run), so go test does not
// run them as examples: TestExamples (examples_run_test.go) runs each one
// in the directory of a local four-server cluster and checks what it
// prints.

// fencedStore stands for the resource a lock protects. It remembers the
// highest token it has accepted and refuses writes with a lower one, so a
// holder whose lease ran out cannot overwrite a newer holder's work.
type fencedStore struct{ highest bq.Token }

func (s *fencedStore) Write(token bq.Token, data string) error {
	if token.Less(s.highest) {
		return fmt.Errorf("stale token %s: %s has written since", token, s.highest)
	}
	s.highest = token
	// ... write data ...
	return nil
}

var store fencedStore

func ExampleDial() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := bq.Dial(ctx, bq.Config{
		ClusterFile:    "cluster.yaml", // from `bqserver init` or `bqserver dev`
		IdentityFile:   "me.key",       // this client's signing key
		CreateIdentity: true,           // make me.key on first use
		TTL:            10 * time.Second,
	})
	if errors.Is(err, bq.ErrUnavailable) {
		log.Fatalf("too few servers answer: %v", err)
	}
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close() // releases whatever this client still holds
	fmt.Println("connected as", c.ID())
}

func ExampleMutex_Lock() {
	ctx := context.Background()
	c, err := bq.Dial(ctx, bq.Config{ClusterFile: "cluster.yaml", IdentityFile: "me.key", CreateIdentity: true})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	lockCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	h, err := c.Mutex("orders").Lock(lockCtx) // waits its turn: first come, first served
	if errors.Is(err, bq.ErrTimeout) {
		log.Fatal("still not our turn after 30s")
	}
	if err != nil {
		log.Fatal(err)
	}
	defer func() {
		if err := h.Unlock(ctx); err != nil && !errors.Is(err, bq.ErrLockLost) {
			log.Print(err)
		}
	}()

	// Pass the fencing token to the resource with every write.
	for i := range 3 {
		select {
		case <-h.Lost():
			// The lease guarantee failed: another client may hold the lock
			// now. Stop at once; the token keeps late writes out anyway.
			log.Print("lock lost; stopping")
			return
		default:
		}
		if err := store.Write(h.Token(), fmt.Sprint("batch ", i)); err != nil {
			log.Print(err)
			return
		}
	}
}

func ExampleMutex_TryLock() {
	ctx := context.Background()
	c, err := bq.Dial(ctx, bq.Config{ClusterFile: "cluster.yaml", IdentityFile: "me.key"})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	h, err := c.Mutex("nightly-report").TryLock(ctx)
	if errors.Is(err, bq.ErrBusy) {
		fmt.Println("another worker is on it")
		return
	}
	if err != nil {
		log.Fatal(err)
	}
	defer h.Unlock(ctx)
	fmt.Println("running the report with token", h.Token())
}

func ExampleClient_Status() {
	ctx := context.Background()
	c, err := bq.Dial(ctx, bq.Config{ClusterFile: "cluster.yaml", IdentityFile: "me.key"})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	st, err := c.Status(ctx, "orders")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%d of %d servers answered; %d more may fail\n", st.Reachable, st.N, st.FaultsTolerated)
	for _, h := range st.Lock.Holders { // one, or readers (or a semaphore's holders) together
		fmt.Printf("held by %s, %s, token %s\n", h.Client.Hex()[:16], h.Mode, h.Token())
	}
	for i, p := range st.Lock.Queue { // in the order they will enter
		fmt.Printf("%d. %s %s, %s\n", i+1, p.Client.Hex()[:16], p.Mode, p.State())
	}
}

func ExampleClient_Release() {
	ctx := context.Background()
	// The identity of an earlier `bqclient lock --detach orders`.
	c, err := bq.Dial(ctx, bq.Config{ClusterFile: "cluster.yaml", IdentityFile: "me.key"})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	released, err := c.Release(ctx, "orders")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("released:", released)
}

// A service elects one active instance: Run campaigns, runs the function
// while this instance leads, and cancels its context the moment the lead
// is lost. The term fences what the leader writes.
func ExampleElection_Run() {
	ctx := context.Background()
	c, err := bq.Dial(ctx, bq.Config{ClusterFile: "cluster.yaml", IdentityFile: "me.key", CreateIdentity: true})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	err = c.Election("scheduler").Run(ctx, "10.0.0.7:8080", func(ctx context.Context, l *bq.Leadership) error {
		for round := range 3 { // a few rounds of work, then step down
			select {
			case <-ctx.Done():
				return nil // the lead was lost, or ctx ended: Run resigns
			case <-time.After(100 * time.Millisecond):
			}
			if err := schedule.Write(l.Term(), fmt.Sprint("round ", round)); err != nil {
				return err
			}
		}
		return nil // done: Run resigns
	})
	if errors.Is(err, bq.ErrLockLost) {
		log.Printf("lost the lead: %v", err)
		return
	}
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("led for three rounds, then resigned")
}

// schedule is what the scheduler's leader writes, fenced by its term.
var schedule fencedStore

// Anyone can ask who leads, and follow every change.
func ExampleElection_Observe() {
	ctx := context.Background()
	c, err := bq.Dial(ctx, bq.Config{ClusterFile: "cluster.yaml", IdentityFile: "watcher.key", CreateIdentity: true})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	e := c.Election("scheduler")
	switch l, err := e.Leader(ctx); {
	case errors.Is(err, bq.ErrNoLeader):
		fmt.Println("no leader:", err)
	case err != nil:
		log.Fatal(err)
	default:
		fmt.Printf("leader %s at %s (term %s)\n", l.Client, l.Value, l.Term)
	}
	watch, stop := context.WithTimeout(ctx, 2*time.Second) // follow it for a while
	defer stop()
	for l := range e.Observe(watch) { // terms only grow; closed when watch ends
		fmt.Printf("term %s: %s\n", l.Term, l.Value)
	}
}

// Campaign blocks until this client leads; Proclaim changes the value
// observers see without giving up the lead.
func ExampleElection_Campaign() {
	ctx := context.Background()
	c, err := bq.Dial(ctx, bq.Config{ClusterFile: "cluster.yaml", IdentityFile: "me.key", CreateIdentity: true})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	l, err := c.Election("primary").Campaign(ctx, "db-1:5432")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("leading in term", l.Term())
	if err := l.Proclaim(ctx, "db-1:5433"); err != nil {
		log.Fatal(err)
	}
	select {
	case <-l.Lost():
		log.Printf("lost the lead: %v", l.Err())
	case <-time.After(time.Second): // lead for a while, then hand over
		if err := l.Resign(ctx); err != nil {
			log.Print(err)
		}
		fmt.Println("resigned")
	}
}

// rwStore is a resource a readers–writer lock protects (docs/protocol.md
// change 60): a write needs a token at least the highest it has seen from
// anyone, a read one at least the highest of a write.
type rwStore struct{ highest, highestWrite bq.Token }

func (s *rwStore) Read(token bq.Token) error {
	if token.Less(s.highestWrite) {
		return fmt.Errorf("stale reader %s: %s has written since", token, s.highestWrite)
	}
	if s.highest.Less(token) {
		s.highest = token
	}
	return nil
}

func (s *rwStore) Write(token bq.Token) error {
	if token.Less(s.highest) {
		return fmt.Errorf("stale writer %s: %s came after it", token, s.highest)
	}
	s.highest, s.highestWrite = token, token
	return nil
}

var config rwStore

func ExampleRWMutex() {
	ctx := context.Background()
	c, err := bq.Dial(ctx, bq.Config{ClusterFile: "cluster.yaml", IdentityFile: "me.key", CreateIdentity: true})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	rw := c.RWMutex("config")

	r, err := rw.RLock(ctx) // with other readers, never with a writer
	if err != nil {
		log.Fatal(err)
	}
	if err := config.Read(r.Token()); err != nil {
		log.Print(err)
	}
	if err := rw.RUnlock(ctx, r); err != nil {
		log.Print(err)
	}

	w, err := rw.Lock(ctx) // alone; readers that come after it wait for it
	if err != nil {
		log.Fatal(err)
	}
	defer w.Unlock(ctx)
	if err := config.Write(w.Token()); err != nil {
		log.Print(err)
	}
}

func ExampleSemaphore() {
	ctx := context.Background()
	c, err := bq.Dial(ctx, bq.Config{ClusterFile: "cluster.yaml", IdentityFile: "me.key", CreateIdentity: true})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	gpus := c.Semaphore("gpus", 4) // every user of "gpus" must say 4
	p, err := gpus.Acquire(ctx)    // at most 4 holders at once, first come first served
	if err != nil {
		log.Fatal(err)
	}
	defer gpus.Release(ctx, p)
	select {
	case <-p.Lost():
		log.Print("permit lost; stopping")
	default:
		fmt.Println("training with one of", gpus.Permits(), "permits:", p.Mode())
	}
}

func ExampleClient_LockAll() {
	ctx := context.Background()
	c, err := bq.Dial(ctx, bq.Config{ClusterFile: "cluster.yaml", IdentityFile: "me.key", CreateIdentity: true})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	// Taken in one order (by name) whatever the order given, so two programs
	// that each take both never deadlock.
	hs, err := c.LockAll(ctx, c.Mutex("accounts/bob"), c.Mutex("accounts/alice"))
	if err != nil {
		log.Fatal(err)
	}
	defer hs.Unlock(ctx)

	// Each lock has its own fencing token: give each resource its own
	// lock's, by name (Holding) or for all of them in turn (List).
	alice, bob := hs.Holding("accounts/alice"), hs.Holding("accounts/bob")
	select {
	case <-hs.Lost(): // any of them lost: stop using every resource
		log.Printf("lost: %v", hs.Err())
		return
	default:
	}
	if err := accounts.Write(alice.Token(), "alice: -10"); err != nil {
		log.Print(err)
		return
	}
	if err := ledger.Write(bob.Token(), "bob: +10"); err != nil {
		log.Print(err)
		return
	}
	for _, h := range hs.List() { // by name: accounts/alice, accounts/bob
		fmt.Println("holding", h.Name(), "token", h.Token())
	}
}

// The resources the locks of ExampleClient_LockAll protect, each fenced by
// its own lock's token.
var accounts, ledger fencedStore
