// Package deploy holds files for running hookbridge next to Prometheus
// and Grafana: grafana/hookbridge.json, a dashboard of the /metrics
// series, and prometheus/alerts.yml, alerting rules for consumer lag,
// dead letters, the outbox, ingress errors and relay failures.
//
// The package has no Go API. Its test parses every PromQL expression in
// both files and checks each names only metrics hookbridge exports.
package deploy
