// Package pgtemp creates and drops throw-away Postgres databases: one per
// test (hookbridgetest) and one per load-tool run. It imports no testing
// code, so the load tool can use it without carrying the test support.
package pgtemp

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// Database is a database created by [Create] and dropped by Drop.
type Database struct {
	Name  string
	URL   string
	admin string
}

// Create creates a database named prefix_<random> on the server of
// adminURL (a URL, or "" for the PG* environment variables), a copy of
// template when template is not empty, and returns its connection string.
func Create(ctx context.Context, adminURL, prefix, template string) (*Database, error) {
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return nil, fmt.Errorf("connect admin database: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	name := prefix + "_" + RandomHex(6)
	u, err := ConnString(adminURL, name)
	if err != nil {
		return nil, err
	}
	create := "CREATE DATABASE " + pgx.Identifier{name}.Sanitize()
	if template != "" {
		create += " TEMPLATE " + pgx.Identifier{template}.Sanitize()
	}
	if _, err := conn.Exec(ctx, create); err != nil {
		return nil, fmt.Errorf("create database %s: %w", name, err)
	}
	return &Database{Name: name, URL: u, admin: adminURL}, nil
}

// Drop drops the database, disconnecting whoever is still connected.
func (d *Database) Drop() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, d.admin)
	if err != nil {
		return fmt.Errorf("drop database %s: %w", d.Name, err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{d.Name}.Sanitize()+" WITH (FORCE)"); err != nil {
		return fmt.Errorf("drop database %s: %w", d.Name, err)
	}
	return nil
}

// ConnString is adminURL pointing at database name instead, keeping every
// other setting (host, user, TLS options): a URL gets a new path, a
// keyword/value string or "" (the PG* variables) a dbname.
func ConnString(adminURL, name string) (string, error) {
	if strings.HasPrefix(adminURL, "postgres://") || strings.HasPrefix(adminURL, "postgresql://") {
		u, err := url.Parse(adminURL)
		if err != nil {
			return "", fmt.Errorf("parse database url: %w", err)
		}
		u.Path = "/" + name
		u.RawPath = ""
		return u.String(), nil
	}
	return strings.TrimSpace(adminURL + " dbname='" + name + "'"), nil
}

// RandomHex is n random bytes in hex: database names here, run ids in the
// load tool.
func RandomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(fmt.Sprintf("crypto/rand: %v", err)) // the kernel's RNG failing is not recoverable
	}
	return hex.EncodeToString(b)
}
