package postgres

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// Transient reports whether err is one the store gets over by itself once
// the server answers again, so that the consumer waits for it rather than
// exits: the connection refused, reset or timed out, the server shutting
// down or starting up, a standby not yet promoted (a failover), or too
// many connections. A permission, a missing table, a schema from the
// future is not: waiting would not change it.
func Transient(err error) bool {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch {
		case strings.HasPrefix(pe.Code, "08"): // connection exception
			return true
		case pe.Code == "57P01", pe.Code == "57P02", pe.Code == "57P03": // admin, crash shutdown; cannot connect now
			return true
		case pe.Code == "25006", pe.Code == "53300": // read-only (a standby); too many connections
			return true
		}
		return false
	}
	var ce *pgconn.ConnectError
	var ne net.Error
	switch {
	case errors.As(err, &ce), errors.As(err, &ne), pgconn.Timeout(err), pgconn.SafeToRetry(err):
		return true
	case errors.Is(err, pgconn.ErrConnClosed), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return true
	case errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		return true
	}
	return false
}

// Ping asks whether the server answers now: a query through the pool.
func (s *Store) Ping(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var one int
	return s.pool.QueryRow(ctx, `SELECT 1`).Scan(&one)
}
