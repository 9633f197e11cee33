// Package dlqcli is the dlq program's text and JSON output: list, show and
// history, each printing what the engine (internal/dlq) walked or the audit
// trail holds. It decides nothing about a dead letter; it prints the
// engine's model of it, escaped for a terminal.
package dlqcli
