// Package delivery posts the events of the EVENTS stream to HTTP
// endpoints, signed by Standard Webhooks, retried on a schedule, recorded
// attempt by attempt in Postgres and dead-lettered per endpoint when the
// schedule is spent (docs/DELIVERY.md).
//
// Each endpoint has a [Sender] that reads EVENTS through a durable pull
// consumer of its own (delivery_<endpoint>), so a failing, slow or stopped
// endpoint holds only its own consumer. The HTTP client ([NewClient])
// refuses private and metadata addresses when it connects, not only when
// the URL is configured, so a name that later resolves elsewhere (DNS
// rebinding) cannot get round the check.
package delivery
