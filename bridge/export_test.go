package bridge

import (
	"time"

	"github.com/nats-io/nats.go"
)

// HookMsg lets the external tests build the unkeyed HOOKS message exactly
// as the ingress does.
func HookMsg(source, id, typ, media, sumHex string, received time.Time, body []byte) *nats.Msg {
	return hookMsg(identity{id: id, typ: typ}, source, media, sumHex, received, body, 1)
}
