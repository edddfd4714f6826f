// Command hookbridge bridges verified webhooks through NATS JetStream into
// PostgreSQL with an exactly-once effect. See README.md.
package main

import (
	"os"

	"github.com/hookbridge/hookbridge/app"
)

func main() {
	os.Exit(app.Main(os.Args[1:], app.BuiltinHandlers()))
}
