// Package builtin is the handler set the hookbridge binary ships with: the
// demo orders domain. It lives beside the binary, not in app, so that the
// library carries no example code; the load tool and the tests that run
// the demo configuration use it too.
package builtin

import (
	"github.com/hookbridge/hookbridge/app"
	"github.com/hookbridge/hookbridge/consumer"
	"github.com/hookbridge/hookbridge/examples/orders"
	"github.com/hookbridge/hookbridge/schema"
)

// Handlers are the demo orders handlers, registered as "orders" (the
// handler of the default consumer).
func Handlers() app.Handlers {
	return app.Handlers{
		"orders": {
			New:        func(name string) consumer.Handler { return orders.Handler(name) },
			EventTypes: []string{orders.Created, orders.Paid, orders.Cancelled},
			Migrations: []schema.Set{orders.Migrations()},
		},
	}
}
