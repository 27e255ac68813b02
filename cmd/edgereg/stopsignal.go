package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"time"
)

// stopOnSignals listens for stopSignals. stop ends at the first, which
// begins a graceful stop; now ends at the second, which cuts the graceful
// stop short: an operator who presses Ctrl-C again does not want to wait
// out --shutdown-timeout. After the second the signals get their default
// action again, so a third ends the process whatever it is waiting for.
// release stops listening.
func stopOnSignals(parent context.Context) (stop, now context.Context, release func()) {
	stop, stopCancel := context.WithCancel(parent)
	now, nowCancel := context.WithCancel(context.Background())
	signals := make(chan os.Signal, 2)
	signal.Notify(signals, stopSignals...)
	done := make(chan struct{})
	go func() {
		defer signal.Stop(signals)
		for _, cancel := range []context.CancelFunc{stopCancel, nowCancel} {
			select {
			case <-signals:
				cancel()
			case <-done:
				return
			}
		}
	}()
	return stop, now, func() {
		close(done)
		stopCancel()
		nowCancel()
	}
}

// errSecondSignal is wrapped by the error of a graceful stop a second
// signal cut short.
var errSecondSignal = errors.New("stopped by a second signal before the requests in progress finished")

// stopGracefully runs stop, a graceful stop of the node or the gateway,
// with a context that ends after timeout or at the second signal (now, of
// stopOnSignals), which it logs; an error of a stop the second signal cut
// short wraps errSecondSignal.
func stopGracefully(now context.Context, timeout time.Duration, logger *slog.Logger, stop func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(now, timeout)
	defer cancel()
	unlog := context.AfterFunc(now, func() {
		logger.Warn("second signal: stopping now, without waiting for the requests in progress")
	})
	defer unlog() // before the caller's release ends now
	err := stop(ctx)
	if err != nil && now.Err() != nil {
		return fmt.Errorf("%w: %w", errSecondSignal, err)
	}
	return err
}
