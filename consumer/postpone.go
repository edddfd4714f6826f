package consumer

import (
	"errors"

	"github.com/jackc/pgx/v5/pgconn"
)

// PostponeSQLState is the SQLSTATE with which SQL says what [Postpone]
// says: this event needs a later event of its ordering key first. A
// consumer declared in SQL raises it through the function
// hookbridge.postpone(reason), for example
//
//	SELECT hookbridge.postpone('unknown order') WHERE NOT EXISTS (SELECT 1 FROM shop.orders WHERE id = $data.order_id)
//
// and a Go handler's own SQL may raise it too (RAISE EXCEPTION USING
// ERRCODE = 'HB001').
const PostponeSQLState = "HB001"

type postponedError struct{ err error }

func (e *postponedError) Error() string { return "postponed: " + e.err.Error() }
func (e *postponedError) Unwrap() error { return e.err }

// Postpone marks err as "this event needs a later event of its ordering
// key first": an order.paid that arrives before its order.created, a
// Stripe X.updated before X.created (Stripe does not promise an order).
// Its transaction rolls back as for any error. For a source with an
// ordering key, the consumer then applies the key's later events before
// this one and tries it again after each of them, at once, not after the
// backoff; it is still applied exactly once. Without later events it is
// tried again after the backoff. Postponing does not count toward
// max_deliver: an event may wait this way for the consumer's
// postpone_limit (default one hour) since it was first postponed, and is
// dead-lettered after that. For a source without a key, where no order is
// kept, a postponed event is retried after the backoff, on the same
// terms. Postpone(nil) is nil.
func Postpone(err error) error {
	if err == nil {
		return nil
	}
	return &postponedError{err: err}
}

// IsPostponed reports whether err was marked with [Postpone] or holds a
// Postgres error of SQLSTATE [PostponeSQLState]. An error marked
// [Permanent] is never postponed.
func IsPostponed(err error) bool {
	if err == nil || IsPermanent(err) {
		return false
	}
	var p *postponedError
	if errors.As(err, &p) {
		return true
	}
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == PostponeSQLState
}
