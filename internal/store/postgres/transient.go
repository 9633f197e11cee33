package postgres

import (
	"context"
	"crypto/x509"
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

// Misconfigured reports whether err, from Open, is one that only a person
// can fix, so that a service is not restarted for it: a URL that does not
// parse, a database that does not exist, a role or password the server
// refuses, a privilege the role lacks, a server certificate that is not
// trusted, no store where one must be (ErrNoStore), a schema from a newer
// release, max_connections too low for --prefetch. A server that does not
// answer, or answers that it is starting, is not (Transient).
func Misconfigured(err error) bool {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch pe.Code {
		case "3D000", // invalid_catalog_name: the database does not exist
			"28000", // invalid_authorization_specification: no such role, or pg_hba.conf refuses it
			"28P01", // invalid_password
			"42501", // insufficient_privilege
			"3F000": // invalid_schema_name (search_path)
			return true
		}
		return false
	}
	var pce *pgconn.ParseConfigError
	var newer NewerSchemaError
	var unknownCA x509.UnknownAuthorityError
	var badHost x509.HostnameError
	var badCert x509.CertificateInvalidError
	return errors.As(err, &pce) || errors.Is(err, ErrNoStore) || errors.As(err, &newer) || errors.Is(err, errTooFewConns) ||
		errors.As(err, &unknownCA) || errors.As(err, &badHost) || errors.As(err, &badCert)
}

// Ping asks whether the server answers now: a query through the pool.
func (s *Store) Ping(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var one int
	return s.pool.QueryRow(ctx, `SELECT 1`).Scan(&one)
}
