package bridge

// HookMsg lets the external tests build the HOOKS message exactly as the
// ingress does, so a benchmark of the publish measures the real message.
var HookMsg = hookMsg
