package delivery

// SetAfterSend makes s call f after each attempt's answer and before it
// is recorded or acked; f returning true drops the message there, as a
// crash of the process would. Set it before Run.
func SetAfterSend(s *Sender, f func(eventID string, status int) bool) { s.hooks.afterSend = f }

// Refused exposes the address rule to the tests.
var Refused = refused
