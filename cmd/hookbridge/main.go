// Command hookbridge bridges verified webhooks through NATS JetStream into
// PostgreSQL with an exactly-once effect. See README.md.
package main

import (
	"os"

	"github.com/hookbridge/hookbridge/cli"
	"github.com/hookbridge/hookbridge/cmd/hookbridge/builtin"
)

func main() {
	os.Exit(cli.Main(os.Args[1:], builtin.Handlers()))
}
