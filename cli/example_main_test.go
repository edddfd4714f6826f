package cli_test

import (
	"testing"

	"github.com/hookbridge/hookbridge/app"
	"github.com/hookbridge/hookbridge/cli"
	"github.com/hookbridge/hookbridge/consumer"
	"github.com/hookbridge/hookbridge/examples/orders"
	"github.com/hookbridge/hookbridge/hookbridgetest"
	"github.com/hookbridge/hookbridge/schema"
)

// A team's own binary: hookbridge's command line (serve, migrate,
// selftest, …) with the team's handlers, here the demo orders package
// standing in for yours. The configuration names a handler by its key.
func ExampleMain() {
	handlers := app.Handlers{
		"orders": {
			New:        func(consumerName string) consumer.Handler { return orders.Handler(consumerName) },
			EventTypes: []string{orders.Created, orders.Paid, orders.Cancelled},
			Migrations: []schema.Set{orders.Migrations()},
		},
	}
	// The binary's main is one line: os.Exit(cli.Main(os.Args[1:], handlers)).
	// Here the same command line migrates a test database: the handlers'
	// migrations are applied next to hookbridge's own, and only once.
	hookbridgetest.Example(func(t testing.TB) {
		db := hookbridgetest.Postgres(t)
		cli.Main([]string{"migrate", "--database-url", db.URL}, handlers)
		cli.Main([]string{"migrate", "--database-url", db.URL}, handlers)
	})
	// Output:
	// applied 1 migration(s)
	// applied 0 migration(s)
}
