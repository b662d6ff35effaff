// Command bqserver-byzantine is a bq server that misbehaves on purpose: the
// honest protocol core of `bqserver run`, wrapped by the simulator's
// faulty-server behaviours (test/sim.Mask). It exists for the process-level
// tests (test/e2e) only and lives under test/ so that nothing of it is in the
// bqserver an operator runs.
//
//	bqserver-byzantine --dir DIR --id I --behaviours a+b
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/bq-lock/bq/certs"
	"github.com/bq-lock/bq/crypto"
	"github.com/bq-lock/bq/server"
	"github.com/bq-lock/bq/test/sim"
	"github.com/bq-lock/bq/wire"
)

func main() { os.Exit(run()) }

func run() int {
	dir := flag.String("dir", "", "cluster directory made by 'bqserver init' (required)")
	id := flag.Int("id", -1, "this server's id (required)")
	behaviours := flag.String("behaviours", "", "faulty behaviours to run, joined with + (required): "+strings.Join(sim.ProcessBehaviors, ", "))
	leaked := flag.String("leaked", "", "ids of members an epoch left out whose files leaked, joined with commas: their DIR/server-<id> signing and endorsement keys, with DIR/ca's key, are what fork-epoch signs with")
	flag.Parse()
	if *dir == "" || *id < 0 || *behaviours == "" || flag.NArg() > 0 {
		flag.Usage()
		return 2
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, nil))
	names := strings.Split(*behaviours, "+")
	// The operator's settings, as bqserver run reads them (DIR/server.yaml
	// if it exists): its honest core keeps the same lease bounds as the
	// correct members' do.
	var settings *server.Settings
	if path := filepath.Join(*dir, server.SettingsFileName); fileExists(path) {
		var err error
		if settings, err = server.LoadSettings(path); err != nil {
			fmt.Fprintf(os.Stderr, "bqserver-byzantine: %v\n", err)
			return 2
		}
	}
	cfg := server.Config{Dir: *dir, ID: *id, Logger: logger, Settings: settings}
	cfg.NewCore = func(m *certs.ServerMaterial) (server.Core, error) {
		honest, err := server.NewProtocolCore(m, settings.ApplyCore)
		if err != nil {
			return nil, err
		}
		mask, err := sim.NewMask(honest, m.ID, m.Cluster.N, m.SigningKey, m.Cluster.Keyring(), 10*time.Second, uint64(time.Now().UnixNano()), names)
		if err != nil || *leaked == "" {
			return mask, err
		}
		keys, endorsers, ca, err := loadLeaked(*dir, *leaked, m)
		if err != nil {
			return nil, err
		}
		mask.Leak(keys, endorsers, ca)
		logger.Warn("TEST-ONLY: holding the leaked keys of retired members", "ids", *leaked)
		return mask, nil
	}
	logger.Warn("TEST-ONLY Byzantine mode: this server misbehaves on purpose", "behaviours", *behaviours)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	srv, err := server.Start(cfg)
	if err != nil {
		fmt.Fprintf(os.Stderr, "bqserver-byzantine: %v\n", err)
		return 1
	}
	<-ctx.Done()
	if err := srv.Close(); err != nil {
		return 1
	}
	return 0
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// loadLeaked reads what leaked of the members ids (comma-separated): each
// one's signing key and endorsement keys from DIR/server-<id>, and the
// cluster CA key of DIR/ca; and this server's own endorsement keys as they
// are now (a faulty member destroys nothing from here on).
func loadLeaked(dir, ids string, m *certs.ServerMaterial) (map[wire.ServerID]*crypto.PrivateKey, map[wire.ServerID]*wire.Endorser, *crypto.PrivateKey, error) {
	keys, endorsers := map[wire.ServerID]*crypto.PrivateKey{}, map[wire.ServerID]*wire.Endorser{}
	if m.Endorser != nil {
		endorsers[m.ID] = m.Endorser.Clone()
	}
	for _, f := range strings.Split(ids, ",") {
		id, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || id < 0 || id >= m.Cluster.N {
			return nil, nil, nil, fmt.Errorf("--leaked: %q is no member of the cluster file", f)
		}
		k, err := certs.ReadSigningKeyFile(filepath.Join(certs.ServerDir(dir, id), certs.SigningKeyFile))
		if err != nil {
			return nil, nil, nil, err
		}
		keys[wire.ServerID(id)] = k
		if ek := m.Cluster.Servers[id].Endorse; ek != nil {
			en, err := certs.LoadMemberEndorser(dir, wire.ServerID(id), ek)
			if err != nil {
				return nil, nil, nil, err
			}
			endorsers[wire.ServerID(id)] = en
		}
	}
	ca, err := certs.LoadCA(dir)
	if err != nil {
		return nil, nil, nil, err
	}
	caKey, err := ca.EpochSigner()
	if err != nil {
		return nil, nil, nil, err
	}
	return keys, endorsers, caKey, nil
}
