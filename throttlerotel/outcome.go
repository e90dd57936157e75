package throttlerotel

import (
	"errors"

	"github.com/go-throttler/throttler"
)

// outcome is how a wait ended, as the attribute throttler.outcome names it.
type outcome uint8

const (
	admitted   outcome = iota // it returned nil
	deadline                  // its slot lay past its context's deadline
	maxWait                   // its slot lay past its maximum wait (WithMaxWait)
	queueFull                 // WithMaxQueue's bound was reached
	shed                      // a call of a higher priority shed it
	abandoned                 // its context ended while it waited
	redisError                // Redis failed (ErrRedis)
	invalid                   // bad input (ErrInvalidArgument)
	numOutcomes
)

var outcomeNames = [numOutcomes]string{
	admitted:   "admitted",
	deadline:   "deadline",
	maxWait:    "max_wait",
	queueFull:  "queue_full",
	shed:       "shed",
	abandoned:  "abandoned",
	redisError: "redis_error",
	invalid:    "invalid_argument",
}

func (o outcome) String() string { return outcomeNames[o] }

// outcomeOf says how a wait that returned err ended.
func outcomeOf(err error) outcome {
	if err == nil {
		return admitted
	}
	if why, ok := throttler.RejectionOf(err); ok {
		switch why {
		case throttler.RejectedDeadline:
			return deadline
		case throttler.RejectedMaxWait:
			return maxWait
		case throttler.RejectedQueueFull:
			return queueFull
		case throttler.RejectedShed:
			return shed
		}
	}
	switch {
	case errors.Is(err, throttler.ErrRedis):
		return redisError
	case errors.Is(err, throttler.ErrInvalidArgument):
		return invalid
	}
	return abandoned
}
