package delivery

import (
	"context"
	"crypto/tls"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"
)

// ErrRefusedAddress is the error of a connection to an address the
// endpoint may not reach.
var ErrRefusedAddress = errors.New("address refused")

// ExcerptBytes bounds the part of an answer's body kept for the attempt
// record and the dead letter (and the column's CHECK in migration 0020).
const ExcerptBytes = 4 << 10

// metadata are the cloud instance-metadata addresses: refused even with
// AllowPrivate, since they hand out the host's credentials (AWS, GCP,
// Azure and others use 169.254.169.254; AWS's IPv6 one is fd00:ec2::254;
// Alibaba's 100.100.100.200).
var metadata = []netip.Addr{
	netip.MustParseAddr("169.254.169.254"),
	netip.MustParseAddr("fd00:ec2::254"),
	netip.MustParseAddr("100.100.100.200"),
}

// private are the ranges refused unless AllowPrivate. Loopback,
// RFC 1918, link-local, unique-local and multicast are checked through
// netip's predicates; these are the rest.
var private = []netip.Prefix{
	netip.MustParsePrefix("100.64.0.0/10"),  // carrier-grade NAT (RFC 6598)
	netip.MustParsePrefix("0.0.0.0/8"),      // "this network"
	netip.MustParsePrefix("192.0.0.0/24"),   // IETF protocol assignments
	netip.MustParsePrefix("198.18.0.0/15"),  // benchmarking
	netip.MustParsePrefix("240.0.0.0/4"),    // reserved, and broadcast
	netip.MustParsePrefix("64:ff9b::/96"),   // NAT64: may map to a private IPv4
	netip.MustParsePrefix("64:ff9b:1::/48"), // local-use NAT64
}

// refused says why ip may not be dialled ("" when it may).
func refused(ip netip.Addr, allowPrivate bool) string {
	ip = ip.Unmap() // ::ffff:127.0.0.1 is 127.0.0.1
	for _, m := range metadata {
		if ip == m {
			return "a cloud metadata address"
		}
	}
	switch {
	case ip.IsUnspecified():
		return "unspecified"
	case ip.IsMulticast():
		return "multicast"
	case allowPrivate:
		return ""
	case ip.IsLoopback():
		return "loopback"
	case ip.IsPrivate():
		return "private"
	case ip.IsLinkLocalUnicast():
		return "link-local"
	}
	for _, p := range private {
		if p.Contains(ip) {
			return "a reserved range (" + p.String() + ")"
		}
	}
	return ""
}

// NewClient returns the HTTP client of an endpoint: every connection's
// address is checked when it is made (after DNS resolution, by the
// dialer's Control hook, so a name that resolves to a refused address at
// any time is refused), redirects are not followed (the endpoint answered;
// a 3xx is a failed attempt), TLS is verified, and no proxy from the
// environment is used (a proxy would make the checked address the
// proxy's). The timeout is applied per request by the caller.
func NewClient(e Endpoint) *http.Client {
	dialer := &net.Dialer{
		Timeout:   e.Timeout,
		KeepAlive: 30 * time.Second,
		Control: func(network, address string, _ syscall.RawConn) error {
			ap, err := netip.ParseAddrPort(address)
			if err != nil {
				return fmt.Errorf("dial %s: %w", address, ErrRefusedAddress)
			}
			if why := refused(ap.Addr(), e.AllowPrivate); why != "" {
				return fmt.Errorf("dial %s (%s): %w", ap.Addr(), why, ErrRefusedAddress)
			}
			return nil
		},
	}
	tr := &http.Transport{
		Proxy:                 nil,
		DialContext:           dialer.DialContext,
		TLSClientConfig:       &tls.Config{MinVersion: tls.VersionTLS12},
		TLSHandshakeTimeout:   e.Timeout,
		ResponseHeaderTimeout: e.Timeout,
		MaxIdleConns:          e.Concurrency,
		MaxIdleConnsPerHost:   e.Concurrency,
		MaxConnsPerHost:       e.Concurrency,
		IdleConnTimeout:       90 * time.Second,
		ForceAttemptHTTP2:     true,
	}
	return &http.Client{
		Transport: tr,
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
	}
}

// readExcerpt reads at most ExcerptBytes of body and discards (a bounded
// part of) the rest so the connection can be reused.
func readExcerpt(body io.Reader) string {
	b, _ := io.ReadAll(io.LimitReader(body, ExcerptBytes))
	// Drain up to 64 KiB more for connection reuse; a longer answer costs
	// a new connection rather than an unbounded read.
	_, _ = io.Copy(io.Discard, io.LimitReader(body, 64<<10))
	return toValidUTF8(b)
}

func decodeBase64(s string) ([]byte, error) { return base64.StdEncoding.DecodeString(s) }

// errorClass is the short word recorded for a failed attempt: never the
// error text, which may carry a URL.
func errorClass(ctx context.Context, err error) string {
	var ne net.Error
	switch {
	case err == nil:
		return ""
	case errors.Is(err, ErrRefusedAddress):
		return classRefused
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return classTimeout
	case ctx.Err() != nil:
		return classCanceled
	case errors.As(err, new(*tls.CertificateVerificationError)):
		return classTLS
	default:
		return classConnect
	}
}

// toValidUTF8 keeps b as text for a text column.
func toValidUTF8(b []byte) string {
	s := string(b)
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "\uFFFD")
	}
	s = strings.ReplaceAll(s, "\x00", "")
	// A replacement character is longer than the byte it replaces: cut
	// back to the bound at a rune boundary.
	for len(s) > ExcerptBytes {
		_, n := utf8.DecodeLastRuneInString(s)
		s = s[:len(s)-n]
	}
	return s
}
