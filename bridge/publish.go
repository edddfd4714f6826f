package bridge

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cenkalti/backoff/v5"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/hookbridge/hookbridge/internal/stream"
)

// Publishing rides out the moments JetStream cannot answer: a stream
// leader election in a cluster, a server restart or reconnect, a stream
// that is still being created. Each attempt carries the same Nats-Msg-Id,
// so an attempt that was stored but whose ack was lost makes the next one
// a duplicate of it, never a second copy. Errors a retry cannot change (a
// full stream, a message too large, a subject bound to another stream)
// are answered at once. Everything stays within PublishTimeout.

// errNotConnected is an attempt skipped because the connection is down:
// a publish now would only wait in the reconnect buffer.
var errNotConnected = errors.New("not connected to NATS")

// publishBackoff is the wait between attempts: 50 ms doubling to 1 s,
// ±50% jitter so instances do not retry in step.
func publishBackoff() backoff.BackOff {
	return &backoff.ExponentialBackOff{
		InitialInterval:     50 * time.Millisecond,
		RandomizationFactor: 0.5,
		Multiplier:          2,
		MaxInterval:         time.Second,
	}
}

// attemptTimeout bounds one attempt, so that a request sent to a leader
// that just died (and is never answered) leaves time for another.
func (h *Handler) attemptTimeout() time.Duration {
	return max(h.opts.PublishTimeout/4, 100*time.Millisecond)
}

// publish publishes msg to streamName with de-duplication id msgID,
// retrying retryable failures until the PublishTimeout budget (or ctx's
// deadline, if sooner) is spent.
// It reports how many attempts were made: an ack marked duplicate after
// more than one may be the first attempt's own message.
func (h *Handler) publish(ctx context.Context, msg *nats.Msg, streamName, msgID string) (*jetstream.PubAck, int, error) {
	t := h.opts.Tracer
	if t == nil {
		return h.publishRetrying(ctx, msg, streamName, msgID)
	}
	if msg.Header == nil {
		msg.Header = nats.Header{}
	}
	start := time.Now()
	ctx = t.TracePublishStart(ctx, TracePublishStartData{
		Stream: streamName, Subject: msg.Subject,
		Source: msg.Header.Get(stream.HeaderSource), EventID: msg.Header.Get(stream.HeaderEventID),
		Header: msg.Header,
	})
	ack, attempts, err := h.publishRetrying(ctx, msg, streamName, msgID)
	end := TracePublishEndData{Stream: streamName, Result: PublishStored, Attempts: attempts, Err: err, Duration: time.Since(start)}
	switch {
	case err != nil:
		end.Result = PublishError
	case ack.Duplicate:
		end.Result, end.Seq = PublishDuplicate, ack.Sequence
	default:
		end.Seq = ack.Sequence
	}
	t.TracePublishEnd(ctx, end)
	return ack, attempts, err
}

// publishRetrying is publish without the tracer.
func (h *Handler) publishRetrying(ctx context.Context, msg *nats.Msg, streamName, msgID string) (*jetstream.PubAck, int, error) {
	deadline := time.Now().Add(h.opts.PublishTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d // the request's budget, part of which is spent
	}
	attempts := 0
	var last error
	try := func(ctx context.Context) (*jetstream.PubAck, error) {
		attempts++
		if !h.js.Conn().IsConnected() {
			last = errNotConnected
			return nil, last
		}
		end := time.Now().Add(h.attemptTimeout())
		if end.After(deadline) {
			end = deadline
		}
		actx, acancel := context.WithDeadline(ctx, end)
		defer acancel()
		ack, err := h.js.PublishMsg(actx, msg,
			jetstream.WithMsgID(msgID),
			jetstream.WithExpectStream(streamName),
			// This loop retries, with backoff and a budget; the client's
			// own fixed retry on no responders would only stretch an attempt.
			jetstream.WithRetryAttempts(0))
		if err == nil {
			h.noteStored(streamName)
			return ack, nil
		}
		last = err
		if refusal := storageRefusal(err); refusal != "" {
			h.noteRefused(streamName, refusal, storedSize(msg.Subject, msg.Header, msg.Data), err)
			return nil, backoff.Permanent(err)
		}
		if !retryable(err) {
			return nil, backoff.Permanent(err)
		}
		return nil, err
	}
	// The first attempt is almost always the only one: make it without
	// the retry machinery and its allocations.
	ack, err := try(ctx)
	if err == nil {
		return ack, attempts, nil
	}
	var permanent *backoff.PermanentError
	if !errors.As(err, &permanent) {
		bctx, cancel := context.WithDeadline(ctx, deadline)
		defer cancel()
		b := publishBackoff()
		if wait := b.NextBackOff(); time.Now().Add(wait).Before(deadline) {
			t := time.NewTimer(wait)
			select {
			case <-t.C:
			case <-bctx.Done():
			}
			t.Stop()
		}
		ack, err = backoff.Retry(bctx, func() (*jetstream.PubAck, error) { return try(bctx) },
			backoff.WithBackOff(b),
			backoff.WithMaxElapsedTime(time.Until(deadline)))
		if err == nil {
			return ack, attempts, nil
		}
	} else {
		err = permanent.Unwrap()
	}
	if last != nil && (errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)) && !errors.Is(last, err) {
		err = fmt.Errorf("%w (the budget ran out: %w)", last, err)
	}
	return nil, attempts, fmt.Errorf("after %d attempt(s): %w", attempts, err)
}

// retryable reports whether a failed publish may succeed if tried again
// soon: nobody answered (no stream leader at the moment, or the stream is
// not there yet), the attempt timed out, the connection is being
// re-established, or JetStream said it is temporarily unavailable.
func retryable(err error) bool {
	switch {
	case errors.Is(err, errNotConnected),
		errors.Is(err, jetstream.ErrNoStreamResponse),
		errors.Is(err, nats.ErrNoResponders),
		errors.Is(err, nats.ErrTimeout),
		errors.Is(err, context.DeadlineExceeded),
		errors.Is(err, nats.ErrConnectionReconnecting),
		errors.Is(err, nats.ErrDisconnected):
		return true
	}
	var api *jetstream.APIError
	if errors.As(err, &api) {
		switch api.ErrorCode {
		case 10008, // JetStream system temporarily unavailable
			10118, 10194: // stream is offline (restarting, catching up)
			return true
		}
		// Other "service unavailable" answers, such as a cluster without
		// quorum; storage refusals were sorted out before this.
		return api.Code == 503
	}
	return false
}

// refusalStreamFull is the refusal of a stream at its max_bytes or
// max_msgs limit.
const refusalStreamFull = stream.RefusalStreamFull

// storageRefusal is [stream.StorageRefusal]: such a refusal does not
// change within a request's budget, so it is answered at once, and
// PublishHealth reports it.
func storageRefusal(err error) string { return stream.StorageRefusal(err) }
