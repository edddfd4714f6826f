package schema_test

import (
	"context"
	"testing"

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
