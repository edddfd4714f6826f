package hookbridgetest_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/hookbridge/hookbridge/bridge/verify"
	"github.com/hookbridge/hookbridge/hookbridgetest"
)

// A GitHub delivery, signed as GitHub signs it; the event type and id
// travel in GitHub's own headers.
func ExampleNewSignedRequest() {
	req, err := hookbridgetest.NewSignedRequest(context.Background(), "http://127.0.0.1:8080/webhooks/gh", hookbridgetest.Delivery{
		Scheme: verify.SchemeGitHub,
		Secret: "It's a Secret to Everybody",
		Time:   time.Unix(1700000000, 0),
		Body:   []byte("Hello, World!"),
		Header: map[string][]string{"X-Github-Event": {"issues"}, "X-Github-Delivery": {"d-1"}},
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(req.Method, req.URL.Path)
	fmt.Println(req.Header.Get("X-Hub-Signature-256"))
	// Output:
	// POST /webhooks/gh
	// sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17
}
