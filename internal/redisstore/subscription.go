package redisstore

import (
	"cmp"
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Subscription is a Pub/Sub subscription to one channel, for the places in
// flight (wakes, see WithInFlight) and for news (see news.go). Ready
// receives a value each time Redis confirms the subscription, at first and
// after go-redis reconnected it: messages published before may have been
// missed. Heard receives a value when messages that keep accepts came
// (Take returns them). Done is closed once the subscription ended: closed
// by Close, or failed (Closed then tells whether its client was closed).
//
// Only the subscription's own goroutine touches its *redis.PubSub once it
// runs, Close included: PubSub.Close waits for a reconnect under way, and
// neither the keeper nor a listener may block on that.
type Subscription struct {
	Ready, Heard chan struct{}
	Done         chan struct{}
	stop         atomic.Bool
	Closed       bool // read after Done is closed

	mu   sync.Mutex
	msgs []string
}

// subscriptionPoll is how long the goroutine waits for a message before it
// looks whether it should stop: the most Close waits.
const subscriptionPoll = 250 * time.Millisecond

// subscribe subscribes to channel; keep picks the messages kept for Take.
func (s *Store) subscribe(channel string, keep func(payload string) bool) *Subscription {
	w := &Subscription{Ready: make(chan struct{}, 1), Heard: make(chan struct{}, 1), Done: make(chan struct{})}
	ctx := context.Background()
	ps := s.rdb.Subscribe(ctx, channel)
	poll := cmp.Or(s.Poll, subscriptionPoll)
	go func() {
		defer close(w.Done)
		defer ps.Close()
		for !w.stop.Load() {
			m, err := ps.ReceiveTimeout(ctx, poll)
			var ne net.Error
			switch {
			case errors.As(err, &ne) && ne.Timeout():
				continue // a look at stop
			case err != nil:
				w.Closed = errors.Is(err, redis.ErrClosed)
				return
			}
			switch m := m.(type) {
			case *redis.Subscription:
				if m.Kind == "subscribe" {
					signal(w.Ready)
				}
			case *redis.Message:
				if keep(m.Payload) {
					w.mu.Lock()
					w.msgs = append(w.msgs, m.Payload)
					w.mu.Unlock()
					signal(w.Heard)
				}
			}
		}
	}()
	return w
}

// Take returns the messages kept since it was last called.
func (w *Subscription) Take() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	m := w.msgs
	w.msgs = nil
	return m
}

// Close ends the subscription and waits for its goroutine, at most about
// the poll (subscriptionPoll, or Store.Poll; or a reconnect's timeouts, when one is under way).
func (w *Subscription) Close() {
	w.stop.Store(true)
	<-w.Done
}

// signal sends on a channel of one value without blocking.
func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}
