package loadgen

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

// TempDatabase is a database created for one run and dropped by Drop.
type TempDatabase struct {
	Name  string
	URL   string
	admin string
}

// CreateDatabase creates an empty database named prefix_<random> on the
// server of adminURL (a URL, or "" for the PG* environment variables)
// and returns its connection string.
func CreateDatabase(ctx context.Context, adminURL, prefix string) (*TempDatabase, error) {
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return nil, fmt.Errorf("connect admin database: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	name := prefix + "_" + randomHex(6)
	u, err := databaseConnString(adminURL, name)
	if err != nil {
		return nil, err
	}
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return nil, fmt.Errorf("create database %s: %w", name, err)
	}
	return &TempDatabase{Name: name, URL: u, admin: adminURL}, nil
}

// Drop drops the database, disconnecting whoever is still connected.
func (d *TempDatabase) Drop() error {
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

// databaseConnString is adminURL pointing at database name instead,
// keeping every other setting (host, user, TLS options): a URL gets a new
// path, a keyword/value string or "" (the PG* variables) a dbname.
func databaseConnString(adminURL, name string) (string, error) {
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

func randomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(fmt.Sprintf("crypto/rand: %v", err))
	}
	return hex.EncodeToString(b)
}
