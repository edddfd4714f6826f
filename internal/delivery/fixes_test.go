package delivery_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookbridge/hookbridge/internal/delivery"
)

// skewedPool is a pool on o's database whose now() runs ahead of this
// process's clock by ahead: the database of an instance whose own clock
// is behind. Only now() moves; the data is the same.
func skewedPool(t *testing.T, o *origin, ahead time.Duration) *pgxpool.Pool {
	t.Helper()
	ctx := context.Background()
	_, err := o.db.Pool.Exec(ctx, `CREATE SCHEMA IF NOT EXISTS skewed;
CREATE OR REPLACE FUNCTION skewed.now() RETURNS timestamptz LANGUAGE sql STABLE
AS $$ SELECT pg_catalog.now() + make_interval(secs => `+itoa(int(ahead.Seconds()))+`) $$`)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := pgxpool.ParseConfig(o.db.URL)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = "skewed, pg_catalog"
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	var skew float64
	if err := pool.QueryRow(ctx, "SELECT extract(epoch FROM now() - clock_timestamp())").Scan(&skew); err != nil || skew < ahead.Seconds()-60 {
		t.Fatalf("the skewed pool's now() is %.0fs ahead (%v), want %s", skew, err, ahead)
	}
	return pool
}

// A key's next attempt is timed by the database's clock, which wrote it:
// with the database's clock an hour ahead of the instance's, a key whose
// first event failed once is still retried on its schedule and its later
// event follows.
func TestOrderedRetryFollowsDatabaseClock(t *testing.T) {
	t.Parallel()
	o, rc := newOrigin(t), newReceiver(t)
	pool := skewedPool(t, o, time.Hour)
	rc.setFail(func(n int, ev event) int {
		if ev.N == 1 && n == 0 {
			return http.StatusServiceUnavailable
		}
		return 0
	})
	e := endpoint("partner", rc.url)
	e.Ordered = true
	o.instance(t, "", func(opts *delivery.Options) { opts.Pool = pool }, e)
	o.enqueue(t, event{"order.created", "a", 1}, event{"order.paid", "a", 2})
	eventually(t, "a1 and a2 stored", func() bool { return rc.stored(t) == 2 })
	var order []int
	for _, s := range rc.seen() {
		if s.status == "accepted" {
			order = append(order, s.ev.N)
		}
	}
	if len(order) != 2 || order[0] != 1 || order[1] != 2 {
		t.Fatalf("accepted %v, want [1 2]", order)
	}
}
