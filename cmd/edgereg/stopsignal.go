package main

import (
	"context"
	"os"
	"os/signal"
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
