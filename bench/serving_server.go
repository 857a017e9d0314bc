package bench

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/gosling-ai/gosling/engine"
	"github.com/gosling-ai/gosling/server"
)

// StartServer loads cfg's model and serves it on a free port of
// 127.0.0.1, so that one command can start a server and measure it. The
// requests still go through HTTP, as they would to 'gosling serve'. stop
// shuts the server down, aborting what still runs, and closes the engine.
func StartServer(cfg engine.Config, logger *slog.Logger) (baseURL string, stop func() error, err error) {
	if logger == nil {
		logger = slog.Default()
	}
	cfg.Logger = logger
	eng, err := engine.New(cfg)
	if err != nil {
		return "", nil, err
	}
	srv, err := server.New(eng, server.Options{Logger: logger})
	if err != nil {
		eng.Close()
		return "", nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		eng.Close()
		return "", nil, fmt.Errorf("listen on 127.0.0.1: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx, ln, time.Second) }()
	stop = func() error {
		cancel()
		err := <-served
		if cerr := eng.Close(); err == nil {
			err = cerr
		}
		return err
	}
	return "http://" + ln.Addr().String(), stop, nil
}
