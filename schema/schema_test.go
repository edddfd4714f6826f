package schema_test

import (
	"context"
	"testing"
	"testing/fstest"

	"github.com/hookbridge/hookbridge/hookbridgetest"
	"github.com/hookbridge/hookbridge/schema"
)

func TestMigrateIsIdempotent(t *testing.T) {
	t.Parallel()
	db := hookbridgetest.EmptyPostgres(t)
	ctx := context.Background()
	migs, err := schema.Core().Load()
	if err != nil {
		t.Fatal(err)
	}
	n, err := schema.Migrate(ctx, db.Pool, schema.Core())
	if err != nil {
		t.Fatal(err)
	}
	if n != len(migs) {
		t.Fatalf("first run applied %d, want %d", n, len(migs))
	}
	n, err = schema.Migrate(ctx, db.Pool, schema.Core())
	if err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("second run applied %d, want 0", n)
	}
	if got := db.Count(t, "SELECT count(*) FROM hookbridge.schema_migrations"); got != len(migs) {
		t.Fatalf("schema_migrations rows = %d, want %d", got, len(migs))
	}
	for _, table := range []string{"hookbridge.inbox", "hookbridge.conflicts", "hookbridge.outbox"} {
		if got := db.Count(t, "SELECT count(*) FROM "+table); got != 0 {
			t.Fatalf("%s has %d rows", table, got)
		}
	}
}

// MigrateTx applies what Migrate would, visible inside the transaction
// only: rolled back, the database is as it was; a second set on top of an
// applied one applies its pending migrations only.
func TestMigrateTxLeavesNothingAfterRollback(t *testing.T) {
	t.Parallel()
	db := hookbridgetest.Postgres(t) // hookbridge's set applied
	ctx := context.Background()
	extra := schema.Set{Name: "extra", FS: fstest.MapFS{
		"0001_a.sql": {Data: []byte("CREATE SCHEMA extra; CREATE TABLE extra.a (x int)")},
		"0002_b.sql": {Data: []byte("ALTER TABLE extra.a ADD COLUMN y int")},
	}}
	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	n, err := schema.MigrateTx(ctx, tx, schema.Core(), extra)
	if err != nil || n != 2 {
		t.Fatalf("MigrateTx = %d, %v; want 2 (the core set is applied)", n, err)
	}
	if _, err := tx.Exec(ctx, "INSERT INTO extra.a (x, y) VALUES (1, 2)"); err != nil {
		t.Fatalf("inside the transaction: %v", err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if n := db.Count(t, "SELECT count(*) FROM pg_namespace WHERE nspname = 'extra'"); n != 0 {
		t.Fatalf("schema extra survived the rollback")
	}
	if n := db.Count(t, "SELECT count(*) FROM hookbridge.schema_migrations WHERE set_name = 'extra'"); n != 0 {
		t.Fatalf("%d bookkeeping rows survived the rollback", n)
	}
}
