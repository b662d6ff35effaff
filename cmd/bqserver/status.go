package main

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/bq-lock/bq"
	"github.com/bq-lock/bq/certs"
	"github.com/bq-lock/bq/cmd/internal/cli"
	"github.com/bq-lock/bq/crypto"
	"github.com/bq-lock/bq/server"
	"github.com/bq-lock/bq/wire"
)

// statusCmd is the operator's look at a cluster from its directory: it
// needs no enrolled identity (it enrolls a short-lived observer with the
// client CA key, as 'client revoke' does), and adds what only the
// directory knows: the settings in use and when each certificate expires.
func statusCmd(stdout io.Writer) *cobra.Command {
	var dir string
	var asJSON bool
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "status --dir DIR [LOCK] [--json]",
		Short: "Show the servers, a lock's holders and queue, the settings and the certificates' expiry",
		Long: `Show, as the cluster's operator, which servers answer and how many more may fail; with LOCK its
holders, queue, suspected and banned clients (by their enrolled names, as bqclient status shows them); the settings file in use
(DIR/server.yaml) and when the cluster CA, each server's certificate and the clients' admission
certificates expire. It reads only: on a closed cluster it connects with an observer identity it
enrolls for ten minutes with DIR's client CA key (nothing is recorded), so nobody has to be enrolled.`,
		Example: `  bqserver status --dir /etc/bq
  bqserver status --dir /etc/bq deploy --json | jq .lock.holder`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) > 1 {
				return cli.Usagef("at most one LOCK")
			}
			if len(args) == 1 {
				if err := wire.CheckLockName(args[0]); err != nil {
					return cli.Usagef("bad lock name %q: %v", args[0], err)
				}
			}
			return nil
		},
		RunE: func(_ *cobra.Command, args []string) error {
			if dir == "" {
				return cli.Usagef("--dir is required")
			}
			lock := ""
			if len(args) == 1 {
				lock = args[0]
			}
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			defer cancel()
			rep, err := operatorStatus(ctx, dir, lock)
			if err != nil {
				code := 1
				if errors.Is(err, bq.ErrUnavailable) {
					code = 5
				}
				return &cli.Exit{Code: code, Msg: err.Error()}
			}
			if asJSON {
				enc := json.NewEncoder(stdout)
				enc.SetIndent("", "  ")
				return enc.Encode(rep.json())
			}
			rep.print(stdout)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&dir, "dir", "", "cluster directory made by 'bqserver init' (required)")
	f.BoolVar(&asJSON, "json", false, "print JSON")
	f.DurationVar(&timeout, "timeout", 5*time.Second, "give up after this long")
	return cmd
}

// operatorReport is what bqserver status shows.
type operatorReport struct {
	status   *bq.Status
	settings string // the settings file in use, or "" for the defaults
	given    []any  // its keys and values
	expiry   []expiry
}

// expiry is one certificate's end of validity.
type expiry struct {
	What     string    `json:"what"`
	NotAfter time.Time `json:"not_after"`
}

func operatorStatus(ctx context.Context, dir, lock string) (*operatorReport, error) {
	cl, err := certs.InspectCluster(filepath.Join(dir, certs.ClusterFileName))
	if err != nil {
		return nil, err
	}
	rep := &operatorReport{}
	chain, members, _, err := cl.Newest(dir)
	if err != nil {
		return nil, err
	}
	// The CA in force, and each member's certificate, which ends with its
	// issuer when a rotation retired that CA and it ends first.
	if ca, since := cl.CAInForce(chain); since > 0 {
		rep.expiry = append(rep.expiry, expiry{fmt.Sprintf("cluster CA of epoch %d", since), ca.NotAfter})
	} else {
		rep.expiry = append(rep.expiry, expiry{"cluster CA", ca.NotAfter})
	}
	for _, s := range members.Servers {
		e := expiry{fmt.Sprintf("server %d certificate", s.ID), s.Cert.NotAfter}
		if issuer, inForce := cl.IssuerOf(chain, s.Cert); issuer != nil && !inForce && issuer.NotAfter.Before(e.NotAfter) {
			e = expiry{fmt.Sprintf("server %d certificate (its issuer, a retired cluster CA)", s.ID), issuer.NotAfter}
		}
		rep.expiry = append(rep.expiry, e)
	}
	epochs := chain.Since(0)
	cfg := bq.Config{Cluster: cl, Epochs: epochs, Observe: true}
	if cl.Closed() {
		ca, err := certs.LoadClientCA(dir)
		if err != nil {
			return nil, fmt.Errorf("cluster %q is closed and its client CA key is not here to enroll an observer: %w (on another machine, use bqclient status with an enrolled identity)", cl.Name, err)
		}
		key, err := crypto.GenerateKey(cl.Scheme, rand.Reader)
		if err != nil {
			return nil, err
		}
		adm, _, err := ca.Enroll(certs.EnrollOptions{Name: "operator", Key: key.Public, Validity: 10 * time.Minute}, time.Now(), rand.Reader)
		if err != nil {
			return nil, err
		}
		cfg.Identity, cfg.Admission = key, &adm
		ens, err := ca.Enrollments()
		if err != nil {
			return nil, err
		}
		for _, en := range ens {
			if en.Revoked == nil {
				rep.expiry = append(rep.expiry, expiry{fmt.Sprintf("client %q admission", en.Name), time.UnixMilli(en.Admission.NotAfter).UTC()})
			}
		}
	}
	path := filepath.Join(dir, server.SettingsFileName)
	if _, err := os.Stat(path); err == nil {
		s, err := server.LoadSettings(path)
		if err != nil {
			return nil, err
		}
		rep.settings, rep.given = path, s.Given()
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	sort.SliceStable(rep.expiry, func(i, j int) bool { return rep.expiry[i].NotAfter.Before(rep.expiry[j].NotAfter) })

	c, err := bq.Dial(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	if rep.status, err = c.Status(ctx, lock); err != nil {
		return nil, err
	}
	return rep, nil
}

func (r *operatorReport) print(w io.Writer) {
	cli.PrintStatus(w, r.status)
	if r.settings == "" {
		fmt.Fprintf(w, "settings: the defaults (no %s; bqserver settings lists them)\n", server.SettingsFileName)
	} else {
		fmt.Fprintf(w, "settings: %s\n", r.settings)
		for i := 0; i+1 < len(r.given); i += 2 {
			fmt.Fprintf(w, "  %s: %v\n", r.given[i], r.given[i+1])
		}
	}
	fmt.Fprintln(w, "certificates, soonest expiry first:")
	now := time.Now()
	for _, e := range r.expiry {
		left := e.NotAfter.Sub(now)
		note := fmt.Sprintf("in %d days", int(left.Hours()/24))
		switch {
		case left <= 0:
			note = "EXPIRED"
		case left < 30*24*time.Hour:
			note = strings.ToUpper(note)
		}
		fmt.Fprintf(w, "  %-34s %s  (%s)\n", e.What, e.NotAfter.UTC().Format(time.RFC3339), note)
	}
}

func (r *operatorReport) json() any {
	settings := map[string]any{}
	for i := 0; i+1 < len(r.given); i += 2 {
		settings[fmt.Sprint(r.given[i])] = r.given[i+1]
	}
	return struct {
		cli.JSONStatus
		SettingsFile string         `json:"settings_file,omitempty"`
		Settings     map[string]any `json:"settings"`
		Expiry       []expiry       `json:"certificates"`
	}{cli.StatusJSON(r.status), r.settings, settings, r.expiry}
}
