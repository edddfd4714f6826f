package cli_test

import (
	"os"

	"github.com/hookbridge/hookbridge/app"
	"github.com/hookbridge/hookbridge/cli"
	"github.com/hookbridge/hookbridge/consumer"
	"github.com/hookbridge/hookbridge/examples/orders"
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
	os.Exit(cli.Main(os.Args[1:], handlers))
}
