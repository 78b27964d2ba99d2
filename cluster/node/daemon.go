package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/probing-mcp/probing-mcp/internal/safefile"
)

// ErrRunning: another daemon holds this node's lock.
var ErrRunning = errors.New("a node daemon already runs for this data dir")

// DaemonOptions shape a running daemon.
type DaemonOptions struct {
	Handler http.Handler
	// Listener is where it serves (the command binds it, checking the
	// token rule first).
	Listener net.Listener
	// LockPath is the per-node lock (one daemon per data dir).
	LockPath string
	// IdleExit: exit after the node has had no live agent this long
	// (0: never). Live is what Alive reports.
	IdleExit time.Duration
	Alive    func(context.Context) bool
	// Poll is how often Alive is asked (default 10 s).
	Poll   time.Duration
	Logger *slog.Logger
}

// Lock takes the per-node lock (safefile.Lock: a private directory, a
// file of this user's); the file stays locked while the process lives (a
// kill -9 releases it with the process). ErrRunning only when a process
// of this user or root holds it; another user's hold is an error.
func Lock(path string) (*os.File, error) {
	f, err := safefile.Lock(path)
	if errors.Is(err, safefile.ErrHeld) {
		return nil, fmt.Errorf("%w (%v)", ErrRunning, err)
	}
	if err != nil {
		return nil, fmt.Errorf("node %w", err)
	}
	return f, nil
}

// Run serves until ctx ends or the node has been idle for IdleExit.
func Run(ctx context.Context, opt DaemonOptions) error {
	if opt.Logger == nil {
		opt.Logger = slog.New(slog.DiscardHandler)
	}
	if opt.Poll <= 0 {
		opt.Poll = 10 * time.Second
	}
	srv := &http.Server{Handler: opt.Handler, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 5 * time.Minute}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(opt.Listener) }()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if opt.IdleExit > 0 && opt.Alive != nil {
		go func() {
			last := time.Now()
			t := time.NewTicker(opt.Poll)
			defer t.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-t.C:
				}
				if opt.Alive(ctx) {
					last = time.Now()
				} else if idle := time.Since(last); idle >= opt.IdleExit {
					opt.Logger.Info("no live agent on this node: the daemon exits", "idle", idle.Round(time.Second))
					cancel()
					return
				}
			}
		}()
	}
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer scancel()
	srv.Shutdown(sctx)
	return nil
}
